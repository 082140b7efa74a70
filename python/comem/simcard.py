"""The simulated card: allocate and read bytes on the shared card a coordinator without a GPU serves.

A simulated card is a file in the per-user runtime directory that every
process naming the same card maps; the coordinator reads it as it would read
NVML. Allocating here is what ``cudaMalloc`` would be on a real card, so a
process without a GPU can play a GPU process's part: the comem.torch
simulated placement and the tests use it.
"""

from __future__ import annotations

import os
from ctypes import byref, c_int, c_int64, c_void_p
from typing import NamedTuple, Optional

from . import _lib, errors
from .errors import check

_L = _lib.lib


class CardReading(NamedTuple):
    """A reading of one card (bytes). ``scope`` is ``"device-wide"`` or ``"process-local"``."""
    total: int
    free: int
    used: int
    reserved: int
    scope: str


class SimCard:
    """A handle on a simulated card file (spec None: ``COMEM_DEVICE`` if it names one, else ``sim:24GiB``)."""

    def __init__(self, spec: Optional[str] = None) -> None:
        if spec is not None and not isinstance(spec, str):
            raise TypeError(f"spec must be a str like 'sim:24GiB' or None, not {type(spec).__name__}")
        h = c_void_p()
        check(_L.comem_simcard_open(spec.encode() if spec else None, byref(h)), "comem_simcard_open", spec or "")
        self._handle: Optional[int] = h.value
        self.spec = spec

    def _h(self) -> int:
        if self._handle is None:
            raise errors.Closed(errors.ECLOSED, "simcard", "the card handle is closed")
        return self._handle

    @property
    def cards(self) -> int:
        """How many cards the file holds."""
        return _L.comem_simcard_count(self._h())

    @property
    def path(self) -> str:
        """The card file's path."""
        return _L.comem_simcard_path(self._h()).decode()

    def alloc(self, nbytes: int, card: int = 0) -> None:
        """Allocates on the card for this process; raises Error(ENOSPC) when it does not fit."""
        check(_L.comem_simcard_alloc(self._h(), errors.device(card), errors.size(nbytes)), "comem_simcard_alloc")

    def free(self, nbytes: int, card: int = 0) -> None:
        """Frees bytes this process allocated on the card."""
        check(_L.comem_simcard_free(self._h(), errors.device(card), errors.size(nbytes)), "comem_simcard_free")

    def touch(self, card: int = 0) -> None:
        """Creates this process's context on the card (as CUDA initialisation does)."""
        check(_L.comem_simcard_touch(self._h(), errors.device(card)), "comem_simcard_touch")

    def release_self(self) -> None:
        """Releases this process's context and allocations on every card, as its exit would."""
        check(_L.comem_simcard_release_self(self._h()), "comem_simcard_release_self")

    def read(self, card: int = 0, local: bool = False) -> CardReading:
        """The card's reading: NVML-style (device-wide), or with ``local`` this process's cuMemGetInfo view."""
        t, f, u, r, sc = c_int64(), c_int64(), c_int64(), c_int64(), c_int()
        check(_L.comem_simcard_read(self._h(), errors.device(card), 1 if local else 0, byref(t), byref(f),
                                    byref(u), byref(r), byref(sc)), "comem_simcard_read")
        return CardReading(t.value, f.value, u.value, r.value, "process-local" if sc.value else "device-wide")

    def usage(self, pid: Optional[int] = None, card: int = 0) -> "tuple[int, int]":
        """(context bytes, allocated bytes) of a process (default: this one) on the card."""
        p = os.getpid() if pid is None else int(pid)
        ctx, alloc = c_int64(), c_int64()
        check(_L.comem_simcard_usage(self._h(), errors.device(card), p, byref(ctx), byref(alloc)),
              "comem_simcard_usage")
        return ctx.value, alloc.value

    def close(self) -> None:
        """Closes the handle (this process's allocations stay until it frees them or exits)."""
        if self._handle is not None:
            _L.comem_simcard_close(self._handle)
            self._handle = None

    def __enter__(self) -> "SimCard":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
