"""comem for torch processes: tensors over pager pages, the census figure, and a release ladder.

Imported only where torch is (``import comem.torch``); nothing else in the
binding imports torch.

* :func:`tensor` views faulted pager pages as a tensor: a CUDA tensor through
  ``__cuda_array_interface__`` on the CUDA backend, a CPU tensor over the host
  memory behind the simulated card's pages otherwise.
* :func:`held` is the census figure a torch process reports,
  ``max(pager usage, torch.cuda.memory_reserved())`` (the two overlap, so never
  their sum).
* :class:`Models` is a holder of plain ``torch.nn.Module`` models on one card:
  admission before a load, and a release ladder (move parts to the host until
  the asked bytes are covered, then the whole model, then
  ``torch.cuda.empty_cache()``) whose receipt is what torch's allocator actually
  gave back.
* A :class:`Placement` is how bytes reach the card: :class:`CudaPlacement`
  moves tensors to ``cuda:N``; :class:`SimPlacement` (no GPU) keeps them in
  host memory and charges the shared simulated card instead, so every decision
  above runs as it would on a GPU. :func:`placement` picks one.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

from . import errors
from .client import Client, Entry, Holder, ReleaseAsk
from .pager import Pager, VBar
from .simcard import SimCard, coordinator_card

log = logging.getLogger("comem")


# ---- tensors over pager pages ----

class _CudaArray:
    """The minimal object torch.as_tensor reads through __cuda_array_interface__."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}


def tensor(vbar: VBar, offset: int, nbytes: int, dtype: Optional[torch.dtype] = None,
           shape: Optional[Tuple[int, ...]] = None) -> torch.Tensor:
    """A tensor over ``nbytes`` of ``vbar`` at ``offset`` (fault the range first; it is valid while pinned).

    CUDA backend: a tensor on ``cuda:<pager device>``; sim backend: a CPU tensor
    over the host memory behind the simulated pages. ``dtype``/``shape`` reinterpret
    the bytes (default: uint8 of length nbytes).
    """
    if not isinstance(vbar, VBar):
        raise TypeError(f"vbar must be a comem.VBar, not {type(vbar).__name__}")
    off = errors.size(offset, "offset")
    n = errors.size(nbytes, "nbytes")
    if off + n > vbar.size:
        raise ValueError(f"range [{off}, {off + n}) leaves the VBAR of {vbar.size} bytes")
    ptr = vbar.base + off
    if vbar.pager.backend == "cuda":
        t = torch.as_tensor(_CudaArray(ptr, n), device=torch.device("cuda", vbar.pager.device))
    else:
        t = torch.frombuffer((ctypes.c_uint8 * n).from_address(ptr), dtype=torch.uint8) if n else \
            torch.empty(0, dtype=torch.uint8)
    if dtype is not None:
        t = t.view(dtype)
    if shape is not None:
        t = t.view(shape)
    return t


def held(pager: Optional[Pager] = None, device: int = 0) -> int:
    """The census figure: max(pager usage, torch.cuda.memory_reserved(device)), bytes."""
    dev = errors.device(device)
    reserved = torch.cuda.memory_reserved(dev) if torch.cuda.is_available() else 0
    return max(pager.usage if pager is not None else 0, reserved)


def _nbytes(t: Optional[torch.Tensor]) -> int:
    return 0 if t is None else t.nelement() * t.element_size()


def module_bytes(module: torch.nn.Module) -> int:
    """Bytes of a module's parameters and buffers."""
    return sum(_nbytes(t) for t in module.parameters()) + sum(_nbytes(b) for b in module.buffers())


def _parts(module: torch.nn.Module) -> List[torch.nn.Module]:
    """The modules that own tensors directly: the units a partial unload moves."""
    out = []
    for m in module.modules():
        if any(p is not None for p in m._parameters.values()) or any(b is not None for b in m._buffers.values()):
            out.append(m)
    return out


def _own_bytes(m: torch.nn.Module) -> int:
    return sum(_nbytes(p) for p in m._parameters.values()) + sum(_nbytes(b) for b in m._buffers.values())


# ---- placements ----

class Placement:
    """How a model's bytes reach one card and leave it. Subclasses: CudaPlacement, SimPlacement."""

    device: torch.device  #: where a model on the card computes

    def resident(self, part: torch.nn.Module) -> int:
        """Bytes of this part's own tensors that are on the card."""
        raise NotImplementedError

    def to_card(self, part: torch.nn.Module) -> int:
        """Moves the part's own tensors to the card; returns the bytes moved."""
        raise NotImplementedError

    def to_host(self, part: torch.nn.Module) -> int:
        """Moves the part's own tensors off the card; returns the bytes moved."""
        raise NotImplementedError

    def flush(self) -> int:
        """Returns cached bytes to the driver; the bytes the card got back from the allocator."""
        return 0

    def cached(self) -> int:
        """Bytes the allocator holds on the card (torch.cuda.memory_reserved), 0 where none."""
        return 0


class CudaPlacement(Placement):
    """Tensors really on ``cuda:index``; flush() is torch.cuda.empty_cache()."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.device = torch.device("cuda", index)

    def resident(self, part: torch.nn.Module) -> int:
        return sum(_nbytes(t) for t in _own_tensors(part) if t.device == self.device)

    def _move(self, part: torch.nn.Module, dev: torch.device) -> int:
        moved = 0
        with torch.no_grad():
            for k, p in part._parameters.items():
                if p is not None and p.device != dev:
                    p.data = p.data.to(dev)
                    moved += _nbytes(p)
            for k, b in part._buffers.items():
                if b is not None and b.device != dev:
                    part._buffers[k] = b.to(dev)
                    moved += _nbytes(b)
        return moved

    def to_card(self, part: torch.nn.Module) -> int:
        return self._move(part, self.device)

    def __repr__(self) -> str:
        return f"CudaPlacement(cuda:{self.index})"

    def to_host(self, part: torch.nn.Module) -> int:
        return self._move(part, torch.device("cpu"))

    def cached(self) -> int:
        return torch.cuda.memory_reserved(self.index)

    def flush(self) -> int:
        before = torch.cuda.memory_reserved(self.index)
        torch.cuda.synchronize(self.index)
        torch.cuda.empty_cache()
        return max(0, before - torch.cuda.memory_reserved(self.index))


class SimPlacement(Placement):
    """No GPU: tensors stay in host memory and the shared simulated card is charged for them.

    What the card shows (and so what the coordinator, the NVML-style reading and
    other processes see) is what a CUDA placement would have allocated.
    """

    def __init__(self, card: Optional[SimCard] = None, index: int = 0) -> None:
        self.card = card if card is not None else SimCard()
        self.index = index
        self.device = torch.device("cpu")
        self._on: Dict[int, int] = {}  # id(part) -> bytes charged
        self._lock = threading.Lock()

    def resident(self, part: torch.nn.Module) -> int:
        return self._on.get(id(part), 0)

    def __repr__(self) -> str:
        with self._lock:
            parts, charged = len(self._on), sum(self._on.values())
        return f"SimPlacement(simulated card {self.index}: {parts} parts on it, {charged} bytes charged)"

    def to_card(self, part: torch.nn.Module) -> int:
        with self._lock:
            if id(part) in self._on:
                return 0
            n = _own_bytes(part)
            self.card.alloc(n, self.index)  # raises Error(ENOSPC) when it does not fit, like cudaMalloc
            self._on[id(part)] = n
            return n

    def to_host(self, part: torch.nn.Module) -> int:
        with self._lock:
            n = self._on.pop(id(part), 0)
            if n:
                self.card.free(n, self.index)
            return n


def _own_tensors(part: torch.nn.Module) -> Iterator[torch.Tensor]:
    for p in part._parameters.values():
        if p is not None:
            yield p
    for b in part._buffers.values():
        if b is not None:
            yield b


def placement(device: int = 0, card: Optional[SimCard] = None, socket: Optional[str] = None) -> Placement:
    """CUDA when torch sees a GPU; else a simulated card, only where one was asked for: ``card``, the
    one ``COMEM_DEVICE`` names, or the one the coordinator at ``socket`` (None: the usual one) serves.

    Without a GPU and without a simulated card asked for, :class:`comem.NoDevice`: comem never makes
    up a card for a process that has none.
    """
    dev = errors.device(device)
    if card is None and torch.cuda.is_available():
        return CudaPlacement(dev)
    if card is None:
        named = os.environ.get("COMEM_DEVICE", "")
        spec = named if named.startswith("sim") else coordinator_card(socket)
        if spec is None:
            raise errors.NoDevice(errors.ENODEV, "comem.torch.placement",
                                  "torch sees no CUDA device and no simulated card was asked for (pass "
                                  "card=comem.SimCard(spec), set COMEM_DEVICE=sim:..., or run a coordinator "
                                  "with --device sim:...)")
        card = SimCard(spec, socket=socket)
    return SimPlacement(card, dev)


# ---- a holder of plain torch models ----

class _Model:
    def __init__(self, module: torch.nn.Module, entry: Entry) -> None:
        self.module = module
        self.entry = entry
        self.parts = _parts(module)


class Models:
    """Plain ``torch.nn.Module`` models on one card, registered as one holder with one entry each.

    ``load`` asks for admission before it moves a model to the card; release
    asks (on the library's callback thread) run the ladder: parts of the planned
    models go to the host, smallest first, until the asked bytes are covered;
    a model that cannot cover its share goes whole; then the allocator's cache
    is flushed. The receipt is what the card actually got back. While
    ``computing()`` runs, asks are answered busy: the compute thread is never
    blocked or raced.
    """

    def __init__(self, client: Client, device: int = 0, name: str = "models",
                 placement_: Optional[Placement] = None) -> None:
        if not isinstance(client, Client):
            raise TypeError(f"client must be a comem.Client, not {type(client).__name__}")
        self.client = client
        self.device = errors.device(device)
        self.placement = placement_ if placement_ is not None else placement(self.device, socket=client.socket)
        self._lock = threading.RLock()
        self._models: Dict[int, _Model] = {}
        self.holder: Holder = client.add_holder(name, device=self.device, kind="models", on_release=self._on_release,
                                                answers=("release", "idle"))
        self.released = 0  #: bytes given back to release asks so far
        #: bytes this process's other holders keep in the same allocator on this device (a ComfyUI adapter's
        #: models, in a worker that runs both): never this holder's overhead, since no flush can give them back
        self.others: Optional[Callable[[], int]] = None

    def __repr__(self) -> str:
        """What a print shows: the holder, its card, how many models it knows and its placement (no lock taken:
        a repr never waits for a load or a release in progress)."""
        return (f"Models(holder {self.holder.name!r} on device {self.device}: {len(self._models)} model(s), "
                f"{self.placement!r})")

    # ---- loading ----

    def load(self, module: torch.nn.Module, name: str, memory_required: int = 0,
             timeout: Optional[float] = None) -> Entry:
        """Admits and moves ``module`` to the card; returns its entry. Raises comem.Refused when short."""
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, not {type(module).__name__}")
        with self._lock:
            m = self._models.get(id(module))
            size = module_bytes(module)
            if m is None:
                m = _Model(module, self.holder.add_entry(name, size, 0))
                self._models[id(module)] = m
            missing = size - self._resident(m)
            if missing <= 0:
                return m.entry
            with self.client.admit(missing, device=self.device, holder=self.holder, inference=memory_required,
                                   timeout=timeout) as grant:
                moved = 0
                for p in m.parts:
                    moved += self.placement.to_card(p)
                grant.done(m.entry, self._resident(m))
            m.entry.resident = self._resident(m)
            log.debug("comem: loaded %s (%d bytes moved)", name, moved)
            return m.entry

    def unload(self, module: torch.nn.Module, remove: bool = False) -> int:
        """Moves ``module`` off the card (and forgets it with ``remove``); returns the bytes the card got back."""
        with self._lock:
            m = self._models.get(id(module))
            if m is None:
                raise errors.NotFound(errors.ENOENT, "Models.unload", "that module was never loaded here")
            freed = self._shed(m, None)
            freed = self._flushed(freed)
            if remove:
                m.entry.remove()
                del self._models[id(module)]
            return freed

    @property
    def entries(self) -> List[Entry]:
        """One entry per model, in load order."""
        return [m.entry for m in self._models.values()]

    def resident(self, module: torch.nn.Module) -> int:
        """Bytes of ``module`` on the card."""
        m = self._models.get(id(module))
        return self._resident(m) if m else 0

    # ---- node boundaries ----

    @contextlib.contextmanager
    def computing(self, prompt: Optional[str] = None) -> Iterator[None]:
        """``with models.computing():`` marks the holder busy and holds the models for the block; census after."""
        with self._lock, self.holder.busy(prompt):
            yield
        self.census()

    def census(self) -> None:
        """Reports every model's residency and the allocator overhead beyond it."""
        with self._lock:
            total = 0
            for m in self._models.values():
                r = self._resident(m)
                total += r
                if r != m.entry.resident:
                    m.entry.resident = r
            cached = self.placement.cached()
            if cached and self.others is not None:
                total += max(0, int(self.others()))
            self.holder.report(overhead=max(0, cached - total) if cached else None)

    # ---- the release ladder ----

    def _resident(self, m: _Model) -> int:
        return sum(self.placement.resident(p) for p in m.parts)

    def _shed(self, m: _Model, want: Optional[int]) -> int:
        """Parts to the host, smallest first, until want bytes moved (None: all of it)."""
        moved = 0
        on_card = [p for p in m.parts if self.placement.resident(p) > 0]
        on_card.sort(key=_own_bytes)
        for p in on_card:
            if want is not None and moved >= want:
                break
            moved += self.placement.to_host(p)
        m.entry.resident = self._resident(m)
        return moved

    def _flushed(self, moved: int) -> int:
        """After moving: flush the cache; what the card got back (CUDA: the allocator's release)."""
        back = self.placement.flush()
        return back if isinstance(self.placement, CudaPlacement) else moved

    def release(self, nbytes: Optional[int] = None, plan: Optional[List[Tuple[Entry, int]]] = None) -> int:
        """Runs the ladder for ``nbytes`` (None: everything), following ``plan`` when given. Returns bytes freed."""
        with self._lock:
            moved = 0
            if plan:
                for entry, amount in plan:
                    m = next((x for x in self._models.values() if x.entry is entry), None)
                    if m is not None:
                        got = self._shed(m, amount)
                        if got < amount:  # its parts could not cover the share: the whole model goes
                            got += self._shed(m, None)
                        moved += got
            if not plan or (nbytes is not None and moved < nbytes):
                for m in reversed(list(self._models.values())):  # least recently loaded first
                    if nbytes is not None and moved >= nbytes:
                        break
                    moved += self._shed(m, None if nbytes is None else nbytes - moved)
            return self._flushed(moved)

    def _on_release(self, ask: ReleaseAsk) -> int:
        if ask.kind == "pins":
            return 0
        if not self._lock.acquire(timeout=0.05):  # computing, loading or unloading: never block on it
            raise errors.Busy(detail="models are in use")
        try:
            freed = self.release(None if ask.kind == "idle" else ask.bytes, ask.plan)
        finally:
            self._lock.release()
        self.released += freed
        return freed

    def pressure(self, nbytes: int, timeout: Optional[float] = None) -> int:
        """At an out-of-memory retry site: asks idle siblings for ``nbytes`` before shrinking this work."""
        return self.client.pressure(nbytes, device=self.device, timeout=timeout)

    def retry_on_oom(self, fn: Any, *args: Any, need: Optional[int] = None, **kwargs: Any) -> Any:
        """Calls fn; on a CUDA out-of-memory error asks siblings for ``need`` bytes (default 1 GiB) and retries once.

        A second failure is raised: then the caller shrinks its own batch.
        """
        try:
            return fn(*args, **kwargs)
        except torch.cuda.OutOfMemoryError:
            freed = self.pressure(need if need is not None else 1 << 30)
            log.info("comem: out of memory; siblings gave back %d bytes; retrying once", freed)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            return fn(*args, **kwargs)
