"""The coordinator starts itself: comem.coordinator.ensure_running and the ComfyUI host/worker that call it.

Real processes throughout: the real comemd (COMEM_BIN_DIR) on a simulated card in a private runtime
directory per test, real child Pythons racing to start it, and a real listening socket playing an older
comem's coordinator. Every comemd a test leaves is found by its socket in /proc and stopped by pid.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Callable, Dict, List

import support

import comem
from comem import autostart
from comem.coordinator import OtherVersion, ensure_running

COMEMD = support.program("comemd")
COMEM = support.program("comem")
WINDOWS = support.WINDOWS


def wait_for(cond: Callable[[], bool], seconds: float = 20.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def comemds(sock: str) -> List[int]:
    """The live comemd processes told to listen on ``sock`` (their command lines name it). On Windows, whose
    comemd.exe lets nobody read its command line, the one serving the pipe (a loser of a race ends at once)."""
    if WINDOWS:
        peer = autostart._look(sock)
        return [peer.pid] if peer is not None and peer.pid is not None else []
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0")]
            with open(f"/proc/{d}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X") and argv and os.path.basename(argv[0]) == "comemd" and sock in argv:
            found.append(int(d))
    return sorted(found)


def terminate(pid: int) -> None:
    """Windows: ends process ``pid`` (PROCESS_TERMINATE, which comemd.exe grants its user)."""
    import ctypes
    k32 = ctypes.WinDLL("kernel32", use_last_error=True)
    k32.OpenProcess.restype = ctypes.c_void_p
    handle = k32.OpenProcess(0x0001, False, pid)  # PROCESS_TERMINATE
    if not handle:
        raise OSError(ctypes.get_last_error(), f"OpenProcess({pid}, PROCESS_TERMINATE)")
    try:
        k32.TerminateProcess(ctypes.c_void_p(handle), 1)
    finally:
        k32.CloseHandle(ctypes.c_void_p(handle))


def process_lives(pid: int) -> bool:
    """Whether process ``pid`` runs, asked of the system (never by connecting to the coordinator: a connection
    is a client, which keeps an --exit-idle coordinator alive)."""
    if not WINDOWS:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
        except OSError:
            return False
    import ctypes
    k32 = ctypes.WinDLL("kernel32", use_last_error=True)
    k32.OpenProcess.restype = ctypes.c_void_p
    handle = k32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return False
    try:
        code = ctypes.c_ulong()
        return bool(k32.GetExitCodeProcess(ctypes.c_void_p(handle), ctypes.byref(code))) and code.value == 259
    finally:  # 259: STILL_ACTIVE
        k32.CloseHandle(ctypes.c_void_p(handle))


def ppid_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])


# An older comem's coordinator, as a new client meets it: it takes the connection, cannot read our frame
# header (protocol version 2) and answers in its own (version 1) with a REPLY before it closes.
OLD_COORDINATOR = r"""
import socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen(16)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.settimeout(2)
    try:
        c.recv(4096)
    except OSError:
        pass
    msg = b"bad frame header"
    body = struct.pack("<iB", -6, len(msg)) + msg
    c.sendall(struct.pack("<IHHII", 0x4D454D43, 1, 64, 0, len(body)) + body)
    c.close()
"""

# A coordinator whose frames' header is this comem's but whose HELLO is not: it refuses this one's protocol
# version (a REPLY to request 1, EPROTO, as coord/session.c words it) and names none of its own.
REFUSING_COORDINATOR = r"""
import socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen(16)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.settimeout(2)
    try:
        c.recv(4096)
    except OSError:
        pass
    msg = b"protocol version not supported"
    body = struct.pack("<iB", int(sys.argv[4]), len(msg)) + msg
    c.sendall(struct.pack("<IHHII", int(sys.argv[2]), int(sys.argv[3]), 64, 1, len(body)) + body)
    c.close()
"""

# One of several processes released at the same moment: each calls ensure_running and says what it got.
RACER = r"""
import json, os, sys, time
from comem.coordinator import ensure_running
open(sys.argv[1], "w").close()
while not os.path.exists(sys.argv[2]):
    time.sleep(0.001)
r = ensure_running(started_by=sys.argv[3], timeout=60)
print(json.dumps({"pid": r.pid, "started": r.started, "started_by": r.started_by}), flush=True)
"""

# A ComfyUI node pack's worker process (plain torch models, no ComfyUI): what its client joined.
WORKER = r"""
import json, os, sys
from comem.comfy import Worker
w = Worker(sys.argv[1], mm=False)
out = {"connected": w.client.connected, "pid": os.getpid()}
if w.client.connected:
    out["coordinator"] = w.client.status()["coordinator"]
w.close()
print(json.dumps(out), flush=True)
"""


class AutostartCase(unittest.TestCase):
    """A private runtime directory with no coordinator in it; the environment names its socket and card."""

    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="comem-auto-")
        os.chmod(self.dir, 0o700)
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.socket = support.socket_in(self.dir, "comem")
        self.spec = f"sim:8GiB:path={os.path.join(self.dir, 'card')}"
        values = {"COMEM_RUNTIME_DIR": self.dir, "COMEM_SOCKET": self.socket, "COMEM_DEVICE": self.spec,
                  "COMEM_BIN_DIR": support.BIN_DIR, "COMEM_LOG": "info"}  # the daemon's log lines are read
        saved = {k: os.environ.get(k) for k in list(values) + [autostart.SWITCH]}
        self.addCleanup(self._restore, saved)
        os.environ.update(values)
        os.environ.pop(autostart.SWITCH, None)  # the suites run with it off (tests/CMakeLists.txt): on here
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [support.PYTHON_DIR, self.env.get("PYTHONPATH")]))
        self.addCleanup(self.stop_comemds)
        self.log = os.path.join(self.dir, "comemd.log")

    @staticmethod
    def _restore(saved: Dict[str, object]) -> None:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = str(v)

    def stop_comemds(self) -> None:
        """Everything listening (or told to listen) on this test's socket: SIGTERM by pid, then SIGKILL (on
        Windows ended: comemd.exe lets its user end it, as a signal does on Linux)."""
        if WINDOWS:
            for _ in range(10):
                pids = comemds(self.socket)
                if not pids:
                    return
                for pid in pids:
                    terminate(pid)
                wait_for(lambda: comemds(self.socket) != pids, 10)
            return
        pids = comemds(self.socket)
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        if not wait_for(lambda: not comemds(self.socket), 10):
            for pid in comemds(self.socket):
                os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not comemds(self.socket), 10)

    def status(self) -> dict:
        with comem.Client("test-status", role="tool", socket=self.socket, require_coordinator=True) as c:
            return c.status()["coordinator"]

    def python(self, code: str, *args: str, env: Dict[str, str] = None) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", code, *args], env=env or self.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.addCleanup(self._reap, p)
        return p

    @staticmethod
    def _reap(p: subprocess.Popen) -> None:
        if p.poll() is None:
            p.kill()
        p.communicate()


class TestEnsureRunning(AutostartCase):
    def test_starts_one_detached_when_none_runs_and_says_who(self):
        self.assertEqual(comemds(self.socket), [])
        me = f"test-autostart (pid {os.getpid()})"
        r = ensure_running(started_by=me)
        self.assertTrue(r.started)
        self.assertEqual((r.socket, r.started_by, r.binary, r.log),
                         (self.socket, me, os.path.abspath(COMEMD), self.log))
        self.assertEqual(comemds(self.socket), [r.pid])
        co = self.status()
        self.assertEqual((co["pid"], co["started_by"], co["socket"]), (r.pid, me, self.socket))
        self.assertEqual(co["card_spec"].split(":path=")[1], os.path.join(self.dir, "card"))  # COMEM_DEVICE went along
        # detached: a session of its own (this process's child while it lives: its waiting thread reaps a
        # comemd that exits; the worker test sees it outlive its starter), logging to the runtime directory
        if not WINDOWS:  # there: no console of the caller's, a process group of its own (creation flags)
            self.assertEqual(ppid_of(r.pid), os.getpid())
            self.assertEqual(os.getsid(r.pid), r.pid)
        with open(self.log) as f:
            self.assertIn(f"comem[{r.pid}] info: coordinator: started by {me}", f.read())
        if not WINDOWS:  # there the runtime folder's access list is the file's
            self.assertEqual(stat.S_IMODE(os.stat(self.log).st_mode), 0o600)
        text = subprocess.run([COMEM, "status"], env=self.env, capture_output=True, text=True, timeout=30)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertEqual(text.stdout.splitlines()[1], f"started by {me}" + ("" if WINDOWS else " (running)"))
        # the default names this program and its pid
        self.assertTrue(autostart._default_started_by().endswith(f" (pid {os.getpid()})"))

    def test_a_coordinator_it_started_goes_away_after_its_last_client(self):
        self.assertEqual(autostart.grace_seconds(), autostart.GRACE_S)  # nothing set: 10 minutes
        os.environ[autostart.GRACE] = "soon"
        self.addCleanup(os.environ.pop, autostart.GRACE, None)
        with self.assertLogs("comem", "WARNING") as said:
            self.assertEqual(autostart.grace_seconds(), autostart.GRACE_S)
        self.assertIn("COMEM_AUTOSTART_GRACE='soon' is not a number of seconds", said.output[0])
        os.environ[autostart.GRACE] = "1"
        r = ensure_running(started_by="grace-test")
        self.assertTrue(r.started)
        with comem.Client("brief", socket=self.socket, require_coordinator=True):
            pass  # a client came and went: the grace counts from its leaving
        self.assertTrue(wait_for(lambda: not process_lives(r.pid), 60), "the coordinator outlived its grace")
        with open(self.log) as f:
            log = f.read()
        self.assertIn(f"comem[{r.pid}] info: coordinator: no process connected for 1 s (--exit-idle): exiting", log)
        again = ensure_running(started_by="grace-test")  # the next client starts another
        self.assertTrue(again.started)
        self.assertNotEqual(again.pid, r.pid)
        os.environ[autostart.GRACE] = "0"  # never: started without --exit-idle
        self.stop_comemds()
        third = ensure_running(started_by="grace-test")
        if not WINDOWS:
            with open(f"/proc/{third.pid}/cmdline", "rb") as f:
                self.assertNotIn(b"--exit-idle", f.read())

    def test_two_processes_at_once_get_one_coordinator(self):
        racers = []
        go = os.path.join(self.dir, "go")
        for i in range(4):
            ready = os.path.join(self.dir, f"ready-{i}")
            racers.append((ready, self.python(RACER, ready, go, f"racer-{i}")))
        self.assertTrue(wait_for(lambda: all(os.path.exists(r) for r, _ in racers), 60), "the racers never got ready")
        open(go, "w").close()  # all released at once
        got = []
        for _, p in racers:
            out, err = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, err)
            got.append(json.loads(out))
        pids = {g["pid"] for g in got}
        self.assertEqual(len(pids), 1, got)
        winners = [i for i, g in enumerate(got) if g["started"]]
        self.assertEqual(len(winners), 1, got)  # exactly one of them started the coordinator they all use
        pid = pids.pop()
        self.assertEqual({g["started_by"] for g in got}, {f"racer-{winners[0]}"})
        self.assertTrue(wait_for(lambda: comemds(self.socket) == [pid]), comemds(self.socket))  # losers gone
        self.assertEqual(self.status()["started_by"], f"racer-{winners[0]}")
        with open(self.log) as f:
            lines = f.read().splitlines()
        started = [ln for ln in lines if "coordinator: listening on" in ln]
        self.assertEqual(started, [f"comem[{pid}] info: coordinator: listening on {self.socket}, 1 device(s)"])
        for ln in lines:  # whoever else was started lost the lock and said so, and nothing worse
            m = re.match(r"comem\[(\d+)\] error: (.*)", ln)
            if m:
                self.assertNotEqual(int(m.group(1)), pid)
                # the winner's pid when it answered the loser, else that it holds the lock and does not yet
                said = m.group(2)
                self.assertTrue(said.startswith(f"another coordinator already runs on {self.socket}: "), said)
                self.assertTrue(said.startswith(f"another coordinator already runs on {self.socket}: pid {pid}, "
                                                f"started by racer-{winners[0]} (") or
                                "holds the socket's lock and does not answer yet" in said, said)

    def test_switched_off_starts_nothing(self):
        os.environ[autostart.SWITCH] = "0"
        self.assertIsNone(ensure_running())
        self.assertIsNone(ensure_running(autostart=False))  # the argument wins over the environment too
        os.environ.pop(autostart.SWITCH)
        self.assertIsNone(ensure_running(autostart=False))
        self.assertFalse(os.path.lexists(self.socket))
        self.assertFalse(os.path.exists(self.log))
        self.assertEqual(comemds(self.socket), [])

    def test_a_running_coordinator_is_reused_not_replaced(self):
        # as the systemd unit runs it: no --started-by
        d = subprocess.Popen([COMEMD, "--socket", self.socket], env=self.env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.addCleanup(self._stop, d)
        self.assertTrue(wait_for(lambda: autostart._probe(self.socket, 500)[0] == 0), "comemd never answered")
        r = ensure_running(started_by="test-reuse")
        self.assertEqual((r.pid, r.started, r.started_by, r.binary), (d.pid, False, None, None))
        self.assertEqual(ensure_running().pid, d.pid)
        self.assertEqual(comemds(self.socket), [d.pid])
        self.assertIsNone(self.status()["started_by"])
        text = subprocess.run([COMEM, "status"], env=self.env, capture_output=True, text=True, timeout=30)
        self.assertNotIn("started by", text.stdout)
        self.assertFalse(os.path.exists(self.log))  # nothing was started

    def test_a_frozen_coordinator_is_reported_not_waited_for_nor_doubled(self):
        d = subprocess.Popen([COMEMD, "--socket", self.socket], env=self.env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.addCleanup(self._stop, d)
        self.assertTrue(wait_for(lambda: autostart._probe(self.socket, 500)[0] == 0), "comemd never answered")
        support.suspend(d)  # it holds the address and answers nothing
        try:
            t0 = time.monotonic()
            with self.assertRaises(comem.Error) as cm:
                ensure_running(started_by="test-frozen", timeout=5)
            self.assertLess(time.monotonic() - t0, 30)  # a bound on a hang, not a speed
            self.assertIn("not starting another coordinator there", str(cm.exception))
        finally:
            support.resume(d)
        # nothing else was started (on Windows a pipe busy while it catches up reads as nobody: waited out)
        self.assertTrue(wait_for(lambda: comemds(self.socket) == [d.pid]), comemds(self.socket))
        self.assertFalse(os.path.exists(self.log))
        self.assertEqual(ensure_running().pid, d.pid)  # answering again, it is used

    @staticmethod
    def _stop(p: subprocess.Popen) -> None:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            p.wait(10)

    @unittest.skipIf(WINDOWS, "a pipe goes with its last handle: none is left behind to replace")
    def test_a_stale_socket_is_replaced(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(self.socket)
        s.close()  # left behind, as by a coordinator that was killed
        r = ensure_running(started_by="test-stale")
        self.assertTrue(r.started)
        self.assertEqual(self.status()["pid"], r.pid)

    @unittest.skipIf(WINDOWS, "the older coordinator here is a Unix socket's")
    def test_an_older_coordinator_is_reported_with_both_paths_and_not_doubled(self):
        old = self.python(OLD_COORDINATOR, self.socket)
        self.assertEqual(old.stdout.readline().strip(), "ready")
        inode = os.stat(self.socket).st_ino
        with self.assertRaises(OtherVersion) as cm:
            ensure_running(started_by="test-old")
        e = cm.exception
        self.assertEqual((e.socket, e.pid, e.theirs, e.ours), (self.socket, old.pid, 1, autostart.WIRE_VERSION))
        self.assertEqual(e.would_start, os.path.abspath(COMEMD))
        self.assertEqual(e.executable, "executable " + os.path.realpath(sys.executable))  # a dumpable process
        text = str(e)
        for part in (self.socket, f"pid {old.pid}", "protocol version 1", os.path.abspath(COMEMD),
                     "no second coordinator was started"):
            self.assertIn(part, text)
        self.assertIsInstance(e, comem.Error)
        self.assertEqual(comemds(self.socket), [])  # nothing started, here or on another socket
        self.assertFalse(os.path.exists(self.log))
        self.assertEqual(os.stat(self.socket).st_ino, inode)
        self.assertIsNone(old.poll())

    @unittest.skipIf(WINDOWS, "the coordinator here is a Unix socket's")
    def test_a_coordinator_that_refuses_this_version_is_reported_without_one(self):
        other = self.python(REFUSING_COORDINATOR, self.socket, str(autostart.WIRE_MAGIC), str(autostart.WIRE_VERSION),
                            str(comem.errors.EPROTO))
        self.assertEqual(other.stdout.readline().strip(), "ready")
        with self.assertRaises(OtherVersion) as cm:
            ensure_running(started_by="test-refused")
        e = cm.exception
        self.assertEqual((e.socket, e.pid, e.theirs, e.ours), (self.socket, other.pid, None, autostart.WIRE_VERSION))
        self.assertIn("speaks another protocol version", str(e))
        self.assertEqual(comemds(self.socket), [])  # nothing started
        self.assertFalse(os.path.exists(self.log))
        self.assertIsNone(other.poll())

    def test_what_the_coordinator_is_told_follows_the_name_rule(self):
        for bad in ("", "a\x1bb", "line\nbreak", "x" * 128):
            with self.assertRaises(ValueError):
                ensure_running(started_by=bad)
        for bad in ("a\x1bb", "", "x" * 128):
            p = subprocess.run([COMEMD, "--socket", self.socket, "--started-by", bad], env=self.env,
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 2, bad)
            self.assertIn("--started-by", p.stderr)
        self.assertEqual(comemds(self.socket), [])
        self.assertFalse(os.path.lexists(self.socket))

    def test_a_comemd_that_cannot_start_is_reported_with_its_own_words(self):
        os.environ["COMEM_DEVICE"] = "nonsense"
        with self.assertRaises(comem.Error) as cm:
            ensure_running(started_by="test-bad-device", timeout=30)
        self.assertNotIsInstance(cm.exception, comem.TimedOut)
        self.assertIn("exited (status 2) and nobody answers", str(cm.exception))
        self.assertIn("nonsense", str(cm.exception))
        self.assertEqual(comemds(self.socket), [])


class TestLocator(unittest.TestCase):
    def test_the_wire_constants_are_wire_h(self):
        with open(os.path.join(support.SOURCE, "src", "wire", "wire.h")) as f:
            h = f.read()
        self.assertEqual(int(re.search(r"#define COMEM_WIRE_VERSION (\d+)", h).group(1)), autostart.WIRE_VERSION)
        self.assertEqual(int(re.search(r"#define COMEM_WIRE_MAGIC (0x[0-9a-fA-F]+)u", h).group(1), 16),
                         autostart.WIRE_MAGIC)
        # No frame is spoken here any more (the library's probe tells another version): the numbers are the
        # library's, and so is comemd's lost-start status, the one the systemd unit does not restart on.
        from comem import _lib
        self.assertEqual((autostart.WIRE_VERSION, autostart.WIRE_MAGIC),
                         (_lib.constant("WIRE_VERSION"), _lib.constant("WIRE_MAGIC")))
        with open(os.path.join(support.SOURCE, "docs", "comemd.service.in")) as f:
            unit = f.read()
        self.assertEqual(int(re.search(r"RestartPreventExitStatus=(\d+)", unit).group(1)), autostart._EXIT_TAKEN)

    def test_comemd_is_looked_for_in_order(self):
        d = tempfile.mkdtemp(prefix="comem-bin-")
        self.addCleanup(shutil.rmtree, d, True)
        saved = os.environ.get("COMEM_BIN_DIR")
        self.addCleanup(lambda: os.environ.__setitem__("COMEM_BIN_DIR", saved) if saved is not None
                        else os.environ.pop("COMEM_BIN_DIR", None))
        os.environ["COMEM_BIN_DIR"] = d
        places = autostart.search_places()
        pkg = os.path.dirname(os.path.abspath(autostart.__file__))
        name = autostart._COMEMD  # comemd.exe on Windows
        self.assertEqual(places[:2], [os.path.join(d, name), os.path.join(pkg, "_native", "bin", name)])
        self.assertIn(os.path.join(support.SOURCE, "build-win" if WINDOWS else "build", "bin", name), places)
        fake = os.path.join(d, name)
        with open(fake, "w") as f:
            f.write("#!/bin/sh\n")
        self.assertNotEqual(autostart.comemd_path(), fake)  # not executable (on Windows not a program): the next
        if WINDOWS:
            with open(fake, "wb") as f:
                f.write(b"MZ\x90\x00" + b"\0" * 60)
        else:
            os.chmod(fake, 0o755)
        self.assertEqual(autostart.comemd_path(), fake)


class TestComfyProcesses(AutostartCase):
    def test_a_worker_starts_the_coordinator_unless_switched_off(self):
        support.need_torch(self)
        off = dict(self.env, COMEM_AUTOSTART="0")
        p = self.python(WORKER, "sam3", env=off)
        out, err = p.communicate(timeout=300)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(json.loads(out)["connected"], False)  # it decided locally, as before
        self.assertEqual(comemds(self.socket), [])
        self.assertFalse(os.path.lexists(self.socket))

        p = self.python(WORKER, "sam3")
        out, err = p.communicate(timeout=300)
        self.assertEqual(p.returncode, 0, err)
        got = json.loads(out)
        self.assertTrue(got["connected"])
        co = got["coordinator"]
        self.assertEqual(co["started_by"], f"sam3 worker (pid {got['pid']})")
        self.assertEqual(comemds(self.socket), [co["pid"]])  # it outlives the worker that started it
        self.assertEqual(self.status()["started_by"], f"sam3 worker (pid {got['pid']})")
        if not WINDOWS:  # comem status says that the starter has exited
            text = subprocess.run([COMEM, "status"], env=self.env, capture_output=True, text=True, timeout=30)
            self.assertEqual(text.stdout.splitlines()[1], f"started by sam3 worker (pid {got['pid']}) (exited)")


if __name__ == "__main__":
    unittest.main()
