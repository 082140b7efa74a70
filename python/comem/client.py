"""The client: join the machine-wide ledger, say what you hold, ask before you load.

A process opens one :class:`Client` (a context manager). It registers what it
holds as :class:`Holder` objects (a model list, a pager, a pin set), each with
:class:`Entry` objects (one per model), asks :meth:`Client.admit` before it
loads (a :class:`Grant` comes back, or :class:`comem.Refused` is raised),
answers release asks in a callback, and marks node boundaries with
``with client.node(prompt):``.

Release callbacks are Python callables run on the library's own callback
thread, never on the caller's: ``on_release(ask) -> int`` returns the bytes it
freed; raising :class:`comem.Busy` says it cannot now; any other exception is
logged and answered as 0 bytes freed. The binding keeps a callable alive as
long as its holder (and until the client closes, so an ask in flight never
calls freed memory).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import threading
import weakref
from ctypes import byref, c_int64, c_uint64, c_void_p
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Union

from . import _lib, errors
from .errors import Refused, check

log = logging.getLogger("comem")

_L = _lib.lib

_c = _lib.constant  # the library's values of its constants (comem_constant): never copied here
#: Roles (what this process is to the ledger).
ROLES = {"host": _c("CLIENT_HOST"), "worker": _c("CLIENT_WORKER"), "tool": _c("CLIENT_TOOL")}
#: Holder kinds.
KINDS = {"models": _c("KIND_MODELS"), "pager": _c("KIND_PAGER"), "pins": _c("KIND_PINS"), "raw": _c("KIND_RAW")}
#: What asks a holder answers.
ANSWERS = {"release": _c("ANSWERS_RELEASE"), "idle": _c("ANSWERS_IDLE"), "pins": _c("ANSWERS_PINS")}
_WHILE_BUSY = _c("RELEASES_WHILE_BUSY")
_ASK_KINDS = {_c("RELEASE_BYTES"): "bytes", _c("RELEASE_IDLE"): "idle", _c("RELEASE_PINS"): "pins"}
_OPEN_EMBED = _c("OPEN_EMBED")
_OPEN_NO_LOCAL = _c("OPEN_NO_LOCAL")
_ENTRY_PAGED = _c("ENTRY_PAGED")
#: An entry's tier on host RAM (``COMEM_ENTRY_RAM_*``): what getting its bytes back costs, cheapest first.
TIERS = {"cache": _c("ENTRY_RAM_CACHE"), "file": _c("ENTRY_RAM_FILE")}


_I64 = 1 << 63
_admit = _L.comem_admit_record
_grant_done = _L.comem_grant_done
_Admission = _lib.Admission


#: The device ordinal of host RAM (``COMEM_DEVICE_HOST_RAM``, asked of the library): holders,
#: admissions and pressure on it are host RAM's, budgeted across processes when the coordinator
#: serves it (``comemd --ram``, ``COMEM_RAM``; docs/hostram.md).
HOST_RAM: int = int(_L.comem_device_host_ram())


def _asked(a: "_lib.Admission") -> List[str]:
    """The holders an admission asked, as ``status()`` lists them (hex): one asked again in a later round once."""
    ids: List[str] = []
    for i in range(a.n_ids):
        x = format(a.asked[i], "x")
        if x not in ids:
            ids.append(x)
    return ids


class Reserve(NamedTuple):
    """What a process should keep free on a device, and the headroom its pager should use (bytes)."""
    reserve: int
    pager_headroom: int


class Released(NamedTuple):
    """The answer to :meth:`Client.ask_release`: bytes freed, and the entry's resident bytes after."""
    freed: int
    resident: int


class ReleaseAsk(NamedTuple):
    """One release ask, as a release callback receives it.

    ``kind`` is ``"bytes"`` (free ``bytes`` of device memory), ``"idle"`` (idle:
    free all you can) or ``"pins"`` (free ``bytes`` of pinned host RAM).
    ``plan`` lists ``(entry, bytes)`` pairs: how the coordinator spread the
    bytes over this holder's entries (may be empty; the holder may free
    differently).
    """
    holder: "Holder"
    kind: str
    bytes: int
    plan: List[tuple]


def default_socket() -> str:
    """This user's default coordinator socket (creates its private 0700 directory): a path in
    :func:`runtime_dir` on Linux, the pipe named after the user's SID on Windows."""
    buf, why = ctypes.create_string_buffer(4096), ctypes.create_string_buffer(512)
    check(_L.comem_default_socket_why(buf, len(buf), why, len(why)), "comem_default_socket",
          why.value.decode(errors="replace"))
    return buf.value.decode()


def runtime_dir() -> str:
    """This user's private runtime folder, created if needed (``COMEM_RUNTIME_DIR``, else
    ``$XDG_RUNTIME_DIR/comem`` or ``/tmp/comem-UID``; on Windows ``%LOCALAPPDATA%\\comem``): where an
    autostarted comemd logs. Raises :class:`comem.PermissionDenied` when the folder is not private,
    saying how to put it right."""
    buf, why = ctypes.create_string_buffer(4096), ctypes.create_string_buffer(512)
    check(_L.comem_runtime_dir_why(buf, len(buf), why, len(why)), "comem_runtime_dir",
          why.value.decode(errors="replace"))
    return buf.value.decode()


class Entry:
    """One model (or buffer) of a holder in the ledger.

    Set :attr:`resident` to report its residency, or call :meth:`census` to report residency and
    references (ComfyUI's ``sys.getrefcount`` of the model, the eviction order's second key) at once.
    """

    def __init__(self, holder: "Holder", cid: int, name: str, size: int, resident: int, paged: bool) -> None:
        self.holder = holder
        self.id = cid  #: this client's id for the entry (stable across reconnects)
        self.name = name
        self.size = size
        self.paged = paged
        self._resident = resident
        self._refs = 0
        self._removed = False

    @property
    def resident(self) -> int:
        """The resident bytes last reported."""
        return self._resident

    @resident.setter
    def resident(self, value: int) -> None:
        v = errors.size(value, "resident")
        if v > self.size:
            raise ValueError(f"resident ({v}) cannot exceed the entry's size ({self.size})")
        self._live()
        check(_L.comem_entry_set_resident(self.holder.client._h(), self.id, v), "comem_entry_set_resident")
        self._resident = v

    @property
    def refs(self) -> int:
        """The references last reported (0 until :meth:`census` reports some)."""
        return self._refs

    def census(self, resident: Optional[int] = None, refs: Optional[int] = None) -> None:
        """Reports resident bytes and/or references in one census; None leaves a figure as last reported.

        Across processes, among entries equally offloaded, the one with fewer references is evicted first.
        """
        v = self._resident if resident is None else errors.size(resident, "resident")
        if v > self.size:
            raise ValueError(f"resident ({v}) cannot exceed the entry's size ({self.size})")
        r = self._refs if refs is None else errors.size(refs, "refs")
        self._live()
        check(_L.comem_entry_census(self.holder.client._h(), self.id, v, r), "comem_entry_census")
        self._resident, self._refs = v, r

    def remove(self) -> None:
        """Unregisters the entry (its bytes are no longer attributed here)."""
        if self._removed:
            return
        self._live()
        check(_L.comem_entry_remove(self.holder.client._h(), self.id), "comem_entry_remove")
        self._removed = True
        self.holder._entries.pop(self.id, None)

    def _live(self) -> None:
        if self._removed:
            raise errors.NotFound(errors.ENOENT, "entry", f"entry '{self.name}' was removed")

    def __repr__(self) -> str:
        return f"<comem.Entry {self.name!r} {self._resident}/{self.size} bytes>"


class Holder:
    """Something registered with the coordinator that holds memory and may be asked to release it."""

    def __init__(self, client: "Client", cid: int, name: str, device: int, kind: str,
                 callback: Optional[Callable[[ReleaseAsk], Optional[int]]]) -> None:
        self.client = client
        self.id = cid  #: this client's id for the holder
        self.name = name
        self.device = device
        self.kind = kind
        self.callback = callback
        self._entries: Dict[int, Entry] = {}
        self._removed = False

    @property
    def entries(self) -> List[Entry]:
        """The holder's entries, in registration order."""
        return list(self._entries.values())

    def add_entry(self, name: str, size: int, resident: int = 0, paged: bool = False,
                  tier: Optional[str] = None) -> Entry:
        """Registers one model of this holder: its full size and its resident bytes now.

        tier (host RAM entries, docs/hostram.md): ``"cache"`` for a RAM-cache entry, ``"file"`` for a
        copy a file can give back (an mmap'd checkpoint); release asks take those first, in that order.
        None: any other entry, asked last.
        """
        if tier is not None and tier not in TIERS:
            raise ValueError(f"tier must be one of {sorted(TIERS)} or None (got {tier!r})")
        nm = errors.name(name, "entry name")
        sz = errors.size(size, "size")
        rs = errors.size(resident, "resident")
        if rs > sz:
            raise ValueError(f"resident ({rs}) cannot exceed size ({sz})")
        self._live()
        out = c_uint64()
        flags = (_ENTRY_PAGED if paged else 0) | TIERS.get(tier or "", 0)
        check(_L.comem_entry_add(self.client._h(), self.id, nm, sz, rs, flags, byref(out)), "comem_entry_add", name)
        e = Entry(self, out.value, name, sz, rs, bool(paged))
        self._entries[e.id] = e
        return e

    def set_busy(self, busy: bool, prompt: Optional[str] = None) -> None:
        """Marks a node boundary for this holder: busy while it computes (it is then not asked)."""
        self._live()
        self.client._busy(self.id, busy, prompt)

    def busy(self, prompt: Optional[str] = None) -> "contextlib.AbstractContextManager[None]":
        """``with holder.busy():`` marks this holder busy for the block."""
        return self.client._node(self.id, prompt, self._live)

    def report(self, pinned: Optional[int] = None, overhead: Optional[int] = None) -> None:
        """Reports the holder's pinned host RAM and allocator overhead (None: unknown)."""
        p = -1 if pinned is None else errors.size(pinned, "pinned")
        o = -1 if overhead is None else errors.size(overhead, "overhead")
        self._live()
        check(_L.comem_holder_report(self.client._h(), self.id, p, o), "comem_holder_report")

    def pin(self, nbytes: int) -> None:
        """Books pinned host RAM for this holder against the machine's ceiling (raises Refused when over)."""
        self._live()
        self.client.pin(nbytes, holder=self)

    def unpin(self, nbytes: int) -> None:
        """Gives back pinned host RAM booked by :meth:`pin`."""
        self._live()
        self.client.unpin(nbytes, holder=self)

    def remove(self) -> None:
        """Unregisters the holder and every entry it owns."""
        if self._removed:
            return
        self._live()
        check(_L.comem_holder_remove(self.client._h(), self.id), "comem_holder_remove")
        self._removed = True
        for e in self._entries.values():
            e._removed = True
        self._entries.clear()
        self.client._holders.pop(self.id, None)

    def _live(self) -> None:
        if self._removed:
            raise errors.NotFound(errors.ENOENT, "holder", f"holder '{self.name}' was removed")
        self.client._h()

    def __repr__(self) -> str:
        return f"<comem.Holder {self.name!r} device {self.device} ({self.kind})>"


class Grant:
    """Bytes the coordinator booked for a load. Call :meth:`done` once loaded, or :meth:`cancel`.

    As a context manager, a grant not done by the end of the block is cancelled.
    The admission's figures are attributes: ``need`` (the ask target), ``free_before``,
    ``free_after``, ``freed`` (what others gave back), ``asked`` (holder ids), ``n_asked``, ``n_busy``.
    """

    __slots__ = ("client", "id", "bytes", "device", "holder", "need", "free_before", "free_after", "freed", "asked",
                 "n_asked", "n_busy", "_open")

    def __init__(self, client: "Client", nbytes: int, device: int, holder: Optional[Holder],
                 a: "_lib.Admission") -> None:
        self.client = client
        self.id = a.grant
        self.bytes = nbytes
        self.device = device
        self.holder = holder
        self.need = a.need
        self.free_before = a.free_before
        self.free_after = a.free_after
        self.freed = a.freed
        self.asked = _asked(a)
        self.n_asked = a.n_asked
        self.n_busy = a.n_busy
        self._open = self.id != 0

    @property
    def open(self) -> bool:
        """True until done or cancelled."""
        return self._open

    def done(self, entry: Optional[Entry] = None, used: Optional[int] = None) -> None:
        """The grant's bytes are now resident in ``entry`` (``used``: what was loaded; default the grant)."""
        if not self._open:
            return
        if entry is not None and not isinstance(entry, Entry):
            raise TypeError(f"entry must be a comem.Entry or None, not {type(entry).__name__}")
        if entry is not None and entry.holder.client is not self.client:
            raise TypeError("entry must be an entry of the grant's own client")
        u = self.bytes if used is None else errors.size(used, "used")
        h = self.client._h()  # a closed client raises here, and the grant stays open
        self._open = False
        rc = _L.comem_grant_done(h, self.id, entry.id if entry else 0, u)
        check(rc, "comem_grant_done")
        if entry is not None:
            entry._resident = min(entry.size, max(entry._resident, min(u, entry._resident + self.bytes)))

    def cancel(self) -> None:
        """Gives the booked bytes back without loading."""
        if self._open:
            h = self.client._h()
            self._open = False
            rc = _grant_done(h, self.id, 0, 0)
            if rc < 0:
                raise errors.error(rc, "comem_grant_done")

    def __enter__(self) -> "Grant":
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()

    def __repr__(self) -> str:
        return f"<comem.Grant {self.bytes} bytes on device {self.device}{'' if self._open else ' (closed)'}>"


class Client:
    """One process's membership of the machine-wide ledger.

    role: ``"host"`` (owns the main model list; publishes the reserve), ``"worker"``
    (an isolated process holding its own models) or ``"tool"`` (only looks).
    socket: the coordinator's socket (None: ``COMEM_SOCKET``, else the per-user default).
    reserve_base: a host's operator reserve in bytes (ComfyUI's EXTRA_RESERVED_VRAM); None if unknown.
    embed: start a coordinator thread in this process when none answers.
    require_coordinator: fail (:class:`comem.Closed`) instead of deciding locally without one.
    timeout: the default wait for calls, in seconds (None: 10 s).

    A client serves the process that opened it. In a child forked after that (``os.fork``, a
    ``multiprocessing`` pool with the fork start method) every call on it raises
    :class:`comem.Forked` and :meth:`close` only lets go of the child's copy: the child opens a
    client of its own, and nothing it does reaches the parent's session.
    """

    def __init__(self, name: str, role: str = "worker", socket: Optional[str] = None,
                 reserve_base: Optional[int] = None, embed: bool = False, require_coordinator: bool = False,
                 timeout: Optional[float] = None) -> None:
        nm = errors.name(name, "client name")
        if role not in ROLES:
            raise ValueError(f"role must be one of {sorted(ROLES)} (got {role!r})")
        rb = -1 if reserve_base is None else errors.size(reserve_base, "reserve_base")
        flags = (_OPEN_EMBED if embed else 0) | (_OPEN_NO_LOCAL if require_coordinator else 0)
        tmo = None if timeout is None else errors.timeout_ms(timeout)  # checked before anything is opened
        sock = errors.socket_path(socket)
        self.name = name
        self.role = role
        self.socket: Optional[str] = socket  #: the socket as given (None: COMEM_SOCKET, else the per-user one)
        self._holders: Dict[int, Holder] = {}
        self._keepalive: List[Any] = []  # callbacks of removed holders: an ask may still be running
        self._pagers: List[Any] = []  # pagers attached through this client: detached before it closes
        self._pager_handles: List[int] = []  # their C handles, for the finalizer (which must not hold self)
        self._views: "weakref.WeakSet[Any]" = weakref.WeakSet()  # readers of its sealed view: closed first
        self._lock = threading.Lock()
        self._marked_busy = False  # the last whole-process mark this client sent (set_busy / node)
        self._pid = os.getpid()  # the process it serves (a forked child is another)
        h = c_void_p()
        rc = _L.comem_client_open(sock, ROLES[role], nm, rb, flags, byref(h))
        if rc < 0:  # the status alone names no socket: the probe says who is (not) there and why
            why = ctypes.create_string_buffer(512)
            _L.comem_probe(sock, 1000, why, len(why))
            check(rc, "comem_client_open", why.value.decode(errors="replace"))
        self._handle: Optional[int] = h.value
        # Also at interpreter exit: attached pagers are detached first (they point at this client).
        self._finalizer = weakref.finalize(self, _close_client, h.value, self._pager_handles, self._pid)
        if tmo is not None:
            _L.comem_client_set_timeout(h.value, tmo)

    # ---- lifetime ----

    def _h(self) -> int:
        if self._handle is None:
            raise errors.Closed(errors.ECLOSED, "client", f"client '{self.name}' is closed")
        if os.getpid() != self._pid:
            raise errors.Forked(errors.EFORKED, "client",
                                f"client '{self.name}' was opened by pid {self._pid}; a forked child "
                                f"(pid {os.getpid()}) must open its own comem.Client", opener=self._pid)
        return self._handle

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._handle is None

    def close(self) -> None:
        """Unregisters everything, stops the library's threads (and an embedded coordinator).

        In a forked child it only lets go of the child's copy: the parent's session, holders and
        grants stay as they are, and the parent's own client keeps working.
        """
        if self._handle is None:
            return
        if _in_callback(self) and os.getpid() == self._pid:
            raise RuntimeError("a client cannot be closed from its own release callback")
        for v in list(self._views):  # they read through this client: before it goes
            v.close()
        for p in list(self._pagers):  # detached by the finalizer below, first thing
            p._client = None
        self._pagers.clear()
        self._handle = None
        self._finalizer()  # ctypes releases the GIL: a callback in flight can finish
        self._holders.clear()
        self._keepalive.clear()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def view(self) -> Any:
        """The coordinator's view as this session received it: a :class:`comem.View` reading a copy
        the coordinator sealed, so that no other process can write it (the view file beside the
        socket, which ``comem.View(socket)`` reads, is the user's to write). It follows this client
        across reconnects and is closed with it. :class:`comem.Closed` from a read while the client
        has no session with one."""
        from .view import View
        h = c_void_p()
        check(_L.comem_client_view(self._h(), byref(h)), "comem_client_view")
        v = View._bound(h.value, self)
        self._views.add(v)
        return v

    # ---- state ----

    @property
    def connected(self) -> bool:
        """True when talking to a coordinator now; False while deciding locally."""
        return bool(_L.comem_client_connected(self._h()))

    @property
    def session(self) -> Optional[str]:
        """The coordinator's id for this process's session (hex, as :meth:`status` lists it), or None."""
        sid = _L.comem_client_session(self._h())
        return format(sid, "x") if sid else None

    def map_device(self, ordinal: int, uuid: str) -> None:
        """Says which card this process's device ``ordinal`` is, by its UUID (``torch.cuda`` ordinals, say).

        From then on the ``device`` this client names is its own ordinal, so processes with different
        ``CUDA_VISIBLE_DEVICES`` are charged on the same card. Call it before adding holders on that device.
        Raises :class:`comem.NoDevice` when the coordinator reads no card with that UUID.
        """
        if not isinstance(uuid, str) or not uuid:
            raise TypeError("uuid must be a non-empty str")
        o = errors.device(ordinal)
        check(_L.comem_client_map_device(self._h(), o, uuid.encode()), "comem_client_map_device")

    def set_timeout(self, seconds: float) -> None:
        """The default wait for calls that take ``timeout=None``."""
        _L.comem_client_set_timeout(self._h(), errors.timeout_ms(seconds))

    @property
    def holders(self) -> List[Holder]:
        """The holders registered through this client."""
        return list(self._holders.values())

    # ---- holders ----

    def add_holder(self, name: str, device: int = 0, kind: str = "models",
                   on_release: Optional[Callable[[ReleaseAsk], Optional[int]]] = None,
                   answers: Sequence[str] = ("release", "idle"), releases_while_busy: bool = False,
                   app_pid: Optional[int] = None) -> Holder:
        """Registers a holder of memory on ``device``.

        on_release(ask) -> bytes freed, called on the library's callback thread.
        answers: which asks it answers (``"release"``, ``"idle"``, ``"pins"``); ignored
        without a callback. releases_while_busy: may be asked even while computing (a pager).
        app_pid: the holder's memory is that process's, not this one's (an app holder, such as an
        LLM server this client speaks for: ``docs/apps.md``); its kind is ``"models"``. Refused with
        :class:`comem.PermissionDenied` for another user's process, :class:`comem.NotFound` when
        there is no such process, :class:`comem.Error` with ``status`` ``EEXIST`` when it has a session of
        its own or another holder speaks for it.
        """
        nm = errors.name(name, "holder name")
        dev = errors.device(device)
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {sorted(KINDS)} (got {kind!r})")
        if app_pid is not None and (isinstance(app_pid, bool) or not isinstance(app_pid, int) or
                                    not 0 < app_pid < (1 << 31)):
            raise ValueError(f"app_pid must be a process id (a positive int), got {app_pid!r}")
        if app_pid is not None and kind != "models":
            raise ValueError(f"an app holder's kind is 'models' (got {kind!r})")
        if on_release is not None and not callable(on_release):
            raise TypeError("on_release must be callable or None")
        flags = 0
        if on_release is not None:
            if isinstance(answers, str):
                answers = (answers,)
            for a in answers:
                if a not in ANSWERS:
                    raise ValueError(f"answers must name {sorted(ANSWERS)} (got {a!r})")
                flags |= ANSWERS[a]
            if releases_while_busy:
                flags |= _WHILE_BUSY
        out = c_uint64()
        fn = _lib.RELEASE_FN(_make_trampoline(weakref.ref(self))) if on_release is not None else _lib.RELEASE_FN()
        if app_pid is None:
            check(_L.comem_holder_add(self._h(), nm, dev, KINDS[kind], flags, fn, None, byref(out)),
                  "comem_holder_add", name)
        else:
            check(_L.comem_holder_add_app(self._h(), nm, dev, app_pid, flags, fn, None, byref(out)),
                  "comem_holder_add_app", f"{name} (app pid {app_pid})")
        hd = Holder(self, out.value, name, dev, kind, on_release)
        hd._fn = fn  # type: ignore[attr-defined]  # the C side holds this pointer
        self._keepalive.append(fn)
        self._holders[hd.id] = hd
        return hd

    # ---- node boundaries ----

    def _busy(self, holder_id: int, busy: bool, prompt: Optional[str]) -> None:
        if not isinstance(busy, bool):  # 'yes', 0, None: say so rather than guess
            raise TypeError(f"busy must be True or False, not {type(busy).__name__} {busy!r}")
        p = errors.name(prompt, "prompt") if prompt is not None else None
        check(_L.comem_holder_busy(self._h(), holder_id, 1 if busy else 0, p), "comem_holder_busy")
        if holder_id == 0:
            self._marked_busy = busy

    @property
    def busy(self) -> bool:
        """True while this client has marked its whole process busy (between set_busy(True) and False)."""
        return self._marked_busy

    @contextlib.contextmanager
    def _node(self, holder_id: int, prompt: Optional[str], live: Callable[[], None]) -> Iterator[None]:
        live()
        self._busy(holder_id, True, prompt)
        try:
            yield
        finally:
            if self._handle is not None:
                self._busy(holder_id, False, prompt)

    def node(self, prompt: Optional[str] = None) -> "contextlib.AbstractContextManager[None]":
        """``with client.node("prompt-id"):`` marks the whole process busy while a node computes."""
        return self._node(0, prompt, self._h)

    def set_busy(self, busy: bool, prompt: Optional[str] = None) -> None:
        """Marks the whole process busy (a node starts) or idle (it ended)."""
        self._busy(0, busy, prompt)

    # ---- admission ----

    def admit(self, weights: int, device: int = 0, holder: Optional[Holder] = None, inference: int = 0,
              cast_forward: int = 0, keep: Sequence[Entry] = (), timeout: Optional[float] = None) -> Grant:
        """Asks to load ``weights`` bytes onto ``device`` (with ``inference`` bytes of working memory).

        Returns a :class:`Grant` (its bytes are booked until done or cancelled);
        raises :class:`comem.Refused` with how short it was and whom it asked.
        ``keep``: entries of this client that must not be asked to release.
        """
        # The common case (plain non-negative ints, no keep list) is checked inline: this is the call
        # every load makes, and what the binding adds to the C library is measured (bench_python.py).
        w = weights if type(weights) is int and 0 <= weights < _I64 else errors.size(weights, "weights")
        inf = inference if type(inference) is int and 0 <= inference < _I64 else errors.size(inference, "inference")
        cf = (cast_forward if type(cast_forward) is int and 0 <= cast_forward < _I64
              else errors.size(cast_forward, "cast_forward"))
        dev = device if type(device) is int and 0 <= device < errors.MAX_DEVICES else errors.device(device)
        hid = 0 if holder is None else self._holder_id(holder)
        ids, n = None, 0
        if keep:
            keep = list(keep)
            if len(keep) > errors.MAX_KEEP:
                raise ValueError(f"keep lists at most {errors.MAX_KEEP} entries (got {len(keep)})")
            n = len(keep)
            ids = (c_uint64 * n)()
            for i, e in enumerate(keep):
                if not isinstance(e, Entry) or e.holder.client is not self:
                    raise TypeError("keep must list this client's comem.Entry objects")
                ids[i] = e.id
        tmo = -1 if timeout is None else errors.timeout_ms(timeout)
        a = _Admission()  # the decision comes back in this one record: one crossing, read by field name
        rc = _admit(self._h(), dev, hid, w, inf, cf, ids, n, tmo, a)
        if rc == errors.ENOSPC:
            raise Refused("comem_admit", a.short_by, a.need, a.free_before, a.free_after, a.freed, _asked(a),
                          a.n_asked, a.n_busy, fits=a.fits)
        if rc < 0:
            raise errors.error(rc, "comem_admit")
        return Grant(self, w, dev, holder, a)

    def pressure(self, nbytes: int, device: int = 0, timeout: Optional[float] = None) -> int:
        """At an out-of-memory retry site: asks idle siblings for ``nbytes`` first. Returns what came back."""
        b = errors.size(nbytes, "bytes")
        dev = errors.device(device)
        freed = c_int64()
        check(_L.comem_pressure(self._h(), dev, b, errors.timeout_ms(timeout), byref(freed)), "comem_pressure")
        return freed.value

    def ask_release(self, entry: Union[str, int], nbytes: Optional[int] = None,
                    timeout: Optional[float] = None) -> Released:
        """Asks the holder of another process's entry (its id as :meth:`status` lists it) to release bytes.

        nbytes None: all of it. Returns what the holder reported freed and the
        entry's residency after. Raises :class:`comem.Busy` when it is computing
        and :class:`comem.NotFound` when the entry or its process is gone (the
        exception's ``freed`` then says what came back with the process).
        """
        eid = _entry_id(entry)
        b = -1 if nbytes is None else errors.size(nbytes, "bytes")
        freed, resident = c_int64(), c_int64()
        rc = _L.comem_ask_release(self._h(), eid, b, errors.timeout_ms(timeout), byref(freed), byref(resident))
        if rc < 0:
            err = errors.error(rc, "comem_ask_release", f"entry {eid:x}")
            err.freed = freed.value  # type: ignore[attr-defined]
            raise err
        return Released(freed.value, resident.value)

    # ---- pins ----

    def pin(self, nbytes: int, holder: Optional[Holder] = None) -> None:
        """Books ``nbytes`` of pinned host RAM against the machine's ceiling; raises Refused when over."""
        b = errors.size(nbytes, "bytes")
        short = c_int64()
        rc = _L.comem_pin_acquire(self._h(), self._holder_id(holder), b, byref(short))
        if rc == errors.ENOSPC:
            raise Refused("comem_pin_acquire", short.value)
        check(rc, "comem_pin_acquire")

    def unpin(self, nbytes: int, holder: Optional[Holder] = None) -> None:
        """Gives back pinned host RAM booked with :meth:`pin`."""
        b = errors.size(nbytes, "bytes")
        check(_L.comem_pin_release(self._h(), self._holder_id(holder), b), "comem_pin_release",
              f"{b} bytes: more than {'the holder' if holder is not None else 'this client'} pinned")

    @contextlib.contextmanager
    def pinned(self, nbytes: int, holder: Optional[Holder] = None) -> Iterator[None]:
        """``with client.pinned(n):`` books pinned RAM for the block."""
        self.pin(nbytes, holder)
        try:
            yield
        finally:
            if self._handle is not None:
                self.unpin(nbytes, holder)

    # ---- reserve and status ----

    def reserve(self, device: int = 0) -> Reserve:
        """The reserve this process should keep on ``device`` and its pager's headroom."""
        dev = errors.device(device)
        r, ph = c_int64(), c_int64()
        check(_L.comem_reserve(self._h(), dev, byref(r), byref(ph)), "comem_reserve")
        return Reserve(r.value, ph.value)

    def status(self) -> Dict[str, Any]:
        """The coordinator's snapshot: the same dict ``comem status --json`` prints."""
        p = c_void_p()
        check(_L.comem_status_json(self._h(), byref(p)), "comem_status_json")
        try:
            return json.loads(ctypes.string_at(p.value).decode())
        finally:
            _L.comem_free(p)

    def wddm_report(self) -> bool:
        """Windows: tells the coordinator this process's own WDDM budget and usage per adapter.

        The library sends it by itself at every node's end; this sends it now. True when told;
        False where there is nothing to tell (no WDDM: Linux, or Windows before 10; no hardware
        adapter; no coordinator connected). The coordinator adds up every process's reading per
        adapter (``status()["wddm"]``).
        """
        rc = _L.comem_wddm_report(self._h())
        if rc in (errors.ENOTSUP, errors.ENOENT, errors.ECLOSED):
            return False
        check(rc, "comem_wddm_report")
        return True

    # ---- helpers ----

    def _holder_id(self, holder: Optional[Holder]) -> int:
        if holder is None:
            return 0
        if not isinstance(holder, Holder) or holder.client is not self:
            raise TypeError("holder must be a comem.Holder of this client, or None")
        holder._live()
        return holder.id

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else ("connected" if self.connected else "local")
        return f"<comem.Client {self.name!r} {self.role} ({state})>"


def _close_client(handle: int, pager_handles: List[int], opener: int) -> None:
    """Detaches the pagers attached through the client (their C side points at it), then closes it.

    In a forked child (not the opener) the pagers are the parent's business: only the client's copy
    is let go of, which the library does without a word to the coordinator.
    """
    if os.getpid() == opener:
        for ph in list(pager_handles):
            _L.comem_pager_detach(ph)
    pager_handles.clear()
    _L.comem_client_close(handle)


def _entry_id(entry: Union[str, int]) -> int:
    if isinstance(entry, str):
        try:
            v = int(entry, 16)
        except ValueError:
            raise ValueError(f"entry must be a coordinator id (hex text, as status() lists it), got {entry!r}")
    elif isinstance(entry, int) and not isinstance(entry, bool):
        v = entry
    else:
        raise TypeError(f"entry must be a coordinator id (hex str or int), not {type(entry).__name__}")
    if not 0 < v < (1 << 64):
        raise ValueError(f"entry id out of range: {v}")
    return v


# ---- the release trampoline: C callback thread -> Python callable ----

_tls = threading.local()


def _in_callback(client: Client) -> bool:
    return getattr(_tls, "client", None) is client


def _make_trampoline(client_ref: "weakref.ref[Client]") -> Callable[..., int]:
    def trampoline(user, holder_id, kind, nbytes, entries, amounts, n, freed_out):  # type: ignore[no-untyped-def]
        freed_out[0] = 0
        client = client_ref()
        holder = client._holders.get(holder_id) if client is not None else None
        if holder is None or holder.callback is None:
            return errors.EINVAL  # removed while the ask was on its way
        plan = []
        for i in range(n):
            e = holder._entries.get(entries[i])
            if e is not None:
                plan.append((e, amounts[i]))
        ask = ReleaseAsk(holder, _ASK_KINDS.get(kind, "bytes"), nbytes, plan)
        _tls.client = client
        try:
            got = holder.callback(ask)
            v = 0 if got is None else int(got)
            freed_out[0] = max(0, min(v, (1 << 63) - 1))
            return errors.OK
        except errors.Busy:
            return errors.EBUSY
        except BaseException:  # never let an exception unwind into C
            log.exception("comem: release callback of holder '%s' raised; answered as 0 bytes freed", holder.name)
            return errors.OK
        finally:
            _tls.client = None
    return trampoline
