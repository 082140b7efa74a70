"""Output that cannot be written is a failure (issue 40, finding 11): every subcommand that prints, run
with its stdout on /dev/full (every write fails with ENOSPC), exits non-zero and says so on stderr,
instead of exiting 0 with its output lost."""
import errno
import glob
import os
import subprocess
import unittest

from comem_cli import COMEM, SOURCE_DIR, Machine

MESSAGE = f"comem: cannot write output: {os.strerror(errno.ENOSPC)}"  # "No space left on device"


def run_full(*args, env=None, timeout=60):
    """Runs comem with args, its stdout on /dev/full; the CompletedProcess (stderr as text)."""
    with open("/dev/full", "w") as full:
        return subprocess.run([COMEM, *map(str, args)], stdout=full, stderr=subprocess.PIPE, text=True, env=env,
                              timeout=timeout)


class Offline(unittest.TestCase):
    """Subcommands that print without a coordinator."""

    def check(self, *args):
        p = run_full(*args)
        self.assertEqual(p.returncode, 1, f"comem {' '.join(args)}: rc {p.returncode}, stderr {p.stderr!r}")
        self.assertIn(MESSAGE, p.stderr, f"comem {' '.join(args)}")

    def test_version_and_help(self):
        for args in (["version"], ["--version"], ["--help"], ["status", "--help"], ["metrics", "--help"]):
            with self.subTest(args=args):
                self.check(*args)

    def test_calc(self):
        self.check("calc", "admission", "--weights", "6GiB", "--memory-required", "1GiB")
        self.check("calc", "reserve", "--pretty")

    def test_devices(self):
        self.check("devices", "--device", "sim:8GiB")
        self.check("devices", "--device", "sim:8GiB", "--json")

    def test_demo(self):
        self.check("demo")

    def test_simulate_check(self):
        scn = sorted(glob.glob(os.path.join(SOURCE_DIR, "scenarios", "F0*.scn")))[0]
        self.check("simulate", scn, "--check")


class Online(unittest.TestCase):
    """Subcommands that print what a coordinator says."""

    def setUp(self):
        self.m = Machine("sim:8GiB")
        self.addCleanup(self.m.close)
        self.m.worker("w1", 1 << 30)

    def check(self, *args):
        p = run_full(*args, "--socket", self.m.socket, env=self.m.env)
        self.assertEqual(p.returncode, 1, f"comem {' '.join(args)}: rc {p.returncode}, stderr {p.stderr!r}")
        self.assertIn(MESSAGE, p.stderr, f"comem {' '.join(args)}")

    def test_status_and_metrics(self):
        for args in (["status"], ["status", "--json"], ["metrics"], ["metrics", "--json"]):
            with self.subTest(args=args):
                self.check(*args)

    def test_watch_one_frame(self):
        self.check("watch", "--count", "1", "--plain")

    def test_release_json(self):
        self.check("release", "--all", "--json")

    def test_stop_stops_and_says_its_line_is_lost(self):
        # It stops the coordinator all the same; only the line saying so is lost, and that is said.
        self.check("stop")
        self.assertIsNotNone(self.m.daemon.wait(timeout=10))

    def test_a_reader_that_left_is_still_quiet(self):
        # comem status | head -c0: the pipe closes before the output; nobody is left to tell (exit 0, no line).
        r, w = os.pipe()
        os.close(r)
        with os.fdopen(w, "w") as gone:
            p = subprocess.run([COMEM, "status", "--socket", self.m.socket], stdout=gone, stderr=subprocess.PIPE,
                               text=True, env=self.m.env, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("cannot write output", p.stderr)


if __name__ == "__main__":
    unittest.main()
