"""The pager through the binding, on the simulated backend ("sim"), and attached to a real comemd.

The simulated backend commits pages on the shared simulated card (2 MiB granularity), charged to
this process as cuMemCreate would be, so the card's own figures check the pager's. Pages are
32 MiB (the default page size, PAGE) throughout, unless a test says otherwise.
"""

import os
import unittest

from support import GiB, MiB, wait_for

import comem
from comem import errors
from test_binding import CONTEXT, FREE0, MachineCase, need

PAGE = 32 << 20  # the default page size


class PagerCase(MachineCase):

    def setUp(self):
        super().setUp()
        self.card = comem.SimCard(self.m.spec)
        self.addCleanup(self.card.close)
        self.p = self.pager()

    def pager(self):
        p = comem.Pager("sim", 0, sim_spec=self.m.spec)
        self.addCleanup(p.close)
        return p

    def allocated(self):
        return self.card.usage()[1]


class TestPager(PagerCase):

    def test_geometry_and_a_reservation_costs_nothing(self):
        p = self.p
        self.assertEqual((p.backend, p.device, p.granularity), ("sim", 0, 2 * MiB))
        v = p.vbar(100 * MiB)  # rounded up to whole pages, never clamped to the card
        self.assertEqual((v.page_size, v.pages, v.size, v.watermark, v.watermark_limit),
                         (PAGE, 4, 128 * MiB, 128 * MiB, 0))
        self.assertNotEqual(v.base, 0)
        small = p.vbar(10 * MiB, page_size=4 * MiB)
        self.assertEqual((small.page_size, small.pages, small.size), (4 * MiB, 3, 12 * MiB))
        huge = p.vbar(64 * GiB)  # eight times the card: only address space
        self.assertEqual(huge.pages, 64 * GiB // PAGE)
        self.assertEqual(p.vbars, [v, small, huge])
        self.assertEqual((p.usage, p.reclaimable, v.loaded_size), (0, 0, 0))
        self.assertEqual(v.residency(), b"\0" * 4)
        self.assertEqual(self.card.usage(), (CONTEXT, 0))  # the context the pager opened with, nothing more
        self.assertEqual(p.stats(), dict.fromkeys(comem.pager.STATS, 0))
        self.assertIn("4 pages", repr(v))
        self.assertIn("sim", repr(p))

    def test_fault_unpin_and_signatures(self):
        p = self.p
        v = p.vbar(4 * PAGE)
        s = v.fault(0, 2 * PAGE)
        self.assertIsInstance(s, bytes)
        self.assertEqual(len(s), 8)  # one 32-bit serial per page touched
        self.assertEqual(v.residency(), b"\3\3\0\0")  # resident and pinned
        self.assertEqual((v.loaded_size, p.usage, p.reclaimable), (2 * PAGE, 2 * PAGE, 0))
        self.assertEqual(self.card.usage(), (CONTEXT, 2 * PAGE))  # committed on the card, with a context
        self.assertEqual(self.card.read().free, FREE0 - CONTEXT - 2 * PAGE)
        # a range inside one page touches one page, a range across a boundary two
        self.assertEqual(v.fault(PAGE + 5, 10), s[4:])
        self.assertEqual(v.fault(PAGE - 1, 2), s)
        self.assertEqual(v.residency(), b"\3\3\0\0")
        v.unpin(PAGE + 5, 10)
        v.unpin(PAGE - 1, 2)
        v.unpin(0, 2 * PAGE)
        self.assertEqual(v.residency(), b"\1\1\0\0")
        self.assertEqual(p.reclaimable, 2 * PAGE)
        # Signatures change only when a page is committed again.
        self.assertEqual(v.fault(0, 2 * PAGE), s)
        v.unpin(0, 2 * PAGE)
        self.assertEqual(p.stats()["commits"], 2)
        self.assertEqual(p.free_memory(PAGE), PAGE)  # takes the page just below the watermark
        self.assertEqual(v.residency(), b"\1\0\0\0")
        self.assertEqual(v.watermark, PAGE)
        self.assertEqual(self.allocated(), PAGE)
        v.prioritize()
        s2 = v.fault(0, 2 * PAGE)
        self.assertEqual(s2[:4], s[:4])
        self.assertNotEqual(s2[4:], s[4:])
        v.unpin(0, 2 * PAGE)
        self.assertEqual(p.stats()["commits"], 3)
        # unpin never goes below zero
        v.unpin(0, 4 * PAGE)
        self.assertEqual(v.residency(), b"\1\1\0\0")
        st = p.stats()
        self.assertEqual((st["faults"], st["offloaded"], st["evictions"]), (5, 0, 1))

    def test_offloaded_past_the_watermark(self):
        p = self.p
        v = p.vbar(4 * PAGE)
        v.fault(0, 4 * PAGE)
        v.unpin(0, 4 * PAGE)
        self.assertEqual(p.free_memory(2 * PAGE), 2 * PAGE)
        self.assertEqual(v.watermark, 2 * PAGE)
        before = self.allocated()
        self.assertIsNone(v.fault(3 * PAGE, MiB))  # above the watermark: stream it instead
        self.assertIsNone(v.fault(PAGE, PAGE + 1))  # a range that ends above it too
        self.assertEqual(self.allocated(), before)  # ...and nothing was allocated for it
        self.assertEqual(v.residency(), b"\1\1\0\0")  # nor pinned
        st = p.stats()
        self.assertEqual((st["faults"], st["offloaded"]), (3, 2))
        self.assertIsNotNone(v.fault(0, 2 * PAGE))  # below it: resident
        v.unpin(0, 2 * PAGE)
        v.prioritize()  # raises the watermark again
        self.assertEqual(v.watermark, 4 * PAGE)
        self.assertIsNotNone(v.fault(3 * PAGE, MiB))
        v.unpin(3 * PAGE, MiB)
        self.assertEqual(v.residency(), b"\1\1\0\1")

    def test_priority_order(self):
        p = self.p
        a = p.vbar(2 * PAGE)
        b = p.vbar(2 * PAGE)  # the most recently created wins: evicted last
        for v in (a, b):
            v.fault(0, 2 * PAGE)
            v.unpin(0, 2 * PAGE)
        self.assertEqual(p.free_memory(PAGE), PAGE)
        self.assertEqual((a.residency(), b.residency()), (b"\1\0", b"\1\1"))
        a.prioritize()
        self.assertEqual(p.free_memory(PAGE), PAGE)
        self.assertEqual((a.residency(), b.residency()), (b"\1\0", b"\1\0"))
        a.fault(0, 2 * PAGE)
        a.unpin(0, 2 * PAGE)
        b.prioritize()
        a.deprioritize()  # the first to be evicted, whatever came after
        b.fault(0, 2 * PAGE)
        b.unpin(0, 2 * PAGE)
        self.assertEqual(p.free_memory(2 * PAGE), 2 * PAGE)
        self.assertEqual((a.residency(), b.residency()), (b"\0\0", b"\1\1"))
        # pinned pages are never evicted, and eviction goes on to the next VBAR
        b.fault(0, PAGE)
        self.assertEqual(p.free_memory(4 * PAGE), PAGE)
        self.assertEqual(b.residency(), b"\3\0")
        self.assertEqual(p.usage, PAGE)

    def test_watermark_and_its_limit(self):
        p = self.p
        v = p.vbar(4 * PAGE)
        v.fault(0, 4 * PAGE)
        v.unpin(0, 4 * PAGE)
        v.watermark_limit = PAGE + 1  # in whole pages, rounded up
        self.assertEqual(v.watermark_limit, 2 * PAGE)
        self.assertEqual(p.reclaimable, 2 * PAGE)  # only what lies above the limit
        self.assertEqual(p.free_memory(4 * PAGE), 2 * PAGE)
        self.assertEqual((v.watermark, v.residency()), (2 * PAGE, b"\1\1\0\0"))
        self.assertEqual(v.free_memory(PAGE), 0)
        p.reset_watermark_limits()
        self.assertEqual(v.watermark_limit, 0)
        self.assertEqual(v.free_memory(PAGE), PAGE)
        self.assertEqual(v.residency(), b"\1\0\0\0")
        v.prioritize()
        v.fault(0, 4 * PAGE)
        v.unpin(0, 4 * PAGE)
        # the application's own watermark is not bounded by the limit, and evicts above it
        v.watermark_limit = 3 * PAGE
        v.watermark = PAGE
        self.assertEqual((v.watermark, v.residency(), p.usage), (PAGE, b"\1\0\0\0", PAGE))
        v.watermark = 0
        self.assertEqual((v.watermark, v.loaded_size, self.allocated()), (0, 0, 0))
        self.assertIsNone(v.fault(0, 1))
        v.watermark = 10 * PAGE  # at most every page
        self.assertEqual(v.watermark, 4 * PAGE)

    def test_write_and_read(self):
        v = self.p.vbar(2 * PAGE)
        v.fault(0, 2 * PAGE)
        data = os.urandom(4096)
        v.write(PAGE - 100, data)  # across a page boundary
        self.assertEqual(v.read(PAGE - 100, 4096), data)
        buf = bytearray(b"abc")
        v.write(0, buf)
        v.write(3, memoryview(b"defg")[1:])
        self.assertEqual(v.read(0, 6), b"abcefg")
        v.unpin(0, 2 * PAGE)
        self.p.free_memory(PAGE)  # the second page goes
        with self.assertRaises(comem.NotFound):
            v.write(PAGE + 1, b"x")
        with self.assertRaises(comem.NotFound):
            v.read(PAGE - 100, 4096)
        self.assertEqual(v.read(0, 6), b"abcefg")  # the first page kept its bytes
        with self.assertRaises(ValueError):
            v.write(2 * PAGE - 1, b"xy")
        with self.assertRaises(ValueError):
            v.read(2 * PAGE, 1)
        for bad in ("text", 5, None, [1, 2]):
            with self.subTest(data=bad):
                with self.assertRaises(TypeError):
                    v.write(0, bad)

    def test_budget_deficit_is_the_documented_formula(self):
        p = self.p
        p.set_device_poll(256 * MiB, 0)  # read the device at every call
        local_total = self.card.read(local=True).total

        def formula(size, extra=0):
            free = self.card.read().free
            simple = p.usage + size + p.simple_headroom - local_total
            delta = 256 * MiB - free + size
            return max(simple, delta) + extra

        self.assertEqual(p.simple_headroom, 256 * MiB)
        for size in (0, GiB):
            self.assertEqual(p.budget_deficit(size), formula(size))
        v = p.vbar(8 * PAGE)
        v.fault(0, 8 * PAGE)
        other = self.child("other")
        other.ask("fill", mib=6 * 1024)  # the device term now dominates
        for size in (0, PAGE, GiB):
            self.assertEqual(p.budget_deficit(size), formula(size))
        self.assertGreater(p.budget_deficit(GiB), 0)
        p.simple_headroom = 7 * GiB  # and now the simple term
        self.assertEqual(p.simple_headroom, 7 * GiB)
        for size in (0, GiB):
            self.assertEqual(p.budget_deficit(size), formula(size))
        p.set_extra_headroom(100 * MiB)
        self.assertEqual(p.budget_deficit(0), formula(0, extra=100 * MiB))
        p.set_device_poll(512 * MiB, 0)
        p.set_extra_headroom(0)
        p.simple_headroom = 0
        self.assertEqual(p.budget_deficit(0), 512 * MiB - self.card.read().free)

    def test_faults_evict_for_the_deficit(self):
        p = self.p
        p.set_device_poll(256 * MiB, 0)
        old = p.vbar(32 * PAGE)
        old.fault(0, 32 * PAGE)
        old.unpin(0, 32 * PAGE)
        other = self.child("other")
        free = FREE0 - CONTEXT - 32 * PAGE
        other.ask("fill", mib=(free - CONTEXT - 256 * MiB - 4 * PAGE) // MiB)  # leaves 4 pages of headroom
        new = p.vbar(8 * PAGE)  # the most recent: old pages go first
        self.assertIsNotNone(new.fault(0, 8 * PAGE))
        self.assertEqual(new.loaded_size, 8 * PAGE)
        self.assertEqual(old.loaded_size, 28 * PAGE)  # 4 pages were evicted to keep the headroom
        self.assertEqual(self.card.read().free, 256 * MiB)
        self.assertGreater(p.stats()["evictions"], 0)

    def test_the_kept_pool(self):
        p = self.p
        self.assertEqual((p.keep, p.kept), (0, 0))  # off by default
        p.keep = 2 * PAGE
        v = p.vbar(3 * PAGE)
        v.fault(0, 3 * PAGE)
        v.unpin(0, 3 * PAGE)
        self.assertEqual(v.free_memory(3 * PAGE), 3 * PAGE)
        self.assertEqual((p.usage, p.kept), (0, 2 * PAGE))  # two kept, the third released
        self.assertEqual(self.allocated(), 2 * PAGE)  # kept memory is still this process's on the card
        self.assertEqual(p.stats()["kept"], 2)
        v.prioritize()
        v.fault(0, 3 * PAGE)
        v.unpin(0, 3 * PAGE)
        self.assertEqual((p.stats()["reused"], p.kept, self.allocated()), (2, 0, 3 * PAGE))
        v.free_memory(PAGE)
        p.keep = 0  # releases what is kept
        self.assertEqual((p.keep, p.kept, self.allocated()), (0, 0, 2 * PAGE))
        with self.assertRaises(ValueError):
            p.keep = -1
        with self.assertRaises(TypeError):
            p.keep = 1.5

    def test_destroy_and_close(self):
        p = self.p
        v = p.vbar(2 * PAGE)
        w = p.vbar(2 * PAGE)
        v.fault(0, 2 * PAGE)  # destroy ignores pins
        w.fault(0, PAGE)
        v.destroy()
        v.destroy()
        self.assertEqual(p.vbars, [w])
        self.assertEqual((p.usage, self.allocated()), (PAGE, PAGE))
        calls = {"fault": lambda: v.fault(0, 1), "unpin": lambda: v.unpin(0, 1), "prioritize": v.prioritize,
                 "deprioritize": v.deprioritize, "watermark": lambda: v.watermark,
                 "set watermark": lambda: setattr(v, "watermark", 0), "limit": lambda: v.watermark_limit,
                 "set limit": lambda: setattr(v, "watermark_limit", 0), "free_memory": lambda: v.free_memory(1),
                 "loaded_size": lambda: v.loaded_size, "residency": v.residency,
                 "write": lambda: v.write(0, b"x"), "read": lambda: v.read(0, 1)}
        for what, call in calls.items():
            with self.subTest(destroyed=what):
                with self.assertRaises(comem.Error) as cm:
                    call()
                self.assertEqual(cm.exception.status, errors.ECLOSED)
        p.close()
        p.close()
        self.assertEqual(self.allocated(), 0)  # every page went with the pager
        pcalls = {"vbar": lambda: p.vbar(PAGE), "usage": lambda: p.usage, "stats": p.stats,
                  "free_memory": lambda: p.free_memory(1), "granularity": lambda: p.granularity,
                  "budget_deficit": p.budget_deficit, "reclaimable": lambda: p.reclaimable,
                  "simple_headroom": lambda: p.simple_headroom, "holder": lambda: p.holder,
                  "attach": lambda: p.attach(self.client()), "vbar of the closed pager": lambda: w.fault(0, 1)}
        for what, call in pcalls.items():
            with self.subTest(closed=what):
                with self.assertRaises(comem.Error) as cm:
                    call()
                self.assertEqual(cm.exception.status, errors.ECLOSED)
        with comem.Pager("sim", sim_spec=self.m.spec) as q:
            q.vbar(PAGE).fault(0, PAGE)
            self.assertEqual(self.allocated(), PAGE)
        self.assertEqual(self.allocated(), 0)

    def test_bad_arguments(self):
        p = self.p
        with self.assertRaises(ValueError):
            comem.Pager("gpu")
        for bad, exc in ((16, ValueError), (-1, ValueError), ("0", TypeError), (True, TypeError)):
            with self.assertRaises(exc):
                comem.Pager("sim", bad, sim_spec=self.m.spec)
        with self.assertRaises(TypeError):
            comem.Pager("sim", sim_spec=5)
        with self.assertRaises(comem.Error) as cm:
            comem.Pager("sim", sim_spec="sim:lots")
        self.assertEqual(cm.exception.status, errors.EINVAL)
        with self.assertRaises(comem.NoDevice):
            comem.Pager("sim", 1, sim_spec=self.m.spec)
        for bad, exc in ((0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError), ("1", TypeError)):
            with self.subTest(vbar_size=bad):
                with self.assertRaises(exc):
                    p.vbar(bad)
        for bad, exc in ((-1, ValueError), (1.0, TypeError)):
            with self.assertRaises(exc):
                p.vbar(PAGE, page_size=bad)
        with self.assertRaises(comem.Error) as cm:
            p.vbar(PAGE, page_size=3 * MiB)  # not a multiple of the 2 MiB granularity
        self.assertEqual(cm.exception.status, errors.EINVAL)
        v = p.vbar(2 * PAGE)
        for what, call in (("fault offset", lambda x: v.fault(x, 1)), ("fault size", lambda x: v.fault(0, x)),
                           ("unpin", lambda x: v.unpin(x, 1)), ("read", lambda x: v.read(0, x)),
                           ("write offset", lambda x: v.write(x, b"x")),
                           ("watermark", lambda x: setattr(v, "watermark", x)),
                           ("limit", lambda x: setattr(v, "watermark_limit", x)),
                           ("vbar free_memory", v.free_memory), ("pager free_memory", p.free_memory),
                           ("budget_deficit", p.budget_deficit),
                           ("simple_headroom", lambda x: setattr(p, "simple_headroom", x)),
                           ("extra headroom", p.set_extra_headroom),
                           ("device poll", lambda x: p.set_device_poll(x, 0))):
            for bad, exc in ((-1, ValueError), (1.5, TypeError), (True, TypeError), ("1", TypeError)):
                with self.subTest(call=what, value=bad):
                    with self.assertRaises(exc):
                        call(bad)
        for bad, exc in ((-1, ValueError), ("1", TypeError)):
            with self.assertRaises(exc):
                p.set_device_poll(0, bad)
        with self.assertRaises(ValueError):
            v.fault(PAGE, PAGE + 1)  # leaves the VBAR
        self.assertEqual((p.stats()["faults"], p.usage, v.watermark), (0, 0, 2 * PAGE))


class TestAttachedPager(PagerCase):
    """A pager in this process as a holder in the ledger; other processes' admissions take its pages."""

    def test_attach_registers_the_vbars(self):
        p = self.p
        c = self.client("pager")
        a = p.vbar(4 * PAGE)
        self.assertIsNone(p.holder)
        p.attach(c, "weights")
        self.assertIsNotNone(p.holder)
        hs = self.process("pager")["holders"]
        self.assertEqual([(h["name"], h["kind"], h["answers"]) for h in hs],
                         [("weights", "pager", ["release", "idle", "while-busy"])])
        self.assertEqual([(e["size"], e["resident"], e["paged"]) for e in hs[0]["entries"]], [(4 * PAGE, 0, True)])
        with self.assertRaises(comem.Error) as cm:
            p.attach(c)
        self.assertEqual(cm.exception.status, errors.EEXIST)
        a.fault(0, 3 * PAGE)

        def residents():
            return [e["resident"] for e in self.process("pager")["holders"][0]["entries"]]

        self.assertTrue(wait_for(lambda: residents() == [3 * PAGE]), residents())
        b = p.vbar(2 * PAGE)  # a new VBAR is a new entry
        self.assertEqual([e["size"] for e in self.process("pager")["holders"][0]["entries"]],
                         [4 * PAGE, 2 * PAGE])
        a.unpin(0, 3 * PAGE)
        p.free_memory(PAGE)
        self.assertTrue(wait_for(lambda: residents() == [2 * PAGE, 0]), residents())
        b.destroy()
        self.assertTrue(wait_for(lambda: residents() == [2 * PAGE]), residents())
        self.assertGreater(p.stats()["reports"], 0)
        p.detach()
        self.assertIsNone(p.holder)
        self.assertEqual(self.process("pager")["holders"], [])
        with self.assertRaises(comem.NotFound):
            p.detach()
        self.assertEqual(a.loaded_size, 2 * PAGE)  # detaching leaves the pages alone
        p.attach(c, "again")
        self.assertEqual([h["name"] for h in self.process("pager")["holders"]], ["again"])
        for bad, exc in (("", ValueError), (5, TypeError)):
            with self.assertRaises(exc):
                self.pager().attach(c, bad)
        p.close()
        self.assertEqual(self.process("pager")["holders"], [])
        self.m.check_ledger(self)

    def test_attach_says_which_card_its_ordinal_is(self):
        uuid = self.m.status()["devices"][0]["uuid"]
        c = self.client("pager")
        c.map_device(1, uuid)  # this process already calls the card its device 1
        self.assertEqual(self.m.status()["warnings"], [])
        self.p.attach(c, "weights")  # the pager's ordinal 0 is that card too: the coordinator hears it
        st = self.m.status()
        self.assertEqual(len(st["warnings"]), 1, st["warnings"])
        self.assertIn("its devices 0 and 1 are one card", st["warnings"][0])
        self.m.check_ledger(self)

    def test_another_process_admission_takes_unpinned_pages(self):
        p = self.p
        c = self.client("pager")
        p.attach(c)
        v = p.vbar(6 * GiB)
        v.fault(0, 6 * GiB)
        v.unpin(GiB, 5 * GiB)  # the first GiB stays pinned: in use
        self.assertEqual(self.card.usage(), (CONTEXT, 6 * GiB))
        self.assertTrue(wait_for(lambda: self.entry("pager", "vbar-1")["resident"] == 6 * GiB))
        hid = self.holder_id("pager", "weights")
        free = FREE0 - CONTEXT - 6 * GiB
        other = self.child("other")
        g = other.ask("admit", mib=1024)
        short = need(GiB) - free
        pages = -(-short // PAGE)  # whole pages from the top
        self.assertEqual((g.get("granted"), g["asked"], g["n_busy"]), (True, [hid], 0))
        self.assertEqual((g["free_before"], g["freed"], g["free_after"]),
                         (free, pages * PAGE, free + pages * PAGE))
        self.assertEqual(v.loaded_size, 6 * GiB - pages * PAGE)
        self.assertEqual(v.watermark, 6 * GiB - pages * PAGE)
        self.assertEqual(self.card.usage(), (CONTEXT, 6 * GiB - pages * PAGE))
        self.assertEqual(self.entry("pager", "vbar-1")["resident"], 6 * GiB - pages * PAGE)
        self.assertEqual(p.stats()["release_asks"], 1)
        # The other process loads what it was granted; this one is computing now, and its pager
        # still answers (it releases while busy), but never with pinned pages.
        other.ask("done", entry_mib=1024)
        loaded = v.loaded_size
        with c.node("prompt"):
            g2 = other.ask("admit", mib=3072)
            self.assertTrue(g2.get("granted"), g2)
            self.assertEqual(g2["asked"], [hid])
        short = need(3 * GiB, floor=False) - g2["free_before"]  # the other process has a context now
        self.assertEqual(g2["freed"], -(-short // PAGE) * PAGE)
        self.assertEqual(v.loaded_size, loaded - g2["freed"])
        self.assertEqual(v.residency()[:GiB // PAGE], b"\3" * (GiB // PAGE))
        self.assertEqual(self.card.usage()[1], v.loaded_size)
        self.assertEqual(self.entry("pager", "vbar-1")["resident"], v.loaded_size)
        self.assertEqual(p.stats()["release_asks"], 2)
        # What is pinned cannot be taken: an admission that the pager's pages, pinned ones included, would
        # make fit asks for them, gets the unpinned ones only, and is refused. (One that could not fit even
        # if every page came back is refused at once, nobody asked.)
        dev = self.m.status()["devices"][0]
        room = dev["free"] - dev["granted"]
        mib = int((room + v.loaded_size - 256 * MiB - need(0)) / 1.1) // MiB  # with the floor: the sim card measured no context for it
        g3 = other.ask("admit", mib=mib)
        self.assertTrue(g3.get("refused"), g3)
        self.assertEqual(g3["asked"], [hid])
        self.assertEqual(v.loaded_size, GiB)
        self.assertEqual(v.residency(), b"\3" * (GiB // PAGE) + b"\0" * (5 * GiB // PAGE))
        self.m.check_ledger(self)

    def test_closing_the_client_detaches_its_pager(self):
        p = self.p
        c = comem.Client("pager", socket=self.m.socket, require_coordinator=True)
        p.attach(c)
        v = p.vbar(4 * PAGE)
        v.fault(0, 2 * PAGE)
        c.close()  # the library's pager must never see a freed client
        self.assertIsNone(p.holder)
        self.assertIsNone(self.process("pager"))
        w = p.vbar(2 * PAGE)  # the pager works on, alone
        self.assertIsNotNone(w.fault(0, PAGE))
        v.unpin(0, 2 * PAGE)
        self.assertEqual(p.free_memory(4 * PAGE), 2 * PAGE)
        self.assertEqual(p.stats()["release_asks"], 0)
        with self.assertRaises(comem.NotFound):
            p.detach()
        p.close()
        self.assertEqual(self.allocated(), 0)
        c2 = self.client("again")
        q = self.pager()
        q.attach(c2)
        q.close()  # closing the pager first is the other order, and as fine
        self.assertEqual(self.process("again")["holders"], [])
        c2.close()


if __name__ == "__main__":
    unittest.main()
