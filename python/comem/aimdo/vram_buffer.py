"""comfy-aimdo's ``vram_buffer`` module over comem's pager: a growable device buffer that is never evicted.

A ``VRAMBuffer`` is a VBAR of ``max_size`` bytes on an initialised device
whose pages are faulted (committed and pinned) as ``get`` reaches them and
stay pinned until the buffer is destroyed, so the pager counts them in its
usage and its eviction never takes them, as aimdo's own buffer (plain device
memory) is never taken. Growth goes through the pager's fault, so it evicts
other processes' and this process's unpinned weight pages first; a growth
that cannot fit raises RuntimeError, as aimdo's does. ComfyUI 783545f6 uses one
per offload stream as its cast buffer (``get_aimdo_cast_buffer``).
"""

from __future__ import annotations

from typing import Optional, Tuple

from . import control
from ..pager import VBar

CHUNK = 16 << 20  #: growth step (aimdo's on CUDA), rounded up to the backend's granularity


class VRAMBuffer:
    """Up to ``max_size`` bytes of device memory on ``device``, committed as ``get`` reaches them."""

    def __init__(self, max_size: int, device: int) -> None:
        self._devctx = control.get_devctx(device)
        self.device = device
        self.max_size = max_size
        gran = max(1, self._devctx.granularity)
        self._chunk_size = (CHUNK + gran - 1) // gran * gran
        try:
            self._vbar: Optional[VBar] = self._devctx.vbar(int(max_size), self._chunk_size)
        except Exception as e:
            raise RuntimeError(f"VRAM reservation failed: {e}") from e
        self._vbar.watermark_limit = self._vbar.size  # eviction never walks into it
        self.base_addr = self._vbar.base
        self._allocated = 0

    def size(self) -> int:
        """Bytes committed so far (whole chunks)."""
        return self._allocated

    def get(self, size: int, offset: int = 0) -> Tuple["VRAMBuffer", int, int]:
        """The allocation ``(buffer, address, size)`` at ``offset``, growing the buffer to cover it."""
        offset, size = int(offset), int(size)
        need = size + offset
        if need > self._allocated:
            v = self._v()
            grow_to = (need + self._chunk_size - 1) // self._chunk_size * self._chunk_size
            if grow_to > v.size:
                raise RuntimeError(f"VRAM grow failed: {need} bytes (the buffer reserves {v.size})")
            if v.watermark < grow_to:  # vbars_reset_watermark_limits() or an eviction moved it
                v.watermark = v.size
            v.watermark_limit = v.size
            if v.fault(self._allocated, grow_to - self._allocated) is None:
                raise RuntimeError(f"VRAM grow failed: {need} bytes")
            self._allocated = grow_to
        return (self, self.base_addr + offset, size)

    def _v(self) -> VBar:
        if self._vbar is None:
            raise RuntimeError("the VRAMBuffer was destroyed")
        return self._vbar

    def __del__(self) -> None:
        v = getattr(self, "_vbar", None)
        if v is not None:
            try:
                v.destroy()  # pins ignored: the buffer's owner is gone
            except Exception:
                pass
            self._vbar = None
