"""comem's exceptions, and the checks every call runs on its arguments.

Every failure of the C library surfaces as a :class:`comem.Error` (or one of
its subclasses) carrying the status code and comem's own short description of
it. Subclasses also derive from the built-in exception a Python user would
catch for the same trouble (``TimeoutError``, ``PermissionError``, ...).

Arguments are checked before anything reaches the library: a size must be an
integer (``bool`` and ``float`` are refused with ``TypeError``) and not
negative (``ValueError``); a device index must name a device.
"""

from __future__ import annotations

import ctypes
import operator
from typing import Dict, List, Optional, Sequence, Type

from . import _lib

# The status codes and bounds are the library's (comem_constant), never copies of its headers.
_c = _lib.constant
OK = _c("OK")
EINVAL = _c("EINVAL")
ENOMEM = _c("ENOMEM")
ENODEV = _c("ENODEV")
EIO = _c("EIO")
ETIMEDOUT = _c("ETIMEDOUT")
EPROTO = _c("EPROTO")
EPERM = _c("EPERM")
EBUSY = _c("EBUSY")
ENOSPC = _c("ENOSPC")
ENOENT = _c("ENOENT")
ECLOSED = _c("ECLOSED")
ENOTSUP = _c("ENOTSUP")
EDRIVER = _c("EDRIVER")
EEXIST = _c("EEXIST")
ERANGE = _c("ERANGE")
EFORKED = _c("EFORKED")
EVERSION = _c("EVERSION")  # another protocol version: another comem install's coordinator

MAX_DEVICES = _c("MAX_DEVICES")  # device indexes are below it
MAX_KEEP = _c("MAX_KEEP")        # entries one admission may keep
NAME_MAX = _c("NAME_MAX")        # bytes of UTF-8 in a name


def status_str(status: int) -> str:
    """comem's short, stable description of a status code ("busy", "no space", ...)."""
    s = _lib.lib.comem_status_str(int(status))
    return s.decode() if s else "unknown"


class Error(Exception):
    """A comem call failed. ``status`` is the C status code, ``call`` the C function."""

    def __init__(self, status: int, call: str, detail: str = "") -> None:
        self.status = int(status)
        self.call = call
        self.detail = detail
        text = f"{call}: {status_str(status)}"
        if detail:
            text += f" ({detail})"
        super().__init__(text)


class Busy(Error):
    """The holder (or this thread) is busy: try again later. Raise it from a release callback to say so."""

    def __init__(self, status: int = EBUSY, call: str = "release", detail: str = "") -> None:
        super().__init__(status, call, detail)


class NotFound(Error, LookupError):
    """No such holder, entry, grant or file (or the process holding it is gone)."""


class Closed(Error, ConnectionError):
    """No coordinator: the connection is closed (or the client was opened to need one)."""


class TimedOut(Error, TimeoutError):
    """A deadline passed before the coordinator answered."""


class PermissionDenied(Error, PermissionError):
    """The coordinator refused this process (another user, or a wrong COMEM_TOKEN)."""


class NoDevice(Error):
    """No such device, or its driver or library is absent."""


class Forked(Error):
    """A forked child called a client its parent opened: it must open its own.

    The child has a copy of the client but none of the library's threads, and the coordinator
    knows the connection as the parent's session, so nothing the child does may reach it.
    ``opener`` is the pid that opened the client (0 when the library said it, not the binding).
    """

    def __init__(self, status: int = EFORKED, call: str = "client", detail: str = "", opener: int = 0) -> None:
        self.opener = int(opener)
        super().__init__(status, call, detail)


class Refused(Error):
    """An admission (or a pin) was refused: not enough memory could be found.

    ``short_by`` is how many bytes were missing; ``need`` the ask target the
    coordinator used; ``free_before``/``free_after`` the true free before
    asking anyone and after the receipts; ``freed`` what other holders gave
    back for it; ``asked`` the ids of the holders it asked (as ``status()``
    lists them, hex strings) and ``n_asked``/``n_busy`` how many were asked and
    answered busy. ``fits`` (an admission's refusal): the weights of it that would fit, by the
    ask target's own rule (the library's figure, ``comem_admission.fits``); 0 when nothing would.
    """

    def __init__(self, call: str, short_by: int, need: int = 0, free_before: int = 0, free_after: int = 0,
                 freed: int = 0, asked: Sequence[str] = (), n_asked: int = 0, n_busy: int = 0,
                 fits: int = 0) -> None:
        self.short_by = int(short_by)
        self.fits = int(fits)
        self.need = int(need)
        self.free_before = int(free_before)
        self.free_after = int(free_after)
        self.freed = int(freed)
        self.asked: List[str] = list(asked)
        self.n_asked = int(n_asked)
        self.n_busy = int(n_busy)
        detail = f"short by {self.short_by} bytes"
        if self.need:
            detail += f" of {self.need} needed"
        if self.n_asked:
            holders = len(set(self.asked)) or self.n_asked
            detail += (f"; {self.n_asked} ask(s) to {holders} holder(s), {self.n_busy} busy, "
                       f"{self.freed} bytes freed")
        super().__init__(ENOSPC, call, detail)


_BY_STATUS: Dict[int, Type[Error]] = {
    EBUSY: Busy, ENOENT: NotFound, ECLOSED: Closed, ETIMEDOUT: TimedOut, EPERM: PermissionDenied,
    ENODEV: NoDevice, EFORKED: Forked,
}


def error(status: int, call: str, detail: str = "") -> Error:
    """The exception for a failed status."""
    cls = _BY_STATUS.get(int(status), Error)
    return cls(status, call, detail)


def take_reason() -> str:
    """The coordinator's reason for this thread's last refused call (what the log says), once; else ''."""
    buf = ctypes.create_string_buffer(512)
    n = _lib.lib.comem_take_reason(buf, len(buf))
    return buf.value.decode("utf-8", "replace") if n else ""


def check(status: int, call: str, detail: str = "") -> int:
    """Returns status when it is not negative, else raises the matching Error, with the coordinator's
    reason for a refusal after the detail: ``comem_entry_add: out of range (m: the device cannot hold that
    much)``."""
    if status < 0:
        why = take_reason()
        if why:
            detail = f"{detail}: {why}" if detail else why
        raise error(status, call, detail)
    return status


# ---- argument checks ----

def size(value: object, what: str = "size", allow_negative: bool = False) -> int:
    """An int byte count (anything with __index__, but not bool or float), >= 0 unless allowed."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{what} must be an integer number of bytes, not {type(value).__name__}")
    v = operator.index(value)  # type: ignore[arg-type]
    if v < 0 and not allow_negative:
        raise ValueError(f"{what} must not be negative (got {v})")
    if not -(1 << 63) <= v < (1 << 63):
        raise ValueError(f"{what} does not fit in 64 bits (got {v})")
    return v


def socket_path(path: Optional[str]) -> Optional[bytes]:
    """A socket path for the library (None: the default one)."""
    if path is None:
        return None
    if not isinstance(path, str):
        raise TypeError(f"socket must be a str path or None, not {type(path).__name__}")
    return path.encode()


def device(value: object) -> int:
    """A device index 0..15."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"device must be an integer index, not {type(value).__name__}")
    v = operator.index(value)  # type: ignore[arg-type]
    if not 0 <= v < MAX_DEVICES:
        raise ValueError(f"device must be 0..{MAX_DEVICES - 1} (got {v})")
    return v


def name(value: object, what: str = "name") -> bytes:
    """A name as UTF-8, 1..63 bytes, following the library's name rule (no control characters)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    try:
        b = value.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate
        raise ValueError(f"{what} is not UTF-8 ({e.reason} at character {e.start}): {value!r}") from None
    if not b or len(b) > NAME_MAX or b"\0" in b:
        raise ValueError(f"{what} must be 1..{NAME_MAX} bytes of UTF-8 without NUL (got {value!r})")
    why = ctypes.create_string_buffer(96)
    if _lib.lib.comem_name_check(b, why, len(why)) != 0:
        raise ValueError(f"{what} {value!r}: {why.value.decode()}")
    return b


def timeout_ms(value: Optional[float]) -> int:
    """Seconds (None: the client's default) as the C API's milliseconds (-1: default)."""
    if value is None:
        return -1
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, not {type(value).__name__}")
    if value != value or value < 0:  # NaN compares unequal to itself
        raise ValueError(f"timeout must be a non-negative number of seconds (got {value})")
    if value * 1000 > 2**31 - 1:  # infinity too: the C API's longest wait is 2^31-1 ms (24.8 days)
        raise ValueError(f"timeout must be at most {(2**31 - 1) / 1000:.0f} seconds (got {value}); "
                         "None waits the client's default")
    return int(value * 1000)
