"""comem in a comfy-env worker: the worker's side of docs/comfy-env.md.

The host's bridge (:mod:`comem.comfy.comfyenv_host`) has comfy-env's worker run
:func:`join` through comfy-env's own ``call_module``, on the worker's main thread,
between two calls, after comfy-env has set the worker up (its load shim, and aimdo
where the host has it). Joining opens a session named after the environment and
puts comem's worker adapter (:class:`comem.comfy.Worker`) over the worker's
ComfyUI: each load is admitted by the coordinator, release asks are answered by
ComfyUI's own unload ladder, the residency is reported, and where comfy-env enabled
comfy-aimdo, comem steers its headroom as it steers the host's.

comfy-env runs two functions of its worker-side memory module around every request
that runs a node or a module function: ``cast_epoch_boundary`` before it,
``release_node_boundary`` after it. Joining wraps both: between them the worker is
busy in the ledger and holds its model lock, so an ask waits for the boundary (or
gets only what aimdo can give safely), as for the host's nodes. A request that fails
before its method runs never reaches ``release_node_boundary``; the next request's
start ends that node first, and a worker whose request failed so is busy until then.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any, Callable, Dict, Optional

log = logging.getLogger("comem.comfy")

#: comfy-env's worker-side memory module, as its worker imports it (a staged copy, by its bare name).
MEMORY_MODULE = "memory_manager"

_joined: Optional["_Joined"] = None


class _Joined:
    """This worker's comem: the :class:`comem.comfy.Worker` and the node boundaries around comfy-env's calls."""

    def __init__(self, worker: Any, name: str) -> None:
        self.worker = worker
        self.name = name
        self.pid = os.getpid()
        self._node: Optional[contextlib.ExitStack] = None
        self.hooked = False

    def answer(self) -> Dict[str, Any]:
        client = self.worker.client
        comfy = self.worker.comfy
        return {"joined": True, "pid": self.pid, "session": client.session, "name": self.name,
                "connected": bool(client.connected), "boundaries": self.hooked,
                "comfyui": comfy is not None, "aimdo_steered": bool(comfy is not None and comfy.steer is not None)}

    # ---- node boundaries ----

    def start(self, prompt: Any) -> None:
        """A request begins: the node before it, if its end was never reported, ends first."""
        self.end()
        stack = contextlib.ExitStack()
        try:
            stack.enter_context(self.worker.node(None if prompt is None else str(prompt)))
        except Exception as e:  # noqa: BLE001 - never into comfy-env's loop: the call runs unmarked
            stack.close()
            log.warning("comem: the comfy-env worker %s could not mark its call busy: %s", self.name, e)
            return
        self._node = stack

    def end(self) -> None:
        """A request's method returned or raised: idle again, with a census."""
        stack, self._node = self._node, None
        if stack is not None:
            try:
                stack.close()
            except Exception as e:  # noqa: BLE001
                log.warning("comem: the comfy-env worker %s could not report its call's end: %s", self.name, e)

    def hook(self, memory: Any) -> bool:
        """Wraps comfy-env's two boundary functions in ``memory`` (its worker-side memory module)."""
        if memory is None or not all(hasattr(memory, n) for n in ("cast_epoch_boundary", "release_node_boundary")):
            return False
        memory.cast_epoch_boundary = _before(memory.cast_epoch_boundary, self.start)
        memory.release_node_boundary = _after(memory.release_node_boundary, self.end)
        self.hooked = True
        return True


def _before(orig: Callable[..., Any], start: Callable[[Any], None]) -> Callable[..., Any]:
    def cast_epoch_boundary(prompt_gen: Any = None, *args: Any, **kwargs: Any) -> Any:
        result = orig(prompt_gen, *args, **kwargs)
        start(prompt_gen)
        return result
    cast_epoch_boundary.__wrapped__ = orig  # type: ignore[attr-defined]
    return cast_epoch_boundary


def _after(orig: Callable[..., Any], end: Callable[[], None]) -> Callable[..., Any]:
    def release_node_boundary(*args: Any, **kwargs: Any) -> Any:
        try:
            return orig(*args, **kwargs)
        finally:
            end()
    release_node_boundary.__wrapped__ = orig  # type: ignore[attr-defined]
    return release_node_boundary


def join(name: str, host_pid: int = 0) -> Dict[str, Any]:
    """Joins this comfy-env worker to comem's ledger as session ``name``; returns the join record.

    Run once per worker process (a second call answers the same record). Never raises: a worker that
    cannot join says why (``{"joined": False, "why": ...}``) and runs its nodes as comfy-env alone would.
    """
    global _joined
    if _joined is not None and _joined.pid == os.getpid():
        return _joined.answer()
    switch = os.environ.get("COMEM_COMFY", "").strip().lower()
    if switch in ("0", "off", "false", "no"):
        return {"joined": False, "why": f"COMEM_COMFY={switch} in the worker's environment"}
    _log_to_stderr()
    try:
        from .worker import Worker
        worker = Worker(name)
    except Exception as e:  # noqa: BLE001 - say why; comfy-env runs the worker as before
        return {"joined": False, "why": f"{type(e).__name__}: {e}"}
    joined = _Joined(worker, name)
    if not joined.hook(sys.modules.get(MEMORY_MODULE)):
        log.warning("comem: comfy-env's worker-side %s module has no call boundaries to hook: the worker %s is never "
                    "marked busy", MEMORY_MODULE, name)
    _joined = joined
    log.info("comem: comfy-env worker %s (pid %d, host %d) joined as session %s", name, joined.pid, host_pid,
             worker.client.session)
    return joined.answer()


def joined() -> Optional[Dict[str, Any]]:
    """This worker's join record, or None where it has not joined."""
    return _joined.answer() if _joined is not None and _joined.pid == os.getpid() else None


def _log_to_stderr() -> None:
    """comfy-env sends a worker's stdout nowhere and keeps its stderr: comem's records go there."""
    logger = logging.getLogger("comem")
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[comfy-env worker %(process)d] %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
