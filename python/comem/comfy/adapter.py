"""The hooks that put comem under ComfyUI's model manager (shared by the host and a ComfyUI worker).

Installing wraps, in ``comfy.model_management``: ``free_memory`` and
``load_models_gpu`` (under the process's model lock; the host first brings its
stand-ins up to date and publishes the reserve), ``LoadedModel.model_load``
(admission before bytes move), ``LoadedModel.model_unload`` (where the
coordinator serves host RAM, the weights an unload moves to a CPU offload
device are asked for in host RAM first: ``ram.py``), and, in simulated placement only,
``get_torch_device`` (``cpu:0``, the device that plays the card) and
``get_free_memory``/``get_total_memory`` (the simulated card's reading for it). In ``execution`` (when ComfyUI runs),
``get_output_data``: every node runs marked busy and holding the model lock,
with a census after it. Where ComfyUI runs on the real comfy-aimdo (783545f6's
dynamic VRAM), its headroom is steered from the coordinator's view
(``steer.py``) and its dynamic models' residency is reported as it changes.
Where ComfyUI keeps a RAM cache (783545f6), ``set_ram_cache_release_state``
and ``PromptExecutor.execute`` are wrapped so the cache is registered on the
ledger's host RAM and given back on ask between prompts (``ram.py``), and
``ensure_pin_budget`` so every pin is booked with the ledger first and pin
asks reach ComfyUI's own ``free_pins`` (``pins.py``).
Uninstalling restores ComfyUI's own functions and aimdo's headroom.

One adapter is active per process.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import math
import os
import sys
import threading
from typing import Any, Callable, Dict, Iterator, Optional

from .. import errors
from ..client import Client
from . import ram, steer, versions
from .devices import DeviceMap
from .pins import ComfyPins, wrap_ensure_pin_budget, wrap_pin_memory
from .models import ComfyModels, is_dynamic, is_foreign

log = logging.getLogger("comem.comfy")

_active: Optional["Adapter"] = None

#: The working memory (``memory_required``) of the ``load_models_gpu`` call in progress, for the
#: admissions of the ``model_load`` calls it makes (``ComfyModels.load``'s argument). ComfyUI's
#: ``load_models_gpu(models, memory_required, ...)`` computes its budgets from it but calls
#: ``LoadedModel.model_load(lowvram_model_memory, force_patch_weights=...)`` without it (a125cd84,
#: 783545f6 and v0.39 alike), so it cannot travel as an argument without rewriting ComfyUI's loop.
#: It follows the call instead: set by the ``load_models_gpu`` wrapper for the call and reset, when
#: the call returns, to the enclosing call's value (0 outside any), read by the ``model_load`` wrapper
#: and passed on. A context variable: one value per thread (and per asyncio task), as calls are.
_memory_required: "contextvars.ContextVar[Any]" = contextvars.ContextVar("comem_memory_required", default=0)

MIN_OFFLOAD = 1 << 20  #: an unload moving less than this to RAM is not asked for (small models: noise)
OFFLOAD_ADMIT_S = 10.0  #: how long an unload waits for host RAM (it may run on the callback thread, for an ask)


class ModelLock:
    """A reentrant lock over ComfyUI's model list that a waiting thread can set down for a while."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._owner: Optional[int] = None
        self._depth = 0

    def acquire(self, timeout: float = -1) -> bool:
        ok = self._lock.acquire(timeout=timeout)
        if ok:
            self._owner = threading.get_ident()
            self._depth += 1
        return ok

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
        self._lock.release()

    def held_here(self) -> bool:
        """True when the calling thread holds the lock."""
        return self._owner == threading.get_ident()

    def __enter__(self) -> "ModelLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @contextlib.contextmanager
    def set_down(self) -> Iterator[None]:
        """Fully releases the lock held by this thread for the block (e.g. while waiting on a worker)."""
        if self._owner != threading.get_ident():
            yield
            return
        depth = self._depth
        for _ in range(depth):
            self.release()
        try:
            yield
        finally:
            for _ in range(depth):
                self.acquire()


def mm_module() -> Any:
    """comfy.model_management (imported: the process must already run or have configured ComfyUI)."""
    import comfy.model_management as mm
    return mm


def start_coordinator(name: str, role: str, socket: Optional[str] = None) -> Optional[Any]:
    """The user's coordinator for a ComfyUI host or worker about to open its client: found, or started.

    Unless ``COMEM_AUTOSTART`` switches it off (``0``, ``off``: nothing is probed or started, as before),
    :func:`comem.coordinator.ensure_running` finds the coordinator at ``socket`` (None: ``COMEM_SOCKET``, else
    the per-user one) or starts this comem's ``comemd``, detached, told it was started by ``"NAME ROLE (pid
    N)"``. Returns its :class:`comem.coordinator.Running`, or None where switched off or where it could not be
    started (said in one warning: the client then decides locally, or a host embeds a coordinator, and joins
    one when it appears). A coordinator of another comem version raises
    :class:`comem.coordinator.OtherVersion`, naming both: it is never half-used.
    """
    from ..autostart import OtherVersion, enabled, ensure_running
    if not enabled():
        return None
    try:
        running = ensure_running(socket, started_by=f"{name} {role} (pid {os.getpid()})")
    except OtherVersion:
        raise
    except (errors.Error, OSError, ValueError) as e:
        log.warning("comem: no coordinator could be started for this %s: %s", role, e)
        return None
    if running is not None and running.started:
        log.info("comem: started the coordinator %s (pid %d) on %s; its log is %s", running.binary, running.pid,
                 running.socket, running.log)
    return running


class Adapter:
    """comem under one process's ComfyUI model manager. See :class:`comem.comfy.Host` and ``Worker``."""

    role = "worker"

    def __init__(self, client: Client, mm: Any = None, card: Any = None, simulated: Optional[bool] = None,
                 aimdo: Any = None) -> None:
        """``aimdo``: the ``comfy_aimdo.control`` to steer (None: this process's, when ComfyUI enabled it)."""
        self.client = client
        self.mm = mm if mm is not None else mm_module()
        self.lock = ModelLock()
        status = client.status() if client.connected else None
        self.devices = DeviceMap(self.mm, status, card=card, simulated=simulated)
        self.models = ComfyModels(client, self.mm, self.devices, self.lock)  # type: ignore[arg-type]
        self.ram = ram.RamCache(client)  # ComfyUI's RAM cache on host RAM, when the coordinator serves it
        self.pins = ComfyPins(client, self.mm, self.lock) if ComfyPins.applies(self.mm) else None
        if self.pins is not None:
            # ComfyUI lets pins go with the models it releases, in a node or for another process's ask:
            # every sync of the models gives back what is booked beyond its pins and one chunk.
            self.models.on_synced = self.pins.settle
        self._saved: Dict[Any, Dict[str, Any]] = {}
        self.installed = False
        self._aimdo = aimdo
        self.steer: Optional[steer.AimdoSteer] = None
        # Holders are registered before steering starts: those of a process whose aimdo will be steered are
        # asked while a node computes (aimdo then gives its unpinned pages; models.py).
        self._steerable = steer.steerable(aimdo if aimdo is not None else steer.find_aimdo())
        self.models.answers_while_busy = self._steerable
        self._steer_tried = False  # steering was attempted with a coordinator connected (once is enough)
        self._view: Any = None

    # ---- install / uninstall ----

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self._saved.setdefault(owner, {})[name] = getattr(owner, name)
        if owner is self.mm:  # originals are comfy.model_management's (pinned_memory has a pin_memory too)
            ComfyModels.originals.setdefault(name, getattr(owner, name))
        setattr(owner, name, value)

    def install(self) -> "Adapter":
        """Wraps ComfyUI's manager (idempotent; one adapter per process)."""
        global _active
        if self.installed:
            return self
        if _active is not None:
            raise RuntimeError("a comem adapter is already installed in this process; uninstall it first")
        mm = self.mm
        versions.warn_if_untested()
        self._patch(mm, "free_memory", self._wrap_free_memory(mm.free_memory))
        self._patch(mm, "load_models_gpu", self._wrap_load_models_gpu(mm.load_models_gpu))
        self._patch(mm.LoadedModel, "model_load", _wrap_model_load(mm.LoadedModel.model_load))
        self._patch(mm.LoadedModel, "model_unload", _wrap_model_unload(mm.LoadedModel.model_unload))
        pinned_memory = sys.modules.get("comfy.pinned_memory")
        if self.pins is not None and pinned_memory is not None and hasattr(pinned_memory, "pin_memory"):
            # 783545f6's pin ladder: each pin ComfyUI's pin_memory makes is booked with the ledger first (pins.py)
            self._patch(mm, "ensure_pin_budget", wrap_ensure_pin_budget(mm.ensure_pin_budget, self.pins))
            self._patch(pinned_memory, "pin_memory", wrap_pin_memory(pinned_memory.pin_memory))
        if self.devices.simulated:
            self._patch(mm, "get_torch_device", _sim_torch_device)
            self._patch(mm, "get_free_memory", self._wrap_reading(mm.get_free_memory, self.devices.free))
            self._patch(mm, "get_total_memory", self._wrap_reading(mm.get_total_memory, self.devices.total))
        execution = sys.modules.get("execution")
        if execution is not None and hasattr(execution, "get_output_data"):
            self._patch(execution, "get_output_data", self._wrap_node(execution.get_output_data))
        memory = sys.modules.get("comfy.memory_management")
        if memory is not None and hasattr(memory, "set_ram_cache_release_state"):  # 783545f6's RAM cache
            self._patch(memory, "set_ram_cache_release_state",
                        ram.wrap_release_state(memory.set_ram_cache_release_state, self.ram))
            self.ram.set_cache(getattr(memory, "extra_ram_release_callback", None))
            executor = getattr(execution, "PromptExecutor", None)
            if executor is not None and hasattr(executor, "execute"):
                self._patch(executor, "execute", ram.wrap_execute(executor.execute, self.ram))
        _active = self
        self.installed = True
        with self.lock:
            self.before_loop()
            self.models.sync()
        if memory is not None:
            ram.headroom_share(self.client, memory)
        self._start_steering()
        log.info("comem: %s adapter installed (%s, coordinator %s)", self.role,
                 "simulated placement" if self.devices.simulated else
                 "CUDA placement" if self.devices.cards else "no card",
                 "connected" if self.client.connected else "absent: deciding locally")
        return self

    def uninstall(self) -> None:
        """Restores ComfyUI's own functions and forgets this process's stand-ins."""
        global _active
        if not self.installed:
            return
        for owner, names in self._saved.items():
            for name, value in names.items():
                setattr(owner, name, value)
        self._saved.clear()
        ComfyModels.originals.clear()
        if self.steer is not None:
            self.models.steer = None
            self.steer.stop()
            self.steer = None
        self._steer_tried = False
        if self._view is not None:
            self._view.close()
            self._view = None
        self.installed = False
        if _active is self:
            _active = None
        self.after_uninstall()

    def close(self) -> None:
        """Uninstalls, gives simulated charges back and closes the client."""
        self.uninstall()
        if self.models.mirror is not None:
            self.models.mirror.clear()
        self.client.close()

    def __enter__(self) -> "Adapter":
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_steering(self) -> None:
        """Steers this process's comfy-aimdo from the coordinator's view (nothing to do without either).

        Tried at install and again at every node boundary and load until a coordinator has answered
        (the client connects to one that starts later by itself), then never again."""
        if not self.installed or self.steer is not None or self._steer_tried or not self._steerable:
            return
        control = self._aimdo if self._aimdo is not None else steer.find_aimdo()
        if control is None or not self.client.connected:
            return
        self._steer_tried = True
        main = self.devices.index(self.mm.get_torch_device())
        if main is None:
            return
        try:
            self._view = self.client.view()  # the sealed copy: the view file is any process's to write
        except errors.Error as e:
            log.warning("comem: comfy-aimdo is not steered (the coordinator's view: %s)", e)
            return
        self.steer = steer.start_for(self._view, [main], control, tick=self.models.census_dynamic)
        self.models.steer = self.steer

    # ---- what the host adds ----

    def before_loop(self) -> None:
        """Runs before ComfyUI's eviction loop (the host syncs its stand-ins here)."""

    def after_uninstall(self) -> None:
        """Runs after the functions are restored."""

    def node_boundary(self) -> None:
        """Runs as every node starts and after it ends (the host brings other processes' rows up to date)."""

    def offload_bytes(self, lm: Any, memory_to_free: Any = None) -> int:
        """Host RAM ``lm.model_unload(memory_to_free)`` will take: the weights it moves from a card comem manages
        to a CPU offload device (ComfyUI frees at least what it is asked, whole modules). 0 for a dynamic model
        (its weights never leave RAM: aimdo only drops the card's pages), a stand-in, or a model kept on its
        card."""
        model = getattr(lm, "model", None)
        if model is None or is_foreign(lm) or is_dynamic(lm):
            return 0
        offload = getattr(model, "offload_device", None)
        if getattr(offload, "type", None) != "cpu" or self.devices.index(offload) is not None:
            return 0  # not to host RAM (simulated placement: cpu:0 plays the card)
        if self.devices.index(getattr(lm, "device", None)) is None:
            return 0
        try:
            loaded = max(0, int(model.loaded_size()))
            if memory_to_free is not None and 0 <= memory_to_free < loaded:
                return math.ceil(memory_to_free)  # ComfyUI asks in floats
        except (TypeError, ValueError, OverflowError):
            return 0
        return loaded

    # ---- node boundaries ----

    @contextlib.contextmanager
    def computing(self, prompt: Optional[str] = None) -> Iterator[None]:
        """A node computes: busy, holding the model lock (asked only for what aimdo can give meanwhile);
        census when it ends."""
        with self.lock:
            self._start_steering()
            self.client.set_busy(True, _prompt(prompt))
            self.ram.census()  # the outputs the nodes before this one left in the RAM cache
            self.ram.make_room()  # and ComfyUI's headroom for this one, other processes asked first
            self.node_boundary()
            try:
                yield
            finally:
                try:
                    self.client.set_busy(False, _prompt(prompt))
                    self.models.sync()  # and the pins (models.on_synced)
                except errors.Error as e:
                    log.warning("comem: node boundary not reported: %s", e)
                self.node_boundary()

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Inside a node that only waits (on a worker process): idle, and the model lock set down."""
        self.client.set_busy(False)
        try:
            with self.lock.set_down():
                yield
        finally:
            self.client.set_busy(True)

    # ---- the wrappers ----

    def _wrap_free_memory(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def free_memory(memory_required: float, device: Any, *args: Any, **kwargs: Any) -> Any:
            with self.lock:
                self.before_loop()
                try:
                    return orig(memory_required, device, *args, **kwargs)
                finally:
                    self.models.sync()
        return free_memory

    def _wrap_load_models_gpu(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def load_models_gpu(models: Any, memory_required: float = 0, *args: Any, **kwargs: Any) -> Any:
            with self.lock:
                self._start_steering()
                self.before_loop()
                outer = _memory_required.set(memory_required)
                try:
                    return orig(models, memory_required, *args, **kwargs)
                finally:
                    _memory_required.reset(outer)
                    self.models.sync()
        return load_models_gpu

    def _wrap_reading(self, orig: Callable[..., Any], read: Callable[[int], int]) -> Callable[..., Any]:
        """get_free_memory / get_total_memory: the simulated card's figure for the device that plays it."""
        @functools.wraps(orig)
        def reading(dev: Any = None, *args: Any, **kwargs: Any) -> Any:
            d = dev if dev is not None else self.mm.get_torch_device()
            idx = self.devices.index(d)
            if idx is None:
                return orig(dev, *args, **kwargs)
            # the one flag is torch_free_too / torch_total_too, by position or by name
            torch_too = bool(args[0]) if args else bool(kwargs.get("torch_free_too", kwargs.get("torch_total_too")))
            v = read(idx)
            return (v, 0) if torch_too else v  # torch holds nothing there: its share is 0
        return reading

    def _wrap_node(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        async def get_output_data(prompt_id: Any, unique_id: Any, *args: Any, **kwargs: Any) -> Any:
            with self.computing(prompt_id):
                return await orig(prompt_id, unique_id, *args, **kwargs)
        return get_output_data


def _sim_torch_device() -> Any:
    """Simulated placement: ComfyUI's main device is the one that plays the card."""
    from .devices import SIM_DEVICE
    return SIM_DEVICE


def _prompt(prompt: Optional[Any]) -> Optional[str]:
    if prompt is None:
        return None
    text = str(prompt)
    return text.encode("utf-8")[:63].decode("utf-8", "ignore") or None


def _wrap_model_load(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def model_load(lm: Any, lowvram_model_memory: float = 0, force_patch_weights: bool = False) -> Any:
        adapter = _active
        if adapter is None or is_foreign(lm):
            return orig(lm, lowvram_model_memory, force_patch_weights)
        with adapter.lock:
            return adapter.models.load(lm, lambda budget: orig(lm, budget, force_patch_weights),
                                       lowvram_model_memory, _memory_required.get())
    return model_load


def _wrap_model_unload(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def model_unload(lm: Any, memory_to_free: Any = None, unpatch_weights: bool = True) -> Any:
        adapter = _active
        if adapter is not None:
            n = adapter.offload_bytes(lm, memory_to_free)
            if n >= MIN_OFFLOAD:
                adapter.ram.make_room_for(n, f"offloading {n >> 20} MiB of a model's weights to RAM",
                                          timeout=OFFLOAD_ADMIT_S)
        return orig(lm, memory_to_free, unpatch_weights)
    return model_unload


def active() -> Optional[Adapter]:
    """The adapter installed in this process, if any."""
    return _active
