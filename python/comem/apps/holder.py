"""One LLM server on the ledger: what it holds, measured; asks answered with the server's own calls.

The server never joins the ledger. This process speaks for it: every process of the server that
holds a loaded model (the server itself, or a router's child, an Ollama runner, vLLM's engine)
is an **app holder** (``Client.add_holder(app_pid=...)``), so the coordinator reads that process's
use of the card, or its RSS on host RAM, for the holder's asks and receipts; each loaded model is
one entry, its residency what the process is measured to hold.

An ask is answered when the server is idle (a request in flight, where the server or this
process's proxy says so, answers "busy": the coordinator asks again at the boundary). The models
the ask names (or, with no plan, the largest first until the bytes asked are covered) are unloaded
with the recipe's call; the receipt is what the measurement shows leave (the process gone, or its
RSS's drop), never what the server or the recipe claims. An unloaded model is loaded again, with
``reload = "when-free"``, only once the ledger's view shows room for what it held, and through an
admission, so its bytes are booked before the server takes them; one an idle release took (nobody
needed the room) waits for a request instead, or it would be unloaded and loaded again every
idle-release period.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from typing import Callable, Dict, List, NamedTuple, Optional, Set

from .. import errors
from ..client import HOST_RAM, Client, Entry, Holder, ReleaseAsk
from . import procs
from .config import AppConfig
from .http import AppError, Endpoint
from .recipes import RECIPES, Model, model_process

log = logging.getLogger("comem.apps")

LAST_REFS = 1 << 20  #: references an entry of priority "last" reports: ComfyUI's order asks fewer-referenced first
UNLOAD_WAIT_S = 1.5  #: how long an unload is watched for its bytes to leave: within the ask's deadline (2 s and more)


class Event(NamedTuple):
    """An unload or a load, as measured."""

    when: float
    what: str       #: "unload", "load", "reloaded-by-itself", "error"
    model: str
    nbytes: int     #: bytes measured to leave (unload) or arrive (load)
    seconds: float  #: from the call to the measured end


class _Held:
    """One process of the server on the ledger: its app holder and an entry per loaded model."""

    def __init__(self, pid: int, holder: Holder) -> None:
        self.pid = pid
        self.holder = holder
        self.entries: Dict[str, Entry] = {}
        self.busy = False  #: what the coordinator was last told (a request in flight)


class AppHolder:
    """Keeps one configured server on the ledger (:meth:`refresh`, called by :class:`comem.apps.Runner`)."""

    def __init__(self, client: Client, app: AppConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.client = client
        self.recipe = RECIPES[app.recipe](Endpoint(app.name, app.url), app.level)
        self.device = HOST_RAM if app.device == "ram" else int(app.device)
        self.port = urllib.parse.urlsplit(app.url).port or 80
        self.clock = clock
        self.events: List[Event] = []
        self.unloaded: Dict[str, int] = {}  #: model -> bytes it held when comem unloaded it
        self.inflight = 0                   #: requests the proxy is passing to the server now
        self.looks = 0                      #: refresh() calls so far
        self._loading: Set[str] = set()     # models a load() is loading now
        self._idle_taken: Set[str] = set()  # unloaded by an idle release: nobody needed the room, so no reload when free
        self._lock = threading.RLock()
        self._held: Dict[int, _Held] = {}
        self._root: Optional[int] = None
        self._said: Dict[str, str] = {}     # what was last logged per topic: each change is said once
        self._app_use: Dict[int, int] = {}  # the card's reading per process (status), card devices only

    # ---- reading ----

    def _say(self, topic: str, text: str, level: int = logging.WARNING) -> None:
        if self._said.get(topic) != text:
            self._said[topic] = text
            log.log(level, "comem.apps: %s", text)

    def root(self) -> Optional[int]:
        """The server's process: the configured pid, else this user's listener on the url's port."""
        if self.app.pid is not None:
            return self.app.pid if procs.alive(self.app.pid) else None
        if self._root is not None and procs.alive(self._root):
            return self._root
        self._root = procs.listener(self.port)
        return self._root

    def use(self, pid: int) -> Optional[int]:
        """What process pid holds on the app's device: its RSS on host RAM, the card's last reading otherwise."""
        if self.device == HOST_RAM:
            return procs.rss(pid)
        return self._app_use.get(pid)

    def _read_card(self) -> None:
        if self.device == HOST_RAM:
            return
        self._app_use = {}
        for d in self.client.status().get("devices", []):
            for p in d.get("processes", []):
                for h in p.get("holders", []):
                    if h.get("app_pid") and h.get("app_use") is not None:
                        self._app_use[int(h["app_pid"])] = int(h["app_use"])

    # ---- keeping the ledger current ----

    def refresh(self) -> None:
        """One look at the server: its loaded models on the ledger, with what their processes hold."""
        self.looks += 1
        with self._lock:
            root = self.root()
            if root is None:
                self._say("run", f"app '{self.app.name}' is not running (nothing of this user listens on "
                                 f"port {self.port}{'' if self.app.pid is None else ' or pid ' + str(self.app.pid)})")
                self._drop_all()
                return
            try:
                models = self.recipe.models()
            except AppError as e:
                self._say("models", str(e))
                return
            self._say("run", f"app '{self.app.name}' ({self.app.recipe}) runs as pid {root}", logging.INFO)
            self._said.pop("models", None)
            self._read_card()
            by_pid: Dict[int, List[Model]] = {}
            kids = procs.descendants(root) if self.recipe.child_holds and any(m.loaded for m in models) else []
            for m in models:
                if m.loaded:
                    by_pid.setdefault(model_process(root, m, self.recipe, kids), []).append(m)
                    if m.name in self.unloaded and m.name not in self._loading:  # loaded again, not by comem
                        self.events.append(Event(self.clock(), "reloaded-by-itself", m.name, 0, 0.0))
                        self._say("self-" + m.name, f"app '{self.app.name}' loaded '{m.name}' again by itself; "
                                                     "counted from now on (docs/apps.md: the proxy admits it first)")
                        del self.unloaded[m.name]
                        self._idle_taken.discard(m.name)
            for pid in [p for p in self._held if p not in by_pid]:
                self._drop(pid)
            for pid, ms in by_pid.items():
                self._census(pid, ms)
            # a boundary: a busy server is not asked, an idle one may be again
            self._mark_busy(self.inflight > 0 or bool(self.recipe.busy()))

    def _census(self, pid: int, ms: List[Model]) -> None:
        held = self._held.get(pid)
        if held is None:
            name = self.app.name if not self._held else f"{self.app.name}.{len(self._held) + 1}"
            try:
                h = self.client.add_holder(name, device=self.device, on_release=self._on_release,
                                           answers=("release", "idle") if self.recipe.can_unload else (),
                                           app_pid=pid)
            except errors.Error as e:
                self._say("add-" + str(pid), f"app '{self.app.name}': pid {pid} cannot be put on the ledger: {e}")
                return
            held = self._held[pid] = _Held(pid, h)
        used = self.use(pid)
        if used is None:
            return
        sizes = [m.size for m in ms]
        known = all(s is not None and s > 0 for s in sizes) and sum(sizes) > 0  # type: ignore[arg-type]
        for m in list(held.entries):
            if m not in {x.name for x in ms}:
                held.entries.pop(m).remove()
        for i, m in enumerate(ms):
            share = used * sizes[i] // sum(sizes) if known else used // len(ms)  # type: ignore[operator]
            e = held.entries.get(m.name)
            if e is not None and share > e.size:  # grew past what it was registered at: registered again
                held.entries.pop(m.name).remove()
                e = None
            if e is None:
                e = held.entries[m.name] = held.holder.add_entry(m.name, max(share, m.size or 0, 1), share)
            e.census(resident=share, refs=0 if self.app.priority == "first" else LAST_REFS)

    def _drop(self, pid: int) -> None:
        held = self._held.pop(pid, None)
        if held is not None:
            try:
                held.holder.remove()
            except errors.Error as e:
                log.debug("comem.apps: removing the holder of pid %d: %s", pid, e)

    def _drop_all(self) -> None:
        for pid in list(self._held):
            self._drop(pid)

    # ---- answering asks (the library's callback thread) ----

    def _on_release(self, ask: ReleaseAsk) -> int:
        with self._lock:
            held = next((h for h in self._held.values() if h.holder is ask.holder), None)
            if held is None or not self.recipe.can_unload:
                return 0
            if self.inflight > 0 or self.recipe.busy():
                raise errors.Busy(errors.EBUSY, "app", f"app '{self.app.name}' is serving a request")
            named = [e.name for e, _ in ask.plan if e.name in held.entries]
            if not named:  # no plan (an idle ask, a bare byte count): the largest first, until covered
                ranked = sorted(held.entries.values(), key=lambda e: e.resident, reverse=True)
                total = 0
                for e in ranked:
                    if ask.kind != "idle" and total >= ask.bytes:
                        break
                    named.append(e.name)
                    total += e.resident
            return self._unload(held, named, idle=ask.kind == "idle")

    def _unload(self, held: _Held, names: List[str], idle: bool = False) -> int:
        before = self.use(held.pid) or 0
        expect = sum(held.entries[n].resident for n in names)
        t0 = self.clock()
        done = []
        for n in names:
            try:
                self.recipe.unload(n)
                done.append(n)
            except AppError as e:
                self.events.append(Event(self.clock(), "error", n, 0, self.clock() - t0))
                log.warning("comem.apps: %s", e)
        if not done:
            return 0
        if self.device == HOST_RAM:
            after = before
            deadline = t0 + UNLOAD_WAIT_S
            while True:  # watched until its bytes have left (half of them: a process keeps some) or the wait ends
                now_use = self.use(held.pid) if procs.alive(held.pid) else 0
                after = before if now_use is None else now_use
                if after <= before - expect // 2 or self.clock() >= deadline:
                    break
                time.sleep(0.05)
            freed = max(0, before - after)
        else:  # this process has no fresh card reading of its own: the coordinator counts what the card shows leave
            freed = expect
        seconds = self.clock() - t0
        for n in done:
            e = held.entries[n]
            self.unloaded[n] = max(self.unloaded.get(n, 0), e.resident)
            if idle:  # nobody needed the room: loaded again by a request (the proxy), never when free
                self._idle_taken.add(n)
            else:
                self._idle_taken.discard(n)
            e.resident = 0  # sent with the receipt
        self.events.append(Event(self.clock(), "unload", ",".join(done), freed, seconds))
        log.info("comem.apps: app '%s' unloaded %s: %d bytes left pid %d in %.2f s",
                 self.app.name, ", ".join(done), freed, held.pid, seconds)
        return freed

    # ---- taking it back ----

    def reload_when_free(self) -> Optional[str]:
        """Loads one model comem unloaded once the ledger has room for it, through an admission; its name, or None."""
        wanted = {n: b for n, b in self.unloaded.items() if n not in self._idle_taken}
        if self.app.reload != "when-free" or not wanted:
            return None
        name, need = max(wanted.items(), key=lambda kv: kv[1])
        room = self._room()
        if room is None or room < need:
            return None
        return name if self.load(name, need) else None

    def _room(self) -> Optional[int]:
        """What the app's device has free beyond what is granted and the reserve, as the coordinator says now."""
        try:
            for d in self.client.status().get("devices", []):
                if (d.get("host_ram") is not None) if self.device == HOST_RAM else d.get("index") == self.device:
                    return int(d["free"]) - int(d.get("granted") or 0) - self.client.reserve(self.device).reserve
        except errors.Error:
            return None
        return None

    def load(self, name: str, need: int, wait: float = 5.0) -> bool:
        """Admits need bytes (waiting at most wait seconds for room), asks the server to load name, and
        books the grant as what it then holds. Not under the holder's lock: asks are answered meanwhile."""
        deadline = self.clock() + wait
        while True:  # one load of a model at a time (the proxy's and the reload's)
            with self._lock:
                if name not in self._loading:
                    if name not in self.unloaded:
                        return True  # loaded meanwhile
                    self._loading.add(name)
                    root = self.root()
                    break
            if self.clock() >= deadline:
                return False
            time.sleep(0.05)
        try:
            return root is not None and self._load(name, need, max(0.0, deadline - self.clock()))
        finally:
            with self._lock:
                self._loading.discard(name)

    def _load(self, name: str, need: int, wait: float) -> bool:
        try:
            grant = self.client.admit(need, device=self.device, timeout=wait)
        except errors.Error as e:
            self._say("load-" + name, f"app '{self.app.name}': no room to load '{name}' again yet: {e}", logging.INFO)
            return False
        t0 = self.clock()
        try:
            self.recipe.load(name)
        except AppError as e:
            grant.cancel()
            self.events.append(Event(self.clock(), "error", name, 0, self.clock() - t0))
            log.warning("comem.apps: %s", e)
            return False
        self.unloaded.pop(name, None)
        self._idle_taken.discard(name)
        self.refresh()  # the process's entry holds the bytes now...
        grant.cancel()  # ...so the grant goes (briefly counted twice, never not at all)
        got = sum(e.resident for h in self._held.values() for n, e in h.entries.items() if n == name)
        self.events.append(Event(self.clock(), "load", name, got, self.clock() - t0))
        log.info("comem.apps: app '%s' loaded '%s' again: %d bytes in %.2f s", self.app.name, name, got,
                 self.clock() - t0)
        return True

    # ---- requests passing through the proxy ----

    def begin_request(self) -> None:
        """A request starts (proxy.py): the server is busy from now on, told at once."""
        with self._lock:
            self.inflight += 1
            self._mark_busy(True)

    def end_request(self) -> None:
        """A request ended: idle again once none is in flight."""
        with self._lock:
            self.inflight -= 1
            if self.inflight == 0:
                self._mark_busy(bool(self.recipe.busy()))

    def _mark_busy(self, busy: bool) -> None:
        for held in self._held.values():
            if held.busy != busy:
                held.holder.set_busy(busy)
                held.busy = busy

    def close(self) -> None:
        """Takes the server off the ledger (it keeps running as it is)."""
        with self._lock:
            self._drop_all()
