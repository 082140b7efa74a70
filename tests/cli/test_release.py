"""`comem release` by holder, pid, process, entry or everyone, per device, with receipts (scenario F19)."""
import json
import unittest

from comem_cli import GiB, MiB, Machine, run


def resident(st, name):
    return sum(p["resident"] for p in st["devices"][0]["processes"] if p["name"] == name)


class Release(unittest.TestCase):
    def setUp(self):
        self.m = Machine("sim:8GiB")
        self.addCleanup(self.m.close)
        self.a = self.m.worker("a", 2 * GiB)
        self.b = self.m.worker("b", GiB)

    def release(self, *args):
        p = self.m.comem("release", *args, "--json")
        out = json.loads(p.stdout) if p.stdout else None
        return p.returncode, out, p.stderr

    def test_by_pid_with_bytes_prints_the_receipt(self):
        rc, out, err = self.release("--pid", self.a.pid, "--bytes", "512MiB")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out["schema"], 1)
        self.assertEqual(out["target"], {"holder": None, "pid": self.a.pid, "process": None, "entry": None,
                                         "all": False, "device": None})
        self.assertEqual(out["asked"], 512 * MiB)
        self.assertEqual(out["freed"], 512 * MiB)  # whole 64 MiB modules: exactly what was asked
        [ask] = out["asks"]
        self.assertEqual((ask["process"], ask["holder"], ask["status"], ask["pid"], ask["device"]),
                         ("a", "models", "ok", self.a.pid, 0))
        self.assertEqual(ask["resident_after"], 2 * GiB - 512 * MiB)
        st = self.m.status()
        self.assertEqual((resident(st, "a"), resident(st, "b")), (2 * GiB - 512 * MiB, GiB))

    def test_by_holder_reaches_every_process_largest_first(self):
        p = self.m.comem("release", "--holder", "models", "--bytes", "2.5GiB")
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual([ln.split()[1] for ln in lines[:-1]], ["a", "b"])  # a holds more: asked first
        self.assertIn("released 2.50 GiB from holder models (2 of 2 ask(s) answered)", lines[-1])
        st = self.m.status()
        self.assertEqual((resident(st, "a"), resident(st, "b")), (0, GiB // 2))

    def test_all_and_the_process_alias(self):
        rc, out, _ = self.release("--process", "b")
        self.assertEqual((rc, out["freed"]), (0, GiB))
        rc, out, _ = self.release("--all", "--device", "0")
        self.assertEqual((rc, out["freed"], out["target"]["all"], out["target"]["device"]), (0, 2 * GiB, True, 0))
        st = self.m.status()
        self.assertEqual((resident(st, "a"), resident(st, "b")), (0, 0))
        rc, out, _ = self.release("--all")  # nothing held: nothing to do, and that is success
        self.assertEqual((rc, out["freed"], out["asks"]), (0, 0, []))

    def test_busy_holder_keeps_its_bytes_and_says_so(self):
        self.m.busy(self.a)
        rc, out, _ = self.release("--pid", self.a.pid)
        self.assertEqual(rc, 1)
        self.assertEqual((out["freed"], out["asks"][0]["status"]), (0, "busy"))
        self.assertEqual(resident(self.m.status(), "a"), 2 * GiB)

    def test_entry_and_device_filters(self):
        st = self.m.status()
        entry = [p for p in st["devices"][0]["processes"] if p["name"] == "b"][0]["holders"][0]["entries"][0]["id"]
        rc, out, _ = self.release("--entry", entry)
        self.assertEqual((rc, out["freed"], out["asks"][0]["entry"]), (0, GiB, entry))
        p = self.m.comem("release", "--all", "--device", "3")
        self.assertEqual(p.returncode, 0)  # no such device: nothing held there
        p = self.m.comem("release", "--holder", "nobody")
        self.assertEqual(p.returncode, 1)
        self.assertIn("no holder 'nobody' in the ledger", p.stderr)

    def test_refusals_and_global_flags(self):
        for args in ([], ["--pid", "1", "--all"], ["--holder"], ["--all", "--bytes", "lots"], ["--pid", "x"]):
            p = run("release", *args, env=self.m.env)
            self.assertEqual(p.returncode, 2, args)
            self.assertEqual(p.stdout, "")
        # --socket and --json before the command, --help anywhere
        p = run("--socket", self.m.socket, "--json", "release", "--pid", self.b.pid)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["freed"], GiB)
        p = run("release", "--all", "--help")
        self.assertEqual(p.returncode, 0)
        self.assertIn("usage: comem release", p.stdout)


if __name__ == "__main__":
    unittest.main()
