"""Differential conformance with ComfyUI 783545f6 (2026-08-22): comem's current rules against its own code.

ComfyUI's real ``comfy.model_management`` (``COMFYUI_DIR``, a 783545f6-era checkout: its
``free_memory`` takes ``for_dynamic``) and comem's rules (``comem.calc`` with
``rules="783545f6"``, and ``"current"``, which must be the same) are driven with the same
inputs, drawn and shrunk by hypothesis (derandomized: every run draws the same cases):

- ``free_memory`` with ``for_dynamic``, ``pins_required`` and ``ram_required``: every reading,
  partial unload, detach and pin eviction (model, bytes asked, subsets, destroy or unregister),
  in order; the list returned and the list left; how often the cache was emptied. The patchers
  are fakes (dynamic or not, reference counts real, dead entries really dead); the card, psutil,
  the pinned totals and ``RAM_CACHE_HEADROOM`` are the test's.
- ``load_models_gpu``: the order it loads in (duplicates and ``model_patches_models()``), every
  ``free_memory`` call it makes with its ``for_dynamic`` and ``pins_required``, the lowvram
  budget each model gets (no 128 MiB floor any more), and the front of the list it leaves.
- the pinned-RAM gates ``ensure_pin_budget`` (``--high-ram``, ``--fast-disk``), ``free_pins``,
  ``free_registrations``, ``ensure_pin_registerable``, ``should_free_pins_for_ram_pressure``,
  over fake dynamic models whose pin state (active, current prompt) filters the tiers;
- ``MAX_PINNED_MEMORY`` (ComfyUI's own import-time statement, executed with this case's RAM,
  swap, platform and vendor), ``pinned_hostbuf_size``, ``extra_reserved_memory`` and
  ``minimum_inference_memory`` (the module's import-time code executed afresh).

Each test counts the situations its cases reached and fails if one never occurred.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import inspect
import logging
import math
import sys
import types
import unittest
import weakref
from typing import Any, Dict, Iterator, List, Optional, Tuple

import support
from support import GiB, MiB

try:
    from hypothesis import HealthCheck, given, settings, strategies as st
except ImportError:  # pragma: no cover - the venv has it
    st = None

Case = Dict[str, Any]


def _settings(n: int):
    return settings(max_examples=n, derandomize=True, deadline=None, database=None, print_blob=False,
                    suppress_health_check=list(HealthCheck))




class Conformance783545f6(unittest.TestCase):
    """Imports ComfyUI's model manager once; skips unless it is 783545f6-era."""

    mm: Any = None
    seen: collections.Counter

    def setUp(self) -> None:
        support.need_torch(self)
        support.need_comfyui(self)
        if st is None:
            self.skipTest("hypothesis is not installed: run the tests in the environment scripts/venv.sh makes")
        type(self).mm = support.import_comfy()
        self.seen = collections.Counter()
        if "for_dynamic" not in inspect.signature(self.mm.free_memory).parameters:
            self.skipTest("COMFYUI_DIR is not 783545f6-era (its free_memory takes no for_dynamic): "
                          "test_conformance.py compares the a125cd84 snapshot")
        from comem import calc
        self.calc = calc
        # v0.39 (the assembled tree) keeps 783545f6's load rules and changes the pin ones: its own
        # rules are compared there; "current" names 783545f6's and is compared on 783545f6 only.
        self.rules = "v0.39" if hasattr(self.mm, "FAST_PIN_SUBSETS") else "783545f6"
        self.compared = ("v0.39",) if self.rules == "v0.39" else ("783545f6", "current")
        logging.disable(logging.WARNING)  # ComfyUI's leak warnings for the dead entries made here
        self.addCleanup(logging.disable, logging.NOTSET)

    def tag(self, *names: str) -> None:
        self.seen.update(names)

    def run_property(self, name: str, strategy: Any, n: int, check: Any, must_see: Tuple[str, ...]) -> None:
        """check(case) over n derandomized hypothesis cases (shrunk on failure); then each situation occurred."""
        self.seen.clear()

        @_settings(n)
        @given(strategy)
        def prop(case: Case) -> None:
            check(case)

        prop()
        self.reached(name, must_see)

    def reached(self, name: str, must_see: Tuple[str, ...]) -> None:
        seen = ", ".join(f"{k} {self.seen[k]}" for k in sorted(must_see))
        sys.stderr.write(f"\nconformance 783545f6: {name}: among the cases: {seen}\n")
        missing = [t for t in must_see if not self.seen[t]]
        self.assertFalse(missing, f"{name}: no case reached {missing}: the generator lost its reach")

    @contextlib.contextmanager
    def patched(self, target: Any = None, **names: Any) -> Iterator[None]:
        """Sets attributes of comfy.model_management (or target) for the block."""
        obj = self.mm if target is None else target
        saved = {k: getattr(obj, k) for k in names}
        try:
            for k, v in names.items():
                setattr(obj, k, v)
            yield
        finally:
            for k, v in saved.items():
                setattr(obj, k, v)

    @contextlib.contextmanager
    def host(self, case: Case) -> Iterator[None]:
        """psutil (v0.39: comfy.system_memory), the pin totals, --high-ram/--fast-disk and
        RAM_CACHE_HEADROOM as this case has them."""
        import comfy.memory_management as mem
        mm = self.mm
        fake_psutil = types.SimpleNamespace(
            virtual_memory=lambda: types.SimpleNamespace(available=case["available"], total=case["available"] * 2),
            swap_memory=lambda: _swap(case))
        sysmem = sys.modules.get("comfy.system_memory")  # v0.39 reads RAM through it (cgroup-aware)
        ram = self.patched(sysmem, virtual_memory_available=lambda: case["available"]) if sysmem is not None \
            else contextlib.nullcontext()
        with self.patched(psutil=fake_psutil, MAX_PINNED_MEMORY=case["max_pinned"],
                          TOTAL_PINNED_MEMORY=case["total_pinned"], WINDOWS=case.get("windows", False)), \
                self.patched(mm.args, high_ram=case["high_ram"], fast_disk=case["fast_disk"]), \
                self.patched(mem, RAM_CACHE_HEADROOM=case["headroom"]), ram:
            yield


def _swap(case: Case) -> Any:
    if case.get("swap_percent") is None:
        raise RuntimeError("no swap reading")
    return types.SimpleNamespace(percent=case["swap_percent"])


# ---- the fakes: a card, pins, patchers ----

class Card:
    """free = base + what was unloaded (+ other processes' noise); pins freed by whole chunks."""

    def __init__(self, case: Case, total_pinned: Any = None) -> None:
        self.case = case
        self.freed = 0
        self.reads = 0
        self.loaded = [m["loaded"] for m in case["models"]]
        self.pins = [m.get("pins", 0) for m in case["models"]]
        self.events: List[tuple] = []
        self.total = case.get("total_pinned", 0)
        self.total_pinned = total_pinned  # the ComfyUI side: write TOTAL_PINNED_MEMORY back as ComfyUI would

    def peek(self) -> float:
        noise = self.case.get("noise") or []
        return self.case["free"] + self.freed + (noise[self.reads % len(noise)] if noise else 0)

    def read(self) -> float:
        v = self.peek()
        self.reads += 1
        self.events.append(("read", v))
        return v

    def partial(self, i: int, to_free: float) -> int:
        m = self.case["models"][i]
        t = float(to_free)
        want = math.ceil(t / m["chunk"]) * m["chunk"] if t > 0 else 0
        got = max(0, min(self.loaded[i] - m["stuck"], want))
        self.loaded[i] -= got
        self.freed += got
        self.events.append(("partial", i, t, got))
        return got

    def detach(self, i: int) -> None:
        self.freed += self.loaded[i]
        self.loaded[i] = 0
        self.events.append(("detach", i))

    def free_pins(self, i: int, size: float, subsets: List[str], registrations: bool) -> int:
        m = self.case["models"][i]
        chunk = m.get("pin_chunk", 1)
        got = max(0, min(self.pins[i], math.ceil(float(size) / chunk) * chunk))
        self.pins[i] -= got
        self.total = max(0, self.total - got)
        if self.total_pinned is not None:
            self.total_pinned(self.total)
        self.events.append(("pins", i, float(size), list(subsets), bool(registrations), got))
        return got


class _Real:
    """The nn.Module stand-in a patcher's .model is (weak-referenceable; holds dynamic_pins)."""


class FakePatcher:
    """What free_memory and the pin ladders touch of a ModelPatcher (dynamic or not)."""

    def __init__(self, card: Card, i: int, device: Any) -> None:
        m = card.case["models"][i]
        self.card, self.i = card, i
        self.load_device = device
        self.offload_device = "offload"
        self.parent = None
        self.model = _Real()
        self.model.dynamic_pins = {device: {"active": m.get("active", False),
                                            "current_prompt": m.get("prompt", False)}}
        self.dynamic = m.get("dynamic", False)

    def is_dynamic(self) -> bool:
        return self.dynamic

    def model_size(self) -> int:
        return self.card.case["models"][self.i]["size"]

    def loaded_size(self) -> int:
        return self.card.loaded[self.i]

    def partially_unload(self, device_to: Any, memory_to_free: float, force_patch_weights: bool = False) -> int:
        return self.card.partial(self.i, memory_to_free)

    def detach(self, unpatch_all: bool = True) -> None:
        self.card.detach(self.i)

    def partially_unload_ram(self, ram_to_unload: float, subsets: Optional[List[str]] = None) -> int:
        return self.card.free_pins(self.i, ram_to_unload, subsets, False)

    def unregister_inactive_pins(self, ram_to_unload: float, subsets: Optional[List[str]] = None) -> int:
        return self.card.free_pins(self.i, ram_to_unload, subsets, True)


def build_entries(mm: Any, card: Card, devices: Dict[int, Any]) -> Tuple[list, list]:
    """LoadedModels over fake patchers; returns (entries, what keeps the live ones alive)."""
    keep_alive, entries = [], []
    p = None
    for i, m in enumerate(card.case["models"]):
        p = FakePatcher(card, i, devices[m["device"]])
        lm = mm.LoadedModel(p)
        lm.real_model = weakref.ref(p.model)
        lm.model_finalizer = weakref.finalize(p.model, lambda: None)
        keep_alive.append(p.model)
        entries.append(lm)
        if m.get("dead"):
            continue  # its patcher is collected when p is rebound: is_dead() holds
        keep_alive.extend([p] * (1 + m.get("refs", 0)))
    del p
    return entries, keep_alive


def release(entries: list) -> None:
    for lm in entries:
        if lm.model_finalizer is not None:
            lm.model_finalizer.detach()


# ---- strategies ----

if st is not None:
    SIZES = st.sampled_from([300 * MiB, 2 * GiB, 6 * GiB]) | st.integers(1, 24 * GiB)
    PIN_HOST = {
        "available": st.sampled_from([0, GiB, 3 * GiB, 64 * GiB]) | st.integers(0, 32 * GiB),
        "headroom": st.sampled_from([0, 0, 3435973836, 10 * GiB]) | st.integers(0, 12 * GiB),
        "high_ram": st.integers(0, 7).map(lambda x: x == 0),
        "fast_disk": st.booleans(),
        "total_pinned": st.sampled_from([0, 4 * GiB, 20 * GiB]) | st.integers(0, 40 * GiB),
        "max_pinned": st.sampled_from([-1, 0, 12 * GiB, 20.5 * GiB, 51539607552]) | st.floats(0, 48 * GiB),
    }

    @st.composite
    def free_models(draw: Any) -> List[Dict[str, Any]]:
        out = []
        for _ in range(draw(st.integers(0, 6))):
            size = draw(SIZES)
            loaded = draw(st.sampled_from([size, size, 0]) | st.integers(0, size))
            out.append({
                "size": size, "loaded": loaded, "refs": draw(st.sampled_from([0, 0, 1, 2])),
                "device": draw(st.sampled_from([0, 0, 0, 0, 1])),
                "keep": draw(st.integers(0, 9)) == 0, "dead": draw(st.integers(0, 30)) == 0,
                "dynamic": draw(st.booleans()),
                "chunk": draw(st.sampled_from([1, 4096, 64 * MiB, 300 * MiB]) | st.integers(1, 2 * GiB)),
                # what a partial unload cannot free; all of it (a quarter of the models) makes a partial unload
                # fall short by construction, not by the odd draw: Hypothesis also draws constants it finds in
                # the local modules' source (comem's, ComfyUI's), so an edited literal re-deals every case
                "stuck": draw(st.sampled_from([0, loaded]) | st.integers(0, loaded)),
                "pins": draw(st.sampled_from([0, GiB, 3 * GiB]) | st.integers(0, 8 * GiB)),
                "pin_chunk": draw(st.sampled_from([1, 64 * MiB, GiB])),
                "active": draw(st.booleans()), "prompt": draw(st.booleans()),
            })
        return out

    @st.composite
    def free_cases(draw: Any) -> Case:
        models = draw(free_models())
        free = draw(st.sampled_from([0, 2 * GiB]) | st.integers(0, 48 * GiB))
        resident = sum(m["loaded"] for m in models)
        required = draw(st.sampled_from([
            free + draw(st.integers(0, resident + 1)), free + draw(st.integers(0, 2 * GiB)) + 0.4, float(free),
            draw(st.integers(0, free + 1)), free + resident + draw(st.integers(0, GiB))]))
        case = {"models": models, "free": free, "required": required,
                "noise": [] if draw(st.integers(0, 4)) else draw(st.lists(st.integers(-GiB, GiB), min_size=1,
                                                                              max_size=3)),
                "smart": draw(st.integers(0, 6)) > 0, "high_vram": draw(st.integers(0, 4)) == 0,
                "torch_free": draw(st.none() | st.integers(0, 4 * GiB)),
                "device_none": draw(st.integers(0, 9)) == 0, "for_dynamic": draw(st.booleans()),
                "pins_required": draw(st.sampled_from([0, 0, 6 * GiB]) | st.integers(0, 24 * GiB)),
                "ram_required": draw(st.sampled_from([0, 8 * GiB]))}
        case.update({k: draw(v) for k, v in PIN_HOST.items()})
        return case

    @st.composite
    def pin_cases(draw: Any) -> Case:
        models = []
        for _ in range(draw(st.integers(0, 5))):
            models.append({"size": 0, "loaded": 0, "dynamic": draw(st.integers(0, 5)) > 0,
                           "dead": draw(st.integers(0, 15)) == 0,
                           "pins": draw(st.sampled_from([0, GiB, 3 * GiB]) | st.integers(0, 8 * GiB)),
                           "pin_chunk": draw(st.sampled_from([1, 64 * MiB, GiB]) | st.integers(1, GiB)),
                           "active": draw(st.booleans()), "prompt": draw(st.booleans()), "device": 0})
        case = {"models": models, "free": 0, "size": draw(st.sampled_from([MiB, 64 * MiB, 6 * GiB])
                                                          | st.integers(0, 16 * GiB)),
                "evict_active": draw(st.booleans()), "loaded_subset": draw(st.booleans()),
                "shortfall": draw(st.sampled_from([0, -1, GiB]) | st.floats(-4 * GiB, 12 * GiB)),
                "windows": draw(st.booleans()),
                "swap_percent": draw(st.none() | st.sampled_from([0.0, 4.9, 5.0]) | st.floats(0, 100)),
                "pressure": draw(st.sampled_from([0, -1, 1]) | st.floats(-GiB, GiB))}
        case.update({k: draw(v) for k, v in PIN_HOST.items()})
        if draw(st.integers(0, 4)) == 0:  # on the Windows emergency line
            case["available"] = draw(st.sampled_from([512 * MiB - 1, 512 * MiB]))
        return case

    @st.composite
    def load_cases(draw: Any) -> Case:
        pool = []
        k = draw(st.integers(1, 5))
        for j in range(k):
            size = draw(SIZES)
            loaded = draw(st.sampled_from([0, 0, size]) | st.integers(0, size))
            pool.append({"size": size, "loaded": loaded, "device": draw(st.sampled_from([0, 0, 0, 1, -1])),
                         "dynamic": draw(st.integers(0, 2)) > 0,
                         "entry": draw(st.sampled_from(["none", "self", "clone"] if loaded else ["none", "clone"])),
                         "patches": draw(st.lists(st.integers(0, k - 1).filter(lambda x, j=j: x != j), max_size=2))})
        request = draw(st.lists(st.integers(0, k - 1), min_size=1, max_size=5))
        reserve = draw(st.sampled_from([400 * MiB, 600 * MiB, 700 * MiB, 0.0]) | st.floats(0, 4 * GiB))
        memory_required = draw(st.sampled_from([0]) | st.integers(0, 8 * GiB) | st.floats(GiB, 12 * GiB))
        minimum = draw(st.none() | st.sampled_from([0]) | st.integers(0, 4 * GiB) | st.floats(0, 4 * GiB))
        free = {d: draw(st.sampled_from([0]) | st.integers(0, 4 * GiB) | st.integers(0, 40 * GiB)) for d in (0, 1)}
        rel = {d: draw(st.lists(st.sampled_from([0]) | st.integers(0, 8 * GiB), min_size=2, max_size=2))
               for d in (0, 1)}
        case = {"pool": pool, "request": request, "reserve": reserve, "memory_required": memory_required,
                "minimum": minimum, "free": free, "release": rel, "ratio": draw(st.sampled_from([0.0, 0.4])),
                "state": draw(st.sampled_from(["normal"] * 4 + ["low"] * 2 + ["disabled", "no", "high", "shared"])),
                "lowvram_available": draw(st.integers(0, 9)) > 0, "force_full_load": draw(st.integers(0, 9)) == 0}
        # Some cases exactly on a boundary: the second pass's strict <, and the budget's 0 -> 0.1.
        from comem import calc
        adm = calc.admission(memory_required, minimum, reserve)
        pick, d = draw(st.integers(0, 6)), draw(st.sampled_from([0, 1]))
        if pick == 0:
            free[d] = adm.minimum_memory_required - rel[d][0]
        elif pick == 1:
            m = pool[draw(st.integers(0, k - 1))]
            free[d] = adm.minimum_memory_required - m["loaded"] + draw(st.sampled_from([0, 128 * MiB, 0.1])) \
                - rel[d][0] - rel[d][1]
        elif pick == 2:  # a budget just above nothing: cur - mmr under 128 MiB (a125cd84's floor)
            free[d] = adm.minimum_memory_required + draw(st.integers(1, 128 * MiB - 1)) - rel[d][0]
        return case

    def reserve_cases() -> Any:
        return st.fixed_dictionaries({
            "windows": st.booleans(),
            "total_mib": st.sampled_from([15 * 1024, 15 * 1024 + 1 / MiB, 15 * 1024 - 1 / MiB, 8192, 24576])
            | st.floats(1024, 196 * 1024),
            "reserve_vram": st.none() | st.sampled_from([0.0, -0.0, 2.0]) | st.floats(-1, 16)})

    def ceiling_cases() -> Any:
        return st.fixed_dictionaries({
            "ram": st.sampled_from([8 * GiB, 16 * GiB, 24 * GiB, 64 * GiB, 31.3 * GiB]) | st.integers(GiB, 1024 * GiB),
            "swap": st.sampled_from([0, 8 * GiB, 64 * GiB]) | st.integers(0, 256 * GiB),
            "windows": st.booleans(), "vendor": st.sampled_from(["nvidia", "amd", "other"]), "cgroup": st.booleans(),
            "disabled": st.integers(0, 5).map(lambda x: x == 0), "high_ram": st.booleans(),
            "size": st.sampled_from([0, GiB, 100 * GiB]) | st.integers(0, 200 * GiB) | st.floats(0, 200 * GiB)})
else:  # pragma: no cover
    free_cases = pin_cases = load_cases = lambda: None  # noqa: E731
    reserve_cases = ceiling_cases = lambda: None  # noqa: E731


def _pin_models(calc: Any, models: List[Dict[str, Any]], idx: List[int]) -> list:
    return [calc.PinModel(dynamic=models[i].get("dynamic", False) and not models[i].get("dead", False),
                          active=models[i].get("active", False), current_prompt=models[i].get("prompt", False))
            for i in idx]


# ---- free_memory ----

class TestFreeMemory(Conformance783545f6):
    """free_memory(memory_required, device, keep_loaded, for_dynamic, pins_required, ram_required)."""

    def comfy_side(self, case: Case) -> Dict[str, Any]:
        import torch
        mm = self.mm
        card = Card(case, total_pinned=lambda v: setattr(mm, "TOTAL_PINNED_MEMORY", v))
        dev = {0: torch.device("cuda", 0), 1: torch.device("cuda", 1)}
        entries, alive = build_entries(mm, card, dev)
        keep = [lm for lm, m in zip(entries, case["models"]) if m["keep"]]
        flushes: List[int] = []
        torch_free = case["torch_free"]

        def get_free_memory(d: Any = None, torch_free_too: bool = False) -> Any:
            assert d == dev[0], d
            if torch_free_too:
                total = card.peek()
                card.reads += 1
                return total, (total * 0.25 if torch_free is None else torch_free)
            return card.read()

        index = {id(lm): i for i, lm in enumerate(entries)}
        with self.host(case), self.patched(
                current_loaded_models=list(entries), get_free_memory=get_free_memory,
                soft_empty_cache=lambda force=False: flushes.append(1), DISABLE_SMART_MEMORY=not case["smart"],
                gc=types.SimpleNamespace(collect=lambda *a: 0),  # cleanup_models_gc's full collection: slow, no rule
                vram_state=mm.VRAMState.HIGH_VRAM if case["high_vram"] else mm.VRAMState.NORMAL_VRAM):
            unloaded = mm.free_memory(case["required"], None if case["device_none"] else dev[0], keep_loaded=keep,
                                      for_dynamic=case["for_dynamic"], pins_required=case["pins_required"],
                                      ram_required=case["ram_required"])
            remaining = [index[id(lm)] for lm in mm.current_loaded_models]
        release(entries)
        del alive
        return {"events": card.events, "unloaded": [index[id(lm)] for lm in unloaded], "remaining": remaining,
                "flushes": len(flushes)}

    def comem_side(self, case: Case, rules: str) -> Dict[str, Any]:
        calc = self.calc
        card = Card(case)
        ms = case["models"]
        models = [calc.Model(m["size"], m["loaded"], refs=m["refs"], device=m["device"], keep=m["keep"],
                             dead=m["dead"], dynamic=m["dynamic"]) for m in ms]
        res = calc.free_memory(models, case["required"], None if case["device_none"] else 0, free_now=card.read,
                               partially_unload=card.partial, detach=card.detach, smart_memory=case["smart"],
                               for_dynamic=case["for_dynamic"], pins_required=case["pins_required"],
                               ram_required=case["ram_required"], rules=rules)
        remaining = [i for i in range(len(ms)) if i not in res.unloaded]
        if res.ensures_pins:
            pins = _pin_models(calc, ms, remaining)

            def free(j: int, size: float, subsets: List[str], reg: bool) -> int:
                return card.free_pins(remaining[j], size, subsets, reg)

            calc.ensure_pin_budget(case["pins_required"], pins, free, available=case["available"],
                                   ram_cache_headroom=case["headroom"], high_ram=case["high_ram"],
                                   fast_disk=case["fast_disk"], total_pinned=card.total,
                                   maximum=case["max_pinned"], rules=rules)
            calc.ensure_pin_registerable(case["pins_required"], pins, free, total_pinned=card.total,
                                         maximum=case["max_pinned"], rules=rules)
        flushes = 1 if any(m["dead"] for m in ms) else 0  # cleanup_models_gc's own flush
        total = card.peek()
        torch_free = total * 0.25 if case["torch_free"] is None else case["torch_free"]
        flushes += calc.should_empty_cache(bool(res.unloaded), total, torch_free,
                                           vram_state="high" if case["high_vram"] else "normal",
                                           device_none=case["device_none"])
        return {"events": card.events, "unloaded": res.unloaded, "remaining": remaining, "flushes": flushes,
                "required_after": res.required_after, "ensures_pins": res.ensures_pins}

    def compare(self, case: Case) -> None:
        comfy = self.comfy_side(case)
        for rules in self.compared:
            mine = self.comem_side(case, rules)
            for key in ("events", "unloaded", "remaining", "flushes"):
                self.assertEqual(comfy[key], mine[key], f"{key} differ (comem rules={rules}) on {case!r}")
        ev = comfy["events"]
        self.tag(*(["partial"] if any(e[0] == "partial" and e[3] >= e[2] for e in ev) else []),
                 *(["partial_fell_short"] if any(e[0] == "partial" and e[3] < e[2] for e in ev) else []),
                 *(["detach"] if any(e[0] == "detach" for e in ev) else []),
                 *(["dynamic_kept"] if case["for_dynamic"] and mine["required_after"] != case["required"] else []),
                 *(["pins_destroyed"] if any(e[0] == "pins" and not e[4] for e in ev) else []),
                 *(["pins_unregistered"] if any(e[0] == "pins" and e[4] for e in ev) else []),
                 *(["pin_step"] if mine["ensures_pins"] else []),
                 *(["pin_step_skipped_for_dynamic"] if case["for_dynamic"] and case["pins_required"] > 0 else []),
                 *(["fast_disk"] if mine["ensures_pins"] and case["fast_disk"] else []),
                 *(["device_none"] if case["device_none"] else []), *(["flush"] if comfy["flushes"] else []),
                 *(["dead"] if any(m["dead"] for m in case["models"]) else []),
                 *(["keep"] if any(m["keep"] for m in case["models"]) else []),
                 *(["smart_off"] if not case["smart"] else []), *(["noise"] if case["noise"] else []))

    def test_free_memory_matches_comfyui(self) -> None:
        self.run_property("free_memory", free_cases(), 800, self.compare, ("partial", "partial_fell_short", "detach", "dynamic_kept", "pins_destroyed",
                                     "pins_unregistered", "pin_step", "pin_step_skipped_for_dynamic", "fast_disk",
                                     "device_none", "flush", "dead", "keep", "smart_off", "noise"))

    def test_dynamic_residents_count_as_reclaimable(self) -> None:
        """A hand case: for a dynamic load, dynamic residents are passed over and reduce the target."""
        models = [{"size": 4 * GiB, "loaded": 4 * GiB, "refs": 0, "device": 0, "keep": False, "dead": False,
                   "dynamic": d, "chunk": GiB, "stuck": 0, "pins": 0, "pin_chunk": 1, "active": False,
                   "prompt": False} for d in (True, False)]
        case = {"models": models, "free": 0, "required": 6.0 * GiB, "noise": [], "smart": True, "high_vram": False,
                "torch_free": 0, "device_none": False, "for_dynamic": True, "pins_required": GiB,
                "ram_required": 0, "available": 0, "headroom": 0, "high_ram": False, "fast_disk": False,
                "total_pinned": 0, "max_pinned": 8 * GiB}
        comfy = self.comfy_side(case)
        # 6 GiB minus the dynamic model's 4 GiB leaves 2 GiB, taken from the other by a partial unload.
        self.assertEqual([e for e in comfy["events"] if e[0] != "read"], [("partial", 1, 2.0 * GiB, 2 * GiB)])
        self.assertEqual(comfy["remaining"], [0, 1])
        self.compare(case)


# ---- the pinned-RAM gates ----

class TestPinGates(Conformance783545f6):
    """ensure_pin_budget, free_pins, free_registrations, ensure_pin_registerable, RAM pressure."""

    def run_side(self, case: Case, comfy: bool, rules: str = "") -> Dict[str, Any]:
        mm, calc = self.mm, self.calc
        out: Dict[str, Any] = {}
        for gate in ("budget", "free_pins", "registrations", "registerable"):
            card = Card(case, total_pinned=(lambda v: setattr(mm, "TOTAL_PINNED_MEMORY", v)) if comfy else None)
            ms = case["models"]
            if comfy:
                import torch
                entries, alive = build_entries(mm, card, {0: torch.device("cuda", 0)})
                with self.host(case), self.patched(current_loaded_models=list(entries)):
                    ea, ld = case["evict_active"], case["loaded_subset"]
                    if gate == "budget":
                        r = mm.ensure_pin_budget(case["size"], evict_active=ea, loaded=ld)
                    elif gate == "free_pins":
                        r = mm.free_pins(case["size"], evict_active=ea, loaded=ld)
                    elif gate == "registrations":
                        r = mm.free_registrations(case["shortfall"], evict_active=ea)
                    else:
                        r = mm.ensure_pin_registerable(case["size"], evict_active=ea)
                release(entries)
                del alive
            else:
                pins = _pin_models(calc, ms, list(range(len(ms))))
                free = card.free_pins
                kw = {"evict_active": case["evict_active"], "rules": rules or self.rules}
                if gate == "budget":
                    r = calc.ensure_pin_budget(case["size"], pins, free, available=case["available"],
                                               ram_cache_headroom=case["headroom"], high_ram=case["high_ram"],
                                               fast_disk=case["fast_disk"], total_pinned=case["total_pinned"],
                                               maximum=case["max_pinned"], loaded=case["loaded_subset"], **kw).passed
                elif gate == "free_pins":
                    r = calc.free_pins(case["size"], pins, free, loaded=case["loaded_subset"], **kw)
                elif gate == "registrations":
                    r = calc.free_registrations(case["shortfall"], pins, free, maximum=case["max_pinned"], **kw)
                else:
                    r = calc.ensure_pin_registerable(case["size"], pins, free, total_pinned=case["total_pinned"],
                                                     maximum=case["max_pinned"], **kw)
            out[gate] = (r, card.events)
        if comfy:
            with self.host(case):
                out["pressure"] = mm.should_free_pins_for_ram_pressure(case["pressure"])
        else:
            out["pressure"] = calc.should_free_pins_for_ram_pressure(case["pressure"], case["windows"],
                                                                     case["available"], case["swap_percent"])
        return out

    def check_gates(self, case: Case) -> None:
        comfy = self.run_side(case, True)
        for rules in self.compared:
            mine = self.run_side(case, False, rules)
            for key in comfy:
                self.assertEqual(comfy[key], mine[key], f"{key} differs (comem rules={rules}) on {case!r}")
        self.tag(*(["budget_passed"] if comfy["budget"][0] else ["budget_refused"]),
                 *(["budget_evicted"] if comfy["budget"][1] else []),
                 *(["registrations_passed"] if comfy["registrations"][0] else ["registrations_refused"]),
                 *(["registrations_evicted"] if comfy["registrations"][1] else []),
                 *(["active_tier"] if any(e[0] == "pins" and case["models"][e[1]]["active"] and
                                         case["models"][e[1]]["prompt"] for e in comfy["free_pins"][1]) else []),
                 *(["pressure"] if comfy["pressure"] else ["no_pressure"]),
                 *(["windows_swap_unknown"] if case["windows"] and case["swap_percent"] is None else []))

    def test_pin_gates_match_comfyui(self) -> None:
        self.run_property("pin gates", pin_cases(), 800, self.check_gates, ("budget_passed", "budget_refused", "budget_evicted", "registrations_passed",
                                   "registrations_refused", "registrations_evicted", "active_tier", "pressure",
                                   "no_pressure", "windows_swap_unknown"))

    def test_ladders_by_hand(self) -> None:
        """The ladders, rung by rung. 783545f6: three base rungs, (weights, patches) of the running
        prompt only when not loaded, and its active models only when evict_active too; registrations
        only unregister. v0.39: the -fast pair first where it can go, the active fast pins late;
        registrations destroy the -fast pair before they unregister the rest. Models: 0 (idle, not
        in the prompt), 1 (idle, in it), 2 (active, not in it), 3 (active, in it)."""
        ev: List[tuple] = []

        def free(i: int, size: float, subsets: List[str], reg: bool) -> float:
            ev.append((i, tuple(subsets), reg))
            return 0.0

        calc = self.calc
        models = [calc.PinModel(active=a, current_prompt=p) for a in (False, True) for p in (False, True)]
        calc.free_pins(GiB, models, free, evict_active=True, rules=self.rules)
        w, lw, fw = ("weights", "patches"), ("weights-loaded", "patches-loaded"), ("weights-fast", "patches-fast")
        if self.rules == "v0.39":
            want = [(0, fw, False), (0, w, False), (2, w, False), (0, lw, False), (2, lw, False), (1, fw, False),
                    (1, lw, False), (3, lw, False), (1, w, False), (2, fw, False), (3, fw, False), (3, w, False)]
        else:
            want = [(0, w, False), (2, w, False), (0, lw, False), (2, lw, False), (1, lw, False),
                    (3, lw, False), (1, w, False), (3, w, False)]
        self.assertEqual(ev, want)
        ev.clear()
        calc.free_registrations(GiB, models, free, maximum=8 * GiB, evict_active=False, rules=self.rules)
        if self.rules == "v0.39":
            self.assertEqual(ev, [(0, fw, False), (0, w + lw, True), (1, fw, False), (1, w + lw, True)])
        else:
            self.assertEqual(ev, [(0, w + lw, True), (1, w + lw, True)])


# ---- load_models_gpu ----

class LoadModule:
    """The nn.Module a patcher (and its clones) wraps."""

    def __init__(self, device: Any, loaded: int) -> None:
        self.device = device
        self.model_loaded_weight_memory = loaded


class LoadPatcher:
    """What load_models_gpu touches of a ModelPatcher (or ModelPatcherDynamic)."""

    def __init__(self, name: str, spec: Dict[str, Any], module: LoadModule, load_device: Any,
                 loads: List[Tuple[str, float]]) -> None:
        import torch
        self.name, self.size, self.model, self.loads = name, spec["size"], module, loads
        self.dynamic = spec["dynamic"]
        self.load_device = load_device
        self.offload_device = torch.device("cpu")
        self.parent = None
        self.patches: list = []

    def is_dynamic(self) -> bool:
        return self.dynamic

    def model_size(self) -> int:
        return self.size

    def loaded_size(self) -> int:
        return self.model.model_loaded_weight_memory

    def loaded_ram_size(self) -> int:
        return 0

    def current_loaded_device(self) -> Any:
        return self.model.device

    def model_patches_models(self) -> list:
        return self.patches

    def model_patches_to(self, device: Any) -> None:
        pass

    def model_dtype(self) -> Any:
        import torch
        return torch.float16

    def is_clone(self, other: Any) -> bool:
        return hasattr(other, "model") and self.model is other.model

    def detach(self, unpatch_all: bool = True) -> None:
        if unpatch_all:
            import torch
            self.model.model_loaded_weight_memory = 0
            self.model.device = torch.device("cpu")

    def partially_load(self, device_to: Any, extra_memory: float = 0, force_patch_weights: bool = False) -> int:
        self.loads.append((self.name, extra_memory))
        return 0


VRAM_STATE_NAMES = {"disabled": "DISABLED", "no": "NO_VRAM", "low": "LOW_VRAM", "normal": "NORMAL_VRAM",
                    "high": "HIGH_VRAM", "shared": "SHARED"}


class TestLoadModelsGpu(Conformance783545f6):
    """load_models_gpu: its order, its free_memory calls, each model's budget, the list it leaves."""

    def comfy_side(self, case: Case) -> Dict[str, Any]:
        import torch
        mm = self.mm
        dev = {0: torch.device("cuda", 0), 1: torch.device("cuda", 1), -1: torch.device("cpu")}
        free = {dev[0]: case["free"][0], dev[1]: case["free"][1], dev[-1]: 0}
        rel = {dev[0]: list(case["release"][0]), dev[1]: list(case["release"][1])}
        loads: List[Tuple[str, float]] = []
        frees: List[tuple] = []
        pool, holders, current, finalizers = [], [], [], []
        for k, m in enumerate(case["pool"]):
            module = LoadModule(dev[m["device"]] if m["loaded"] else torch.device("cpu"), m["loaded"])
            pool.append(LoadPatcher(f"m{k}", m, module, dev[m["device"]], loads))
        for k, m in enumerate(case["pool"]):
            pool[k].patches = [pool[j] for j in m["patches"]]
            if m["entry"] != "none":  # already in current_loaded_models: itself, or a clone of the same module
                p = pool[k]
                holder = p if m["entry"] == "self" else LoadPatcher(f"c{k}", m, p.model, p.load_device, [])
                holders.append(holder)
                lm = mm.LoadedModel(holder)
                lm.real_model = weakref.ref(p.model)
                lm.model_finalizer = weakref.finalize(p.model, lambda: None)
                current.append(lm)

        def get_free_memory(d: Any = None, torch_free_too: bool = False) -> Any:
            return (free[d], 0) if torch_free_too else free[d]

        def free_memory(memory_required: float, device: Any, keep_loaded: list = [], for_dynamic: bool = False,
                        pins_required: float = 0, ram_required: float = 0) -> list:
            frees.append((device.index, memory_required, for_dynamic, pins_required))
            free[device] += rel[device].pop(0) if rel[device] else 0
            return []

        with self.patched(current_loaded_models=current, get_free_memory=get_free_memory, free_memory=free_memory,
                          EXTRA_RESERVED_VRAM=case["reserve"], MIN_WEIGHT_MEMORY_RATIO=case["ratio"],
                          vram_state=getattr(mm.VRAMState, VRAM_STATE_NAMES[case["state"]]),
                          lowvram_available=case["lowvram_available"]):
            mm.load_models_gpu([pool[i] for i in case["request"]], memory_required=case["memory_required"],
                               minimum_memory_required=case["minimum"], force_full_load=case["force_full_load"])
            front = [lm.model.name for lm in mm.current_loaded_models]
            finalizers = [lm.model_finalizer for lm in mm.current_loaded_models]
        for f in finalizers + [lm.model_finalizer for lm in current]:
            if f is not None:
                f.detach()
        return {"frees": frees, "loads": loads, "front": front}

    def comem_side(self, case: Case, rules: str) -> Dict[str, Any]:
        calc = self.calc
        pool = case["pool"]
        adm = calc.admission(case["memory_required"], case["minimum"], case["reserve"])
        ids: List[int] = []
        for r in case["request"]:
            ids.append(r)
            ids.extend(pool[r]["patches"])
        order = [ids[k] for k in calc.load_order(ids, rules=rules)]
        models = [calc.Model(pool[k]["size"], pool[k]["loaded"], device=pool[k]["device"],
                             current_device=pool[k]["device"] if pool[k]["loaded"] else calc.CPU,
                             dynamic=pool[k]["dynamic"]) for k in order]
        needs, for_dynamic = calc.load_needs(models)
        free = {0: case["free"][0], 1: case["free"][1], -1: 0}
        rel = {d: list(case["release"][d]) for d in (0, 1)}
        frees = []
        for row in needs:
            if row.device != calc.CPU:
                frees.append((row.device, calc.free_target(row.need, adm.extra_mem), for_dynamic, row.pins))
                free[row.device] += rel[row.device].pop(0)
        for row in needs:
            if row.device != calc.CPU and calc.needs_second_pass(free[row.device], adm.minimum_memory_required):
                frees.append((row.device, adm.minimum_memory_required, for_dynamic, 0))
                free[row.device] += rel[row.device].pop(0)
        loads = []
        for k in order:
            m = pool[k]
            b = calc.lowvram_budget(free[m["device"]], m["loaded"], adm.minimum_memory_required,
                                    adm.minimum_inference, ratio=case["ratio"], vram_state=case["state"],
                                    load_device_cpu=m["device"] == calc.CPU,
                                    lowvram_available=case["lowvram_available"],
                                    force_full_load=case["force_full_load"], rules=rules)
            loads.append((f"m{k}", b.load_argument))
        return {"frees": frees, "loads": loads, "front": [f"m{k}" for k in reversed(order)]}

    def check(self, case: Case) -> None:
        comfy = self.comfy_side(case)
        for rules in self.compared:
            mine = self.comem_side(case, rules)
            self.assertEqual(comfy["frees"], mine["frees"], f"free_memory calls differ (rules={rules}) on {case!r}")
            self.assertEqual(comfy["loads"], mine["loads"], f"budgets or order differ (rules={rules}) on {case!r}")
            self.assertEqual(comfy["front"][:len(mine["front"])], mine["front"],
                             f"current_loaded_models' front differs (rules={rules}) on {case!r}")
        loads = [v for _, v in comfy["loads"]]
        req = case["request"]
        self.tag(*(["second_pass"] if comfy["frees"][len({f[0] for f in comfy["frees"]}):] else []),
                 *(["duplicates"] if len(set(req)) < len(req) else []),
                 *(["patch_models"] if any(case["pool"][r]["patches"] for r in req) else []),
                 *(["free_for_dynamic"] if any(f[2] for f in comfy["frees"]) else []),
                 *(["pins_required"] if any(f[3] for f in comfy["frees"]) else []),
                 *(["two_devices"] if len({f[0] for f in comfy["frees"]}) > 1 else []),
                 *(["budget_full"] if 1e32 in loads else []), *(["budget_nothing"] if 0.1 in loads else []),
                 *(["budget_negative"] if any(v < 0 for v in loads) else []),
                 *(["budget_below_128MiB"] if any(0.1 < v < 128 * MiB for v in loads) else []),
                 *(["budget_bytes"] if any(v not in (0.1, 1e32) for v in loads) else []))

    def test_load_models_gpu_matches_comfyui(self) -> None:
        self.run_property("load_models_gpu", load_cases(), 800, self.check, ("second_pass", "duplicates", "patch_models", "free_for_dynamic",
                                         "pins_required", "two_devices", "budget_full", "budget_nothing",
                                         "budget_negative", "budget_below_128MiB", "budget_bytes"))


# ---- import-time figures: reserve, MAX_PINNED_MEMORY, pinned_hostbuf_size ----

WINDOWS_VER = ("10", "10.0.19045", "SP0", "Multiprocessor Free")


class _VirtualMemory:
    def __init__(self, total: int) -> None:
        self.total = total
        self.available = total // 2


class TestImportTimeFigures(Conformance783545f6):
    """EXTRA_RESERVED_VRAM / minimum_inference_memory, MAX_PINNED_MEMORY and pinned_hostbuf_size."""

    def setUp(self) -> None:
        super().setUp()
        with open(self.mm.__file__, encoding="utf-8") as f:
            source = f.read()
        self.code = compile(source, self.mm.__file__, "exec")
        # ComfyUI's own statement that fixes MAX_PINNED_MEMORY at import (found, not copied).
        tree = ast.parse(source)
        block = [n for n in tree.body if isinstance(n, ast.If) and "disable_pinned_memory" in ast.unparse(n.test)]
        self.assertEqual(len(block), 1, "783545f6 fixes MAX_PINNED_MEMORY in one top-level if")
        self.pin_code = compile(ast.Module(body=block, type_ignores=[]), self.mm.__file__, "exec")

    def check_reserve(self, case: Case) -> None:
        import platform
        import psutil
        from comfy.cli_args import args
        total = int(case["total_mib"] * MiB)
        saved = (platform.win32_ver, psutil.virtual_memory, args.reserve_vram)
        platform.win32_ver = (lambda *a, **k: WINDOWS_VER) if case["windows"] else (lambda *a, **k: ("",) * 4)
        psutil.virtual_memory = lambda: _VirtualMemory(total)
        args.reserve_vram = case["reserve_vram"]
        sysmem = sys.modules.get("comfy.system_memory")  # v0.39: this machine's own cgroup limit stays out
        limits = self.patched(sysmem, _limited=lambda host_total: []) if sysmem is not None \
            else contextlib.nullcontext()
        try:
            fresh = types.ModuleType("comfy_model_management_conformance_783545f6")
            fresh.__file__ = self.mm.__file__
            with limits:
                exec(self.code, fresh.__dict__)
            self.assertEqual((fresh.WINDOWS, fresh.total_vram), (case["windows"], total / MiB))
            comfy = (fresh.extra_reserved_memory(), fresh.minimum_inference_memory())
        finally:
            platform.win32_ver, psutil.virtual_memory, args.reserve_vram = saved
        r = self.calc.reserve(case["windows"], total / MiB, case["reserve_vram"])  # one rule in every version
        for name, a, b in zip(("extra_reserved_memory", "minimum_inference_memory"), comfy, r):
            self.assertEqual((float(a), math.copysign(1, a)), (b, math.copysign(1, b)), f"{name} on {case!r}")
        self.tag("reserve_windows" if case["windows"] else "reserve_linux",
                 *(["reserve_vram"] if case["reserve_vram"] is not None else []),
                 *(["windows_over_15GiB"] if case["windows"] and total / MiB > 15 * 1024 else []))

    def test_reserve_matches_comfyui(self) -> None:
        self.run_property("extra_reserved_memory", reserve_cases(), 300, self.check_reserve,
                          ("reserve_windows", "reserve_linux", "reserve_vram", "windows_over_15GiB"))

    def check_ceiling(self, case: Case) -> None:
        mm = self.mm
        ns = dict(vars(mm))
        limit = 8 * GiB if case["cgroup"] else None  # v0.39 asks comfy.system_memory whether a limit applies
        comfy_ns = types.SimpleNamespace(system_memory=types.SimpleNamespace(cgroup_memory_limit=lambda: limit))
        ns.update(comfy=comfy_ns,
                  args=types.SimpleNamespace(disable_pinned_memory=case["disabled"], high_ram=case["high_ram"]),
                  is_nvidia=lambda: case["vendor"] == "nvidia", is_amd=lambda: case["vendor"] == "amd",
                  WINDOWS=case["windows"], get_total_memory=lambda dev=None, torch_total_too=False: case["ram"],
                  get_disk_swap_total=lambda: case["swap"], MAX_PINNED_MEMORY=-1,
                  logging=types.SimpleNamespace(info=lambda *a, **k: None))
        exec(self.pin_code, ns)
        comfy_max = ns["MAX_PINNED_MEMORY"]
        hostbuf = types.FunctionType(mm.pinned_hostbuf_size.__code__, ns)(case["size"])
        enabled = not case["disabled"] and case["vendor"] != "other"
        mine = self.calc.max_pinned(case["ram"], case["swap"], case["windows"], enabled,
                                    cgroup_limited=case["cgroup"], rules=self.rules)
        self.assertEqual((float(comfy_max), math.copysign(1, comfy_max)), (mine, math.copysign(1, mine)),
                         f"MAX_PINNED_MEMORY on {case!r}")
        self.assertEqual(hostbuf, self.calc.pinned_hostbuf_size(case["size"], mine, case["high_ram"]),
                         f"pinned_hostbuf_size on {case!r}")
        big_swap = not case["windows"] and enabled and case["swap"] > 0 and \
            comfy_max != max(case["ram"] * 0.40, min(case["ram"] * 0.90, case["ram"] - 4 * GiB,
                                                     case["ram"] - 16 * GiB))
        self.tag("pin_disabled" if not enabled else "pin_windows" if case["windows"] else "pin_linux",
                 *(["swap_decides"] if big_swap else []),
                 *(["cgroup_limited"] if case["cgroup"] and enabled and not case["windows"] else []))

    def test_max_pinned_matches_comfyui(self) -> None:
        self.run_property("MAX_PINNED_MEMORY", ceiling_cases(), 600, self.check_ceiling,
                          ("pin_disabled", "pin_windows", "pin_linux", "swap_decides", "cgroup_limited"))


if __name__ == "__main__":
    unittest.main()
