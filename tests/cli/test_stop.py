"""`comem stop`: the user's coordinator ends cleanly; its sessions end with it; a pid that is no comemd is left alone."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from comem_cli import COMEMD, GiB, Machine, run


@unittest.skipIf(sys.platform == "win32", "comem stop is POSIX (cmds_win.c says so on Windows)")
class Stop(unittest.TestCase):
    def test_stops_the_coordinator_and_its_sessions_end(self):
        m = Machine("sim:8GiB")
        self.addCleanup(m.close)
        worker = m.worker("a", GiB)
        pid = m.status()["coordinator"]["pid"]
        self.assertEqual(pid, m.daemon.pid)
        p = m.comem("stop", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout), {"schema": 1, "stopped": True, "pid": pid, "socket": m.socket})
        self.assertEqual(m.daemon.wait(timeout=10), 0)  # SIGTERM: a clean exit
        self.assertFalse(os.path.exists(m.socket))  # it removed its socket
        self.assertIsNone(worker.poll())  # the worker lives on, deciding locally
        again = m.comem("stop")  # nobody answers now
        self.assertEqual(again.returncode, 1)
        self.assertIn("no coordinator answers", again.stderr)
        self.assertEqual(again.stdout, "")

    def test_text_names_the_pid_and_socket(self):
        m = Machine("sim:8GiB")
        self.addCleanup(m.close)
        p = m.comem("stop")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, f"stopped the coordinator (pid {m.daemon.pid}) on {m.socket}\n")

    def test_a_pid_that_is_no_comemd_is_not_signalled(self):
        # The coordinator's own pid, but its program under another name: stop checks what the pid runs before it
        # signals (a socket's word alone could name any process of the user's).
        folder = tempfile.mkdtemp(prefix="comem-stop-")
        self.addCleanup(shutil.rmtree, folder, True)
        other = os.path.join(folder, "not-the-coordinator")
        shutil.copy(COMEMD, other)
        path = os.path.join(folder, "comem.sock")
        env = dict(os.environ, COMEM_SOCKET=path, COMEM_RUNTIME_DIR=folder, COMEM_LOG="warn")
        d = subprocess.Popen([other, "--socket", path, "--device", "sim:1GiB"], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.addCleanup(d.wait, 10)
        self.addCleanup(d.terminate)
        for _ in range(200):
            if run("status", "--socket", path, env=env, timeout=10).returncode == 0:
                break
            time.sleep(0.05)
        p = run("stop", "--socket", path, env=env, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn(f"says it is pid {d.pid}, but process {d.pid} runs {other}, not comemd: not stopping it",
                      p.stderr)
        self.assertIsNone(d.poll())  # not signalled
        self.assertEqual(run("status", "--socket", path, env=env, timeout=10).returncode, 0)

    def test_bad_arguments(self):
        p = run("stop", "--timeout", "soon")
        self.assertEqual(p.returncode, 2)
        p = run("stop", "--bogus")
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown flag", p.stderr)


if __name__ == "__main__":
    unittest.main()
