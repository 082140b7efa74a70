"""ComfyUI's own ``current_loaded_models`` as comem holders: one per device, one entry per loaded model.

Release asks from other processes are answered through ComfyUI's own path:
``LoadedModel.model_unload(bytes)`` (a partial unload, escalating to detach as
ComfyUI does, a detached model leaving the list as ``free_memory`` would have
it leave), then ``soft_empty_cache()``; the receipt carries the bytes ComfyUI's
accounting says came off the card. Asks arrive on the library's callback
thread; they run ComfyUI's path only when the process's model lock is free
(never while a node computes or ComfyUI is loading). While it is held, a
process on the real aimdo still gives its dynamic models' unpinned pages
(``steer.AimdoSteer.give``: aimdo evicts them itself at the computing thread's
next fault), so its holders are asked while busy; anything else is answered
busy.

Loading is hooked: before ``LoadedModel.model_load`` moves bytes, the bytes it
will add are admitted by the coordinator, so this process never loads past
what the ledger grants; a refusal loads the part that fits (ComfyUI's lowvram
path) or, when nothing fits, nothing (its 0.1 sentinel).

A dynamic model (ComfyUI 783545f6's ``ModelPatcherDynamic`` over comfy-aimdo)
moves no weights when it loads: its VBAR faults pages in while it computes, as
far as aimdo's budget lets it, and that budget is steered from the ledger
(``steer.py``). Its entry is paged, its residency is aimdo's own count
(``loaded_size``), read at every node boundary and by :meth:`census_dynamic`
while it computes, and an ask reaches it through ComfyUI's own
``model_unload`` -> ``partially_unload`` -> ``vbar.free_memory``.
"""

from __future__ import annotations

import logging
import sys
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import calc, errors
from ..client import Client, Entry, Holder, ReleaseAsk
from .devices import CardMirror, DeviceMap

log = logging.getLogger("comem.comfy")

LOCK_WAIT_S = 0.05  # how long a release ask waits for the model lock before it says busy
GIVE_WAIT_S = 1.0   # how long a busy process's aimdo has to evict what it was asked (under the ask's deadline)


def is_dynamic(loaded_model: Any) -> bool:
    """True for a model ComfyUI loads dynamically (783545f6's ModelPatcherDynamic: pages faulted in by aimdo)."""
    probe = getattr(getattr(loaded_model, "model", None), "is_dynamic", None)
    return bool(probe()) if callable(probe) else False


def is_stand_in(loaded_model: Any) -> bool:
    """True for the host's stand-ins for other processes' models (they are not this process's)."""
    return getattr(getattr(loaded_model, "model", None), "comem_stand_in", False)


def is_comfy_env_proxy(loaded_model: Any) -> bool:
    """True for comfy-env's stand-in for a model one of its workers holds (its ``SubprocessModelPatcher``).

    Recognised by its class, whatever comfy-env's version: it is never this process's model, so it
    is never registered, admitted or offloaded as one (docs/comfy-env.md)."""
    cls = type(getattr(loaded_model, "model", None))
    return cls.__name__ == "SubprocessModelPatcher" and cls.__module__.startswith("comfy_env.")


def is_foreign(loaded_model: Any) -> bool:
    """True for an entry of ComfyUI's list that stands for another process's model (comem's or comfy-env's)."""
    return is_stand_in(loaded_model) or is_comfy_env_proxy(loaded_model)


class _Tracked:
    __slots__ = ("ref", "entry", "index")

    def __init__(self, lm: Any, entry: Entry, index: int) -> None:
        self.ref = weakref.ref(lm)
        self.entry = entry
        self.index = index


class ComfyModels:
    """The models of ``mm.current_loaded_models`` (``mm``: comfy.model_management) registered with ``client``."""

    def __init__(self, client: Client, mm: Any, devices: DeviceMap, lock: threading.RLock,
                 holder_name: str = "comfyui") -> None:
        self.client = client
        self.mm = mm
        self.devices = devices
        self.lock = lock
        self.holder_name = holder_name
        self.mirror = CardMirror(devices.card) if devices.simulated and devices.card is not None else None
        self._holders: Dict[int, Holder] = {}
        self._tracked: Dict[int, _Tracked] = {}  # id(LoadedModel) -> its entry
        self.released = 0  #: bytes given back to other processes' asks so far
        self.released_busy = 0  #: of which given while a node computed (aimdo's unpinned pages)
        self.steer: Any = None  #: this process's AimdoSteer, when its aimdo is steered (set by the adapter)
        self.answers_while_busy = False  #: register holders that are asked while busy (set before the first)
        #: called at the end of every sync: what else must follow ComfyUI's list (the adapter's pins)
        self.on_synced: Optional[Callable[[], None]] = None

    # ---- holders and entries ----

    def holder(self, index: int) -> Holder:
        """The holder for comem device ``index`` (registered on first use)."""
        h = self._holders.get(index)
        if h is None:
            h = self.client.add_holder(self.holder_name, device=index, kind="models", on_release=self._on_release,
                                       answers=("release", "idle"), releases_while_busy=self.answers_while_busy)
            self._holders[index] = h
        return h

    def _own(self) -> List[Tuple[Any, int]]:
        """(LoadedModel, comem device) of this process's models on devices comem manages."""
        out = []
        for lm in list(self.mm.current_loaded_models):
            if is_foreign(lm) or lm.model is None:
                continue
            idx = self.devices.index(lm.device)
            if idx is not None:
                out.append((lm, idx))
        return out

    def entry_of(self, lm: Any) -> Optional[Entry]:
        t = self._tracked.get(id(lm))
        return t.entry if t is not None and t.ref() is lm else None

    def _track(self, lm: Any, index: int) -> Entry:
        t = self._tracked.get(id(lm))
        if t is not None and t.ref() is lm:
            return t.entry
        name = type(getattr(lm.model, "model", lm.model)).__name__[:48] or "model"
        size = max(0, int(lm.model_memory()))
        e = self.holder(index).add_entry(name, size, min(size, max(0, int(lm.model_loaded_memory()))),
                                         paged=is_dynamic(lm))
        self._tracked[id(lm)] = _Tracked(lm, e, index)
        return e

    def sync(self) -> None:
        """Makes the ledger (and, simulated, the card) agree with ComfyUI's list as it is now."""
        seen = set()
        per_device: Dict[int, int] = {}
        for lm, idx in self._own():
            seen.add(id(lm))
            e = self._track(lm, idx)
            resident = min(e.size, max(0, int(lm.model_loaded_memory())))
            # ComfyUI's own second key: sys.getrefcount of the patcher, as free_memory reads it.
            refs = sys.getrefcount(lm.model) if lm.model is not None else 0
            if resident != e.resident or refs != e.refs:
                e.census(resident, refs)
            per_device[idx] = per_device.get(idx, 0) + resident
        for key in [k for k in self._tracked if k not in seen]:
            t = self._tracked.pop(key)
            try:
                t.entry.remove()
            except errors.Error as ex:
                log.debug("comem: entry removal failed: %s", ex)
        if self.mirror is not None:
            for idx in set(per_device) | set(self.mirror._charged):
                self.mirror.set(idx, per_device.get(idx, 0))
        if self.on_synced is not None:
            self.on_synced()  # what else follows ComfyUI's list (its pins: released with the models)

    def census_dynamic(self) -> int:
        """Reports the residency aimdo gives each dynamic model now (its faults and evictions while it
        computes, which no node boundary shows); returns how many entries changed. Takes no lock: it reads
        aimdo's counters and this process's own entries only."""
        changed = 0
        for t in list(self._tracked.values()):
            lm = t.ref()
            if lm is None or lm.model is None or not is_dynamic(lm):
                continue
            resident = min(t.entry.size, max(0, int(lm.model_loaded_memory())))
            if resident != t.entry.resident:
                try:
                    t.entry.resident = resident
                    changed += 1
                except errors.Error as ex:  # removed meanwhile by a sync: the next one has it
                    log.debug("comem: dynamic census skipped an entry: %s", ex)
        return changed

    def resident(self, index: int) -> int:
        """Bytes ComfyUI counts as loaded on comem device ``index``."""
        return sum(int(lm.model_loaded_memory()) for lm, i in self._own() if i == index)

    # ---- the release path: ComfyUI's own unload ----

    def unload(self, lm: Any, nbytes: Optional[int]) -> int:
        """ComfyUI's model_unload for ``nbytes`` (None: all); pops a detached model; returns bytes freed."""
        before = int(lm.model_loaded_memory())
        if before <= 0:
            return 0
        detached = lm.model_unload(memory_to_free=nbytes)
        after = 0 if detached else int(lm.model_loaded_memory())
        if detached:
            try:
                self.mm.current_loaded_models.remove(lm)
            except ValueError:
                pass
        return max(0, before - after)

    def release(self, index: int, nbytes: Optional[int], plan: List[Tuple[Entry, int]]) -> int:
        """Frees ``nbytes`` (None: all) of this process's models on ``index``, following ``plan`` first."""
        freed = 0
        by_entry = {t.entry.id: t for t in self._tracked.values()}
        for entry, amount in plan:
            t = by_entry.get(entry.id)
            lm = t.ref() if t is not None else None
            if lm is not None and lm in self.mm.current_loaded_models:
                freed += self.unload(lm, amount)
        if not plan or (nbytes is not None and freed < nbytes):
            # ComfyUI's own order over this process's models only (stand-ins are kept out).
            candidates = [lm for lm, i in self._own() if i == index]
            keep = [lm for lm in self.mm.current_loaded_models if lm not in candidates]
            target = None if nbytes is None else nbytes - freed
            before = self.resident(index)
            device = self.devices.torch_device(index)
            if target is None:
                self.original("free_memory")(1e30, device, keep_loaded=keep)
            else:
                free_now = self.mm.get_free_memory(device)
                self.original("free_memory")(free_now + target, device, keep_loaded=keep)
            freed += max(0, before - self.resident(index))
        if freed > 0:
            self.mm.soft_empty_cache()
        return freed

    def allocator_resident(self, index: int) -> int:
        """Bytes of this process's models on comem device ``index`` that live in torch's own allocator (all but
        the dynamic models, whose pages aimdo maps outside it)."""
        return max(0, self.resident(index) - self.dynamic_resident(index))

    def dynamic_resident(self, index: int) -> int:
        """Bytes aimdo holds for this process's dynamic models on comem device ``index`` (no lock taken)."""
        total = 0
        for t in list(self._tracked.values()):
            lm = t.ref()
            if t.index == index and lm is not None and lm.model is not None and is_dynamic(lm):
                total += max(0, int(lm.model_loaded_memory()))
        return total

    def _on_release(self, ask: ReleaseAsk) -> int:
        if ask.kind == "pins":
            return 0
        if self.answers_while_busy and self.client.busy:
            return self._give_while_busy(ask)  # asked only because its holders answer while busy
        if not self.lock.acquire(timeout=LOCK_WAIT_S):
            return self._give_while_busy(ask)
        try:
            freed = self.release(ask.holder.device, None if ask.kind == "idle" else ask.bytes, ask.plan)
            self.sync()
        finally:
            self.lock.release()
        self.released += freed
        log.info("comem: gave back %.2f GiB of ComfyUI's models to another process", freed / (1 << 30))
        return freed

    def _give_while_busy(self, ask: ReleaseAsk) -> int:
        """A node computes (the process is marked busy or the model lock is held): aimdo evicts the dynamic
        models' unpinned pages on the computing thread; when the node ends first, ComfyUI's path frees
        the rest."""
        index = ask.holder.device
        steer = self.steer
        if ask.kind != "bytes" or steer is None or self.dynamic_resident(index) <= 0:
            raise errors.Busy(detail="ComfyUI is loading or computing")
        before = self.dynamic_resident(index)
        locked = []
        def node_ended() -> bool:
            if self.client.busy:  # still marked busy (a node's mark is cleared before its lock is let go)
                return False
            if self.lock.acquire(timeout=0):
                locked.append(True)
                return True
            return False
        steer.give(min(ask.bytes, before), GIVE_WAIT_S, stop=node_ended)
        freed_busy = max(0, before - self.dynamic_resident(index))
        freed = freed_busy
        if locked:
            try:
                if freed < ask.bytes:
                    freed += self.release(index, ask.bytes - freed, [])
                self.sync()
            finally:
                self.lock.release()
        else:
            self.census_dynamic()
        if freed <= 0:
            raise errors.Busy(detail="ComfyUI is computing and aimdo had no unpinned page to give")
        self.released += freed
        self.released_busy += freed_busy
        log.info("comem: gave back %.2f GiB of ComfyUI's dynamic models to another process while a node computed",
                 freed / (1 << 30))
        return freed

    # ---- admission, hooked into LoadedModel.model_load ----

    originals: Dict[str, Callable[..., Any]] = {}

    def original(self, name: str) -> Callable[..., Any]:
        """ComfyUI's own function ``name`` (before the adapter wrapped it)."""
        return ComfyModels.originals.get(name) or getattr(self.mm, name)

    def load(self, lm: Any, load: Callable[[float], Any], lowvram_model_memory: float,
             memory_required: Optional[float] = 0) -> Any:
        """Admits the bytes ``lm.model_load(lowvram_model_memory)`` would add, then runs ``load(budget)``.

        ``memory_required``: the working memory the load is for, as ComfyUI's ``load_models_gpu``
        that loads it was given it (0 or None for a load outside one); the admission keeps it free
        beside the weights (its ``inference``).
        """
        idx = self.devices.index(lm.device)
        if idx is None:
            return load(lowvram_model_memory)
        if is_dynamic(lm):
            # Nothing moves now: pages come in at faults, within the headroom the ledger steers.
            self._track(lm, idx)
            return load(lowvram_model_memory)
        size = int(lm.model_memory())
        loaded = int(lm.model_loaded_memory())
        want = size - loaded if lowvram_model_memory == 0 else min(size - loaded, int(lowvram_model_memory))
        if want <= 0:
            return load(lowvram_model_memory)
        inference = int(memory_required or 0)
        holder = self.holder(idx)
        entry = self._track(lm, idx)  # before the load: its residency then is what it had
        grant = None
        budget = lowvram_model_memory
        try:
            grant = self.client.admit(want, device=idx, holder=holder, inference=inference)
        except errors.Refused as r:
            fit = r.fits  # the part of it the ledger's own rule says would fit
            log.warning("comem: admission short by %.2f GiB for %s; loading %s", r.short_by / (1 << 30),
                        type(lm.model.model).__name__, f"{fit / (1 << 30):.2f} GiB of it" if fit > 0 else "nothing")
            if fit > 0:
                try:
                    grant = self.client.admit(fit, device=idx, holder=holder, inference=inference)
                    budget = fit  # model_load's budget is the bytes it may add
                except errors.Refused:
                    fit = 0
            if fit <= 0:
                budget = calc.NOTHING_BUDGET  # ComfyUI's "load essentially nothing"
        try:
            out = load(budget)
        except BaseException:
            if grant is not None:
                grant.cancel()
            raise
        if grant is not None:
            grant.done(entry, min(entry.size, int(lm.model_loaded_memory())))
        return out

