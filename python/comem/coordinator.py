"""A coordinator on a thread of this process (``comem_coord_start``), for hosts and tests; and the daemon's.

The daemon ``comemd`` is the usual coordinator; a host can instead run one
inside itself (``Client(..., embed=True)`` does so when none answers).
:func:`ensure_running` (from :mod:`comem.autostart`) finds this user's
``comemd`` or starts one, detached, when none answers.
"""

from __future__ import annotations

from ctypes import byref, c_void_p
from typing import Optional

from . import _lib, errors
from .autostart import OtherVersion, Running, comemd_path, ensure_running
from .errors import check

_L = _lib.lib

__all__ = ["Coordinator", "OtherVersion", "Running", "comemd_path", "ensure_running"]


class Coordinator:
    """Starts a coordinator listening on ``socket`` (None: the default) over ``device`` (None: COMEM_DEVICE).

    ``device`` is ``"auto"``, ``"nvml"``, ``"cuda"`` or a simulated card (``"sim:24GiB"``). Auto without a GPU
    serves no card: host RAM alone (``COMEM_RAM``, else ``machine``; docs/hostram.md).
    Raises :class:`comem.Error` (EEXIST) when another coordinator answers there, and :class:`comem.NoDevice`
    when there is nothing to serve (no card and ``COMEM_RAM=off``).
    """

    def __init__(self, socket: Optional[str] = None, device: Optional[str] = None) -> None:
        if device is not None and not isinstance(device, str):
            raise TypeError(f"device must be a str spec or None, not {type(device).__name__}")
        h = c_void_p()
        check(_L.comem_coord_start(errors.socket_path(socket), device.encode() if device else None, byref(h)),
              "comem_coord_start", socket or "the default socket")
        self._handle: Optional[int] = h.value
        self.socket = socket

    def stop(self) -> None:
        """Stops the coordinator's thread; its sessions end."""
        if self._handle is not None:
            _L.comem_coord_stop(self._handle)
            self._handle = None

    def __enter__(self) -> "Coordinator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
