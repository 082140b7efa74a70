"""`comem metrics` and `comemd --metrics`: the Prometheus text format, read strictly, with real figures."""
import os
import shutil
import signal
import subprocess
import threading
import time
import unittest

import prom_parse
from comem_cli import GiB, MiB, Machine


def one(fams, name, **labels):
    """The value of the single sample of family name whose labels include labels."""
    got = [v for n, lb, v in fams[name]["samples"] if all(lb.get(k) == str(x) for k, x in labels.items())]
    if len(got) != 1:
        raise AssertionError(f"{name} {labels}: {len(got)} samples")
    return got[0]


class Parser(unittest.TestCase):
    """The parser itself refuses what promtool refuses (a test that cannot fail proves nothing)."""

    def bad(self, text):
        with self.assertRaises(ValueError, msg=text):
            prom_parse.parse(text)

    def test_refusals(self):
        self.bad("# TYPE a gauge\na 1")  # no final newline
        self.bad("# TYPE a_total counter\na_total -1\n")
        self.bad("# TYPE a counter\na 1\n")  # not *_total
        self.bad("# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n")
        self.bad("# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na{x=\"2\"} 1\n")  # two groups
        self.bad("# TYPE a gauge\na{x=\"\\t\"} 1\n")
        self.bad("# TYPE a gauge\na{0x=\"1\"} 1\n")
        self.bad("# TYPE a gauge\na lots\n")
        self.bad("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n")
        self.bad("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n")
        prom_parse.parse("# HELP a x\n# TYPE a gauge\na{x=\"q\\\"\\\\\\n\"} 1e3\n")


class Metrics(unittest.TestCase):
    def setUp(self):
        self.m = Machine("sim:8GiB")
        self.addCleanup(self.m.close)

    def metrics(self):
        p = self.m.comem("metrics")
        self.assertEqual(p.returncode, 0, p.stderr)
        if shutil.which("promtool"):
            chk = subprocess.run(["promtool", "check", "metrics"], input=p.stdout, capture_output=True, text=True)
            self.assertEqual(chk.returncode, 0, chk.stdout + chk.stderr)
        return p.stdout, prom_parse.parse(p.stdout)

    def test_figures_match_the_ledger(self):
        w1 = self.m.worker("w1", GiB)
        self.m.worker("w2", 2 * GiB)
        text, fams = self.metrics()
        st = self.m.status()
        dev = st["devices"][0]
        self.assertEqual(one(fams, "comem_up"), 1)
        self.assertEqual(one(fams, "comem_device_capacity_bytes", device=0), 8 * GiB)
        for key, metric in (("free", "free"), ("granted", "granted"), ("unattributed", "unattributed"),
                            ("attributed", "attributed"), ("resident", "resident")):
            self.assertEqual(one(fams, f"comem_device_{metric}_bytes", device=0), dev[key], key)
        self.assertEqual(one(fams, "comem_device_resident_bytes", device=0), 3 * GiB)
        self.assertEqual(one(fams, "comem_device_reserve_bytes", device=0), dev["reserve"]["published"])
        self.assertEqual(one(fams, "comem_session_resident_bytes", process="w1", pid=w1.pid), GiB)
        self.assertEqual(one(fams, "comem_holder_resident_bytes", process="w2", holder="models"), 2 * GiB)
        self.assertEqual(one(fams, "comem_holder_granted_bytes", process="w2", holder="models"), 0)
        self.assertEqual(one(fams, "comem_admissions_total"), 2)
        self.assertEqual(one(fams, "comem_admission_refusals_total"), 0)
        self.assertEqual(fams["comem_admission_latency_seconds"]["type"], "histogram")
        count = [v for n, lb, v in fams["comem_admission_latency_seconds"]["samples"] if n.endswith("_count")]
        self.assertEqual(count, [2])
        self.assertNotIn("comem-metrics", text)  # the observers (this command) are left out

        # A release moves the ask counters; a death moves sessions_died.
        p = self.m.comem("release", "--holder", "models", "--pid", str(w1.pid))
        self.assertEqual(p.returncode, 2)  # one target at a time
        p = self.m.comem("release", "--pid", str(w1.pid))
        self.assertEqual(p.returncode, 0, p.stderr)
        _, fams = self.metrics()
        self.assertEqual(one(fams, "comem_release_asks_total"), 1)
        self.assertEqual(one(fams, "comem_release_freed_bytes_total"), GiB)
        self.assertEqual(one(fams, "comem_release_asked_bytes_total"), GiB)
        self.assertEqual(one(fams, "comem_session_resident_bytes", process="w1"), 0)
        died = self.m.workers[1]
        died.send_signal(signal.SIGKILL)
        died.wait()
        self.m.wait_for(lambda: len([p for p in self.m.status()["devices"][0]["processes"]
                                     if p["name"] == "w2"]) == 0, "w2's session to end")
        _, fams = self.metrics()
        self.assertEqual(one(fams, "comem_sessions_died_total"), 1)
        self.assertEqual(one(fams, "comem_device_resident_bytes", device=0), 0)
        # Closing the client and exiting at once says GOODBYE: an end, not a death.
        for i in range(5):
            w = self.m.worker(f"quitter{i}", GiB)
            w.stdin.close()
            w.wait()
        self.m.wait_for(lambda: not any(p["name"].startswith("quitter")
                                        for p in self.m.status()["devices"][0]["processes"]), "the quitters' ends")
        _, fams = self.metrics()
        self.assertEqual(one(fams, "comem_sessions_died_total"), 1)
        self.assertGreaterEqual(one(fams, "comem_sessions_ended_total"), 6)

    def test_label_values_are_escaped(self):
        odd = 'we"ird\\na me'  # a quote, a backslash and a space in a process name
        self.m.worker(odd, GiB)
        text, fams = self.metrics()
        self.assertIn('process="we\\"ird\\\\na me"', text)
        self.assertEqual(one(fams, "comem_session_resident_bytes", process=odd), GiB)

    def test_no_coordinator(self):
        p = self.m.comem("metrics", "--socket", self.m.socket + ".nobody")
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stdout, "")
        self.assertIn("no coordinator answers", p.stderr)


def read(path):
    with open(path) as f:
        return f.read()


class MetricsFile(unittest.TestCase):
    def test_comemd_keeps_the_file_current_and_whole(self):
        m = Machine("sim:8GiB", metrics_interval=0.1)
        self.addCleanup(m.close)
        path = m.metrics_path
        m.wait_for(lambda: os.path.exists(path), "the metrics file")
        m.worker("w1", GiB)
        reads = 0
        end = time.monotonic() + 1.5
        while time.monotonic() < end:  # every read sees one whole file, never half of one
            fams = prom_parse.parse(read(path))
            self.assertIn("comem_admission_latency_seconds", fams)
            reads += 1
        self.assertGreater(reads, 10)
        m.wait_for(lambda: one(prom_parse.parse(read(path)), "comem_admissions_total") == 1,
                   "the file to show the admission")
        fams = prom_parse.parse(read(path))
        self.assertEqual(one(fams, "comem_session_resident_bytes", process="w1"), GiB)
        m.daemon.terminate()
        self.assertEqual(m.daemon.wait(timeout=10), 0)
        # stopped (not while it writes, every 0.1 s): no temporary file left beside the file
        self.assertEqual(os.listdir(os.path.dirname(path)), ["comem.prom"])
        self.assertEqual(one(prom_parse.parse(read(path)), "comem_up"), 0)  # stopped: down, not stale figures

    def test_the_file_is_private_and_nothing_planted_is_followed(self):
        m = Machine("sim:8GiB", metrics_interval=0.1)
        self.addCleanup(m.close)
        path = m.metrics_path
        m.wait_for(lambda: os.path.exists(path), "the metrics file")
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o640)  # not every user's to read
        # a link planted at the path: comemd leaves it (and what it points to) alone, and says so
        victim = os.path.join(m.dir.name, "victim")
        with open(victim, "w") as f:
            f.write("precious\n")
        said = []  # comemd's stderr, line by line, while it runs

        def listen():
            for line in m.daemon.stderr:
                said.append(line)
        reader = threading.Thread(target=listen, daemon=True)
        reader.start()
        # Planted in one step (no moment without a file, when comemd could write one first), maybe while
        # comemd writes its next file: the file it has just written must not replace the link either.
        os.symlink(victim, os.path.join(m.dir.name, "link"))
        os.replace(os.path.join(m.dir.name, "link"), path)
        m.wait_for(lambda: "not this user's regular file" in "".join(said), "comemd to say it leaves the link")
        time.sleep(0.5)  # several more intervals: still left alone
        self.assertTrue(os.path.islink(path))
        self.assertEqual(os.readlink(path), victim)
        self.assertEqual(read(victim), "precious\n")
        os.unlink(path)  # gone: written again
        m.wait_for(lambda: os.path.isfile(path) and not os.path.islink(path), "the metrics file again")
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o640)
        m.daemon.terminate()
        m.daemon.wait(timeout=10)
        reader.join(timeout=10)
        self.assertEqual(sorted(os.listdir(os.path.dirname(path))), ["comem.prom"])  # no temporary left
        self.assertEqual("".join(said).count("not this user's regular file"), 1)  # said once, not every interval

    def test_bad_interval(self):
        with Machine("sim:8GiB") as m:
            d = subprocess.run([os.path.join(os.path.dirname(m.daemon.args[0]), "comemd"), "--metrics", "x.prom",
                                "--metrics-interval", "0"], env=m.env, capture_output=True, text=True, timeout=10)
            self.assertEqual(d.returncode, 2)


if __name__ == "__main__":
    unittest.main()
