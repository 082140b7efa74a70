"""Differential conformance: comem's rules against ComfyUI's own code, on random inputs (issue 15).

ComfyUI's real ``comfy.model_management`` (``COMFYUI_DIR``, the a125cd84 snapshot) and
comem's rules (through the binding, ``comem.calc``) are driven with the same randomly
generated inputs, and must agree exactly:

- ``free_memory``: which entries are unloaded, in which order, partially or fully, and
  whether the cache is emptied, for random model lists (sizes, loaded bytes, reference
  counts, list position, keep_loaded, dead entries, devices) and random free figures.
  ComfyUI's ``get_free_memory`` and its model objects are this test's fakes: a card whose
  free figure rises by what was unloaded (plus, in some cases, other processes' noise), and
  patchers whose partial unloads free whole chunks and may fall short.
- ``load_models_gpu``: the free_memory calls it makes (the first target and the second,
  minimum one) and the lowvram budget each model is loaded with, over random free figures,
  memory_required, minimum_memory_required, loaded sizes, VRAM states and reserves.
- ``extra_reserved_memory`` / ``minimum_inference_memory``: the module's own import-time
  code is executed afresh for each case with the platform (``platform.win32_ver``), the
  card's total and ``--reserve-vram`` set the way the module reads them.

Where comem follows a newer ComfyUI than the snapshot, comem runs with ``rules="a125cd84"``;
each such case also runs comem's current rules and checks that any difference is one that
docs/conformance.md lists.

``COMEM_CONFORMANCE_SEED`` fixes the seed (default: a fresh one, printed);
``COMEM_CONFORMANCE_CASES`` the cases per rule (default 3000). A mismatch prints the seed, the
case number and the smallest failing input the shrinker found.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import os
import random
import sys
import types
import unittest
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import support
from support import GiB, MiB

SEED = int(os.environ.get("COMEM_CONFORMANCE_SEED") or random.SystemRandom().randrange(1 << 32))
CASES = int(os.environ.get("COMEM_CONFORMANCE_CASES") or 3000)
SHRINK_BUDGET = 3000  # checks the shrinker may spend on one failure

Case = Dict[str, Any]
Check = Callable[[Case], Optional[str]]  # None: both sides agree (or the case is not valid input)


# ---- running and shrinking ----

def _simpler(value: Any) -> Iterator[Any]:
    """Smaller versions of one input value, most drastic first."""
    if isinstance(value, bool):
        if value:
            yield False
    elif isinstance(value, (int, float)):
        for v in (0, 1, GiB, MiB):
            if v != value and abs(v) < abs(value):
                yield type(value)(v) if isinstance(value, int) else float(v)
        if isinstance(value, float) and value != math.floor(value):
            yield float(math.floor(value))
        if isinstance(value, int) and abs(value) > MiB and value % MiB:
            yield value - value % MiB
        if abs(value) > 1:
            yield type(value)(value / 2) if isinstance(value, float) else value // 2
    elif isinstance(value, list):
        for i in range(len(value)):
            yield value[:i] + value[i + 1:]
        for i, item in enumerate(value):
            for s in _simpler(item):
                yield value[:i] + [s] + value[i + 1:]
    elif isinstance(value, dict):
        for k, v in value.items():
            for s in _simpler(v):
                yield {**value, k: s}


def _outcome(check: Check, case: Case) -> Tuple[Optional[str], Optional[type]]:
    """(why it fails or None, the exception type when it raised)."""
    try:
        return check(case), None
    except Exception as e:
        return f"raised {type(e).__name__}: {e}", type(e)


def shrink(case: Case, check: Check) -> Tuple[Case, str]:
    """Greedy shrinking: keep taking the first simpler input that still fails the same way, within a budget.

    A candidate that raises counts only when the original raised the same exception type: a
    simplification the fakes cannot run (an emptied list they index) is not a failure.
    """
    why, raised = _outcome(check, case)
    why = why or ""
    budget = SHRINK_BUDGET
    improved = True
    while improved and budget > 0:
        improved = False
        for candidate in _simpler(case):
            budget -= 1
            w, r = _outcome(check, candidate)
            if r is not raised:
                w = None
            if w:
                case, why, improved = candidate, w, True
                break
            if budget <= 0:
                break
    return case, why


def setUpModule() -> None:
    sys.stderr.write(f"\nconformance: seed {SEED} ({CASES} cases per rule); rerun with COMEM_CONFORMANCE_SEED={SEED}\n")


class ConformanceCase(unittest.TestCase):
    """Imports ComfyUI's model manager once; runs one rule over CASES random inputs."""

    mm: Any = None

    def setUp(self) -> None:
        support.need_torch(self)
        support.need_comfyui(self)
        type(self).mm = support.import_comfy()
        from comem import calc
        self.calc = calc
        logging.disable(logging.WARNING)  # ComfyUI's leak warnings for the dead entries this test makes
        self.addCleanup(logging.disable, logging.NOTSET)

    def need_snapshot_interfaces(self) -> None:
        """The fakes speak a125cd84's model manager; a newer one (free_memory with for_dynamic) needs more."""
        import inspect
        if "for_dynamic" in inspect.signature(self.mm.free_memory).parameters:
            self.skipTest("COMFYUI_DIR holds a newer ComfyUI than a125cd84 (free_memory takes for_dynamic): "
                          "this test's fakes speak the snapshot's interfaces; test_conformance_783545f6.py "
                          "compares comem's current rules with that ComfyUI")

    def run_rule(self, name: str, generate: Callable[[random.Random], Case], check: Check,
                 must_see: Tuple[str, ...] = ()) -> None:
        """CASES cases of one rule; then, with enough cases, each situation in must_see occurred."""
        rng = random.Random(f"{SEED}:{name}")
        self.seen: collections.Counter = collections.Counter()
        for i in range(CASES):
            case = generate(rng)
            self.tagging = True
            why, _ = _outcome(check, case)
            self.tagging = False
            if why:
                small, small_why = shrink(case, check)
                self.fail(f"{name}: comem and ComfyUI differ on case {i} of seed {SEED} "
                          f"(rerun: COMEM_CONFORMANCE_SEED={SEED})\n"
                          f"first failing input: {case!r}\n  {why}\n"
                          f"smallest failing input found: {small!r}\n  {small_why}")
        seen = ", ".join(f"{k} {v}" for k, v in sorted(self.seen.items()))
        sys.stderr.write(f"conformance: {name}: {CASES} random cases agree (seed {SEED}); among them: {seen}\n")
        if CASES >= 1000:
            missing = [t for t in must_see if not self.seen[t]]
            self.assertFalse(missing, f"{name}: no case of {missing} in {CASES} cases: the generator lost its reach")

    tagging = False

    def tag(self, *names: str) -> None:
        """Counts situations a case reached (only for the generated cases, not while shrinking)."""
        if self.tagging:
            self.seen.update(names)

    @contextlib.contextmanager
    def patched(self, **names: Any) -> Iterator[None]:
        """Sets module globals of comfy.model_management for the block, as the module would hold them."""
        mm = self.mm
        saved = {k: getattr(mm, k) for k in names}
        try:
            for k, v in names.items():
                setattr(mm, k, v)
            yield
        finally:
            for k, v in saved.items():
                setattr(mm, k, v)


# ---- free_memory ----

class _Real:
    """The nn.Module stand-in a patcher's .model is (weak-referenceable, as a module is)."""


class FreeCard:
    """The card both sides measure: free = base + what was unloaded (+ noise, other processes)."""

    def __init__(self, case: Case) -> None:
        self.case = case
        self.freed = 0
        self.reads = 0
        self.loaded = [m["loaded"] for m in case["models"]]
        self.events: List[tuple] = []

    def peek(self) -> float:
        noise = self.case["noise"]
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


class FakePatcher:
    """What free_memory touches of a ModelPatcher, answering from the FreeCard."""

    def __init__(self, card: FreeCard, i: int, device: Any) -> None:
        self.card, self.i = card, i
        self.load_device = device
        self.offload_device = "offload"  # only handed back to partially_unload
        self.parent = None
        self.model = _Real()

    def model_size(self) -> int:
        return self.card.case["models"][self.i]["size"]

    def loaded_size(self) -> int:
        return self.card.loaded[self.i]

    def partially_unload(self, device_to: Any, memory_to_free: float, force_patch_weights: bool = False) -> int:
        return self.card.partial(self.i, memory_to_free)

    def detach(self, unpatch_all: bool = True) -> None:
        self.card.detach(self.i)


def gen_free_case(rng: random.Random) -> Case:
    sizes = [rng.choice([300 * MiB, 2 * GiB, 6 * GiB]) for _ in range(3)]  # a few shared sizes: ties
    n = rng.randint(0, 7)
    models = []
    for _ in range(n):
        size = rng.choice(sizes) if rng.random() < 0.5 else rng.randint(1, 24 * GiB)
        loaded = rng.choice([size, size, 0, rng.randint(0, size), size - rng.choice(sizes) % size])
        models.append({
            "size": size, "loaded": loaded, "refs": rng.choice([0, 0, 1, 2, 3]),
            "device": 0 if rng.random() < 0.85 else 1,
            "keep": rng.random() < 0.1, "dead": rng.random() < 0.02,
            "chunk": rng.choice([1, 4096, 64 * MiB, 300 * MiB, rng.randint(1, 2 * GiB)]),
            "stuck": 0 if rng.random() < 0.7 else rng.randint(0, loaded),
        })
    free = rng.choice([0, rng.randint(0, 8 * GiB), rng.randint(0, 48 * GiB)])
    resident = sum(m["loaded"] for m in models)
    required = rng.choice([
        free + rng.randint(0, resident + 1),        # some eviction
        free + rng.randint(0, 2 * GiB) + 0.4,       # a double target, as load_models_gpu passes
        float(free),                                 # exactly covered: a to_free of 0
        rng.randint(0, free + 1),                   # nothing to do
        free + resident + rng.randint(0, GiB),      # more than everything
    ])
    noise = [] if rng.random() < 0.8 else [rng.randint(-GiB, GiB) for _ in range(rng.randint(1, 4))]
    return {"models": models, "free": free, "required": required, "noise": noise,
            "smart": rng.random() < 0.85, "high_vram": rng.random() < 0.2,
            "torch_free": rng.choice([0, rng.randint(0, 4 * GiB), None])}


def _ref_decides(case: Case) -> bool:
    """Two candidates with the same offloaded bytes but different reference counts."""
    seen: Dict[int, int] = {}
    for m in case["models"]:
        if m["device"] == 0 and not m["keep"] and not m["dead"]:
            off = m["size"] - m["loaded"]
            if off in seen and seen[off] != m["refs"]:
                return True
            seen.setdefault(off, m["refs"])
    return False


class TestFreeMemory(ConformanceCase):
    """free_memory's victims, their order, partial versus full unloads and the cache flush."""

    def comfy_side(self, case: Case) -> Dict[str, Any]:
        import torch
        mm = self.mm
        card = FreeCard(case)
        dev0 = torch.device("cuda", 0)
        patchers, extra_refs, entries, alive = [], [], [], []
        p = None
        for i, m in enumerate(case["models"]):
            p = FakePatcher(card, i, torch.device("cuda", m["device"]))
            lm = mm.LoadedModel(p)
            lm.real_model = weakref.ref(p.model)
            lm.model_finalizer = weakref.finalize(p.model, lambda: None)
            alive.append(p.model)
            entries.append(lm)
            if m["dead"]:
                continue  # its patcher is collected at the end of this loop: is_dead() holds
            patchers.append(p)
            extra_refs.extend([p] * m["refs"])
        del p
        keep = [lm for lm, m in zip(entries, case["models"]) if m["keep"]]
        cache_flushes = []
        torch_free = case["torch_free"]

        def get_free_memory(dev: Any = None, torch_free_too: bool = False) -> Any:
            assert dev == dev0, dev
            if torch_free_too:
                total = card.peek()
                card.reads += 1
                return total, (total * 0.25 if torch_free is None else torch_free)
            return card.read()

        index = {id(lm): i for i, lm in enumerate(entries)}
        with self.patched(current_loaded_models=list(entries), get_free_memory=get_free_memory,
                          soft_empty_cache=lambda force=False: cache_flushes.append(1),
                          DISABLE_SMART_MEMORY=not case["smart"],
                          vram_state=mm.VRAMState.HIGH_VRAM if case["high_vram"] else mm.VRAMState.NORMAL_VRAM):
            unloaded = mm.free_memory(case["required"], dev0, keep_loaded=keep)
            remaining = [index[id(lm)] for lm in mm.current_loaded_models]
        for lm in entries:
            if lm.model_finalizer is not None:
                lm.model_finalizer.detach()
        del patchers, extra_refs, alive
        return {"events": card.events, "unloaded": [index[id(lm)] for lm in unloaded], "remaining": remaining,
                "flushes": len(cache_flushes)}

    def comem_side(self, case: Case, rules: str) -> Dict[str, Any]:
        calc = self.calc
        card = FreeCard(case)
        models = [calc.Model(m["size"], m["loaded"], refs=m["refs"], device=m["device"], keep=m["keep"],
                             dead=m["dead"]) for m in case["models"]]
        res = calc.free_memory(models, case["required"], 0, free_now=card.read, partially_unload=card.partial,
                               detach=card.detach, smart_memory=case["smart"], rules=rules)
        unloaded = res.unloaded
        flushes = 1 if any(m["dead"] for m in case["models"]) else 0  # cleanup_models_gc's own flush
        total = card.peek()
        torch_free = total * 0.25 if case["torch_free"] is None else case["torch_free"]
        flushes += calc.should_empty_cache(bool(unloaded), total, torch_free,
                                           vram_state="high" if case["high_vram"] else "normal")
        return {"events": card.events, "unloaded": unloaded,
                "remaining": [i for i in range(len(models)) if i not in unloaded], "flushes": flushes,
                "zero_ask": any(u.asked == 0 for u in res.unloads)}

    def check(self, case: Case) -> Optional[str]:
        for m in case["models"]:
            if not (0 <= m["stuck"] <= m["loaded"] <= m["size"]) or m["chunk"] < 1 or m["refs"] < 0 \
                    or m["device"] not in (0, 1):
                return None
        comfy = self.comfy_side(case)
        mine = self.comem_side(case, "a125cd84")
        ev = comfy["events"]
        self.tag(*(["partial"] if any(e[0] == "partial" and e[3] >= e[2] for e in ev) else []),
                 *(["partial_fell_short"] if any(e[0] == "partial" and e[3] < e[2] for e in ev) else []),
                 *(["detach"] if any(e[0] == "detach" for e in ev) else []),
                 *(["zero_ask"] if mine["zero_ask"] else []), *(["flush"] if comfy["flushes"] else []),
                 *(["dead"] if any(m["dead"] for m in case["models"]) else []),
                 *(["keep"] if any(m["keep"] for m in case["models"]) else []),
                 *(["smart_off"] if not case["smart"] else []), *(["noise"] if case["noise"] else []),
                 *(["ref_tie_break"] if _ref_decides(case) else []))
        for key in ("events", "unloaded", "remaining", "flushes"):
            if comfy[key] != mine[key]:
                return f"{key}: ComfyUI {comfy[key]!r}, comem {mine[key]!r}"
        # comem's own (current) rules may differ from the snapshot only where docs/conformance.md says.
        # (The current rules measure before every candidate; the snapshot stops measuring once covered.)
        current = self.comem_side(case, "current")
        unloads = [[e for e in side["events"] if e[0] != "read"] for side in (current, mine)]
        if unloads[0] != unloads[1] and not case["noise"] and not mine["zero_ask"]:
            return (f"comem's current and a125cd84 rules unload differently where docs/conformance.md lists no "
                    f"difference: current {unloads[0]!r}, a125cd84 {unloads[1]!r}")
        return None

    def test_free_memory_matches_comfyui(self) -> None:
        self.need_snapshot_interfaces()
        self.run_rule("free_memory", gen_free_case, self.check,
                      must_see=("partial", "partial_fell_short", "detach", "zero_ask", "flush", "dead", "keep",
                                "smart_off", "noise", "ref_tie_break"))

    def test_reference_counts_order_ties(self) -> None:
        """A hand case: equal offloaded bytes and sizes, so only references (then recency) order them."""
        self.need_snapshot_interfaces()
        case = {"models": [{"size": GiB, "loaded": GiB, "refs": r, "device": 0, "keep": False, "dead": False,
                            "chunk": GiB, "stuck": 0} for r in (2, 0, 1, 0)],
                "free": 0, "required": float(4 * GiB), "noise": [], "smart": True, "high_vram": False,
                "torch_free": 0}
        comfy = self.comfy_side(case)
        self.assertEqual([e[1] for e in comfy["events"] if e[0] == "detach"], [1, 3, 2, 0])
        self.assertIsNone(self.check(case))


# ---- load_models_gpu ----

class LoadModule:
    """The nn.Module a patcher (and its clones) wraps: where its weights live and how many are resident."""

    def __init__(self, device: Any, loaded: int) -> None:
        self.device = device
        self.model_loaded_weight_memory = loaded


class LoadPatcher:
    """What load_models_gpu touches of a ModelPatcher."""

    def __init__(self, name: str, size: int, module: LoadModule, load_device: Any, loads: Dict[str, float]) -> None:
        import torch
        self.name, self.size, self.model, self.loads = name, size, module, loads
        self.load_device = load_device
        self.offload_device = torch.device("cpu")
        self.parent = None

    def model_size(self) -> int:
        return self.size

    def loaded_size(self) -> int:
        return self.model.model_loaded_weight_memory

    def current_loaded_device(self) -> Any:
        return self.model.device

    def model_patches_models(self) -> list:
        return []

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
        self.loads[self.name] = extra_memory
        return 0


VRAM_STATE_NAMES = {"disabled": "DISABLED", "no": "NO_VRAM", "low": "LOW_VRAM", "normal": "NORMAL_VRAM",
                    "high": "HIGH_VRAM", "shared": "SHARED"}
STATES = list(VRAM_STATE_NAMES)


def gen_load_case(rng: random.Random) -> Case:
    models = []
    for k in range(rng.randint(1, 4)):
        device = rng.choice([0, 0, 0, 1, -1])
        size = rng.choice([300 * MiB, 2 * GiB, 6 * GiB, rng.randint(1, 24 * GiB)])
        loaded = rng.choice([0, 0, size, rng.randint(0, size)])
        models.append({"size": size, "loaded": loaded, "device": device,
                       "entry": rng.choice(["none", "self", "clone"]) if loaded else rng.choice(["none", "clone"])})
    reserve = rng.choice([400 * MiB, 600 * MiB, 700 * MiB, 0.0, rng.uniform(0, 4) * GiB])
    memory_required = rng.choice([0, rng.randint(0, 8 * GiB), rng.uniform(0, 8) * 1.3 * GiB + GiB])
    minimum = rng.choice([None, None, 0, rng.randint(0, 4 * GiB), rng.uniform(0, 4) * GiB])
    free = {d: rng.choice([0, rng.randint(0, 4 * GiB), rng.randint(0, 40 * GiB)]) for d in (0, 1)}
    release = {d: [rng.choice([0, 0, rng.randint(0, 8 * GiB)]) for _ in range(2)] for d in (0, 1)}
    case = {"models": models, "reserve": reserve, "memory_required": memory_required, "minimum": minimum,
            "free": free, "release": release, "ratio": rng.choice([0.0, 0.4]),
            "state": rng.choice(["normal"] * 4 + ["low"] * 2 + STATES), "lowvram_available": rng.random() < 0.9,
            "force_full_load": rng.random() < 0.1}
    # Put some cases exactly on a boundary: the second pass's strict <, and the budget's floors.
    from comem import calc
    adm = calc.admission(memory_required, minimum, reserve)
    pick = rng.random()
    d = rng.choice([0, 1])
    if pick < 0.15:
        case["free"][d] = adm.minimum_memory_required - release[d][0]
    elif pick < 0.3:
        m = rng.choice(models)
        target = adm.minimum_memory_required - m["loaded"] + rng.choice([0, 128 * MiB, m["loaded"], 0.1])
        case["free"][d] = target - release[d][0] - release[d][1]
    return case


class TestLoadModelsGpu(ConformanceCase):
    """load_models_gpu: what it asks free_memory for, and each model's lowvram budget."""

    def comfy_side(self, case: Case) -> Dict[str, Any]:
        import torch
        mm = self.mm
        dev = {0: torch.device("cuda", 0), 1: torch.device("cuda", 1), -1: torch.device("cpu")}
        free = {dev[0]: case["free"][0], dev[1]: case["free"][1]}
        release = {dev[0]: list(case["release"][0]), dev[1]: list(case["release"][1])}
        loads: Dict[str, float] = {}
        frees: List[Tuple[int, float]] = []
        patchers, current, finalizers = [], [], []
        for k, m in enumerate(case["models"]):
            where = dev[m["device"]] if m["loaded"] else torch.device("cpu")
            module = LoadModule(where, m["loaded"])
            p = LoadPatcher(f"m{k}", m["size"], module, dev[m["device"]], loads)
            patchers.append(p)
            if m["entry"] != "none":  # already in current_loaded_models: itself, or a clone of the same module
                holder = p if m["entry"] == "self" else LoadPatcher(f"c{k}", m["size"], module, dev[m["device"]], {})
                patchers.append(holder)
                lm = mm.LoadedModel(holder)
                lm.real_model = weakref.ref(module)
                lm.model_finalizer = weakref.finalize(module, lambda: None)
                current.append(lm)

        def get_free_memory(d: Any = None, torch_free_too: bool = False) -> Any:
            return (free[d], 0) if torch_free_too else free[d]

        def free_memory(memory_required: float, device: Any, keep_loaded: list = []) -> list:
            frees.append((device.index, memory_required))
            free[device] += release[device].pop(0) if release[device] else 0
            return []

        with self.patched(current_loaded_models=current, get_free_memory=get_free_memory, free_memory=free_memory,
                          EXTRA_RESERVED_VRAM=case["reserve"], MIN_WEIGHT_MEMORY_RATIO=case["ratio"],
                          vram_state=getattr(mm.VRAMState, VRAM_STATE_NAMES[case["state"]]),
                          lowvram_available=case["lowvram_available"]):
            mm.load_models_gpu([p for p in patchers if p.name.startswith("m")],
                               memory_required=case["memory_required"],
                               minimum_memory_required=case["minimum"], force_full_load=case["force_full_load"])
            for lm in mm.current_loaded_models:
                finalizers.append(lm.model_finalizer)
        for f in finalizers + [lm.model_finalizer for lm in current]:
            if f is not None:
                f.detach()
        return {"frees": sorted(frees, key=lambda x: x[0]), "loads": loads}

    def comem_side(self, case: Case, rules: str) -> Dict[str, Any]:
        calc = self.calc
        adm = calc.admission(case["memory_required"], case["minimum"], case["reserve"])
        models = [calc.Model(m["size"], m["loaded"], device=m["device"],
                             current_device=m["device"] if m["loaded"] else calc.CPU) for m in case["models"]]
        needs, _ = calc.load_needs(models)
        free = dict(case["free"])
        frees = []
        for row in needs:
            if row.device == calc.CPU:
                continue
            rel = list(case["release"][row.device])
            frees.append((row.device, calc.free_target(row.need, adm.extra_mem)))
            free[row.device] += rel.pop(0)
            if calc.needs_second_pass(free[row.device], adm.minimum_memory_required):
                frees.append((row.device, adm.minimum_memory_required))
                free[row.device] += rel.pop(0)
        loads = {}
        for k, m in enumerate(case["models"]):
            b = calc.lowvram_budget(free.get(m["device"], 0), m["loaded"], adm.minimum_memory_required,
                                    adm.minimum_inference, ratio=case["ratio"], vram_state=case["state"],
                                    load_device_cpu=m["device"] == calc.CPU,
                                    lowvram_available=case["lowvram_available"],
                                    force_full_load=case["force_full_load"], rules=rules)
            loads[f"m{k}"] = b.load_argument
        return {"frees": sorted(frees, key=lambda x: x[0]), "loads": loads}

    def check(self, case: Case) -> Optional[str]:
        for m in case["models"]:
            if not (0 <= m["loaded"] <= m["size"]) or m["device"] not in (0, 1, -1) or \
                    (m["entry"] == "self" and not m["loaded"]):
                return None
        comfy = self.comfy_side(case)
        mine = self.comem_side(case, "a125cd84")
        self.tag(*(["second_pass"] if len(comfy["frees"]) > len({d for d, _ in comfy["frees"]}) else []),
                 *(["budget_full"] if 1e32 in comfy["loads"].values() else []),
                 *(["budget_nothing"] if 0.1 in comfy["loads"].values() else []),
                 *(["budget_floor"] if any(comfy["loads"].get(f"m{k}") == 128 * MiB - m["loaded"]
                                           for k, m in enumerate(case["models"])) else []),
                 *(["budget_bytes"] if any(v not in (0.1, 1e32) for v in comfy["loads"].values()) else []),
                 *(["minimum_given"] if case["minimum"] is not None else []))
        for key in ("frees", "loads"):
            if comfy[key] != mine[key]:
                return f"{key}: ComfyUI {comfy[key]!r}, comem {mine[key]!r}"
        # The current rules differ from the snapshot's only by its 128 MiB floor and its 0.1 clamp.
        current = self.comem_side(case, "current")
        for k, m in enumerate(case["models"]):
            a, c = mine["loads"][f"m{k}"], current["loads"][f"m{k}"]
            if a != c:
                self.tag("versions_differ")
            if a != c and a not in (0.1, 128 * MiB - m["loaded"]):
                return (f"lowvram budget of m{k}: current rules {c!r}, a125cd84 {a!r}, a difference "
                        f"docs/conformance.md does not list")
        if current["frees"] != mine["frees"]:
            return f"the current rules ask differently: {current['frees']!r} vs {mine['frees']!r}"
        return None

    def test_load_models_gpu_matches_comfyui(self) -> None:
        self.need_snapshot_interfaces()
        self.run_rule("load_models_gpu", gen_load_case, self.check,
                      must_see=("second_pass", "budget_full", "budget_nothing", "budget_floor", "budget_bytes",
                                "minimum_given", "versions_differ"))


# ---- extra_reserved_memory / minimum_inference_memory ----

WINDOWS_VER = ("10", "10.0.19045", "SP0", "Multiprocessor Free")


def gen_reserve_case(rng: random.Random) -> Case:
    total_mib = rng.choice([15 * 1024, 15 * 1024 + rng.choice([-1, 1]) / MiB, rng.randint(1024, 196 * 1024),
                            rng.uniform(2048, 100 * 1024), 8192, 16376, 24576])
    reserve = rng.choice([None, None, 0.0, -0.0, 2.0, rng.uniform(0, 8), float(rng.randint(0, 16)),
                          rng.uniform(-1, 0)])
    return {"windows": rng.random() < 0.5, "total_bytes": int(total_mib * MiB), "reserve_vram": reserve}


class _VirtualMemory:
    def __init__(self, total: int) -> None:
        self.total = total
        self.available = total // 2
        self.used = total - self.available
        self.percent = 50.0


class TestReserve(ConformanceCase):
    """extra_reserved_memory() and minimum_inference_memory() across platform and --reserve-vram."""

    def setUp(self) -> None:
        super().setUp()
        with open(self.mm.__file__) as f:
            self.code = compile(f.read(), self.mm.__file__, "exec")

    def comfy_side(self, case: Case) -> Tuple[float, float]:
        """Runs model_management's import-time code afresh with this platform, card and flag."""
        import platform
        import psutil
        from comfy.cli_args import args
        saved = (platform.win32_ver, psutil.virtual_memory, args.reserve_vram)
        platform.win32_ver = (lambda *a, **k: WINDOWS_VER) if case["windows"] else (lambda *a, **k: ("", "", "", ""))
        psutil.virtual_memory = lambda: _VirtualMemory(case["total_bytes"])
        args.reserve_vram = case["reserve_vram"]
        try:
            fresh = types.ModuleType("comfy_model_management_conformance")
            fresh.__file__ = self.mm.__file__
            exec(self.code, fresh.__dict__)
            assert fresh.WINDOWS == case["windows"] and fresh.total_vram == case["total_bytes"] / (1024 * 1024)
            return fresh.extra_reserved_memory(), fresh.minimum_inference_memory()
        finally:
            platform.win32_ver, psutil.virtual_memory, args.reserve_vram = saved

    def check(self, case: Case) -> Optional[str]:
        if case["total_bytes"] < 0:
            return None
        comfy = self.comfy_side(case)
        self.tag("windows" if case["windows"] else "linux",
                 *(["windows_over_15GiB"] if case["windows"] and case["total_bytes"] > 15 * 1024 * MiB else []),
                 *(["reserve_vram"] if case["reserve_vram"] is not None else []))
        r = self.calc.reserve(case["windows"], case["total_bytes"] / (1024 * 1024), case["reserve_vram"])
        mine = (r.reserve, r.minimum_inference)
        for name, a, b in zip(("extra_reserved_memory", "minimum_inference_memory"), comfy, mine):
            if float(a) != b or math.copysign(1, a) != math.copysign(1, b):
                return f"{name}: ComfyUI {a!r}, comem {b!r}"
        return None

    def test_reserve_matches_comfyui(self) -> None:
        self.run_rule("extra_reserved_memory", gen_reserve_case, self.check,
                      must_see=("windows", "linux", "windows_over_15GiB", "reserve_vram"))


if __name__ == "__main__":
    unittest.main()
