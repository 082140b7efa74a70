"""The binding against a real comemd on a simulated card: every client call, callbacks, refusals, bad arguments.

Each test gets its own machine (support.Machine: a private directory, a real ``comemd --check`` on
the card ``sim:8GiB:reserved=256MiB:ctx=300MiB``) so every figure below is exact: the card's free
bytes are capacity - driver reserve - what processes allocated (each paying a 300 MiB context at
its first allocation), and an admission's target is ComfyUI's load_models_gpu arithmetic,
``int(weights * 1.1) + max(0.8 GiB + reserve, working + reserve)`` plus the 300 MiB context floor
of a process that has none on the card yet (see need()).

Holders that must really give bytes back live in child processes (procs/binding_holder.py), which
allocate on the card as cudaMalloc would and free in their release callbacks. The test process
itself never allocates on the card here, so its own sessions carry no context floor.
"""

import gc
import json
import os
import signal
import subprocess
import threading
import time
import unittest
import weakref

import support
from support import WINDOWS, GiB, MiB, Machine, wait_for

import comem
from comem import errors

CARD = "sim:8GiB:reserved=256MiB:ctx=300MiB"
CAPACITY = 8 * GiB
DRIVER_RESERVED = 256 * MiB
CONTEXT = 300 * MiB                  # the card's per-process context cost
FREE0 = CAPACITY - DRIVER_RESERVED   # what NVML reads as free on the idle card
HELD = 2 * GiB                       # TestCallbacks: what each holder says is resident of its 4 GiB entry
RESERVE = 400 * MiB                  # comemd's default reserve (ComfyUI's EXTRA_RESERVED_VRAM on Linux)
FLOOR = 300 * MiB                    # COMEM_CONTEXT_FLOOR: added for a requester with no context yet
PAGER_HEADROOM = 256 * MiB           # the pager headroom the coordinator forwards by default


def need(weights, working=0, floor=True):
    """The coordinator's ask target, computed as ComfyUI computes it (float64, truncated)."""
    min_inference = int((1024 * 1024 * 1024) * 0.8 + RESERVE)
    return int(weights * 1.1) + max(min_inference, working + RESERVE) + (FLOOR if floor else 0)


class MachineCase(unittest.TestCase):
    """A fresh machine per test; clients opened through self.client() close before it stops."""

    card = CARD

    def setUp(self):
        self.m = Machine(self.card)
        self.m.env["COMEM_LOG"] = "info"  # comemd's log says what reached it (see assertNothingReached)
        self.m.__enter__()
        self.addCleanup(self._close_children)
        self.addCleanup(self.m.__exit__, None, None, None)

    def _close_children(self):
        for c in self.m.children:  # Machine kills them; their pipes are ours to close
            for f in (c.proc.stdin, c.proc.stdout, c.stderr):
                f.close()

    def client(self, name="test", **kw):
        kw.setdefault("require_coordinator", True)
        c = comem.Client(name, socket=self.m.socket, **kw)
        self.addCleanup(c.close)
        return c

    def child(self, name):
        return self.m.child("binding_holder.py", name)

    def process(self, name):
        return self.m.process(name)

    def holder_id(self, process, holder):
        """The coordinator's id for a holder, as status() lists it."""
        for h in self.process(process)["holders"]:
            if h["name"] == holder:
                return h["id"]
        raise AssertionError(f"no holder {holder!r} in {process!r}")

    def entry(self, process, name):
        """An entry's status record (id, size, resident)."""
        for h in self.process(process)["holders"]:
            for e in h["entries"]:
                if e["name"] == name:
                    return e
        raise AssertionError(f"no entry {name!r} in {process!r}")

    def grants(self):
        return self.m.status()["devices"][0]["grants"]

    def send(self, child, cmd, **kw):
        """Sends a command without waiting for its answer (the child blocks in it)."""
        kw["cmd"] = cmd
        child.proc.stdin.write(json.dumps(kw) + "\n")
        child.proc.stdin.flush()

    def mark_log(self):
        """From here on, assertNothingReached() reads the coordinator's log."""
        self.log_mark = len(self.m.comemd_log())

    def assertNothingReached(self, process="test"):
        """Nothing a refused argument would have sent is in the ledger or the coordinator's log."""
        p = self.process(process)
        self.assertEqual(p["holders"], [])
        self.assertEqual(p["pinned"], 0)
        self.assertEqual([g for g in self.grants() if g["session"] == p["session"]], [])
        self.assertEqual(self.m.status()["pins"]["total"], 0)
        full = self.m.comemd_log()
        self.assertIn("joined", full)  # the log is at info level: silence below means something
        log = full[getattr(self, "log_mark", 0):]
        for word in ("admission:", "pressure:", "pins:", "release:", "refused holder"):
            self.assertNotIn(word, log)


BAD_SIZES = [(-1, ValueError), (-(1 << 40), ValueError), (1 << 63, ValueError), (1.5, TypeError),
             (1.0, TypeError), (True, TypeError), (False, TypeError), ("1", TypeError), (b"1", TypeError),
             ([1], TypeError)]
BAD_DEVICES = [(16, ValueError), (-1, ValueError), (1 << 40, ValueError), ("0", TypeError), (0.0, TypeError),
               (True, TypeError)]
BAD_NAMES = [("", ValueError), ("x" * 64, ValueError), ("a\0b", ValueError), (5, TypeError), (b"x", TypeError),
             ("\x1b]0;title\x07", ValueError), ("two\nlines", ValueError), ("cr\r", ValueError),
             ("c1\x9b", ValueError), ("\udcff", ValueError)]  # escapes, line breaks, C1, a lone surrogate
BAD_TIMEOUTS = [(-1, ValueError), (-0.5, ValueError), (float("nan"), ValueError), ("1", TypeError),
                (True, TypeError), (float("inf"), ValueError), (2**31, ValueError)]


class TestErrors(unittest.TestCase):
    """comem's own messages, and the exception classes a Python user catches."""

    def test_status_strings_and_classes(self):
        names = {errors.OK: "ok", errors.EINVAL: "invalid argument", errors.ENODEV: "no such device or driver",
                 errors.ETIMEDOUT: "timed out", errors.EPERM: "permission denied", errors.EBUSY: "busy",
                 errors.ENOSPC: "not enough memory", errors.ENOENT: "not found",
                 errors.ECLOSED: "connection closed", errors.EEXIST: "already exists"}
        for code, text in names.items():
            self.assertEqual(comem.status_str(code), text)
        self.assertEqual(len({comem.status_str(c) for c in range(0, -16, -1)}), 16)
        # The codes are the library's (comem_constant), each its own, each with a description.
        codes = [getattr(errors, n) for n in ("OK", "EINVAL", "ENOMEM", "ENODEV", "EIO", "ETIMEDOUT", "EPROTO",
                                              "EPERM", "EBUSY", "ENOSPC", "ENOENT", "ECLOSED", "ENOTSUP",
                                              "EDRIVER", "EEXIST", "ERANGE", "EFORKED")]
        self.assertEqual(len(set(codes)), len(codes))
        self.assertNotIn(errors.EVERSION, codes)  # another protocol version: a code of its own, with its words
        self.assertEqual(comem.status_str(errors.EVERSION), "another protocol version")
        self.assertNotIn("unknown status", [comem.status_str(c) for c in codes])
        from comem import _lib
        self.assertEqual(comem.HOST_RAM, _lib.constant("DEVICE_HOST_RAM"))
        self.assertEqual(errors.MAX_DEVICES, _lib.constant("MAX_DEVICES"))
        with self.assertRaises(ImportError) as cm:
            _lib.constant("NO_SUCH_THING")
        self.assertIn("COMEM_NO_SUCH_THING", str(cm.exception))
        # The admission record's layout is the library's, checked at import; a copy that differs is refused.
        import ctypes
        self.assertEqual(ctypes.sizeof(_lib.Admission), _lib.constant("ADMISSION_SIZE"))
        self.assertEqual(_lib.Admission.asked.offset, _lib.constant("ADMISSION_OFFSET_ASKED"))

        class Shifted(ctypes.Structure):
            _fields_ = [(n, t) for n, t in _lib.Admission._fields_ if n != "fits"] + [("fits", ctypes.c_int64)]

        with self.assertRaises(ImportError) as cm:
            _lib._check_layout(Shifted, "ADMISSION")
        self.assertIn("Shifted.need", str(cm.exception))  # the first field out of place
        self.assertIn("the binding and the library differ", str(cm.exception))
        self.assertEqual(comem.status_str(-99), "unknown status")
        classes = {errors.EBUSY: (comem.Busy, comem.Error), errors.ENOENT: (comem.NotFound, LookupError),
                   errors.ECLOSED: (comem.Closed, ConnectionError), errors.ETIMEDOUT: (comem.TimedOut, TimeoutError),
                   errors.EPERM: (comem.PermissionDenied, PermissionError), errors.ENODEV: (comem.NoDevice,),
                   errors.EINVAL: (comem.Error,), errors.EEXIST: (comem.Error,)}
        for code, kinds in classes.items():
            e = errors.error(code, "comem_call", "detail")
            for k in kinds:
                self.assertIsInstance(e, k)
            self.assertEqual((e.status, e.call, e.detail), (code, "comem_call", "detail"))
            self.assertEqual(str(e), f"comem_call: {comem.status_str(code)} (detail)")
        self.assertEqual(errors.check(3, "x"), 3)
        r = comem.Refused("comem_admit", 5, need=10, asked=["a"], n_asked=1, n_busy=1, freed=2)
        self.assertEqual((r.status, r.short_by, r.need, r.asked, r.n_asked, r.n_busy, r.freed),
                         (errors.ENOSPC, 5, 10, ["a"], 1, 1, 2))
        self.assertEqual(str(r), "comem_admit: not enough memory (short by 5 bytes of 10 needed; "
                                 "1 ask(s) to 1 holder(s), 1 busy, 2 bytes freed)")
        r = comem.Refused("comem_admit", 5, need=10, asked=["a", "a", "a"], n_asked=3)
        self.assertIn("3 ask(s) to 1 holder(s)", str(r))  # one holder asked in three rounds
        self.assertEqual(comem.Busy().status, errors.EBUSY)
        self.assertTrue(os.path.exists(comem.library_path))


class TestTokenAndDeadlines(MachineCase):
    """A coordinator that wants COMEM_TOKEN refuses others; one that does not answer times calls out."""

    def setUp(self):
        self.m = Machine(CARD)
        self.m.env["COMEM_LOG"] = "info"
        self.m.env["COMEM_TOKEN"] = "s3cret"  # comemd's
        os.environ["COMEM_TOKEN"] = "s3cret"  # this process's, for the machine's own probe
        self.addCleanup(os.environ.pop, "COMEM_TOKEN", None)
        self.m.__enter__()
        self.addCleanup(self._close_children)
        self.addCleanup(self.m.__exit__, None, None, None)

    def test_a_wrong_or_missing_token_is_refused(self):
        for token in ("wrong", None):
            with self.subTest(token=token):
                if token is None:
                    os.environ.pop("COMEM_TOKEN")
                else:
                    os.environ["COMEM_TOKEN"] = token
                with self.assertRaises(comem.PermissionDenied) as cm:
                    comem.Client("intruder", socket=self.m.socket, require_coordinator=True)
                self.assertIsInstance(cm.exception, PermissionError)
                self.assertEqual(cm.exception.status, errors.EPERM)
        # Without require_coordinator a refused client works locally, and closes at once: its service
        # thread, waiting out the 10 s before it asks again, wakes for the close.
        os.environ["COMEM_TOKEN"] = "wrong"
        for _ in range(8):
            c = comem.Client("refused", socket=self.m.socket)
            self.assertFalse(c.connected)
            t = time.monotonic()
            c.close()
            self.assertLess(time.monotonic() - t, 2.0)
        os.environ["COMEM_TOKEN"] = "s3cret"
        with comem.Client("friend", socket=self.m.socket, require_coordinator=True) as c:
            self.assertTrue(c.connected)
            self.assertEqual([p["name"] for p in c.status()["devices"][0]["processes"]], ["friend"])

    def test_calls_time_out_when_the_coordinator_does_not_answer(self):
        c = self.client(timeout=0.3)
        h = c.add_holder("models")
        support.suspend(self.m.comemd)
        try:
            calls = {"reserve": c.reserve, "status": c.status, "admit": lambda: c.admit(MiB),
                     "pressure": lambda: c.pressure(MiB), "pin": lambda: c.pin(MiB),
                     "add_holder": lambda: c.add_holder("late"), "add_entry": lambda: h.add_entry("late", MiB)}
            for what, call in calls.items():
                with self.subTest(call=what):
                    t0 = time.monotonic()
                    with self.assertRaises(comem.TimedOut) as cm:
                        call()
                    self.assertLess(time.monotonic() - t0, 5)
                    self.assertIsInstance(cm.exception, TimeoutError)
                    self.assertIn("timed out", str(cm.exception))
        finally:
            support.resume(self.m.comemd)
        # Nothing a caller gave up on stays booked: the late grant is given back.
        self.assertTrue(wait_for(lambda: self.grants() == []))
        self.assertEqual(c.reserve(), (RESERVE, PAGER_HEADROOM))
        self.assertEqual(self.process("test")["holders"][0]["entries"], [])

    def test_a_pin_booked_after_its_caller_gave_up_is_given_back(self):
        # The caller was told it did not get the pin: a late PIN_REPLY's bytes are released at once,
        # as a late admission grant is (src/client/service.c give_back).
        c = self.client(timeout=0.3)
        support.suspend(self.m.comemd)
        try:
            with self.assertRaises(comem.TimedOut):
                c.pin(MiB)
        finally:
            support.resume(self.m.comemd)
        self.assertTrue(wait_for(lambda: self.m.status()["pins"]["total"] == 0), self.m.status()["pins"])


class TestArguments(MachineCase):
    """Every bad argument raises the documented exception before anything reaches the coordinator."""

    def setUp(self):
        super().setUp()
        self.c = self.client("test")
        self.other = self.client("other")

    def test_sizes(self):
        c = self.c
        # A holder and an entry are needed to reach some calls; they live in the other client.
        h = self.other.add_holder("models")
        e = h.add_entry("m", GiB, 0)
        g = self.other.admit(MiB)
        self.mark_log()
        calls = {
            "admit weights": lambda v: c.admit(v),
            "admit inference": lambda v: c.admit(MiB, inference=v),
            "admit cast_forward": lambda v: c.admit(MiB, cast_forward=v),
            "pressure": lambda v: c.pressure(v),
            "pin": lambda v: c.pin(v),
            "unpin": lambda v: c.unpin(v),
            "pinned": lambda v: c.pinned(v).__enter__(),
            "ask_release bytes": lambda v: c.ask_release("1", v),
            "add_entry size": lambda v: h.add_entry("n", v),
            "add_entry resident": lambda v: h.add_entry("n", GiB, v),
            "Entry.resident": lambda v: setattr(e, "resident", v),
            "report pinned": lambda v: h.report(pinned=v),
            "report overhead": lambda v: h.report(overhead=v),
            "Holder.pin": lambda v: h.pin(v),
            "Grant.done used": lambda v: g.done(None, v),
            "Client reserve_base": lambda v: comem.Client("x", socket=self.m.socket, reserve_base=v),
        }
        for what, call in calls.items():
            for value, exc in BAD_SIZES:
                with self.subTest(call=what, value=value):
                    with self.assertRaises(exc):
                        call(value)
        with self.assertRaises(ValueError):
            h.add_entry("n", MiB, 2 * MiB)  # resident above size
        with self.assertRaises(ValueError):
            e.resident = GiB + 1
        self.assertTrue(g.open)  # the bad `used` left the grant as it was
        self.assertEqual(e.resident, 0)
        self.assertEqual(len(self.process("other")["holders"][0]["entries"]), 1)
        self.assertNothingReached()

    def test_devices(self):
        c = self.c
        calls = {
            "add_holder": lambda v: c.add_holder("h", device=v),
            "admit": lambda v: c.admit(MiB, device=v),
            "pressure": lambda v: c.pressure(MiB, device=v),
            "reserve": lambda v: c.reserve(v),
        }
        for what, call in calls.items():
            for value, exc in BAD_DEVICES:
                with self.subTest(call=what, value=value):
                    with self.assertRaises(exc):
                        call(value)
        self.assertNothingReached()
        # Device 1 is a valid index the binding cannot know is absent: the coordinator says so.
        for what, call in calls.items():
            with self.subTest(call=what, device=1):
                with self.assertRaises(comem.NoDevice) as cm:
                    call(1)
                self.assertEqual(cm.exception.status, errors.ENODEV)
        self.assertEqual(self.process("test")["holders"], [])
        self.assertEqual(self.grants(), [])

    @unittest.skipIf(WINDOWS, "Windows has WDDM: test_this_process_tells_its_wddm_reading")
    def test_no_wddm_reading_to_tell_here(self):
        # Linux has no WDDM: nothing is sent, by the call or at a node's end, and the status lists no adapter.
        self.c.set_busy(True)
        self.c.set_busy(False)
        self.assertFalse(self.c.wddm_report())
        self.assertEqual(self.c.status()["wddm"], [])

    @unittest.skipUnless(WINDOWS, "WDDM is Windows'")
    def test_this_process_tells_its_wddm_reading(self):
        try:
            told = self.c.wddm_report()
        except comem.Error as e:
            if e.status == errors.EIO:
                self.skipTest(f"DXGI gives no reading here ({e}): wine's needs a display (xvfb-run)")
            raise
        self.assertTrue(told)
        listed = wait_for(lambda: self.c.status()["wddm"])
        self.assertTrue(listed)
        procs = listed[0]["processes"]
        self.assertEqual([(p["name"], p["pid"]) for p in procs], [("test", os.getpid())])
        self.assertGreater(procs[0]["budget"], 0)

    def test_names_roles_kinds_and_answers(self):
        c = self.c
        self.mark_log()
        for value, exc in BAD_NAMES:
            with self.subTest(name=value):
                with self.assertRaises(exc):
                    comem.Client(value, socket=self.m.socket)
                with self.assertRaises(exc):
                    c.add_holder(value)
                with self.assertRaises(exc):
                    with c.node(value):
                        pass
                with self.assertRaises(exc):
                    c.set_busy(True, value)
        with self.assertRaises(ValueError):
            comem.Client("x", role="boss", socket=self.m.socket)
        with self.assertRaises(TypeError):
            comem.Client("x", socket=3)
        for value, exc in BAD_TIMEOUTS:
            with self.subTest(timeout=value):
                with self.assertRaises(exc):
                    comem.Client("x", socket=self.m.socket, timeout=value)
                with self.assertRaises(exc):
                    c.admit(MiB, timeout=value)
                with self.assertRaises(exc):
                    c.pressure(MiB, timeout=value)
                with self.assertRaises(exc):
                    c.set_timeout(value)
        for value in ("yes", 1, None):  # busy is a bool, not anything truthy
            with self.subTest(busy=value):
                with self.assertRaises(TypeError):
                    c.set_busy(value)
        with self.assertRaises(ValueError):
            c.add_holder("h", kind="gpu")
        with self.assertRaises(TypeError):
            c.add_holder("h", on_release=5)
        with self.assertRaises(ValueError):
            c.add_holder("h", on_release=lambda a: 0, answers=("everything",))
        h = c.add_holder("ok")
        for value, exc in BAD_NAMES:
            with self.subTest(entry_name=value):
                with self.assertRaises(exc):
                    h.add_entry(value, MiB)
                with self.assertRaises(exc):
                    with h.busy(value):
                        pass
        h.remove()
        self.assertNothingReached()
        self.assertNotIn("'x'", self.m.comemd_log()[self.log_mark:])  # no client was opened for a bad argument

    def test_wrong_types(self):
        c, other = self.c, self.other
        theirs = other.add_holder("theirs")
        their_entry = theirs.add_entry("t", MiB)
        mine = c.add_holder("mine")
        my_entry = mine.add_entry("m", MiB)
        for bad in (theirs, "mine", 1, mine.id):
            with self.subTest(holder=bad):
                with self.assertRaises(TypeError):
                    c.admit(MiB, holder=bad)
                with self.assertRaises(TypeError):
                    c.pin(MiB, holder=bad)
                with self.assertRaises(TypeError):
                    c.unpin(MiB, holder=bad)
        for bad in ([their_entry], [my_entry.id], ["m"], [mine], [my_entry, None]):
            with self.subTest(keep=bad):
                with self.assertRaises(TypeError):
                    c.admit(MiB, keep=bad)
        with self.assertRaises(ValueError):
            c.admit(MiB, keep=[my_entry] * (errors.MAX_KEEP + 1))
        g = c.admit(MiB)
        for bad in (their_entry, my_entry.id, "m", mine):
            with self.subTest(done_entry=bad):
                with self.assertRaises(TypeError):
                    g.done(bad)
        self.assertTrue(g.open)
        self.assertEqual([x["bytes"] for x in self.grants()], [MiB])
        for bad, exc in (("zz", ValueError), ("", ValueError), (0, ValueError), (-5, ValueError),
                         (1 << 64, ValueError), (1.5, TypeError), (True, TypeError), (None, TypeError),
                         (my_entry, TypeError)):
            with self.subTest(ask_release=bad):
                with self.assertRaises(exc):
                    c.ask_release(bad)
        with comem.Pager("sim", sim_spec=self.m.spec) as pager:
            with self.assertRaises(TypeError):
                pager.attach("a client")
            self.assertIsNone(pager.holder)
        with self.assertRaises(TypeError):
            comem.View(5)
        with self.assertRaises(TypeError):
            comem.Coordinator(device=5)
        with self.assertRaises(TypeError):
            comem.SimCard(5)
        g.cancel()
        # Nothing of the refused calls is in the ledger: only what the good calls registered.
        p = self.process("test")
        self.assertEqual([(h["name"], [e["name"] for e in h["entries"]]) for h in p["holders"]], [("mine", ["m"])])
        self.assertEqual(self.grants(), [])
        self.assertNotIn("release:", self.m.comemd_log())

    def test_calls_on_a_closed_client(self):
        pager = comem.Pager("sim", sim_spec=self.m.spec)
        self.addCleanup(pager.close)
        c = comem.Client("closing", socket=self.m.socket, require_coordinator=True)
        h = c.add_holder("models", on_release=lambda a: 0)
        e = h.add_entry("m", GiB, GiB)
        g = c.admit(MiB)
        c.close()
        c.close()  # twice is fine
        self.assertTrue(c.closed)
        self.assertIsNone(self.process("closing"))  # closing unregistered everything
        self.assertEqual(self.grants(), [])
        calls = {
            "connected": lambda: c.connected, "session": lambda: c.session, "status": c.status,
            "set_timeout": lambda: c.set_timeout(1), "add_holder": lambda: c.add_holder("x"),
            "admit": lambda: c.admit(MiB), "pressure": lambda: c.pressure(MiB), "pin": lambda: c.pin(MiB),
            "unpin": lambda: c.unpin(MiB), "reserve": c.reserve, "ask_release": lambda: c.ask_release("1"),
            "node": lambda: c.node().__enter__(), "set_busy": lambda: c.set_busy(True),
            "add_entry": lambda: h.add_entry("n", MiB), "holder.set_busy": lambda: h.set_busy(True),
            "holder.busy": lambda: h.busy().__enter__(), "holder.report": lambda: h.report(1, 1),
            "holder.pin": lambda: h.pin(MiB), "holder.remove": h.remove,
            "entry.resident": lambda: setattr(e, "resident", 0), "entry.remove": e.remove,
            "grant.done": g.done, "grant.cancel": g.cancel,
            "pager.attach": lambda: pager.attach(c),
        }
        for what, call in calls.items():
            with self.subTest(call=what):
                with self.assertRaises(comem.Error) as cm:
                    call()
                self.assertEqual(cm.exception.status, errors.ECLOSED)
                self.assertIn("closed", str(cm.exception))
        self.assertTrue(g.open)  # a failed done leaves the grant as it was
        self.assertIn("closed", repr(c))
        with comem.Client("ctx", socket=self.m.socket, require_coordinator=True) as c2:
            self.assertTrue(c2.connected)
        self.assertTrue(c2.closed)
        self.assertIsNone(self.process("ctx"))

    def test_calls_on_a_removed_holder_or_entry(self):
        c = self.c
        h = c.add_holder("models", on_release=lambda a: 0)
        e1 = h.add_entry("a", GiB, GiB)
        e2 = h.add_entry("b", GiB, 0)
        e1.remove()
        e1.remove()  # twice is fine
        with self.assertRaises(comem.NotFound) as cm:
            e1.resident = 0
        self.assertEqual(cm.exception.status, errors.ENOENT)
        self.assertEqual([x["name"] for x in self.process("test")["holders"][0]["entries"]], ["b"])
        self.assertEqual(h.entries, [e2])
        h.remove()
        h.remove()
        self.assertEqual(self.process("test")["holders"], [])
        self.assertEqual(c.holders, [])
        calls = {
            "add_entry": lambda: h.add_entry("c", MiB), "set_busy": lambda: h.set_busy(True),
            "busy": lambda: h.busy().__enter__(), "report": lambda: h.report(1, 1), "pin": lambda: h.pin(MiB),
            "unpin": lambda: h.unpin(MiB), "admit(holder=)": lambda: c.admit(MiB, holder=h),
            "pin(holder=)": lambda: c.pin(MiB, holder=h), "entry of the holder": lambda: setattr(e2, "resident", 0),
        }
        for what, call in calls.items():
            with self.subTest(call=what):
                with self.assertRaises(comem.NotFound) as cm:
                    call()
                self.assertEqual(cm.exception.status, errors.ENOENT)
        self.assertNothingReached()


class TestClient(MachineCase):
    """The client's own calls: sessions, holders, entries, censuses, boundaries, reserve, status."""

    def test_session_and_roles(self):
        w = self.client("w")
        t = self.client("t", role="tool")
        host = self.client("host", role="host", reserve_base=512 * MiB)
        self.assertTrue(w.connected)
        for c, role in ((w, "worker"), (t, "tool"), (host, "host")):
            p = self.process(c.name)
            self.assertEqual(p["session"], c.session)
            self.assertEqual(p["role"], role)
            self.assertEqual(p["pid"], os.getpid())
            self.assertEqual(c.role, role)
            self.assertIn(role, repr(c))
            self.assertIn("connected", repr(c))
        self.assertEqual(len({w.session, t.session, host.session}), 3)
        dev = self.m.status()["devices"][0]
        self.assertEqual(dev["reserve"], {"base": 512 * MiB, "published": 512 * MiB, "host_told": None})
        self.assertEqual(host.reserve(), comem.Reserve(512 * MiB, PAGER_HEADROOM))
        self.assertEqual(w.reserve(0), comem.Reserve(512 * MiB, PAGER_HEADROOM))
        self.assertEqual(self.m.status()["devices"][0]["reserve"]["host_told"], 512 * MiB)  # the host's, not w's

    def test_a_refusal_carries_the_coordinators_reason_once(self):
        c = self.client("w")
        h = c.add_holder("models")
        with self.assertRaises(comem.Error) as cm:
            h.add_entry("m", 9 * GiB, 9 * GiB)  # more resident than the 8 GiB card
        self.assertEqual(cm.exception.status, errors.ERANGE)
        self.assertEqual(str(cm.exception), "comem_entry_add: out of range (m: the device cannot hold that much)")
        self.assertEqual(errors.take_reason(), "")  # told once: a later failure has only its own words
        with self.assertRaises(comem.NotFound) as cm:
            errors.check(errors.ENOENT, "comem_entry_remove")
        self.assertEqual(str(cm.exception), "comem_entry_remove: not found")
        # The entry that fits is taken.
        self.assertEqual(h.add_entry("m", 1 * GiB, 1 * GiB).resident, 1 * GiB)

    def test_reserve_default(self):
        c = self.client()
        r = c.reserve()
        self.assertIsInstance(r, comem.Reserve)
        self.assertEqual(r, (RESERVE, PAGER_HEADROOM))
        self.assertEqual(self.m.status()["devices"][0]["reserve"], {"base": RESERVE, "published": RESERVE,
                                                                      "host_told": None})

    def test_holders_and_entries_in_the_ledger(self):
        c = self.client()
        models = c.add_holder("models", on_release=lambda a: 0)
        pins = c.add_holder("pinset", kind="pins", on_release=lambda a: 0, answers="pins")
        pager = c.add_holder("pages", kind="pager", on_release=lambda a: 0, releases_while_busy=True)
        raw = c.add_holder("raw", kind="raw")
        self.assertEqual(c.holders, [models, pins, pager, raw])
        a = models.add_entry("a", 3 * GiB, GiB)
        b = models.add_entry("b", 2 * GiB)
        p = pager.add_entry("vbar", 4 * GiB, 0, paged=True)
        self.assertEqual(models.entries, [a, b])
        self.assertEqual((a.size, a.resident, a.paged, b.resident, p.paged), (3 * GiB, GiB, False, 0, True))
        st = {h["name"]: h for h in self.process("test")["holders"]}
        self.assertEqual({n: (h["kind"], h["answers"]) for n, h in st.items()},
                         {"models": ("models", ["release", "idle"]), "pinset": ("pins", ["pins"]),
                          "pages": ("pager", ["release", "idle", "while-busy"]), "raw": ("raw", [])})
        self.assertEqual([(e["name"], e["size"], e["resident"]) for e in st["models"]["entries"]],
                         [("a", 3 * GiB, GiB), ("b", 2 * GiB, 0)])
        self.assertEqual(st["models"]["resident"], GiB)
        self.assertTrue(st["pages"]["entries"][0]["paged"])
        self.assertEqual(self.process("test")["resident"], GiB)
        self.assertEqual(self.m.status()["devices"][0]["resident"], GiB)

        # A census: resident bytes reported now.
        b.resident = 1536 * MiB
        a.resident = 0
        self.assertEqual((a.resident, b.resident), (0, 1536 * MiB))
        self.assertTrue(wait_for(lambda: [e["resident"] for e in self.process("test")["holders"][0]["entries"]]
                                 == [0, 1536 * MiB]))
        models.report(pinned=5 * MiB, overhead=7 * MiB)
        self.assertTrue(wait_for(lambda: self.process("test")["holders"][0].get("pinned") == 5 * MiB))
        self.assertEqual(self.process("test")["holders"][0]["overhead"], 7 * MiB)
        models.report()  # unknown: leaves the figures alone
        b.remove()
        self.assertEqual(models.entries, [a])
        self.assertEqual([e["name"] for e in self.process("test")["holders"][0]["entries"]], ["a"])
        models.remove()
        self.assertTrue(a._removed)
        self.assertEqual([h["name"] for h in self.process("test")["holders"]], ["pinset", "pages", "raw"])
        self.assertEqual(self.m.status()["devices"][0]["resident"], 0)
        self.m.check_ledger(self)

    def test_ordinals_map_to_one_card_by_uuid(self):
        # F7/F8: two processes see the card under different ordinals (different CUDA_VISIBLE_DEVICES).
        uuid = self.m.status()["devices"][0]["uuid"]
        self.assertTrue(uuid.startswith("SIM-"))
        a, b = self.client("a"), self.client("b")
        a.map_device(1, uuid)  # the card is a's device 1
        b.map_device(0, uuid)
        a.add_holder("models", device=1).add_entry("x", GiB, GiB)
        b.add_holder("models", device=0).add_entry("y", GiB, GiB)
        dev = self.m.status()["devices"][0]
        self.assertEqual(dev["resident"], 2 * GiB)  # both charged on the one card
        self.assertEqual((self.process("a")["ordinal"], self.process("b")["ordinal"]), (1, 0))
        a.admit(256 * MiB, device=1).cancel()  # its device 1 is the card
        self.assertEqual(self.m.status()["warnings"], [])
        # One process naming the card twice: charged as one, and said in status and the log.
        c = self.client("c")
        c.map_device(0, uuid)
        c.map_device(1, uuid)
        st = self.m.status()
        self.assertEqual(len(st["warnings"]), 1, st["warnings"])
        self.assertIn("its devices 0 and 1 are one card", st["warnings"][0])
        self.assertTrue(wait_for(lambda: "its devices 0 and 1 are one card" in self.m.comemd_log()))
        with self.assertRaises(comem.NoDevice):
            c.map_device(2, "GPU-00000000-0000-0000-0000-000000000000")
        with self.assertRaises(ValueError):
            c.map_device(16, uuid)
        c.close()
        self.assertTrue(wait_for(lambda: self.m.status()["warnings"] == []))  # gone with the process
        self.m.check_ledger(self)

    def test_node_boundaries(self):
        c = self.client()
        h = c.add_holder("models", on_release=lambda a: 0)
        other = c.add_holder("other", on_release=lambda a: 0)

        def busy():
            p = self.process("test")
            return p["busy"], [x["busy"] for x in p["holders"]]

        self.assertEqual(busy(), (False, [False, False]))
        with c.node("prompt-1"):
            self.assertEqual(busy(), (True, [True, True]))
        self.assertEqual(busy(), (False, [False, False]))
        with h.busy("prompt-2"):  # one holder computing: the process computes too
            self.assertEqual(busy(), (True, [True, False]))
        self.assertEqual(busy(), (False, [False, False]))
        with self.assertRaises(KeyError):  # an exception inside still ends the node
            with c.node():
                raise KeyError("x")
        self.assertEqual(busy(), (False, [False, False]))
        c.set_busy(True, "p")
        self.assertEqual(busy(), (True, [True, True]))
        c.set_busy(False)
        other.set_busy(True)
        self.assertEqual(busy(), (True, [False, True]))
        other.set_busy(False)
        self.assertEqual(busy(), (False, [False, False]))

    def test_status_is_what_the_cli_prints(self):
        holder = self.child("holder")
        holder.ask("hold", holder="models", entry="m", mib=1024)
        c = self.client()
        h = c.add_holder("mine", on_release=lambda a: 0)
        h.add_entry("e", GiB, 512 * MiB)
        g = c.admit(256 * MiB)
        c.pin(64 * MiB)
        mine = c.status()
        out = subprocess.run([support.program("comem"), "status", "--socket", self.m.socket, "--json"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        cli = json.loads(out.stdout)
        volatile = {"uptime_s", "idle_s", "expires_in_s", "sessions", "checks", "sessions_ended",  # the CLI's probe ended one
                    "booked", "stock", "booking_limit"}  # a stock lasts 100 ms after an admission

        def shape(x):  # the structure: keys (in order), list lengths, and the kind of every value
            if isinstance(x, dict):
                return [(k, shape(v)) for k, v in x.items()]
            if isinstance(x, list):
                return [shape(v) for v in x]
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                return "number"  # uptime is 0.02 in one and 0.026822100000000001 in the other
            return type(x).__name__

        def stable(x):
            if isinstance(x, dict):
                return {k: stable(v) for k, v in x.items() if k not in volatile}
            if isinstance(x, list):
                return [stable(v) for v in x]
            return x

        # The CLI leaves its own session out (nobody asked about it): the same processes, key for key.
        self.assertEqual([p["session"] for p in cli["devices"][0]["processes"]],
                         [p["session"] for p in mine["devices"][0]["processes"]])
        self.assertEqual(list(mine), list(cli))
        self.assertEqual(list(mine), ["schema", "coordinator", "counters", "pins", "devices", "wddm", "warnings"])
        self.assertEqual(shape(mine), shape(cli))
        self.assertEqual(stable(mine), stable(cli))
        self.assertEqual(mine["coordinator"]["socket"], self.m.socket)
        self.assertEqual(mine["coordinator"]["pid"], self.m.comemd.pid)
        self.assertEqual(mine["pins"]["total"], 64 * MiB)
        dev = mine["devices"][0]
        self.assertEqual((dev["capacity"], dev["driver_reserved"]), (CAPACITY, DRIVER_RESERVED))
        self.assertEqual(dev["free"], FREE0 - CONTEXT - GiB)
        self.assertEqual(dev["resident"], GiB + 512 * MiB)
        self.assertEqual(dev["granted"], 256 * MiB)
        self.assertEqual([(x["session"], x["bytes"]) for x in dev["grants"]], [(c.session, 256 * MiB)])
        g.cancel()
        c.unpin(64 * MiB)

    def test_local_mode_without_a_coordinator(self):
        missing = support.socket_in(self.m.dir, "nobody")
        with self.assertRaises(comem.Closed) as cm:
            comem.Client("x", socket=missing, require_coordinator=True)
        self.assertIsInstance(cm.exception, ConnectionError)
        self.assertEqual(cm.exception.status, errors.ECLOSED)
        # the exception says what the log would: which socket, and that nothing is there
        self.assertIn(missing, str(cm.exception))
        self.assertIn("no coordinator was started there", str(cm.exception))
        with comem.Client("local", socket=missing) as c:
            self.assertFalse(c.connected)
            self.assertIsNone(c.session)
            self.assertIn("local", repr(c))
            st = c.status()  # the shape comem status --json has, with nothing a coordinator would know
            self.assertEqual(list(st), ["schema", "coordinator", "counters", "pins", "devices", "wddm", "warnings", "local"])
            self.assertEqual((st["schema"], st["coordinator"], st["devices"]), (1, None, []))
            self.assertEqual(st["warnings"], [f"no coordinator answers at {missing}: this process decides locally"])
            self.assertEqual((st["local"]["name"], st["local"]["pid"]), ("local", os.getpid()))
            h = c.add_holder("models", on_release=lambda a: 0)
            e = h.add_entry("m", GiB)
            g = c.admit(GiB, holder=h)  # decided from this process's own reading of the card
            self.assertEqual((g.need, g.free_before, g.n_asked, g.asked), (need(GiB, floor=False), FREE0, 0, []))
            g.done(e, GiB)
            self.assertEqual(e.resident, GiB)
            with self.assertRaises(comem.Refused) as r:
                c.admit(8 * GiB)
            self.assertEqual(r.exception.short_by, need(8 * GiB, floor=False) - FREE0)
        self.assertIsNone(self.process("local"))  # it never reached this machine's comemd

    @unittest.skipIf(WINDOWS, "a folder's mode bits are POSIX'; Windows' DACL check (base/rundir_win.c) needs a "
                              "second user, which wine has not")
    def test_a_runtime_directory_others_can_reach_is_refused_saying_how_to_fix_it(self):
        loose = os.path.join(self.m.dir, "loose")
        os.mkdir(loose, 0o755)
        os.chmod(loose, 0o755)  # as plain mkdir makes it under a usual umask
        saved = {k: os.environ.pop(k, None) for k in ("COMEM_RUNTIME_DIR", "COMEM_SOCKET")}
        os.environ["COMEM_RUNTIME_DIR"] = loose  # and no COMEM_SOCKET: the default socket is in it
        try:
            for call in (comem.client.default_socket,
                         lambda: comem.Client("x", require_coordinator=True)):
                with self.assertRaises(comem.PermissionDenied) as cm:
                    call()
                self.assertIn(f"chmod 700 {loose}", str(cm.exception))
                self.assertIn("mode is 0755", str(cm.exception))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def test_embedded_coordinator_and_coordinator_thread(self):
        spec = f"sim:4GiB:reserved=256MiB:ctx=300MiB:path={os.path.join(self.m.dir, 'card2')}"
        sock = support.socket_in(self.m.dir, "thread")
        with comem.Coordinator(sock, spec) as co:
            with self.assertRaises(comem.Error) as cm:
                comem.Coordinator(sock, spec)
            self.assertEqual(cm.exception.status, errors.EEXIST)
            with comem.Client("in-thread", socket=sock, require_coordinator=True) as c:
                st = c.status()
                self.assertEqual(st["coordinator"]["pid"], os.getpid())
                self.assertEqual(st["devices"][0]["capacity"], 4 * GiB)
                self.assertEqual(st["devices"][0]["free"], 4 * GiB - 256 * MiB)
        self.assertIsNone(co._handle)
        with self.assertRaises(comem.Closed):
            comem.Client("after", socket=sock, require_coordinator=True)
        esock = support.socket_in(self.m.dir, "embed")
        os.environ["COMEM_DEVICE"] = spec  # what an embedded coordinator serves
        try:
            with comem.Client("host", role="host", socket=esock, embed=True, reserve_base=600 * MiB) as host:
                self.assertTrue(host.connected)
                with comem.Client("worker", socket=esock, require_coordinator=True) as w:
                    st = w.status()
                    self.assertEqual(st["coordinator"]["pid"], os.getpid())
                    self.assertEqual(sorted(p["name"] for p in st["devices"][0]["processes"]), ["host", "worker"])
                    self.assertEqual(st["devices"][0]["reserve"]["base"], 600 * MiB)
                    self.assertEqual(w.reserve(), (600 * MiB, PAGER_HEADROOM))
        finally:
            os.environ["COMEM_DEVICE"] = self.m.spec
        with self.assertRaises(comem.Closed):  # the embedded coordinator stopped with its client
            comem.Client("after", socket=esock, require_coordinator=True)

    @unittest.skipIf(WINDOWS, "a Unix socket in the runtime folder is POSIX's (Windows: test_default_pipe)")
    def test_default_socket(self):
        self.assertEqual(comem.default_socket(), self.m.socket)  # COMEM_SOCKET, as the C API reads it
        self.assertEqual(comem.runtime_dir(), self.m.dir)  # COMEM_RUNTIME_DIR
        os.environ.pop("COMEM_SOCKET")
        try:
            path = comem.default_socket()
        finally:
            os.environ["COMEM_SOCKET"] = self.m.socket
        self.assertTrue(path.endswith("comem.sock"), path)
        self.assertEqual(os.stat(os.path.dirname(path)).st_mode & 0o777, 0o700)


    @unittest.skipUnless(WINDOWS, "the default named pipe is Windows' (POSIX: test_default_socket)")
    def test_default_pipe(self):
        # Windows: the user's own pipe, named by the SID, whatever the runtime folder.
        self.assertRegex(comem.default_socket(), r"^\\\\\.\\pipe\\comem-S-1-[0-9-]+$")
        with comem.Client("named", socket=self.m.socket, require_coordinator=True) as c:
            self.assertTrue(c.connected)  # COMEM_SOCKET and socket= name another pipe
        self.assertEqual(comem.runtime_dir(), self.m.dir)  # COMEM_RUNTIME_DIR, where the lock file and a log go


class TestAdmission(MachineCase):
    """Admission, grants, refusals and the figures they carry."""

    def test_grant_at_once_done_and_cancel(self):
        c = self.client()
        h = c.add_holder("models", on_release=lambda a: 0)
        e = h.add_entry("m", 2 * GiB)
        g = c.admit(GiB, holder=h, timeout=5)
        self.assertIsInstance(g, comem.Grant)
        self.assertTrue(g.open)
        self.assertEqual((g.bytes, g.device, g.holder), (GiB, 0, h))
        self.assertEqual((g.need, g.free_before, g.free_after, g.freed), (need(GiB), FREE0, FREE0, 0))
        self.assertEqual((g.asked, g.n_asked, g.n_busy), ([], 0, 0))
        self.assertEqual([(x["session"], x["bytes"]) for x in self.grants()], [(c.session, GiB)])
        self.assertEqual(self.m.status()["devices"][0]["granted"], GiB)
        g.done(e, GiB)
        self.assertFalse(g.open)
        self.assertEqual(e.resident, GiB)
        self.assertEqual(self.grants(), [])
        self.assertEqual(self.entry("test", "m")["resident"], GiB)
        g.done(e, GiB)  # done twice: nothing more
        g.cancel()
        self.assertEqual(self.entry("test", "m")["resident"], GiB)
        # used above the grant: at most the grant's bytes become resident (the ledger's own rule)
        g2 = c.admit(256 * MiB, holder=h)
        g2.done(e, 2 * GiB)
        self.assertEqual(e.resident, GiB + 256 * MiB)
        self.assertEqual(self.entry("test", "m")["resident"], GiB + 256 * MiB)
        # cancel gives the bytes back; a grant used as a context manager is cancelled unless done
        g3 = c.admit(GiB)
        self.assertEqual(len(self.grants()), 1)
        g3.cancel()
        self.assertFalse(g3.open)
        self.assertEqual(self.grants(), [])
        with c.admit(GiB) as g4:
            self.assertEqual(len(self.grants()), 1)
        self.assertFalse(g4.open)
        self.assertEqual(self.grants(), [])
        fresh = h.add_entry("fresh", GiB)
        with c.admit(512 * MiB, holder=h) as g5:
            g5.done(fresh)  # used defaults to the grant
        self.assertEqual(fresh.resident, 512 * MiB)
        self.assertEqual(self.entry("test", "fresh")["resident"], 512 * MiB)
        self.assertEqual(self.grants(), [])
        # done with no entry: the bytes are given back
        g6 = c.admit(GiB)
        g6.done()
        self.assertEqual(self.grants(), [])
        # nothing to book
        g7 = c.admit(0)
        self.assertEqual((g7.bytes, g7.need), (0, need(0)))
        self.assertEqual(self.grants(), [])
        g7.cancel()
        self.assertFalse(g7.open)
        self.assertIn("closed", repr(g7))
        self.m.check_ledger(self)

    def test_working_memory_and_two_grants_never_share_bytes(self):
        c = self.client()
        g = c.admit(GiB, inference=2 * GiB, cast_forward=256 * MiB)
        self.assertEqual(g.need, need(GiB, working=2 * GiB + 256 * MiB))
        # the first grant's bytes are booked: the next admission sees them as taken
        g2 = c.admit(GiB)
        self.assertEqual(g2.free_before, FREE0 - GiB)
        self.assertEqual(self.m.status()["devices"][0]["granted"], 2 * GiB)
        # working memory below the minimum inference memory does not raise the target
        g3 = c.admit(GiB, inference=100 * MiB)
        self.assertEqual(g3.need, need(GiB))
        for x in (g, g2, g3):
            x.cancel()
        self.assertEqual(self.grants(), [])

    def test_refused_with_nobody_to_ask(self):
        other = self.child("other")
        other.ask("fill", mib=6144)  # bytes no ledger entry accounts for, like another application
        c = self.client()
        free = FREE0 - CONTEXT - 6 * GiB
        with self.assertRaises(comem.Refused) as cm:
            c.admit(GiB)
        r = cm.exception
        self.assertIsInstance(r, comem.Error)
        self.assertEqual(r.status, errors.ENOSPC)
        self.assertEqual(r.call, "comem_admit")
        self.assertEqual((r.need, r.free_before, r.free_after), (need(GiB), free, free))
        self.assertEqual(r.short_by, need(GiB) - free)
        self.assertEqual((r.asked, r.n_asked, r.n_busy, r.freed), ([], 0, 0, 0))
        self.assertIn(f"short by {r.short_by} bytes", str(r))
        self.assertEqual(self.grants(), [])
        self.assertEqual(r.fits, 0, "below the target's fixed part (minimum inference, floor) nothing fits")
        self.m.check_ledger(self)

    def test_an_absurd_admission_is_refused_at_once(self):
        """Issue 40 item 9: 2**63 - 1 bytes can never fit; refused at once, asking nobody (the old client worked
        out what part fits by walking ~2**59 candidates and never answered). 2**62: refused as fast, and what part fits is exact."""
        c = self.client()
        with self.assertRaises(comem.Refused) as cm:
            c.admit(2**63 - 1, timeout=60)
        r = cm.exception
        self.assertEqual((r.n_asked, r.freed), (0, 0))
        self.assertEqual(r.need, 2**63 - 1, "the target saturates")
        self.assertEqual(r.fits, 0, "a saturated target hides what a part would need")
        with self.assertRaises(comem.Refused) as cm:
            c.admit(2**62, timeout=60)
        r = cm.exception
        self.assertEqual(r.n_asked, 0)
        self.assertLessEqual(need(r.fits), r.free_after)
        self.assertGreater(need(r.fits + 1), r.free_after)
        self.assertEqual(self.grants(), [])
        self.m.check_ledger(self)

    def test_a_refusal_says_what_part_fits(self):
        other = self.child("other")
        other.ask("fill", mib=4096)
        c = self.client()
        free = FREE0 - CONTEXT - 4 * GiB
        with self.assertRaises(comem.Refused) as cm:
            c.admit(4 * GiB)
        r = cm.exception
        # The largest part whose target fits what is free (the worked formula above), by the library's inverse.
        self.assertLessEqual(need(r.fits), free)
        self.assertGreater(need(r.fits + 1), free)
        self.assertGreater(r.fits, GiB)
        with self.assertRaises(comem.Refused):
            c.admit(r.fits + 1)
        g = c.admit(r.fits)  # and it is granted as it is
        self.assertEqual(g.need, need(r.fits))
        g.cancel()
        self.m.check_ledger(self)

    def test_release_across_processes(self):
        holder = self.child("holder")
        holder.ask("hold", holder="models", entry="big", mib=6144)
        hid = self.holder_id("holder", "models")
        free = FREE0 - CONTEXT - 6 * GiB
        self.assertEqual(self.m.status()["devices"][0]["free"], free)
        c = self.client()
        g = c.admit(GiB)
        short = need(GiB) - free
        self.assertEqual((g.need, g.free_before, g.freed, g.free_after), (need(GiB), free, short, need(GiB)))
        self.assertEqual((g.asked, g.n_asked, g.n_busy), ([hid], 1, 0))
        asks = holder.ask("asks")["asks"]
        self.assertEqual([(a["kind"], a["bytes"], a["plan"]) for a in asks], [("bytes", short, [["big", short]])])
        self.assertNotEqual(asks[0]["thread"], asks[0]["main"])  # the library's callback thread
        self.assertEqual(holder.ask("card")["allocated"], 6 * GiB - short)
        self.assertEqual(self.entry("holder", "big")["resident"], 6 * GiB - short)
        dev = self.m.status()["devices"][0]
        self.assertEqual((dev["free"], dev["granted"]), (need(GiB), GiB))
        h = next(h for h in self.process("holder")["holders"] if h["name"] == "models")
        self.assertEqual(h["receipts_contradicted"], 0)  # the card saw its bytes leave
        g.cancel()
        self.m.check_ledger(self)

    def test_an_admission_that_can_never_fit_is_refused_without_emptying_anyone(self):
        # Issue 20 item 18: more than the card has free plus all that others hold: nobody is asked.
        holder = self.child("holder")
        holder.ask("hold", holder="models", entry="big", mib=2048)
        free = FREE0 - CONTEXT - 2 * GiB
        c = self.client()
        weights = 6 * GiB  # need(6 GiB) > free + 2 GiB
        self.assertGreater(need(weights), free + 2 * GiB)
        with self.assertRaises(comem.Refused) as cm:
            c.admit(weights)
        r = cm.exception
        self.assertEqual((r.n_asked, r.asked, r.freed), (0, [], 0))
        self.assertEqual(r.short_by, need(weights) - free)
        self.assertEqual(holder.ask("asks")["asks"], [])
        self.assertEqual(self.entry("holder", "big")["resident"], 2 * GiB)  # kept
        # One that others' bytes can make fit still asks them.
        g = c.admit(int((free + 1 * GiB - need(0)) / 1.1))
        self.assertEqual(g.n_asked, 1)
        self.assertGreater(g.freed, 0)
        g.cancel()
        self.m.check_ledger(self)

    def test_a_receipt_frees_no_more_than_its_holder_held(self):
        # a holder that frees nothing and says it freed 1 TiB: counted as what came off, nothing (issue 40
        # item 10; it was counted as the 6 GiB it held, at every ask), and flagged
        holder = self.child("holder")
        holder.ask("hold", holder="models", entry="big", mib=6144, mode="lie")
        free = FREE0 - CONTEXT - 6 * GiB
        c = self.client()
        with self.assertRaises(comem.Refused) as cm:  # the card did not move: re-measured, refused
            c.admit(GiB)
        r = cm.exception
        self.assertEqual((r.free_before, r.free_after), (free, free))
        self.assertGreater(r.n_asked, 0)
        self.assertEqual(r.freed, 0)  # each receipt counted as what came off its entry, not 1 TiB
        st = self.m.status()
        h = next(h for h in self.process("holder")["holders"] if h["name"] == "models")
        self.assertEqual(h["receipts_over"], len(holder.ask("asks")["asks"]))
        self.assertEqual(h["receipts_over"], r.n_asked)
        self.assertEqual(h["receipts_contradicted"], r.n_asked)  # and the card kept its 6 GiB each time
        self.assertIn("the card shows its process's use go from", self.m.comemd_log())
        self.assertEqual(st["counters"]["bytes_freed"], 0)
        self.assertIn("more than the", self.m.comemd_log())
        self.m.check_ledger(self)

    def test_refused_after_asking(self):
        holder = self.child("holder")
        holder.ask("hold", holder="models", entry="big", mib=6144, mode="zero")
        hid = self.holder_id("holder", "models")
        free = FREE0 - CONTEXT - 6 * GiB
        c = self.client()
        with self.assertRaises(comem.Refused) as cm:
            c.admit(GiB)
        r = cm.exception
        self.assertEqual((r.short_by, r.need, r.free_before, r.free_after, r.freed),
                         (need(GiB) - free, need(GiB), free, free, 0))
        self.assertGreaterEqual(r.n_asked, 1)
        self.assertEqual(r.asked, [hid])  # whom it asked: the one holder (n_asked counts each round's ask)
        self.assertEqual(r.n_busy, 0)
        self.assertEqual(len(holder.ask("asks")["asks"]), r.n_asked)
        self.assertIn(f"{r.n_asked} ask(s) to 1 holder(s)", str(r))  # one holder, however many rounds
        self.assertEqual(self.entry("holder", "big")["resident"], 6 * GiB)
        self.assertEqual(self.grants(), [])

    def test_busy_holders(self):
        holder = self.child("holder")
        holder.ask("hold", holder="models", entry="big", mib=5120)
        hid = self.holder_id("holder", "models")
        free = FREE0 - CONTEXT - 5 * GiB
        c = self.client()
        # A computing holder is not asked: the admission waits for its node to end, and when the
        # requester's timeout comes first it is refused, nobody asked, the holder counted busy.
        holder.ask("busy", on=True)
        with self.assertRaises(comem.Refused) as cm:
            c.admit(GiB, timeout=0.5)
        self.assertEqual((cm.exception.n_asked, cm.exception.n_busy, cm.exception.short_by), (0, 1, need(GiB) - free))
        self.assertEqual(holder.ask("asks")["asks"], [])
        holder.ask("busy", on=False)
        # One that releases while busy (a pager) is asked all the same.
        holder.ask("hold", holder="pages", entry="paged", mib=1024, while_busy=True)
        free -= GiB
        holder.ask("busy", on=True)
        g = c.admit(512 * MiB)
        self.assertEqual((g.asked, g.n_busy, g.freed), ([self.holder_id("holder", "pages")], 0,
                                                        need(512 * MiB) - free))
        self.assertEqual([a["holder"] for a in holder.ask("asks")["asks"]], ["pages"])
        self.assertEqual(self.entry("holder", "big")["resident"], 5 * GiB)
        self.assertNotEqual(hid, g.asked[0])
        g.cancel()
        self.m.check_ledger(self)

    def test_an_admission_waits_for_a_computing_holders_node_boundary(self):
        # Issue 20 item 17: the bytes it needs are a computing holder's. It is not refused at once:
        # it waits, and is granted from that holder's bytes once its node ends.
        holder = self.child("holder")
        holder.ask("hold", holder="models", entry="big", mib=5120)
        hid = self.holder_id("holder", "models")
        c = self.client()
        holder.ask("busy", on=True)
        out = {}

        def admit():
            try:
                out["grant"] = c.admit(GiB, timeout=30)
            except Exception as e:  # noqa: BLE001 (whatever it is, the assertions below say so)
                out["error"] = e

        t = threading.Thread(target=admit)
        t.start()
        while self.m.status()["coordinator"]["requests_in_flight"] == 0 and t.is_alive():
            time.sleep(0.01)  # the admission is with the coordinator, waiting
        time.sleep(0.2)
        self.assertTrue(t.is_alive(), out)  # not answered while the holder computes
        self.assertEqual(holder.ask("asks")["asks"], [])  # and the holder was not asked
        holder.ask("busy", on=False)  # the node ends
        t.join(30)
        self.assertNotIn("error", out)
        g = out["grant"]
        self.assertEqual(g.asked, [hid])  # asked at its boundary
        self.assertGreater(g.freed, 0)
        self.assertEqual([a["holder"] for a in holder.ask("asks")["asks"]], ["models"])
        g.cancel()
        self.m.check_ledger(self)

    def test_busy_raised_in_a_callback_replans_elsewhere(self):
        calls = []

        def busy(ask):
            calls.append((threading.get_ident(), ask.bytes))
            raise comem.Busy()

        holding = self.client("holding")
        holding.add_holder("small", on_release=busy).add_entry("s", 2 * GiB, 2 * GiB)  # ComfyUI's order: asked first
        other = self.child("other")
        other.ask("hold", holder="models", entry="big", mib=4096)
        hs, hb = self.holder_id("holding", "small"), self.holder_id("other", "models")
        free = FREE0 - CONTEXT - 4 * GiB
        short = need(3 * GiB) - free
        self.assertLess(short, 2 * GiB)  # either entry alone covers it
        c = self.client()
        g = c.admit(3 * GiB)
        self.assertEqual([b for _, b in calls], [short])  # asked first, answered busy...
        self.assertNotEqual(calls[0][0], threading.get_ident())
        self.assertEqual((g.asked, g.n_asked, g.n_busy), ([hs, hb], 2, 1))  # ...so the plan went elsewhere
        self.assertEqual((g.freed, g.free_before, g.free_after), (short, free, need(3 * GiB)))
        self.assertEqual([a["bytes"] for a in other.ask("asks")["asks"]], [short])
        self.assertEqual(self.entry("holding", "s")["resident"], 2 * GiB)
        self.assertEqual(self.entry("other", "big")["resident"], 4 * GiB - short)
        g.cancel()
        self.m.check_ledger(self)

    def test_references_rank_equally_offloaded_entries(self):
        # ComfyUI's second key across processes: of two fully loaded entries of one size, the one with
        # fewer references is asked first, though the other was loaded more recently (the third key).
        few = self.client("few").add_holder("models", on_release=lambda a: 0).add_entry("f", 2 * GiB, 2 * GiB)
        many = self.client("many").add_holder("models", on_release=lambda a: 0).add_entry("m", 2 * GiB, 2 * GiB)
        hf, hm = self.holder_id("few", "models"), self.holder_id("many", "models")
        few.census(refs=2)
        many.census(refs=5)
        self.assertEqual((few.refs, many.refs, many.resident), (2, 5, 2 * GiB))
        self.assertTrue(wait_for(lambda: (self.entry("few", "f").get("refs"), self.entry("many", "m").get("refs"))
                                 == (2, 5)))
        # Short by 3 GiB: the plan takes all of the first entry and part of the second; both answer 0. The
        # entries are booked, not on the card, so the shortfall is the ledger's books' (capacity less what
        # the ledger names: the entries and the processes' context floors).
        c = self.client()
        weights = CAPACITY - self.m.status()["devices"][0]["attributed"] + 3 * GiB
        with self.assertRaises(comem.Refused) as cm:
            c.admit(weights)
        self.assertEqual(cm.exception.asked[:2], [hf, hm])
        many.census(refs=1)  # now "many" holds fewer references: it goes first
        self.assertTrue(wait_for(lambda: self.entry("many", "m").get("refs") == 1))
        with self.assertRaises(comem.Refused) as cm:
            c.admit(weights)
        self.assertEqual(cm.exception.asked[:2], [hm, hf])
        with self.assertRaises(ValueError):
            few.census(refs=-1)
        self.assertEqual(few.refs, 2)
        self.m.check_ledger(self)

    def test_timeout_decides_with_what_came_back(self):
        holder = self.child("holder")
        holder.ask("hold", holder="models", entry="big", mib=6144, mode="slow")
        hid = self.holder_id("holder", "models")
        c = self.client(timeout=1.0)  # the client's default wait
        t0 = time.monotonic()
        with self.assertRaises(comem.Refused) as cm:
            c.admit(GiB)
        self.assertLess(time.monotonic() - t0, 5)
        r = cm.exception
        self.assertEqual((r.asked, r.freed, r.free_after), ([hid], 0, r.free_before))
        self.assertEqual(self.grants(), [])
        holder.ask("go")
        short = need(GiB) - r.free_before
        # the late receipt still counts: the bytes it freed are back on the card
        self.assertTrue(wait_for(lambda: self.entry("holder", "big")["resident"] == 6 * GiB - short))
        self.assertEqual(self.m.status()["devices"][0]["free"], r.free_before + short)
        c.set_timeout(10)
        holder.ask("mode", holder="models", mode="free")
        c.admit(GiB, timeout=(2**31 - 1) / 1000).cancel()  # the longest wait there is (24.8 days)
        self.m.check_ledger(self)

    def test_a_holder_moving_gigabytes_is_given_the_time(self):
        holder = self.child("holder")
        holder.ask("hold", holder="models", entry="big", mib=6144, mode="slow")
        c = self.client(timeout=20)
        free = FREE0 - CONTEXT - 6 * GiB
        asked = need(3 * GiB) - free  # the ask moves this much: its deadline is 2 s + 1 ms per MiB of it
        self.assertGreater(asked, GiB)
        out = {}
        t = threading.Thread(target=lambda: out.update(g=c.admit(3 * GiB)))
        t.start()
        self.assertTrue(wait_for(lambda: len(holder.ask("asks")["asks"]) == 1))
        time.sleep(2.3)  # past the base deadline, inside the one this ask was given
        holder.ask("go")
        t.join(20)
        self.assertIn("g", out, "the admission was refused: the holder was not given the time to move its bytes")
        out["g"].cancel()
        self.assertEqual(self.entry("holder", "big")["resident"], 6 * GiB - asked)
        self.m.check_ledger(self)

    def test_a_holder_without_entries_is_asked_for_the_bytes_it_reports(self):
        # Issue 14's report: a raw holder with a release callback and 10 GiB, no entries, was never
        # asked ("asked 0 holder(s)") and a 16 GiB admission was refused. Here: 5 GiB of an 8 GiB card.
        raw = self.child("raw")
        raw.ask("raw", holder="scratch", mib=5120)
        hid = self.holder_id("raw", "scratch")
        self.assertTrue(wait_for(lambda: self.process("raw")["holders"][0].get("overhead") == 5 * GiB))
        free = FREE0 - CONTEXT - 5 * GiB
        weights = int((free + 3 * GiB - need(0)) / 1.1)  # needs 3 GiB of the raw holder's 5
        c = self.client()
        g = c.admit(weights)
        short = need(weights) - free
        self.assertGreater(short, 2 * GiB)
        self.assertEqual((g.asked, g.n_asked, g.freed, g.free_before), ([hid], 1, short, free))
        self.assertEqual(raw.ask("asks")["asks"][0]["bytes"], short)
        self.assertEqual(raw.ask("card")["allocated"], 5 * GiB - short)
        self.assertTrue(wait_for(lambda: self.process("raw")["holders"][0].get("overhead") == 5 * GiB - short))
        g.cancel()
        self.m.check_ledger(self)

    def test_unregistered_bytes_are_the_process_s_own_apart_from_its_context(self):
        w = self.child("w")
        w.ask("hold", holder="models", entry="m", mib=1024)
        w.ask("raw", holder="scratch", mib=512)
        w.ask("fill", mib=2048)  # allocated outside any holder
        with comem.View(self.m.socket) as v:
            self.assertTrue(wait_for(lambda: self.process("w")["unregistered"] == 2 * GiB))
            self.assertTrue(wait_for(lambda: v.unregistered(0) == 2 * GiB))
        p = self.process("w")
        self.assertEqual((p["resident"], p["context"], p["overhead"], p["unregistered"]),
                         (GiB, CONTEXT, 512 * MiB, 2 * GiB))
        self.assertEqual(p["context_floor"], CONTEXT + 512 * MiB + 2 * GiB)  # all it holds beyond entries, split above
        dev = self.m.status()["devices"][0]
        self.assertEqual((dev["contexts"], dev["overhead"], dev["unregistered"]), (CONTEXT, 512 * MiB, 2 * GiB))
        self.assertEqual(dev["unattributed"], 0)  # every byte is the process's: none is another app's
        out = subprocess.run([support.program("comem"), "status", "--socket", self.m.socket],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.count("unregistered 2"), 2, out.stdout)  # the device's line and the process's
        self.m.check_ledger(self)

    def test_bytes_registered_after_a_reading_are_not_counted_twice(self):
        # A worker loads 6 GiB, the coordinator reads the card (its floor: those bytes, unregistered),
        # then the worker registers them: the entry takes them out of the floor instead of being
        # refused for a card that "cannot hold that much" (6 GiB floor + 6 GiB entry > 8 GiB).
        w = self.child("w")
        w.ask("hold", holder="models")
        w.ask("fill", mib=6144)
        self.assertTrue(wait_for(lambda: self.process("w")["unregistered"] == 6 * GiB))
        w.ask("register", holder="models", entry="big", mib=6144)
        p = self.process("w")
        self.assertEqual((p["resident"], p["unregistered"]), (6 * GiB, 0))
        self.assertEqual(p["context"], CONTEXT)  # the context stays the floor's
        self.assertTrue(wait_for(lambda: self.process("w")["context_floor"] == CONTEXT))  # and a reading agrees
        self.m.check_ledger(self)

    def test_sigkill_mid_admission_leaves_nothing_in_the_ledger(self):
        holder = self.child("holder")
        holder.ask("hold", holder="models", entry="big", mib=5120, mode="slow")
        victim = self.child("victim")
        # The victim first loads something for real: a grant done into an entry, bytes on the card.
        g = victim.ask("admit", mib=256)
        self.assertTrue(g.get("granted"), g)
        self.assertEqual(g["n_asked"], 0)
        victim.ask("done", entry_mib=256)
        p = self.process("victim")
        self.assertEqual((p["resident"], p["context_floor"]), (256 * MiB, CONTEXT))
        # Its next admission must ask the slow holder, and waits.
        self.send(victim, "admit", mib=1024, timeout=30)
        self.assertTrue(wait_for(lambda: len(holder.ask("asks")["asks"]) == 1))
        self.assertEqual(holder.ask("asks")["asks"][0]["holder"], "models")
        self.assertIsNotNone(self.process("victim"))
        support.kill_hard(victim.proc)
        victim.proc.wait()
        self.assertTrue(wait_for(lambda: self.process("victim") is None))
        st = self.m.status()
        dev = st["devices"][0]
        self.assertEqual(dev["grants"], [])
        self.assertEqual(dev["granted"], 0)
        self.assertEqual([p["name"] for p in dev["processes"] if p["pid"] == victim.pid], [])
        self.assertEqual(dev["resident"], 5 * GiB)  # the holder's entry and nothing of the victim
        self.assertEqual(dev["context_floors"], CONTEXT)
        with comem.SimCard(self.m.spec) as card:
            self.assertEqual(card.usage(victim.pid), (0, 0))  # the card reaped its memory too
        self.m.check_ledger(self)
        # The holder answers after the victim is gone: its receipt goes nowhere, nothing is booked.
        holder.ask("go")
        self.assertTrue(wait_for(lambda: self.entry("holder", "big")["resident"] < 5 * GiB))
        self.assertEqual(self.grants(), [])
        # The device's queue is not stuck behind the dead request.
        holder.ask("mode", holder="models", mode="free")
        c = self.client()
        g2 = c.admit(GiB, timeout=10)
        self.assertEqual([x["session"] for x in self.grants()], [c.session])
        g2.cancel()
        self.m.check_ledger(self)


class TestUnifiedMemory(MachineCase):
    """F21: an integrated GPU's memory is host RAM: VRAM and pinned RAM draw on one pool."""

    card = "sim:8GiB:uma:reserved=256MiB:ctx=300MiB"

    def test_vram_and_pins_never_sum_past_the_pool(self):
        self.assertTrue(self.m.status()["devices"][0]["unified"])
        c = self.client()
        c.add_holder("models", on_release=lambda a: 0).add_entry("m", 5 * GiB, 5 * GiB)
        # The card's reading has room (the entry is only booked here), but the books do not: 5 + 4 > 8 GiB.
        with self.assertRaises(comem.Refused) as cm:
            c.pin(4 * GiB)
        self.assertEqual(cm.exception.short_by, GiB)
        c.pin(2 * GiB)
        dev = self.m.status()["devices"][0]
        self.assertEqual(dev["attributed"], 7 * GiB)  # residency and the pool's pinned RAM together
        self.m.check_ledger(self)


    def test_a_refusal_says_what_pinned_ram_must_give_and_giving_it_is_enough(self):
        # Issue 21 item 7: the card's reading leaves pins out, the pool's books do not. Refused short by 0,
        # a client that made room by short_by freed nothing; now short_by is the books' shortfall.
        c = self.client()
        h = c.add_holder("models")
        c.pin(4 * GiB)
        dev = self.m.status()["devices"][0]
        books = dev["capacity"] - dev["attributed"]  # what the pool's books leave with the pins out
        want = books + 512 * MiB  # the card's reading has room for it (and its 1.1x and inference), the books not
        with self.assertRaises(comem.Refused) as cm:
            c.admit(want, holder=h)
        self.assertEqual(cm.exception.short_by, 512 * MiB)
        c.unpin(cm.exception.short_by)  # the room it said was missing, and no more
        c.admit(want, holder=h).cancel()
        self.m.check_ledger(self)


class TestWddmSpill(MachineCase):
    """Spill telemetry: on a WDDM card an overcommit is an event, with the process that pushed it."""

    card = "sim:8GiB:wddm:reserved=256MiB:ctx=300MiB"

    def test_overcommit_is_an_event_with_its_culprit(self):
        w1, w2 = self.child("w1"), self.child("w2")
        w1.ask("fill", mib=4096)
        dev = self.m.status()["devices"][0]  # a reading: within the card's memory
        self.assertEqual((dev["spill"]["overcommit"], dev["spill"]["events"]), (0, 0))
        w2.ask("fill", mib=4096)  # 256 MiB reserved + 2 contexts + 8 GiB: past the card's 8 GiB
        st = self.m.status()
        sp = st["devices"][0]["spill"]
        over = 256 * MiB + 2 * CONTEXT + 8 * GiB - CAPACITY
        self.assertEqual((sp["overcommit"], sp["events"], sp["peak"]), (over, 1, over))
        # w2 pushed it over: its 4 GiB, and the context that came with them
        self.assertEqual((sp["pid"], sp["process"], sp["pushed_by"]), (w2.pid, "w2", 4 * GiB + CONTEXT))
        self.assertEqual(st["counters"]["spill_events"], 1)
        self.assertTrue(wait_for(lambda: "device 0 is overcommitted by" in self.m.comemd_log()))
        self.assertIn("pushed past its memory by 'w2'", self.m.comemd_log())
        self.assertEqual(self.m.status()["devices"][0]["spill"]["events"], 1)  # one event, not one per reading
        out = subprocess.run([support.program("comem"), "status", "--socket", self.m.socket],
                             capture_output=True, text=True, timeout=30)
        self.assertIn("OVERCOMMITTED by", out.stdout)
        w2.proc.kill()
        w2.proc.wait()
        self.assertTrue(wait_for(lambda: self.m.status()["devices"][0]["spill"]["overcommit"] == 0))
        self.assertTrue(wait_for(lambda: "no longer overcommitted" in self.m.comemd_log()))
        self.assertEqual(self.m.status()["devices"][0]["spill"]["events"], 1)


class TestCallbacks(MachineCase):
    """Release callbacks: the library's thread, Busy, exceptions, and the callable's lifetime."""

    def setUp(self):
        super().setUp()
        self.filler = self.child("filler")
        # the card is short for everything below; what the holders below say they hold fits beside the
        # filler once the coordinator has measured it (the ledger refuses residency the card cannot have)
        self.filler.ask("fill", mib=5120)
        self.free = FREE0 - CONTEXT - 5 * GiB
        self.requester = self.client("requester")
        self.holding = self.client("holding")

    def admit(self):
        # What an admission of 1 GiB asks for: the card's shortfall, or the books' where they are tighter
        # (the holders below book HELD bytes the card does not show; a grant is booked only within capacity).
        books = CAPACITY - self.m.status()["devices"][0]["attributed"]
        self.short = max(need(GiB) - self.free, GiB - books)
        try:
            return self.requester.admit(GiB)
        except comem.Refused as r:
            return r

    def test_callbacks_run_on_the_library_thread(self):
        seen = []
        made = {}

        def on_release(ask):
            seen.append((threading.get_ident(), ask))
            e = ask.plan[0][0]
            e.resident = e.resident - ask.bytes  # calls from a callback work (and wait) like any other
            return ask.bytes

        def register():  # the holder is made on a thread of its own
            made["thread"] = threading.get_ident()
            made["holder"] = self.holding.add_holder("models", on_release=on_release)
            made["entry"] = made["holder"].add_entry("m", 4 * GiB, HELD)

        t = threading.Thread(target=register)
        t.start()
        t.join()
        h, e = made["holder"], made["entry"]
        hid = self.holder_id("holding", "models")
        r = self.admit()  # this thread waits in the admission while the callback runs elsewhere
        # The callback said it freed bytes, but the card did not move: believed, re-measured, refused.
        self.assertIsInstance(r, comem.Refused)
        self.assertGreaterEqual(len(seen), 1)
        self.assertEqual((r.n_asked, r.asked), (len(seen), [hid]))
        self.assertEqual(r.freed, sum(a.bytes for _, a in seen))
        threads = {ident for ident, _ in seen}
        self.assertEqual(len(threads), 1)  # one callback thread, every ask
        self.assertNotIn(threading.main_thread().ident, threads)
        self.assertNotIn(made["thread"], threads)
        self.assertNotIn(threading.get_ident(), threads)
        first = seen[0][1]
        self.assertIsInstance(first, comem.ReleaseAsk)
        self.assertIs(first.holder, h)
        self.assertEqual((first.kind, first.bytes), ("bytes", self.short))
        self.assertEqual(len(first.plan), 1)
        self.assertIs(first.plan[0][0], e)
        self.assertEqual(first.plan[0][1], self.short)
        self.assertEqual(e.resident, HELD - r.freed)
        self.assertEqual(self.entry("holding", "m")["resident"], HELD - r.freed)
        self.m.check_ledger(self)

    def test_busy_raised_by_the_only_holder_is_a_refusal(self):
        h = self.holding.add_holder("models", on_release=lambda a: (_ for _ in ()).throw(comem.Busy()))
        h.add_entry("m", 4 * GiB, HELD)
        hid = self.holder_id("holding", "models")
        r = self.admit()
        self.assertIsInstance(r, comem.Refused)
        self.assertEqual((r.asked, r.n_asked, r.n_busy, r.freed), ([hid], 1, 1, 0))
        self.assertEqual(r.short_by, self.short)
        self.assertIn("1 busy", str(r))

    def test_an_exception_in_a_callback_is_logged_and_answered_as_nothing_freed(self):
        state = {"mode": "raise", "calls": 0}

        def on_release(ask):
            state["calls"] += 1
            if state["mode"] == "raise":
                raise RuntimeError("the holder failed")
            if state["mode"] == "garbage":
                return "not a number"
            e.resident = e.resident - 256 * MiB  # what it says it freed comes off its entry: believed
            return 256 * MiB

        h = self.holding.add_holder("flaky", on_release=on_release)
        e = h.add_entry("m", 4 * GiB, HELD)
        hid = self.holder_id("holding", "flaky")
        with self.assertLogs("comem", "ERROR") as logs:
            r = self.admit()
        self.assertIsInstance(r, comem.Refused)
        self.assertEqual((r.freed, r.n_busy, r.asked), (0, 0, [hid]))
        self.assertEqual(len(logs.records), state["calls"])
        self.assertEqual(r.n_asked, state["calls"])
        rec = logs.records[0]
        self.assertIn("'flaky'", rec.getMessage())
        self.assertIn("0 bytes freed", rec.getMessage())
        self.assertIs(rec.exc_info[0], RuntimeError)
        self.assertNotEqual(rec.thread, threading.get_ident())
        # A return value that is not a number is the same.
        state.update(mode="garbage", calls=0)
        with self.assertLogs("comem", "ERROR") as logs:
            r = self.admit()
        self.assertEqual((r.freed, len(logs.records)), (0, state["calls"]))
        self.assertIs(logs.records[0].exc_info[0], ValueError)
        # The client survived and the same callback answers the next ask.
        state.update(mode="ok", calls=0)
        r = self.admit()
        self.assertEqual(r.freed, 256 * MiB * state["calls"])
        self.assertTrue(self.holding.connected)
        self.assertEqual(self.process("holding")["holders"][0]["name"], "flaky")
        self.m.check_ledger(self)

    def test_the_callable_lives_as_long_as_the_holder(self):
        asked = []

        def make():
            local = []

            def on_release(ask):  # a closure no one else refers to
                local.append(ask.bytes)
                asked.append(ask.bytes)
                return 0
            return on_release

        fn = make()
        ref = weakref.ref(fn)
        h = self.holding.add_holder("models", on_release=fn)
        h.add_entry("m", 4 * GiB, HELD)
        del fn
        gc.collect()
        self.assertIsNotNone(ref())
        r = self.admit()
        self.assertEqual(asked[0], self.short)
        self.assertEqual(r.n_asked, len(asked))
        # lambdas too
        h2 = self.holding.add_holder("lam", on_release=lambda a, box=[]: box.append(a) or 0)
        lref = weakref.ref(h2.callback)
        h2.add_entry("l", GiB, 256 * MiB)
        gc.collect()
        self.assertIsNotNone(lref())
        # Removed, the holder is not asked any more, and once dropped its callable goes with it.
        h.remove()
        h2.remove()
        n = len(asked)
        r = self.admit()
        self.assertEqual((r.n_asked, len(asked)), (0, n))
        del h, h2
        gc.collect()
        self.assertIsNone(ref())
        self.assertIsNone(lref())

    def test_a_falsy_callable_is_still_a_callback(self):
        class Ladder:
            def __init__(self):
                self.asks = []

            def __len__(self):  # an empty ladder is falsy, and still a callable
                return 0

            def __call__(self, ask):
                self.asks.append(ask.bytes)
                return 0

        ladder = Ladder()
        h = self.holding.add_holder("ladder", on_release=ladder)
        h.add_entry("m", 4 * GiB, HELD)
        self.assertIs(h.callback, ladder)
        self.assertEqual(self.process("holding")["holders"][0]["answers"], ["release", "idle"])
        r = self.admit()
        self.assertGreaterEqual(len(ladder.asks), 1)
        self.assertEqual(ladder.asks[0], self.short)
        self.assertEqual(r.n_asked, len(ladder.asks))

    def test_closing_the_client_from_its_callback_is_refused(self):
        def on_release(ask):
            self.holding.close()
            return GiB

        h = self.holding.add_holder("models", on_release=on_release)
        h.add_entry("m", 4 * GiB, HELD)
        with self.assertLogs("comem", "ERROR") as logs:
            r = self.admit()
        self.assertEqual(r.freed, 0)
        self.assertIs(logs.records[0].exc_info[0], RuntimeError)
        self.assertFalse(self.holding.closed)
        self.assertTrue(self.holding.connected)


class TestOtherCalls(MachineCase):
    """ask_release (the stand-in path), pressure (the OOM retry site) and pins."""

    def test_ask_release(self):
        holder = self.child("holder")
        holder.ask("hold", holder="models", entry="a", mib=2048)
        holder.ask("hold", holder="models", entry="b", mib=1024)
        ea, eb = self.entry("holder", "a")["id"], self.entry("holder", "b")["id"]
        c = self.client()
        r = c.ask_release(ea, 512 * MiB, timeout=5)
        self.assertIsInstance(r, comem.Released)
        self.assertEqual(r, (512 * MiB, 1536 * MiB))
        self.assertEqual(holder.ask("asks")["asks"][-1]["plan"], [["a", 512 * MiB]])
        self.assertEqual(self.entry("holder", "a")["resident"], 1536 * MiB)
        self.assertEqual(holder.ask("card")["allocated"], 2560 * MiB)
        self.assertEqual(c.ask_release(int(eb, 16)), (GiB, 0))  # the int id; None: all of it
        self.assertEqual(self.entry("holder", "b")["resident"], 0)
        holder.ask("busy", on=True)
        with self.assertRaises(comem.Busy) as cm:
            c.ask_release(ea, MiB)
        self.assertEqual(cm.exception.status, errors.EBUSY)
        holder.ask("busy", on=False)
        with self.assertRaises(comem.NotFound):
            c.ask_release("abcdef12", MiB)
        mine = c.add_holder("mine", on_release=lambda a: 0).add_entry("own", GiB, GiB)
        with self.assertRaises(comem.Error) as cm:
            c.ask_release(self.entry("test", "own")["id"])
        self.assertEqual(cm.exception.status, errors.EINVAL)
        self.assertEqual(mine.resident, GiB)
        holder.finish()
        self.assertTrue(wait_for(lambda: self.process("holder") is None))
        with self.assertRaises(comem.NotFound) as cm:
            c.ask_release(ea)
        self.assertEqual(cm.exception.freed, 0)
        self.m.check_ledger(self)

    def test_pressure_asks_idle_siblings_first(self):
        holder = self.child("holder")
        holder.ask("hold", holder="models", entry="m", mib=3072)
        c = self.client()
        c.add_holder("mine", on_release=lambda a: self.fail("pressure asked the requester's own holder"))
        self.assertEqual(c.pressure(GiB, timeout=5), GiB)
        self.assertEqual([(a["kind"], a["bytes"]) for a in holder.ask("asks")["asks"]], [("bytes", GiB)])
        self.assertEqual(self.entry("holder", "m")["resident"], 2 * GiB)
        holder.ask("busy", on=True)
        self.assertEqual(c.pressure(GiB), 0)
        self.assertEqual(len(holder.ask("asks")["asks"]), 1)
        holder.ask("busy", on=False)
        holder.ask("mode", holder="models", mode="busy")
        self.assertEqual(c.pressure(GiB), 0)
        self.assertEqual(self.entry("holder", "m")["resident"], 2 * GiB)
        self.assertEqual(c.pressure(0), 0)
        self.m.check_ledger(self)

    def test_pins(self):
        c = self.client()
        h = c.add_holder("pinset", kind="pins")
        ceiling = self.m.status()["pins"]["max"]
        self.assertGreater(ceiling, 2 * GiB)

        def pins():
            return self.m.status()["pins"]["total"], self.process("test")["pinned"]

        c.pin(GiB)
        self.assertEqual(pins(), (GiB, GiB))
        h.pin(512 * MiB)
        self.assertEqual(pins(), (GiB + 512 * MiB, GiB + 512 * MiB))
        h.unpin(512 * MiB)
        with c.pinned(256 * MiB):
            self.assertEqual(pins(), (GiB + 256 * MiB, GiB + 256 * MiB))
        self.assertEqual(pins(), (GiB, GiB))
        with self.assertRaises(comem.Refused) as cm:
            c.pin(ceiling)
        self.assertEqual(cm.exception.short_by, GiB)
        self.assertEqual(cm.exception.call, "comem_pin_acquire")
        self.assertEqual(pins(), (GiB, GiB))
        with self.assertRaises(comem.Error) as cm:  # more than it pinned: said, and nothing changes
            c.unpin(2**62)
        self.assertEqual(cm.exception.status, errors.ERANGE)
        self.assertIn("more than this client pinned", str(cm.exception))
        self.assertEqual(pins(), (GiB, GiB))
        c.unpin(GiB)
        self.assertEqual(pins(), (0, 0))
        self.m.check_ledger(self)

    def test_pin_refusal_asks_pin_holders(self):
        """Over the ceiling, the coordinator asks other processes' pin holders to give some back."""
        c = self.client()
        ceiling = self.m.status()["pins"]["max"]
        holder = self.child("holder")
        holder.ask("hold", holder="pinned", answers=["pins"])
        holder.ask("pin", mib=2048, holder="pinned")
        self.assertEqual(self.process("holder")["pinned"], 2 * GiB)
        want = ceiling - GiB
        with self.assertRaises(comem.Refused) as cm:
            c.pin(want)
        self.assertEqual(cm.exception.short_by, GiB)
        self.assertTrue(wait_for(lambda: holder.ask("asks")["asks"]))
        ask = holder.ask("asks")["asks"][0]
        self.assertEqual(ask["kind"], "pins")
        self.assertGreaterEqual(ask["bytes"], GiB)
        self.assertTrue(wait_for(lambda: self.process("holder")["pinned"] == 2 * GiB - ask["bytes"]))
        # Its receipt is believed: a pin holder that books its pins and reports none held what its process booked.
        pinned_holder = next(h for h in self.process("holder")["holders"] if h["name"] == "pinned")
        self.assertEqual(pinned_holder["receipts_over"], 0)
        # The holder unpins inside its callback and the receipt follows the callback: wait for it.
        self.assertTrue(wait_for(lambda: self.m.status()["counters"]["bytes_freed"] >= ask["bytes"]))
        c.pin(want)
        self.assertEqual(self.m.status()["pins"]["total"], want + 2 * GiB - ask["bytes"])
        c.unpin(want)
        self.m.check_ledger(self)


if __name__ == "__main__":
    unittest.main()
