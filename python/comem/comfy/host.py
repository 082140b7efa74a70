"""The host: ComfyUI itself, with the machine's other processes in its model list.

:class:`Host` registers ComfyUI's ``current_loaded_models`` as a holder (the
adapter's hooks), keeps one stand-in per model other processes hold, so
ComfyUI's own loop, the Free button and the OOM handler reach them, admits
every load, and before each eviction loop publishes the reserve the
coordinator computes (``EXTRA_RESERVED_VRAM``: it moves only where free
readings are process-local, as under Windows WDDM) and forwards the pager
headroom to comfy-aimdo or comem.aimdo when either is loaded.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Optional

from .. import errors
from ..client import Client
from .adapter import Adapter
from .standin import StandIns

log = logging.getLogger("comem.comfy")


class Host(Adapter):
    """comem under the host's ComfyUI (``mm``: comfy.model_management; imported when None).

    socket: the coordinator's socket (None: the default). embed: run a coordinator
    inside this process when none answers. name: this process in status and logs.
    """

    role = "host"

    def __init__(self, mm: Any = None, socket: Optional[str] = None, name: str = "comfyui", embed: bool = True,
                 card: Any = None, simulated: Optional[bool] = None, client: Optional[Client] = None,
                 aimdo: Any = None) -> None:
        if mm is None:
            from .adapter import mm_module
            mm = mm_module()
        base = int(mm.EXTRA_RESERVED_VRAM)
        self._base = base
        if client is None:
            client = Client(name, role="host", socket=socket, reserve_base=base, embed=embed)
        super().__init__(client, mm, card=card, simulated=simulated, aimdo=aimdo)
        self.standins = StandIns(client, self.mm, self.devices)
        self.published: Optional[int] = None
        self.headroom: Optional[int] = None

    def before_loop(self) -> None:
        """Stand-ins up to date with the ledger; the coordinator's reserve published."""
        if not self.client.connected:
            if self.standins.loaded:
                self.standins.clear()
            return
        try:
            self.standins.sync()
            self.publish()
        except errors.Error as e:
            log.warning("comem: could not bring other processes' models up to date: %s", e)

    def publish(self) -> None:
        """Writes the reserve this host should keep into EXTRA_RESERVED_VRAM; forwards the pager headroom."""
        idx = self.devices.index(self.mm.get_torch_device())
        if idx is None:
            return
        r = self.client.reserve(idx)
        if r.reserve != self.mm.EXTRA_RESERVED_VRAM:
            log.info("comem: reserve %.0f MiB -> %.0f MiB (other processes' charge)",
                     self.mm.EXTRA_RESERVED_VRAM / (1 << 20), r.reserve / (1 << 20))
            self.mm.EXTRA_RESERVED_VRAM = r.reserve
        self.published = r.reserve
        if r.pager_headroom != self.headroom:
            self.headroom = r.pager_headroom
            _forward_headroom(r.pager_headroom)

    def sync(self) -> None:
        """Stand-ins, this process's entries and the reserve, all brought up to date now."""
        with self.lock:
            self.before_loop()
            self.models.sync()

    def after_uninstall(self) -> None:
        self.standins.clear()
        self.mm.EXTRA_RESERVED_VRAM = self._base


def _forward_headroom(nbytes: int) -> None:
    """The pager headroom the coordinator computed, to whichever pager this process loaded."""
    for mod in ("comem.aimdo.control", "comfy_aimdo.control"):
        ctl = sys.modules.get(mod)
        lib = getattr(ctl, "lib", None) if ctl is not None else None
        if lib is not None and hasattr(lib, "set_simple_vram_headroom"):
            try:
                lib.set_simple_vram_headroom(int(nbytes))
                log.info("comem: pager headroom %.0f MiB forwarded to %s", nbytes / (1 << 20), mod)
            except Exception as e:  # the reserve is still published
                log.warning("comem: forwarding the pager headroom to %s failed: %s", mod, e)
