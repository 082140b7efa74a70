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
default, what comem decides by: today the same as ``"783545f6"``, ComfyUI of
2026-08-22), ``"783545f6"``, ``"v0.39"`` (ComfyUI v0.39, October 2026: the
same load rules, its own pinned-RAM ones) or ``"a125cd84"`` (the 2025-10-12
snapshot). ``docs/conformance.md`` lists every rule whose result differs between
them. The a125cd84 snapshot has no pinned budget and refuses the pinned-RAM rules
(:func:`ensure_pin_budget` and the rest).
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_double, c_int, c_int32, c_int64, c_size_t, c_uint, c_uint32, c_uint64, c_void_p
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from . import _lib, errors
from ._lib import CALC_DETACH_FN as _DETACH_FN, CALC_FREE_FN as _FREE_FN, CALC_PARTIAL_FN as _PARTIAL_FN, \
    CalcModel as _Model, CalcUnload as _Unload
from .errors import check

_L = _lib.lib
_c = _lib.constant  # the library's values of calc.h's enums and flags (comem_constant): never copied here

RULES: Dict[str, int] = {"current": _c("COMFYUI_CURRENT"), "a125cd84": _c("COMFYUI_A125CD84"),
                         "783545f6": _c("COMFYUI_783545F6"), "v0.39": _c("COMFYUI_V039")}
"""The ComfyUI versions whose rules can be chosen, by name ("current" is what comem follows: 783545f6's)."""

# The rules calc.h added for 783545f6 (load order, the pin step, pinned RAM), declared here.
_PIN_FREE_FN = ctypes.CFUNCTYPE(c_double, c_void_p, c_size_t, c_double, c_uint, c_int)
_DP, _IP, _SP = POINTER(c_double), POINTER(c_int), POINTER(c_size_t)
for _name, _res, _args in (
        ("comem_calc_load_order", c_int, [c_int, POINTER(c_uint64), c_size_t, _SP, _SP]),
        ("comem_calc_free_memory_ensures_pins", c_int, [c_int, c_uint, c_double]),
        ("comem_calc_max_pinned_of", c_int, [c_int, c_int, c_int, c_double, c_int64, c_int, _DP]),
        ("comem_calc_pinned_hostbuf_size", c_int64, [c_double, c_double, c_int]),
        ("comem_calc_ensure_pin_budget", c_int, [c_int, c_uint, c_double, c_int64, c_double, c_double, c_double,
                                                 POINTER(c_uint32), c_size_t, _PIN_FREE_FN, c_void_p, _IP, _DP]),
        ("comem_calc_free_pins", c_int, [c_int, c_uint, c_double, POINTER(c_uint32), c_size_t, _PIN_FREE_FN,
                                         c_void_p, _DP]),
        ("comem_calc_free_registrations", c_int, [c_int, c_uint, c_double, c_double, POINTER(c_uint32), c_size_t,
                                                  _PIN_FREE_FN, c_void_p, _IP]),
        ("comem_calc_ensure_pin_registerable", c_int, [c_int, c_uint, c_double, c_double, c_double,
                                                       POINTER(c_uint32), c_size_t, _PIN_FREE_FN, c_void_p, _IP]),
        ("comem_calc_should_free_pins_for_ram_pressure", c_int, [c_double, c_int, c_double, c_int, c_double])):
    _fn = getattr(_L, _name)
    _fn.restype, _fn.argtypes = _res, _args

VRAM_STATES: Dict[str, int] = {name: _c("CALC_VRAM_" + name.upper())
                               for name in ("disabled", "no", "low", "normal", "high", "shared")}
"""ComfyUI's VRAMState names (lower case, without ``_VRAM``) and their values."""

CPU: int = _c("CALC_CPU")
"""The device number of the host CPU."""

FULL_LOAD_SENTINEL: float = float(_L.comem_calc_full_load_sentinel())
"""What LoadedModel.model_load passes on for a budget of 0 (load everything: its 1e32), as the library has it."""

NOTHING_BUDGET: float = float(_L.comem_calc_nothing_budget())
"""ComfyUI's budget for lowvram with nothing resident (its 0.1), as the library has it."""

DEFAULT_RESERVE: float = float(_c("RESERVE_DEFAULT"))
"""EXTRA_RESERVED_VRAM where nothing changes it (400 MiB): :func:`admission`'s default ``reserve``."""

# comem_calc_model.flags; comem_calc_lowvram_budget's and comem_calc_free_memory's flags; the budget kinds
_DYNAMIC, _KEEP, _DEAD = _c("CALC_DYNAMIC"), _c("CALC_KEEP"), _c("CALC_DEAD")
_LOAD_CPU, _NO_LOWVRAM, _FORCE_FULL = _c("CALC_LOAD_DEVICE_CPU"), _c("CALC_NO_LOWVRAM"), _c("CALC_FORCE_FULL_LOAD")
_DEVICE_NONE, _FOR_DYNAMIC, _NO_SMART = _c("CALC_DEVICE_NONE"), _c("CALC_FOR_DYNAMIC"), _c("CALC_NO_SMART_MEMORY")
_KINDS = {_c("CALC_BUDGET_FULL"): "full", _c("CALC_BUDGET_NOTHING"): "nothing", _c("CALC_BUDGET_BYTES"): "bytes"}


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
    ensures_pins: bool = False
    """After the unloads, free_memory calls ensure_pin_budget(pins_required) and then
    ensure_pin_registerable(pins_required) (783545f6: not for_dynamic and pins_required > 0)."""

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
              reserve: float = DEFAULT_RESERVE) -> Admission:
    """load_models_gpu's minimum_inference, extra_mem and minimum_memory_required (after the reserve).

    ``reserve``: EXTRA_RESERVED_VRAM in bytes (:func:`reserve` gives it; default :data:`DEFAULT_RESERVE`).
    """
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
                pins_required: float = 0, ram_required: float = 0, rules: str = "current") -> FreeResult:
    """free_memory(memory_required, device, keep_loaded, for_dynamic, pins_required, ram_required)
    over ``models`` (index 0 most recently loaded).

    ``pins_required`` decides :attr:`FreeResult.ensures_pins` (the pin gates themselves are
    :func:`ensure_pin_budget` and :func:`ensure_pin_registerable`, run over the list left
    after the unloads); ``ram_required`` has no effect (ComfyUI only logs it).

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
    del ram_required  # only logged by ComfyUI
    pins = _L.comem_calc_free_memory_ensures_pins(_rules(rules), flags, float(pins_required))
    check(min(pins, 0), "comem_calc_free_memory_ensures_pins")
    return FreeResult([order[k] for k in range(n_order.value)],
                      [Unload(u.entry, u.asked, bool(u.detached), bool(u.tried_partial), u.partial_freed)
                       for u in (unloads[k] for k in range(n_unloads.value))], req_after.value, bool(pins))


def should_empty_cache(unloaded_any: bool, free_total: float, free_torch: float, vram_state: str = "normal",
                       device_none: bool = False) -> bool:
    """free_memory's closing soft_empty_cache decision."""
    return bool(_L.comem_calc_should_empty_cache(1 if unloaded_any else 0, 1 if device_none else 0,
                                                 _state(vram_state), float(free_total), float(free_torch)))


def load_order(ids: Sequence[object], rules: str = "current") -> List[int]:
    """load_models_gpu's order: the indices into ``ids`` (the patchers in the order it visits them,
    each requested model followed by its model_patches_models(); equal ids are one patcher) of
    each distinct patcher's first appearance, in the order they are loaded (first-seen, reversed).

    ``ids`` may be any hashable objects. The a125cd84 rules raise (their order is a set's)."""
    keys: Dict[object, int] = {}
    raw = [keys.setdefault(x, len(keys)) for x in ids]
    n = len(raw)
    arr = (c_uint64 * max(1, n))(*raw)
    order, m = (c_size_t * max(1, n))(), c_size_t()
    check(_L.comem_calc_load_order(_rules(rules), arr, n, order, byref(m)), "comem_calc_load_order",
          "the a125cd84 snapshot loads in a set's (hash) order" if rules == "a125cd84" else "")
    return [order[k] for k in range(m.value)]


# ---- pinned host RAM (783545f6, v0.39) ----

PIN_SUBSETS: Tuple[Tuple[int, str], ...] = tuple(
    (_c("CALC_PINS_" + name.upper().replace("-", "_")), name)
    for name in ("weights", "patches", "weights-loaded", "patches-loaded", "weights-fast", "patches-fast"))
"""The pin subsets: calc.h's bit and ComfyUI's name, in ComfyUI's list order (the "-fast" pair: v0.39)."""

# calc.h's flags of a model the pin ladders see (COMEM_CALC_PIN_MODEL_*) and of the pin gates (COMEM_CALC_PIN_*)
_PIN_DYNAMIC, _PIN_ACTIVE = _c("CALC_PIN_MODEL_DYNAMIC"), _c("CALC_PIN_MODEL_ACTIVE")
_PIN_PROMPT = _c("CALC_PIN_MODEL_CURRENT_PROMPT")
_PG_HIGH_RAM, _PG_FAST_DISK = _c("CALC_PIN_HIGH_RAM"), _c("CALC_PIN_FAST_DISK")
_PG_LOADED, _PG_EVICT_ACTIVE = _c("CALC_PIN_LOADED"), _c("CALC_PIN_EVICT_ACTIVE")


class PinModel(NamedTuple):
    """One entry of current_loaded_models as the pin ladders see it (list order: index 0 most recent)."""
    dynamic: bool = True
    """A live dynamic patcher: the only kind with pins (others are skipped)."""
    active: bool = False
    """dynamic_pins[load_device]["active"]."""
    current_prompt: bool = False
    """dynamic_pins[load_device]["current_prompt"]."""


PinFree = Callable[[int, float, List[str], bool], float]
"""free(model index, size, subsets, registrations) -> bytes freed: partially_unload_ram(size,
subsets=...) or, with registrations, unregister_inactive_pins(size, subsets=...)."""


def max_pinned(ram: float, swap: int = 0, windows: bool = False, enabled: bool = True, *,
               cgroup_limited: bool = False, rules: str = "current") -> float:
    """MAX_PINNED_MEMORY: -1 when disabled; Windows 0.40 * ram; else
    max(0.40 ram, min(0.90 ram, ram - 4 GiB, ram + swap - 16 GiB)) (swap: disk swap, zram excluded).

    ``cgroup_limited``: a cgroup memory limit applies; under ``rules="v0.39"`` the swap then
    counts as 0 (783545f6 counts it all the same)."""
    out = c_double()
    rc = _L.comem_calc_max_pinned_of(_rules(rules), 1 if enabled else 0, 1 if windows else 0, float(ram), int(swap),
                                     1 if cgroup_limited else 0, byref(out))
    check(rc, "comem_calc_max_pinned_of", "the a125cd84 snapshot has no pinned budget" if rules == "a125cd84" else "")
    return out.value


def pinned_hostbuf_size(size: float, maximum: float, high_ram: bool = False) -> int:
    """pinned_hostbuf_size(size): max(0, int(min(size, MAX_PINNED_MEMORY) * 2)), int(size * 2) with --high-ram."""
    return _L.comem_calc_pinned_hostbuf_size(float(size), float(maximum), 1 if high_ram else 0)


def _pin_call(models: Sequence[PinModel], free: PinFree):
    n = len(models)
    flags = (c_uint32 * max(1, n))()
    for i, m in enumerate(models):
        if not isinstance(m, PinModel):
            raise TypeError(f"models[{i}] must be a comem.calc.PinModel, not {type(m).__name__}")
        flags[i] = (_PIN_DYNAMIC if m.dynamic else 0) | (_PIN_ACTIVE if m.active else 0) | \
            (_PIN_PROMPT if m.current_prompt else 0)
    raised: List[BaseException] = []

    def call(_u, i, size, subsets, unregister):
        if raised:
            return 0.0
        try:
            return float(free(int(i), size, [name for bit, name in PIN_SUBSETS if subsets & bit], bool(unregister)))
        except BaseException as e:  # re-raised by _pin_done: a ctypes callback cannot raise
            raised.append(e)
            return 0.0

    return flags, n, _PIN_FREE_FN(call), raised


def _pin_done(rc: int, raised: List[BaseException], call: str, rules: str) -> None:
    if raised:
        raise raised[0]
    check(rc, call, "the a125cd84 snapshot has no pinned budget" if rules == "a125cd84" else "")


def _gate_flags(high_ram: bool = False, fast_disk: bool = False, loaded: bool = False,
                evict_active: bool = False) -> int:
    return (_PG_HIGH_RAM if high_ram else 0) | (_PG_FAST_DISK if fast_disk else 0) | \
        (_PG_LOADED if loaded else 0) | (_PG_EVICT_ACTIVE if evict_active else 0)


class PinBudget(NamedTuple):
    """What ensure_pin_budget decided."""
    passed: bool
    shortfall: float
    """The shortfall it computed (0 with --high-ram, which decides before any figure)."""


def ensure_pin_budget(size: float, models: Sequence[PinModel], free: PinFree, *, available: float = 0,
                      ram_cache_headroom: int = 0, high_ram: bool = False, fast_disk: bool = False,
                      total_pinned: float = 0, maximum: float = -1, evict_active: bool = False, loaded: bool = False,
                      rules: str = "current") -> PinBudget:
    """ensure_pin_budget(size, evict_active, loaded): the RAM gate, evicting pins through ``free``
    (tier by tier, model by model, as free_pins does) when it is short.

    ``available``: psutil.virtual_memory().available (v0.39: comfy.system_memory's);
    ``ram_cache_headroom``: RAM_CACHE_HEADROOM; with ``fast_disk`` the shortfall is
    ``total_pinned + size - maximum`` (TOTAL_PINNED_MEMORY, MAX_PINNED_MEMORY) instead, under
    783545f6's rules only (v0.39 has no such branch)."""
    flags, n, cb, raised = _pin_call(models, free)
    ok, short = c_int(), c_double()
    rc = _L.comem_calc_ensure_pin_budget(_rules(rules), _gate_flags(high_ram, fast_disk, loaded, evict_active),
                                         float(size), int(ram_cache_headroom), float(available), float(total_pinned),
                                         float(maximum), flags, n, cb, None, byref(ok), byref(short))
    _pin_done(rc, raised, "comem_calc_ensure_pin_budget", rules)
    return PinBudget(bool(ok.value), short.value)


def free_pins(size: float, models: Sequence[PinModel], free: PinFree, *, evict_active: bool = False,
              loaded: bool = False, rules: str = "current") -> float:
    """free_pins(size, evict_active, loaded): the pin eviction ladder; returns what was freed."""
    flags, n, cb, raised = _pin_call(models, free)
    out = c_double()
    rc = _L.comem_calc_free_pins(_rules(rules), _gate_flags(loaded=loaded, evict_active=evict_active), float(size),
                                 flags, n, cb, None, byref(out))
    _pin_done(rc, raised, "comem_calc_free_pins", rules)
    return out.value


def free_registrations(shortfall: float, models: Sequence[PinModel], free: PinFree, *, maximum: float,
                       evict_active: bool = True, rules: str = "current") -> bool:
    """free_registrations(shortfall, evict_active): the page-lock gate's registration ladder."""
    flags, n, cb, raised = _pin_call(models, free)
    ok = c_int()
    rc = _L.comem_calc_free_registrations(_rules(rules), _gate_flags(evict_active=evict_active), float(shortfall),
                                          float(maximum), flags, n, cb, None, byref(ok))
    _pin_done(rc, raised, "comem_calc_free_registrations", rules)
    return bool(ok.value)


def ensure_pin_registerable(size: float, models: Sequence[PinModel], free: PinFree, *, total_pinned: float,
                            maximum: float, evict_active: bool = True, rules: str = "current") -> bool:
    """ensure_pin_registerable(size, evict_active): free_registrations(total_pinned + size - maximum)."""
    flags, n, cb, raised = _pin_call(models, free)
    ok = c_int()
    rc = _L.comem_calc_ensure_pin_registerable(_rules(rules), _gate_flags(evict_active=evict_active),
                                               float(total_pinned), float(size), float(maximum), flags, n, cb, None,
                                               byref(ok))
    _pin_done(rc, raised, "comem_calc_ensure_pin_registerable", rules)
    return bool(ok.value)


def should_free_pins_for_ram_pressure(shortfall: float, windows: bool = False, available: float = 0,
                                      swap_percent: Optional[float] = 0.0) -> bool:
    """should_free_pins_for_ram_pressure(shortfall); ``swap_percent`` None: the swap reading failed."""
    known = swap_percent is not None
    return bool(_L.comem_calc_should_free_pins_for_ram_pressure(float(shortfall), 1 if windows else 0,
                                                                float(available), 1 if known else 0,
                                                                float(swap_percent) if known else 0.0))
