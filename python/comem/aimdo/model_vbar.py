"""comfy-aimdo's ``model_vbar`` module over comem's VBARs.

An allocation is the tuple ``(vbar, address, size)`` as in aimdo; ``fault``
returns the pages' signatures (None when offloaded); ``get_watermark`` counts
pages, ``loaded_size`` and ``free_memory`` bytes, as aimdo's do.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

from . import control
from ..pager import VBar

PAGE_SIZE = 32 << 20


class ModelVBAR:
    """One model's reservation (``size`` bytes, not clamped to the card) on an initialised device.

    ``pageout_callback`` (aimdo 0.6.0: called with ``(offset, size)`` to write a page back before it
    is evicted) is not supported: comem's pager evicts without a write-back hook, so only None is
    accepted (``comem.aimdo.LIMITS`` lists it)."""

    def __init__(self, size: int, device: int, pageout_callback: Optional[Callable[[int, int], Any]] = None) -> None:
        if pageout_callback is not None:
            raise NotImplementedError("comem.aimdo: ModelVBAR(pageout_callback=...) is not supported: comem's pager "
                                      "has no write-back hook before eviction (pages are weights, re-read on fault)")
        self._devctx = control.get_devctx(device)
        try:
            self._vbar: Optional[VBar] = self._devctx.vbar(int(size), PAGE_SIZE)
        except Exception as e:
            raise MemoryError(f"VBAR allocation failed: {e}") from e
        self.device = device
        self.max_size = size
        self.offset = 0
        self.base_addr = self._vbar.base

    def _v(self) -> VBar:
        if self._vbar is None:
            raise RuntimeError("the VBAR was freed")
        return self._vbar

    def prioritize(self, malloc_async_clamp: Optional[int] = None) -> None:
        """Top of the priority list, watermark back to the last page.

        ``malloc_async_clamp`` bounds, in aimdo, how much its cuMemAllocAsync hook may evict for one
        allocation; comem has no allocation hook, so it is accepted and has no effect."""
        self._v().prioritize()

    def deprioritize(self) -> None:
        """Bottom of the priority list: the first to be evicted."""
        self._v().deprioritize()

    def alloc(self, num_bytes: int) -> Tuple["ModelVBAR", int, int]:
        """Carves ``num_bytes`` (512-byte aligned) from the reservation: ``(vbar, address, size)``."""
        self.offset = (self.offset + 511) & ~511
        if self.offset + num_bytes > self.max_size:
            raise MemoryError("VBAR OOM")
        alloc = self.base_addr + self.offset
        self.offset += num_bytes
        return (self, alloc, num_bytes)

    def fault(self, alloc: int, size: int) -> Optional[bytes]:
        """Makes [alloc, alloc+size) resident and pinned: its signatures, or None when offloaded."""
        control.keep_room_for(self._devctx, size)
        return self._v().fault(alloc - self.base_addr, size)

    def unpin(self, alloc: int, size: int) -> None:
        """Drops the pin a fault of [alloc, alloc+size) took."""
        self._v().unpin(alloc - self.base_addr, size)

    def loaded_size(self) -> int:
        """Resident bytes (resident pages x page size)."""
        return self._v().loaded_size

    def set_watermark_limit(self, size_bytes: int) -> None:
        """Eviction never lowers the watermark below ``size_bytes``."""
        self._v().watermark_limit = size_bytes

    def set_watermark(self, size_bytes: int) -> None:
        """Moves the watermark to ``size_bytes`` (evicting the unpinned pages above it)."""
        self._v().watermark = size_bytes

    def free_memory(self, size_bytes: int) -> int:
        """Evicts up to ``size_bytes`` from the top of this VBAR, down to its limit; the bytes freed."""
        return self._v().free_memory(int(size_bytes))

    def get_nr_pages(self) -> int:
        """Pages in the reservation."""
        return self._v().pages

    def get_watermark(self) -> int:
        """The watermark in pages, as aimdo counts it."""
        v = self._v()
        return v.watermark // v.page_size

    def get_residency(self) -> List[int]:
        """One flag per page: bit 0 resident, bit 1 pinned."""
        return list(self._v().residency())

    def close(self) -> None:
        """Destroys the reservation now (aimdo 0.6.0); idempotent, and what garbage collection does."""
        v = getattr(self, "_vbar", None)
        if v is not None:
            try:
                v.destroy()
            except Exception:
                pass
            self._vbar = None

    def __del__(self) -> None:
        self.close()


def vbar_fault(alloc: Tuple[ModelVBAR, int, int]) -> Optional[bytes]:
    """Faults an allocation ``(vbar, address, size)``: its signatures, or None when offloaded."""
    vbar, offset, size = alloc
    return vbar.fault(offset, size)


def vbar_unpin(alloc: Optional[Tuple[ModelVBAR, int, int]]) -> None:
    """Unpins an allocation (None: nothing)."""
    if alloc is not None:
        vbar, offset, size = alloc
        vbar.unpin(offset, size)


def vbar_signature_compare(a: Optional[bytes], b: Optional[bytes]) -> bool:
    """True when two faults' signatures say the pages were not committed again in between."""
    if a is None or b is None:
        return False
    if len(a) != len(b):
        raise ValueError(f"Signatures of mismatched length {len(a)} != {len(b)}")
    return memoryview(a) == memoryview(b)


def vbars_reset_watermark_limits() -> None:
    """Every VBAR's watermark limit back to 0, on every initialised device."""
    for p in control.devctxs:
        p.reset_watermark_limits()


def vbars_analyze(device: Optional[int] = None) -> int:
    """Bytes committed on a device (default: the first initialised)."""
    if control.lib is None or not control.devctxs:
        return 0
    p = control.devctxs[0] if device is None else control.get_devctx(device)
    return p.usage
