"""The simulated card: allocate and read bytes on the shared card a coordinator serves when asked (``sim:...``).

A simulated card is a file in the per-user runtime directory that every
process naming the same card maps; the coordinator reads it as it would read
NVML. Allocating here is what ``cudaMalloc`` would be on a real card, so a
process without a GPU can play a GPU process's part: the comem.torch
simulated placement and the tests use it.
"""

from __future__ import annotations

import ctypes
import logging
import os
from ctypes import byref, c_int, c_int64, c_void_p
from typing import NamedTuple, Optional

from . import _lib, errors
from .errors import check

_L = _lib.lib
log = logging.getLogger("comem")


def _served_path(spec: str) -> str:
    return spec.split(":path=", 1)[1] if ":path=" in spec else ""


class CardReading(NamedTuple):
    """A reading of one card (bytes). ``scope`` is ``"device-wide"`` or ``"process-local"``."""
    total: int
    free: int
    used: int
    reserved: int
    scope: str


def coordinator_card(socket: Optional[str] = None) -> Optional[str]:
    """The spec of the simulated card the coordinator at socket (None: the usual one) serves, or None.

    None when no coordinator answers there or it serves real cards.
    """
    from .client import Client
    why = ctypes.create_string_buffer(512)
    if _L.comem_probe(errors.socket_path(socket), 1000, why, len(why)) != 0:
        return None
    try:
        with Client("simcard", role="tool", socket=socket, require_coordinator=True) as c:
            spec = c.status().get("coordinator", {}).get("card_spec")
    except errors.Error:
        return None
    return spec if isinstance(spec, str) and spec.startswith("sim") else None


class SimCard:
    """A handle on a simulated card file.

    spec None: ``COMEM_DEVICE`` if it names a simulated card, else the card the coordinator (at
    ``socket``, None: the usual one) serves, else ``sim:24GiB``. A card that is not the one a
    running coordinator serves gets one warning: its allocations are invisible to that coordinator.
    """

    def __init__(self, spec: Optional[str] = None, socket: Optional[str] = None) -> None:
        if spec is not None and not isinstance(spec, str):
            raise TypeError(f"spec must be a str like 'sim:24GiB' or None, not {type(spec).__name__}")
        served = coordinator_card(socket)
        if spec is None and not os.environ.get("COMEM_DEVICE", "").startswith("sim"):
            spec = served
        h = c_void_p()
        check(_L.comem_simcard_open(spec.encode() if spec else None, byref(h)), "comem_simcard_open", spec or "")
        self._handle: Optional[int] = h.value
        self.spec = spec
        if served is not None and served != spec and _served_path(served) != self.path:
            log.warning("comem: this simulated card (%s) is not the one the coordinator serves (%s): what is "
                        "allocated here is invisible to it; open SimCard() without a spec to share its card",
                        self.path, served)

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
