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
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, Dict, List, Optional, Set

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


class StandIn:
    """A model of another process (coordinator entry ``entry_id``), as ComfyUI's loop sees a ModelPatcher."""

    comem_stand_in = True

    def __init__(self, client: Client, entry_id: str, name: str, process: str, size: int, resident: int,
                 device: torch.device) -> None:
        object.__setattr__(self, "_state", {
            "client": client, "entry_id": entry_id, "name": name, "process": process, "size": int(size),
            "resident": int(resident), "device": device, "deferred": False, "freed": 0, "asks": 0,
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
        Recorder.note(name, missing=True)
        raise AttributeError(f"comem stand-in for {self._state['process']}:{self._state['name']} has no "
                             f"attribute {name!r} (ComfyUI asked for it; a stand-in offers {sorted(SURFACE)})")

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
            st["freed"] += got
            return got
        except errors.Error as e:
            st["deferred"] = True
            log.warning("comem: asking %s:%s for memory failed: %s", st["process"], st["name"], e)
            return 0
        st["resident"] = r.resident
        st["freed"] += r.freed
        return r.freed

    def partially_unload(self, device_to: Any, memory_to_free: int = 0) -> int:
        """Asks the holder for ``memory_to_free`` bytes; returns what it freed (short answers escalate)."""
        if self._state["resident"] <= 0:
            return 0
        want = int(memory_to_free) if memory_to_free else self._state["resident"]
        return self._ask(max(1, want))

    def detach(self, unpatch_all: bool = True) -> "WorkerModel":
        """Asks the holder for everything the model has on the card."""
        if self._state["resident"] > 0:
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
    """The host's stand-ins, kept in step with the ledger (``sync`` reads the coordinator's status)."""

    def __init__(self, client: Client, mm: Any, devices: DeviceMap) -> None:
        self.client = client
        self.mm = mm
        self.devices = devices
        self._by_entry: Dict[str, Any] = {}  # entry id -> LoadedModel
        self._patchers: Dict[str, StandIn] = {}  # entry id -> StandIn (kept alive: LoadedModel holds a weakref)

    @property
    def loaded(self) -> List[Any]:
        """The stand-ins' LoadedModels currently in ComfyUI's list."""
        return [lm for lm in self._by_entry.values() if lm in self.mm.current_loaded_models]

    def patcher(self, entry_id: str) -> Optional[StandIn]:
        return self._patchers.get(entry_id)

    def _insert(self, eid: str, name: str, process: str, size: int, resident: int, index: int) -> None:
        dev = self.devices.torch_device(index)
        sp = StandIn(self.client, eid, name, process, size, resident, dev)
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

    def sync(self, status: Optional[Dict[str, Any]] = None) -> None:
        """One stand-in per resident entry of every other process on the devices this host uses."""
        st = status if status is not None else self.client.status()
        own = self.client.session
        live = set()
        for d in st.get("devices", []):
            index = int(d["index"])
            for p in d.get("processes", []):
                if own is not None and p.get("session") == own:
                    continue
                for h in p.get("holders", []):
                    if "release" not in h.get("answers", []):
                        continue
                    for e in h.get("entries", []):
                        eid, resident = e["id"], int(e.get("resident", 0))
                        if resident <= 0:
                            continue
                        live.add(eid)
                        sp = self._patchers.get(eid)
                        lm = self._by_entry.get(eid)
                        if sp is None or lm not in self.mm.current_loaded_models:
                            self._drop(eid)
                            self._insert(eid, e.get("name", "model"), p.get("name", "?"), int(e.get("size", 0)),
                                         resident, index)
                        else:
                            sp._state["resident"] = resident
                            sp._state["size"] = int(e.get("size", sp._state["size"]))
                            sp._state["deferred"] = False
        for eid in [k for k in self._by_entry if k not in live]:
            self._drop(eid)

    def clear(self) -> None:
        for eid in list(self._by_entry):
            self._drop(eid)
