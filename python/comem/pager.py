"""The weight pager: per-model virtual address reservations (VBARs) paged onto the card per layer.

A :class:`Pager` per device owns :class:`VBar` objects, one per model: a
reservation of device virtual address space that costs nothing until a page
is committed. Before a layer uses a weight, fault its byte range:
:meth:`VBar.fault` returns the pages' signatures when the range is resident
(and pinned), or None when it is offloaded (stream the weight from host memory
instead). After the layer, :meth:`VBar.unpin` the range. A page's signature
changes only when the page is committed again, so copy a weight in only when
its signatures changed. :meth:`Pager.attach` lets the coordinator ask this
pager for bytes from other processes, answered on the library's callback
thread even while this process computes.

Backends: ``"cuda"`` (the driver's virtual memory management, loaded at run
time) and ``"sim"`` (the shared simulated card, host memory behind it).
"""

from __future__ import annotations

import ctypes
import weakref
from ctypes import byref, c_int64, c_uint8, c_uint32, c_void_p
from typing import Dict, List, Optional, Union

from . import _lib, errors
from .errors import check

_L = _lib.lib

_c = _lib.constant  # the library's values (comem_constant): never copies of its headers

BACKENDS = {"sim": _c("PAGER_SIM"), "cuda": _c("PAGER_CUDA")}
RESIDENT = _c("VBAR_RESIDENT")
OFFLOADED = _c("VBAR_OFFLOADED")
DEFAULT_PAGE_SIZE = _c("PAGER_DEFAULT_PAGE_SIZE")


def _stat_names() -> tuple:
    """The pager's counters in the library's order (their COMEM_PAGER_STAT_* indices), every one named."""
    names = ("faults", "offloaded", "commits", "evictions", "syncs", "transient_retries", "pressure_retries",
             "polls", "release_asks", "reports", "touches", "idle_declined", "kept", "reused")
    by_index = sorted(names, key=lambda n: _c("PAGER_STAT_" + n.upper()))
    if [_c("PAGER_STAT_" + n.upper()) for n in by_index] != list(range(_c("PAGER_STAT_COUNT"))):
        raise ImportError("libcomem's pager counters are not the ones this binding names: the two differ")
    return tuple(by_index)


STATS = _stat_names()


class Pager:
    """A pager on one device (``backend`` ``"cuda"`` or ``"sim"``; ``sim_spec`` names the simulated card)."""

    def __init__(self, backend: str = "cuda", device: int = 0, sim_spec: Optional[str] = None) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {sorted(BACKENDS)} (got {backend!r})")
        if sim_spec is not None and not isinstance(sim_spec, str):
            raise TypeError("sim_spec must be a str or None")
        dev = errors.device(device)
        h = c_void_p()
        check(_L.comem_pager_open(BACKENDS[backend], dev, sim_spec.encode() if sim_spec else None, byref(h)),
              "comem_pager_open", f"{backend} device {dev}")
        self._handle: Optional[int] = h.value
        self.backend = backend
        self.device = dev
        self._vbars: Dict[int, "VBar"] = {}
        self._client = None
        self._attached: List[List[int]] = []  # the attached client's handle list, for the finalizer
        # Closed at the latest when the interpreter exits (its VBARs keep it alive until then).
        self._finalizer = weakref.finalize(self, _close_pager, h.value, self._vbars, self._attached)

    def _h(self) -> int:
        if self._handle is None:
            raise errors.Closed(errors.ECLOSED, "pager", "the pager is closed")
        return self._handle

    # ---- headrooms and pressure ----

    @property
    def granularity(self) -> int:
        """The backend's allocation granularity: page sizes are multiples of it."""
        return _L.comem_pager_granularity(self._h())

    @property
    def simple_headroom(self) -> int:
        """The margin kept between this pager's usage and the card's capacity (aimdo's simple_vram_headroom)."""
        return _L.comem_pager_simple_headroom(self._h())

    @simple_headroom.setter
    def simple_headroom(self, nbytes: int) -> None:
        check(_L.comem_pager_set_simple_headroom(self._h(), errors.size(nbytes, "headroom")),
              "comem_pager_set_simple_headroom")

    def set_extra_headroom(self, nbytes: int) -> None:
        """Bytes added to the deficit after the max of the two terms."""
        check(_L.comem_pager_set_extra_headroom(self._h(), errors.size(nbytes, "headroom")),
              "comem_pager_set_extra_headroom")

    def set_device_poll(self, headroom: int, cache_s: float) -> None:
        """The device term: the free margin it regulates to and how long a reading is reused (seconds)."""
        if cache_s is None:
            raise TypeError("cache_s must be a number of seconds (0: read the device at every call)")
        check(_L.comem_pager_set_device_poll(self._h(), errors.size(headroom, "headroom"),
                                             errors.timeout_ms(cache_s)), "comem_pager_set_device_poll")

    def budget_deficit(self, size: int = 0) -> int:
        """What must be freed before committing ``size`` bytes (negative: headroom left)."""
        return _L.comem_pager_budget_deficit(self._h(), errors.size(size))

    @property
    def usage(self) -> int:
        """Bytes this pager has committed."""
        return _L.comem_pager_usage(self._h())

    @property
    def keep(self) -> int:
        """The kept pool's bound: evicted pages' memory kept, unmapped, for the next commits (0: none).

        Kept memory is this process's on the card: the ledger sees it as the holder's entry
        ``kept`` and every release ask takes it first. Set it before :meth:`attach`; a process
        that frees pager memory for its own PyTorch allocations leaves it at 0."""
        return _L.comem_pager_keep(self._h())

    @keep.setter
    def keep(self, nbytes: int) -> None:
        check(_L.comem_pager_set_keep(self._h(), errors.size(nbytes, "keep")), "comem_pager_set_keep")

    @property
    def kept(self) -> int:
        """Bytes in the kept pool now."""
        return _L.comem_pager_kept(self._h())

    @property
    def reclaimable(self) -> int:
        """Bytes eviction could take now (resident, unpinned, above each watermark limit)."""
        return _L.comem_pager_reclaimable(self._h())

    def free_memory(self, nbytes: int) -> int:
        """Evicts at least ``nbytes`` if it can, lowest priority first. Returns the bytes freed."""
        freed = c_int64()
        check(_L.comem_pager_free_memory(self._h(), errors.size(nbytes), byref(freed)), "comem_pager_free_memory")
        return freed.value

    def reset_watermark_limits(self) -> None:
        """Sets every VBAR's watermark limit back to 0."""
        check(_L.comem_pager_reset_watermark_limits(self._h()), "comem_pager_reset_watermark_limits")

    def stats(self) -> Dict[str, int]:
        """The pager's counters (faults, offloaded, commits, evictions, ...)."""
        h = self._h()
        return {name: _L.comem_pager_stat(h, i) for i, name in enumerate(STATS)}

    # ---- VBARs ----

    def vbar(self, size: int, page_size: int = 0) -> "VBar":
        """Reserves a VBAR of ``size`` bytes (whole pages; 0: 32 MiB pages). It costs nothing until faulted."""
        sz = errors.size(size, "size")
        if sz == 0:
            raise ValueError("a VBAR needs a size above 0")
        ps = errors.size(page_size, "page_size")
        out = c_void_p()
        check(_L.comem_vbar_create(self._h(), sz, ps, byref(out)), "comem_vbar_create",
              f"{sz} bytes, page size {ps or DEFAULT_PAGE_SIZE}")
        v = VBar(self, out.value)
        self._vbars[out.value] = v
        return v

    @property
    def vbars(self) -> List["VBar"]:
        """The pager's live VBARs."""
        return list(self._vbars.values())

    # ---- across processes ----

    def attach(self, client: object, name: str = "weights") -> None:
        """Registers this pager with the coordinator through ``client`` (a :class:`comem.Client`).

        From then on other processes' admissions can take its unpinned pages,
        answered on the client's callback thread even while this process computes.
        """
        from .client import Client
        if not isinstance(client, Client):
            raise TypeError(f"client must be a comem.Client, not {type(client).__name__}")
        check(_L.comem_pager_attach(self._h(), client._h(), errors.name(name, "holder name")), "comem_pager_attach")
        self._client = client  # the client must outlive the attachment
        client._pagers.append(self)  # so closing the client detaches this pager first
        client._pager_handles.append(self._handle)
        self._attached.append(client._pager_handles)

    def detach(self) -> None:
        """Removes the pager's holder and entries from the ledger."""
        check(_L.comem_pager_detach(self._h()), "comem_pager_detach")
        self._forget_client()

    def _forget_client(self) -> None:
        if self._client is not None and self in self._client._pagers:
            self._client._pagers.remove(self)
        for handles in self._attached:
            if self._handle in handles:
                handles.remove(self._handle)
        self._attached.clear()
        self._client = None

    @property
    def holder(self) -> Optional[int]:
        """The holder id of the attachment (this client's own id), or None when detached."""
        hid = _L.comem_pager_holder(self._h())
        return hid or None

    def close(self) -> None:
        """Detaches, destroys every VBAR and releases the backend."""
        if self._handle is None:
            return
        self._forget_client()
        self._finalizer()
        self._handle = None

    def __enter__(self) -> "Pager":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<comem.Pager {self.backend} device {self.device}>"


def _close_pager(handle: int, vbars: Dict[int, "VBar"], attached: List[List[int]]) -> None:
    """Closes a pager (detaching it): its VBARs become unusable; its client forgets it."""
    for handles in attached:
        if handle in handles:
            handles.remove(handle)
    attached.clear()
    for v in vbars.values():
        v._handle = None
    vbars.clear()
    _L.comem_pager_close(handle)


class VBar:
    """One model's reservation, owned by its :class:`Pager` (destroyed with it)."""

    def __init__(self, pager: Pager, handle: int) -> None:
        self.pager = pager
        self._handle: Optional[int] = handle
        self.base: int = _L.comem_vbar_base(handle)  #: device virtual address (cuda) or host address (sim)
        self.page_size: int = _L.comem_vbar_page_size(handle)
        self.pages: int = _L.comem_vbar_pages(handle)
        self.size: int = _L.comem_vbar_size(handle)

    def _h(self) -> int:
        if self._handle is None:
            raise errors.Closed(errors.ECLOSED, "vbar", "the VBAR was destroyed (or its pager closed)")
        return self._handle

    def _range(self, offset: int, size: int) -> "tuple[int, int]":
        off = errors.size(offset, "offset")
        sz = errors.size(size, "size")
        if off + sz > self.size:
            raise ValueError(f"range [{off}, {off + sz}) leaves the VBAR of {self.size} bytes")
        return off, sz

    def fault(self, offset: int, size: int) -> Optional[bytes]:
        """Makes [offset, offset+size) resident and pins it; returns its pages' signatures, or None (offloaded).

        The signatures are bytes (4 per page touched): compare them with those of
        the last fault to know whether the weight must be copied in again.
        """
        off, sz = self._range(offset, size)
        first = off // self.page_size
        last = (off + max(sz, 1) - 1) // self.page_size
        n = last - first + 1
        sig = (c_uint32 * n)()
        rc = _L.comem_vbar_fault(self._h(), off, sz, sig, n)
        if rc == OFFLOADED:
            return None
        check(rc, "comem_vbar_fault", f"[{off}, {off + sz})")
        return bytes(sig)

    def unpin(self, offset: int, size: int) -> None:
        """Drops one pin from each page of the range."""
        off, sz = self._range(offset, size)
        check(_L.comem_vbar_unpin(self._h(), off, sz), "comem_vbar_unpin")

    def prioritize(self) -> None:
        """Moves this VBAR to the top of the priority list and its watermark to the last page."""
        check(_L.comem_vbar_prioritize(self._h()), "comem_vbar_prioritize")

    def deprioritize(self) -> None:
        """Moves this VBAR to the bottom: the first to be evicted."""
        check(_L.comem_vbar_deprioritize(self._h()), "comem_vbar_deprioritize")

    @property
    def watermark(self) -> int:
        """Bytes below which pages may be resident; faults above it are offloaded at once."""
        return _L.comem_vbar_watermark(self._h())

    @watermark.setter
    def watermark(self, nbytes: int) -> None:
        check(_L.comem_vbar_set_watermark(self._h(), errors.size(nbytes, "watermark")), "comem_vbar_set_watermark")

    @property
    def watermark_limit(self) -> int:
        """Eviction never lowers the watermark below this."""
        return _L.comem_vbar_watermark_limit(self._h())

    @watermark_limit.setter
    def watermark_limit(self, nbytes: int) -> None:
        check(_L.comem_vbar_set_watermark_limit(self._h(), errors.size(nbytes, "limit")),
              "comem_vbar_set_watermark_limit")

    def free_memory(self, nbytes: int) -> int:
        """Evicts at least ``nbytes`` of this VBAR (down to its limit). Returns the bytes freed."""
        freed = c_int64()
        check(_L.comem_vbar_free_memory(self._h(), errors.size(nbytes), byref(freed)), "comem_vbar_free_memory")
        return freed.value

    @property
    def loaded_size(self) -> int:
        """Resident bytes of this VBAR."""
        return _L.comem_vbar_loaded_size(self._h())

    def residency(self) -> bytes:
        """One byte per page: bit 0 resident, bit 1 pinned."""
        buf = (c_uint8 * self.pages)()
        n = check(_L.comem_vbar_residency(self._h(), buf, self.pages), "comem_vbar_residency")
        return bytes(buf)[:n]

    def write(self, offset: int, data: Union[bytes, bytearray, memoryview]) -> None:
        """Copies host bytes into resident pages at ``offset`` (raises NotFound when a page is absent)."""
        mv = memoryview(data).cast("B")
        off, sz = self._range(offset, mv.nbytes)
        buf = (ctypes.c_char * sz).from_buffer_copy(mv) if mv.readonly else (ctypes.c_char * sz).from_buffer(mv)
        check(_L.comem_vbar_write(self._h(), off, buf, sz), "comem_vbar_write")

    def read(self, offset: int, size: int) -> bytes:
        """Copies ``size`` bytes of resident pages at ``offset`` into host memory."""
        off, sz = self._range(offset, size)
        buf = ctypes.create_string_buffer(sz)
        check(_L.comem_vbar_read(self._h(), off, buf, sz), "comem_vbar_read")
        return buf.raw

    def destroy(self) -> None:
        """Evicts every page (pins ignored) and releases the reservation."""
        if self._handle is None:
            return
        self.pager._vbars.pop(self._handle, None)
        _L.comem_vbar_destroy(self._handle)
        self._handle = None

    def __repr__(self) -> str:
        return f"<comem.VBar {self.size} bytes at {self.base:#x}, {self.pages} pages of {self.page_size}>"
