"""The worker: an isolated process of a node pack, holding ComfyUI ModelPatchers or plain torch models.

:class:`Worker` asks for admission before every load, answers release asks
with a ladder that never blocks its compute thread (ComfyUI's partial unload
escalating to detach, or parts of a plain module to the host, then the whole
module, then the allocator's cache), reports a census at node boundaries,
and calls the pressure ask on out-of-memory before the caller shrinks its
batch. ComfyUI's ``ModelPatcher``s go through ComfyUI's own
``load_models_gpu`` (hooked as in the host, without stand-ins); plain
``torch.nn.Module``s through :class:`comem.torch.Models`.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator, Optional

from .. import errors
from ..client import Client, Entry
from .adapter import Adapter

log = logging.getLogger("comem.comfy")


def _is_patcher(model: Any) -> bool:
    return all(hasattr(model, a) for a in ("model_size", "loaded_size", "partially_load", "partially_unload"))


class Worker:
    """comem in a worker process. ``mm``: comfy.model_management, None to import it if present, False for none.

    Without ``client``, it opens one on ``socket`` (None: the default) after finding the user's coordinator
    or, unless ``COMEM_AUTOSTART=0``, starting ``comemd`` (:func:`comem.comfy.adapter.start_coordinator`).
    """

    def __init__(self, name: str, socket: Optional[str] = None, device: int = 0, mm: Any = None, card: Any = None,
                 client: Optional[Client] = None) -> None:
        import comem.torch as ctorch
        if client is None:
            from .adapter import start_coordinator
            start_coordinator(name, "worker", socket)  # the user's comemd, started if none runs (COMEM_AUTOSTART)
            client = Client(name, role="worker", socket=socket)
        self.client = client
        self.device = errors.device(device)
        self.comfy: Optional[Adapter] = None
        if mm is None:
            try:
                from .adapter import mm_module
                mm = mm_module()
            except ImportError:
                mm = False
        if mm is not False:
            self.comfy = Adapter(self.client, mm, card=card).install()
            card = self.comfy.devices.card if self.comfy.devices.simulated else card
        #: plain torch models on the card; None where the adapter manages no card (no GPU: host RAM only), where
        #: a holder on card ``device`` would be refused (ENODEV) and a module stays where it is
        self.torch_models: Optional[Any] = None
        if self.comfy is None or self.comfy.devices.cards:
            try:
                place = ctorch.placement(self.device, card, socket=self.client.socket)
            except errors.NoDevice as e:  # no GPU and no simulated card asked for: modules stay where they are
                log.info("comem: no card for plain torch models here (%s)", e)
                place = None
            if place is not None:
                self.torch_models = ctorch.Models(self.client, self.device, name="torch-models", placement_=place)
        if self.comfy is not None and self.torch_models is not None:
            # ComfyUI's models share torch's allocator with the plain ones: its bytes are not the plain holder's
            # overhead (reported so, a coordinator asked that holder for a flush that could free none of them).
            comfy_models, index = self.comfy.models, self.device
            self.torch_models.others = lambda: comfy_models.allocator_resident(index)

    # ---- loading ----

    def load(self, model: Any, name: Optional[str] = None, memory_required: int = 0) -> Optional[Entry]:
        """Admits and loads a ModelPatcher (through ComfyUI's load_models_gpu) or a plain torch module."""
        if _is_patcher(model):
            if self.comfy is None:
                raise TypeError("a ComfyUI ModelPatcher needs ComfyUI's model manager in this process")
            self.comfy.mm.load_models_gpu([model], memory_required=memory_required)
            lm = next((x for x in self.comfy.mm.current_loaded_models if x.model is model), None)
            return self.comfy.models.entry_of(lm) if lm is not None else None
        import torch
        if isinstance(model, torch.nn.Module):
            if self.torch_models is None:
                return None  # no card: the module stays in host memory, where it is
            return self.torch_models.load(model, name or type(model).__name__, memory_required)
        raise TypeError(f"model must be a ComfyUI ModelPatcher or a torch.nn.Module, not {type(model).__name__}")

    def unload(self, model: Any) -> int:
        """Moves a model off the card; returns the bytes freed."""
        if _is_patcher(model) and self.comfy is not None:
            with self.comfy.lock:
                lm = next((x for x in self.comfy.mm.current_loaded_models if x.model is model), None)
                if lm is None:
                    return 0
                freed = self.comfy.models.unload(lm, None)
                self.comfy.mm.soft_empty_cache()
                self.comfy.models.sync()
                return freed
        return self.torch_models.unload(model) if self.torch_models is not None else 0

    # ---- node boundaries ----

    @contextlib.contextmanager
    def node(self, prompt: Optional[str] = None) -> Iterator[None]:
        """``with worker.node(prompt):`` the work of one node: busy (asked only for what aimdo can give
        meanwhile); a census after."""
        with contextlib.ExitStack() as stack:
            if self.comfy is not None:
                stack.enter_context(self.comfy.computing(prompt))
            else:
                stack.enter_context(self._busy(prompt))
            if self.torch_models is not None:
                stack.enter_context(self.torch_models.computing(prompt))
            yield

    @contextlib.contextmanager
    def _busy(self, prompt: Optional[str]) -> Iterator[None]:
        self.client.set_busy(True, prompt)
        try:
            yield
        finally:
            self.client.set_busy(False, prompt)

    def census(self) -> None:
        """Reports what every model holds now."""
        if self.comfy is not None:
            with self.comfy.lock:
                self.comfy.models.sync()
        if self.torch_models is not None:
            self.torch_models.census()

    # ---- out of memory ----

    def pressure(self, nbytes: int, timeout: Optional[float] = None) -> int:
        """Asks idle siblings for ``nbytes`` (call it on OOM, before shrinking the batch); returns what came back
        (0 where comem manages no card)."""
        if self.torch_models is None:
            return 0
        return self.client.pressure(nbytes, device=self.device, timeout=timeout)

    def retry_on_oom(self, fn: Any, *args: Any, need: Optional[int] = None, **kwargs: Any) -> Any:
        """Calls fn; on CUDA OOM asks siblings for ``need`` bytes and retries once (a second OOM is raised)."""
        if self.torch_models is None:
            return fn(*args, **kwargs)  # no card: no CUDA OOM, no siblings on one
        return self.torch_models.retry_on_oom(fn, *args, need=need, **kwargs)

    def close(self) -> None:
        """Uninstalls the hooks and closes the client (the process's bytes leave the ledger)."""
        if self.comfy is not None:
            self.comfy.uninstall()
            if self.comfy.models.mirror is not None:
                self.comfy.models.mirror.clear()
        self.client.close()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
