"""comem steering the real comfy-aimdo's headroom from the ledger (python/comem/comfy/steer.py).

The real ``comfy_aimdo`` (0.4.13 in the tests' environment; the newest in the
second one, run as a child of this suite) is loaded with ``control.init()``,
which needs no GPU: its library and its headroom knob are real, only its
devices are absent (its own usage then counts 0). A real comemd serves a
simulated card; another process's admissions and allocations move the view,
and the knob inside aimdo's library must follow: every byte granted to
another process is headroom aimdo keeps here, and nothing is set below what
the process started with.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import unittest

import support
from support import GiB, MiB, Machine, wait_for

CARD = "sim:8GiB:reserved=256MiB:ctx=300MiB"


def real_aimdo():
    import comfy_aimdo.control as control
    logging.getLogger().setLevel(logging.ERROR)  # its vendor autodetect warns on a machine without a GPU
    control.init()
    return control


class SteerCase(unittest.TestCase):
    def setUp(self) -> None:
        try:
            self.control = real_aimdo()
        except ImportError as e:
            self.skipTest(f"comfy_aimdo is not installed ({e}): run in the environment scripts/venv.sh makes")
        import comem
        from comem.comfy import steer
        self.comem = comem
        self.steer = steer
        self.machine = Machine(CARD).__enter__()
        self.addCleanup(self.machine.__exit__, None, None, None)
        self.view = comem.View(self.machine.socket)
        self.addCleanup(self.view.close)
        self.other = comem.Client("other", role="worker", socket=self.machine.socket, require_coordinator=True)
        self.addCleanup(self.other.close)
        self.card = comem.SimCard(self.machine.spec)
        self.addCleanup(self.card.close)
        self.card.touch()  # this process's context is on the card before any figure is taken
        self._knob = steer.Knob(self.control, steer.KNOWN[steer.aimdo_version(self.control)])
        self.start_headroom = self._knob.get()
        self.addCleanup(self._knob.set, self.start_headroom)

    def card_seen(self) -> None:
        """Waits until the coordinator's view has the card's reading as it is now."""
        self.settled(lambda: self.view.read(0).free == self.card.read(0).free)

    def settled(self, pred):
        """Waits until the coordinator's published view satisfies pred (it publishes on its own tick)."""
        self.assertTrue(wait_for(pred, 10), "the coordinator's view never showed it")

    def knob(self) -> int:
        """The headroom inside aimdo's library now."""
        return self._knob.get()

    def steered_host(self):
        """ComfyUI's host adapter over the real aimdo, installed once the view has the card; its steer runs."""
        support.need_comfyui(self)
        from comem.comfy import Host
        host = Host(support.import_comfy(), socket=self.machine.socket, embed=False, card=self.card, name="comfyui",
                    aimdo=self.control)
        self.card_seen()
        host.install()
        self.addCleanup(host.close)
        self.assertIsNotNone(host.steer)
        return host


class TestHeadroomFollowsTheLedger(SteerCase):
    def test_another_process_grant_is_headroom_here_until_it_is_freed(self):
        s = self.steer.AimdoSteer(self.view, self.control, [0])
        self.assertEqual(s.version, support_version())
        self.assertEqual(s.floor, self.start_headroom)
        self.card_seen()
        base = s.step()
        r = self.view.read(0)
        # Nothing promised: aimdo may use all the card's free bytes above the reserve (never below its floor).
        self.assertEqual(self.view.room(0), r.free - r.reserve)
        self.assertEqual(base, max(s.floor, r.capacity - (r.free - r.reserve)))
        self.assertEqual(self.knob(), base)

        models = self.other.add_holder("models")
        grant = self.other.admit(2 * GiB, holder=models)
        self.settled(lambda: self.view.granted(0) == 2 * GiB)
        self.assertEqual(self.view.room(0), r.free - r.reserve - 2 * GiB)
        self.assertEqual(s.step(), base + 2 * GiB)  # the grant is not yet on the card: aimdo must leave it
        self.assertEqual(self.knob(), base + 2 * GiB)

        self.card.alloc(2 * GiB)  # the other process loads what it was granted
        entry = models.add_entry("m", 2 * GiB)
        grant.done(entry, 2 * GiB)
        self.settled(lambda: self.view.granted(0) == 0 and self.view.read(0).free <= r.free - 2 * GiB)
        self.assertEqual(s.step(), base + 2 * GiB)  # now it is on the card: the same bytes, the same headroom

        self.card.free(2 * GiB)
        entry.remove()
        self.settled(lambda: self.view.read(0).free == r.free)
        self.assertEqual(s.step(), base)
        self.assertEqual(s.steps, 3)  # it set the knob only when the figure changed

    def test_never_below_the_headroom_the_process_started_with(self):
        knob = self._knob
        knob.set(7 * GiB)  # as ComfyUI's --reserve-vram would have it
        s = self.steer.AimdoSteer(self.view, self.control, [0])
        self.card_seen()
        self.assertEqual(s.step(), 7 * GiB)
        self.assertEqual(knob.get(), 7 * GiB)
        self.assertEqual(self.steer.headroom_for(8 * GiB, 0, 6 * GiB - 512 * MiB, 256 * MiB), 2 * GiB + 512 * MiB)
        self.assertEqual(self.steer.headroom_for(8 * GiB, 1 * GiB, 0, 256 * MiB), 7 * GiB)
        self.assertEqual(self.steer.headroom_for(8 * GiB, 0, 8 * GiB, 256 * MiB), 256 * MiB)  # the floor holds
        self.assertEqual(self.steer.headroom_for(8 * GiB, -(1 << 62), -(1 << 62), 256 * MiB), 8 * GiB)  # bounded

    def test_the_thread_follows_a_grant_and_stop_restores_the_start(self):
        self.card_seen()
        s = self.steer.AimdoSteer(self.view, self.control, [0], poll=0.005).start()
        self.addCleanup(s.stop)
        self.settled(lambda: s.last is not None)
        base = s.last
        models = self.other.add_holder("models")
        grant = self.other.admit(1 * GiB, holder=models)
        self.settled(lambda: self.knob() == base + 1 * GiB)
        grant.cancel()
        self.settled(lambda: self.knob() == base)
        s.stop()
        self.assertEqual(self.knob(), self.start_headroom)

    def test_a_release_comem_does_not_know_is_warned_once_and_left_alone(self):
        saved = self.steer.aimdo_version
        self.steer.aimdo_version = lambda control: "9.9.9"
        self.addCleanup(setattr, self.steer, "aimdo_version", saved)
        with self.assertLogs("comem.comfy", "WARNING") as logs:
            self.assertIsNone(self.steer.start_for(self.view, [0], self.control))
            self.assertIsNone(self.steer.start_for(self.view, [0], self.control))
        self.assertEqual(len(logs.records), 1)
        self.assertIn("comfy-aimdo 9.9.9 is not one comem knows", logs.output[0])
        self.assertEqual(self.knob(), self.start_headroom)


class TestBusyProcessGives(SteerCase):
    """An ask while a node computes: the knob makes aimdo's next fault evict exactly what was asked."""

    def test_give_sets_the_deficit_aimdo_evicts_then_holds_and_lets_go(self):
        import threading
        usage = [5 * GiB]
        s = self.steer.AimdoSteer(self.view, self.control, [0], usage=lambda: usage[0])
        self.card_seen()
        base = s.step()
        capacity = self.view.read(0).capacity
        faults = []

        def computing_thread() -> None:
            # aimdo's rule at a fault (docs/aimdo-versions.md): evict usage + headroom - capacity, if positive.
            self.assertTrue(wait_for(lambda: self.knob() != base, 10))
            deficit = usage[0] + self.knob() - capacity
            faults.append(deficit)
            usage[0] -= max(0, deficit)

        t = threading.Thread(target=computing_thread)
        t.start()
        freed = s.give(1 * GiB, wait_s=30)
        t.join()
        self.assertEqual(faults, [1 * GiB])  # what aimdo's next fault evicts is what was asked
        self.assertEqual(freed, 1 * GiB)
        self.assertEqual(s.given, 1 * GiB)
        self.assertEqual(usage[0], 4 * GiB)
        # Held: aimdo may not fault the given bytes back before the view counts them as granted.
        self.assertEqual(s.step(), capacity - 4 * GiB)
        self.assertEqual(self.knob(), capacity - 4 * GiB)
        self.assertTrue(wait_for(lambda: s.step() == base, 10), "the give was never let go")

    def test_a_give_that_nothing_answers_returns_what_fell_and_stop_ends_it(self):
        usage = [3 * GiB]
        s = self.steer.AimdoSteer(self.view, self.control, [0], usage=lambda: usage[0])
        self.card_seen()
        s.step()
        calls = []
        # The node ends before aimdo faults: the give stops at once and reports nothing freed.
        self.assertEqual(s.give(512 * MiB, wait_s=30, stop=lambda: calls.append(1) or True), 0)
        self.assertEqual(len(calls), 1)
        self.assertEqual(s.given, 0)


class TestAdapterSteersAimdo(SteerCase):
    """The ComfyUI adapter starts the steer itself and stops it when it is uninstalled."""

    def test_the_host_adapter_keeps_a_worker_grant_from_its_aimdo(self):
        host = self.steered_host()
        self.assertIs(host.models.steer, host.steer)
        # Its holders are asked while a node computes (aimdo gives unpinned pages then).
        with host.lock:
            host.models.sync()
        host.models.holder(0)
        me = [h for dev in host.client.status()["devices"] for p in dev["processes"]
              if p["pid"] == os.getpid() and p["name"] == "comfyui" for h in p["holders"] if h["kind"] == "models"]
        self.assertEqual(len(me), 1, me)
        self.assertIn("while-busy", me[0]["answers"])
        self.settled(lambda: host.steer.last is not None)
        base = host.steer.last
        models = self.other.add_holder("models")
        grant = self.other.admit(1 * GiB, holder=models)
        self.settled(lambda: self.knob() == base + 1 * GiB)
        grant.cancel()
        self.settled(lambda: self.knob() == base)
        host.uninstall()
        self.assertIsNone(host.steer)
        self.assertEqual(self.knob(), self.start_headroom)


class TestHostWithDynamicVramWorkerWithout(SteerCase):
    def test_a_steered_host_reaches_a_worker_without_aimdo(self):
        support.need_comfyui(self, support.DYNAMIC_ERAS)
        host = self.steered_host()
        mm = host.mm
        w = self.machine.child("comfy_worker.py", "plain")  # ComfyUI without dynamic VRAM: no aimdo there
        self.assertIsNone(w.ready["steer"])
        self.assertEqual(w.ask("load", name="m", mib=1024, parts=4)["loaded"], 1 * GiB)
        self.settled(lambda: self.view.read(0).free == self.card.read(0).free)
        self.settled(lambda: host.steer.last is not None)
        # The worker's model is taken off the room aimdo may grow into here, like any other process's bytes.
        r = self.view.read(0)
        self.settled(lambda: self.knob() == max(host.steer.floor, r.capacity - (r.free - r.reserve)))
        # The host's own loop reaches the worker (a stand-in) through ComfyUI's path in the worker.
        dev = mm.get_torch_device()
        mm.free_memory(self.card.read(0, local=True).free + 300 * MiB, dev)
        self.assertLess(w.ask("loaded", name="m")["loaded"], 1 * GiB)
        mm.unload_all_models()
        self.assertEqual(w.ask("loaded", name="m")["loaded"], 0)
        host.uninstall()
        self.assertEqual(self.knob(), self.start_headroom)


class TestSteeringStartsWhenACoordinatorComes(SteerCase):
    def test_a_host_installed_before_its_coordinator_steers_from_its_first_node_after(self):
        support.need_comfyui(self)
        mm = support.import_comfy()
        from comem.comfy import Host
        self.view.close()
        self.machine.stop()
        host = Host(mm, socket=self.machine.socket, embed=False, card=self.card, name="comfyui", aimdo=self.control)
        host.install()
        self.addCleanup(host.close)
        self.assertFalse(host.client.connected)
        self.assertIsNone(host.steer)  # nothing to steer from: ComfyUI runs on aimdo's own budget
        with host.computing("before"):
            pass
        self.assertIsNone(host.steer)
        self.machine.start()
        self.assertTrue(wait_for(lambda: host.client.connected, 30), "the host never connected")
        with host.computing("after"):  # the first node boundary with a coordinator starts the steer
            pass
        self.assertIsNotNone(host.steer)
        self.assertIs(host.models.steer, host.steer)
        self.view = self.comem.View(self.machine.socket)
        self.addCleanup(self.view.close)
        self.card_seen()
        self.settled(lambda: host.steer.last is not None)
        base = host.steer.last
        other = self.comem.Client("other-2", role="worker", socket=self.machine.socket, require_coordinator=True)
        self.addCleanup(other.close)
        grant = other.admit(1 * GiB, holder=other.add_holder("models"))
        self.settled(lambda: self.knob() == base + 1 * GiB)
        grant.cancel()
        host.uninstall()
        self.assertEqual(self.knob(), self.start_headroom)


def support_version() -> str:
    from importlib.metadata import version
    return version("comfy-aimdo")


class TestNewestAimdo(unittest.TestCase):
    """The same steering against the newest comfy-aimdo, in the environment that has it first."""

    def test_newest_release(self):
        py = os.environ.get("COMEM_PYTHON_AIMDO_NEW")
        if os.environ.get("COMEM_STEER_INNER") or not py:
            self.skipTest("COMEM_PYTHON_AIMDO_NEW is unset (scripts/venv.sh makes .venv-aimdo-new)")
        # Without the folders this era pins first (v0.39's comfy-aimdo 0.5.6): the newest is that Python's.
        pinned = set(support.comfyui_pythonpath())
        path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in pinned]
        env = dict(os.environ, COMEM_STEER_INNER="1", PYTHONPATH=os.pathsep.join(path))
        out = subprocess.run([py, "-m", "unittest", "-v", "test_aimdo_steer.TestHeadroomFollowsTheLedger"],
                             cwd=os.path.dirname(os.path.abspath(__file__)), env=env, capture_output=True, text=True,
                             timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr[-4000:])
        self.assertIn("Ran 4 tests", out.stderr)
        check = subprocess.run([py, "-c", "from importlib.metadata import version; print(version('comfy-aimdo'))"],
                               capture_output=True, text=True, env=env)
        self.assertNotEqual(check.stdout.strip(), support_version(), "the second environment has the same aimdo")


if __name__ == "__main__":
    unittest.main()
