"""Host RAM as a ledger device (issue 23 items 1, 2, 4): real processes holding real RAM on a bounded budget.

comemd runs with ``--ram 4GiB``: host RAM is its last device, with a capacity of 4 GiB and a free figure of
4 GiB minus the resident sets of the processes in the ledger, so these tests move a few GiB of real memory
and the machine is never near its own limit. Each worker (procs/ram_holder.py) registers a RAM cache on
``comem.HOST_RAM`` whose bytes are a real bytearray of the size it registers; its release callback drops
them. The assertions are on values the coordinator and the kernel report (bytes, counts), never on timing.
"""

import os
import shutil
import re
import signal
import subprocess
import tempfile
import time
import unittest

import comem
from support import BIN_DIR, GiB, MiB, Machine, wait_for

BUDGET = 4 * GiB
FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "hostmem")


def ram_device(status):
    """The host RAM device of a status snapshot (the last device, the one with host_ram figures)."""
    dev = status["devices"][-1]
    assert dev["host_ram"] is not None, "the last device is not host RAM"
    return dev


def proc(dev, name):
    return next((p for p in dev["processes"] if p["name"] == name), None)


def holder(dev, process, name):
    p = proc(dev, process)
    return next((h for h in p["holders"] if h["name"] == name), None) if p else None


class HostRam(unittest.TestCase):
    def setUp(self):
        self.m = Machine(extra=["--ram", "4GiB"])
        self.m.__enter__()

    def tearDown(self):
        self.m.__exit__(None, None, None)

    def test_device_and_constant(self):
        st = self.m.status()
        self.assertEqual(len(st["devices"]), 2, "one simulated card, then host RAM")
        dev = ram_device(st)
        self.assertEqual(dev["index"], 1)
        self.assertEqual(dev["name"], "host RAM")
        self.assertEqual(dev["capacity"], BUDGET)
        self.assertEqual(dev["host_ram"]["budget"], BUDGET)
        self.assertEqual(dev["reserve"]["published"], 0, "a bounded budget keeps no reserve of its own")
        self.assertEqual(comem.HOST_RAM, 15)
        # Device 1 as a process names it is its second GPU, never host RAM.
        with comem.Client("probe1", socket=self.m.socket, require_coordinator=True) as c:
            with self.assertRaises(comem.NoDevice):
                c.add_holder("x", device=1)
            c.add_holder("y", device=comem.HOST_RAM)
            self.assertEqual([h["name"] for h in proc(ram_device(self.m.status()), "probe1")["holders"]], ["y"])

    def test_host_ram_keeps_no_booking_stock(self):
        # A stock is room set aside for a session's next admissions, booked by the card's rule in shared
        # memory; host RAM's admissions follow another rule, so they always go to the coordinator.
        a = self.m.child("ram_holder.py", "a")
        for _ in range(3):
            g = a.ask("admit", mib=16)
            self.assertTrue(g.get("granted"), g)
            # a stock would be given at the end of the turn that granted, and kept for 100 ms
            for _ in range(5):
                dev = ram_device(self.m.status())
                self.assertEqual((dev["stock"], dev["booking_limit"]), (0, -1))
                time.sleep(0.005)
        self.assertEqual(holder(dev, "a", "loads")["resident"], 48 * MiB)

    def test_admission_asks_the_idle_cache(self):
        a = self.m.child("ram_holder.py", "a")
        b = self.m.child("ram_holder.py", "b")
        c = self.m.child("ram_holder.py", "c")
        a.ask("cache", holder_name="ram-cache", entry="a0", mib=1536)
        b.ask("cache", holder_name="ram-cache", entry="b0", mib=1536)
        a.ask("busy", on=True)  # a computes: only b may be asked
        dev = ram_device(self.m.status())
        self.assertEqual(proc(dev, "a")["resident"], 1536 * MiB)
        self.assertEqual(holder(dev, "b", "ram-cache")["resident"], 1536 * MiB)
        rss_b = b.ask("rss")["rss"]
        self.assertGreaterEqual(rss_b, 1536 * MiB)
        # 4 GiB - 3 GiB of caches - three interpreters: 1 GiB does not fit without a release.
        self.assertLess(dev["free"], 1024 * MiB)
        g = c.ask("admit", mib=1024, timeout=20)
        self.assertTrue(g.get("granted"), g)
        self.assertEqual(g["n_asked"], 1)
        self.assertEqual(g["freed"], 1536 * MiB, "the receipt: b's whole entry")
        self.assertLess(g["free_before"], 1024 * MiB)
        self.assertGreaterEqual(g["free_after"], 1024 * MiB)
        asks = b.ask("asks")["asks"]
        self.assertEqual(len(asks), 1)
        self.assertEqual((asks[0]["holder"], asks[0]["kind"]), ("ram-cache", "bytes"))
        self.assertEqual([p[0] for p in asks[0]["plan"]], ["b0"])
        self.assertEqual(a.ask("asks")["asks"], [], "a busy process is not asked")
        # b really gave its memory back to the system, and the ledger agrees.
        self.assertLess(b.ask("rss")["rss"], rss_b - 1400 * MiB)
        dev = ram_device(self.m.status())
        self.assertEqual(holder(dev, "b", "ram-cache")["resident"], 0)
        self.assertEqual(holder(dev, "b", "ram-cache")["receipts_contradicted"], 0)
        self.assertEqual((dev["host_ram"]["asks"], dev["host_ram"]["bytes_freed"]), (1, 1536 * MiB))
        self.assertEqual(dev["host_ram"]["bytes_asked"], asks[0]["bytes"])
        self.assertEqual(proc(dev, "c")["resident"], 1024 * MiB)
        self.assertEqual(proc(dev, "a")["resident"], 1536 * MiB)
        self.m.check_ledger(self)

    def test_a_hostile_node_name_falls_back(self):
        # ComfyUI's RAM cache names entries by the node a prompt (anyone's HTTP post) named: a name the
        # library refuses is registered as "output", never dropped and never stopping the census.
        from comem.comfy.ram import RamCache
        with comem.Client("cache", socket=self.m.socket, require_coordinator=True) as c:
            h = c.add_holder("ram-cache", device=comem.HOST_RAM)
            with self.assertRaises(ValueError):
                h.add_entry("Evil\nnode\x00#1", MiB, MiB)
            e = RamCache._add(h, "Evil\nnode\x00#1", 2 * MiB)
            self.assertEqual((e.name, e.size, e.resident), ("output", 2 * MiB, 2 * MiB))
            self.assertEqual(RamCache._add(h, "EmptyImage #1", MiB).name, "EmptyImage #1")
            names = [x["name"] for x in holder(ram_device(self.m.status()), "cache", "ram-cache")["entries"]]
            self.assertEqual(sorted(names), ["EmptyImage #1", "output"])

    def test_killed_mid_allocation_gives_its_ram_back(self):
        c = self.m.child("ram_holder.py", "c")
        g = c.ask("stall", mib=1024)  # granted, 1 GiB allocated, the grant never done
        self.assertEqual(g["bytes"], 1024 * MiB)
        dev = ram_device(self.m.status())
        self.assertEqual(dev["granted"], 1024 * MiB)
        free_before = wait_for(lambda: (lambda d: d["free"] if d["free"] < BUDGET - 1024 * MiB else None)(
            ram_device(self.m.status())))
        self.assertIsNotNone(free_before, "the allocation shows in the reading")
        os.kill(c.pid, signal.SIGKILL)
        c.proc.wait()
        dev = wait_for(lambda: (lambda d: d if proc(d, "c") is None else None)(ram_device(self.m.status())))
        self.assertIsNotNone(dev, "the killed process left the ledger")
        self.assertEqual(dev["granted"], 0)
        self.assertGreaterEqual(dev["free"], free_before + 1024 * MiB)
        self.assertGreaterEqual(self.m.status()["counters"]["sessions_died"], 1)
        self.m.check_ledger(self)

    def test_cheapest_to_get_back_is_asked_first(self):
        # By the card's key a's smaller entry would go first (both are wholly resident and unreferenced,
        # and the smaller one ranks first); on host RAM the tier comes before it: b's cache entry is
        # cheaper to get back than a's copy of a file, and a's other entry (no tier) goes last.
        a = self.m.child("ram_holder.py", "a")
        b = self.m.child("ram_holder.py", "b")
        c = self.m.child("ram_holder.py", "c")
        a.ask("cache", holder_name="offload", entry="a-file", mib=512, tier="file")
        a.ask("cache", holder_name="weights", entry="a-other", mib=512)
        b.ask("cache", holder_name="ram-cache", entry="b-cache", mib=1536, tier="cache")
        dev = ram_device(self.m.status())
        self.assertLess(dev["free"], 1536 * MiB)
        g = c.ask("admit", mib=1536, timeout=20)  # short by less than b's cache: one ask, to b
        self.assertTrue(g.get("granted"), g)
        self.assertEqual(g["n_asked"], 1)
        self.assertEqual([x["holder"] for x in b.ask("asks")["asks"]], ["ram-cache"])
        self.assertEqual(a.ask("asks")["asks"], [])
        self.assertLess(ram_device(self.m.status())["free"], 1536 * MiB)
        g = c.ask("admit", mib=1536, timeout=20)  # now a's copy of a file goes before its untiered entry
        self.assertTrue(g.get("granted"), g)
        self.assertEqual([x["holder"] for x in a.ask("asks")["asks"]][:1], ["offload"])
        dev = ram_device(self.m.status())
        self.assertEqual(holder(dev, "a", "offload")["resident"], 0)
        self.m.check_ledger(self)

    def test_a_lying_receipt_is_contradicted_and_buys_nothing(self):
        a = self.m.child("ram_holder.py", "a")
        b = self.m.child("ram_holder.py", "b")
        c = self.m.child("ram_holder.py", "c")
        a.ask("cache", holder_name="ram-cache", entry="a0", mib=1536)
        b.ask("cache", holder_name="ram-cache", entry="b0", mib=1536, mode="lie")
        a.ask("busy", on=True)
        rss_b = b.ask("rss")["rss"]
        g = c.ask("admit", mib=1400, timeout=5)  # short by a few hundred MiB: a receipt large enough to check
        self.assertTrue(g.get("refused"), f"a lie must not buy room: {g}")
        self.assertGreater(g["short_by"], 0)
        asks = b.ask("asks")["asks"]
        self.assertGreaterEqual(len(asks), 1)
        self.assertGreaterEqual(b.ask("rss")["rss"], rss_b - 64 * MiB, "the liar freed nothing")
        dev = wait_for(lambda: (lambda d: d if holder(d, "b", "ram-cache")["receipts_contradicted"] else None)(
            ram_device(self.m.status())))
        self.assertIsNotNone(dev, "the receipt was held up against b's RSS")
        self.assertGreaterEqual(holder(dev, "b", "ram-cache")["receipts_contradicted"], 1)
        self.assertEqual(proc(dev, "c")["resident"], 0)
        self.m.check_ledger(self)

    def test_unregistered_ram_is_shown_and_warned(self):
        a = self.m.child("ram_holder.py", "a")
        a.ask("cache", holder_name="ram-cache", entry="a0", mib=512)
        a.ask("grow", mib=1024)  # real RAM outside anything registered

        def grown():
            st = self.m.status()
            p = proc(ram_device(st), "a")
            return st if p and p["unregistered"] >= 1024 * MiB - 300 * MiB else None

        st = wait_for(grown)
        self.assertIsNotNone(st, f"a's growth shows as unregistered RAM: {proc(ram_device(self.m.status()), 'a')}")
        p = proc(ram_device(st), "a")
        self.assertEqual(p["resident"], 512 * MiB, "what it registered stays what it registered")
        self.assertLessEqual(p["unregistered"], 1024 * MiB + 300 * MiB)
        self.assertGreaterEqual(ram_device(st)["unregistered"], p["unregistered"])
        self.assertTrue(any(f"(pid {a.pid})" in w and "host RAM unregistered" in w for w in st["warnings"]),
                        st["warnings"])
        said = wait_for(lambda: f"'a' (pid {a.pid}) holds" in self.m.comemd_log(), timeout=20)
        self.assertTrue(said, "the growth is said in the log once it stays:\n" + self.m.comemd_log())
        self.assertEqual(self.m.comemd_log().count(f"'a' (pid {a.pid}) holds"), 1, "said once")
        self.m.check_ledger(self)


    def test_registered_bytes_are_not_counted_twice(self):
        # 2.5 GiB allocated first and registered after: until it is registered it is the process's floor
        # (its RSS beyond its entries); registering it moves it from the floor to the entry, or floor and
        # entry together (5 GiB) would not fit the 4 GiB budget and the registration would be refused.
        a = self.m.child("ram_holder.py", "a")
        a.ask("late", holder_name="ram-cache", entry="a0", mib=2560)
        seen = wait_for(lambda: (proc(ram_device(self.m.status()), "a") or {}).get("context_floor", 0) >= 2500 * MiB)
        self.assertTrue(seen, "the reading saw the allocation as a's floor")
        a.ask("census", entry="a0", mib=2560)
        p = proc(ram_device(self.m.status()), "a")
        self.assertEqual(p["resident"], 2560 * MiB)
        self.assertLess(p["context_floor"], 300 * MiB)
        b = self.m.child("ram_holder.py", "b")
        b.ask("cache", holder_name="ram-cache", entry="b0", mib=1024)  # 2.5 + 1 GiB of entries on 4 GiB
        self.assertEqual(proc(ram_device(self.m.status()), "b")["resident"], 1024 * MiB)
        self.m.check_ledger(self)

    def test_a_pin_must_fit_host_ram(self):
        a = self.m.child("ram_holder.py", "a")
        a.ask("cache", holder_name="ram-cache", entry="a0", mib=3072)
        b = self.m.child("ram_holder.py", "b")
        free = ram_device(self.m.status())["free"]
        self.assertLess(free, 1024 * MiB)
        r = b.ask("pin", holder_name="pins", mib=1024)  # far below the machine's pin ceiling, beyond host RAM
        self.assertTrue(r.get("refused"), r)
        self.assertGreater(r["short_by"], 0)
        self.assertLessEqual(r["short_by"], 1024 * MiB)
        self.assertEqual(self.m.status()["pins"]["total"], 0)
        self.assertTrue(b.ask("pin", holder_name="pins", mib=64).get("pinned"))
        self.assertEqual(self.m.status()["pins"]["total"], 64 * MiB)

    def test_status_and_metrics_show_host_ram(self):
        a = self.m.child("ram_holder.py", "a")
        a.ask("cache", holder_name="ram-cache", entry="a0", mib=512)

        def comem(*args):
            p = subprocess.run([os.path.join(BIN_DIR, "comem"), *args, "--socket", self.m.socket], env=self.m.env,
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
            return p.stdout

        text = comem("status")
        self.assertIn("device 1  host RAM  RAM-host", text)
        self.assertIn("a bounded budget of 4.00 GiB", text)
        self.assertRegex(text, rf"(?m)^  {a.pid}\s+a\s+worker\s+idle\s+\S+ \S+\s+512.00 MiB")
        self.assertIn("ram-cache", text)
        metrics = comem("metrics")
        self.assertIn(f'comem_host_ram_budget_bytes{{device="1",uuid="RAM-host",name="host RAM"}} {BUDGET}', metrics)
        m = re.search(r'comem_holder_resident_bytes\{device="1",[^}]*process="a"[^}]*holder="ram-cache"[^}]*\} (\d+)',
                      metrics)
        self.assertIsNotNone(m, metrics)
        self.assertEqual(int(m.group(1)), 512 * MiB)
        self.assertIn('comem_host_ram_release_asks_total{device="1",uuid="RAM-host",name="host RAM"} 0', metrics)
        watch = comem("watch", "--plain", "--count", "1")
        self.assertIn("device 1  host RAM", watch)
        self.assertRegex(watch, r"(?m)^  budget 4\.00 GiB  machine \S+ \S+ available of \S+ \S+  cgroup \S+.*  asks 0 \(0 B freed\)$")
        self.assertRegex(watch, rf"(?m)^  {a.pid}\s+a\s+worker\s+idle\s+512.00 MiB")
        self.assertRegex(watch, r"(?m)^\s+ram-cache\s+models\s+idle\s+512.00 MiB")
        self.assertRegex(metrics, r'comem_session_unregistered_bytes\{device="1",[^}]*process="a"[^}]*\} \d+')


class NoHostRam(unittest.TestCase):
    def test_off_by_default(self):
        with Machine() as m:
            self.assertEqual(len(m.status()["devices"]), 1, "without --ram the cards alone")
            self.assertIsNone(m.status()["devices"][0]["host_ram"])
            with comem.Client("x", socket=m.socket, require_coordinator=True) as c:
                with self.assertRaises(comem.NoDevice):
                    c.add_holder("ram-cache", device=comem.HOST_RAM)
                with self.assertRaises(comem.NoDevice):
                    c.admit(MiB, device=comem.HOST_RAM, timeout=5)


class HostRamCgroup(unittest.TestCase):
    """--ram machine in a fake /proc + /sys tree (COMEM_HOSTMEM_ROOT): a cgroup limit changed at run time."""

    def test_cgroup_limit_read_again(self):
        root = tempfile.mkdtemp(prefix="comem-hostram-")
        try:
            tree = os.path.join(root, "tree")
            shutil.copytree(os.path.join(FIXTURES, "v2"), tree)
            os.environ["COMEM_HOSTMEM_ROOT"] = tree
            try:
                with Machine(extra=["--ram", "machine"]) as m:
                    dev = ram_device(m.status())
                    # app.scope: memory.max 24 GiB, working set 10 GiB - 2 GiB inactive file = 8 GiB.
                    self.assertEqual(dev["host_ram"]["cgroup_limit"], 24 * GiB)
                    self.assertIsNone(dev["host_ram"]["budget"])
                    self.assertEqual(dev["capacity"], 24 * GiB)
                    self.assertEqual(dev["free"], 16 * GiB)
                    # ComfyUI's active RAM-cache headroom of 24 GiB: min(10, max(2, 2.4)) GB.
                    self.assertEqual(dev["reserve"]["published"], int(2.4 * GiB))
                    with open(os.path.join(tree, "sys/fs/cgroup/user.slice/app.scope/memory.max"), "w") as f:
                        f.write(str(12 * GiB))
                    dev = wait_for(lambda: (lambda d: d if d["free"] == 4 * GiB else None)(ram_device(m.status())))
                    self.assertIsNotNone(dev, f"the new limit is read: {ram_device(m.status())['free']}")
                    self.assertEqual(dev["host_ram"]["cgroup_limit"], 12 * GiB)
            finally:
                os.environ.pop("COMEM_HOSTMEM_ROOT", None)
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
