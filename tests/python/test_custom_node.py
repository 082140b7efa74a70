"""The adapter installed the way ComfyUI users install everything: a folder under custom_nodes/.

``python3 -m comem.comfy install DIR`` links custom_nodes/comem; then this test
does what ComfyUI's startup does with such a folder, with the same calls
(main.py's execute_prestartup_script: spec_from_file_location + exec_module of
prestartup_script.py; nodes.py's load_custom_node: a module named after the
folder's path, registered in sys.modules, from its __init__.py), against the
real ComfyUI's model manager. ComfyUI's nodes.py itself needs packages Debian
does not ship (transformers, ...), so its loader is reproduced rather than run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

import support
from support import Machine


class TestCustomNode(unittest.TestCase):
    def setUp(self) -> None:
        support.need_torch(self)
        support.need_comfyui(self)
        self.mm = support.import_comfy()
        self.machine = Machine("sim:4GiB").__enter__()
        self.addCleanup(self.machine.__exit__, None, None, None)
        self.comfy_home = tempfile.mkdtemp(prefix="comfyui-")
        os.mkdir(os.path.join(self.comfy_home, "custom_nodes"))

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "comem.comfy", *args], env=self.machine.env,
                              capture_output=True, text=True)

    def test_install_prestartup_load_and_uninstall(self):
        r = self.cli("install", self.comfy_home)
        self.assertEqual(r.returncode, 0, r.stderr)
        link = os.path.join(self.comfy_home, "custom_nodes", "comem")
        self.assertTrue(os.path.islink(link))
        self.assertEqual(os.path.realpath(link), os.path.realpath(os.path.join(support.PYTHON_DIR, "comem", "comfy")))
        self.assertEqual(self.cli("install", self.comfy_home).returncode, 0)  # again: nothing changes

        # main.py: every custom node's prestartup_script.py, before the manager's state is touched.
        script = os.path.join(link, "prestartup_script.py")
        spec = importlib.util.spec_from_file_location(os.path.splitext(script)[0], script)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        import comem
        self.assertTrue(os.path.exists(comem.library_path))

        # nodes.py: load_custom_node(module_path)
        sys_name = link.replace(".", "_x_")
        spec = importlib.util.spec_from_file_location(sys_name, os.path.join(link, "__init__.py"))
        node = importlib.util.module_from_spec(spec)
        sys.modules[sys_name] = node
        spec.loader.exec_module(node)
        self.addCleanup(sys.modules.pop, sys_name, None)
        self.assertIn("ComemStatus", node.NODE_CLASS_MAPPINGS)

        from comem.comfy import Host, active
        host = active()
        self.assertIsInstance(host, Host)
        self.addCleanup(host.close)
        self.assertTrue(host.installed)
        self.assertTrue(host.client.connected)
        self.assertIsNot(self.mm.free_memory, host.models.original("free_memory"))  # ComfyUI now goes through it
        me = self.machine.process("comfyui")
        self.assertIsNotNone(me)
        self.assertEqual(me["role"], "host")
        self.assertEqual(me["pid"], os.getpid())
        # The node shows the ledger as `comem status --json` does.
        (text,) = node.NODE_CLASS_MAPPINGS["ComemStatus"]().status()
        st = json.loads(text)
        self.assertIn(host.client.session, [p["session"] for p in st["devices"][0]["processes"]])

        # Loading the folder again (ComfyUI restarting its node scan) installs nothing twice.
        again = importlib.util.module_from_spec(importlib.util.spec_from_file_location(sys_name + "_2",
                                                os.path.join(link, "__init__.py")))
        again.__spec__.loader.exec_module(again)
        self.assertIs(active(), host)

        r = self.cli("uninstall", self.comfy_home)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.lexists(link))

    def test_switched_off(self):
        os.environ["COMEM_COMFY"] = "off"
        self.addCleanup(os.environ.pop, "COMEM_COMFY", None)
        from comem.comfy import node
        saved = node._host
        node._host = None
        self.addCleanup(setattr, node, "_host", saved)
        self.assertIsNone(node.install_from_comfyui())
        from comem.comfy import active
        self.assertIsNone(active())

    def test_install_refuses_a_folder_that_is_not_comfyui(self):
        r = self.cli("install", tempfile.mkdtemp())
        self.assertEqual(r.returncode, 2)
        self.assertIn("not a folder", r.stderr)


if __name__ == "__main__":
    unittest.main()
