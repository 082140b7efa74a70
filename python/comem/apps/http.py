"""JSON over HTTP to the one address an app's configuration names, and nowhere else.

A recipe speaks only to ``App.url``: the configuration's address (loopback by default). Every call
has a timeout, and every failure is an :class:`AppError` that says which app, which call and what
came back, so a server that does not answer, answers an error or answers nonsense stops only that
call, never the holder.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from typing import Any, Optional


class AppError(Exception):
    """An app's server did not do what a recipe asked: unreachable, an HTTP error, or an answer that makes no sense."""


class Endpoint:
    """One server's base address (``http://127.0.0.1:8080``); the only place its calls go."""

    def __init__(self, app: str, url: str, timeout: float = 10.0) -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"app '{app}': url must be http://HOST:PORT (got {url!r})")
        if u.query or u.fragment:
            raise ValueError(f"app '{app}': url takes no query or fragment (got {url!r})")
        self.app = app
        self.url = url.rstrip("/")
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.base = u.path.rstrip("/")
        self.timeout = timeout

    @property
    def loopback(self) -> bool:
        """Whether the address is this machine's own (127.0.0.0/8, ::1, localhost)."""
        return self.host in ("localhost", "::1") or self.host.startswith("127.")

    def call(self, method: str, path: str, body: Optional[Any] = None, timeout: Optional[float] = None) -> Any:
        """Sends body as JSON, returns the answer's JSON (None for an empty body); AppError otherwise."""
        raw = self._send(method, path, body, timeout)
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise AppError(f"app '{self.app}': {method} {self.url}{path}: the answer is not JSON ({raw[:80]!r})") from e

    def text(self, path: str, timeout: Optional[float] = None) -> str:
        """GET path, the answer as text (a Prometheus page); AppError otherwise."""
        return self._send("GET", path, None, timeout).decode(errors="replace")

    def _send(self, method: str, path: str, body: Optional[Any], timeout: Optional[float]) -> bytes:
        conn_cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = conn_cls(self.host, self.port, timeout=self.timeout if timeout is None else timeout)
        what = f"app '{self.app}': {method} {self.url}{path}"
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {"Accept": "application/json"}
            if data is not None:
                headers["Content-Type"] = "application/json"
            conn.request(method, self.base + path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read(16 << 20)
        except (OSError, http.client.HTTPException, socket.timeout) as e:
            raise AppError(f"{what}: {e.__class__.__name__}: {e}") from e
        finally:
            conn.close()
        if resp.status >= 400:
            text = raw[:300].decode(errors="replace").strip()
            raise AppError(f"{what}: HTTP {resp.status} {resp.reason}" + (f": {text}" if text else ""))
        return raw
