"""ComfyUI's memory rules, evaluated by libcomem: what ``comem calc`` prints, without a process per call.

Each function here is one rule of ComfyUI's model manager as comem computes it
(``src/arith/``; ``include/comem/calc.h``), with the same double-precision
results, so that a caller (or the conformance test) can compare comem against
ComfyUI case by case::

    from comem import calc

    r = calc.reserve(windows=True, total_vram_mib=24576)        # 734003200.0, 1592996659.2
    t = calc.admission(1 << 30, reserve=r.reserve)
    b = calc.lowvram_budget(free=6 << 30, loaded=0, mmr=t.minimum_memory_required,
                            inference=t.minimum_inference)
    res = calc.free_memory(models, 8 << 30, free_now=read, partially_unload=part, detach=drop)

Where ComfyUI's versions differ, ``rules`` picks one: ``"current"`` (the
default: ``model_management.py`` @02b2b388, what comem decides by) or
``"a125cd84"`` (the 2025-10-12 snapshot). ``docs/conformance.md`` lists every
rule whose result differs between them.
"""

from __future__ import annotations

import ctypes
from ctypes import byref, c_double, c_int, c_int32, c_int64, c_size_t
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from . import _lib, errors
from ._lib import CALC_DETACH_FN as _DETACH_FN, CALC_FREE_FN as _FREE_FN, CALC_PARTIAL_FN as _PARTIAL_FN, \
    CalcModel as _Model, CalcUnload as _Unload
from .errors import check

_L = _lib.lib

RULES: Dict[str, int] = {"current": 0, "a125cd84": 1}
"""The ComfyUI versions whose rules can be chosen, by name."""

VRAM_STATES: Dict[str, int] = {"disabled": 0, "no": 1, "low": 2, "normal": 3, "high": 4, "shared": 5}
"""ComfyUI's VRAMState names (lower case, without ``_VRAM``) and their values."""

CPU = -1
"""The device number of the host CPU."""

FULL_LOAD_SENTINEL = 1e32
"""What LoadedModel.model_load passes on for a budget of 0 (load everything)."""

_DYNAMIC, _KEEP, _DEAD = 1, 2, 4
_LOAD_CPU, _NO_LOWVRAM, _FORCE_FULL = 1, 2, 4
_DEVICE_NONE, _FOR_DYNAMIC, _NO_SMART = 1, 2, 4
_KINDS = {0: "full", 1: "nothing", 2: "bytes"}


def _rules(rules: str) -> int:
    try:
        return RULES[rules]
    except KeyError:
        raise ValueError(f"rules must be one of {', '.join(RULES)}, not {rules!r}") from None


def _state(state: str) -> int:
    try:
        return VRAM_STATES[state]
    except KeyError:
        raise ValueError(f"vram_state must be one of {', '.join(VRAM_STATES)}, not {state!r}") from None


class Model(NamedTuple):
    """One entry of ``current_loaded_models`` (free_memory) or one model being loaded (load_needs)."""
    size: int
    """model_size(), bytes."""
    loaded: int = 0
    """loaded_size(): bytes resident on its device."""
    refs: int = 0
    """sys.getrefcount(patcher), or any count that orders the same way (fewer goes first)."""
    device: int = 0
    """LoadedModel.device, its load device (``CPU`` for the host)."""
    current_device: int = CPU
    """current_loaded_device() (load_needs only): where its weights live now."""
    dynamic: bool = False
    """Paged by a pager (ModelPatcherDynamic)."""
    keep: bool = False
    """In free_memory's ``keep_loaded``."""
    dead: bool = False
    """LoadedModel.is_dead(): never a candidate."""


class Reserve(NamedTuple):
    """EXTRA_RESERVED_VRAM and minimum_inference_memory(), bytes (doubles, as ComfyUI holds them)."""
    reserve: float
    minimum_inference: float


class Admission(NamedTuple):
    """load_models_gpu's targets, bytes."""
    minimum_inference: float
    extra_mem: float
    minimum_memory_required: float


class Budget(NamedTuple):
    """A lowvram budget: ``kind`` is ``"full"`` (0), ``"nothing"`` (0.1) or ``"bytes"``; ``value`` ComfyUI's figure."""
    kind: str
    value: float

    @property
    def load_argument(self) -> float:
        """What LoadedModel.model_load hands partially_load: 1e32 for a full load, else the budget."""
        return FULL_LOAD_SENTINEL if self.value == 0 else self.value


class Unload(NamedTuple):
    """One model_unload free_memory made."""
    entry: int
    """Index into the models list."""
    asked: float
    """memory_to_free (1e32 with smart memory off)."""
    detached: bool
    """True: fully unloaded, the entry leaves the list; False: partially unloaded, it stays."""
    tried_partial: bool
    """A partial unload ran first and fell short."""
    partial_freed: float
    """What the partial unload returned (0 when none ran)."""


class FreeResult(NamedTuple):
    """What free_memory did."""
    order: List[int]
    """Every candidate, in eviction order (indices into the models list)."""
    unloads: List[Unload]
    """The unloads, in the order they were made."""
    required_after: float
    """memory_required after the dynamic reductions."""

    @property
    def unloaded(self) -> List[int]:
        """The fully unloaded entries, highest index first: the list free_memory returns."""
        return sorted((u.entry for u in self.unloads if u.detached), reverse=True)


class LoadNeed(NamedTuple):
    """load_models_gpu's sums for one device."""
    device: int
    need: int
    """Σ model_memory_required(device): offloaded part if already there, else the full size."""
    pins: int
    """Σ model_size() of the non-dynamic models."""


def reserve(windows: bool = False, total_vram_mib: float = 0.0, reserve_vram_gb: Optional[float] = None) -> Reserve:
    """EXTRA_RESERVED_VRAM and minimum_inference_memory() as ComfyUI fixes them at import.

    ``windows``: platform.win32_ver() is non-empty; ``total_vram_mib``: total VRAM in MiB as
    ComfyUI holds it; ``reserve_vram_gb``: ``--reserve-vram`` (None when not given).
    """
    r, m = c_double(), c_double()
    given = reserve_vram_gb is not None
    check(_L.comem_calc_reserve(1 if windows else 0, float(total_vram_mib), 1 if given else 0,
                                float(reserve_vram_gb) if given else 0.0, byref(r), byref(m)), "comem_calc_reserve")
    return Reserve(r.value, m.value)


def admission(memory_required: float = 0, minimum_memory_required: Optional[float] = None,
              reserve: float = 400 * 1024 * 1024) -> Admission:
    """load_models_gpu's minimum_inference, extra_mem and minimum_memory_required (after the reserve)."""
    i, e, m = c_double(), c_double(), c_double()
    given = minimum_memory_required is not None
    check(_L.comem_calc_admission(float(memory_required), 1 if given else 0,
                                  float(minimum_memory_required) if given else 0.0, float(reserve), byref(i),
                                  byref(e), byref(m)), "comem_calc_admission")
    return Admission(i.value, e.value, m.value)


def free_target(need: int, extra_mem: float) -> float:
    """The first free_memory target for one device: need * 1.1 + extra_mem."""
    return _L.comem_calc_free_target(float(need), float(extra_mem))


def needs_second_pass(free_now: float, minimum_memory_required: float) -> bool:
    """True when load_models_gpu frees again, to minimum_memory_required (free below it)."""
    return bool(_L.comem_calc_needs_second_pass(float(free_now), float(minimum_memory_required)))


def _models(models: Sequence[Model]) -> "ctypes.Array[_Model]":
    arr = (_Model * max(1, len(models)))()
    for i, m in enumerate(models):
        if not isinstance(m, Model):
            raise TypeError(f"models[{i}] must be a comem.calc.Model, not {type(m).__name__}")
        size, loaded = errors.size(m.size, f"models[{i}].size"), errors.size(m.loaded, f"models[{i}].loaded")
        if loaded > size:
            raise ValueError(f"models[{i}]: loaded ({loaded}) exceeds size ({size})")
        arr[i] = _Model(size, loaded, int(m.refs), int(m.device), int(m.current_device),
                        (_DYNAMIC if m.dynamic else 0) | (_KEEP if m.keep else 0) | (_DEAD if m.dead else 0), 0)
    return arr


def load_needs(models: Sequence[Model]) -> Tuple[List[LoadNeed], bool]:
    """load_models_gpu's per-device sums (first-seen order) and whether every model is dynamic."""
    arr = _models(models)
    cap = max(1, len(models))
    devs, need, pins = (c_int32 * cap)(), (c_int64 * cap)(), (c_int64 * cap)()
    rows, all_dyn = c_size_t(), c_int()
    check(_L.comem_calc_load_needs(arr, len(models), devs, need, pins, cap, byref(rows), byref(all_dyn)),
          "comem_calc_load_needs")
    return [LoadNeed(devs[r], need[r], pins[r]) for r in range(rows.value)], bool(all_dyn.value)


def lowvram_budget(free: float, loaded: float, mmr: float, inference: float, ratio: float = 0.0,
                   vram_state: str = "normal", load_device_cpu: bool = False, lowvram_available: bool = True,
                   force_full_load: bool = False, rules: str = "current") -> Budget:
    """The lowvram budget load_models_gpu hands one model.

    ``free``: get_free_memory(load device); ``loaded``: the model's resident bytes; ``mmr`` and
    ``inference`` as :func:`admission` gives them; ``ratio``: MIN_WEIGHT_MEMORY_RATIO.
    """
    flags = (_LOAD_CPU if load_device_cpu else 0) | (0 if lowvram_available else _NO_LOWVRAM) | \
        (_FORCE_FULL if force_full_load else 0)
    kind, value = c_int(), c_double()
    check(_L.comem_calc_lowvram_budget(_rules(rules), _state(vram_state), flags, float(free), float(loaded),
                                       float(mmr), float(inference), float(ratio), byref(kind), byref(value)),
          "comem_calc_lowvram_budget")
    return Budget(_KINDS[kind.value], value.value)


def free_memory(models: Sequence[Model], memory_required: float, device: Optional[int] = 0, *,
                free_now: Optional[Callable[[], float]] = None,
                partially_unload: Optional[Callable[[int, float], float]] = None,
                detach: Optional[Callable[[int], None]] = None, smart_memory: bool = True, for_dynamic: bool = False,
                rules: str = "current") -> FreeResult:
    """free_memory(memory_required, device, keep_loaded) over ``models`` (index 0 most recently loaded).

    ``device`` None is ComfyUI's device=None. The callbacks play ComfyUI's part:
    ``free_now()`` is get_free_memory(device), re-read before each victim;
    ``partially_unload(index, to_free)`` returns the bytes it freed; ``detach(index)``
    unloads the whole model. An exception raised by a callback stops nothing inside the
    library (it sees 0) but is raised again here once the call returns.
    """
    arr = _models(models)
    n = len(models)
    raised: List[BaseException] = []

    def guard(fn: Callable, fallback):
        def call(*args):
            if raised:
                return fallback
            try:
                return fn(*args)
            except BaseException as e:  # re-raised below: a ctypes callback cannot raise
                raised.append(e)
                return fallback
        return call

    f_cb = _FREE_FN(guard(lambda _u: float(free_now()), 0.0)) if free_now else _FREE_FN()
    p_cb = _PARTIAL_FN(guard(lambda _u, i, t: float(partially_unload(int(i), t)), 0.0)) if partially_unload \
        else _PARTIAL_FN()
    d_cb = _DETACH_FN(guard(lambda _u, i: detach(int(i)), None)) if detach else _DETACH_FN()
    flags = (_DEVICE_NONE if device is None else 0) | (_FOR_DYNAMIC if for_dynamic else 0) | \
        (0 if smart_memory else _NO_SMART)
    cap = max(1, n)
    order, unloads = (c_size_t * cap)(), (_Unload * cap)()
    n_order, n_unloads, req_after = c_size_t(), c_size_t(), c_double()
    rc = _L.comem_calc_free_memory(_rules(rules), float(memory_required), 0 if device is None else int(device), flags,
                                   arr, n, f_cb, p_cb, d_cb, None, order, byref(n_order), unloads, byref(n_unloads),
                                   byref(req_after))
    if raised:
        raise raised[0]
    check(rc, "comem_calc_free_memory", "" if rules == "current" or not for_dynamic else
          f"the {rules} rules have no for_dynamic")
    return FreeResult([order[k] for k in range(n_order.value)],
                      [Unload(u.entry, u.asked, bool(u.detached), bool(u.tried_partial), u.partial_freed)
                       for u in (unloads[k] for k in range(n_unloads.value))], req_after.value)


def should_empty_cache(unloaded_any: bool, free_total: float, free_torch: float, vram_state: str = "normal",
                       device_none: bool = False) -> bool:
    """free_memory's closing soft_empty_cache decision."""
    return bool(_L.comem_calc_should_empty_cache(1 if unloaded_any else 0, 1 if device_none else 0,
                                                 _state(vram_state), float(free_total), float(free_torch)))
