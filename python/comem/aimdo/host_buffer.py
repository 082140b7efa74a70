"""comfy-aimdo's ``host_buffer`` over plain host memory: growable staging buffers and file readers.

ComfyUI v0.39 keeps each dynamic model's pins in a :class:`HostBuffer` (one per
pool, made empty and grown pin by pin) and reads weights from disk through
:meth:`HostBuffer.read_file_slice` and :func:`read_file_to_device`. Here a
buffer is an anonymous private mapping reserved at its largest size (no RAM
is committed until written), grown by :meth:`HostBuffer.extend` and cut back
by :meth:`HostBuffer.truncate`, which hands the cut pages back to the kernel.

Page locks: ComfyUI v0.39 locks each pin itself (``cudaHostRegister``) and
books it with its pin budget, which comem's adapter puts on the ledger; a
buffer here locks a range only where asked (``register``), through the CUDA
runtime torch carries, and without CUDA there is nothing to lock (a no-op).
Device copies go through torch on the stream given. aimdo's own readers
(a ring of page-locked bounce buffers, O_DIRECT, marking pages cold) are not
re-implemented: the reads here are ``preadv`` into the buffer, then a copy.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from typing import Any, Dict, Optional

_PAGE = mmap.PAGESIZE
_bounce: Optional["HostBuffer"] = None  #: read_file_to_device's staging buffer, kept between reads


def _fd(file_obj: Any) -> int:
    return file_obj if isinstance(file_obj, int) else file_obj.fileno()


def _cudart() -> Optional[Any]:
    """torch's CUDA runtime where a GPU is there, else None (nothing to page-lock or copy to)."""
    try:
        import torch
        return torch.cuda.cudart() if torch.cuda.is_available() else None
    except Exception:
        return None


def _clear_cuda_error() -> None:
    """Reads and so clears the CUDA runtime's last error (a refused unregister leaves one, which
    torch's next launch check would report as its own), through the libcudart torch loaded."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            path = next((line.split()[-1] for line in f if "libcudart" in line.split()[-1]), None)
        if path is not None:
            ctypes.CDLL(path).cudaGetLastError()
    except (OSError, AttributeError):
        pass  # no such file (not Linux) or no such symbol: nothing was left behind to read


def _device_copy(host_ptr: int, size: int, device_ptr: int, device: int, stream: int, to_device: bool) -> None:
    """Copies ``size`` bytes between host memory and a device pointer on ``stream`` (0: the current one),
    and waits for it: the host bytes may be reused as soon as this returns."""
    import torch
    from .. import torch as ctorch
    if not torch.cuda.is_available():
        raise RuntimeError("a device copy needs CUDA, and torch sees no GPU")
    host = torch.frombuffer((ctypes.c_uint8 * size).from_address(host_ptr), dtype=torch.uint8)
    dev = torch.as_tensor(ctorch._CudaArray(device_ptr, size), device=torch.device("cuda", device))
    s = torch.cuda.ExternalStream(stream) if stream else torch.cuda.current_stream(dev.device)
    with torch.cuda.stream(s):
        (dev.copy_(host) if to_device else host.copy_(dev))
    s.synchronize()


def _pread_into(fd: int, view: memoryview, offset: int) -> None:
    """Fills ``view`` from the file at ``offset`` (POSIX's positioned read: HostBuffer is POSIX only)."""
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            raise RuntimeError(f"HostBuffer: the file ended {len(view) - done} bytes short of the slice")
        done += n


class HostBuffer:
    """A growable host buffer: ``size`` bytes in use out of ``max(size, max_grow_size)`` reserved.

    ``prewarm`` and ``mark_cold`` are aimdo's tuning of its own reader (pages written ahead, pages
    dropped from the page cache after a read); they are kept and have no effect here."""

    def __init__(self, size: int, prewarm: int = 0, max_grow_size: int = 0, mark_cold: bool = True) -> None:
        if os.name == "nt":
            raise RuntimeError("comem.aimdo's HostBuffer needs a POSIX system (an anonymous mapping reserved at its "
                               "largest size); on Windows ComfyUI gets it from the real comfy-aimdo")
        size = int(size)
        self.size = 0
        self.prewarm = max(0, int(prewarm))
        self.mark_cold = bool(mark_cold)
        self.capacity = max(size, int(max_grow_size))
        flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0x20) | getattr(mmap, "MAP_NORESERVE", 0)
        # A mapping of 0 bytes cannot exist: an empty buffer reserves one page and uses none of it.
        self._map = mmap.mmap(-1, max(self.capacity, _PAGE), flags=flags)
        self._anchor = ctypes.c_char.from_buffer(self._map)  # the address; keeps the mapping in place
        self._locked: Dict[int, int] = {}  #: offset -> bytes page-locked through register()
        if size:
            self.extend(size)

    def get_raw_address(self) -> int:
        """The buffer's first byte (it never moves: growth stays inside the reservation)."""
        return ctypes.addressof(self._anchor)

    def extend(self, size: int, reallocate: bool = False, register: bool = True) -> int:
        """Grows the buffer by ``size`` bytes; returns the address of the new bytes. RuntimeError when
        the reservation cannot hold them (``reallocate``, aimdo's moving growth, is not offered: a
        buffer here never moves, since ComfyUI keeps tensors over it)."""
        size = int(size)
        if size < 0 or self.size + size > self.capacity:
            raise RuntimeError(f"HostBuffer.extend failed: {self.size} + {size} bytes exceed the "
                               f"{self.capacity} reserved")
        offset = self.size
        self.size += size
        if register and size:
            self.register(offset, size)
        return self.get_raw_address() + offset

    def read_file_slice(self, file_obj: Any, file_offset: int, size: int, offset: int = 0, stream: int = 0,
                        device_ptr: int = 0, device: Optional[int] = -1) -> None:
        """Reads ``size`` bytes of the file at ``file_offset`` into the buffer at ``offset`` (the
        buffer grows to cover them), then, with ``device_ptr``, copies them to the device too."""
        offset, size = int(offset), int(size)
        if offset < 0 or size < 0 or offset + size > self.capacity:
            raise RuntimeError(f"HostBuffer.read_file_slice failed: [{offset}, {offset + size}) is outside the "
                               f"{self.capacity} bytes reserved")
        _pread_into(_fd(file_obj), memoryview(self._map)[offset:offset + size], int(file_offset))
        self.size = max(self.size, offset + size)
        if device_ptr:
            _device_copy(self.get_raw_address() + offset, size, int(device_ptr), -1 if device is None else int(device),
                         int(stream or 0), to_device=True)

    def register(self, offset: int, size: int) -> None:
        """Page-locks ``[offset, offset + size)`` for the GPU (nothing to do without one)."""
        offset, size = int(offset), int(size)
        if offset < 0 or size <= 0 or offset + size > self.size:
            raise RuntimeError(f"HostBuffer.register failed: [{offset}, {offset + size}) is not in use")
        cudart = _cudart()
        if cudart is not None and cudart.cudaHostRegister(self.get_raw_address() + offset, size, 1) != 0:
            raise RuntimeError("HostBuffer.register failed: cudaHostRegister refused the range")
        self._locked[offset] = size

    def unregister(self, offset: int) -> None:
        """Drops the page lock that starts at ``offset``."""
        offset = int(offset)
        if offset not in self._locked:
            raise RuntimeError(f"HostBuffer.unregister failed: no range registered at {offset}")
        del self._locked[offset]
        cudart = _cudart()
        if cudart is not None and cudart.cudaHostUnregister(self.get_raw_address() + offset) != 0:
            raise RuntimeError("HostBuffer.unregister failed: cudaHostUnregister refused the range")

    def truncate(self, size: int, do_unregister: bool = True) -> None:
        """Cuts the buffer back to ``size`` bytes and returns the cut pages' RAM; with ``do_unregister``,
        first drops the page locks of the cut part (those registered here, and one ComfyUI made itself
        where the cut starts: v0.39 locks each pin where it begins)."""
        size = int(size)
        if size < 0 or size > self.size:
            raise RuntimeError(f"HostBuffer.truncate failed: {size} is not within the {self.size} bytes in use")
        if do_unregister:
            cudart = _cudart()
            ours = size in self._locked
            for offset in sorted(o for o in self._locked if o >= size):
                self.unregister(offset)
            if cudart is not None and size < self.size and not ours and \
                    cudart.cudaHostUnregister(self.get_raw_address() + size) != 0:
                _clear_cuda_error()  # no lock began there: leave no error for torch to find later
        first = -(-size // _PAGE) * _PAGE  # whole pages past the kept bytes only
        if first < self.size:
            self._map.madvise(mmap.MADV_DONTNEED, first, -(-self.size // _PAGE) * _PAGE - first)
        self.size = size

    def __del__(self) -> None:
        m = getattr(self, "_map", None)
        if m is None:
            return
        for offset in list(getattr(self, "_locked", {})):
            try:
                self.unregister(offset)
            except RuntimeError:
                pass
        self._anchor = None
        try:
            m.close()
        except BufferError:
            pass  # a tensor still views it: the mapping lives until that goes
        self._map = None


def read_file_to_device(file_obj: Any, file_offset: int, size: int, stream: int, device_ptr: int, device: int,
                        mark_cold: bool = True) -> None:
    """Reads ``size`` bytes of the file at ``file_offset`` straight to ``device_ptr`` on ``device``
    (through a staging buffer kept for the next read; :func:`cleanup_file_reader` frees it)."""
    global _bounce
    size = int(size)
    if _bounce is None or _bounce.capacity < size:
        _bounce = HostBuffer(0, 0, size)
    _bounce.truncate(0, do_unregister=False)
    _bounce.read_file_slice(file_obj, file_offset, size, 0, stream, device_ptr, device)


def write_device_to_file(file_obj: Any, file_offset: int, size: int, stream: int, device_ptr: int,
                         device: int) -> None:
    """Writes ``size`` bytes from ``device_ptr`` to the file at ``file_offset`` (aimdo 0.6.0)."""
    staging = HostBuffer(int(size), 0, int(size), True)
    _device_copy(staging.get_raw_address(), int(size), int(device_ptr), int(device), int(stream or 0),
                 to_device=False)
    write_host_to_file(file_obj, file_offset, size, staging.get_raw_address())


def write_host_to_file(file_obj: Any, file_offset: int, size: int, host_ptr: int) -> None:
    """Writes ``size`` bytes at ``host_ptr`` to the file at ``file_offset`` (aimdo 0.6.0)."""
    size, done = int(size), 0
    view = memoryview((ctypes.c_uint8 * size).from_address(int(host_ptr))).cast("B")
    while done < size:
        if hasattr(os, "pwrite"):
            n = os.pwrite(_fd(file_obj), view[done:], int(file_offset) + done)
        else:  # Windows: no positioned write in os
            os.lseek(_fd(file_obj), int(file_offset) + done, os.SEEK_SET)
            n = os.write(_fd(file_obj), view[done:])
        if n <= 0:
            raise RuntimeError("xfer_file_write failed")
        done += n


def cleanup_file_reader() -> None:
    """Frees :func:`read_file_to_device`'s staging buffer."""
    global _bounce
    _bounce = None
