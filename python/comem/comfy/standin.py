"""Stand-ins: another process's model, as an entry of ComfyUI's ``current_loaded_models``.

The host keeps one stand-in per model another process holds on a card it
uses, inside a real ``LoadedModel``, so ComfyUI's own ``free_memory``,
``load_models_gpu``, ``unload_all_models``, the Free button and its OOM
handler rank and evict those models with the host's own. A stand-in offers the
surface ComfyUI's loop reads (``model_size``, ``loaded_size``,
``partially_unload``, ``detach``, ...); unloading one asks the model's holder,
through the coordinator, for the bytes (``comem_ask_release``) and returns what
the holder reports freed, so ComfyUI escalates to a detach by itself when a
partial answer falls short. Every other attribute raises an AttributeError that
names it, and :data:`Recorder` can list every attribute ComfyUI read.

A stand-in is inserted with ``currently_used = False`` and ``is_dynamic()``
False: it is never loaded by the host, only asked.

The rules it keeps inside ComfyUI's loop (comfy-env's proxy keeps the same two):

- **Never lie about bytes.** An unload returns what the holder reported freed,
  never the size asked or the model's size, so ``LoadedModel.model_unload``
  escalates to a detach exactly when the answer fell short. ComfyUI computes its
  asks in floats (``memory_required - get_free_memory()``); a stand-in asks for
  the ceiling, since an ask truncated by a fraction of a byte, met exactly, reads
  as short and costs the whole model. Each receipt is also handed to the
  stand-ins' owner (``on_freed``), so the host's free reading rises with it where
  it cannot see other processes (WDDM).
- **Never raise inside someone else's loop.** Every eviction path answers: a
  computing holder frees nothing now (deferred), a gone process gave its bytes
  back with it, and any other failure frees nothing and is logged.

A stand-in is a handle to one ledger entry, not a model: ``copy.copy`` and
``copy.deepcopy`` give a second handle to the same entry (sharing its state;
ComfyUI itself copies patchers with ``clone()``, which a stand-in does not
offer, and never copies one), and pickling one is refused with a TypeError
(another process's model never crosses a process boundary).
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

import torch

from .. import errors
from ..client import Client
from .devices import DeviceMap

log = logging.getLogger("comem.comfy")

ASK_TIMEOUT_S = 10.0


class _Recorder:
    """Collects the attribute names ComfyUI reads from stand-ins (and those it wanted but did not find)."""

    def __init__(self) -> None:
        self.enabled = False
        self.read: Set[str] = set()
        self.missing: Set[str] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            self.enabled = True
            self.read.clear()
            self.missing.clear()

    def stop(self) -> None:
        self.enabled = False

    def note(self, name: str, missing: bool = False) -> None:
        if self.enabled:
            with self._lock:
                (self.missing if missing else self.read).add(name)


Recorder = _Recorder()


class WorkerModel:
    """The object a stand-in's ``model`` attribute holds: named after the remote model, weakref-able."""

    def __init__(self, name: str, process: str) -> None:
        self.name = name
        self.process = process

    def __repr__(self) -> str:
        return f"<{self.process}:{self.name} (another process's model)>"


#: The surface a stand-in offers ComfyUI (ComfyUI's contract two, comfyui-manager-docs.md §6.2).
SURFACE = frozenset({
    "load_device", "offload_device", "current_loaded_device", "model", "parent", "model_size", "loaded_size",
    "partially_unload", "partially_load", "detach", "is_clone", "model_patches_to", "model_patches_models",
    "model_dtype", "lowvram_patch_counter", "is_dynamic", "get_nested_additional_models", "clone_base_uuid",
    "model_options", "size", "cleanup",
})


def ask_bytes(memory_to_free: Any, resident: int) -> int:
    """The bytes to ask a holder for when ComfyUI wants ``memory_to_free`` (a float or an int) of ``resident``.

    The ceiling of a fractional figure (truncating 104857600.8 to 104857600 asked for less than
    ComfyUI then requires), at most ``resident``. Nothing (0) for 0, a negative or NaN: a125cd84's
    loop passes 0.0 once its reading meets the target exactly, and ComfyUI accepts 0 freed for it.
    """
    try:
        want = float(memory_to_free)
    except (TypeError, ValueError):
        return 0
    if not want > 0:  # also NaN
        return 0
    if math.isinf(want) or want >= resident:
        return resident
    if isinstance(memory_to_free, int):
        return memory_to_free
    return min(resident, math.ceil(want))


class OtherModel(NamedTuple):
    """One model another process holds on a card, as the ledger lists it: what a stand-in stands for."""
    entry_id: str  #: the coordinator's entry id (hex text, as ``status()`` lists it)
    name: str
    process: str   #: the holding process's name
    size: int      #: bytes
    resident: int  #: bytes on the card now (> 0: an offloaded model has no stand-in)


class OtherCard(NamedTuple):
    """One card of the ledger as the stand-ins need it (comem device ``index``)."""
    index: int
    process_scope: str  #: the coordinator's ``process_scope`` there: "device-wide", or "process-local" (WDDM)
    models: Tuple[OtherModel, ...]  #: other processes' models resident there, that their holders release on ask


def other_models(status: Dict[str, Any], own_session: Optional[str]) -> List[OtherCard]:
    """The cards in a ``Client.status()`` snapshot and the models on them that stand-ins stand for.

    Every card (never host RAM: ComfyUI's loop for a card must never ask its holders), with the
    resident entries of every process but ``own_session`` whose holders answer release asks. The one
    place the status schema is read for stand-ins: the rest works on these records.
    """
    cards = []
    for d in status.get("devices", []):
        if d.get("host_ram"):
            continue
        models = []
        for p in d.get("processes", []):
            if own_session is not None and p.get("session") == own_session:
                continue
            for h in p.get("holders", []):
                if "release" not in h.get("answers", []):
                    continue
                for e in h.get("entries", []):
                    resident = int(e.get("resident", 0))
                    if resident > 0:
                        models.append(OtherModel(e["id"], e.get("name", "model"), p.get("name", "?"),
                                                 int(e.get("size", 0)), resident))
        cards.append(OtherCard(int(d["index"]), str(d.get("process_scope", "device-wide")), tuple(models)))
    return cards


class StandIn:
    """A model of another process (coordinator entry ``entry_id``), as ComfyUI's loop sees a ModelPatcher."""

    comem_stand_in = True

    def __init__(self, client: Client, entry_id: str, name: str, process: str, size: int, resident: int,
                 device: torch.device, on_freed: Optional[Callable[[int], None]] = None) -> None:
        """``entry_id``: the coordinator's entry; ``on_freed(n)`` is called with every receipt's bytes."""
        object.__setattr__(self, "_state", {
            "client": client, "entry_id": entry_id, "name": name, "process": process, "size": int(size),
            "resident": int(resident), "device": device, "deferred": False, "freed": 0, "asks": 0,
            "on_freed": on_freed,
        })
        object.__setattr__(self, "model", WorkerModel(name, process))
        object.__setattr__(self, "load_device", device)
        object.__setattr__(self, "offload_device", torch.device("cpu"))
        object.__setattr__(self, "parent", None)
        object.__setattr__(self, "clone_base_uuid", object())  # a family of its own: never a clone of anything
        object.__setattr__(self, "model_options", {"transformer_options": {}})

    # Every read is recorded (for the conformance test) and anything outside the surface is refused by name.
    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_") and name != "comem_stand_in":
            Recorder.note(name)
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:
        # Python's own probes (copy's __setstate__, __deepcopy__, pickle's, ...) and private names get
        # a plain AttributeError, as on any object, and read nothing: on an instance made without
        # __init__ (copy and pickle make one) there is no state yet, and reading it here recursed.
        if name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        Recorder.note(name, missing=True)
        st = object.__getattribute__(self, "__dict__").get("_state") or {}
        raise AttributeError(f"comem stand-in for {st.get('process', '?')}:{st.get('name', '?')} has no "
                             f"attribute {name!r} (ComfyUI asked for it; a stand-in offers {sorted(SURFACE)})")

    # ---- copying: a second handle to the same entry; never pickled ----

    def __copy__(self) -> "StandIn":
        twin = type(self).__new__(type(self))
        object.__getattribute__(twin, "__dict__").update(object.__getattribute__(self, "__dict__"))
        return twin

    def __deepcopy__(self, memo: Dict[int, Any]) -> "StandIn":
        # The state holds the client's connection and mirrors one ledger entry: a deep copy of it
        # would be a second client on the same handle. The copy is another handle to the same entry.
        twin = self.__copy__()
        memo[id(self)] = twin
        return twin

    def __reduce_ex__(self, protocol: Any) -> Any:
        st = object.__getattribute__(self, "__dict__").get("_state") or {}
        raise TypeError(f"a comem stand-in (for {st.get('process', '?')}:{st.get('name', '?')}, another process's "
                        "model) cannot be pickled: it is a handle to that process's ledger entry, and models never "
                        "cross a process boundary")

    def __reduce__(self) -> Any:
        return self.__reduce_ex__(None)

    # ---- what ComfyUI reads ----

    @property
    def size(self) -> int:
        return self._state["size"]

    def model_size(self) -> int:
        return self._state["size"]

    def loaded_size(self) -> int:
        return self._state["resident"]

    def current_loaded_device(self) -> torch.device:
        return self._state["device"] if self._state["resident"] > 0 else self.offload_device

    def model_dtype(self) -> torch.dtype:
        return torch.float16

    def lowvram_patch_counter(self) -> int:
        return 0

    def is_dynamic(self) -> bool:
        return False

    def is_clone(self, other: Any) -> bool:
        return other is self

    def model_patches_to(self, device: Any) -> None:
        return None

    def model_patches_models(self) -> List[Any]:
        return []

    def get_nested_additional_models(self) -> List[Any]:
        return []

    def cleanup(self) -> None:
        return None

    # ---- what ComfyUI does ----

    def _ask(self, nbytes: Optional[int]) -> int:
        """Asks the holder for ``nbytes`` (None: all); returns what it freed. Never raises (ComfyUI's loop runs it)."""
        st = self._state
        st["asks"] += 1
        try:
            r = st["client"].ask_release(st["entry_id"], nbytes, timeout=ASK_TIMEOUT_S)
        except errors.Busy:
            st["deferred"] = True  # computing: ComfyUI moves on; the next sync puts it back
            log.info("comem: %s:%s is computing; its release is deferred", st["process"], st["name"])
            return 0
        except errors.NotFound as e:
            got = getattr(e, "freed", 0) or st["resident"]  # the process is gone: its bytes went with it
            st["resident"] = 0
            return self._freed(got)
        except Exception as e:  # noqa: BLE001 - an eviction path must not raise into ComfyUI's loop
            st["deferred"] = True
            log.warning("comem: asking %s:%s for memory failed (nothing freed; ComfyUI moves on): %s",
                        st["process"], st["name"], e)
            return 0
        st["resident"] = r.resident
        return self._freed(r.freed)

    def _freed(self, nbytes: int) -> int:
        st = self._state
        st["freed"] += nbytes
        if nbytes > 0 and st["on_freed"] is not None:
            try:
                st["on_freed"](nbytes)
            except Exception as e:  # noqa: BLE001 - same rule: the receipt stands
                log.warning("comem: noting a receipt of %s:%s failed: %s", st["process"], st["name"], e)
        return nbytes

    def partially_unload(self, device_to: Any, memory_to_free: float = 0) -> int:
        """Asks the holder for ``memory_to_free`` bytes; returns what it freed (nothing asked for 0).

        ComfyUI passes a float (``memory_required - get_free_memory()``); the ask is its ceiling,
        at most the resident bytes (see :func:`ask_bytes`), so an answer that meets it exactly is
        one ComfyUI's ``freed >= memory_to_free`` accepts. A short answer escalates to ``detach``.
        """
        resident = self._state["resident"]
        want = ask_bytes(memory_to_free, resident) if resident > 0 else 0
        if want <= 0:
            return 0
        return self._ask(want)

    def detach(self, unpatch_all: bool = True) -> "WorkerModel":
        """Asks the holder for everything the model has on the card.

        ``unpatch_all=False`` (ComfyUI's detach of a clone it replaces: the weights stay where they
        are) asks nothing, as ModelPatcher's moves no weights then.
        """
        if unpatch_all and self._state["resident"] > 0:
            self._ask(None)
        return self.model

    def partially_load(self, device_to: Any, extra_memory: float = 0, force_patch_weights: bool = False) -> int:
        """The host cannot load another process's model: nothing is loaded."""
        log.debug("comem: ComfyUI asked to load %s:%s, which another process holds; nothing loaded",
                  self._state["process"], self._state["name"])
        return 0

    def __repr__(self) -> str:
        st = self._state
        return f"<comem stand-in {st['process']}:{st['name']} {st['resident']}/{st['size']} bytes>"


class StandIns:
    """The host's stand-ins, kept in step with the ledger (``sync`` reads the coordinator's status as
    :class:`OtherCard` records).

    ``freed(index)`` counts every byte the stand-ins' holders reported freed on comem device
    ``index`` since this object was made (monotonic; a removed stand-in's receipts stay counted),
    and ``process_local(index)`` says whether this host's own free reading there is process-local
    (the coordinator's ``process_scope``: WDDM), as of the last sync.
    """

    def __init__(self, client: Client, mm: Any, devices: DeviceMap) -> None:
        self.client = client
        self.mm = mm
        self.devices = devices
        self._by_entry: Dict[str, Any] = {}  # entry id -> LoadedModel
        self._patchers: Dict[str, StandIn] = {}  # entry id -> StandIn (kept alive: LoadedModel holds a weakref)
        self._freed: Dict[int, int] = {}  # comem device -> bytes stand-ins' holders reported freed
        self._scope: Dict[int, str] = {}  # comem device -> the coordinator's process_scope
        self._freed_lock = threading.Lock()

    @property
    def loaded(self) -> List[Any]:
        """The stand-ins' LoadedModels currently in ComfyUI's list."""
        return [lm for lm in self._by_entry.values() if lm in self.mm.current_loaded_models]

    def patcher(self, entry_id: str) -> Optional[StandIn]:
        """The stand-in for coordinator entry ``entry_id``, if there is one."""
        return self._patchers.get(entry_id)

    def freed(self, index: int) -> int:
        """Bytes other processes reported freed on comem device ``index`` through stand-ins, so far."""
        return self._freed.get(index, 0)

    def process_local(self, index: int) -> bool:
        """True when this host's own free reading on ``index`` cannot see other processes (WDDM)."""
        return self._scope.get(index) == "process-local"

    def _noter(self, index: int) -> Callable[[int], None]:
        def note(nbytes: int) -> None:
            with self._freed_lock:
                self._freed[index] = self._freed.get(index, 0) + int(nbytes)
        return note

    def _insert(self, m: OtherModel, index: int) -> None:
        eid = m.entry_id
        dev = self.devices.torch_device(index)
        sp = StandIn(self.client, eid, m.name, m.process, m.size, m.resident, dev, on_freed=self._noter(index))
        lm = self.mm.LoadedModel(sp)
        lm.device = dev
        lm.currently_used = False
        lm.real_model = weakref.ref(sp.model)  # as model_load would set it: the stand-in is "loaded"
        lm.model_finalizer = weakref.finalize(sp.model, lambda: None)
        self._patchers[eid] = sp
        self._by_entry[eid] = lm
        self.mm.current_loaded_models.insert(0, lm)

    def _drop(self, eid: str) -> None:
        lm = self._by_entry.pop(eid, None)
        self._patchers.pop(eid, None)
        if lm is not None:
            try:
                self.mm.current_loaded_models.remove(lm)
            except ValueError:
                pass
            if lm.model_finalizer is not None:
                lm.model_finalizer.detach()

    def sync(self, cards: Optional[Sequence[OtherCard]] = None) -> None:
        """One stand-in per resident entry of every other process on the cards this host uses (not host RAM).

        ``cards``: the ledger's cards as :func:`other_models` reads them (None: from the coordinator's
        status now)."""
        if cards is None:
            cards = other_models(self.client.status(), self.client.session)
        live = set()
        for card in cards:
            self._scope[card.index] = card.process_scope
            for m in card.models:
                live.add(m.entry_id)
                sp = self._patchers.get(m.entry_id)
                lm = self._by_entry.get(m.entry_id)
                if sp is None or lm not in self.mm.current_loaded_models:
                    self._drop(m.entry_id)
                    self._insert(m, card.index)
                else:
                    sp._state["resident"] = m.resident
                    sp._state["size"] = m.size
                    sp._state["deferred"] = False
        for eid in [k for k in self._by_entry if k not in live]:
            self._drop(eid)

    def clear(self) -> None:
        """Takes every stand-in out of ComfyUI's list."""
        for eid in list(self._by_entry):
            self._drop(eid)
