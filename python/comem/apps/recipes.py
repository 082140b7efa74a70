"""What comem may ask of each LLM server, in the server's own documented calls.

A recipe knows one kind of server: which models it has loaded (and, where it says, which process
holds each and how large it is), how to unload one, how to load it again, and whether a request
is in flight. It never guesses: a server that does not say something is answered "unknown" (None),
and the holder then measures instead. Each recipe says what an unload gives back (:attr:`gives`).

- ``llama-server`` (llama.cpp's server): in router mode (started without ``-m``, with
  ``--models-dir`` or ``--models-preset``) ``GET /models`` lists each model with its status, and
  ``POST /models/unload`` / ``POST /models/load`` take ``{"model": NAME}``; each model runs in a
  child ``llama-server`` of the router, which exits on unload. A server started with one model
  (``-m``) has no unload: it is listed, measured and never asked.
- ``ollama``: ``GET /api/ps`` lists the loaded models (``size``, ``size_vram``); a generate request
  with no prompt and ``keep_alive: 0`` unloads one, with no ``keep_alive`` (the server's default) loads
  it. Each loaded model runs in an ``ollama runner`` child of ``ollama serve``.
- ``vllm``: started with ``--enable-sleep-mode`` (and ``VLLM_SERVER_DEV_MODE=1``, which exposes these
  calls), ``POST /sleep?level=1`` offloads the weights to host RAM and drops the KV cache (level 2
  drops the weights too), ``POST /wake_up`` brings them back, ``GET /is_sleeping`` says which;
  ``GET /metrics``' ``vllm:num_requests_running`` says whether a request is in flight.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from typing import Dict, List, NamedTuple, Optional, Tuple, Type

from . import procs
from .http import AppError, Endpoint


class Model(NamedTuple):
    """One model a server knows."""

    name: str
    loaded: bool
    pid: Optional[int] = None   #: the process that holds it, where the server names it
    size: Optional[int] = None  #: bytes the server says it takes; None where it does not say
    match: Optional[str] = None  #: text in the arguments of the child process that holds it (a path, a digest)


class Recipe:
    """One kind of server. Subclasses fill in the calls; every call raises AppError on failure."""

    kind = ""
    default_url = ""
    gives = ""          #: what an unload gives back, for status and docs/apps.md
    can_unload = True   #: False: listed and measured, never asked
    child_holds = False  #: a loaded model lives in a child of the server (found by Model.match, else the largest)

    def __init__(self, endpoint: Endpoint, level: int = 1) -> None:
        self.ep = endpoint
        self.level = level

    def models(self) -> List[Model]:
        """The models the server has loaded (and, where it says, those it could load)."""
        raise NotImplementedError

    def unload(self, model: str) -> None:
        """Asks the server to unload model; returns once the server answered."""
        raise NotImplementedError

    def load(self, model: str) -> None:
        """Asks the server to load model; returns once the server answered."""
        raise NotImplementedError

    def busy(self) -> Optional[bool]:
        """Whether a request is in flight; None where the server does not say."""
        return None


def _models_field(answer: object, key: str, app: str) -> list:
    if not isinstance(answer, dict) or not isinstance(answer.get(key), list):
        raise AppError(f"app '{app}': expected a JSON object with a '{key}' list, got {str(answer)[:120]!r}")
    return answer[key]


class LlamaServer(Recipe):
    kind = "llama-server"
    default_url = "http://127.0.0.1:8080"
    gives = "a whole model: its child process exits (router mode); a server started with -m gives nothing"
    poll_s = 0.05  #: how often /models is read while a load or an unload completes (both answer at once)

    def __init__(self, endpoint: Endpoint, level: int = 1) -> None:
        super().__init__(endpoint, level)
        self.router: Optional[bool] = None
        self._loaded: List[str] = []

    def _listed(self) -> Optional[list]:
        try:
            return _models_field(self.ep.call("GET", "/models"), "data", self.ep.app)
        except AppError:
            if self.router:
                raise
            return None

    @staticmethod
    def _status(m: dict) -> str:
        st = m.get("status")
        v = st.get("value") if isinstance(st, dict) else st
        return v if isinstance(v, str) else ""

    @staticmethod
    def _port_arg(m: dict) -> Optional[str]:
        # The router starts each child with "--port N" (its status.args): how the child is told apart.
        st = m.get("status")
        args = st.get("args") if isinstance(st, dict) else None
        if isinstance(args, list):
            for i, a in enumerate(args[:-1]):
                if a == "--port" and isinstance(args[i + 1], (str, int)):
                    return f"--port {args[i + 1]}"
        return None

    def models(self) -> List[Model]:
        listed = self._listed()
        if listed is not None and any(isinstance(m, dict) and "status" in m for m in listed):
            self.router, self.can_unload, self.child_holds = True, True, True
            out = [Model(m["id"], self._status(m) == "loaded", None, None, self._port_arg(m) or m["id"])
                   for m in listed if isinstance(m, dict) and isinstance(m.get("id"), str)]
            self._loaded = [m.name for m in out if m.loaded]
            return out
        self.router, self.can_unload = False, False
        answer = self.ep.call("GET", "/v1/models")
        return [Model(m["id"], True) for m in _models_field(answer, "data", self.ep.app)
                if isinstance(m, dict) and isinstance(m.get("id"), str)]

    def _wait(self, model: str, done: Tuple[str, ...], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            state = next((self._status(m) for m in self._listed() or []
                          if isinstance(m, dict) and m.get("id") == model), "")
            if state in done:
                return
            if state == "failed" or time.monotonic() >= deadline:
                raise AppError(f"app '{self.ep.app}': {what} of '{model}' did not finish: its status is "
                               f"{state or 'absent'!r} after {timeout:.0f} s")
            time.sleep(self.poll_s)

    def unload(self, model: str) -> None:
        self._ok(self.ep.call("POST", "/models/unload", {"model": model}), "unload", model)
        self._wait(model, ("unloaded",), self.ep.timeout, "the unload")

    def load(self, model: str) -> None:
        self._ok(self.ep.call("POST", "/models/load", {"model": model}), "load", model)
        self._wait(model, ("loaded",), max(self.ep.timeout, 120), "the load")

    def _ok(self, answer: object, what: str, model: str) -> None:
        if isinstance(answer, dict) and answer.get("success") is False:
            raise AppError(f"app '{self.ep.app}': {what} of '{model}' refused: {str(answer)[:200]}")

    def busy(self) -> Optional[bool]:
        # Any slot processing a request. Asked of each loaded model in router mode, never loading one.
        queries = ([f"/slots?model={urllib.parse.quote(m)}&autoload=false" for m in self._loaded]
                   if self.router else ["/slots"])
        for q in queries:
            try:
                slots = self.ep.call("GET", q, timeout=2)
            except AppError:
                return None
            if not isinstance(slots, list):
                return None
            if any(isinstance(x, dict) and x.get("is_processing") for x in slots):
                return True
        return False


class Ollama(Recipe):
    kind = "ollama"
    default_url = "http://127.0.0.1:11434"
    gives = "a whole model: its runner process exits"
    child_holds = True

    def models(self) -> List[Model]:
        out = []
        for m in _models_field(self.ep.call("GET", "/api/ps"), "models", self.ep.app):
            if not isinstance(m, dict) or not isinstance(m.get("name"), str):
                continue
            size = m.get("size_vram") or m.get("size")
            digest = m.get("digest") if isinstance(m.get("digest"), str) else None
            out.append(Model(m["name"], True, None, size if isinstance(size, int) and size >= 0 else None,
                             digest[:16] if digest else None))
        return out

    def unload(self, model: str) -> None:
        self.ep.call("POST", "/api/generate", {"model": model, "keep_alive": 0})

    def load(self, model: str) -> None:
        self.ep.call("POST", "/api/generate", {"model": model}, timeout=max(self.ep.timeout, 120))


_RUNNING = re.compile(r"^vllm:num_requests_running(?:\{[^}]*\})?\s+([0-9.eE+-]+)", re.M)


class Vllm(Recipe):
    kind = "vllm"
    default_url = "http://127.0.0.1:8000"
    gives = "sleep level 1: the weights go to host RAM, the KV cache is dropped; level 2: both are dropped"
    child_holds = True

    def models(self) -> List[Model]:
        names = [m["id"] for m in _models_field(self.ep.call("GET", "/v1/models"), "data", self.ep.app)
                 if isinstance(m, dict) and isinstance(m.get("id"), str)]
        answer = self.ep.call("GET", "/is_sleeping")
        if not isinstance(answer, dict) or not isinstance(answer.get("is_sleeping"), bool):
            raise AppError(f"app '{self.ep.app}': /is_sleeping answered {str(answer)[:120]!r} "
                           "(is the server started with --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1?)")
        return [Model(n, not answer["is_sleeping"]) for n in names]

    def unload(self, model: str) -> None:
        self.ep.call("POST", f"/sleep?level={self.level}")

    def load(self, model: str) -> None:
        self.ep.call("POST", "/wake_up", timeout=max(self.ep.timeout, 120))

    def busy(self) -> Optional[bool]:
        try:
            text = self.ep.text("/metrics", timeout=2)
        except AppError:
            return None
        found = _RUNNING.findall(text)
        return any(float(v) > 0 for v in found) if found else None


RECIPES: Dict[str, Type[Recipe]] = {r.kind: r for r in (LlamaServer, Ollama, Vllm)}
"""The recipes by the name a configuration gives them."""


def model_process(root: int, model: Model, recipe: Recipe, kids: Optional[List[int]] = None) -> int:
    """The process that holds model: the one the server names; else, for a server that runs models in
    children, the child whose arguments name the model, or the largest child; else the server itself."""
    if model.pid:
        return model.pid
    if not recipe.child_holds:
        return root
    if kids is None:  # the caller's one reading of the process tree, else one now
        kids = procs.descendants(root)
    if model.match:
        for pid in kids:
            if model.match in " ".join(procs.cmdline(pid)):
                return pid
    sized = [(procs.rss(p) or 0, p) for p in kids]
    return max(sized)[1] if sized else root
