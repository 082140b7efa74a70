"""ComfyUI's RAM cache on the ledger's host RAM: registered, and given back when another process needs it.

ComfyUI 783545f6 keeps every node's outputs in a RAM cache (``RAMPressureCache``,
``--cache-ram``, its default) and trims it only in its own process, at its own
node boundaries, against ``psutil``'s available RAM: an idle ComfyUI keeps its
last prompt's outputs however much another process needs the RAM. Here, when
the coordinator serves host RAM (``comemd --ram``), the cache is a holder on
``comem.HOST_RAM`` (``ram-cache``), each output of 1 MiB or more one entry of
tier ``cache`` (the cheapest to get back: re-run the node), named by its node.
An output's bytes are its CPU tensors and the weights of the models it holds
(a loader's output: the copy of the weights kept in RAM, which ComfyUI's own
``ram_release`` drops first once its prompt is over).

An ask is answered by ComfyUI's own ``ram_release``: its target is the RAM
available now plus the bytes asked, so ComfyUI's score (older prompts first,
then the largest) picks what goes; the receipt is what the census then finds
gone. The holder is busy while a prompt runs (the executor owns the cache
then; ComfyUI trims it itself at every node), so only an idle ComfyUI is
asked, and an ask that races a prompt's start is answered busy.

How the cache is found: the executor hands ComfyUI its release callback at
every prompt's start (``comfy.memory_management.set_ram_cache_release_state``),
a bound ``ram_release`` of the cache, and clears it when the prompt ends; the
wrapper keeps a weak reference to the cache across that, so a cache ComfyUI
drops (the Free button's ``reset``) is never kept alive.
a125cd84 has no RAM cache: nothing is registered there.

Before each node, ComfyUI's rule that the free RAM covers its headroom (the
executor's ``cache_args["ram"]``, which it keeps free after every node in its own
process) is put to the machine first: an admission of the headroom on host RAM
(beyond the reserve the coordinator keeps there already), booking nothing, so
an idle process's cache or offloaded copies are asked before the node
allocates, not after another process ran out (reserve before allocate). The
cache's own growth is registered at the next node's start.

A process nobody hands a release state (a worker) runs ComfyUI's pin budget
with ``RAM_CACHE_HEADROOM`` 0; :func:`headroom_share` gives it the reserve
the coordinator keeps on host RAM instead.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import threading
import weakref
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Set

from .. import errors
from ..client import HOST_RAM, Client, Entry, Holder, ReleaseAsk

log = logging.getLogger("comem.comfy")

MIN_ENTRY = 1 << 20  #: outputs smaller than this are not registered (strings, small latents: noise in the ledger)
HOLDER = "ram-cache"


def _patcher_ram(x: Any) -> Optional[int]:
    """Host RAM a ComfyUI ModelPatcher's weights take (None: not a patcher), by ComfyUI's own figures: a
    dynamic model keeps its whole copy in RAM (aimdo faults pages in from it); a classic one what is not on
    its load device."""
    size, loaded = getattr(x, "model_size", None), getattr(x, "loaded_size", None)
    if not callable(size) or not callable(loaded) or not hasattr(x, "model"):
        return None
    dynamic = getattr(x, "is_dynamic", None)
    total = int(size())
    return max(0, total if callable(dynamic) and dynamic() else total - int(loaded()))


def cpu_bytes(outputs: Any, seen: Optional[Set[Any]] = None) -> int:
    """Host RAM a node's outputs hold: CPU tensors, each storage counted once, and the weights of the ComfyUI
    models among them (a loader's output), each model counted once.

    It walks what ComfyUI v0.39's cache walks when it sizes an entry: lists, tuples, the values of a
    mapping, and an object's ``_comfy_cache_tensors()`` (the hook v0.39 gives outputs that hold tensors
    inside themselves). An output whose hook raises is the caller's to handle: the exception propagates."""
    torch = sys.modules.get("torch")
    if torch is None or outputs is None:
        return 0
    seen = set() if seen is None else seen
    total = 0
    stack = [outputs]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, Mapping):
            stack.extend(x.values())
        elif isinstance(x, torch.Tensor):
            if x.device.type == "cpu":
                storage = x.untyped_storage()
                key = ("storage", storage.data_ptr(), storage.nbytes())
                if key not in seen:
                    seen.add(key)
                    total += storage.nbytes()
        else:
            ram = _patcher_ram(x)
            if ram is not None:
                key = ("model", id(getattr(x, "model", x)))  # clones share their parent's module and its weights
                if key not in seen:
                    seen.add(key)
                    total += ram
            elif callable(getattr(x, "_comfy_cache_tensors", None)):
                stack.append(x._comfy_cache_tensors())
    return total


def _names(cache: Any) -> Dict[Any, str]:
    """Cache key -> "ClassType #node" for the outputs of the prompt the cache was last set for."""
    out: Dict[Any, str] = {}
    try:
        keys = cache.cache_key_set.keys
        prompt = cache.dynprompt
        for node_id, key in list(keys.items()):
            node = prompt.get_node(node_id)
            out[key] = f"{node.get('class_type', 'output')} #{node_id}"[:48]
    except (AttributeError, KeyError, TypeError, ValueError):  # a ComfyUI whose cache is laid out otherwise
        pass
    return out


class RamCache:
    """ComfyUI's outputs cache as the holder ``ram-cache`` on host RAM (when the coordinator serves it)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.holder: Optional[Holder] = None
        self.served: Optional[bool] = None  #: None: not asked yet; False: the coordinator has no host RAM
        self._cache: Optional["weakref.ref[Any]"] = None
        self._entries: Dict[Any, Entry] = {}  # cache key -> its entry
        self._mu = threading.Lock()  # the entries (census and the release callback)
        self._prompt = threading.Lock()  # held while the executor runs a prompt: the cache is its then
        self.released = 0  #: bytes given back to asks so far
        self._warned_unsized = False
        self.headroom = 0  #: what ComfyUI keeps free for a node during the prompt now running (0: none runs)
        self._reserve: Optional[int] = None  # the coordinator's host-RAM reserve (fixed when host RAM opens)

    # ---- the cache ComfyUI hands over ----

    def set_cache(self, callback: Optional[Callable[..., Any]], headroom: Any = 0) -> None:
        """The callback ComfyUI's executor set: a bound ``ram_release`` of its RAM cache, and its headroom.

        The executor clears it (None) when a prompt ends, while the cache lives on with its outputs: the
        cache is kept (weakly) until another one is handed over or ComfyUI drops it."""
        try:
            self.headroom = max(0, int(headroom)) if callback is not None else 0
        except (TypeError, ValueError):
            self.headroom = 0
        owner = getattr(callback, "__self__", None)
        if owner is None or not hasattr(owner, "ram_release"):
            return
        if self._cache is None or self._cache() is not owner:
            self._cache = weakref.ref(owner)

    def cache(self) -> Optional[Any]:
        return self._cache() if self._cache is not None else None

    def _served(self) -> bool:
        """Whether the coordinator serves host RAM (asked once: a refused holder or admission would be a warning
        in every default run)."""
        if self.served is None and self.client.connected:
            try:
                self.served = any(d.get("host_ram") for d in self.client.status().get("devices", []))
            except errors.Error as e:
                log.debug("comem: could not ask whether host RAM is served: %s", e)
                return False
            if not self.served:
                log.info("comem: the coordinator serves no host RAM: ComfyUI's RAM cache and offloads are not on "
                         "the ledger. To put them there, stop ComfyUI, run `comem stop` (a coordinator keeps the "
                         "settings it started with) and start ComfyUI again with COMEM_RAM=machine in its environment: "
                         "the coordinator ComfyUI starts takes ComfyUI's environment. One you run yourself takes "
                         "`comemd --ram machine` (docs/hostram.md)")
        return bool(self.served)

    def _attach(self) -> Optional[Holder]:
        """The holder, registered the first time the coordinator is known to serve host RAM."""
        if self.holder is not None or not self.client.connected or not self._served():
            return self.holder
        try:
            self.holder = self.client.add_holder(HOLDER, device=HOST_RAM, kind="models", on_release=self._on_release,
                                                 answers=("release", "idle"))
        except errors.NoDevice:
            self.served = False
        return self.holder

    # ---- census ----

    def census(self) -> None:
        """Registers the cache's outputs as they are now (new ones added, gone ones removed)."""
        with self._mu:
            self._census()

    def _census(self) -> None:
        cache = self.cache()
        if cache is None and not self._entries:
            return
        holder = self._attach()
        if holder is None:
            return
        now: Dict[Any, int] = {}
        if cache is not None:
            seen: Set[Any] = set()
            for key, entry in list(cache.cache.items()):
                try:
                    n = cpu_bytes(getattr(entry, "outputs", None), seen)
                except Exception as e:  # an output's own sizing hook: ComfyUI evicts such an entry first
                    if not self._warned_unsized:  # once: the same node fails the same way every prompt
                        self._warned_unsized = True
                        log.warning("comem: a cached output could not be sized (%s: %s); such outputs are not "
                                    "reported to the ledger", type(e).__name__, e)
                    continue
                if n >= MIN_ENTRY:
                    now[key] = n
        try:
            for key in [k for k, e in self._entries.items() if now.get(k) != e.size]:
                self._entries.pop(key).remove()
            names = _names(cache) if any(k not in self._entries for k in now) else {}
            for key, n in now.items():
                if key not in self._entries:
                    self._entries[key] = self._add(holder, names.get(key, "output"), n)
        except errors.Error as e:
            log.warning("comem: ComfyUI's RAM cache not reported: %s", e)

    @staticmethod
    def _add(holder: Holder, name: str, n: int) -> Entry:
        """An entry named by its node; the node's id and class come from whoever posted the prompt, so a
        name the library refuses (the name rule) is registered as plain "output" instead."""
        try:
            return holder.add_entry(name, n, n, tier="cache")
        except (errors.Error, ValueError) as e:
            if name == "output":
                raise
            log.debug("comem: RAM-cache entry name %r refused (%s); registered as 'output'", name, e)
            return holder.add_entry("output", n, n, tier="cache")

    # ---- a node is about to run ----

    def make_room(self) -> None:
        """Before a node: the headroom ComfyUI keeps free for it, made on the machine (other processes asked).

        Books nothing: the node's growth shows in this process's resident set, and its outputs are registered
        at the next node's start. A refusal is logged and the node runs (ComfyUI's own trimming follows it)."""
        if self.holder is None or self.headroom <= 0:
            return
        try:
            if self._reserve is None:
                self._reserve = max(0, self.client.reserve(HOST_RAM).reserve)
        except errors.Error as e:
            log.warning("comem: room for ComfyUI's node headroom not asked for: %s", e)
            return
        # the reserve is kept free already
        self.make_room_for(max(0, self.headroom - self._reserve), f"the {self.headroom >> 20} MiB ComfyUI keeps "
                           "free for a node")

    def make_room_for(self, nbytes: int, what: str, timeout: Optional[float] = None) -> bool:
        """Asks the machine for ``nbytes`` of host RAM free beyond its reserve, booking nothing (``what``: for the
        log). Other processes' idle holders are asked when it lacks them. False when it could not be had (the
        caller goes on: the allocation is ComfyUI's, the ledger's part is to have asked first)."""
        if nbytes <= 0 or not self.client.connected or not self._served():
            return True
        try:
            g = self.client.admit(0, device=HOST_RAM, holder=self.holder, inference=int(nbytes), timeout=timeout)
        except errors.Refused as r:
            log.warning("comem: host RAM is %d MiB short of %s, after asking %d holder(s) of other processes",
                        r.short_by >> 20, what, r.n_asked)
            return False
        except errors.Error as e:
            log.warning("comem: room in host RAM for %s not asked for: %s", what, e)
            return False
        if g.n_asked:
            log.info("comem: %d MiB of host RAM given back by other processes (%d holder(s) asked) for %s",
                     g.freed >> 20, g.n_asked, what)
        return True

    # ---- a prompt runs: the executor owns the cache ----

    @contextlib.contextmanager
    def prompt(self) -> Iterator[None]:
        """Around ComfyUI's ``PromptExecutor.execute``: the holder busy; a census when the prompt is done."""
        with self._prompt:
            holder = self._attach()
            busy = holder is not None and self._mark(holder, True)
            try:
                yield
            finally:
                self.census()
                if busy:
                    self._mark(holder, False)

    @staticmethod
    def _mark(holder: Holder, busy: bool) -> bool:
        try:
            holder.set_busy(busy)
            return True
        except errors.Error as e:
            log.warning("comem: the RAM cache's busy mark not reported: %s", e)
            return False

    # ---- asks ----

    def _on_release(self, ask: ReleaseAsk) -> int:
        if not self._prompt.acquire(blocking=False):
            raise errors.Busy(errors.EBUSY, HOLDER, "a prompt is running: ComfyUI trims its RAM cache itself then")
        try:
            with self._mu:
                cache = self.cache()
                if cache is None:
                    return 0
                want = ask.bytes if ask.kind == "bytes" else 1 << 62
                before = sum(e.size for e in self._entries.values())
                target = min(available_ram() + want, 1 << 62)
                cache.ram_release(target, free_active=True)  # nothing is active between prompts
                self._census()
                freed = max(0, before - sum(e.size for e in self._entries.values()))
                self.released += freed
                log.info("comem: ComfyUI's RAM cache gave %d MiB back to another process (asked %d MiB)",
                         freed >> 20, min(want, 1 << 50) >> 20)
                return freed
        finally:
            self._prompt.release()


def available_ram() -> int:
    """Available RAM as ComfyUI's RAM cache measures it: v0.39's ``comfy.system_memory`` (a cgroup
    limit below host RAM counts there), else psutil's, as 783545f6 reads it. The release target is
    this plus what was asked, so the cache drops what was asked, not what a container's limit hides."""
    system_memory = sys.modules.get("comfy.system_memory")
    if system_memory is not None and hasattr(system_memory, "virtual_memory_available"):
        return int(system_memory.virtual_memory_available())
    import psutil  # installed wherever ComfyUI runs
    return int(psutil.virtual_memory().available)


def wrap_release_state(orig: Callable[..., Any], ram: RamCache) -> Callable[..., Any]:
    """``comfy.memory_management.set_ram_cache_release_state`` that also hands the cache to ``ram``."""
    @functools.wraps(orig)
    def set_ram_cache_release_state(callback: Any, headroom: Any) -> Any:
        ram.set_cache(callback, headroom)
        return orig(callback, headroom)
    return set_ram_cache_release_state


def wrap_execute(orig: Callable[..., Any], ram: RamCache) -> Callable[..., Any]:
    """``execution.PromptExecutor.execute`` run inside :meth:`RamCache.prompt`."""
    @functools.wraps(orig)
    def execute(executor: Any, *args: Any, **kwargs: Any) -> Any:
        with ram.prompt():
            return orig(executor, *args, **kwargs)
    return execute


def headroom_share(client: Client, memory_management: Any) -> Optional[int]:
    """Sets ComfyUI's ``RAM_CACHE_HEADROOM`` to the coordinator's host-RAM reserve where nobody set it (a worker).

    Returns the figure set, or None where nothing changed: ComfyUI has no such figure (a125cd84), an executor
    already set one, or the coordinator serves no host RAM (or keeps no reserve there: a bounded budget)."""
    if memory_management is None or not hasattr(memory_management, "RAM_CACHE_HEADROOM"):
        return None
    if memory_management.RAM_CACHE_HEADROOM or getattr(memory_management, "extra_ram_release_callback", None):
        return None
    if not client.connected:
        return None
    try:
        share = client.reserve(HOST_RAM).reserve
    except errors.Error:
        return None
    if share <= 0:
        return None
    memory_management.RAM_CACHE_HEADROOM = int(share)
    log.info("comem: RAM_CACHE_HEADROOM set to the coordinator's host-RAM reserve, %d MiB", share >> 20)
    return int(share)
