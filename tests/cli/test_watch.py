"""`comem watch` as a person meets it, in a real terminal (tmux): live figures, resize, q; and piped."""
import os
import shlex
import shutil
import subprocess
import time
import unittest

from comem_cli import COMEM, GiB, Machine


class Tmux:
    """A private tmux server running one command in a detached session of a given size."""

    def __init__(self, dir_, command, cols=120, rows=40):
        self.sock = os.path.join(dir_, "tmux.sock")
        self.tmux("-f", "/dev/null", "new-session", "-d", "-s", "w", "-x", str(cols), "-y", str(rows), command)

    def tmux(self, *args):
        return subprocess.run(["tmux", "-S", self.sock, *args], capture_output=True, text=True, timeout=10)

    def screen(self):
        return self.tmux("capture-pane", "-p", "-t", "w").stdout

    def alive(self):
        return self.tmux("has-session", "-t", "w").returncode == 0

    def kill(self):
        self.tmux("kill-server")


def wait(cond, what, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@unittest.skipUnless(shutil.which("tmux"), "tmux is not installed (Debian: tmux; scripts/deps.sh installs it)")
class WatchInATerminal(unittest.TestCase):
    def setUp(self):
        self.m = Machine("sim:8GiB")
        self.addCleanup(self.m.close)
        self.rc = os.path.join(self.m.dir.name, "watch.rc")
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.m.env.items() if k.startswith("COMEM_"))
        cmd = (f"env {env} {shlex.quote(COMEM)} watch --socket {shlex.quote(self.m.socket)} --interval 0.1 "
               f"--status-every 0.2; echo $? > {shlex.quote(self.rc)}")
        self.t = Tmux(self.m.dir.name, f"sh -c {shlex.quote(cmd)}")
        self.addCleanup(self.t.kill)

    def test_live_view_resize_and_q(self):
        s = wait(lambda: (lambda x: x if "device 0" in x else None)(self.t.screen()), "the first frame")
        self.assertIn("comem watch", s)
        self.assertIn("(q quits)", s)
        self.assertIn("capacity 8.00 GiB", s)
        self.assertIn("(none since the watch started)", s)
        w = self.m.worker("sam3", 2 * GiB)
        s = wait(lambda: (lambda x: x if "admission(s) granted" in x else None)(self.t.screen()), "the events")
        self.assertRegex(s, rf"worker 'sam3' \(pid {w.pid}\) joined")
        self.assertRegex(s, rf"{w.pid}\s+sam3\s+worker\s+idle\s+2\.00 GiB")
        self.assertRegex(s, r"\n\s+models\s+models\s+idle\s+2\.00 GiB")
        self.m.busy(w)
        wait(lambda: "worker  busy" in self.t.screen(), "busy to show")
        # a resize redraws at the new width: no line is longer, the header is still on top
        self.t.tmux("resize-window", "-t", "w", "-x", "60", "-y", "20")
        s = wait(lambda: (lambda x: x if x.startswith("comem watch") and max(map(len, x.splitlines())) <= 60
                          else None)(self.t.screen()), "the redraw at 60 columns")
        self.assertIn("device 0", s)
        self.t.tmux("send-keys", "-t", "w", "q")
        wait(lambda: not self.t.alive(), "q to quit")
        with open(self.rc) as f:
            self.assertEqual(f.read().strip(), "0")


class WatchPiped(unittest.TestCase):
    def test_plain_frames_when_not_a_terminal(self):
        with Machine("sim:8GiB") as m:
            m.worker("w1", GiB)
            p = m.comem("watch", "--count", "3", "--interval", "0.1")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertNotIn("\033", p.stdout)  # plain text for a pipe or a log
            self.assertEqual(p.stdout.count("comem watch "), 3)
            self.assertNotIn("(q quits)", p.stdout)
            self.assertRegex(p.stdout, r"w1\s+worker\s+idle\s+1\.00 GiB")

    def test_a_reader_that_goes_away_ends_it_quietly(self):
        # comem watch | head -1: the next frame finds the pipe closed; exit 0, nothing on stderr, not 141
        with Machine("sim:8GiB") as m:
            p = subprocess.Popen([COMEM, "watch", "--interval", "0.05"], env=m.env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
            p.stdout.readline()
            p.stdout.close()  # the reader is gone
            self.assertEqual(p.wait(timeout=20), 0)
            self.assertEqual(p.stderr.read(), b"")
            p.stderr.close()

    def test_refusals(self):
        with Machine("sim:8GiB") as m:
            p = m.comem("watch", "--socket", m.socket + ".nobody", "--count", "1")
            self.assertEqual(p.returncode, 1)
            self.assertIn("no coordinator answers", p.stderr)
            for args in (["--interval", "0"], ["--count", "0"], ["--frobnicate"]):
                self.assertEqual(m.comem("watch", *args).returncode, 2, args)


if __name__ == "__main__":
    unittest.main()
