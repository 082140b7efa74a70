"""The real ComfyUI with a node pack isolated by the real comfy-env, and comem's node installed (issue 38).

ComfyUI 783545f6's ``main.py`` runs as a server on the CPU with a simulated card
(``support.Machine``); its custom_nodes/ hold comem (linked, as the other server
tests do), ``ComfyUI-IsoDemo`` (a pack isolated by comfy-env 0.4.46 as pack
authors write one: ``register_nodes()``, ``nodes/comfy-env.toml``) and a plain pack
that loads a model in the host and reports the host's state.

comfy-env builds environments with pixi from conda channels, which these machines
cannot reach. Its own code runs unmodified on an environment that already exists:
the test lays one where comfy-env looks (``$COMFY_ENV_ROOT/envs/<name>_<abi>/.pixi/
envs/default``: a venv whose site-packages reach the tests' .venv through a .pth
file, with the interpreter's libpython in its ``lib/``, since comfy-env puts
``/usr/lib/x86_64-linux-gnu`` before everything else on the worker's library path),
and a launcher at the path comfy-env runs pixi from (``$HOME/.comfy-env/pixi/0.75.0/
pixi``) that does what ``pixi run --as-is`` does at run time for a laid environment:
exec that environment's Python. Test harness only: comem itself never lays or fakes
anything of comfy-env's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
import unittest
import urllib.request
from typing import Any, Dict, List, Optional, Sequence

import support
import test_comfy_server
from test_comfy_server import ServerCase

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures", "comfy_env")
PACK = "ComfyUI-IsoDemo"
ENV_NAME = "isodemo-nodes"  #: the session name comem gives the pack's worker (comfy-env's environment)
OFF_PACK = "ComfyUI-IsoOff"  #: a pack whose environment says COMEM_COMFY=off: its worker never joins
OFF_NAME = "isooff-nodes"
MIB = 1 << 20

PIXI_LAUNCHER = """#!/bin/sh
# What `pixi run --as-is --manifest-path M -e E python ARGS` does for a laid environment (comem's test only).
[ "$1" = run ] || { echo "pixi (test launcher): only 'run' is here: $*" >&2; exit 2; }
shift; manifest=; envname=default
while [ $# -gt 0 ]; do case "$1" in
  --as-is|--frozen|--locked|--no-install) shift;;
  --manifest-path) manifest=$2; shift 2;;
  -e|--environment) envname=$2; shift 2;;
  --) shift; break;; *) break;; esac; done
prefix="$(dirname "$manifest")/.pixi/envs/$envname"
export CONDA_PREFIX="$prefix" PATH="$prefix/bin:$PATH"
[ "$1" = python ] && { shift; exec "$prefix/bin/python" "$@"; }
exec "$@"
"""


def comfy_env_missing() -> Optional[str]:
    """Why the real comfy-env cannot be used here, or None."""
    try:
        from importlib import metadata
        version = metadata.version("comfy-env")
    except Exception:  # noqa: BLE001
        return "comfy-env is not installed in the tests' Python (scripts/requirements-dev.txt pins comfy-env==0.4.46)"
    if version != "0.4.46":
        return f"these checks are for comfy-env 0.4.46; the tests' Python has {version}"
    return None


def lay_environment(comfyui: str, pack_dir: str, root: str, home: str, extra_paths: Sequence[str] = (),
                    first_paths: Sequence[str] = ()) -> str:
    """Lays a ready environment for ``pack_dir`` where comfy-env 0.4.46 looks, and the pixi launcher.

    The environment's site-packages reach ``first_paths`` (what one ComfyUI era pins over this
    Python's packages, such as v0.39's comfy-aimdo), this Python's own, then ``extra_paths`` (folders
    of packages this Python finds through PYTHONPATH, which comfy-env does not pass to a worker)."""
    code = ("import sys; from pathlib import Path; "
            "from comfy_env.environment.cache import get_env_name, get_workspace_env_dir; "
            "p = Path(sys.argv[1]); print(get_workspace_env_dir(None, get_env_name(p, p / 'nodes' / 'comfy-env.toml')))")
    env = dict(os.environ, COMFY_ENV_ROOT=root, HOME=home)
    prefix = subprocess.run([sys.executable, "-c", code, pack_dir], env=env, capture_output=True, text=True,
                            check=True, timeout=120, cwd=comfyui).stdout.strip().splitlines()[-1]
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", prefix], check=True, timeout=120)
    purelib = sysconfig.get_paths()["purelib"]
    own = subprocess.run([os.path.join(prefix, "bin", "python"), "-c",
                          "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    with open(os.path.join(own, "comem-test-packages.pth"), "w") as f:
        # the tests' packages (torch, numpy, ComfyUI's needs), after the env's own
        f.write("".join(p + "\n" for p in [*first_paths, purelib, *extra_paths]))
    libdir, ldlib = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    if libdir and ldlib and os.path.exists(os.path.join(libdir, ldlib)):
        os.makedirs(os.path.join(prefix, "lib"), exist_ok=True)
        os.symlink(os.path.join(libdir, ldlib), os.path.join(prefix, "lib", ldlib))
    pixi = os.path.join(home, ".comfy-env", "pixi", "0.75.0", "pixi")
    os.makedirs(os.path.dirname(pixi), exist_ok=True)
    with open(pixi + ".new", "w") as f:
        f.write(PIXI_LAUNCHER)
    os.chmod(pixi + ".new", 0o755)
    os.replace(pixi + ".new", pixi)
    return prefix


class ComfyEnvCase(ServerCase):
    """ComfyUI's server with the isolated pack, its environment laid, and the host probe pack."""

    def setUp(self) -> None:
        support.need_comfyui(self)  # (also what tells CMake to run this suite once per ComfyUI snapshot)
        if support.comfyui_era() not in support.DYNAMIC_ERAS:
            self.skipTest("comfy-env 0.4.46 is checked with ComfyUI 783545f6 (v0.33), the ComfyUI its contract "
                          "targets, and v0.39; a125cd84 (2025) predates its worker shims")
        why = comfy_env_missing()
        if why:
            self.skipTest(why)
        super().setUp()
        nodes = os.path.join(self.base, "custom_nodes")
        shutil.copytree(os.path.join(FIXTURES, "host-probe"), os.path.join(nodes, "host-probe"))
        self.root = os.path.join(self.base, "comfy-env-root")
        self.home = os.path.join(self.base, "home")
        for pack in (PACK, OFF_PACK):
            shutil.copytree(os.path.join(FIXTURES, pack), os.path.join(nodes, pack))
            lay_environment(self.comfyui, os.path.join(nodes, pack), self.root, self.home,
                            first_paths=support.comfyui_pythonpath())
        self.machine.env.update({"COMFY_ENV_ROOT": self.root, "HOME": self.home,
                                 "COMFY_ENV_IDLE_REAP_SECONDS": "0"})

    # ---- reading the nodes' reports ----

    def report(self, entry: Dict[str, Any], node: str = "1") -> Dict[str, Any]:
        self.assertEqual(entry["status"]["status_str"], "success", entry["status"])
        return json.loads(entry["outputs"][node]["text"][0])

    def iso(self, class_type: str, **inputs: Any) -> Dict[str, Any]:
        return self.report(self.queue({"1": {"class_type": class_type, "inputs": inputs}}))

    def host(self, **inputs: Any) -> Dict[str, Any]:
        kind = "HostLoad" if inputs else "HostProbe"
        return self.report(self.queue({"1": {"class_type": kind, "inputs": inputs}}))

    def worker_row(self) -> Optional[Dict[str, Any]]:
        return self.machine.process(ENV_NAME)

    def entries(self, proc: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
        return [e for h in (proc or {}).get("holders", []) for e in h.get("entries", [])]

    def worker_resident(self) -> int:
        return sum(e["resident"] for e in self.entries(self.worker_row()))


class TestIsolatedPack(ComfyEnvCase):
    def test_workers_join_load_are_asked_and_respawn(self):
        self.start_server()
        lines = self.run_.stdout()
        self.assertIn("comem: comfy-env 0.4.46 bridged", lines, self.run_.logs())
        info = self.get("/object_info", timeout=60)
        self.assertIn("IsoLoad", info, "comfy-env did not register the isolated pack's nodes\n" + self.run_.logs())

        # 1. The worker joins at its first node, as a session named after its environment.
        first = self.iso("IsoProbe")
        joined = first["comem"]
        self.assertIsNotNone(joined, "comem did not run in comfy-env's worker\n" + self.run_.logs())
        self.assertTrue(joined["joined"])
        self.assertEqual(joined["name"], ENV_NAME)
        self.assertTrue(joined["boundaries"], "comfy-env's call boundaries were not hooked")
        self.assertNotEqual(first["pid"], self.run_.proc.pid)
        row = self.worker_row()
        self.assertIsNotNone(row, f"no session {ENV_NAME} in the ledger: {self.machine.status()}")
        self.assertEqual(row["pid"], first["pid"])
        self.assertEqual(row["role"], "worker")
        base_reserve = first["extra_reserved_vram"]

        # 2. A worker load: admitted by the coordinator, one entry in the worker's session, one row in the host.
        loaded = self.iso("IsoLoad", name="a", mib=1024, hold=0.0)
        self.assertEqual(loaded["loaded"]["a"], 1024 * MIB)
        entries = self.entries(self.worker_row())
        self.assertEqual([(e["name"], e["resident"]) for e in entries], [("Sequential", 1024 * MIB)])
        # The worker's reserve is still comfy-env's bootstrap. (On this device-wide card comfy-env's budget reply
        # would carry the same figure, so this cannot tell the reply apart: test_comfyenv_bridge checks the
        # reply itself.)
        self.assertEqual(loaded["extra_reserved_vram"], base_reserve)
        probe = self.host()
        standins = [r for r in probe["rows"] if r["class"] == "StandIn"]
        proxies = [r for r in probe["rows"] if r["class"] == "SubprocessModelPatcher"]
        self.assertEqual([r["loaded"] for r in standins], [1024 * MIB], probe)
        self.assertEqual(proxies, [], "a comfy-env proxy beside comem's stand-in")
        host_row = self.machine.process("comfyui")
        self.assertEqual(self.entries(host_row), [], "the host booked a worker model as its own")
        # comem is the one writer of the host's reserve: comfy-env's publication wrote nothing.
        self.assertIn(probe["comfy_env_published"], (0, None))
        workers = list(probe["bridge"].values())
        self.assertEqual([(w["name"], w["pid"], w["joined"]) for w in workers], [(ENV_NAME, first["pid"], True)])

        # 3. The host needs room (a 1.5 GiB model on a 4 GiB card, the worker holding 1 GiB): ComfyUI's own loop asks the worker, through its
        # stand-in and the ledger, for a sized part; the receipt is the worker's real unload.
        before = self.machine.status()["counters"]
        h = self.host(name="h", mib=1536)
        self.assertEqual(h["model_loaded"], 1536 * MIB, h)
        after = self.machine.status()["counters"]
        self.assertGreater(after["asks"], before["asks"])
        self.assertGreater(after["bytes_freed"], before["bytes_freed"])
        worker_entries = self.entries(self.worker_row())
        self.assertLess(sum(e["resident"] for e in worker_entries), 1024 * MIB)
        self.machine.check_ledger(self)

        # The other way: the worker's load does not fit beside the host's model; the coordinator asks the host,
        # which waits idle while the worker computes, and ComfyUI's own unload gives the room (comfy-env's budget
        # call evicts nothing: one admission path).
        before = self.machine.status()["counters"]
        again = self.iso("IsoLoad", name="a", mib=1024, hold=0.0)
        self.assertEqual(again["loaded"]["a"], 1024 * MIB, again)
        after = self.machine.status()["counters"]
        self.assertGreater(after["asks"], before["asks"])
        self.assertGreater(after["bytes_freed"], before["bytes_freed"])
        probe = self.host()
        own = [r["loaded"] for r in probe["rows"] if r["class"] == "ModelPatcher"]
        self.assertEqual(len(own), 1, probe)
        self.assertLess(own[0], 1536 * MIB, "the host gave nothing for the worker's load")
        self.machine.check_ledger(self)

        # The Free button (ComfyUI's /free; its OOM handler calls the same unload_all_models) reaches the worker
        # through its stand-in and the ledger.
        self.post_free()
        emptied = support.wait_for(lambda: sum(e["resident"] for e in self.entries(self.worker_row())) == 0, 60)
        self.assertTrue(emptied, f"the Free button did not reach the worker: {self.worker_row()}")

        # 4. Busy from comfy-env's call boundaries: while the worker's node runs, the ledger says so; an admission
        # whose room only the computing worker holds waits for the worker's boundary and is then answered from
        # the worker's receipt. (The node ends when the test creates its gate file: the order is the test's.)
        gate = os.path.join(self.base, "the-node-may-end")
        r = self.post("/prompt", {"prompt": {"1": {"class_type": "IsoLoad",
                                                   "inputs": {"name": "a", "mib": 1024, "hold": 0.0, "gate": gate}}},
                                  "client_id": "comem-test"})
        busy = support.wait_for(lambda: (self.worker_row() or {}).get("busy") and self.worker_resident() == 1024 * MIB,
                                60)
        self.assertTrue(busy, f"the worker was never busy with its model in: {self.worker_row()}")
        holders = [h["id"] for h in self.worker_row()["holders"] if h.get("entries")]
        import comem
        taker = comem.Client("taker", socket=self.machine.socket, require_coordinator=True)
        self.addCleanup(taker.close)
        with self.assertRaises(comem.Refused) as probe:  # what fits in the room the card has free now
            taker.admit(4096 * MIB, timeout=0.5)
        self.assertEqual(probe.exception.n_asked, 0, "the computing worker was asked")
        want = probe.exception.fits + 512 * MIB  # fits only with (a part of) the worker's 1 GiB
        out: Dict[str, Any] = {}

        def admit() -> None:
            try:
                out["grant"] = taker.admit(want, timeout=90)
            except Exception as e:  # noqa: BLE001 - whatever it is, the assertions below say so
                out["error"] = e

        t = threading.Thread(target=admit)
        t.start()
        support.wait_for(lambda: self.machine.status()["coordinator"]["requests_in_flight"] > 0 or not t.is_alive(), 30)
        time.sleep(0.2)
        self.assertTrue(t.is_alive(), f"answered while the worker computed: {out}")
        self.assertEqual(self.worker_resident(), 1024 * MIB, "a computing worker was asked")
        self.assertTrue(self.worker_row()["busy"])
        open(gate, "w").close()
        t.join(120)
        self.assertNotIn("error", out)
        g = out["grant"]
        self.assertEqual(g.asked, holders, "the admission asked someone other than the worker")
        self.assertGreater(g.freed, 0)
        self.assertLess(self.worker_resident(), 1024 * MIB)
        g.cancel()
        idle = support.wait_for(lambda: not (self.worker_row() or {}).get("busy", True), 60)
        self.assertTrue(idle, "the worker stayed busy after its node")
        self.wait_done(r["prompt_id"])
        self.machine.check_ledger(self)

        # 5. The status tools list the worker by its environment: comem status, comem watch, the status node.
        self.assertIn(ENV_NAME, self.machine.cli("status").stdout)
        self.assertIn(ENV_NAME, self.machine.cli("watch", "--plain", "--count", "1", "--status-every", "0.1").stdout)
        node = self.status_output(self.queue_status_node())
        self.assertIn(ENV_NAME, [p.get("name") for d in node.get("devices", []) for p in d.get("processes", [])],
                      node)

        # A pack whose environment says COMEM_COMFY=off: its worker runs as comfy-env alone would, the host says
        # so once, and nothing else changes.
        off = self.iso("OffProbe")
        self.assertEqual(off["switch"], "off")
        self.assertIsNone(off["comem"], "the worker joined although its environment says COMEM_COMFY=off")
        self.assertEqual(self.iso("OffProbe")["pid"], off["pid"])
        self.assertIsNone(self.machine.process(OFF_NAME))
        said = [line for line in self.run_.stdout().splitlines() + self.run_.stderr().splitlines()
                if f"comfy-env worker {OFF_NAME}" in line and "runs without comem" in line]
        self.assertEqual(len(said), 1, "the host says once that the worker runs without comem\n" + self.run_.logs())
        self.assertIn("COMEM_COMFY=off", said[0])
        probe = self.host()
        self.assertEqual(sorted((w["name"], w["pid"], w["joined"]) for w in probe["bridge"].values()),
                         [(ENV_NAME, first["pid"], True), (OFF_NAME, off["pid"], False)])

        # 6. A SIGKILLed worker leaves the ledger; comfy-env's next worker joins as a new session.
        pid = first["pid"]
        os.kill(pid, signal.SIGKILL)
        gone = support.wait_for(lambda: self.worker_row() is None, 30)
        self.assertTrue(gone, f"the killed worker stayed in the ledger: {self.worker_row()}")
        probe = self.host()
        self.assertEqual([r for r in probe["rows"] if r["class"] == "StandIn"], [], probe)
        second = self.iso("IsoProbe")
        self.assertNotEqual(second["pid"], pid)
        self.assertTrue(second["comem"]["joined"])
        self.assertNotEqual(second["comem"]["session"], joined["session"])
        row = self.worker_row()
        self.assertEqual(row["pid"], second["pid"])
        self.assertEqual(self.entries(row), [])
        self.machine.check_ledger(self)

    def post_free(self) -> None:
        """POST /free {"unload_models": true}, as the browser's Free button does (it answers an empty 200)."""
        req = urllib.request.Request(self.url("/free"), data=json.dumps({"unload_models": True}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with test_comfy_server._http.open(req, timeout=30) as r:
            self.assertEqual(r.status, 200)

    def wait_done(self, prompt_id: str) -> None:
        deadline = time.monotonic() + test_comfy_server.PROMPT_S
        while time.monotonic() < deadline:
            h = self.get(f"/history/{prompt_id}")
            if ((h.get(prompt_id) or {}).get("status") or {}).get("completed"):
                return
            time.sleep(0.1)
        self.fail(f"prompt {prompt_id} did not complete\n" + self.run_.logs())


if __name__ == "__main__":
    unittest.main()
