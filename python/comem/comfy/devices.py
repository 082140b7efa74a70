"""Which comem device a ComfyUI torch device is; without a GPU, host RAM only or a simulated card asked for.

With CUDA, comem device N is the CUDA device with the same UUID (falling back
to the same index). Without a card to manage, no torch device is a comem
device: ComfyUI's models are its own, comem manages host RAM only (the RAM
cache, ``ram.py``; pins), and one line in ComfyUI's log says so. That is the
case when this process has no CUDA (a CPU-only ComfyUI) and no simulated card
was asked for, and when the coordinator reads no card (it found no GPU: a
container where NVML did not load), whatever torch sees: a card ordinal would
be refused there (ENODEV).

A simulated card is used only when asked for: the coordinator serves one
(``comemd --device sim:...``: its status names it), or, with no coordinator,
``COMEM_DEVICE`` names one, or the caller passes ``card``/``simulated``. Then,
without CUDA (Debian's CPU torch, CI), the adapter runs in
*simulated placement*: comem device 0 is the shared simulated card the
coordinator serves, and the torch device ``cpu:0`` plays the card's part.
ComfyUI's main device (``get_torch_device()``) becomes ``cpu:0`` while its
offload device stays ``cpu``, so ComfyUI takes every GPU branch of its loop
(``cpu:0`` is not ``cpu`` to it) while tensors stay in host memory; every byte
ComfyUI counts as loaded on ``cpu:0`` is charged to the simulated card, and
ComfyUI's free-memory reading for ``cpu:0`` is the card's cuMemGetInfo-style
reading. So ComfyUI's real loop, fed the simulated card's figures, makes the
decisions it would make on a GPU.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Dict, Optional

import torch

from .. import errors
from ..simcard import SimCard

log = logging.getLogger("comem.comfy")

#: The torch device that plays the simulated card's part (ComfyUI's offload device stays "cpu").
SIM_DEVICE = torch.device("cpu", 0)


class DeviceMap:
    """Maps ComfyUI's torch devices to comem device indices, for one process."""

    def __init__(self, mm: Any, status: Optional[Dict[str, Any]] = None, card: Optional[SimCard] = None,
                 simulated: Optional[bool] = None) -> None:
        """``status``: the coordinator's (None: none connected). ``simulated`` None decides as the module says."""
        self.mm = mm
        devices = (status or {}).get("devices", [])
        cards = [d for d in devices if not d.get("host_ram")]  # host_ram: null for a card
        served = ((status or {}).get("coordinator") or {}).get("card_spec")
        served = served if isinstance(served, str) and served.startswith("sim") else None
        if simulated is None:
            asked = card is not None or served is not None or \
                (status is None and os.environ.get("COMEM_DEVICE", "").startswith("sim"))
            simulated = asked and not torch.cuda.is_available()
        self.simulated = simulated
        #: False where comem manages no card for this process: every torch device is ComfyUI's alone
        self.cards = simulated or (torch.cuda.is_available() and (status is None or bool(cards)))
        self.card: Optional[SimCard] = None
        self._by_uuid: Dict[str, int] = {}
        if self.simulated:  # the coordinator's own simulated card, where its status names it
            self.card = card if card is not None else SimCard(served)
        elif status is not None:
            for d in cards:
                self._by_uuid[str(d.get("uuid", "")).lower()] = int(d["index"])
        if not self.cards:
            log.info("comem: %s", no_card_line(status, torch.cuda.is_available()))

    def index(self, device: Any) -> Optional[int]:
        """The comem device of a torch device, or None for one comem does not manage."""
        if device is None or not self.cards:
            return None
        dev = torch.device(device)
        if self.simulated:
            return 0 if dev == SIM_DEVICE else None
        if dev.type != "cuda":
            return None
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        uuid = getattr(torch.cuda.get_device_properties(idx), "uuid", None)
        if uuid is not None:
            key = ("gpu-" + str(uuid)).lower()
            if key in self._by_uuid:
                return self._by_uuid[key]
        return idx

    def torch_device(self, index: int) -> torch.device:
        """The torch device ComfyUI uses for comem device ``index``."""
        if self.simulated:
            return SIM_DEVICE
        for i in range(torch.cuda.device_count()):
            if self.index(torch.device("cuda", i)) == index:
                return torch.device("cuda", i)
        return torch.device("cuda", index)

    def free(self, index: int) -> int:
        """Simulated placement: what cuMemGetInfo would say on the card for this process."""
        assert self.card is not None
        return self.card.read(index, local=True).free

    def total(self, index: int) -> int:
        """Simulated placement: the card's total as cuMemGetInfo reports it."""
        assert self.card is not None
        return self.card.read(index, local=True).total


def no_card_line(status: Optional[Dict[str, Any]], cuda: bool) -> str:
    """The one line ComfyUI's log gets where comem manages no card: why, and what comem manages instead."""
    if status is None:
        return "no GPU found and no coordinator yet: comem manages host RAM only, once one answers"
    ram = any(d.get("host_ram") for d in status.get("devices", []))
    found = ("the coordinator found no GPU (comemd.log says why), so ComfyUI's cards are not on the ledger"
             if cuda else "no GPU found")
    return f"{found}: comem manages host RAM only" if ram else \
        f"{found} and the coordinator serves no host RAM: comem manages no memory of this process"


class CardMirror:
    """Simulated placement: keeps this process's charge on the card equal to what ComfyUI counts as loaded."""

    def __init__(self, card: SimCard) -> None:
        self.card = card
        self._charged: Dict[int, int] = {}
        self._lock = threading.Lock()

    def set(self, index: int, nbytes: int) -> None:
        """Charges or frees the difference; an overcommit raises (a GPU would have failed the load)."""
        with self._lock:
            now = self._charged.get(index, 0)
            if nbytes > now:
                self.card.alloc(nbytes - now, index)
            elif nbytes < now:
                self.card.free(now - nbytes, index)
            self._charged[index] = nbytes

    def charged(self, index: int) -> int:
        return self._charged.get(index, 0)

    def clear(self) -> None:
        for idx in list(self._charged):
            try:
                self.set(idx, 0)
            except errors.Error as e:  # the card went away: nothing left to free
                log.debug("comem: simulated card release failed: %s", e)
