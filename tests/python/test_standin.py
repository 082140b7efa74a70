"""The stand-in's contract inside ComfyUI's real model manager (COMFYUI_DIR: either era), with real workers.

This process is the host (ComfyUI's own comfy.model_management, the host adapter
in simulated placement, a real comemd on a simulated card); every worker is a real
process (procs/standin_worker.py) whose models are ledger entries that free
simulated-card bytes as its mode says. The stand-in the host keeps in
``current_loaded_models`` for each of them is checked against the behaviours
comfy-env's proxy is held to (its tests/test_model_patcher_behaviour.py and
tests/test_vram_offset.py), and against two breaks found in issue 19:

- ComfyUI computes its asks in floats (``model_unload(104857600.8)``); a stand-in
  that asked for the truncation, met exactly, read as short and cost the whole
  model (ComfyUI escalates to a detach).
- Where the host's free reading cannot see other processes (WDDM), ComfyUI's loop
  asked every later model for the same shortfall again: the reading did not rise
  as workers freed. With both, a shortfall of 52.8 MiB cost 1.75 GiB (34x).
- ``copy.copy(stand_in)`` recursed until RecursionError.

Figures are asserted exactly where the arithmetic is exact, and order of events
through the asks each worker logs; nothing depends on timing.
"""

from __future__ import annotations

import copy
import gc
import math
import os
import pickle
import signal
import unittest
import weakref

import support
from support import GiB, MiB, Machine, wait_for

LINUX = "sim:8GiB:reserved=256MiB:ctx=300MiB"
WDDM = "sim:8GiB:wddm:reserved=256MiB:ctx=300MiB"  # the host's own reading is process-local: it sees only itself
CTX = 300 * MiB
SHORT = 52.8 * MiB  # the true shortfall of issue 19's scenario


class StandInCase(unittest.TestCase):
    """A real comemd on ``CARD``, this process as ComfyUI's host, workers as real processes."""

    CARD = LINUX
    machine: Machine

    def setUp(self) -> None:
        support.need_torch(self)
        support.need_comfyui(self)
        self.mm = support.import_comfy()
        import comem
        from comem.comfy import Host, Recorder
        self.comem = comem
        self.Recorder = Recorder
        self.machine = Machine(self.CARD).__enter__()
        self.addCleanup(self.machine.__exit__, None, None, None)
        self.card = comem.SimCard(self.machine.spec)
        self.addCleanup(self.card.close)
        self.host = Host(self.mm, socket=self.machine.socket, embed=False, card=self.card, name="comfyui")
        self.host.install()
        self.addCleanup(self._teardown_host)
        self.dev = self.mm.get_torch_device()
        self.base = self.host._base
        self.unloads = []  # every LoadedModel.model_unload ComfyUI ran on a stand-in, with what it was asked
        orig = self.mm.LoadedModel.model_unload

        def spy(lm, memory_to_free=None, unpatch_weights=True):
            if getattr(lm.model, "comem_stand_in", False):
                self.unloads.append((lm.model._state["name"], memory_to_free))
            return orig(lm, memory_to_free, unpatch_weights)
        self.mm.LoadedModel.model_unload = spy
        self.addCleanup(setattr, self.mm.LoadedModel, "model_unload", orig)
        Recorder.start()
        self.addCleanup(Recorder.stop)

    def _teardown_host(self) -> None:
        self.mm.current_loaded_models.clear()
        self.host.close()
        gc.collect()

    # ---- workers and readings ----

    def worker(self, name: str, mib: int, mode: str = "exact") -> support.Child:
        w = self.machine.child("standin_worker.py", name)
        w.ask("load", name=name, mib=mib)
        if mode != "exact":
            w.ask("mode", mode=mode)
        return w

    def true_free(self) -> int:
        """The card's device-wide free (NVML's reading): what every process together left."""
        return self.card.read(0).free

    def blind(self) -> int:
        """The host's own free reading, as ComfyUI reads it (on WDDM: its process-local budget)."""
        return self.host._reading_orig(self.dev) if self.host._reading_orig else self.mm.get_free_memory(self.dev)

    def stand_in(self, name: str):
        for lm in self.mm.current_loaded_models:
            if getattr(lm.model, "comem_stand_in", False) and lm.model._state["name"] == name:
                return lm.model
        return None

    def in_list(self) -> list:
        return sorted(lm.model._state["name"] for lm in self.mm.current_loaded_models
                      if getattr(lm.model, "comem_stand_in", False))

    def allocated(self, *workers: support.Child) -> int:
        return sum(w.ask("card")["allocated"] for w in workers)

    def asks(self, w: support.Child) -> list:
        return w.ask("asks")["asks"]

    def assert_surface(self) -> None:
        from comem.comfy.standin import SURFACE
        self.assertEqual(self.Recorder.missing, set(), "ComfyUI asked a stand-in for attributes it lacks")
        self.assertTrue(self.Recorder.read <= SURFACE, sorted(self.Recorder.read - SURFACE))


# ---------------------------------------------------------------------------------------------
# Break 1: fractional asks, and a loop that stops at the true shortfall
# ---------------------------------------------------------------------------------------------

class ShortfallCases:
    """Issue 19's scenario on a card where the host reads device-wide (Linux) or process-local (WDDM)."""

    def three_workers(self):
        # ComfyUI's order over them: the smallest first (its key: offloaded, refs, size, index)
        return [self.worker("a", 704), self.worker("b", 704), self.worker("c", 384)]

    def target(self, shortfall: float) -> float:
        """ComfyUI's free_memory target (weights x 1.1 + extra memory, reserve in it) for this true shortfall."""
        self.host.sync()  # stand-ins in the list, the reserve published, as before a loop
        need = self.true_free() - self.base + shortfall  # so need + base - true free == shortfall
        return need + self.mm.EXTRA_RESERVED_VRAM

    def test_a_fractional_shortfall_frees_the_shortfall_not_whole_models(self):
        ws = self.three_workers()
        before = self.allocated(*ws)
        required = self.target(SHORT)
        asked = required - self.blind()  # what ComfyUI's loop asks the first model for
        self.assertNotEqual(asked, math.floor(asked), "the scenario needs a fractional ask")
        self.assertAlmostEqual(asked, SHORT, delta=1.0, msg="the published reserve carries what the host misses")
        self.mm.free_memory(required, self.dev)
        freed = before - self.allocated(*ws)
        # One ask, of the smallest model, for the ceiling of ComfyUI's float; met exactly, so ComfyUI kept it.
        self.assertEqual(self.unloads, [("c", asked)])
        self.assertEqual(self.asks(ws[2]), [["c", math.ceil(asked), math.ceil(asked)]])
        self.assertEqual(self.asks(ws[0]) + self.asks(ws[1]), [])
        self.assertEqual(freed, math.ceil(asked))  # before the fix: 1792 MiB (all three detached), 34x
        self.assertGreaterEqual(freed, SHORT - 1)
        self.assertLess(freed, SHORT + 2)
        self.assertEqual(self.in_list(), ["a", "b", "c"])
        self.assertEqual(self.stand_in("c").loaded_size(), 384 * MiB - freed)
        self.assertEqual(self.machine.process("c")["resident"], 384 * MiB - freed)
        self.assert_surface()
        self.machine.check_ledger(self)

    def test_a_shortfall_larger_than_one_model_stops_once_met(self):
        ws = self.three_workers()
        before = self.allocated(*ws)
        shortfall = 500.5 * MiB
        required = self.target(shortfall)
        self.mm.free_memory(required, self.dev)
        freed = before - self.allocated(*ws)
        # c (384 MiB) cannot cover it: ComfyUI detaches it; the next model is asked only the rest.
        self.assertEqual(self.asks(ws[2]), [["c", 384 * MiB, 384 * MiB]])
        rest = [a for w in ws[:2] for a in self.asks(w)]
        self.assertEqual(len(rest), 1, (rest, self.unloads))
        self.assertEqual(rest[0][1], rest[0][2])
        self.assertEqual(rest[0][1], math.ceil(shortfall - 384 * MiB))
        self.assertEqual([n for n, _ in self.unloads][:2], ["c", rest[0][0]])
        # a125cd84 still calls model_unload(0.0) on the last one when its reading meets the target exactly
        self.assertTrue(all(m <= 0 for _, m in self.unloads[2:]), self.unloads)
        self.assertEqual(freed, math.ceil(shortfall))
        self.assertEqual(self.in_list(), ["a", "b"])  # c was detached (whole), and the next loop does not see it
        self.machine.check_ledger(self)

    def test_the_next_loop_starts_from_the_reserve_as_the_receipts_left_it(self):
        ws = self.three_workers()
        self.mm.free_memory(self.target(SHORT), self.dev)
        self.host.sync()  # the next loop's start: the reserve published again
        self.assertEqual(self.host.correction(0), 0)
        charges = sum(CTX + w.ask("card")["allocated"] for w in ws) if self.host.standins.process_local(0) else 0
        self.assertEqual(self.mm.EXTRA_RESERVED_VRAM, self.base + charges)
        # and the same question asked again now frees the same again, no more
        before = self.allocated(*ws)
        self.mm.free_memory(self.target(SHORT), self.dev)
        self.assertEqual(before - self.allocated(*ws), math.ceil(SHORT))


class TestShortfallLinux(ShortfallCases, StandInCase):
    CARD = LINUX

    def test_the_reading_is_device_wide_and_left_alone(self):
        self.three_workers()
        self.host.sync()
        self.assertFalse(self.host.standins.process_local(0))
        self.assertEqual(self.mm.EXTRA_RESERVED_VRAM, self.base)  # every worker's charge is 0 here
        self.assertEqual(self.mm.get_free_memory(self.dev), self.true_free())


class TestShortfallWddm(ShortfallCases, StandInCase):
    CARD = WDDM

    def test_the_reading_rises_by_what_stand_ins_freed_until_the_reserve_is_published_again(self):
        ws = self.three_workers()
        self.host.sync()
        self.assertTrue(self.host.standins.process_local(0))
        blind = self.blind()
        self.assertEqual(self.mm.get_free_memory(self.dev), blind)
        sp = self.stand_in("a")
        self.assertEqual(sp.partially_unload(self.mm.get_torch_device(), 100 * MiB), 100 * MiB)
        self.assertEqual(self.blind(), blind)  # what the host itself reads did not move...
        self.assertEqual(self.mm.get_free_memory(self.dev), blind + 100 * MiB)  # ...ComfyUI's reading did
        total, torch_share = self.mm.get_free_memory(self.dev, torch_free_too=True)
        self.assertEqual((total, torch_share), (blind + 100 * MiB, 0))
        self.host.sync()
        self.assertEqual(self.mm.get_free_memory(self.dev), blind)  # the reserve took it back instead
        self.assertEqual(self.mm.EXTRA_RESERVED_VRAM, self.base + 3 * CTX + self.allocated(*ws))

    def test_status_shows_the_reserve_the_host_keeps_beside_the_published_one(self):
        # issue 21 item 8: between a receipt and the host's next load, status showed only the
        # published reserve, which had shrunk, while the host still kept the one it was told
        ws = self.three_workers()
        self.host.sync()
        told = self.mm.EXTRA_RESERVED_VRAM
        self.assertEqual(told, self.base + 3 * CTX + self.allocated(*ws))
        rv = self.host.client.status()["devices"][0]["reserve"]
        self.assertEqual((rv["published"], rv["host_told"]), (told, told))
        before = self.allocated(*ws)
        self.mm.free_memory(self.target(SHORT), self.dev)  # the workers' receipts shrink the published one
        freed = before - self.allocated(*ws)
        self.assertEqual(freed, math.ceil(SHORT))
        rv = self.host.client.status()["devices"][0]["reserve"]
        self.assertEqual(rv["published"], told - freed)
        self.assertEqual(rv["host_told"], told)  # what ComfyUI keeps until it asks again
        self.assertEqual(self.mm.EXTRA_RESERVED_VRAM, told)
        out = self.machine.cli("status")
        self.assertIn("the host keeps a reserve of", out.stdout)
        self.host.sync()  # its next load: told the published one
        rv = self.host.client.status()["devices"][0]["reserve"]
        self.assertEqual((rv["published"], rv["host_told"]), (told - freed, told - freed))
        self.assertEqual(self.mm.EXTRA_RESERVED_VRAM, told - freed)
        self.assertNotIn("the host keeps a reserve of", self.machine.cli("status").stdout)


# ---------------------------------------------------------------------------------------------
# comfy-env's test_model_patcher_behaviour.py, for comem's stand-in
# ---------------------------------------------------------------------------------------------

class TestStandInNeverLiesNorRaises(StandInCase):
    CARD = LINUX

    def one(self, mode: str = "exact", mib: int = 1024):
        w = self.worker("m", mib, mode)
        self.host.sync()
        sp = self.stand_in("m")
        self.assertIsNotNone(sp)
        return w, sp

    def test_partial_unload_returns_what_was_freed_not_the_size(self):
        w, sp = self.one()
        got = sp.partially_unload(self.mm.get_torch_device(), 200 * MiB)
        self.assertEqual(got, 200 * MiB)
        self.assertNotEqual(got, sp.model_size())
        self.assertEqual(sp.loaded_size(), 824 * MiB)
        self.assertEqual(sp.current_loaded_device(), self.dev)  # still partly on the card
        self.assertEqual(w.ask("card")["allocated"], 824 * MiB)
        self.assertEqual(self.machine.process("m")["resident"], 824 * MiB)

    def test_a_short_answer_is_returned_as_it_is_and_comfyui_escalates(self):
        w, sp = self.one("half")
        self.mm.free_memory(self.true_free() + 100 * MiB, self.dev)
        # ComfyUI asked 100 MiB, got 50: it detached (asked everything left), the worker freed half of that
        self.assertEqual(self.asks(w), [["m", 100 * MiB, 50 * MiB], ["m", 974 * MiB, 487 * MiB]])
        self.assertEqual(self.unloads, [("m", 100 * MiB)])
        self.assertEqual(self.in_list(), [])  # ComfyUI popped it, as it pops any detached model
        self.assertEqual(sp.loaded_size(), 487 * MiB)  # what the worker still holds, not 0
        self.host.sync()
        self.assertEqual(self.in_list(), ["m"])  # the next loop sees what is still there
        self.assertEqual(self.stand_in("m").loaded_size(), 487 * MiB)

    def test_an_ask_for_nothing_asks_nothing(self):
        w, sp = self.one()
        for nothing in (0, 0.0, -5.5, float("nan")):
            self.assertEqual(sp.partially_unload(self.mm.get_torch_device(), nothing), 0)
        lm = next(lm for lm in self.mm.current_loaded_models if lm.model is sp)
        self.assertFalse(lm.model_unload(0.0))  # ComfyUI: 0 freed meets an ask of 0; the model stays
        self.assertEqual(self.asks(w), [])
        self.assertEqual(sp.loaded_size(), 1 * GiB)

    def test_a_full_unload_leaves_it_offloaded(self):
        w, sp = self.one()
        self.assertEqual(sp.partially_unload(self.mm.get_torch_device(), 1024 * MiB), 1 * GiB)
        self.assertEqual(sp.loaded_size(), 0)
        self.assertEqual(str(sp.current_loaded_device()), "cpu")
        self.assertEqual(w.ask("card")["allocated"], 0)

    def test_unloading_what_is_already_offloaded_asks_nothing(self):
        w, sp = self.one()
        sp.detach()
        n = len(self.asks(w))
        self.assertEqual(sp.partially_unload(self.mm.get_torch_device(), 1024), 0)
        sp.detach()
        sp.detach()
        self.assertEqual(len(self.asks(w)), n, "nothing resident: no ask")
        self.assertEqual(sp._state["asks"], 1)

    def test_detach_without_unpatch_all_moves_nothing(self):
        w, sp = self.one()
        sp.detach(unpatch_all=False)  # ComfyUI's detach of a clone it replaces: weights stay
        self.assertEqual(self.asks(w), [])
        self.assertEqual(sp.loaded_size(), 1 * GiB)

    def test_a_dead_worker_counts_as_freed_and_nothing_raises(self):
        w, sp = self.one()
        os.kill(w.pid, signal.SIGKILL)
        w.proc.wait()
        self.assertEqual(sp.partially_unload(self.mm.get_torch_device(), 1 * MiB), 1 * GiB)  # its bytes went with it
        self.assertEqual(sp.loaded_size(), 0)
        sp.detach()
        self.assertEqual(str(sp.current_loaded_device()), "cpu")
        self.assertTrue(wait_for(lambda: self.machine.process("m") is None, 10))
        self.mm.free_memory(1e30, self.dev)  # ComfyUI's loop over it: no exception either
        self.assertEqual(self.card.usage(w.pid), (0, 0))

    def test_a_lost_coordinator_raises_nothing_and_claims_nothing(self):
        w, sp = self.one()
        self.machine.stop()
        self.assertEqual(sp.partially_unload(self.mm.get_torch_device(), 1 * MiB), 0)  # nothing known freed
        sp.detach()
        self.assertEqual(sp.loaded_size(), 1 * GiB)  # the worker still holds it: no lie about bytes
        self.assertEqual(w.ask("card")["allocated"], 1 * GiB)
        self.mm.free_memory(1e30, self.dev)  # ComfyUI's loop with no coordinator: no exception

    def test_an_exception_inside_an_ask_does_not_reach_comfyui(self):
        w, sp = self.one()

        def broken(*a, **k):
            raise RuntimeError("transport exploded")
        sp._state["client"] = type("Broken", (), {"ask_release": broken})()
        self.assertEqual(sp.partially_unload(self.mm.get_torch_device(), 1 * MiB), 0)
        sp.detach()
        self.assertEqual(sp.loaded_size(), 1 * GiB)

    def test_the_host_never_loads_another_process_model(self):
        w, sp = self.one()
        sp.detach()
        self.assertEqual(sp.partially_load(self.dev, 512 * MiB), 0)
        self.assertEqual(sp.loaded_size(), 0)
        self.assertEqual(len(self.asks(w)), 1)  # only the detach's
        os.kill(w.pid, signal.SIGKILL)
        w.proc.wait()
        self.assertEqual(sp.partially_load(self.dev, 512 * MiB), 0)  # dead: still nothing, and no exception

    def test_patching_and_cloning_are_refused_by_name(self):
        w, sp = self.one()
        self.Recorder.stop()
        for name in ("clone", "add_patches", "some_new_upstream_field"):
            with self.assertRaisesRegex(AttributeError, f"stand-in for m:m has no attribute '{name}'"):
                getattr(sp, name)

    def test_python_probes_stay_quiet(self):
        w, sp = self.one()
        self.Recorder.start()
        bare = type(sp).__new__(type(sp))  # what copy and pickle make before restoring state
        self.assertFalse(hasattr(bare, "__setstate__"))
        self.assertFalse(hasattr(bare, "_state"))
        with self.assertRaisesRegex(AttributeError, "stand-in for \\?:\\? has no attribute 'model_size_x'"):
            getattr(bare, "model_size_x")
        self.assertFalse(hasattr(sp, "__setstate__"))
        with self.assertRaises(AttributeError):
            getattr(sp, "__some_probe__")
        self.assertEqual(self.Recorder.missing, {"model_size_x"})  # dunder probes are not ComfyUI drift

    def test_a_copy_is_another_handle_to_the_same_entry(self):
        w, sp = self.one()
        for twin in (copy.copy(sp), copy.deepcopy(sp), copy.deepcopy([sp, sp])[0]):
            self.assertIsNot(twin, sp)
            self.assertIs(twin._state, sp._state)
            self.assertIs(twin.model, sp.model)
        twin = copy.copy(sp)
        self.assertEqual(twin.partially_unload(self.mm.get_torch_device(), 24 * MiB), 24 * MiB)
        self.assertEqual(sp.loaded_size(), 1000 * MiB)  # one remote model: both handles see it
        self.assertEqual(w.ask("card")["allocated"], 1000 * MiB)
        pair = copy.deepcopy([sp, sp])
        self.assertIs(pair[0], pair[1])  # deepcopy's memo: one copy per original
        for proto in range(pickle.HIGHEST_PROTOCOL + 1):
            with self.assertRaisesRegex(TypeError, "cannot be pickled"):
                pickle.dumps(sp, protocol=proto)

    def test_the_patcher_and_its_model_are_weakref_able(self):
        w, sp = self.one()
        self.assertIs(weakref.ref(sp.model)(), sp.model)  # LoadedModel.model_load finalizes on .model
        self.assertIs(weakref.ref(sp)(), sp)  # LoadedModel keeps the patcher by weakref


# ---------------------------------------------------------------------------------------------
# comfy-env's test_vram_offset.py: the host's blind reading on WDDM, compensated
# ---------------------------------------------------------------------------------------------

class TestBlindReading(StandInCase):
    CARD = "sim:4GiB:wddm:reserved=256MiB:ctx=300MiB"  # small enough that the reserve's 3/4 cap does not bite

    def test_the_reserve_compensates_the_blind_reading_so_comfyui_evicts(self):
        w = self.worker("big", 2048)
        self.host.sync()
        blind, true = self.blind(), self.true_free()
        self.assertEqual(blind - true, 2048 * MiB + CTX)  # the host sees none of the worker
        self.assertEqual(self.mm.EXTRA_RESERVED_VRAM - self.base, 2048 * MiB + CTX)  # the offset, published
        # A host load that truly does not fit: ComfyUI's own load_models_gpu (weights x 1.1 + extra memory)
        import comfy.model_patcher
        import torch
        layers = [torch.nn.Linear(1, 1, bias=False) for _ in range(2)]
        for layer in layers:
            layer.weight = torch.nn.Parameter(torch.empty(256 * MiB // 4), requires_grad=False)
        model = comfy.model_patcher.ModelPatcher(torch.nn.Sequential(*layers), load_device=self.dev,
                                                 offload_device=torch.device("cpu"))
        want = 512 * MiB * 1.1 + max(self.mm.minimum_inference_memory(), self.mm.extra_reserved_memory())
        offset = self.mm.EXTRA_RESERVED_VRAM - self.base
        self.assertGreater(want - offset, true, "the load truly does not fit without evicting the worker")
        self.assertLess(want - offset, blind, "without the offset ComfyUI's target is below its reading: "
                        "nothing would be evicted")
        self.mm.load_models_gpu([model])
        # ComfyUI's loop asked the stand-in for its target minus its blind reading: the true shortfall
        self.assertEqual(self.unloads[0][0], "big")
        self.assertAlmostEqual(self.unloads[0][1], (want - offset) - true, delta=1.0)
        first = self.asks(w)[0]
        self.assertEqual(first, ["big", math.ceil(self.unloads[0][1]), math.ceil(self.unloads[0][1])])
        self.assertEqual(model.loaded_size(), 512 * MiB)
        self.assertLess(w.ask("card")["allocated"], 2048 * MiB)
        self.machine.check_ledger(self)

    def test_each_worker_is_charged_its_context_and_its_residency(self):
        a = self.worker("a", 100)
        b = self.worker("b", 1024)
        self.host.sync()
        # a context is a constant, not a percentage: 100 MiB of weights cost 400 MiB of reserve
        self.assertEqual(self.mm.EXTRA_RESERVED_VRAM, self.base + (100 * MiB + CTX) + (1024 * MiB + CTX))
        self.assertGreater(100 * MiB + CTX, 100 * MiB * 1.1)
        # the charge follows the ledger (each worker's census), not a reading
        self.stand_in("b").partially_unload(self.dev, 512 * MiB)
        self.host.sync()
        self.assertEqual(self.mm.EXTRA_RESERVED_VRAM, self.base + (100 * MiB + CTX) + (512 * MiB + CTX))

    def test_a_worker_reads_the_true_free_and_what_others_hold(self):
        a = self.worker("a", 1024)
        b = self.worker("b", 512)
        self.host.sync()
        with self.comem.View(self.machine.socket) as v:
            self.assertTrue(wait_for(lambda: v.read(0).free == self.true_free(), 5))
        # each worker keeps the host's base plus what every other worker holds; its own charge is left out
        self.assertEqual(a.ask("reserve")["reserve"], self.base + 512 * MiB + CTX)
        self.assertEqual(b.ask("reserve")["reserve"], self.base + 1024 * MiB + CTX)


if __name__ == "__main__":
    unittest.main()
