"""A second comemd on a socket already served refuses to start (status 3) and names the one that runs:
its socket, its pid and who started it, and how to see and stop it; one that holds the socket's lock
without answering (frozen here, still starting in life) is said to, with the reason (issue 41 item 10)."""
import os
import signal
import subprocess
import tempfile
import time
import unittest

from comem_cli import COMEMD, run


class SecondCoordinator(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="comem-cli-")
        self.addCleanup(self.dir.cleanup)
        self.socket = os.path.join(self.dir.name, "comem.sock")
        self.env = dict(os.environ, COMEM_RUNTIME_DIR=self.dir.name, COMEM_SOCKET=self.socket, COMEM_LOG="warn")
        self.first = subprocess.Popen([COMEMD, "--socket", self.socket, "--device", "sim:4GiB",
                                       "--started-by", "a test (pid 4242)"],
                                      env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(self.stop_first)
        end = time.monotonic() + 15
        while run("status", "--socket", self.socket, env=self.env, timeout=10).returncode != 0:
            self.assertIsNone(self.first.poll(), "the first comemd exited")
            self.assertLess(time.monotonic(), end, "the first comemd did not answer")
            time.sleep(0.05)

    def stop_first(self):
        if self.first.poll() is None:
            self.first.send_signal(signal.SIGCONT)
            self.first.terminate()
            self.first.wait(10)

    def second(self):
        return subprocess.run([COMEMD, "--socket", self.socket, "--device", "sim:4GiB"], env=self.env,
                              capture_output=True, text=True, timeout=60)

    def test_names_the_running_coordinators_pid_and_starter(self):
        p = self.second()
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn(f"error: another coordinator already runs on {self.socket}: pid {self.first.pid}, "
                      f"started by a test (pid 4242) (`comem status --socket {self.socket}` shows it, "
                      f"`comem stop --socket {self.socket}` ends it)", p.stderr)
        self.assertIsNone(self.first.poll())  # the first one runs on, untouched

    def test_one_that_does_not_answer_is_said_to(self):
        self.first.send_signal(signal.SIGSTOP)  # holds the lock, answers nobody
        try:
            p = self.second()
        finally:
            self.first.send_signal(signal.SIGCONT)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn(f"error: another coordinator already runs on {self.socket}: it holds the socket's lock and "
                      "does not answer yet (no coordinator answers: ", p.stderr)
        self.assertIn(f"`comem status --socket {self.socket}` names its pid once it does", p.stderr)


if __name__ == "__main__":
    unittest.main()
