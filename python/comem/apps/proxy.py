"""A pass-through in front of an LLM server that admits a model before a request loads it.

Clients talk to ``http://127.0.0.1:PROXY`` (the app's ``proxy`` key) instead of the server. Each
request is passed on unchanged and its answer streamed back as it comes (server-sent events too);
around it:

- while any request is in flight the server's holders are marked busy, so an admission waits for
  the server's boundary instead of unloading a model under a request;
- a request that names a model comem unloaded (the JSON body's ``model``) first loads it through
  :meth:`AppHolder.load`: an admission of what it held, then the recipe's load, so the bytes are
  booked before the server takes them. No room within the wait: the client gets HTTP 503 with a
  JSON body saying so, and the server is not touched.

It listens on loopback only and forwards only to the app's own url.
"""

from __future__ import annotations

import http.client
import http.server
import json
import logging
import threading
import urllib.parse
from typing import Optional

from .holder import AppHolder

log = logging.getLogger("comem.apps")

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
              "transfer-encoding", "upgrade", "content-length", "host"}
ADMIT_WAIT_S = 60.0  #: how long a request waits for room to load its model
MAX_BODY = 256 << 20  #: the largest request body passed on (images in a chat request stay well below)


class Proxy:
    """Serves 127.0.0.1:port for holder's server until :meth:`close`."""

    def __init__(self, holder: AppHolder, port: int) -> None:
        self.holder = holder
        self.admit_wait = ADMIT_WAIT_S  #: how long a request waits for room to load its model
        up = urllib.parse.urlsplit(holder.app.url)
        self._up_host, self._up_port = up.hostname, up.port or 80
        self._up_base = up.path.rstrip("/")
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the answer's end is the connection's: streams pass as they come

            def log_message(self, fmt: str, *args: object) -> None:
                log.debug("comem.apps proxy: " + fmt, *args)

            def do_GET(self) -> None:
                proxy._pass(self)

            do_POST = do_PUT = do_DELETE = do_HEAD = do_OPTIONS = do_GET

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name=f"comem-apps-proxy-{port}", daemon=True)
        self._thread.start()

    def _model(self, body: bytes) -> Optional[str]:
        try:
            m = json.loads(body).get("model") if body else None
        except (ValueError, AttributeError):
            return None
        return m if isinstance(m, str) else None

    def _refuse(self, h: http.server.BaseHTTPRequestHandler, code: int, text: str) -> None:
        data = json.dumps({"error": text}).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _pass(self, h: http.server.BaseHTTPRequestHandler) -> None:
        try:  # any local process can reach the port: a length that is no number, or too large, is refused
            n = int(h.headers.get("Content-Length") or 0)
        except ValueError:
            self._refuse(h, 400, "comem: Content-Length is not a number")
            return
        if n < 0 or n > MAX_BODY:
            self._refuse(h, 413, f"comem: a request body is at most {MAX_BODY} bytes here")
            return
        body = h.rfile.read(n) if n > 0 else b""
        self.holder.begin_request()
        try:
            model = self._model(body)
            if model is not None and model in self.holder.unloaded:
                need = self.holder.unloaded[model]
                if not self.holder.load(model, need, wait=self.admit_wait):
                    self._refuse(h, 503, f"comem: no room to load '{model}' again yet; try later")
                    return
            up = http.client.HTTPConnection(self._up_host, self._up_port, timeout=600)
            headers = {k: v for k, v in h.headers.items() if k.lower() not in HOP_BY_HOP}
            try:
                up.request(h.command, self._up_base + h.path, body=body or None, headers=headers)
                resp = up.getresponse()
                h.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP_BY_HOP:
                        h.send_header(k, v)
                h.end_headers()
                while True:
                    chunk = resp.read1(65536)
                    if not chunk:
                        break
                    h.wfile.write(chunk)
                    h.wfile.flush()
            except (OSError, http.client.HTTPException) as e:
                self._refuse(h, 502, f"comem: the server at {self.holder.app.url} did not answer: {e}")
            finally:
                up.close()
        finally:
            self.holder.end_request()

    def close(self) -> None:
        """Stops listening; requests in flight finish on their own threads."""
        self.server.shutdown()
        self.server.server_close()
