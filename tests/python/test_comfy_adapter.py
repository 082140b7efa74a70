"""The ComfyUI adapter against ComfyUI's real model manager (COMFYUI_DIR), a real comemd and real workers.

This process is the host: it imports ComfyUI's own comfy.model_management and
comfy.model_patcher (unmodified) on Debian's CPU torch and installs the host
adapter in simulated placement (the card is comemd's simulated card; ComfyUI's
main device is cpu:0, its offload device cpu). Workers are real processes
(procs/torch_worker.py with plain torch modules, procs/comfy_worker.py with
ComfyUI's own ModelPatcher) on the same card. ComfyUI's own loop makes every
decision below; the tests check what it decided against the card and the ledger.
"""

from __future__ import annotations

import gc
import math
import os
import signal
import unittest

import support
from support import GiB, MiB, Machine, wait_for

# Small enough that ComfyUI's host models (real tensors: moving them to cpu:0 copies them) stay cheap.
CARD = "sim:4GiB:reserved=256MiB:ctx=300MiB"


def make_patcher(mm, gib_parts):
    """A ComfyUI ModelPatcher around a module whose leaf layers have these sizes (MiB); pages untouched."""
    import comfy.model_patcher
    import torch
    layers = []
    for mib in gib_parts:
        layer = torch.nn.Linear(1, 1, bias=False)
        layer.weight = torch.nn.Parameter(torch.empty(mib * MiB // 4), requires_grad=False)
        layers.append(layer)
    return comfy.model_patcher.ModelPatcher(torch.nn.Sequential(*layers), load_device=mm.get_torch_device(),
                                            offload_device=torch.device("cpu"))


class AdapterCase(unittest.TestCase):
    """A real comemd, this process as ComfyUI's host, and helpers to read both."""

    machine: Machine
    comemd_extra: list = []  #: more comemd arguments

    def setUp(self) -> None:
        support.need_torch(self)
        support.need_comfyui(self)
        self.mm = support.import_comfy()
        import comem
        from comem.comfy import Host, Recorder
        self.comem = comem
        self.Recorder = Recorder
        self.machine = Machine(CARD, extra=self.comemd_extra).__enter__()
        self.addCleanup(self.machine.__exit__, None, None, None)
        self.card = comem.SimCard(self.machine.spec)
        self.addCleanup(self.card.close)
        self.host = Host(self.mm, socket=self.machine.socket, embed=False, card=self.card, name="comfyui")
        self.host.install()
        self.addCleanup(self._teardown_host)
        self.dev = self.mm.get_torch_device()
        self.unloads = []  # every LoadedModel.model_unload ComfyUI ran, with what it was asked
        orig = self.mm.LoadedModel.model_unload

        def spy(lm, memory_to_free=None, unpatch_weights=True):
            self.unloads.append((lm, memory_to_free))
            return orig(lm, memory_to_free, unpatch_weights)
        self.mm.LoadedModel.model_unload = spy
        self.addCleanup(setattr, self.mm.LoadedModel, "model_unload", orig)
        Recorder.start()
        self.addCleanup(Recorder.stop)

    def _teardown_host(self) -> None:
        for lm in list(self.mm.current_loaded_models):
            try:
                lm.model_unload()
            except Exception:
                pass
        self.mm.current_loaded_models.clear()
        self.host.close()
        gc.collect()

    # ---- readings ----

    def card_free(self) -> int:
        return self.card.read(0, local=True).free

    def ledger_resident(self, name: str) -> int:
        p = self.machine.process(name)
        return -1 if p is None else p["resident"]

    def host_loaded(self) -> int:
        from comem.comfy.models import is_stand_in
        return sum(lm.model_loaded_memory() for lm in self.mm.current_loaded_models if not is_stand_in(lm))

    def stand_ins(self):
        from comem.comfy.models import is_stand_in
        return [lm for lm in self.mm.current_loaded_models if is_stand_in(lm)]

    def assert_consistent(self) -> None:
        """The card, ComfyUI's list and the ledger agree about this host; comemd's checks all passed."""
        ctx, alloc = self.card.usage()
        self.assertEqual(alloc, self.host_loaded(), "the simulated card is charged what ComfyUI counts as loaded")
        self.assertEqual(self.ledger_resident("comfyui"), self.host_loaded())
        self.machine.check_ledger(self)

    def assert_surface(self) -> None:
        """Every attribute ComfyUI read from a stand-in is one it offers; none was missing."""
        from comem.comfy.standin import SURFACE
        self.assertEqual(self.Recorder.missing, set(), "ComfyUI asked a stand-in for attributes it lacks")
        self.assertTrue(self.Recorder.read <= SURFACE, sorted(self.Recorder.read - SURFACE))

    def worker(self, name: str, mib: int, parts: int = 4, script: str = "torch_worker.py"):
        w = self.machine.child(script, name)
        out = w.ask("load", name=name, mib=mib, parts=parts)
        self.assertNotIn("refused", out)
        return w

    def partially_unloaded(self, layers_mib, nbytes):
        """What ComfyUI's own ModelPatcher keeps loaded of a model of these layers after partially_unload(nbytes)."""
        import torch
        p = make_patcher(self.mm, layers_mib)
        p.patch_model(device_to=self.dev, lowvram_model_memory=0, load_weights=True)  # model_load's full load
        self.assertEqual(p.loaded_size(), sum(layers_mib) * MiB)
        p.partially_unload(torch.device("cpu"), nbytes)
        left = p.loaded_size()
        p.detach()
        return left


class TestComfyLoopReachesWorkers(AdapterCase):

    def test_free_memory_evicts_a_worker_through_its_stand_in(self):
        w = self.worker("sam3", 1536, parts=4)  # four 384 MiB parts
        self.assertEqual(w.ask("card")["allocated"], 1536 * MiB)
        free = self.card_free()
        self.mm.free_memory(free + 512 * MiB, self.dev)  # ComfyUI's own loop
        # The loop asked the stand-in for (required - free) = 512 MiB; the worker's ladder moved parts,
        # smallest first, until that was covered: two parts, 768 MiB, and ComfyUI stopped there.
        asked = [m for lm, m in self.unloads if lm.model.__class__.__name__ == "StandIn"]
        self.assertEqual(len(asked), 1)
        self.assertEqual(int(asked[0]), 512 * MiB)
        self.assertEqual(w.ask("card")["allocated"], 768 * MiB)  # the worker really freed it
        self.assertEqual(w.ask("resident", name="sam3")["resident"], 768 * MiB)
        self.assertEqual(self.ledger_resident("sam3"), 768 * MiB)
        self.assertEqual(self.card_free(), free + 768 * MiB)
        self.assertEqual(len(self.stand_ins()), 1)  # a partial release keeps it in the list
        self.assertEqual(self.stand_ins()[0].model_loaded_memory(), 768 * MiB)
        self.assert_surface()
        self.assert_consistent()

    def test_unload_all_models_reaches_every_worker(self):
        a = self.worker("a", 512)
        b = self.worker("b", 1024, parts=2)
        mine = make_patcher(self.mm, [128, 128])
        self.mm.load_models_gpu([mine])
        self.assertEqual(self.host_loaded(), 256 * MiB)
        self.mm.unload_all_models()  # the Free button and ComfyUI's OOM handler call this
        self.assertEqual(a.ask("card")["allocated"], 0)
        self.assertEqual(b.ask("card")["allocated"], 0)
        self.assertEqual(self.ledger_resident("a"), 0)
        self.assertEqual(self.ledger_resident("b"), 0)
        self.assertEqual(self.host_loaded(), 0)
        self.assertEqual(self.mm.current_loaded_models, [])
        self.assert_surface()
        self.assert_consistent()

    def test_load_models_gpu_takes_bytes_from_an_idle_worker_through_its_stand_in(self):
        w = self.worker("depth", 2048, parts=4)  # four 512 MiB parts
        before = self.card_free()
        model = make_patcher(self.mm, [256, 256, 256, 256])
        self.mm.load_models_gpu([model])  # ComfyUI's free_memory(1 GiB * 1.1 + extra), then the load
        self.assertEqual(model.loaded_size(), 1 * GiB)
        stand_in_asks = [m for lm, m in self.unloads if lm.model.__class__.__name__ == "StandIn"]
        self.assertGreaterEqual(len(stand_in_asks), 1)
        left = w.ask("card")["allocated"]
        self.assertLess(left, 2 * GiB)
        self.assertEqual(left, self.ledger_resident("depth"))
        # What ComfyUI wanted free before loading was there: weights * 1.1 + ComfyUI's extra memory.
        extra = max(self.mm.minimum_inference_memory(), self.mm.extra_reserved_memory())
        self.assertGreaterEqual(before + (2 * GiB - left), 1 * GiB * 1.1 + extra - 300 * MiB)
        self.assertEqual(self.card.usage()[0], 300 * MiB)  # this process's context came with the first load
        self.assert_surface()
        self.assert_consistent()

    def test_a_busy_worker_is_passed_over_and_comes_back(self):
        w = self.worker("busy", 1024, parts=2)
        w.ask("busy", on=True, prompt="p1")
        free = self.card_free()
        self.mm.free_memory(free + 256 * MiB, self.dev)
        self.assertEqual(w.ask("card")["allocated"], 1 * GiB)  # never interrupted while it computes
        self.assertEqual(self.stand_ins(), [])  # ComfyUI dropped it after the busy answer...
        w.ask("busy", on=False, prompt="p1")
        self.host.sync()
        self.assertEqual(len(self.stand_ins()), 1)  # ...and the next loop sees it again
        self.mm.free_memory(free + 256 * MiB, self.dev)
        self.assertEqual(w.ask("card")["allocated"], 512 * MiB)
        self.assert_consistent()

    def test_a_killed_worker_leaves_nothing_behind(self):
        w = self.worker("doomed", 1024)
        self.host.sync()
        self.assertEqual(len(self.stand_ins()), 1)
        os.kill(w.pid, signal.SIGKILL)
        w.proc.wait()
        self.assertTrue(wait_for(lambda: self.machine.process("doomed") is None, 10))
        self.host.sync()
        self.assertEqual(self.stand_ins(), [])
        self.assertEqual(self.card.usage(w.pid), (0, 0))
        self.assert_consistent()


class TestHostModelsAnswerWorkers(AdapterCase):

    def test_a_worker_admission_takes_bytes_back_through_model_unload(self):
        small = make_patcher(self.mm, [128, 128, 128, 128])           # 512 MiB in 128 MiB layers
        big = make_patcher(self.mm, [256, 256, 256])                  # 768 MiB
        self.mm.load_models_gpu([small])
        self.mm.load_models_gpu([big])
        self.assertEqual(self.host_loaded(), 1280 * MiB)
        free = self.card_free()
        w = self.machine.child("torch_worker.py", "sam3")
        out = w.ask("load", name="sam3", mib=1024, parts=2)
        self.assertNotIn("refused", out, out)
        self.assertEqual(w.ask("card")["allocated"], 1 * GiB)
        # The coordinator asked this host; the answer went through ComfyUI's own LoadedModel.model_unload.
        host_unloads = [(lm, m) for lm, m in self.unloads if lm.model.__class__.__name__ != "StandIn"]
        self.assertGreaterEqual(len(host_unloads), 1)
        self.assertTrue(all(m is not None for _, m in host_unloads))  # sized asks, not whole-model orders
        self.assertLess(self.host_loaded(), 1280 * MiB)
        self.assertEqual(self.host.models.released, 1280 * MiB - self.host_loaded())
        # What the worker needed (ComfyUI's shape: 1.1 x weights + max(0.8 GiB + R, R), its context floor too)
        need = int(1 * GiB * 1.1) + int(0.8 * GiB) + 400 * MiB + 300 * MiB
        self.assertGreaterEqual(free + self.host.models.released, need - 300 * MiB - 1)
        self.assert_consistent()

    def test_the_host_never_loads_past_what_the_ledger_grants(self):
        w = self.worker("holder", 1536, parts=2)
        w.ask("busy", on=True)  # computing: nothing can be taken back from it
        model = make_patcher(self.mm, [128] * 8)  # 1 GiB in 128 MiB layers
        self.mm.load_models_gpu([model])
        # The card had ~1.95 GiB left for 1.1 GiB of weights + 1.2 GiB of working memory + this process's
        # context, and the worker could not be asked: admission granted what fits, ComfyUI's partial load
        # took it, and the simulated card (which refuses what does not fit) never overflowed.
        self.assertGreater(model.loaded_size(), 0)
        self.assertLess(model.loaded_size(), 1 * GiB)
        self.assertGreaterEqual(self.card_free(), 0)
        self.assertEqual(w.ask("card")["allocated"], 1536 * MiB)
        self.assert_consistent()


class TestCustomPatcher(AdapterCase):
    """A custom node's ModelPatcher subclass written before v0.39 (its __init__ takes no fast_disk)."""

    def test_a_subclass_without_fast_disk_is_admitted_and_freed(self):
        import comfy.model_patcher
        import torch

        class OldStyle(comfy.model_patcher.ModelPatcher):
            def __init__(self, model, load_device, offload_device, size=0, weight_inplace_update=False):
                super().__init__(model, load_device, offload_device, size, weight_inplace_update)

        p = OldStyle(make_patcher(self.mm, [128] * 4).model, self.dev, torch.device("cpu"))
        self.mm.load_models_gpu([p])
        self.assertEqual(p.loaded_size(), 512 * MiB)
        self.assert_consistent()
        if support.comfyui_era() == "v0.39":
            # v0.39's own clone passes fast_disk= to the subclass: ComfyUI's break, not comem's, and it
            # leaves comem's books as they were.
            with self.assertRaises(TypeError):
                p.clone()
            self.assert_consistent()
        self.mm.free_memory(1e30, self.dev)
        self.assertEqual(p.loaded_size(), 0)
        self.assert_consistent()


class TestComfyWorker(AdapterCase):

    def test_a_comfyui_worker_frees_through_its_own_model_unload(self):
        w = self.machine.child("comfy_worker.py", "pack")
        self.assertEqual(w.ready["device"], "cpu:0")
        out = w.ask("load", name="m", mib=1024, parts=4)
        self.assertEqual(out["loaded"], 1 * GiB)
        self.assertEqual(w.ask("card")["allocated"], 1 * GiB)
        self.assertEqual(self.ledger_resident("pack"), 1 * GiB)
        free = self.card_free()
        self.mm.free_memory(free + 300 * MiB, self.dev)
        # The worker's ComfyUI partially unloaded its ModelPatcher as ComfyUI's own partially_unload does
        # for a 300 MiB ask (a125cd84: two 256 MiB layers; 783545f6 also keeps room for its offload
        # buffers): the same model here, asked the same, says what must be left.
        expected = self.partially_unloaded([256] * 4, 300 * MiB)
        self.assertLessEqual(expected, 1 * GiB - 300 * MiB)
        after = w.ask("loaded", name="m")
        self.assertEqual(after["loaded"], expected)
        self.assertTrue(after["in_list"])
        self.assertEqual(w.ask("card")["allocated"], expected)
        self.assertEqual(self.ledger_resident("pack"), expected)
        self.mm.unload_all_models()
        after = w.ask("loaded", name="m")
        self.assertEqual(after["loaded"], 0)
        self.assertFalse(after["in_list"])  # detached in the worker: gone from its list, as ComfyUI does
        self.assertEqual(w.ask("card")["allocated"], 0)
        self.assert_surface()
        self.assert_consistent()


class TestEraMixes(AdapterCase):
    """A worker set up with dynamic VRAM (the real comfy-aimdo, steered) under this host, which runs without."""

    def holder_answers(self, name: str) -> list:
        p = self.machine.process(name)
        return [h["answers"] for h in (p or {}).get("holders", []) if h["name"] == "comfyui"]  # ComfyModels

    def test_a_dynamic_vram_worker_under_a_host_without_it(self):
        support.need_comfyui(self, support.DYNAMIC_ERAS)
        try:
            import comfy_aimdo  # noqa: F401
        except ImportError as e:
            self.skipTest(f"comfy_aimdo is not installed ({e})")
        from importlib.metadata import version
        w = self.machine.child("comfy_worker.py", "dyn", env={"COMEM_TEST_WORKER_AIMDO": "1"})
        self.assertEqual(w.ready["steer"], version("comfy-aimdo"))  # the worker steers its own aimdo
        self.assertIsNone(self.host.steer)  # the host has none to steer
        out = w.ask("load", name="m", mib=1024, parts=4)
        self.assertEqual(out["loaded"], 1 * GiB)
        self.assertEqual(self.holder_answers("dyn"), [["release", "idle", "while-busy"]])
        self.host.models.holder(0)  # registered on first use: the host has no model yet
        self.assertEqual(self.holder_answers("comfyui"), [["release", "idle"]])
        # Idle: the host's own loop reaches the worker's plain ModelPatcher through ComfyUI's path.
        free = self.card_free()
        self.mm.free_memory(free + 300 * MiB, self.dev)
        expected = self.partially_unloaded([256] * 4, 300 * MiB)
        self.assertEqual(w.ask("loaded", name="m")["loaded"], expected)
        self.assertEqual(self.ledger_resident("dyn"), expected)
        # Marked busy: asked (its holders answer while busy) but it has no dynamic pages to give, so it
        # answers busy and keeps its bytes; the ask is counted busy.
        busy_before = self.machine.status()["counters"]["asks_busy"]
        w.ask("busy", on=True)
        self.assertTrue(wait_for(lambda: (self.machine.process("dyn") or {}).get("busy"), 10))
        self.mm.free_memory(self.card_free() + 200 * MiB, self.dev)
        self.assertEqual(w.ask("loaded", name="m")["loaded"], expected)
        self.assertGreater(self.machine.status()["counters"]["asks_busy"], busy_before)
        w.ask("busy", on=False)
        self.mm.unload_all_models()
        self.assertEqual(w.ask("loaded", name="m")["loaded"], 0)
        self.assert_consistent()


def comem_original(fn):
    """The function a comem wrapper wraps (functools.wraps keeps it), or fn itself."""
    return getattr(fn, "__wrapped__", fn)


class TestComfyPins(AdapterCase):
    """783545f6's ``ensure_pin_budget``, called by its ``pin_memory``, books ComfyUI's pins with the ledger
    (issue 23 item 3): ComfyUI's own check first, then the coordinator's ceiling, a chunk ahead; its call
    from ``free_memory`` (room for a load's pins) books nothing; a refusal is ComfyUI's own "no"; node
    boundaries give back what is booked beyond ComfyUI's pins and one chunk. On the CPU nothing is
    page-locked: ComfyUI's count (``TOTAL_PINNED_MEMORY``) is moved as its ``pin_memory`` moves it; the
    real pins run on the GPU (tests/gpu/comfy_dynamic_gpu.py)."""

    def pins_booked(self) -> int:
        st = self.machine.status()
        me = next(p for p in st["devices"][0]["processes"] if p["name"] == "comfyui")
        if me["pinned"]:
            self.assertEqual([h["kind"] for h in me["holders"] if h["name"] == "comfyui-pins"], ["pins"])
        self.assertEqual(me["pinned"], st["pins"]["total"], "only this process pins")
        return me["pinned"]

    def test_each_pin_is_booked_before_comfyui_makes_it(self):
        support.need_comfyui(self, support.DYNAMIC_ERAS)
        from comem.comfy.pins import CHUNK
        mm, pins = self.mm, self.host.pins
        self.assertIsNotNone(pins)
        self.addCleanup(setattr, mm, "TOTAL_PINNED_MEMORY", mm.TOTAL_PINNED_MEMORY)
        mm.TOTAL_PINNED_MEMORY = 0
        pinning = pins.pinning  # the block ComfyUI's (wrapped) pinned_memory.pin_memory runs its check in
        import comfy.pinned_memory
        self.assertIsNot(comfy.pinned_memory.pin_memory, comem_original(comfy.pinned_memory.pin_memory))
        # free_memory's call (room for a load's pins; it pins nothing) books nothing.
        self.assertTrue(mm.ensure_pin_budget(8 * GiB))
        self.assertEqual(self.pins_booked(), 0)
        with pinning():
            self.assertTrue(mm.ensure_pin_budget(64 * MiB))
        self.assertEqual(self.pins_booked(), CHUNK, "a chunk booked ahead of the first 64 MiB pin")
        mm.TOTAL_PINNED_MEMORY += 64 * MiB  # what pin_memory adds once it registered the pin
        with pinning():
            self.assertTrue(mm.ensure_pin_budget(64 * MiB))
        self.assertEqual(self.pins_booked(), CHUNK, "within the chunk: no new booking")
        mm.TOTAL_PINNED_MEMORY += 64 * MiB
        with pinning():
            self.assertTrue(mm.ensure_pin_budget(300 * MiB))
        self.assertEqual(self.pins_booked(), 2 * CHUNK, "128 MiB pinned + 300 MiB more: one more chunk")
        mm.TOTAL_PINNED_MEMORY += 300 * MiB
        # Past the machine's pin ceiling: the ledger refuses, and ComfyUI's ensure_pin_budget says no.
        ceiling = self.machine.status()["pins"]["max"]
        with pinning():
            self.assertFalse(mm.ensure_pin_budget(ceiling))
        self.assertEqual(pins.refused, 1)
        self.assertEqual(self.pins_booked(), 2 * CHUNK)
        # ComfyUI lets pins go (partially_unload_ram): the next node boundary gives the booking back
        # down to its pins and one chunk.
        mm.TOTAL_PINNED_MEMORY = 32 * MiB
        with self.host.computing("p"):
            pass
        self.assertEqual(self.pins_booked(), 32 * MiB + CHUNK)
        mm.TOTAL_PINNED_MEMORY = 0
        with self.host.computing("p"):
            pass
        self.assertEqual(self.pins_booked(), CHUNK)
        # ComfyUI lets pins go outside a node (its models released, for another process's ask or the
        # host's own free_memory, then synced): the booking follows at that sync, not at the next node's
        # end (on the H100 a released 8 GiB model's pins stayed booked until then).
        with pinning():
            self.assertTrue(mm.ensure_pin_budget(600 * MiB))
        mm.TOTAL_PINNED_MEMORY += 600 * MiB
        self.assertEqual(self.pins_booked(), 600 * MiB)
        mm.TOTAL_PINNED_MEMORY = 0
        self.host.models.sync()
        self.assertEqual(self.pins_booked(), CHUNK)
        self.machine.check_ledger(self)


class TestRamCacheSizes(AdapterCase):
    """What an output of ComfyUI's RAM cache holds in host RAM (comem/comfy/ram.py): CPU tensors, each storage
    once, and a loader's ModelPatcher by ComfyUI's own figures: what is not on its load device."""

    def test_outputs_are_sized_by_what_they_hold_in_ram(self):
        import torch
        from comem.comfy.ram import cpu_bytes
        t = torch.ones(4 * MiB // 4)
        self.assertEqual(cpu_bytes([[t, t[:10]], (t,)]), 4 * MiB, "one storage, however many views")
        p = make_patcher(self.mm, [64, 64])
        clone = p.clone()
        self.assertEqual(cpu_bytes([[p], [clone], [t]]), 128 * MiB + 4 * MiB, "a clone shares its parent's weights")
        self.mm.load_models_gpu([p])  # onto the device that plays the card: no longer the RAM copy
        self.assertEqual(cpu_bytes([[p]]), 128 * MiB - p.loaded_size())
        self.assertLess(cpu_bytes([[p]]), 128 * MiB)
        self.assertEqual(cpu_bytes([["text", 3, None]]), 0)


    def test_sizes_agree_with_comfyuis_own_cache_sizing(self):
        """v0.39's ram_release sizes an entry by its CPU storages, each once, walking mappings and the
        ``_comfy_cache_tensors()`` hook: comem's figure for tensor outputs is ComfyUI's, entry by entry."""
        import types
        from unittest import mock
        import torch
        from comem.comfy.ram import cpu_bytes
        if support.comfyui_era() != "v0.39":
            self.skipTest("v0.39's cache sizing (783545f6 counts each view's elements, with no mappings or hooks)")
        import comfy_execution.caching as caching

        class Holds:  # an output object that keeps tensors inside itself, as v0.39's hook describes
            def __init__(self, *tensors):
                self.tensors = tensors

            def _comfy_cache_tensors(self):
                return list(self.tensors)

        def comfyui_size(outputs):
            key = "k"
            entry = types.SimpleNamespace(outputs=outputs)
            fake = types.SimpleNamespace(cache={key: entry}, used_generation={key: 0}, generation=0,
                                         timestamps={key: 0.0}, children={}, active_evictions=False,
                                         full_evictions=False)
            with mock.patch.object(caching, "virtual_memory_available", return_value=0):
                freed = caching.RAMPressureCache.ram_release(fake, 1, free_active=True)
            self.assertEqual(fake.cache, {}, "ComfyUI evicted the entry it sized")
            return round(freed - caching.RAM_CACHE_DEFAULT_RAM_USAGE)

        rng = torch.Generator().manual_seed(39)
        for case in range(40):
            pool = [torch.empty(int(torch.randint(1, 1 << 18, (1,), generator=rng)), dtype=torch.uint8)
                    for _ in range(4)]
            pick = lambda: pool[int(torch.randint(0, 4, (1,), generator=rng))]  # noqa: E731 shared storages
            view = lambda: pick()[: 1 + int(torch.randint(0, 8, (1,), generator=rng))]  # noqa: E731
            outputs = [pick(), (view(), {"samples": pick(), "extra": [view()]}), Holds(pick(), view()),
                       {"nested": Holds(pick())}, "text", None, 3]
            with self.subTest(case=case):
                self.assertEqual(cpu_bytes(outputs), comfyui_size(outputs))

    def test_an_output_whose_hook_raises_is_left_out(self):
        import torch
        from comem.comfy.ram import cpu_bytes

        class Broken:
            def _comfy_cache_tensors(self):
                raise RuntimeError("cannot say")

        with self.assertRaisesRegex(RuntimeError, "cannot say"):
            cpu_bytes([torch.ones(4), Broken()])


class TestOffloadAsksForRam(AdapterCase):
    """An unload that moves a classic model's weights off the card to its CPU offload device asks host RAM
    for them first (issue 23 item 3, both eras): with less free than the weights, another process's idle
    RAM holder is asked before ComfyUI moves a byte; a partial unload asks what ComfyUI was asked to free."""

    comemd_extra = ["--ram", "5GiB"]
    # 384 MiB entries: above AddressSanitizer's 256 MiB quarantine, so in the sanitized build too a
    # freed entry goes back to the system at once and the receipt is held up against a falling RSS.
    ENTRY_MIB = 384

    def ram(self):
        return self.machine.status()["devices"][-1]

    def test_unloading_to_ram_asks_other_processes_first(self):
        p = make_patcher(self.mm, [256, 256, 256, 256])
        self.mm.load_models_gpu([p])
        self.assertEqual(p.loaded_size(), GiB)
        (lm,) = [lm for lm in self.mm.current_loaded_models if lm.model is p]
        self.assertEqual(self.host.offload_bytes(lm), GiB)
        self.assertEqual(self.host.offload_bytes(lm, 100.5 * MiB), math.ceil(100.5 * MiB))

        other = self.machine.child("ram_holder.py", "other")
        free = self.ram()["free"]
        n = max(0, (free - 512 * MiB) // (self.ENTRY_MIB * MiB))  # leave less free than the 1 GiB the unload moves
        for i in range(n):
            other.ask("cache", holder_name="weights", entry=f"w{i}", mib=self.ENTRY_MIB)
        self.assertLess(self.ram()["free"], GiB)
        self.host.sync()
        self.assertEqual(self.stand_ins(), [], "host RAM entries are no card's models: no stand-in for them")

        asks_at_detach = []
        orig_detach = p.detach

        def detach(*a, **kw):
            asks_at_detach.append(len(other.ask("asks")["asks"]))
            return orig_detach(*a, **kw)
        p.detach = detach
        with self.assertLogs("comem.comfy", "INFO") as logs:
            self.mm.free_memory(1e30, self.dev)  # ComfyUI's own loop unloads the model
        del p.detach
        self.assertEqual(p.loaded_size(), 0)
        asks = other.ask("asks")["asks"]
        self.assertGreaterEqual(len(asks), 1, self.machine.comemd_log()[-4000:])
        self.assertEqual(asks_at_detach, [len(asks)], "every ask came before ComfyUI moved the weights")
        self.assertEqual({(a["holder"], a["kind"]) for a in asks}, {("weights", "bytes")})
        self.assertGreater(asks[0]["bytes"], 0)
        self.assertLessEqual(asks[0]["bytes"], GiB, "asked for what the offload lacks, not more")
        self.assertTrue(any("offloading 1024 MiB of a model's weights to RAM" in m for m in logs.output), logs.output)
        self.assertEqual(_holder_of(self.ram(), "other", "weights")["receipts_contradicted"], 0)
        self.assertEqual(other.finish(), 0, other.errors())
        self.machine.check_ledger(self)

    def test_nothing_asked_for_a_dynamic_or_unmanaged_model(self):
        p = make_patcher(self.mm, [64])
        self.mm.load_models_gpu([p])
        (lm,) = [lm for lm in self.mm.current_loaded_models if lm.model is p]
        p.is_dynamic = lambda: True  # 783545f6's ModelPatcherDynamic: the weights never leave RAM
        self.assertEqual(self.host.offload_bytes(lm), 0)
        del p.is_dynamic
        import torch
        p.offload_device = self.dev  # kept on its card (--gpu-only): nothing moves to RAM
        self.assertEqual(self.host.offload_bytes(lm), 0)
        p.offload_device = torch.device("cpu")
        self.assertEqual(self.host.offload_bytes(lm), 64 * MiB)


def _holder_of(dev, process: str, name: str):
    p = next(p for p in dev["processes"] if p["name"] == process)
    return next(h for h in p["holders"] if h["name"] == name)


class TestWorkerRamHeadroom(unittest.TestCase):
    """A worker (no executor hands it a RAM-cache state) gets the coordinator's host-RAM reserve as
    ComfyUI's ``RAM_CACHE_HEADROOM`` (issue 23 item 3), which ComfyUI's pin budget then keeps free."""

    def test_worker_gets_the_ledgers_share(self):
        support.need_torch(self)
        support.need_comfyui(self, support.DYNAMIC_ERAS)
        mm = support.import_comfy()
        import comfy.memory_management as memory
        import comem
        from comem.comfy import Worker
        self.addCleanup(setattr, memory, "RAM_CACHE_HEADROOM", memory.RAM_CACHE_HEADROOM)
        memory.RAM_CACHE_HEADROOM = 0  # as in every process ComfyUI's executor does not run in
        with Machine(CARD, extra=["--ram", "machine"]) as machine:
            card = comem.SimCard(machine.spec)
            self.addCleanup(card.close)
            w = Worker("w", socket=machine.socket, mm=mm, card=card)
            try:
                ram = machine.status()["devices"][-1]
                self.assertIsNotNone(ram["host_ram"], "comemd --ram machine serves host RAM last")
                self.assertGreater(ram["reserve"]["published"], 0, "the machine's RAM keeps ComfyUI's headroom")
                self.assertEqual(memory.RAM_CACHE_HEADROOM, w.client.reserve(comem.HOST_RAM).reserve)
                self.assertEqual(memory.RAM_CACHE_HEADROOM, ram["reserve"]["published"])
            finally:
                w.close()
        # Without host RAM on the coordinator, nothing is changed.
        memory.RAM_CACHE_HEADROOM = 0
        with Machine(CARD) as machine:
            card = comem.SimCard(machine.spec)
            self.addCleanup(card.close)
            w = Worker("w", socket=machine.socket, mm=mm, card=card)
            w.close()
            self.assertEqual(memory.RAM_CACHE_HEADROOM, 0)


class TestComfyUIVersion(unittest.TestCase):
    """The adapter names a ComfyUI release it was not tested with, once, and runs on (issue 39)."""

    def test_each_tested_tree_is_in_the_table_and_another_is_warned_once(self):
        import sys
        import types
        d = support.need_comfyui(self)
        from comem.comfy import versions
        with open(os.path.join(d, "comfyui_version.py"), encoding="utf-8") as f:
            namespace: dict = {}
            exec(f.read(), namespace)  # the tree's own version, read as ComfyUI reads it
        tree = types.ModuleType("comfyui_version")
        tree.__version__ = namespace["__version__"]
        self.addCleanup(sys.modules.pop, "comfyui_version", None)
        self.addCleanup(setattr, versions, "_warned", versions._warned)
        sys.modules["comfyui_version"] = tree
        versions._warned = False
        with self.assertNoLogs("comem.comfy", "WARNING"):
            self.assertEqual(versions.warn_if_untested(), namespace["__version__"])
        self.assertIn(namespace["__version__"], versions.TESTED, f"{d} is a tree the suites run against")
        tree.__version__ = "0.99.0"
        with self.assertLogs("comem.comfy", "WARNING") as logs:
            self.assertEqual(versions.warn_if_untested(), "0.99.0")
        self.assertEqual(len(logs.output), 1)
        self.assertIn("ComfyUI 0.99.0 is not a release comem was tested with", logs.output[0])
        self.assertIn("ComfyUI runs on", logs.output[0])
        with self.assertNoLogs("comem.comfy", "WARNING"):
            versions.warn_if_untested()  # once per process


class TestRamCacheHint(unittest.TestCase):
    """Where the coordinator serves no host RAM, ComfyUI's log says once what a user of the coordinator ComfyUI
    starts can do: an environment variable and a restart, not only a flag of comemd's they never type
    (issue 41 item 7)."""

    def test_the_hint_names_what_the_autostart_honours(self):
        import types
        from comem.comfy import ram
        asked = []

        def status():
            asked.append(1)
            return {"devices": [{"index": 0, "host_ram": None}]}

        rc = ram.RamCache(types.SimpleNamespace(connected=True, status=status))
        with self.assertLogs("comem.comfy", "INFO") as logs:
            self.assertFalse(rc._served())
        self.assertEqual(len(logs.output), 1)
        said = logs.output[0]
        self.assertIn("the coordinator serves no host RAM", said)
        self.assertIn("start ComfyUI again with COMEM_RAM=machine in its environment", said)
        self.assertIn("`comem stop`", said)  # one already running keeps its settings
        with self.assertNoLogs("comem.comfy", "INFO"):
            self.assertFalse(rc._served())  # asked and said once
        self.assertEqual(asked, [1])


class TestRamCacheMeasure(unittest.TestCase):
    """An ask to the RAM cache is a target over available RAM as ComfyUI's cache measures it: v0.39's
    comfy.system_memory (cgroup-aware), 783545f6's psutil (issue 39 item 1)."""

    def test_the_target_reads_what_comfyui_reads(self):
        import sys
        import types
        from unittest import mock
        support.need_comfyui(self, support.DYNAMIC_ERAS)
        support.import_comfy()
        import psutil
        from comem.client import ReleaseAsk
        from comem.comfy import ram
        targets = []

        class Cache:  # what the adapter reaches of ComfyUI's RAMPressureCache: its outputs and ram_release
            cache: dict = {}

            def ram_release(self, target, free_active=False):
                targets.append(target)

        cache = Cache()
        rc = ram.RamCache(types.SimpleNamespace(connected=False))  # no coordinator: nothing to register
        rc.set_cache(cache.ram_release)
        ask = ReleaseAsk(holder=None, kind="bytes", bytes=GiB, plan=[])
        system_memory = sys.modules.get("comfy.system_memory")
        with mock.patch.object(psutil, "virtual_memory", return_value=mock.Mock(available=60 * GiB)):
            if support.comfyui_era() == "v0.39":
                self.assertIsNotNone(system_memory, "v0.39's model manager imports comfy.system_memory")
                # Under a 4 GiB container limit with 1 GiB in use, ComfyUI sees 3 GiB, whatever psutil says.
                with mock.patch.object(system_memory, "virtual_memory_available", return_value=3 * GiB):
                    self.assertEqual(ram.available_ram(), 3 * GiB)
                    rc._on_release(ask)
                self.assertEqual(targets, [4 * GiB], "the cache is asked to keep 3 GiB + the 1 GiB asked free")
            else:
                self.assertIsNone(system_memory, "783545f6 reads RAM through psutil")
                self.assertEqual(ram.available_ram(), 60 * GiB)
                rc._on_release(ask)
                self.assertEqual(targets, [61 * GiB])


if __name__ == "__main__":
    unittest.main()
