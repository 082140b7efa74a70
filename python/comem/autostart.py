"""This user's coordinator, found or started: ``comemd``, detached, one only.

:func:`ensure_running` probes the socket (``COMEM_SOCKET``, else the per-user
one). When a coordinator answers it is used as it is, whoever started it (the
systemd user unit, a person, another process). When nobody answers (nothing at
the path, or a stale socket) it starts the ``comemd`` this comem goes with
(:func:`comemd_path`), detached from the caller, with ``--started-by "NAME
(pid N)"``, and waits until it answers. ``COMEM_AUTOSTART=0`` switches the
starting off.

One only: several processes may call this at the same moment (a ComfyUI host
and its workers starting together), and each may start a ``comemd``; comemd
takes ``PATH.lock`` before it binds, so one wins and the others exit at once
(the library's ``COMEMD_EXIT_TAKEN`` status; "another coordinator already runs
on PATH" in the log, for a person), and every caller ends up talking to the one
that won. The systemd unit and this never fight for the socket for the same
reason.

A coordinator of another comem install that speaks another protocol version
is reported (:class:`OtherVersion`: the socket, its pid and executable, and
the ``comemd`` this process would have started), never half-used and never
doubled by a second coordinator on another socket. The library's probe tells
it (``comem_probe_peer``: ``EVERSION``, with the version and the pid); this
module speaks no protocol itself.

The daemon is detached: a session of its own (no terminal's hangup or ^C
reaches it), run from ``/``, standard input from ``/dev/null``, standard
output and error appended to ``comemd.log`` in the per-user runtime directory
(:func:`comem.runtime_dir`), no other descriptor of the caller. On Windows the
same: a process detached from the caller's console in a process group of its
own (no Ctrl-C of the caller's reaches it), run from the system folder, the
coordinator's address a named pipe, which is probed by opening it. It stays
the caller's child while the caller lives, and a thread of the caller waits
for it: a comemd that lost the
lock is reaped at once, never left a zombie (a container's PID 1 often reaps
nothing, so a double fork would leave one per loser there); when the caller
exits the daemon runs on, adopted like any orphan. Its environment is the
caller's, less ``CUDA_VISIBLE_DEVICES`` (the ledger is the machine's, not one
process's view of it) and ``LD_PRELOAD`` (``comem run``'s preload must not
wrap the coordinator itself).

A coordinator started here goes away by itself: ``--exit-idle`` makes it exit
once no process has been connected for :func:`grace_seconds` (10 minutes unless
``COMEM_AUTOSTART_GRACE`` says otherwise), and the next client starts another.
"""

from __future__ import annotations

import ctypes
import logging
import os
import stat
import subprocess
import sys
import threading
import time
from typing import List, NamedTuple, Optional, Tuple

from . import _bin, _lib, errors
from .client import Client, default_socket, runtime_dir

_WINDOWS = sys.platform == "win32"
_COMEMD = "comemd.exe" if _WINDOWS else "comemd"  # the program's file in a folder

_L = _lib.lib
_c = _lib.constant  # the library's values (comem_constant): never copies of its headers

#: The environment variable that switches the starting off ("0", "off", "false", "no").
SWITCH = "COMEM_AUTOSTART"
#: How long a coordinator started here lives on after its last client left (``comemd --exit-idle``), in
#: seconds; ``COMEM_AUTOSTART_GRACE`` overrides it (``0``: it never exits on its own).
GRACE_S = 600.0
GRACE = "COMEM_AUTOSTART_GRACE"
#: The log the started daemon writes, in the per-user runtime directory.
LOG_NAME = "comemd.log"
_LOG_ROTATE = 8 << 20  # a log past this is renamed to comemd.log.1 before the next start

#: The frame header's magic and the protocol version this comem speaks (src/wire/wire.h), as the library has
#: them: a coordinator that answers in another version is another install's (:class:`OtherVersion`).
WIRE_MAGIC: int = _c("WIRE_MAGIC")
WIRE_VERSION: int = _c("WIRE_VERSION")
_EXIT_TAKEN = _c("COMEMD_EXIT_TAKEN")  # comemd's status when another coordinator holds the socket's lock


class Running(NamedTuple):
    """The coordinator that answers, as :func:`ensure_running` found or started it."""
    socket: str                #: its socket path
    pid: int                   #: its process
    started_by: Optional[str]  #: what it was told by ``--started-by`` (None: nobody said: the unit, a person)
    started: bool              #: True when this call started it (its comemd won)
    binary: Optional[str]      #: the comemd this call started, else None
    log: Optional[str]         #: where that comemd logs, else None


class OtherVersion(errors.Error):
    """The coordinator at the socket speaks another protocol version: another comem install's ``comemd``.

    ``socket``, ``pid`` (None when unknown), ``executable`` (what could be read of its program; None when
    nothing could), ``theirs`` (its protocol version, None when it only said it refuses ours), ``ours``
    and ``would_start`` (the comemd this process would have started; None when none was found).
    """

    def __init__(self, socket: str, pid: Optional[int], executable: Optional[str], theirs: Optional[int],
                 would_start: Optional[str]) -> None:
        self.socket = socket
        self.pid = pid
        self.executable = executable
        self.theirs = theirs
        self.ours = WIRE_VERSION
        self.would_start = would_start
        speaks = f"protocol version {theirs}" if theirs is not None else "another protocol version"
        who = f"pid {pid}" if pid is not None else "pid unknown"
        exe = executable or "its executable cannot be read"
        mine = would_start or "none found (" + "; ".join(search_places()) + ")"
        super().__init__(errors.EPROTO, "ensure_running",
                         f"the coordinator at {socket} speaks {speaks}, this comem {WIRE_VERSION}: another "
                         f"install's comemd ({who}, {exe}); this comem's comemd is {mine}. Stop the other one "
                         f"(systemctl --user stop comemd, or kill {pid if pid is not None else 'it'}) or give this "
                         f"process another COMEM_SOCKET; no second coordinator was started")


def enabled(autostart: Optional[bool] = None) -> bool:
    """Whether to start a coordinator when none answers: ``autostart`` when given, else ``COMEM_AUTOSTART``
    (unset or anything but ``0``, ``off``, ``false``, ``no``: on)."""
    if autostart is not None:
        return bool(autostart)
    return os.environ.get(SWITCH, "").strip().lower() not in ("0", "off", "false", "no")


def search_places() -> List[str]:
    """Where :func:`comemd_path` looks, in order: ``$COMEM_BIN_DIR/comemd`` when set, then the places
    :func:`comem.binary_path` tries (the wheel's bundled copy, an installed tree, the source tree's
    build, ``PATH``)."""
    places = []
    bin_dir = os.environ.get("COMEM_BIN_DIR")
    if bin_dir:
        places.append(os.path.join(bin_dir, _COMEMD))
    places += [os.path.abspath(p) for p, _ in _bin._candidates("comemd")]
    return places


def comemd_path() -> Optional[str]:
    """The ``comemd`` to start, else None: ``$COMEM_BIN_DIR/comemd`` when that is an executable file
    (an explicit choice, taken as it is; on Windows ``comemd.exe``, a program file), else
    :func:`comem.binary_path` ``("comemd")``."""
    bin_dir = os.environ.get("COMEM_BIN_DIR")
    if bin_dir:
        forced = os.path.join(bin_dir, _COMEMD)
        # Windows has no execute bit: there the file must be a program (PE) to be taken.
        if _bin._is_native(forced) if _WINDOWS else os.path.isfile(forced) and os.access(forced, os.X_OK):
            return os.path.abspath(forced)
    try:
        return _bin.binary_path("comemd")
    except FileNotFoundError:
        return None


def _resolve(socket: Optional[str]) -> str:
    if socket is not None and not isinstance(socket, str):
        raise TypeError(f"socket must be a str path or None, not {type(socket).__name__}")
    return socket or os.environ.get("COMEM_SOCKET") or default_socket()


def _probe(path: str, timeout_ms: int) -> Tuple[int, str]:
    """comem_probe: the status (``errors.OK``: a coordinator of this comem answers) and its line for a person."""
    why = ctypes.create_string_buffer(512)
    rc = _L.comem_probe(path.encode(), timeout_ms, why, len(why))
    return rc, why.value.decode(errors="replace")


class _Peer(NamedTuple):
    """Who is at a socket, as the library's probe (comem_probe_peer) found it."""
    status: int             # the probe's: errors.OK (ours answers), errors.EVERSION (another install's), ...
    why: str                # the probe's line for a person
    pid: Optional[int]      # the process that took the connection, as the system names it (None: not named)
    version: Optional[int]  # with EVERSION, the protocol version it speaks (None: it refused ours, naming none)


def _look(path: str, timeout_ms: int = 1000) -> Optional[_Peer]:
    """Who listens at ``path``: None when nobody (nothing there, or a stale socket), else what the probe found:
    its status and reason, the listener's pid (the kernel's word, SO_PEERCRED; on Windows the pipe's server)
    and, for a coordinator of another protocol version, that version."""
    why = ctypes.create_string_buffer(512)
    pid, version = ctypes.c_int64(-1), ctypes.c_int(0)
    rc = _L.comem_probe_peer(path.encode(), timeout_ms, ctypes.byref(pid), ctypes.byref(version), why, len(why))
    if rc in (errors.ENOENT, errors.ECLOSED) and pid.value < 0:
        return None  # no connection was made: nobody listens there
    return _Peer(rc, why.value.decode(errors="replace"), pid.value if pid.value > 0 else None,
                 version.value if rc == errors.EVERSION and version.value > 0 else None)


def _executable(pid: Optional[int]) -> Optional[str]:
    """What can be read of a process's program: /proc/PID/exe (unreadable when it is not dumpable, as comemd
    is), else its argv[0] from /proc/PID/cmdline; on Windows its image's path (comemd.exe lets its user query
    it)."""
    if pid is None:
        return None
    if _WINDOWS:
        return _image_of(pid)
    try:
        return "executable " + os.readlink(f"/proc/{pid}/exe")
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0")[0].decode(errors="replace")
        if argv0:
            return f"started as {argv0} (its executable cannot be read: it is not dumpable)"
    except OSError:
        pass
    return None


def _image_of(pid: int) -> Optional[str]:
    k32 = ctypes.WinDLL("kernel32", use_last_error=True)
    k32.OpenProcess.restype = ctypes.c_void_p
    handle = k32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return None
    try:
        buf, size = ctypes.create_unicode_buffer(1024), ctypes.c_ulong(1024)
        if not k32.QueryFullProcessImageNameW(ctypes.c_void_p(handle), 0, buf, ctypes.byref(size)):
            return None
        return "executable " + buf.value
    finally:
        k32.CloseHandle(ctypes.c_void_p(handle))


def _open_log(path: str) -> int:
    """comemd.log in the private runtime directory, opened to append: a regular file of ours, never a link."""
    try:
        if os.lstat(path).st_size > _LOG_ROTATE:
            os.replace(path, path + ".1")
    except FileNotFoundError:
        pass
    if _WINDOWS:
        return _open_log_windows(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        os.close(fd)
        raise errors.PermissionDenied(errors.EPERM, "ensure_running",
                                      f"refusing {path}: the log must be a regular file of uid {os.getuid()}")
    return fd


def _open_log_windows(path: str) -> int:
    """_open_log on Windows: opened for appending only (FILE_APPEND_DATA), so every write of every comemd
    that shares it lands at its end (the C runtime's O_APPEND is its own seek, which a child's runtime does
    not do), a link at the path opened as itself and refused; the folder is the user's alone
    (comem_runtime_dir_why checked its access list)."""
    import msvcrt
    k32 = ctypes.WinDLL("kernel32", use_last_error=True)
    k32.CreateFileW.restype = ctypes.c_void_p
    k32.CreateFileW.argtypes = [ctypes.c_wchar_p, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                                ctypes.c_ulong, ctypes.c_void_p]
    append, share, open_always = 0x0004 | 0x00100000 | 0x0080, 0x7, 4  # FILE_APPEND_DATA | SYNCHRONIZE | READ_ATTR
    flags = 0x80 | 0x00200000  # FILE_ATTRIBUTE_NORMAL | FILE_FLAG_OPEN_REPARSE_POINT: a link is not followed
    handle = k32.CreateFileW(path, append, share, None, open_always, flags, None)
    if handle is None or handle == ctypes.c_void_p(-1).value:
        raise errors.PermissionDenied(errors.EPERM, "ensure_running",
                                      f"cannot open {path} to append: error {ctypes.get_last_error()}")
    fd = msvcrt.open_osfhandle(handle, os.O_WRONLY | os.O_APPEND)
    if not stat.S_ISREG(os.fstat(fd).st_mode) or os.path.islink(path):
        os.close(fd)
        raise errors.PermissionDenied(errors.EPERM, "ensure_running", f"refusing {path}: not a regular file")
    return fd


def _spawn(binary: str, args: List[str], log: str) -> subprocess.Popen:
    """Starts ``binary args`` detached (see the module), with a thread that waits for it."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "LD_PRELOAD")}
    fd = _open_log(log)
    try:
        if _WINDOWS:
            detached = subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP
            proc = subprocess.Popen([binary, *args], stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=env,
                                    cwd=os.environ.get("SystemRoot"), creationflags=detached, close_fds=True)
        else:
            proc = subprocess.Popen([binary, *args], stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=env,
                                    cwd="/", start_new_session=True, close_fds=True)
    finally:
        os.close(fd)
    threading.Thread(target=proc.wait, name=f"comem-comemd-{proc.pid}", daemon=True).start()
    return proc


def _alive(proc: subprocess.Popen) -> bool:
    if _WINDOWS:
        return proc.poll() is None  # no zombies there: its handle says whether it ended
    pid = proc.pid
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def _lines_of(log: str, offset: int, pid: int) -> List[str]:
    """What process ``pid`` wrote to the log since ``offset`` (comemd's lines start "comem[PID] ")."""
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read(1 << 20).decode(errors="replace")
    except OSError:
        return []
    mark = f"comem[{pid}] "
    return [line for line in text.splitlines() if line.startswith(mark)]


def _default_started_by() -> str:
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] not in ("", "-c", "-m") else "python"
    return f"{prog} (pid {os.getpid()})"


def _check_started_by(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"started_by must be a str, not {type(text).__name__}")
    raw = text.encode()
    why = ctypes.create_string_buffer(64)
    if not raw or len(raw) > 127 or _L.comem_name_check(raw, why, len(why)) != 0:
        rule = why.value.decode() if raw and len(raw) <= 127 else "1 to 127 bytes"
        raise ValueError(f"started_by breaks comemd's rule: {rule} (got {text!r})")
    return text


def _found(path: str, spawned: Optional[int], binary: Optional[str], log: Optional[str]) -> Running:
    """The coordinator that answers at ``path``, from its own snapshot."""
    with Client("comem-autostart", role="tool", socket=path, require_coordinator=True) as c:
        co = c.status()["coordinator"]
    pid = int(co["pid"])
    started = spawned is not None and pid == spawned
    return Running(path, pid, co.get("started_by"), started, binary if started else None, log if started else None)


def grace_seconds() -> float:
    """How long a coordinator started here lives on after its last client left (``COMEM_AUTOSTART_GRACE``,
    default :data:`GRACE_S`; 0 never exits). A value that is not a number of seconds >= 0 is said once in the
    log and the default is used."""
    text = os.environ.get(GRACE, "").strip()
    if not text:
        return GRACE_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value >= 0 and value < 1e9):  # also NaN
        logging.getLogger("comem").warning("comem: %s=%r is not a number of seconds >= 0; using %g", GRACE, text,
                                           GRACE_S)
        return GRACE_S
    return value


def ensure_running(socket: Optional[str] = None, timeout: float = 10.0, started_by: Optional[str] = None,
                   device: Optional[str] = None, autostart: Optional[bool] = None) -> Optional[Running]:
    """The coordinator at ``socket`` (None: ``COMEM_SOCKET``, else the per-user socket), started if none answers.

    A coordinator that answers is used as it is (``started`` False). When nobody answers (nothing at the path,
    or a stale socket of a coordinator that is gone) and starting is on (``autostart``; None:
    ``COMEM_AUTOSTART``, on unless ``0``), starts :func:`comemd_path`'s ``comemd --socket PATH --started-by
    TEXT [--device SPEC] [--exit-idle SECONDS]`` detached (see the module; the grace is :func:`grace_seconds`)
    and waits up to ``timeout`` seconds for it to answer.
    ``started_by`` (default ``"PROGRAM (pid N)"``: the name rule, at most 127 bytes) is what ``comem status``
    shows; ``device`` (default: ``COMEM_DEVICE``, else auto) the cards it coordinates. No ``--ram`` is passed:
    host RAM is what ``COMEM_RAM`` in the inherited environment says, off where there is a card, and on
    (``machine``) where auto finds no GPU, so that a CPU-only machine's coordinator manages host RAM alone
    (docs/hostram.md). When several processes do this at once one comemd wins and all of them get it;
    ``started`` says whether it was this call's.

    Returns the :class:`Running` coordinator, or None when none answers and starting is off.
    Raises :class:`OtherVersion` when the coordinator there speaks another protocol version (nothing is
    started); :class:`comem.Error` with the probe's reason when something is there that answers badly or is
    not a socket (refused, full, frozen: comemd would refuse the path too); :class:`comem.NotFound` when no
    comemd is found (the places looked at are named); :class:`comem.Error` (EIO) when the comemd it started
    exited without anyone answering (its log lines are quoted); :class:`comem.TimedOut` when nobody answered
    within ``timeout``.
    """
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds (got {timeout!r})")
    text = _check_started_by(started_by if started_by is not None else _default_started_by())
    if device is not None and (not isinstance(device, str) or not device):
        raise TypeError("device must be a non-empty str spec or None")
    path = _resolve(socket)
    peer = _look(path)
    if peer is not None and peer.status == errors.OK:
        return _found(path, None, None, None)
    if peer is not None and peer.status == errors.EVERSION:
        raise OtherVersion(path, peer.pid, _executable(peer.pid), peer.version, comemd_path())
    if peer is not None:  # someone is there, and not a coordinator this process can use: never replaced
        raise errors.error(peer.status, "ensure_running", f"{peer.why}; not starting another coordinator there")
    if not enabled(autostart):
        return None
    binary = comemd_path()
    if binary is None:
        raise errors.NotFound(errors.ENOENT, "ensure_running",
                              "no comemd to start: looked at " + ", ".join(search_places()))
    log = os.path.join(runtime_dir(), LOG_NAME)  # the private per-user runtime directory
    try:
        offset = os.path.getsize(log)
    except OSError:
        offset = 0
    if offset > _LOG_ROTATE:
        offset = 0  # _open_log rotates it
    args = ["--socket", path, "--started-by", text] + (["--device", device] if device else [])
    grace = grace_seconds()
    if grace > 0:
        args += ["--exit-idle", f"{grace:g}"]
    proc = _spawn(binary, args, log)
    return _wait(path, time.monotonic() + timeout, timeout, proc, binary, log, offset)


def _wait(path: str, deadline: float, timeout: float, proc: Optional[subprocess.Popen], binary: Optional[str],
          log: Optional[str], offset: int) -> Running:
    """Probes until a coordinator answers at ``path``; ``proc`` (None: none started) is the comemd this call
    started, whose exit without anyone answering is an error unless it lost the lock to another."""
    pid = proc.pid if proc is not None else None
    lost = proc is None  # nothing of ours to watch, or ours found another holding the socket's lock
    while True:
        rc, why = _probe(path, 500)
        if rc == errors.OK:
            return _found(path, pid, binary, log)
        if not lost and proc is not None and log is not None and not _alive(proc):
            try:
                proc.wait(5)  # its status, once the thread waiting for it has it
            except subprocess.TimeoutExpired:
                pass
            lost = proc.returncode == _EXIT_TAKEN  # it found another coordinator holding the socket's lock
            if not lost:
                said = _lines_of(log, offset, proc.pid)
                code = proc.returncode if proc.returncode is not None else "unknown"
                raise errors.Error(errors.EIO, "ensure_running",
                                   f"{binary} (pid {proc.pid}) exited (status {code}) and nobody answers at "
                                   f"{path}: " + (" / ".join(said) if said else f"it wrote nothing; see {log}"))
        if time.monotonic() > deadline:
            started = f" of starting {binary} (pid {pid}{', which lost the lock to another' if lost else ''})" \
                if pid is not None else ""
            raise errors.TimedOut(errors.ETIMEDOUT, "ensure_running",
                                  f"nobody answered at {path} within {timeout:g} s{started}: {why}"
                                  + (f"; see {log}" if log else ""))
        time.sleep(0.02)
