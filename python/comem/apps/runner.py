"""The loop that keeps every configured server on the ledger: one client, one holder per server."""

from __future__ import annotations

import logging
import threading
from typing import List, Optional, Sequence

from ..client import Client
from . import procs
from .config import AppConfig
from .holder import AppHolder
from .proxy import Proxy

log = logging.getLogger("comem.apps")


class Runner:
    """Speaks for the apps of a configuration until :meth:`stop` (or the end of :meth:`run`).

    socket: the coordinator's (None: the default one). interval: seconds between looks at each server.
    while_pid: run() ends once that process has ended (the ComfyUI process that started it).
    """

    def __init__(self, apps: Sequence[AppConfig], socket: Optional[str] = None, interval: float = 1.0,
                 name: str = "comem-apps", while_pid: Optional[int] = None) -> None:
        if not apps:
            raise ValueError("no apps to speak for (docs/apps.md: the apps file)")
        if not 0.05 <= interval <= 3600:
            raise ValueError(f"interval must be between 0.05 and 3600 seconds (got {interval!r})")
        self.interval = interval
        self.while_pid = while_pid  #: run() ends once this process has ended
        self.client = Client(name, role="worker", socket=socket, require_coordinator=True)
        self.holders: List[AppHolder] = [AppHolder(self.client, a) for a in apps]
        self.proxies: List[Proxy] = []
        self._stop = threading.Event()
        try:
            for h in self.holders:
                if h.app.proxy is not None:
                    self.proxies.append(Proxy(h, h.app.proxy))
        except OSError as e:
            self.close()
            raise ValueError(f"cannot serve the proxy of app '{h.app.name}' on 127.0.0.1:{h.app.proxy}: "
                             f"{e.strerror}") from e

    def step(self) -> None:
        """One look at every server: the ledger made current, then one reload where there is room."""
        for h in self.holders:
            h.refresh()
        for h in self.holders:
            h.reload_when_free()

    def run(self) -> None:
        """Steps every interval until :meth:`stop`; then takes the servers off the ledger and closes."""
        try:
            while not self._stop.is_set():
                if self.while_pid is not None and not procs.alive(self.while_pid):
                    log.info("comem.apps: pid %d has ended: the servers leave the ledger", self.while_pid)
                    break
                self.step()
                self._stop.wait(self.interval)
        finally:
            self.close()

    def stop(self) -> None:
        """Ends :meth:`run` (from a signal handler or another thread)."""
        self._stop.set()

    def close(self) -> None:
        """Takes every server off the ledger and closes the client; the servers run on untouched."""
        for p in self.proxies:
            p.close()
        self.proxies = []
        for h in self.holders:
            h.close()
        self.client.close()
