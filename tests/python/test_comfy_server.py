"""The real ComfyUI, run as users run it, with comem's custom node installed, under a real comemd.

Each test makes a base directory (``--base-directory``: custom_nodes/, models/,
user/, input/, output/, temp/ live there; the database too, through
``--database-url``), links comem into its custom_nodes/ with
``python -m comem.comfy install`` and starts ``COMFYUI_DIR/main.py`` on the CPU
with the environment a :class:`support.Machine` gives (its socket, its
simulated card, ``COMEM_LIB``). The child's ``PYTHONPATH`` does not name
comem's python/ folder: the custom node finds the binding beside itself, as it
does for a user. ``--log-stdout`` sends ComfyUI's log records below ERROR to
stdout and the rest to stderr, so "nothing from comem at ERROR level" reads as
"no line on stderr mentions comem" in both eras (a125cd84's log lines carry no
level name).

- ``test_quick_test_for_ci``: ``main.py --quick-test-for-ci`` (ComfyUI's own CI
  start: prestartup, node import, database, routes, then exit) exits 0; its log
  shows comem's prestartup, then the host adapter installed, connected to the
  coordinator.
- ``test_server``: a server on 127.0.0.1, a free port. While it runs the
  coordinator lists it as the host ``comfyui``; ``/object_info`` lists the
  *comem status* node; a prompt that runs it completes and its history holds
  the text `comem status` prints and the coordinator's status JSON, taken
  while the node ran (the host busy with that prompt); a second prompt runs it again (never cached). SIGINT stops the
  server and its session leaves the coordinator.

a125cd84's server needs the comfyui-workflow-templates its requirements.txt
pins (0.1.95, which ships a templates/ folder; the virtual environment has
783545f6's, which does not): ``COMEM_COMFYUI_PYTHONPATH`` names folders put
first on the ComfyUI child's ``PYTHONPATH`` (``pip install --target DIR
comfyui-workflow-templates==0.1.95``); without them that era skips, saying so.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import unittest
from typing import Any, Dict, List, Optional

import support
from support import Machine

START_S = 120.0  #: bound on ComfyUI's start (2 busy CI cores; it takes ~15 s idle)
QUICK_S = 300.0  #: bound on the whole --quick-test-for-ci run
PROMPT_S = 60.0  #: bound on one prompt of one output node
STOP_S = 60.0  #: bound on the server's exit after SIGINT

_http = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only: never a proxy


def _extra_path() -> List[str]:
    return [p for p in os.environ.get("COMEM_COMFYUI_PYTHONPATH", "").split(os.pathsep) if p]


def _templates_missing() -> Optional[str]:
    """Why a125cd84's server cannot start in this environment, or None where it can."""
    if support.comfyui_era() != "a125cd84":
        return None
    spec = None
    for folder in _extra_path() + sys.path:
        if not os.path.isdir(folder):
            continue
        spec = importlib.machinery.PathFinder.find_spec("comfyui_workflow_templates", [folder])
        if spec is not None:
            break
    if spec is not None and spec.origin and os.path.isdir(os.path.join(os.path.dirname(spec.origin), "templates")):
        return None
    where = "not installed" if spec is None else f"at {os.path.dirname(spec.origin or '?')} without templates/"
    return ("ComfyUI a125cd84's server serves comfyui_workflow_templates/templates/ (its requirements.txt pins "
            f"comfyui-workflow-templates==0.1.95); here that package is {where} (783545f6's newer one): point "
            "COMEM_COMFYUI_PYTHONPATH at a folder made by "
            "`pip install --target DIR comfyui-workflow-templates==0.1.95`")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _index(lines: List[str], needle: str) -> int:
    """The first line holding ``needle`` (-1 if none)."""
    return next((i for i, line in enumerate(lines) if needle in line), -1)


_C_BELOW_ERROR = re.compile(r"comem\[\d+\] (warn|info|debug): ")


def _comem_errors(stderr: str) -> List[str]:
    """Lines on ComfyUI's stderr (ERROR records and raw writes) that come from or name comem.

    The C library's own warn/info/debug lines go to stderr too; they are below ERROR."""
    return [line for line in stderr.splitlines() if "comem" in line.lower() and not _C_BELOW_ERROR.search(line)]


class ComfyRun:
    """One ``main.py`` child: its argv, environment and log files (stdout and stderr, in the base directory)."""

    def __init__(self, case: "ComfyServerCase", *args: str) -> None:
        self.case = case
        base = case.base
        tag = f"{len(case.runs)}"
        self.out_path = os.path.join(base, f"comfyui-{tag}.out")
        self.err_path = os.path.join(base, f"comfyui-{tag}.err")
        self.argv = [sys.executable, os.path.join(case.comfyui, "main.py"), "--cpu", "--base-directory", base,
                     "--database-url", "sqlite:///" + os.path.join(base, "user", f"comfyui-{tag}.db"),
                     "--disable-api-nodes", "--log-stdout", *args]
        env = dict(case.machine.env)
        env["PYTHONPATH"] = os.pathsep.join(_extra_path())  # not comem's python/: the node finds it itself
        if not env["PYTHONPATH"]:
            del env["PYTHONPATH"]
        env["PYTHONUNBUFFERED"] = "1"
        env.pop("COMEM_COMFY", None)
        self.env = env
        self.proc: Optional[subprocess.Popen] = None
        case.runs.append(self)

    def start(self) -> subprocess.Popen:
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(self.argv, cwd=self.case.base, env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=err)
        self.case.addCleanup(self.kill)
        return self.proc

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stdout(self) -> str:
        with open(self.out_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stderr(self) -> str:
        with open(self.err_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def logs(self) -> str:
        """The tails of both streams, for a failure message."""
        return (f"---- ComfyUI stdout (tail) ----\n{self.stdout()[-6000:]}\n"
                f"---- stderr (tail) ----\n{self.stderr()[-6000:]}")


class ComfyServerCase(unittest.TestCase):
    """A base directory with comem installed in its custom_nodes/, and a comemd on a simulated card."""

    comemd_extra: List[str] = []  #: more arguments for comemd (host RAM: ``--ram SIZE``)

    def setUp(self) -> None:
        self.comfyui = support.need_comfyui(self)
        support.need_torch(self)
        if not os.path.isfile(os.path.join(self.comfyui, "main.py")):
            self.skipTest(f"{self.comfyui} has no main.py: these tests run ComfyUI's own entry point")
        why = _templates_missing()
        if why:
            self.skipTest(why)
        self.machine = Machine("sim:4GiB", extra=self.comemd_extra).__enter__()
        self.addCleanup(self.machine.__exit__, None, None, None)
        self.base = tempfile.mkdtemp(prefix="comfyui-base-")
        self.addCleanup(shutil.rmtree, self.base, True)
        os.mkdir(os.path.join(self.base, "custom_nodes"))
        self.runs: List[ComfyRun] = []
        r = subprocess.run([sys.executable, "-m", "comem.comfy", "install", self.base], env=self.machine.env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.link = os.path.join(self.base, "custom_nodes", "comem")
        self.assertEqual(os.path.realpath(self.link),
                         os.path.join(os.path.realpath(support.PYTHON_DIR), "comem", "comfy"))

    def tearDown(self) -> None:
        if os.environ.get("COMEM_TEST_LOGS"):  # for a person debugging a failure
            for run in self.runs:
                sys.stderr.write(run.logs() + "\n")

    def assert_comem_started(self, run: ComfyRun) -> List[str]:
        """ComfyUI's log shows comem's prestartup, then the host adapter installed; nothing from comem at ERROR."""
        lines = run.stdout().splitlines()
        lib = os.environ.get("COMEM_LIB")
        binding = f"comem: binding loaded from {os.path.join(os.path.realpath(support.PYTHON_DIR), 'comem')}"
        if lib:
            binding += f" (library {lib})"
        prestartup = _index(lines, binding)
        self.assertGreaterEqual(prestartup, 0, f"no '{binding}' line\n" + run.logs())
        # ComfyUI's own summary of prestartup scripts names the folder, without "(PRESTARTUP FAILED)".
        timed = [line for line in lines if line.rstrip().endswith(self.link)]
        self.assertGreaterEqual(len(timed), 2, "ComfyUI timed comem's prestartup and import\n" + run.logs())
        for line in timed:
            self.assertNotIn("FAILED", line)
        installed = _index(lines, "comem: host adapter installed (simulated placement, coordinator connected)")
        self.assertGreater(installed, prestartup, "the host adapter installs after the prestartup\n" + run.logs())
        self.assertEqual(_comem_errors(run.stderr()), [], "comem logged at ERROR level\n" + run.logs())
        return lines


class TestQuickTestForCI(ComfyServerCase):
    def test_quick_test_for_ci(self):
        run = ComfyRun(self, "--quick-test-for-ci")
        proc = run.start()
        try:
            rc = proc.wait(QUICK_S)
        except subprocess.TimeoutExpired:
            self.fail(f"main.py --quick-test-for-ci did not exit in {QUICK_S:.0f} s\n" + run.logs())
        self.assertEqual(rc, 0, run.logs())
        self.assert_comem_started(run)
        # Its session ended with the process.
        self.assertTrue(support.wait_for(lambda: self.machine.process("comfyui") is None, 10),
                        f"the session outlived ComfyUI: {self.machine.process('comfyui')}")
        self.machine.check_ledger(self)


class ServerCase(ComfyServerCase):
    """A ComfyUI server on 127.0.0.1 and a free port: start it, post prompts, read their history."""

    server_extra: List[str] = []  #: more of ComfyUI's own arguments

    def start_server(self) -> subprocess.Popen:
        self.port = _free_port()
        self.run_ = ComfyRun(self, "--listen", "127.0.0.1", "--port", str(self.port), "--disable-auto-launch",
                             "--dont-print-server", *self.server_extra)
        proc = self.run_.start()
        self.wait_until_answering()
        self.assert_comem_started(self.run_)
        return proc

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str, timeout: float = 30) -> Any:
        with _http.open(self.url(path), timeout=timeout) as r:
            return json.loads(r.read())

    def post(self, path: str, body: Dict[str, Any], timeout: float = 30) -> Any:
        req = urllib.request.Request(self.url(path), data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        try:
            with _http.open(req, timeout=timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            self.fail(f"POST {path}: HTTP {e.code}: {e.read()[:2000]!r}\n" + self.run_.logs())

    def wait_until_answering(self) -> None:
        deadline = time.monotonic() + START_S
        while True:
            if self.run_.proc.poll() is not None:
                self.fail(f"ComfyUI exited (rc {self.run_.proc.returncode}) before it answered\n" + self.run_.logs())
            try:
                self.get("/system_stats", timeout=5)
                return
            except (urllib.error.URLError, ConnectionError, socket.timeout, json.JSONDecodeError):
                pass
            if time.monotonic() > deadline:
                self.fail(f"ComfyUI did not answer on 127.0.0.1:{self.port} in {START_S:.0f} s\n" + self.run_.logs())
            time.sleep(0.25)

    def queue_status_node(self) -> Dict[str, Any]:
        """Queues a prompt of one *comem status* node; returns its history entry once ComfyUI completed it."""
        return self.queue({"1": {"class_type": "ComemStatus", "inputs": {}}})

    def queue(self, prompt: Dict[str, Any]) -> Dict[str, Any]:
        """Queues a prompt; returns its history entry once ComfyUI completed it."""
        r = self.post("/prompt", {"prompt": prompt, "client_id": "comem-test"})
        self.assertEqual(r.get("node_errors"), {}, r)
        pid = r["prompt_id"]
        deadline = time.monotonic() + PROMPT_S
        while True:
            h = self.get(f"/history/{pid}")
            status = (h.get(pid) or {}).get("status") or {}
            if status.get("status_str") == "error":
                self.fail(f"the prompt failed: {json.dumps(status)[:3000]}\n" + self.run_.logs())
            if status.get("completed"):
                entry = h[pid]
                entry["prompt_id"] = pid
                return entry
            if self.run_.proc.poll() is not None:
                self.fail("ComfyUI exited while the prompt ran\n" + self.run_.logs())
            if time.monotonic() > deadline:
                self.fail(f"prompt {pid} did not complete in {PROMPT_S:.0f} s: {h}\n" + self.run_.logs())
            time.sleep(0.1)

    def status_output(self, entry: Dict[str, Any], node: str = "1") -> Dict[str, Any]:
        """The status JSON of the *comem status* node ``node`` as ComfyUI recorded it (outputs[node]["json"]),
        once its text (outputs[node]["text"]) is checked to be `comem status`'s, naming the same coordinator."""
        self.assertTrue(entry["status"]["completed"], entry["status"])
        self.assertEqual(entry["status"]["status_str"], "success")
        self.assertIn(node, entry["outputs"], f"the node's text is not in the prompt's history: {entry}")
        texts, docs = entry["outputs"][node]["text"], entry["outputs"][node]["json"]
        self.assertEqual((len(texts), len(docs)), (1, 1))
        st = json.loads(docs[0])
        self.assertTrue(texts[0].startswith(f"coordinator pid {st['coordinator']['pid']} on "), texts[0])
        return st

    @staticmethod
    def cached_nodes(entry: Dict[str, Any]) -> List[str]:
        """The nodes ComfyUI served from its cache in the prompt of this history entry."""
        return [n for m in entry["status"].get("messages", []) if m[0] == "execution_cached"
                for n in m[1].get("nodes", [])]


class TestServer(ServerCase):
    def test_server(self):
        proc = self.start_server()

        # While it runs, the coordinator lists the server as the host.
        host = self.machine.process("comfyui")
        self.assertIsNotNone(host, "the coordinator does not list the ComfyUI server\n" + self.run_.logs())
        self.assertEqual(host["role"], "host")
        self.assertEqual(host["pid"], proc.pid)

        # The node, as the browser's node library sees it.
        info = self.get("/object_info", timeout=60)
        self.assertIn("ComemStatus", info)
        node = info["ComemStatus"]
        self.assertEqual(node["category"], "utils/comem")
        self.assertEqual(node["display_name"], "comem status")
        self.assertEqual(node["output"], ["STRING", "STRING"])
        self.assertEqual(node["output_name"], ["status", "json"])
        self.assertTrue(node["output_node"])
        self.assertEqual(node["python_module"], "custom_nodes.comem")

        # A prompt runs it; its history holds the ledger taken while it ran.
        first = self.queue_status_node()
        st = self.status_output(first)
        me = [p for p in st["devices"][0]["processes"] if p["session"] == host["session"]]
        self.assertEqual(len(me), 1, st["devices"][0]["processes"])
        self.assertEqual((me[0]["name"], me[0]["role"], me[0]["pid"]), ("comfyui", "host", proc.pid))
        self.assertTrue(me[0]["busy"], "the node runs inside the adapter's node boundary")
        self.assertEqual(me[0]["prompt"], first["prompt_id"])
        self.assertEqual(st["coordinator"]["pid"], self.machine.comemd.pid)
        # Once the prompt is done, the host is idle again.
        self.assertTrue(support.wait_for(lambda: not self.machine.process("comfyui")["busy"], 10),
                        "the host stayed busy after its prompt")

        # Queued again, it runs again: the ledger is read fresh, never served from ComfyUI's cache.
        second = self.queue_status_node()
        self.assertNotIn("1", self.cached_nodes(second), second["status"])
        st2 = self.status_output(second)
        me2 = [p for p in st2["devices"][0]["processes"] if p["session"] == host["session"]]
        self.assertEqual(me2[0]["prompt"], second["prompt_id"])

        # SIGINT (Ctrl-C) stops the server; its session leaves the coordinator.
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            self.fail(f"ComfyUI did not exit in {STOP_S:.0f} s after SIGINT\n" + self.run_.logs())
        self.assertEqual(rc, 0, self.run_.logs())
        self.assertIn("Stopped server", self.run_.stdout())
        gone = support.wait_for(lambda: self.machine.process("comfyui") is None, 10)
        self.assertTrue(gone, f"the server's session outlived it: {self.machine.process('comfyui')}")
        self.assertEqual(_comem_errors(self.run_.stderr()), [], "comem logged at ERROR level\n" + self.run_.logs())
        self.machine.check_ledger(self)


MiB = 1 << 20
RAM_BUDGET = "4GiB"  #: comemd --ram: the budget host RAM is on in TestRamCache (the machine is never near its limit)
IMAGE_SIDE = 8192  #: EmptyImage's width and height: 8192 x 8192 x 3 float32, 768 MiB in ComfyUI's RAM cache
IMAGE_BYTES = IMAGE_SIDE * IMAGE_SIDE * 3 * 4
HEADROOM_GB = 1  #: ComfyUI's --cache-ram in TestRamCache: the RAM it keeps free for a node
HEADROOM = int(HEADROOM_GB * (1 << 30))


def _ram_device(status: Dict[str, Any]) -> Dict[str, Any]:
    dev = status["devices"][-1]
    assert dev["host_ram"] is not None, "the last device is not host RAM"
    return dev


def _holder(dev: Dict[str, Any], process: str, name: str) -> Optional[Dict[str, Any]]:
    p = next((p for p in dev["processes"] if p["name"] == process), None)
    return next((h for h in p["holders"] if h["name"] == name), None) if p else None


class TestRamCache(ServerCase):
    """ComfyUI 783545f6's RAM cache on the ledger's host RAM (issue 23 item 3), in the real server.

    comemd serves host RAM on a 4 GiB budget. A prompt makes an 8192 x 8192 image (768 MiB of CPU
    tensor, in ComfyUI's RAM cache once the node ran) and previews it as text; a *comem status* node
    in the same prompt sees the cache's holder busy. Once the prompt is done, the idle ComfyUI's
    cache is registered: one entry of 768 MiB named by its node. Another process (procs/ram_holder.py)
    then admits more host RAM than is free: the coordinator asks ComfyUI, ComfyUI's own ``ram_release``
    drops the image, its resident set falls (the receipt is not contradicted), the admission is granted
    with the image's bytes as what others freed, and the same prompt queued again runs the image node
    again (it is no longer in the cache) and registers it again.
    """

    comemd_extra = ["--ram", RAM_BUDGET]
    server_extra = ["--cache-ram", str(HEADROOM_GB)]  # ComfyUI's node headroom, whatever RAM the machine has

    def setUp(self) -> None:
        super().setUp()
        if support.comfyui_era() not in support.DYNAMIC_ERAS:
            self.skipTest("ComfyUI a125cd84 has no RAM cache (--cache-ram came later): nothing to register")

    def test_idle_cache_gives_its_ram_to_another_process(self):
        self.start_server()
        prompt = {"1": {"class_type": "EmptyImage",
                        "inputs": {"width": IMAGE_SIDE, "height": IMAGE_SIDE, "batch_size": 1, "color": 0}},
                  "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}},
                  "3": {"class_type": "ComemStatus", "inputs": {}}}
        first = self.queue(prompt)
        during = _holder(_ram_device(self.status_output(first, "3")), "comfyui", "ram-cache")
        self.assertIsNotNone(during, "ComfyUI's RAM cache is a holder on host RAM while the prompt runs")
        self.assertTrue(during["busy"], "the executor owns the cache while a prompt runs: not asked then")

        def registered() -> Optional[Dict[str, Any]]:
            h = _holder(_ram_device(self.machine.status()), "comfyui", "ram-cache")
            done = h is not None and not h["busy"] and any(e["size"] == IMAGE_BYTES for e in h["entries"])
            return h if done else None
        h = support.wait_for(registered, 20)
        self.assertIsNotNone(h, f"the image never showed in ComfyUI's RAM-cache holder\n{self.machine.status()}")
        image = [e for e in h["entries"] if e["size"] == IMAGE_BYTES]
        self.assertEqual([(e["name"], e["resident"]) for e in image], [("EmptyImage #1", IMAGE_BYTES)])
        self.assertEqual(h["resident"], sum(e["resident"] for e in h["entries"]))

        # Another process needs more host RAM than is free: only the idle ComfyUI's cache can make room.
        other = self.machine.child("ram_holder.py", "other")
        rss = _comfy_rss(self.run_.proc.pid)
        free = _ram_device(self.machine.status())["free"]
        want = (max(free, 0) + 256 * MiB) // MiB
        g = other.ask("admit", mib=want, timeout=30)
        self.assertTrue(g.get("granted"), f"{g}\n{self.machine.status()}\n" + self.run_.logs())
        self.assertEqual(g["n_asked"], 1, g)
        self.assertEqual(g["freed"], IMAGE_BYTES, "the receipt: the image ComfyUI's ram_release dropped")
        dev = _ram_device(self.machine.status())
        h = _holder(dev, "comfyui", "ram-cache")
        self.assertEqual([e for e in h["entries"] if e["size"] == IMAGE_BYTES], [], "the image left the ledger")
        self.assertEqual(h["receipts_contradicted"], 0, "ComfyUI's resident set fell by what it said")
        self.assertEqual(dev["host_ram"]["bytes_freed"], IMAGE_BYTES)
        self.assertLess(_comfy_rss(self.run_.proc.pid), rss - IMAGE_BYTES // 2, "the memory went back to the system")
        self.assertIn("comem: ComfyUI's RAM cache gave 768 MiB back to another process", self.run_.stdout())

        # The image is no longer cached: queued again, the node runs again, and its output is registered again.
        self.assertEqual(other.finish(), 0, other.errors())
        second = self.queue(prompt)
        self.assertNotIn("1", self.cached_nodes(second), second["status"])
        h = support.wait_for(registered, 20)
        self.assertIsNotNone(h, "the image was registered again")
        self.assertEqual(h["receipts_contradicted"], 0, "held up against the readings since the ask")
        self.assertEqual(_comem_errors(self.run_.stderr()), [], "comem logged at ERROR level\n" + self.run_.logs())
        self.machine.check_ledger(self)


    def test_a_node_has_its_headroom_made_before_it_runs(self):
        # Another process keeps weights in host RAM until less than ComfyUI's node headroom is free.
        self.start_server()
        other = self.machine.child("ram_holder.py", "other")
        free = _ram_device(self.machine.status())["free"]
        n = (free - HEADROOM // 3) // (256 * MiB)  # whole 256 MiB entries, leaving about a third of the headroom
        for i in range(n):
            other.ask("cache", holder_name="weights", entry=f"w{i}", mib=256)
        before = _ram_device(self.machine.status())
        self.assertLess(before["free"], HEADROOM, before)
        held = _holder(before, "other", "weights")["resident"]
        self.assertEqual(held, n * 256 * MiB)

        # A prompt: before its first node runs, the idle process is asked for what the headroom lacks.
        entry = self.queue({"1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1,
                                                                         "color": 0}},
                            "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}},
                            "3": {"class_type": "ComemStatus", "inputs": {}}})
        asks = other.ask("asks")["asks"]
        self.assertGreaterEqual(len(asks), 1, "nobody was asked\n" + self.run_.logs())
        first = asks[0]
        self.assertEqual((first["holder"], first["kind"]), ("weights", "bytes"))
        self.assertGreater(first["bytes"], 0)
        self.assertLessEqual(first["bytes"], HEADROOM, "asked at most the headroom, never everything")
        # The status node ran after its own room was made: it already sees the weights given back.
        during = _ram_device(self.status_output(entry, "3"))
        gave = held - _holder(during, "other", "weights")["resident"]
        self.assertGreaterEqual(gave, first["bytes"], during)
        self.assertTrue(_process(during, "comfyui")["busy"], "asked while ComfyUI's node was about to run")
        self.assertIn("MiB of host RAM given back by other processes", self.run_.stdout())
        after = _ram_device(self.machine.status())
        self.assertEqual(_holder(after, "other", "weights")["receipts_contradicted"], 0)
        self.assertEqual(after["host_ram"]["bytes_freed"], gave)
        self.assertEqual(_comem_errors(self.run_.stderr()), [], "comem logged at ERROR level\n" + self.run_.logs())
        self.assertEqual(other.finish(), 0, other.errors())
        self.machine.check_ledger(self)


LLAMA_SERVER = os.environ.get("COMEM_LLAMA_SERVER") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".cache", "llama", "build", "bin",
    "llama-server")


class TestLlmServerBeside(ServerCase):
    """An LLM server beside the real ComfyUI (issue 42): ComfyUI's own admission makes the idle server unload.

    comemd serves host RAM on a 4 GiB budget; ComfyUI keeps 1 GiB free for each node (``--cache-ram 1``),
    and puts that to the machine before the node runs (an admission of the headroom on host RAM). The
    LLM server holds its model in host RAM until less than the headroom is free; ``comem.apps`` speaks
    for it. A prompt then runs: before its first node, the coordinator asks the idle server, which
    unloads its model (its process exits); the receipt is the RSS measured to leave; the prompt
    completes. The server is the real llama.cpp server where scripts/llama-server.sh built it, and an
    Ollama-shaped one (procs/fake_llm.py: Ollama's documented calls, its model in a child process)
    otherwise. It runs against one ComfyUI (783545f6): what it exercises does not change between eras.
    """

    comemd_extra = ["--ram", RAM_BUDGET]
    server_extra = ["--cache-ram", str(HEADROOM_GB)]

    def setUp(self) -> None:
        super().setUp()
        if support.comfyui_era() != "783545f6":
            self.skipTest("the LLM server beside ComfyUI runs against ComfyUI 783545f6 only (era-independent)")

    def _llama(self, mib: int) -> Any:
        import importlib.util
        if not os.access(LLAMA_SERVER, os.X_OK) or importlib.util.find_spec("gguf") is None:
            return None
        d = tempfile.mkdtemp(prefix="comem-llama-")
        self.addCleanup(shutil.rmtree, d, True)
        os.makedirs(os.path.join(d, "models"))
        subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "procs",
                                                     "make_tiny_gguf.py"), os.path.join(d, "models", "tiny.gguf"),
                        "--size-mib", str(mib)], check=True, capture_output=True, timeout=600)
        port = _free_port()
        log = open(os.path.join(d, "llama.log"), "w")
        self.addCleanup(log.close)
        proc = subprocess.Popen([LLAMA_SERVER, "--models-dir", os.path.join(d, "models"), "--host", "127.0.0.1",
                                 "--port", str(port), "-t", "1", "--models-max", "1"], stdout=log,
                                stderr=subprocess.STDOUT, env=dict(os.environ, LLAMA_CACHE=d))
        self.addCleanup(lambda: (proc.terminate(), proc.wait(30)))
        return proc, f"http://127.0.0.1:{port}", "llama-server", "tiny"

    def _fake(self, mib: int) -> Any:
        proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "procs",
                                                              "fake_llm.py"), "--kind", "ollama", "--mib", str(mib)],
                                stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: (proc.terminate(), proc.wait(30), proc.stdout.close()))
        hello = json.loads(proc.stdout.readline())
        return proc, f"http://127.0.0.1:{hello['port']}", "ollama", "tiny:latest"

    def test_a_node_s_headroom_unloads_the_idle_llm_server(self):
        from comem import apps
        self.start_server()
        free = _ram_device(self.machine.status())["free"]
        mib = (free - HEADROOM // 3) // MiB  # leaves about a third of the headroom free once it is loaded
        server = self._llama(mib) or self._fake(mib)
        proc, url, recipe, model = server
        what = "the real llama-server" if recipe == "llama-server" else "an Ollama-shaped server"
        ep = apps.Endpoint("llm", url, timeout=120)
        self.assertTrue(support.wait_for(lambda: _answers(ep), 120), f"{what} did not answer")
        if recipe == "llama-server":
            ep.call("POST", "/models/load", {"model": model})
            state = support.wait_for(lambda: [m["status"]["value"] for m in ep.call("GET", "/models")["data"]
                                              if m["status"]["value"] not in ("unloaded", "loading")] or None, 300)
            self.assertEqual(state, ["loaded"], f"{what} did not load its {mib} MiB model")
        cfg = apps.AppConfig("llm", recipe, url, "ram", None, "first", "never", 1, None)
        runner = apps.Runner([cfg], socket=self.machine.socket, interval=0.1)
        t = threading.Thread(target=runner.run, daemon=True)
        t.start()
        self.addCleanup(t.join, 30)
        self.addCleanup(runner.stop)
        holder = runner.holders[0]

        def loaded() -> Optional[Dict[str, Any]]:
            dev = _ram_device(self.machine.status())
            hs = [h for p in dev["processes"] for h in p["holders"] if h.get("app_pid")]
            return hs[0] if hs and hs[0]["resident"] >= mib * MiB else None
        h = support.wait_for(loaded, 120)
        self.assertIsNotNone(h, f"{what}'s model never showed on the ledger\n{self.machine.status()}")
        self.assertLess(_ram_device(self.machine.status())["free"], HEADROOM)

        # A prompt: before its first node runs, ComfyUI's headroom admission asks the idle LLM server.
        entry = self.queue({"1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1,
                                                                         "color": 0}},
                            "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}}})
        self.assertEqual(entry["status"]["status_str"], "success")
        unloads = [e for e in holder.events if e.what == "unload"]
        self.assertEqual(len(unloads), 1, f"{what} was not asked\n" + self.run_.logs())
        self.assertEqual(unloads[0].model, model)
        self.assertGreaterEqual(unloads[0].nbytes, mib * MiB, "its model's process left with its RSS")
        self.assertIn("MiB of host RAM given back by other processes", self.run_.stdout())
        dev = _ram_device(self.machine.status())
        self.assertLessEqual(dev["host_ram"]["bytes_freed"], unloads[0].nbytes, "counted at most what was measured")
        self.assertGreaterEqual(dev["host_ram"]["bytes_freed"], unloads[0].nbytes - MiB)
        self.assertIsNone(proc.poll(), f"{what} lives (it unloaded; nothing was killed)")
        self.assertIsNone(self.run_.proc.poll(), "ComfyUI lives")
        self.assertEqual(_comem_errors(self.run_.stderr()), [], "comem logged at ERROR level\n" + self.run_.logs())
        print(f"\n{what}: unloaded {unloads[0].nbytes / MiB:.0f} MiB in {unloads[0].seconds:.3f} s for ComfyUI's node",
              file=sys.stderr)
        self.machine.check_ledger(self)


def _answers(ep: Any) -> bool:
    from comem import apps
    try:
        for path in ("/health", "/api/ps"):
            try:
                ep.call("GET", path, timeout=2)
                return True
            except apps.AppError as e:
                if "HTTP 404" not in str(e):
                    return False
    except Exception:
        return False
    return False


def _process(dev: Dict[str, Any], name: str) -> Dict[str, Any]:
    """The process of that name on a device of a status snapshot."""
    for p in dev["processes"]:
        if p["name"] == name:
            return p
    raise AssertionError(f"no process {name!r} in {[p['name'] for p in dev['processes']]}")


def _comfy_rss(pid: int) -> int:
    """A process's resident set (VmRSS), bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


if __name__ == "__main__":
    unittest.main()
