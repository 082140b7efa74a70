"""comfy-env's isolated workers under comem, seen from the host (ComfyUI's own process).

comfy-env (PyPI ``comfy-env``) runs a node pack in a worker process with a Python
environment of its own, and keeps a cross-process memory manager of its own in the
host: a proxy (``SubprocessModelPatcher``) in ComfyUI's list per worker model, a budget
call before each worker load that evicts host models, idle and pressure asks, and a
reserve it writes into ``EXTRA_RESERVED_VRAM`` and aimdo's headroom. Beside comem, each
of those would be a second answer to a question the ledger already answers. The
:class:`Bridge` leaves one path for each (docs/comfy-env.md):

- **Joining.** Before a node runs in a worker that has not joined yet (its first call,
  or the first after comfy-env replaced a dead one), the host asks the worker, through
  comfy-env's own ``call_module``, to run :func:`comem.comfy.comfyenv_worker.join`:
  the worker opens a session named after its environment and puts comem's worker
  adapter over its ComfyUI (admission, release asks, census, busy at comfy-env's call
  boundaries, its aimdo steered). comem reaches the worker's ``sys.path`` through the
  ``sys_path`` comfy-env gives every worker: a private folder holding only ``comem``.
- **One row per model.** A joined worker's models are in the ledger (its session) and
  in ComfyUI's list as comem stand-ins; comfy-env's proxies for them are kept out of
  the list. A worker that did not join keeps comfy-env's proxies as its rows; a proxy
  is never counted as a model of the host (``models.is_comfy_env_proxy``).
- **One admission path, one eviction path.** comfy-env's budget call answers a joined
  worker with its device alone (no eviction, nothing written into the worker), and
  its idle and pressure asks skip joined workers: the coordinator admits their loads
  and asks them, with sized asks and receipts.
- **One writer.** In the host, comem writes ``EXTRA_RESERVED_VRAM`` and aimdo's
  headroom; comfy-env's reserve publication and its forward to aimdo write nothing.
  (In a worker, comfy-env's start-up bootstrap is the one writer of
  ``EXTRA_RESERVED_VRAM`` and of aimdo's initial headroom; comem steers the headroom
  from then on and never writes the reserve there.)
- **Waiting is idle.** While the host's node waits on a worker, the host is idle in
  the ledger with its model lock set down, so the worker's admission can take host
  bytes (the same rule as :meth:`Adapter.waiting`).

Only the comfy-env versions in :data:`KNOWN` are bridged; another version gets one
warning naming it, and comfy-env then runs as it is. ``COMEM_COMFY_ENV=off`` switches
the bridge off; comfy-env's own switches (``COMFY_ENV_WORKER_AIMDO``, ...) are left alone.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import weakref
from contextlib import nullcontext
from typing import Any, Callable, Dict, Optional, Set

from .models import is_comfy_env_proxy

log = logging.getLogger("comem.comfy")

#: The comfy-env releases whose host-side functions the bridge was written against and tested with.
KNOWN = ("0.4.46",)
#: The module a worker runs to join (through comfy-env's call_module).
WORKER_MODULE = "comem.comfy.comfyenv_worker"
JOIN_S = 120.0  #: bound on a worker's join (it opens a client and installs the adapter; 2 busy cores)
SWITCH = "COMEM_COMFY_ENV"

#: What the bridge replaces or wraps in comfy-env's host modules: (module attribute, function name).
_NEEDS = (("pool", "_create_worker"), ("pool", "_get_or_create_worker"), ("pool", "_handle_vram_budget"),
          ("pool", "_publish_reserve"), ("pool", "_forward_reserve_to_aimdo"), ("pool", "_insert_loaded_model"),
          ("pool", "_worker_charges"), ("pool", "_WORKER_POOL"), ("metadata", "_call_in_worker"),
          ("state_sync", "plan_idle_release"), ("state_sync", "plan_pressure_release"))


def installed_version() -> Optional[str]:
    """comfy-env's version in this Python, or None where it is not installed."""
    from importlib import metadata
    try:
        return metadata.version("comfy-env")
    except metadata.PackageNotFoundError:
        return None


def env_name(env_dir: Any) -> str:
    """The session name of the worker of ``env_dir``: comfy-env's environment, less its ABI tag.

    comfy-env lays an environment at ``<root>/envs/<name>_<abi>/.pixi/envs/default``; the user knows
    it by ``<name>`` (``comemdemo-nodes``), the ABI tag (``py312-torch2.9-cpu``) says nothing new.
    """
    parts = str(env_dir).replace("\\", "/").rstrip("/").split("/")
    label = parts[-4] if len(parts) >= 4 and parts[-3:] == [".pixi", "envs", "default"] else parts[-1]
    base, sep, tail = label.rpartition("_")
    if sep and base and tail.startswith("py"):
        label = base
    label = "".join(ch if ch.isprintable() else "?" for ch in label) or "comfy-env"
    return label.encode("utf-8")[:63].decode("utf-8", "ignore")


def comem_path_folder() -> str:
    """A private folder holding only ``comem`` (a link to this package), for a worker's ``sys.path``.

    Never the folder that holds comem itself: in an installed comem that is site-packages, whose
    other packages (torch among them) must not shadow the environment's own. The folder lives in
    the user's private runtime folder, one per comem install (two ComfyUIs of one user with two comem
    installs never swap each other's); a link found there that names anything else is replaced.
    """
    import hashlib
    import comem
    from ..client import runtime_dir
    target = os.path.dirname(os.path.abspath(comem.__file__))
    tag = hashlib.sha256(target.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    folder = os.path.join(runtime_dir(), f"comfy-env-path-{tag}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    link = os.path.join(folder, "comem")
    try:
        if os.path.islink(link) and os.readlink(link) == target:
            return folder
    except OSError:
        pass
    tmp = os.path.join(folder, f".comem-{os.getpid()}-{threading.get_ident()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)  # atomic: a racing host sees either link whole
    return folder


#: In the bridge's refusals: no worker of that environment is asked to join again (one did not answer).
_EVERY_WORKER = -1


class _Joined:
    """A worker that runs comem: its comfy-env worker object (weakly), the process and its session."""

    __slots__ = ("worker", "pid", "session", "name")

    def __init__(self, worker: Any, pid: int, session: Optional[str], name: str) -> None:
        self.worker = weakref.ref(worker)
        self.pid = pid
        self.session = session
        self.name = name


def _printable(text: Any, limit: int = 300) -> str:
    """Another process's words, fit for one log line: control characters replaced, at most ``limit`` characters."""
    s = "".join(ch if ch.isprintable() else "?" for ch in str(text))
    return s if len(s) <= limit else s[:limit] + "..."


def worker_pid(worker: Any) -> Optional[int]:
    """The pid of the Python a comfy-env worker runs now (its ready frame's, else the process it started)."""
    state = getattr(worker, "pin_state", None)
    pid = state.get("pid") if isinstance(state, dict) else None
    if isinstance(pid, int) and pid > 0:
        return pid
    proc = getattr(worker, "_process", None)
    return getattr(proc, "pid", None)


class Bridge:
    """comem and comfy-env's host-side memory management, each question answered once (see the module)."""

    def __init__(self, host: Any, pool: Any, metadata: Any, state_sync: Any, version: str) -> None:
        self.host = host
        self.pool = pool
        self.metadata = metadata
        self.state_sync = state_sync
        self.version = version
        self._saved: list = []
        self._joined: Dict[str, _Joined] = {}  # comfy-env's pool key (env dir) -> the worker that joined
        self._said: Set[str] = set()  # env keys whose refusal to join was logged (once each)
        # env key -> the worker pid that did not join (not asked again), or _EVERY_WORKER
        self._refused: Dict[str, Optional[int]] = {}
        self._lock = threading.Lock()
        self.installed = False

    # ---- attach / detach ----

    @classmethod
    def attach(cls, host: Any) -> Optional["Bridge"]:
        """The bridge over this process's comfy-env, installed; None where there is nothing to bridge.

        None, silently, where comfy-env is not installed or ``COMEM_COMFY_ENV=off``; None with one
        warning where its version is not one comem knows or a function the bridge needs is missing.
        """
        if os.environ.get(SWITCH, "").strip().lower() in ("0", "off", "false", "no"):
            log.info("comem: %s=%s: comfy-env's workers are left to comfy-env", SWITCH, os.environ[SWITCH])
            return None
        version = installed_version()
        if version is None:
            return None
        if version not in KNOWN:
            log.warning("comem: comfy-env %s is not a version comem knows (%s): its workers do not join the ledger "
                        "and its own memory management runs as it is (its proxies are still never counted as "
                        "ComfyUI's own models)", version, ", ".join(KNOWN))
            return None
        try:
            from comfy_env import state_sync
            from comfy_env.isolation import metadata, pool
        except Exception as e:  # noqa: BLE001 - a broken comfy-env must not stop ComfyUI's start
            log.warning("comem: comfy-env %s could not be imported (%s): its workers do not join the ledger", version, e)
            return None
        mods = {"pool": pool, "metadata": metadata, "state_sync": state_sync}
        missing = [f"{m}.{n}" for m, n in _NEEDS if not hasattr(mods[m], n)]
        if missing:
            log.warning("comem: comfy-env %s lacks %s: its workers do not join the ledger", version, ", ".join(missing))
            return None
        return cls(host, pool, metadata, state_sync, version).install()

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def install(self) -> "Bridge":
        pool, st = self.pool, self.state_sync
        self._patch(pool, "_create_worker", self._wrap_create_worker(pool._create_worker))
        self._patch(self.metadata, "_call_in_worker", self._wrap_call_in_worker(self.metadata._call_in_worker))
        self._patch(pool, "_handle_vram_budget", self._wrap_budget(pool._handle_vram_budget))
        self._patch(pool, "_publish_reserve", self._publish_reserve)
        self._patch(pool, "_forward_reserve_to_aimdo", _no_forward)
        self._patch(pool, "_insert_loaded_model", self._wrap_insert(pool._insert_loaded_model))
        self._patch(st, "plan_idle_release", self._wrap_plan(st.plan_idle_release))
        self._patch(st, "plan_pressure_release", self._wrap_plan(st.plan_pressure_release))
        self.installed = True
        log.info("comem: comfy-env %s bridged: its workers join the ledger at their first node", self.version)
        return self

    def uninstall(self) -> None:
        """Restores comfy-env's own functions (joined workers keep their sessions until they exit)."""
        for owner, name, value in reversed(self._saved):
            setattr(owner, name, value)
        self._saved.clear()
        self.installed = False

    # ---- which workers run comem ----

    def joined(self, key: str) -> Optional[_Joined]:
        """The joined worker of comfy-env's env ``key``, while that same process lives."""
        j = self._joined.get(str(key))
        if j is None:
            return None
        w = j.worker()
        if w is None or not w.is_alive() or worker_pid(w) != j.pid:
            return None
        return j

    def runs_comem(self, worker: Any) -> bool:
        """True for a comfy-env worker whose process joined comem's ledger."""
        for j in list(self._joined.values()):
            if j.worker() is worker:
                return worker.is_alive() and worker_pid(worker) == j.pid
        return False

    def _key_joined(self, key: Any) -> bool:
        return self.joined(str(key)) is not None

    def workers(self) -> Dict[str, Dict[str, Any]]:
        """comfy-env's live workers as the bridge sees them: env key -> name, pid, whether joined."""
        out = {}
        for key, rec in list(getattr(self.pool, "_WORKER_POOL", {}).items()):
            w = rec.worker
            j = self.joined(key)
            out[str(key)] = {"name": env_name(key), "pid": worker_pid(w), "alive": w.is_alive(),
                             "joined": j is not None, "session": j.session if j else None}
        return out

    def ensure_joined(self, worker: Any, key: str) -> bool:
        """Asks ``worker`` to join (once per process it runs); True when it runs comem."""
        key = str(key)
        if self.joined(key) is not None:
            return True
        pid = worker_pid(worker)
        if key in self._refused and self._refused[key] in (pid, _EVERY_WORKER):
            return False  # this process said no once: asked again only once comfy-env replaces it
        name, timed_out = env_name(key), False
        try:
            answer = worker.call_module(module=WORKER_MODULE, func="join", timeout=JOIN_S, name=name,
                                        host_pid=os.getpid())
        except TimeoutError:
            # comfy-env ends a worker whose call timed out: asking its successors again could end each in turn.
            timed_out = True
            answer = {"joined": False, "why": f"it did not answer its join within {JOIN_S:.0f} s (comfy-env ended "
                                              "it); this environment's next workers are not asked"}
        except Exception as e:  # noqa: BLE001 - a worker that cannot join still runs its nodes
            answer = {"joined": False, "why": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        answer = self._checked(answer, pid)
        if answer.get("joined"):
            with self._lock:
                self._joined[key] = _Joined(worker, int(answer["pid"]), answer.get("session"), name)
            self._said.discard(key)
            log.info("comem: comfy-env worker %s (pid %s) joined the ledger as session %s", name, answer["pid"],
                     _printable(answer.get("session")))
            return True  # its proxies leave ComfyUI's list at the next sync, under the model lock
        self._refused[key] = _EVERY_WORKER if timed_out else pid
        if key not in self._said:
            self._said.add(key)
            log.warning("comem: comfy-env worker %s (pid %s) runs without comem: %s. Its models stay under "
                        "comfy-env's own stand-ins, and the card sees its process as unregistered",
                        name, pid, _printable(answer.get("why", "it did not join")))
        return False

    def _checked(self, answer: Any, pid: Optional[int]) -> Dict[str, Any]:
        """The worker's join record, believed only as far as the ledger confirms it.

        The record is another process's word: it is a join only when it names the worker's own pid and the
        coordinator lists a session of that id for that pid (what the ledger holds for the worker is then
        its own, whatever the record said)."""
        if not isinstance(answer, dict):
            return {"joined": False, "why": f"its answer was {type(answer).__name__}, not the join record"}
        if not answer.get("joined"):
            return answer
        said, session = answer.get("pid"), answer.get("session")
        if not isinstance(said, int) or isinstance(said, bool) or said != pid:
            return {"joined": False, "why": f"its join record names pid {said!r}, not the worker's {pid}"}
        try:
            listed = any(p.get("session") == session and p.get("pid") == pid
                         for d in self.host.client.status().get("devices", []) for p in d.get("processes", []))
        except Exception as e:  # noqa: BLE001 - no confirmation, no join
            return {"joined": False, "why": f"the coordinator could not confirm its session: {e}"}
        if not listed:
            return {"joined": False, "why": f"the coordinator lists no session {session!r} for pid {pid}"}
        return answer

    def drop_proxies(self) -> None:
        """Takes comfy-env's proxies for joined workers' models out of ComfyUI's list (comem's stand-ins stand
        for them). Proxies of workers that run without comem stay: they are those models' only rows."""
        mm = self.host.mm
        for lm in list(mm.current_loaded_models):
            if is_comfy_env_proxy(lm) and self.runs_comem(getattr(lm.model, "_worker", None)):
                try:
                    mm.current_loaded_models.remove(lm)
                except ValueError:
                    pass

    # ---- the wrappers ----

    def _wrap_create_worker(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def create_worker(env_dir: Any, working_dir: Any, sys_path: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                folder = comem_path_folder()
                sys_path = list(sys_path or [])
                if folder not in sys_path:
                    sys_path.append(folder)
            except Exception as e:  # noqa: BLE001 - the worker still starts; it just cannot join
                log.warning("comem: comfy-env's worker for %s gets no comem on its path: %s", env_name(env_dir), e)
            return orig(env_dir, working_dir, sys_path, *args, **kwargs)
        return create_worker

    def _wrap_call_in_worker(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def call_in_worker(*args: Any, **kwargs: Any) -> Any:
            spec = kwargs.get("worker_spec")
            with self._waiting():
                if spec is not None:
                    try:
                        worker, _gen = self.pool._get_or_create_worker(*spec)
                        self.ensure_joined(worker, str(spec[0]))
                    except Exception as e:  # noqa: BLE001 - comfy-env's own call reports a start failure
                        log.debug("comem: comfy-env worker not joined before its call: %s", e)
                # The rows follow at the host node's end (Host.node_boundary), right after this returns.
                return orig(*args, **kwargs)
        return call_in_worker

    def _waiting(self) -> Any:
        """The host's node waits on a worker: idle with its lock set down, where this thread computes a node."""
        host = self.host
        if host.installed and host.lock.held_here():
            return host.waiting()
        return nullcontext()

    def _wrap_budget(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def handle_vram_budget(request: Any, worker_key: Any = None) -> Any:
            if worker_key is not None and self._key_joined(worker_key):
                # comem admits this worker's load (its model_load asks the coordinator): the device alone,
                # so the worker's shim evicts nothing here and writes no reserve and no vram_state.
                try:
                    return {"device": str(self.host.mm.get_torch_device())}
                except Exception:  # noqa: BLE001 - the handler must never raise into the worker's load
                    return {}
            return orig(request, worker_key=worker_key)
        return handle_vram_budget

    def _publish_reserve(self, shrink_allowed: bool = False) -> int:
        """comfy-env's reserve publication with its writes taken out: comem writes the host's reserve.

        comfy-env refreshes each worker's measured holding inside ``_worker_charges`` (its idle release
        reads it), so that still runs; the value returned is what comem published."""
        try:
            self.pool._worker_charges()
        except Exception as e:  # noqa: BLE001
            log.debug("comem: comfy-env's worker charges: %s", e)
        return int(self.host.mm.EXTRA_RESERVED_VRAM)

    def _wrap_insert(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def insert_loaded_model(p: Any) -> Any:
            if self.runs_comem(getattr(p, "_worker", None)):
                return None  # comem's stand-in is this model's row
            return orig(p)
        return insert_loaded_model

    def _wrap_plan(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def plan(workers: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                workers = {k: (dict(v, advertises=False) if self._key_joined(k) else v) for k, v in workers.items()}
            except Exception as e:  # noqa: BLE001 - comfy-env's plan runs on what it was given
                log.debug("comem: comfy-env's plan left as given: %s", e)
            return orig(workers, *args, **kwargs)
        return plan


def _no_forward(published: int) -> bool:
    """comfy-env's forward of its reserve into aimdo's headroom: comem steers the host's aimdo instead."""
    return False
