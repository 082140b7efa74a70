"""The shared-memory view: the coordinator's true free, reserve and reclaimable bytes, without a round trip.

What a batch sizer should read instead of a process-local free figure. A read
is a few atomic loads on a file the coordinator publishes next to its socket.
"""

from __future__ import annotations

from ctypes import byref, c_int64, c_void_p
from typing import Any, NamedTuple, Optional

from . import _lib, errors
from .errors import check

_L = _lib.lib


class ViewReading(NamedTuple):
    """One device as the coordinator last published it (bytes)."""
    capacity: int
    free: int
    reserve: int
    reclaimable: int  #: what other processes could release now


class ViewState(NamedTuple):
    """Whether the coordinator that publishes the view is running."""
    state: str           #: "live", "exited" (its lock is gone: the figures are frozen) or "frozen" (stopped, stuck)
    heartbeat_age: float  #: seconds since its last heartbeat (every 20 ms); -1.0 when there is none

    @property
    def live(self) -> bool:
        """True while the coordinator runs and beats."""
        return self.state == "live"


class View:
    """A reader of the coordinator's published snapshot (socket None: the default one).

    This reads the view file beside the socket, which any process of the user can write: for
    decisions, read :meth:`comem.Client.view` instead, the copy the session received sealed.
    """

    def __init__(self, socket: Optional[str] = None) -> None:
        h = c_void_p()
        check(_L.comem_view_open(errors.socket_path(socket), byref(h)), "comem_view_open",
              "is a coordinator running on that socket?")
        self._handle: Optional[int] = h.value
        self._owner: Any = None

    @classmethod
    def _bound(cls, handle: int, owner: Any) -> "View":
        """A reader of a client's sealed view (comem_client_view); it keeps its client alive."""
        v = cls.__new__(cls)
        v._handle = handle
        v._owner = owner
        return v

    def read(self, device: int = 0) -> ViewReading:
        """The device's capacity, true free, reserve and reclaimable bytes.

        Raises :class:`comem.NoDevice` for a device the coordinator does not have and
        :class:`comem.Busy` when a write stayed unfinished (the coordinator died mid-write).
        """
        dev = errors.device(device)
        if self._handle is None:
            raise errors.Closed(errors.ECLOSED, "comem_view_read", "the view is closed")
        cap, free, res, rec = c_int64(), c_int64(), c_int64(), c_int64()
        check(_L.comem_view_read(self._handle, dev, byref(cap), byref(free), byref(res), byref(rec)),
              "comem_view_read")
        return ViewReading(cap.value, free.value, res.value, rec.value)

    def state(self) -> ViewState:
        """Is the coordinator behind this view running? One system call; read figures with :meth:`read`.

        "exited" means the coordinator ended (however it ended: the kernel dropped the lock it
        held), so every figure is what it was then; "frozen" that it holds the lock but has not
        beaten for over a second.
        """
        if self._handle is None:
            raise errors.Closed(errors.ECLOSED, "comem_view_state", "the view is closed")
        age = c_int64()
        rc = _L.comem_view_state(self._handle, byref(age))
        name = {0: "live", errors.ECLOSED: "exited", errors.ETIMEDOUT: "frozen"}.get(rc)
        if name is None:
            check(rc, "comem_view_state")
            name = "live"
        return ViewState(name, age.value / 1e9 if age.value >= 0 else -1.0)

    @property
    def live(self) -> bool:
        """True while the coordinator behind this view runs (see :meth:`state`)."""
        return self.state().live

    def unregistered(self, device: int = 0) -> int:
        """Bytes the processes in the ledger hold on ``device`` beyond what they registered and their contexts."""
        return self._figure("comem_view_unregistered", device)

    def granted(self, device: int = 0) -> int:
        """Bytes granted on ``device`` and not yet resident: free on the card's reading, but promised."""
        return self._figure("comem_view_granted", device)

    def room(self, device: int = 0) -> int:
        """Bytes nobody is promised on ``device``: ``max(0, free - granted - reserve)``, from one snapshot;
        -1 while the coordinator has no reading of the card."""
        return self._figure("comem_view_room", device)

    def _figure(self, call: str, device: int) -> int:
        dev = errors.device(device)
        if self._handle is None:
            raise errors.Closed(errors.ECLOSED, call, "the view is closed")
        out = c_int64()
        check(getattr(_L, call)(self._handle, dev, byref(out)), call)
        return out.value

    def close(self) -> None:
        """Unmaps the snapshot."""
        if self._handle is not None:
            _L.comem_view_close(self._handle)
            self._handle = None
            self._owner = None

    def __enter__(self) -> "View":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
