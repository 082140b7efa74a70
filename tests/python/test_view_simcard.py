"""The shared-memory view and the simulated card, against a real comemd on the card it reads.

The view is what a batch sizer reads instead of a process-local free figure: the coordinator's
true free, the reserve and the bytes other processes could release now, published in a file next
to the socket and read without a round trip. The simulated card is what the coordinator reads as
it would read NVML; allocating on it is what cudaMalloc would be.
"""

import os
import unittest

import support
from support import GiB, MiB, wait_for

import comem
from comem import errors
from test_binding import CAPACITY, CONTEXT, DRIVER_RESERVED, FREE0, RESERVE, MachineCase


class TestView(MachineCase):

    def view(self):
        v = comem.View(self.m.socket)
        self.addCleanup(v.close)
        return v

    def test_an_idle_card(self):
        v = self.view()
        r = v.read(0)
        self.assertIsInstance(r, comem.ViewReading)
        self.assertEqual(r, (CAPACITY, FREE0, RESERVE, 0))
        self.assertEqual(v.read(), r)  # device 0 is the default
        dev = self.m.status()["devices"][0]
        self.assertEqual((r.capacity, r.free, r.reserve), (dev["capacity"], dev["free"],
                                                           dev["reserve"]["published"]))

    def test_figures_follow_the_ledger_and_the_card(self):
        v = self.view()
        holder = self.child("holder")
        holder.ask("hold", holder="models", entry="a", mib=2048)
        holder.ask("hold", holder="models", entry="b", mib=512)
        holder.ask("hold", holder="fixed", entry="c", mib=1024, answers=[])  # answers nothing: not reclaimable
        holder.ask("hold", holder="pages", entry="p", mib=256, while_busy=True)
        free = FREE0 - CONTEXT - 3840 * MiB
        want = comem.ViewReading(CAPACITY, free, RESERVE, 2816 * MiB)
        self.assertEqual(wait_for(lambda: v.read(0) == want), True, v.read(0))
        dev = self.m.status()["devices"][0]
        self.assertEqual(dev["free"], free)
        with comem.SimCard(self.m.spec) as card:
            self.assertEqual(card.read().free, free)
        # A computing holder cannot be asked now; one that releases while busy still can.
        holder.ask("busy", on=True)
        want = want._replace(reclaimable=256 * MiB)
        self.assertEqual(wait_for(lambda: v.read(0) == want), True, v.read(0))
        holder.ask("busy", on=False)
        want = want._replace(reclaimable=2816 * MiB)
        self.assertEqual(wait_for(lambda: v.read(0) == want), True, v.read(0))
        # A release moves free and reclaimable together.
        c = self.client()
        self.assertEqual(c.ask_release(self.entry("holder", "a")["id"], GiB).freed, GiB)
        want = want._replace(free=free + GiB, reclaimable=1792 * MiB)
        self.assertEqual(wait_for(lambda: v.read(0) == want), True, v.read(0))
        # A host's reserve is published.
        self.client("host", role="host", reserve_base=GiB)
        self.assertEqual(wait_for(lambda: v.read(0).reserve == GiB), True, v.read(0))
        self.m.check_ledger(self)

    @unittest.skipIf(support.WINDOWS, "the forgery writes the POSIX file <socket>.view; on Windows the view is "
                                      "the user's named section, whose name is the C library's to make")
    def test_a_clients_view_is_its_sealed_copy(self):
        # The same figures as the file, from a copy no other process can write: forging the file
        # (as any process of the user can) moves the file's readers, not the client's view.
        c = self.client()
        mine, file = c.view(), self.view()
        self.assertEqual(mine.read(0), file.read(0))
        self.assertTrue(mine.live)
        import mmap
        import struct
        support.suspend(self.m.comemd)  # its next publication would undo the forgery
        try:
            with open(self.m.socket + ".view", "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
                at = m.find(struct.pack("<q", CAPACITY), 16)  # device 0's capacity, then its free
                self.assertGreater(at, 0)
                m[at + 8:at + 16] = struct.pack("<q", 100 * GiB)
            self.assertEqual(file.read(0).free, 100 * GiB)
            self.assertEqual(mine.read(0).free, FREE0)
        finally:
            support.resume(self.m.comemd)
        c.close()  # its readers close with it
        with self.assertRaises(errors.Closed):
            mine.read(0)

    def test_reads_need_no_round_trip(self):
        v = self.view()
        holder = self.child("holder")
        holder.ask("hold", holder="models", entry="a", mib=1024)
        want = comem.ViewReading(CAPACITY, FREE0 - CONTEXT - GiB, RESERVE, GiB)
        self.assertEqual(wait_for(lambda: v.read(0) == want), True, v.read(0))
        # A coordinator that cannot answer anything (stopped): the view reads all the same.
        support.suspend(self.m.comemd)
        try:
            self.assertEqual([v.read(0) for _ in range(1000)], [want] * 1000)
        finally:
            support.resume(self.m.comemd)
        self.assertEqual(self.m.status()["devices"][0]["free"], want.free)

    def test_a_reader_tells_an_exited_coordinator_from_a_live_one(self):
        v = self.view()
        st = v.state()
        self.assertIsInstance(st, comem.ViewState)
        self.assertEqual(st.state, "live")
        self.assertTrue(v.live)
        self.assertTrue(0 <= st.heartbeat_age < 1.0, st)
        # Stopped: it still holds its lock, but its heartbeat grows old.
        support.suspend(self.m.comemd)
        try:
            self.assertEqual(wait_for(lambda: v.state().state == "frozen", timeout=5), True, v.state())
            self.assertGreater(v.state().heartbeat_age, 1.0)
        finally:
            support.resume(self.m.comemd)
        self.assertEqual(wait_for(lambda: v.live), True, v.state())
        # Killed: the kernel drops its lock; the figures stay readable, and say what they were.
        before = v.read(0)
        self.m.comemd.kill()
        self.m.comemd.wait()
        self.assertEqual(wait_for(lambda: v.state().state == "exited"), True, v.state())
        self.assertFalse(v.live)
        self.assertEqual(v.read(0), before)

    def test_bad_arguments_and_lifetime(self):
        v = self.view()
        with self.assertRaises(comem.NoDevice) as cm:
            v.read(1)
        self.assertEqual(cm.exception.status, errors.ENODEV)
        for bad, exc in ((16, ValueError), (-1, ValueError), ("0", TypeError), (0.0, TypeError),
                         (True, TypeError)):
            with self.subTest(device=bad):
                with self.assertRaises(exc):
                    v.read(bad)
        with self.assertRaises(comem.NotFound):
            comem.View(os.path.join(self.m.dir, "nobody.sock"))
        with self.assertRaises(TypeError):
            comem.View(b"/tmp/x")
        with comem.View(self.m.socket) as v2:
            self.assertEqual(v2.read(0).capacity, CAPACITY)
        for closed in (v2, v):
            closed.close()
            closed.close()
            with self.assertRaises(comem.Error) as cm:
                closed.read(0)
            self.assertEqual(cm.exception.status, errors.ECLOSED)
            with self.assertRaises(comem.Closed):
                closed.state()
        # The default socket is COMEM_SOCKET, which the machine set.
        with comem.View() as v3:
            self.assertEqual(v3.read(0).capacity, CAPACITY)


class TestSimCard(MachineCase):

    def open_card(self, spec=None):
        c = comem.SimCard(spec or self.m.spec)
        self.addCleanup(c.close)
        self.addCleanup(lambda: c._handle and c.release_self())
        return c

    def test_readings(self):
        card = self.open_card()
        self.assertEqual(card.cards, 1)
        self.assertEqual(card.path, os.path.join(self.m.dir, "card"))
        r = card.read()
        self.assertIsInstance(r, comem.CardReading)
        self.assertEqual(r, (CAPACITY, FREE0, DRIVER_RESERVED, DRIVER_RESERVED, "device-wide"))
        # cuMemGetInfo's view: the driver's slice is not part of the total
        self.assertEqual(card.read(local=True), (FREE0, FREE0, 0, -1, "device-wide"))
        self.assertEqual(card.usage(), (0, 0))
        with comem.SimCard() as default:  # COMEM_DEVICE names the machine's card
            self.assertEqual(default.path, card.path)

    def test_without_a_spec_the_card_is_the_coordinators(self):
        # COMEM_DEVICE unset: SimCard() opens the card comemd serves, not a default of its own
        saved = os.environ.pop("COMEM_DEVICE")
        self.addCleanup(os.environ.__setitem__, "COMEM_DEVICE", saved)
        served = comem.simcard.coordinator_card(self.m.socket)
        self.assertEqual(served.split(":path=")[1], os.path.join(self.m.dir, "card"))
        with comem.SimCard(socket=self.m.socket) as card:
            self.assertEqual((card.path, card.read().total), (os.path.join(self.m.dir, "card"), CAPACITY))
        # one that disagrees is told so, once, naming both
        other = os.path.join(self.m.dir, "other-card")
        with self.assertLogs("comem", "WARNING") as logs:
            with comem.SimCard(f"sim:2GiB:path={other}", socket=self.m.socket):
                pass
        self.assertEqual(len(logs.output), 1)
        self.assertIn(other, logs.output[0])
        self.assertIn(served, logs.output[0])
        self.assertIsNone(comem.simcard.coordinator_card(os.path.join(self.m.dir, "nobody.sock")))

    def test_alloc_free_touch_release(self):
        card = self.open_card()
        card.alloc(GiB)
        self.assertEqual(card.usage(), (CONTEXT, GiB))  # the context is charged at the first allocation
        self.assertEqual(card.usage(os.getpid(), 0), (CONTEXT, GiB))
        r = card.read()
        self.assertEqual((r.free, r.used), (FREE0 - CONTEXT - GiB, DRIVER_RESERVED + CONTEXT + GiB))
        self.assertEqual(self.m.status()["devices"][0]["free"], FREE0 - CONTEXT - GiB)  # comemd reads the same
        card.free(512 * MiB)
        self.assertEqual(card.usage(), (CONTEXT, 512 * MiB))
        with self.assertRaises(comem.Error) as cm:
            card.free(GiB)  # more than this process holds
        self.assertEqual(cm.exception.status, errors.EINVAL)
        self.assertEqual(card.usage(), (CONTEXT, 512 * MiB))
        card.release_self()
        self.assertEqual(card.usage(), (0, 0))
        self.assertEqual(card.read().free, FREE0)
        card.touch()
        self.assertEqual(card.usage(), (CONTEXT, 0))
        self.assertEqual(card.read().free, FREE0 - CONTEXT)
        card.release_self()

    def test_a_full_linux_card_refuses(self):
        card = self.open_card()
        with self.assertRaises(comem.Error) as cm:
            card.alloc(FREE0)  # the context comes first, so this no longer fits
        self.assertEqual(cm.exception.status, errors.ENOSPC)
        self.assertEqual(cm.exception.call, "comem_simcard_alloc")
        card.alloc(FREE0 - CONTEXT)  # exactly what is left
        self.assertEqual(card.read().free, 0)
        with self.assertRaises(comem.Error) as cm:
            card.alloc(1)
        self.assertEqual(cm.exception.status, errors.ENOSPC)
        self.assertEqual(card.usage(), (CONTEXT, FREE0 - CONTEXT))
        card.release_self()
        self.assertEqual(card.read().free, FREE0)

    def test_another_process_and_its_death(self):
        card = self.open_card()
        other = self.child("other")
        other.ask("fill", mib=1024)
        self.assertEqual(card.usage(other.pid), (CONTEXT, GiB))
        self.assertEqual(card.usage(), (0, 0))
        self.assertEqual(card.read().free, FREE0 - CONTEXT - GiB)
        support.kill_hard(other.proc)
        other.proc.wait()
        # The card's memory dies with its process, as on a real card.
        self.assertEqual(card.usage(other.pid), (0, 0))
        self.assertEqual(card.read().free, FREE0)

    def test_wddm_budgets_are_process_local(self):
        spec = f"sim:4GiB:wddm:reserved=256MiB:ctx=300MiB:path={os.path.join(self.m.dir, 'wddm')}"
        card = self.open_card(spec)
        budget = 4 * GiB - 256 * MiB
        self.assertEqual(card.read(local=True), (budget, budget, 0, -1, "process-local"))
        self.assertEqual(card.read().scope, "device-wide")
        other = self.m.child("binding_holder.py", "other", env={"COMEM_DEVICE": spec})
        other.ask("fill", mib=1024)
        self.assertEqual(card.read().free, budget - CONTEXT - GiB)  # the NVML-style reading sees it
        self.assertEqual(card.read(local=True).free, budget)  # this process's budget does not
        card.alloc(GiB)
        self.assertEqual(card.read(local=True).free, budget - CONTEXT - GiB)
        with self.assertRaises(comem.Error) as cm:
            card.alloc(budget)  # over this process's budget
        self.assertEqual(cm.exception.status, errors.ENOSPC)

    def test_several_cards(self):
        card = self.open_card(f"sim:2x4GiB:path={os.path.join(self.m.dir, 'two')}")
        self.assertEqual(card.cards, 2)
        card.alloc(GiB, card=1)
        self.assertEqual(card.usage(card=1), (CONTEXT, GiB))
        self.assertEqual(card.usage(card=0), (0, 0))
        self.assertEqual(card.read(1).free, 4 * GiB - DRIVER_RESERVED - CONTEXT - GiB)
        self.assertEqual(card.read(0).free, 4 * GiB - DRIVER_RESERVED)
        card.free(GiB, card=1)
        with self.assertRaises(comem.NoDevice):
            card.read(2)

    def test_bad_arguments_and_lifetime(self):
        card = self.open_card()
        for what, call in (("alloc", card.alloc), ("free", card.free)):
            for bad, exc in ((-1, ValueError), (1.5, TypeError), (True, TypeError), ("1", TypeError),
                             (1 << 63, ValueError)):
                with self.subTest(call=what, value=bad):
                    with self.assertRaises(exc):
                        call(bad)
        for bad, exc in ((16, ValueError), (-1, ValueError), ("0", TypeError), (1.0, TypeError)):
            with self.subTest(card=bad):
                with self.assertRaises(exc):
                    card.alloc(MiB, card=bad)
                with self.assertRaises(exc):
                    card.read(bad)
                with self.assertRaises(exc):
                    card.touch(bad)
                with self.assertRaises(exc):
                    card.usage(card=bad)
        with self.assertRaises(comem.NoDevice):
            card.alloc(MiB, card=1)
        with self.assertRaises(comem.NoDevice):
            card.read(1)
        self.assertEqual(card.usage(), (0, 0))  # nothing of the above allocated anything
        for spec in ("sim:lots", "gpu", "sim:4GiB:bogus=1"):
            with self.subTest(spec=spec):
                with self.assertRaises(comem.Error) as cm:
                    comem.SimCard(spec)
                self.assertEqual(cm.exception.status, errors.EINVAL)
        with self.assertRaises(comem.Error) as cm:  # the machine's card file, with other settings
            comem.SimCard(f"sim:4GiB:path={card.path}")
        self.assertEqual(cm.exception.status, errors.EEXIST)
        for bad in (5, b"sim:4GiB"):
            with self.assertRaises(TypeError):
                comem.SimCard(bad)
        card.close()
        card.close()
        for what, call in (("alloc", lambda: card.alloc(MiB)), ("free", lambda: card.free(MiB)),
                           ("read", card.read), ("usage", card.usage), ("touch", card.touch),
                           ("release_self", card.release_self), ("cards", lambda: card.cards),
                           ("path", lambda: card.path)):
            with self.subTest(closed=what):
                with self.assertRaises(comem.Error) as cm:
                    call()
                self.assertEqual(cm.exception.status, errors.ECLOSED)


if __name__ == "__main__":
    unittest.main()
