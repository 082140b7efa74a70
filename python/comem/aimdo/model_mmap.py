"""comfy-aimdo's ``model_mmap`` module: a read-only view of a model file at a stable address.

A private mapping of the whole file (``ModelMMAP(path).get()`` is its
address, ``get_file_handle()`` the open descriptor) through Python's ``mmap``;
``bounce()`` drops the mapping's pages from this process (the kernel reads them
again on the next touch). Nothing here touches the device or the pager: the
bytes are host page cache, which the kernel, not comem, reclaims.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from typing import Optional, Union


class ModelMMAP:
    """The file at ``filepath``, mapped privately (copy-on-write: writes never reach the file)."""

    def __init__(self, filepath: Union[str, bytes, "os.PathLike[str]"]) -> None:
        self._fd: Optional[int] = None
        self._map: Optional[mmap.mmap] = None
        try:
            self._fd = os.open(os.fspath(filepath), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            if os.fstat(self._fd).st_size <= 0:
                raise OSError(f"empty file: {filepath!r}")
            self._map = mmap.mmap(self._fd, 0, access=mmap.ACCESS_COPY)
            self._anchor = ctypes.c_char.from_buffer(self._map)
        except OSError as e:
            self.close()
            raise RuntimeError(f"ModelMMAP allocation failed for {filepath!r}: {e}") from e
        self.state = ctypes.addressof(self._anchor)

    def get(self) -> int:
        """The mapping's address."""
        return self.state

    def get_file_handle(self) -> int:
        """The file's descriptor (kept open as long as the mapping)."""
        if self._fd is None:
            raise RuntimeError("the ModelMMAP is closed")
        return self._fd

    def bounce(self) -> bool:
        """Drops the mapping's resident pages (MADV_DONTNEED); False where the platform cannot."""
        if self._map is None or not hasattr(mmap, "MADV_DONTNEED"):
            return False
        try:
            self._map.madvise(mmap.MADV_DONTNEED)
        except OSError:
            return False
        return True

    def close(self) -> None:
        """Unmaps and closes the file (idempotent; garbage collection does it too)."""
        self._anchor = None
        if getattr(self, "_map", None) is not None:
            try:
                self._map.close()
            except BufferError:  # someone still holds a view of it: the kernel unmaps it with the process
                pass
            self._map = None
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()
