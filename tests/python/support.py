"""Real components for the Python suites: a real comemd on a simulated card, real child processes.

``Machine`` makes a private runtime directory, starts ``comemd --check`` on a
simulated card in it (``COMEM_BIN_DIR``), and gives child processes the
environment that names the same socket and card. ``Child`` runs one of the
scripts in ``procs/`` as its own Python process and talks to it in JSON lines
(one command in, one answer out), so a test can drive a real worker step by
step, and kill it.

ComfyUI comes from ``COMFYUI_DIR`` (a real checkout; CMake runs each suite that
calls ``need_comfyui`` once per ComfyUI snapshot it found, 783545f6 and a125cd84,
with ``COMFYUI_DIR`` naming it): tests that need it skip, saying why, when it is
unset. ``comfyui_era()`` tells which snapshot a suite runs against. The suites
run in the virtual environment ``scripts/venv.sh`` makes (PyPI's torch stack,
the real comfy-aimdo, ComfyUI's own requirements); nothing ComfyUI imports is
stubbed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Any, Dict, List, Optional, Tuple, Union

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("COMEM_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
PYTHON_DIR = os.path.join(SOURCE, "python")
BIN_DIR = os.environ.get("COMEM_BIN_DIR") or os.path.join(SOURCE, "build", "bin")
PROCS = os.path.join(HERE, "procs")

GiB = 1 << 30
MiB = 1 << 20

WINDOWS = sys.platform == "win32"  #: the suites that run there too run under a Windows Python (make windows-check)


def program(name: str) -> str:
    """The path of comem's program ``name`` (``comemd``, ``comem``) in the build: ``.exe`` on Windows."""
    return os.path.join(BIN_DIR, name + (".exe" if WINDOWS else ""))


def socket_in(folder: str, name: str) -> str:
    """A coordinator address of the test's own beside ``folder``: a Unix socket there (``name.sock``),
    or on Windows a named pipe named after the folder and ``name``."""
    return rf"\\.\pipe\{os.path.basename(folder)}-{name}" if WINDOWS else os.path.join(folder, name + ".sock")


def suspend(proc: "subprocess.Popen[Any]") -> None:
    """Stops ``proc`` where it stands (SIGSTOP; on Windows every thread suspended, through the handle
    its start gave: comemd.exe shuts itself to the user's other processes' OpenProcess)."""
    if WINDOWS:
        _nt_process_call("NtSuspendProcess", proc)
    else:
        proc.send_signal(signal.SIGSTOP)


def resume(proc: "subprocess.Popen[Any]") -> None:
    """Lets a suspended ``proc`` go on (SIGCONT; on Windows its threads resumed)."""
    if WINDOWS:
        _nt_process_call("NtResumeProcess", proc)
    else:
        proc.send_signal(signal.SIGCONT)


def _nt_process_call(fn: str, proc: "subprocess.Popen[Any]") -> None:
    import ctypes
    status = getattr(ctypes.WinDLL("ntdll"), fn)(ctypes.c_void_p(int(proc._handle)))  # type: ignore[attr-defined]
    if status != 0:
        raise OSError(f"{fn}({proc.pid}): NTSTATUS {status & 0xffffffff:#x}")


def kill_hard(proc: "subprocess.Popen[Any]") -> None:
    """Ends ``proc`` with no chance to clean up: SIGKILL (on Windows, TerminateProcess)."""
    if WINDOWS:
        proc.kill()
    else:
        proc.send_signal(signal.SIGKILL)

if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)


def comfyui_dir() -> Optional[str]:
    """The real ComfyUI checkout to test against, or None."""
    d = os.environ.get("COMFYUI_DIR")
    return d if d and os.path.isfile(os.path.join(d, "comfy", "model_management.py")) else None


ERAS = ("783545f6", "a125cd84")  #: the ComfyUI snapshots the suites know, newest first


def comfyui_era(d: Optional[str] = None) -> Optional[str]:
    """Which ComfyUI snapshot ``d`` (default ``COMFYUI_DIR``) is: ``"v0.39"`` (the tree the v0.39
    overlay assembles: RAM through ``comfy/system_memory.py``, comfy-aimdo 0.5.6), ``"783545f6"``
    (dynamic VRAM, ``main.py`` initialising comfy-aimdo) or ``"a125cd84"`` (2025, no aimdo); None
    without one.

    Read from the source, not from a version string, so a checkout near one is placed by what the
    tests depend on: 783545f6's ``free_memory`` takes ``for_dynamic``; v0.39 has ``system_memory``."""
    d = d or comfyui_dir()
    if d is None:
        return None
    with open(os.path.join(d, "comfy", "model_management.py"), encoding="utf-8") as f:
        signature = next((line for line in f if line.startswith("def free_memory(")), "")
    if "for_dynamic" not in signature:
        return "a125cd84"
    return "v0.39" if os.path.exists(os.path.join(d, "comfy", "system_memory.py")) else "783545f6"


def comfyui_pythonpath() -> List[str]:
    """The folders of packages this era of ComfyUI pins over the tests' environment
    (``COMEM_COMFYUI_PYTHONPATH``, set by CMake: v0.39's comfy-aimdo 0.5.6, a125cd84's templates)."""
    return [p for p in os.environ.get("COMEM_COMFYUI_PYTHONPATH", "").split(os.pathsep) if p]


DYNAMIC_ERAS = ("783545f6", "v0.39")
"""The eras whose ComfyUI runs comfy-aimdo and ``ModelPatcherDynamic`` (and what comfy-env's workers follow)."""


def need_comfyui(case: unittest.TestCase, era: Union[str, Tuple[str, ...], None] = None) -> str:
    """The ComfyUI checkout to test against; skips the test without one (or, with ``era``, a name or a
    tuple of names such as :data:`DYNAMIC_ERAS`, without one of those)."""
    d = comfyui_dir()
    if d is None:
        case.skipTest("COMFYUI_DIR is unset (or has no comfy/model_management.py): the adapter's conformance "
                      "tests need the real ComfyUI; CMake sets it to each snapshot in shared/thirdparty")
    eras = (era,) if isinstance(era, str) else era
    if eras is not None and comfyui_era(d) not in eras:
        case.skipTest(f"this suite is for ComfyUI {' or '.join(eras)}; COMFYUI_DIR is {comfyui_era(d)} ({d})")
    return d


def need_torch(case: unittest.TestCase) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        case.skipTest("torch is not installed: run the tests in the environment scripts/venv.sh makes")


def import_comfy() -> Any:
    """ComfyUI's real model manager in this process, on the CPU when torch sees no GPU."""
    d = comfyui_dir()
    assert d is not None
    if d not in sys.path:
        sys.path.insert(0, d)
    import comfy.cli_args
    import torch
    if not torch.cuda.is_available():
        comfy.cli_args.args.cpu = True
    import comfy.model_management as mm
    import comfy.model_patcher  # noqa: F401
    return mm


class Machine:
    """A private runtime directory, a simulated card and a real comemd serving it."""

    def __init__(self, card: str = "sim:8GiB:reserved=256MiB:ctx=300MiB", idle_release: Optional[float] = None,
                 extra: Optional[List[str]] = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="comem-py-")
        # On Windows a named pipe's name, as unique as the folder (the coordinator keeps its lock file
        # in the runtime directory, COMEM_RUNTIME_DIR below).
        self.socket = socket_in(self.dir, "comem")
        self.spec = f"{card}:path={os.path.join(self.dir, 'card')}"
        self.env = dict(os.environ)
        self.env.update({"COMEM_RUNTIME_DIR": self.dir, "COMEM_SOCKET": self.socket, "COMEM_DEVICE": self.spec,
                         "PYTHONPATH": os.pathsep.join(filter(None, [PYTHON_DIR, self.env.get("PYTHONPATH")]))})
        self._saved = {k: os.environ.get(k) for k in ("COMEM_RUNTIME_DIR", "COMEM_SOCKET", "COMEM_DEVICE")}
        self.idle_release = idle_release
        self.extra = extra or []
        self.comemd: Optional[subprocess.Popen] = None
        self.children: List["Child"] = []
        self.log = open(os.path.join(self.dir, "comemd.log"), "w+")

    def __enter__(self) -> "Machine":
        for k in self._saved:
            os.environ[k] = self.env[k]
        self.start()
        return self

    def start(self) -> None:
        args = [program("comemd"), "--socket", self.socket, "--device", self.spec, "--check"]
        if self.idle_release is not None:
            args += ["--idle-release", str(self.idle_release)]
        self.comemd = subprocess.Popen(args + self.extra, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        import comem
        deadline = time.monotonic() + 10
        while True:
            try:
                with comem.Client("probe", role="tool", socket=self.socket, require_coordinator=True):
                    return
            except comem.Error:
                if time.monotonic() > deadline or self.comemd.poll() is not None:
                    self.stop()  # not left running behind the failure
                    raise RuntimeError("comemd did not start:\n" + self.comemd_log())
                time.sleep(0.02)

    def stop(self) -> None:
        if self.comemd is not None and self.comemd.poll() is None:
            self.comemd.send_signal(signal.SIGTERM)
            try:
                self.comemd.wait(10)
            except subprocess.TimeoutExpired:
                self.comemd.kill()
                self.comemd.wait()
        self.comemd = None

    def comemd_log(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def __exit__(self, *exc: object) -> None:
        if os.environ.get("COMEM_TEST_LOGS"):  # for a person debugging a failure
            sys.stderr.write(f"---- comemd ----\n{self.comemd_log()}\n")
            for c in self.children:
                sys.stderr.write(f"---- child {c.pid} ----\n{c.errors()}\n")
        for c in self.children:
            c.kill()
        self.stop()
        for k, v in self._saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def status(self) -> Dict[str, Any]:
        import comem
        with comem.Client("status", role="tool", socket=self.socket, require_coordinator=True) as c:
            return c.status()

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        """Runs the real ``comem`` tool against this machine's coordinator; fails the caller on a non-zero exit."""
        return subprocess.run([program("comem"), *args], env=self.env, capture_output=True, text=True,
                              timeout=60, check=True)

    def process(self, name: str, device: int = 0) -> Optional[Dict[str, Any]]:
        for p in self.status()["devices"][device]["processes"]:
            if p["name"] == name:
                return p
        return None

    def check_ledger(self, case: unittest.TestCase) -> None:
        co = self.status()["coordinator"]
        case.assertTrue(co["checking"])
        case.assertGreater(co["checks"], 0)
        case.assertEqual(co["violations"], 0, "the coordinator's ledger check failed:\n" + self.comemd_log())

    def child(self, script: str, *args: str, env: Optional[Dict[str, str]] = None) -> "Child":
        c = Child(self, script, list(args), env)
        self.children.append(c)
        return c


#: How long a child process has to answer one command: a liveness bound, never a speed claim. A child
#: that allocates and writes gigabytes on a 2-core machine beside a CPU hog and a parallel test run took
#: more than 30 s once (issue 21's long run); one stuck for good fails after this, with its stacks.
ANSWER_S = 120.0


class Child:
    """A real Python process running procs/<script>, driven by JSON lines."""

    def __init__(self, machine: Machine, script: str, args: List[str], env: Optional[Dict[str, str]]) -> None:
        e = dict(machine.env)
        e["PYTHONFAULTHANDLER"] = "1"  # a child that does not answer is made to say where it stands (read)
        if env:
            e.update(env)
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, os.path.join(PROCS, script)] + args, env=e,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                     bufsize=1)
        self.pid = self.proc.pid
        self.ready = self.read(60)

    def _readable(self, timeout: float) -> bool:
        if not WINDOWS:
            import select
            return bool(select.select([self.proc.stdout], [], [], timeout)[0])
        # Windows' select takes sockets only: a thread reads the pipe's lines into a queue.
        import queue
        import threading
        if not hasattr(self, "_lines"):
            self._lines: "queue.Queue[str]" = queue.Queue()

            def pump() -> None:
                for line in iter(self.proc.stdout.readline, ""):  # type: ignore[union-attr]
                    self._lines.put(line)
                self._lines.put("")  # its end, read as "" as readline says it

            threading.Thread(target=pump, daemon=True).start()
        try:
            self._next = self._lines.get(timeout=timeout)
            return True
        except queue.Empty:
            return False

    def read(self, timeout: float = ANSWER_S) -> Dict[str, Any]:
        if not self._readable(timeout):
            # Its threads' stacks (faulthandler, on SIGABRT) tell a hang from a machine too busy to answer.
            if self.proc.poll() is None and not WINDOWS:
                self.proc.send_signal(signal.SIGABRT)
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            raise AssertionError(f"child {self.pid} said nothing in {timeout} s; its stderr (with its stacks):\n"
                                 f"{self.errors()}")
        line = self._next if WINDOWS else self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise AssertionError(f"child {self.pid} ended (rc {self.proc.poll()}); its stderr:\n{self.errors()}")
        return json.loads(line)

    def ask(self, cmd: str, timeout: float = ANSWER_S, **kw: Any) -> Dict[str, Any]:
        kw["cmd"] = cmd
        self.proc.stdin.write(json.dumps(kw) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        out = self.read(timeout)
        if "error" in out:
            raise AssertionError(f"child {self.pid}: {cmd} failed: {out['error']}\n{self.errors()}")
        return out

    def errors(self) -> str:
        self.stderr.flush()
        self.stderr.seek(0)
        return self.stderr.read()[-6000:]

    def finish(self) -> int:
        try:
            self.ask("exit")
        except AssertionError:
            pass
        return self.proc.wait(30)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_for(pred: Any, timeout: float = 10, interval: float = 0.02) -> Any:
    """Polls pred() until it returns something true; returns it, or the last value after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(interval)
