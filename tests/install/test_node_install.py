"""comfyui-comem installed the way ComfyUI-Manager installs a node, into a copy of ComfyUI 783545f6, and run.

``test_metadata``: the node folder as the Comfy registry and ComfyUI read it.
ComfyUI's own parser (``comfy_config.config_parser``, the registry's types)
reads ``pyproject.toml``: its name, its version and its dependency follow
comem's version (CMakeLists.txt), as ``requirements.txt`` does; PublisherId,
DisplayName and an Icon URL naming the folder's own ``icon.svg`` (a square
SVG) are there; the thin files import nothing but the standard library and
``comem``.

``test_manager_install_and_server``: the user's path, from nothing.

1. The comem wheel, built from this tree offline (``pip wheel
   --no-build-isolation``), or the one ``COMEM_TEST_WHEEL`` names.
2. A fresh venv (``python -m venv``), a copy of ComfyUI, the node folder
   copied into its ``custom_nodes/``, as the Manager does before it runs pip.
   ComfyUI's heavy requirements (torch, ...) come from the dev venv through a
   ``.pth`` file, as ``scripts/venv.sh`` does for ``.venv-aimdo-new``.
3. ComfyUI started before the requirements are installed
   (``--quick-test-for-ci``): it starts and exits 0; one ERROR line says comem
   is not installed and names the pip command; nothing failed to import.
4. ``pip install --no-index --find-links WHEELS -r requirements.txt`` in that
   venv, with the ``.pth`` file set aside so that torch cannot be imported:
   comem is installed, and nothing else.
5. ComfyUI's real server on 127.0.0.1 (a free port, ``--cpu``), in a bare
   environment (the venv's ``bin/`` and the system's on ``PATH``, a private
   ``COMEM_RUNTIME_DIR``, ``COMEM_DEVICE=sim:8GiB``, ``COMEM_AUTOSTART`` unset:
   on; no ``PYTHONPATH``, ``COMEM_LIB`` or ``COMEM_BIN_DIR``): its log says the
   binding came from the venv; ``/object_info`` lists *comem status* from
   ``custom_nodes.comfyui-comem``; the venv's ``comem status --json`` finds a
   coordinator at the private socket, started by ``comfyui host (pid P)`` with
   P the server's pid, running the wheel's own ``comemd``, with the server in
   its ledger as the host.
6. SIGINT stops the server (exit 0); the coordinator it started is stopped by
   its pid (from the status). Anything left on the private socket is killed at
   the end, whatever failed.

Skipped, saying why, without the ComfyUI snapshot (``COMFYUI_DIR``), without
torch in the running Python, or in a sanitized build (the wheel does not depend
on it). About three minutes on 2 busy cores, most of it the wheel and ComfyUI's
two starts.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import unittest
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("COMEM_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
NODE = os.path.join(SOURCE, "comfyui-comem")
NODE_NAME = "comfyui-comem"  #: the folder's name in custom_nodes/ (the registry's node id)

WHEEL_S = 900.0   #: bound on building the wheel (it takes ~1 min on 2 idle cores)
START_S = 240.0   #: bound on ComfyUI's start (2 busy CI cores; ~15 s idle)
QUICK_S = 300.0   #: bound on the whole --quick-test-for-ci run
STOP_S = 60.0     #: bound on ComfyUI's exit after SIGINT, and on the coordinator's after SIGTERM
PIP_S = 300.0     #: bound on one pip or venv step

#: The line the node logs when comem cannot be imported (comfyui-comem/__init__.py).
MISSING = "comem: the comem package is not installed in this Python"

_http = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only: never a proxy


def project_version() -> str:
    """comem's version, from CMakeLists.txt's ``project(comem VERSION X.Y.Z``."""
    with open(os.path.join(SOURCE, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(comem VERSION ([0-9.]+)", f.read())
    assert m, "CMakeLists.txt names no comem version"
    return m.group(1)


def comfyui_dir() -> Optional[str]:
    """The ComfyUI 783545f6 snapshot (``COMFYUI_DIR``), or None."""
    d = os.environ.get("COMFYUI_DIR")
    return d if d and os.path.isfile(os.path.join(d, "main.py")) else None


def why_skip() -> Optional[str]:
    """Why the install test cannot run here, or None. (ctest's SKIP_REGULAR_EXPRESSION matches "node install: ".)"""
    if os.environ.get("COMEM_SANITIZE"):
        return f"node install: skipped in a sanitized build ({os.environ['COMEM_SANITIZE']}): the wheel does not depend on it"
    if comfyui_dir() is None:
        return ("node install: COMFYUI_DIR is unset or has no main.py: this test installs the node into a copy of "
                "ComfyUI 783545f6 (CMake finds it in ../shared/thirdparty/comfyui-783545f6)")
    try:
        import torch  # noqa: F401
    except ImportError:
        return f"node install: {sys.executable} has no torch: run it in the venv scripts/venv.sh makes"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def comemds(sock: str) -> List[int]:
    """The live comemd processes told to listen on ``sock`` (their command lines name it)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0")]
            if not alive(int(d)):
                continue
        except (OSError, IndexError):
            continue
        if argv and os.path.basename(argv[0]) == "comemd" and sock in argv:
            found.append(int(d))
    return sorted(found)


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, which nobody may reap in a container, has stopped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def wait_for(cond: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def copytree(src: str, dst: str) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


class TestMetadata(unittest.TestCase):
    def test_metadata(self):
        import tomllib
        version = project_version()
        with open(os.path.join(NODE, "pyproject.toml"), "rb") as f:
            meta = tomllib.load(f)
        project, comfy = meta["project"], meta["tool"]["comfy"]
        self.assertEqual(project["name"], NODE_NAME)
        self.assertEqual(project["version"], version, "the node's version is comem's (CMakeLists.txt)")
        self.assertEqual(project["dependencies"], [f"comem~={version}"])
        with open(os.path.join(NODE, "requirements.txt"), encoding="utf-8") as f:
            reqs = [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]
        self.assertEqual(reqs, [f"comem~={version}"], "requirements.txt names comem, this version's series")
        self.assertTrue(project["urls"]["Repository"].startswith("https://"))
        self.assertTrue(comfy["PublisherId"])
        self.assertTrue(comfy["DisplayName"])
        self.assertTrue(comfy["Icon"].startswith("https://") and comfy["Icon"].endswith(f"/{NODE_NAME}/icon.svg"))
        svg = ET.parse(os.path.join(NODE, "icon.svg")).getroot()
        self.assertEqual(svg.tag, "{http://www.w3.org/2000/svg}svg")
        self.assertEqual(svg.get("width"), svg.get("height"), "the icon is square")
        self.assertLessEqual(int(svg.get("width")), 400)

        # ComfyUI's own reading (the registry's types): what nodes.load_custom_node and comfy-cli see.
        d = comfyui_dir()
        if d is not None:
            sys.path.insert(0, d)
            self.addCleanup(sys.path.remove, d)
            try:
                from comfy_config import config_parser
            except ImportError as e:
                self.fail(f"ComfyUI's comfy_config does not import here ({e}): its requirements are missing")
            cfg = config_parser.extract_node_configuration(NODE)
            self.assertEqual((cfg.project.name, cfg.project.version), (NODE_NAME, version))
            self.assertEqual(cfg.project.dependencies, [f"comem~={version}"])
            self.assertEqual(cfg.project.supported_os, ["POSIX :: Linux"])
            self.assertEqual(cfg.project.supported_accelerators, ["GPU :: NVIDIA CUDA"])
            self.assertEqual(cfg.tool_comfy.publisher_id, comfy["PublisherId"])
            self.assertEqual(cfg.tool_comfy.display_name, comfy["DisplayName"])
            self.assertEqual(cfg.tool_comfy.icon, comfy["Icon"])

        # Thin files: the standard library and comem, nothing else (no torch at install or import time).
        for name in ("__init__.py", "prestartup_script.py"):
            with open(os.path.join(NODE, name), encoding="utf-8") as f:
                tree = ast.parse(f.read())
            mods = set()
            for n in ast.walk(tree):
                if isinstance(n, ast.Import):
                    mods |= {a.name.split(".")[0] for a in n.names}
                elif isinstance(n, ast.ImportFrom):
                    mods.add((n.module or "").split(".")[0])
            self.assertLessEqual(mods, {"__future__", "logging", "os", "sys", "typing", "comem"}, name)


class TestManagerInstall(unittest.TestCase):
    def setUp(self) -> None:
        why = why_skip()
        if why:
            self.skipTest(why)
        self.comfyui_src = comfyui_dir()
        self.tmp = tempfile.mkdtemp(prefix="comem-node-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.run_dir = os.path.join(self.tmp, "run")
        os.mkdir(self.run_dir, 0o700)
        self.sock = os.path.join(self.run_dir, "comem.sock")
        self.addCleanup(self.kill_coordinators)
        self.procs: List[subprocess.Popen] = []
        self.addCleanup(self.kill_procs)

    # ---- helpers ----

    def kill_coordinators(self) -> None:
        for pid in comemds(self.sock):
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not comemds(self.sock), 10)

    def kill_procs(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def step(self, argv: List[str], what: str, timeout: float = PIP_S, **kw: Any) -> subprocess.CompletedProcess:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
        self.assertEqual(r.returncode, 0, f"{what} failed ({' '.join(argv)}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
        return r

    def wheel_dir(self) -> str:
        """A folder holding comem's wheel: the one COMEM_TEST_WHEEL names, else one built from this tree."""
        wheels = os.path.join(self.tmp, "wheels")
        os.mkdir(wheels)
        given = os.environ.get("COMEM_TEST_WHEEL")
        if given:
            shutil.copy(given, wheels)
        else:
            env = dict(os.environ, PIP_NO_INDEX="1", PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
            env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
            self.step([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "-w", wheels,
                       SOURCE], "pip wheel", timeout=WHEEL_S, env=env, cwd=self.tmp)
        names = os.listdir(wheels)
        self.assertEqual(len(names), 1, names)
        self.assertTrue(names[0].startswith(f"comem-{project_version()}-"), names)
        return wheels

    def bare_env(self) -> Dict[str, str]:
        """What the ComfyUI child gets: the venv's bin/ and the system's, a private runtime dir and card."""
        home = os.path.join(self.tmp, "home")
        os.makedirs(home, exist_ok=True)
        return {"HOME": home, "LANG": "C.UTF-8", "PATH": f"{self.venv}/bin:/usr/bin:/bin",
                "COMEM_RUNTIME_DIR": self.run_dir, "COMEM_DEVICE": f"sim:8GiB:path={os.path.join(self.run_dir, 'card')}",
                "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}

    def start_comfyui(self, tag: str, *args: str) -> subprocess.Popen:
        out = open(os.path.join(self.tmp, f"comfyui-{tag}.out"), "w")
        err = open(os.path.join(self.tmp, f"comfyui-{tag}.err"), "w")
        self.addCleanup(out.close)
        self.addCleanup(err.close)
        p = subprocess.Popen([self.python, os.path.join(self.comfyui, "main.py"), "--cpu", "--disable-api-nodes",
                              "--log-stdout", *args], cwd=self.comfyui, env=self.bare_env(),
                             stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        self.procs.append(p)
        return p

    def output(self, tag: str) -> str:
        """All a ComfyUI run wrote: its stdout, then its stderr."""
        text = ""
        for stream in ("out", "err"):
            with open(os.path.join(self.tmp, f"comfyui-{tag}.{stream}"), encoding="utf-8", errors="replace") as f:
                text += f.read()
        return text

    def logs(self, tag: str) -> str:
        """The tails of a run's streams and of comemd.log, for a failure message."""
        text = ""
        for stream in ("out", "err"):
            with open(os.path.join(self.tmp, f"comfyui-{tag}.{stream}"), encoding="utf-8", errors="replace") as f:
                text += f"---- ComfyUI {tag} std{stream} (tail) ----\n{f.read()[-6000:]}\n"
        comemd_log = os.path.join(self.run_dir, "comemd.log")
        if os.path.exists(comemd_log):
            with open(comemd_log, encoding="utf-8", errors="replace") as f:
                text += f"---- comemd.log (tail) ----\n{f.read()[-3000:]}\n"
        return text

    def assert_node_loaded(self, logs: str, node: str) -> None:
        """ComfyUI ran the folder's prestartup script and imported it, neither failing, and no traceback passed
        through it. (The dev venv lacks some of ComfyUI's optional packages, kornia and spandrel: ComfyUI's
        own comfy_extras report IMPORT FAILED for those, which is not this node's doing.)"""
        timed = [line for line in logs.splitlines() if line.rstrip().endswith(node)]
        self.assertEqual(len(timed), 2, "ComfyUI times the node's prestartup and its import\n" + logs[-8000:])
        for line in timed:
            self.assertNotIn("FAILED", line)
        self.assertNotIn(f'File "{node}/', logs, "a traceback through the node")

    def get(self, path: str, timeout: float = 60) -> Any:
        with _http.open(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as r:
            return json.loads(r.read())

    def comem_status(self) -> Dict[str, Any]:
        """The venv's own ``comem status --json`` at the private socket."""
        r = self.step([os.path.join(self.venv, "bin", "comem"), "status", "--json"], "comem status",
                      env=self.bare_env(), timeout=30)
        return json.loads(r.stdout)

    # ---- the test ----

    def test_manager_install_and_server(self):
        t0 = time.monotonic()
        wheels = self.wheel_dir()
        t_wheel = time.monotonic() - t0

        # A fresh venv, a copy of ComfyUI, the node copied into its custom_nodes/ (the Manager's git clone).
        self.venv = os.path.join(self.tmp, "venv")
        self.step([sys.executable, "-m", "venv", self.venv], "python -m venv")
        self.python = os.path.join(self.venv, "bin", "python")
        site = self.step([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         "the venv's site-packages").stdout.strip()
        pth = os.path.join(site, "zz-comem-test-dev-venv.pth")
        with open(pth, "w") as f:  # after its own site-packages: torch, ComfyUI's requirements
            f.write(sysconfig.get_paths()["purelib"] + "\n")
        self.comfyui = os.path.join(self.tmp, "ComfyUI")
        copytree(self.comfyui_src, self.comfyui)
        os.makedirs(os.path.join(self.comfyui, "custom_nodes"), exist_ok=True)
        node = os.path.join(self.comfyui, "custom_nodes", NODE_NAME)
        copytree(NODE, node)

        # Before the requirements: ComfyUI starts without comem; one line says so and what to run.
        quick = self.start_comfyui("quick", "--quick-test-for-ci")
        try:
            rc = quick.wait(QUICK_S)
        except subprocess.TimeoutExpired:
            self.fail(f"main.py --quick-test-for-ci did not exit in {QUICK_S:.0f} s\n" + self.logs("quick"))
        self.assertEqual(rc, 0, self.logs("quick"))
        logs = self.output("quick")
        said = [line for line in logs.splitlines() if MISSING in line]
        self.assertEqual(len(said), 1, self.logs("quick"))
        self.assertIn(f"{self.python} -m pip install -r {os.path.join(node, 'requirements.txt')}", said[0])
        self.assertIn(f"until then from comem's source: `{self.python} -m pip install /path/to/comem`", said[0])
        self.assert_node_loaded(logs, node)
        self.assertEqual(comemds(self.sock), [], "a coordinator started without comem installed")

        # The Manager's step: pip install -r requirements.txt, in a Python where torch cannot be imported.
        os.rename(pth, pth + ".aside")
        self.step([self.python, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)"],
                  "torch is out of the venv's reach while pip runs")
        r = self.step([self.python, "-m", "pip", "install", "--no-index", "--find-links", wheels, "--disable-pip-version-check",
                       "-r", os.path.join(node, "requirements.txt")], "pip install -r requirements.txt",
                      env=dict(self.bare_env(), PIP_NO_CACHE_DIR="1"))
        installed = [line for line in r.stdout.splitlines() if line.startswith("Successfully installed")]
        self.assertEqual(installed, [f"Successfully installed comem-{project_version()}"], r.stdout)
        os.rename(pth + ".aside", pth)

        # ComfyUI's server: the node loads, and starts the coordinator.
        t_start = time.monotonic()
        self.port = free_port()
        server = self.start_comfyui("server", "--listen", "127.0.0.1", "--port", str(self.port),
                                    "--disable-auto-launch", "--dont-print-server")
        deadline = time.monotonic() + START_S
        while True:
            if server.poll() is not None:
                self.fail(f"ComfyUI exited (rc {server.returncode}) before it answered\n" + self.logs("server"))
            try:
                self.get("/system_stats", timeout=5)
                break
            except (urllib.error.URLError, ConnectionError, socket.timeout, json.JSONDecodeError):
                pass
            if time.monotonic() > deadline:
                self.fail(f"ComfyUI did not answer on 127.0.0.1:{self.port} in {START_S:.0f} s\n" + self.logs("server"))
            time.sleep(0.25)
        t_started = time.monotonic() - t_start

        info = self.get("/object_info", timeout=120)
        self.assertIn("ComemStatus", info, self.logs("server"))
        self.assertEqual(info["ComemStatus"]["python_module"], f"custom_nodes.{NODE_NAME}")
        self.assertEqual(info["ComemStatus"]["display_name"], "comem status")

        pkg = os.path.join(os.path.realpath(site), "comem")
        logs = self.output("server")
        self.assertIn(f"comem: binding loaded from {pkg} (library {pkg}/_native/lib/libcomem.so.0)", logs)
        self.assertIn("comem: host adapter installed", logs)
        self.assert_node_loaded(logs, node)
        self.assertNotIn(MISSING, logs)

        st = self.comem_status()
        co = st["coordinator"]
        self.assertEqual(co["socket"], self.sock)
        self.assertEqual(co["started_by"], f"comfyui host (pid {server.pid})", co)
        self.assertEqual(comemds(self.sock), [co["pid"]])
        self.assertEqual(os.path.realpath(f"/proc/{co['pid']}/exe"), os.path.join(pkg, "_native", "bin", "comemd"),
                         "the coordinator is the wheel's comemd")
        hosts = [p for p in st["devices"][0]["processes"] if p["name"] == "comfyui"]
        self.assertEqual([(p["role"], p["pid"]) for p in hosts], [("host", server.pid)], st["devices"][0]["processes"])

        # Stop everything: the server (Ctrl-C), then the coordinator it started, by the pid its status gave.
        server.send_signal(signal.SIGINT)
        try:
            self.assertEqual(server.wait(STOP_S), 0, self.logs("server"))
        except subprocess.TimeoutExpired:
            self.fail(f"ComfyUI did not exit in {STOP_S:.0f} s after SIGINT\n" + self.logs("server"))
        self.assertTrue(alive(co["pid"]), "the coordinator outlives the ComfyUI that started it")
        os.kill(co["pid"], signal.SIGTERM)
        self.assertTrue(wait_for(lambda: not alive(co["pid"]), STOP_S), "comemd did not exit after SIGTERM")
        sys.stderr.write(f"test_node_install: wheel {t_wheel:.0f} s, server answered in {t_started:.0f} s, "
                         f"all {time.monotonic() - t0:.0f} s\n")


if __name__ == "__main__":
    unittest.main()
