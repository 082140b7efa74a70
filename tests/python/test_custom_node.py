"""The adapter installed the way ComfyUI users install everything: a folder under custom_nodes/.

``python3 -m comem.comfy install DIR`` links custom_nodes/comem; then this test
does what ComfyUI's startup does with such a folder, in this process, against
the real ComfyUI's model manager: main.py's execute_prestartup_script (its
calls: spec_from_file_location + exec_module of prestartup_script.py; main.py
itself cannot be imported without starting ComfyUI), then ComfyUI's own
loader, ``nodes.load_custom_node``, on the folder. test_comfy_server.py runs
the whole of ComfyUI's main.py with the node installed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from typing import Optional

import support
from support import Machine


def _restore(key: str, value: Optional[str]) -> None:
    """Sets the environment variable ``key`` to ``value`` (None: unsets it)."""
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


class TestCustomNode(unittest.TestCase):
    def setUp(self) -> None:
        support.need_torch(self)
        support.need_comfyui(self)
        self.mm = support.import_comfy()
        self.machine = Machine("sim:4GiB").__enter__()
        self.addCleanup(self.machine.__exit__, None, None, None)
        self.comfy_home = tempfile.mkdtemp(prefix="comfyui-")
        self.addCleanup(shutil.rmtree, self.comfy_home, True)
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

        # nodes.py: ComfyUI's own loader, as init_external_custom_nodes calls it for every folder.
        import nodes
        self.addCleanup(nodes.NODE_CLASS_MAPPINGS.pop, "ComemStatus", None)
        self.addCleanup(nodes.NODE_DISPLAY_NAME_MAPPINGS.pop, "ComemStatus", None)
        self.addCleanup(nodes.LOADED_MODULE_DIRS.pop, "comem", None)
        self.addCleanup(sys.modules.pop, link.replace(".", "_x_"), None)
        self.assertTrue(asyncio.run(nodes.load_custom_node(link)))
        status_node = nodes.NODE_CLASS_MAPPINGS["ComemStatus"]
        self.assertEqual(status_node.RELATIVE_PYTHON_MODULE, "custom_nodes.comem")
        self.assertEqual(nodes.NODE_DISPLAY_NAME_MAPPINGS["ComemStatus"], "comem status")
        self.assertEqual(os.path.realpath(nodes.LOADED_MODULE_DIRS["comem"]), os.path.realpath(link))

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
        # The node shows the ledger as `comem status` prints it, on the node (ui) and as its first STRING output,
        # and the JSON (`comem status --json`) as its second, recorded beside the text.
        self.assertEqual(status_node.RETURN_TYPES, ("STRING", "STRING"))
        self.assertEqual(status_node.RETURN_NAMES, ("status", "json"))
        out = status_node().status()
        text, doc = out["result"]
        self.assertEqual(out["ui"], {"text": [text], "json": [doc]})
        self.assertTrue(text.startswith(f"coordinator pid {self.machine.comemd.pid} on {self.machine.socket} "),
                        text)
        self.assertRegex(text, rf"\n  {os.getpid()} +comfyui +host ")  # this process, in the table's words
        self.assertNotIn("{", text)
        cli = subprocess.run([support.program("comem"), "status"], env=self.machine.env, capture_output=True,
                             text=True, timeout=60)
        # the command's own first line (less the ledger check count, which grows between the two)
        first = [t.splitlines()[0].split(", ledger checks")[0] for t in (text, cli.stdout)]
        self.assertEqual(first[0], first[1])
        st = json.loads(doc)
        self.assertIn(host.client.session, [p["session"] for p in st["devices"][0]["processes"]])
        self.assertNotEqual(status_node.IS_CHANGED(), status_node.IS_CHANGED())  # never served from the cache

        # Loading the folder again (ComfyUI restarting its node scan) installs nothing twice.
        self.assertTrue(asyncio.run(nodes.load_custom_node(link)))
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
        saved_why = node._why_none
        self.addCleanup(setattr, node, "_why_none", saved_why)
        self.assertIsNone(node.install_from_comfyui())
        from comem.comfy import active
        self.assertIsNone(active())
        # The status node says comem is there and switched off, not that it is missing, then shows the ledger
        # of the others (this process is not in it).
        text, doc = node.ComemStatus().status()["result"]
        self.assertTrue(text.startswith("comem is installed, and switched off in this ComfyUI (COMEM_COMFY=off)"),
                        text)
        self.assertNotIn("not installed", text)
        self.assertIn(f"\n\ncoordinator pid {self.machine.comemd.pid} on {self.machine.socket} ", text)
        self.assertEqual(json.loads(doc)["coordinator"]["pid"], self.machine.comemd.pid)

    def test_autostart_off_starts_no_coordinator_and_joins_the_users(self):
        # COMEM_AUTOSTART=0 is "I run the coordinator myself" (the node's README): nothing is started, neither a
        # detached comemd nor one inside ComfyUI's process; ComfyUI decides locally until the user's answers.
        from comem.comfy import node
        path = os.path.join(self.machine.dir, "mine.sock")
        for k, v in (("COMEM_AUTOSTART", "0"), ("COMEM_SOCKET", path), ("COMEM_COMFY", None)):
            self.addCleanup(_restore, k, os.environ.get(k))
            _restore(k, v)
        saved = node._host
        node._host = None
        self.addCleanup(setattr, node, "_host", saved)
        host = node.install_from_comfyui()
        self.assertIsNotNone(host)
        self.addCleanup(host.close)
        self.assertFalse(host.client.connected)
        self.assertFalse(os.path.lexists(path), "a coordinator was started in ComfyUI's process")
        text, doc = node.ComemStatus().status()["result"]
        self.assertTrue(text.startswith("comem: this ComfyUI is not connected to a coordinator and decides locally: "
                                        "COMEM_AUTOSTART=0 starts none"), text)
        self.assertIn(f"comem status: no coordinator answers: nothing at {path}", text)
        self.assertEqual(doc, "null")

        # The user starts theirs: ComfyUI joins it, and the node shows its ledger.
        env = dict(self.machine.env, COMEM_SOCKET=path)
        theirs = subprocess.Popen([support.program("comemd"), "--socket", path, "--device", self.machine.spec],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(theirs.wait, 10)
        self.addCleanup(theirs.terminate)
        self.assertTrue(support.wait_for(lambda: host.client.connected, 15), "ComfyUI did not join the user's comemd")
        text = node.ComemStatus().status()["result"][0]
        self.assertTrue(text.startswith(f"coordinator pid {theirs.pid} on {path} "), text)

    def test_install_needs_no_torch(self):
        # the install links a folder: a Python where torch cannot be imported does it all the same
        home = tempfile.mkdtemp(prefix="comfyui-notorch-")
        self.addCleanup(shutil.rmtree, home, True)
        os.mkdir(os.path.join(home, "custom_nodes"))
        code = ("import sys, runpy; sys.modules['torch'] = None; "
                "sys.argv = ['comem.comfy', 'install', sys.argv[1]]; runpy.run_module('comem.comfy', run_name='__main__')")
        r = subprocess.run([sys.executable, "-c", code, home], env=self.machine.env, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.islink(os.path.join(home, "custom_nodes", "comem")))
        self.assertNotIn("torch", r.stderr)

    def test_install_refuses_a_folder_that_is_not_comfyui(self):
        r = self.cli("install", tempfile.mkdtemp())
        self.assertEqual(r.returncode, 2)
        self.assertIn("not a folder", r.stderr)


if __name__ == "__main__":
    unittest.main()
