"""comfy-aimdo's ``control`` module over comem: initialisation, devices, headroom, logging, statistics.

``init()`` opens a comem client (worker role; named by ``COMEM_NAME`` or
``aimdo-<pid>``) that works locally when no coordinator answers.
``init_device(n)`` opens a pager on CUDA device n (the simulated card when no
CUDA driver loads, or when ``COMEM_AIMDO_BACKEND=sim``) and attaches it to the
coordinator, so other processes can take its unpinned pages.

One difference from aimdo, by design: aimdo patches the driver's allocation
functions so that a torch allocation that does not fit evicts weights first;
comem's pager does not touch the driver. Instead the pager keeps room on the card
for torch's working memory: besides the headrooms, at least the largest weight
faulted so far on the device (an offloaded weight is streamed through a torch
tensor of that size), added to the device's extra headroom.
"""

from __future__ import annotations

import atexit
import logging
import os
from typing import Any, Iterable, List, Optional, Tuple, Union

from .. import errors
from ..client import Client
from ..pager import Pager

log = logging.getLogger("comem.aimdo")

client: Optional[Client] = None
devctxs: List[Pager] = []
_pagers = {}  # device -> Pager
_simple_headroom: Optional[int] = None
_extra = {}    # device -> the extra headroom the application asked for
_largest = {}  # device -> the largest weight faulted there: room kept for streaming it
nvml_pressure_requested = False  #: what init(nvml_pressure=) was told; comem's device readings come from its own probe (NVML where loaded)
DEFAULT_SIMPLE_VRAM_HEADROOM = 256 << 20  #: the pager's simple headroom until one is set (aimdo's default too)
MAX_SIMPLE_VRAM_HEADROOM = 1 << 60  #: the largest simple headroom aimdo 0.6.0 accepts; comem keeps the same bound


class _Lib:
    """Stands where comfy-aimdo's ctypes library does, for code that calls ``control.lib.<fn>`` directly."""

    def set_simple_vram_headroom(self, nbytes: int) -> None:
        set_simple_vram_headroom(nbytes)

    def get_simple_vram_headroom(self) -> int:
        return get_simple_vram_headroom()

    def get_total_vram_usage(self, devctx: Pager) -> int:
        return devctx.usage


lib: Optional[_Lib] = None


def detect_vendor() -> Optional[str]:
    """The GPU vendor torch was built for: ``"cuda"``, ``"rocm"`` or None (torch absent or CPU-only).

    Read from torch's own build record (``torch.version``), so it never initialises CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if getattr(torch.version, "hip", None):
        return "rocm"
    if getattr(torch.version, "cuda", None):
        return "cuda"
    return None


def init(implementation: Optional[str] = None, simple_vram_headroom: Optional[int] = None,
         nvml_pressure: bool = False) -> bool:
    """Initialises the pager API (idempotent; a second call only updates the two settings).

    ``implementation``: None, ``"cuda"`` or ``"sim"`` (``"rocm"`` is refused: comem has no HIP backend).
    ``simple_vram_headroom`` applies to every device, now and later (None: keep it).
    ``nvml_pressure`` is recorded for aimdo-shaped callers; comem's device term always reads the card
    the way its probe does (NVML where the library loads), so it changes nothing here."""
    global lib, client
    if implementation not in (None, "cuda", "sim"):
        log.info("comem.aimdo: implementation %r is not supported (cuda or sim)", implementation)
        return False
    global nvml_pressure_requested
    nvml_pressure_requested = bool(nvml_pressure)
    if simple_vram_headroom is not None:
        set_simple_vram_headroom(simple_vram_headroom)
    if lib is not None:
        return True
    name = os.environ.get("COMEM_NAME") or f"aimdo-{os.getpid()}"
    try:
        client = Client(name[:63], role="worker")
    except errors.Error as e:  # the pager works without the ledger
        log.warning("comem.aimdo: no comem client (%s); pages are not steerable across processes", e)
        client = None
    lib = _Lib()
    atexit.register(deinit)  # pagers before their client, before the interpreter tears threads down
    return True


def _backend() -> str:
    forced = os.environ.get("COMEM_AIMDO_BACKEND")
    if forced in ("sim", "cuda"):
        return forced
    return "cuda"


def _open(device: int, headroom: int) -> Pager:
    backend = _backend()
    try:
        p = Pager(backend, device)
    except errors.NoDevice as e:
        if backend != "cuda":
            raise
        log.info("comem.aimdo: no CUDA device %d (%s); using the simulated card", device, e)
        p = Pager("sim", device)
    _extra[device] = headroom
    if headroom:
        p.set_extra_headroom(headroom)
    if _simple_headroom is not None:
        p.simple_headroom = _simple_headroom
    if client is not None:
        try:
            p.attach(client, f"aimdo{device}")
        except errors.Error as e:
            log.warning("comem.aimdo: pager not attached to the coordinator: %s", e)
    return p


def init_devices(device_ids: Iterable[Union[int, Tuple[int, int]]]) -> bool:
    """Opens a pager per device; an item may be ``(device, extra_vram_headroom)``."""
    global devctxs
    if lib is None:
        return False
    req = []
    for d in device_ids:
        if isinstance(d, tuple):
            if len(d) != 2:
                raise ValueError("device tuple must be (device_id, extra_vram_headroom)")
            dev, head = d
        else:
            dev, head = d, 0
        head = int(head)
        if head < 0:
            raise ValueError("extra_vram_headroom must be non-negative")
        req.append((int(dev), head))
    if not req:
        return False
    out = []
    for dev, head in req:
        if dev not in _pagers:
            _pagers[dev] = _open(dev, head)
        elif head:
            _extra[dev] = head
            _pagers[dev].set_extra_headroom(head + _largest.get(dev, 0))
        out.append(_pagers[dev])
    devctxs = out
    return True


def init_device(device_id: int, extra_vram_headroom: int = 0) -> bool:
    """Opens the pager of one device."""
    if extra_vram_headroom:
        return init_devices([(device_id, extra_vram_headroom)])
    return init_devices([device_id])


def get_devctx(device_id: int) -> Pager:
    """The pager of an initialised device."""
    p = _pagers.get(int(device_id))
    if p is None:
        raise RuntimeError(f"comem.aimdo device {device_id} is not initialized")
    return p


def keep_room_for(pager: Pager, nbytes: int) -> None:
    """A weight of nbytes was faulted on pager's device: keep room for streaming one that large."""
    dev = pager.device
    if nbytes > _largest.get(dev, 0):
        _largest[dev] = nbytes
        pager.set_extra_headroom(_extra.get(dev, 0) + nbytes)


def set_simple_vram_headroom(headroom: int) -> None:
    """The per-process margin every device's pager keeps (aimdo's simple_vram_headroom), in bytes; live.

    0 to 2**60. Unlike aimdo it may be called before ``init()``: it then applies from the first device on."""
    global _simple_headroom
    value = errors.size(headroom, "simple_vram_headroom")
    if value > MAX_SIMPLE_VRAM_HEADROOM:
        raise ValueError("simple_vram_headroom must be between 0 and 2**60 bytes")
    _simple_headroom = value
    for p in _pagers.values():
        p.simple_headroom = _simple_headroom


def get_simple_vram_headroom() -> int:
    """The simple headroom in force, in bytes (aimdo 0.6.0's getter); RuntimeError before ``init()``."""
    if lib is None:
        raise RuntimeError("comem.aimdo is not initialized")
    return DEFAULT_SIMPLE_VRAM_HEADROOM if _simple_headroom is None else _simple_headroom


def deinit() -> None:
    """Closes every pager and the client."""
    global lib, devctxs, client
    for p in _pagers.values():
        p.close()
    _pagers.clear()
    _extra.clear()
    _largest.clear()
    devctxs = []
    if client is not None:
        client.close()
        client = None
    lib = None


def _set_level(level: int) -> None:
    """Like aimdo's own log levels: the messages go to stderr unless the application routes them."""
    log.setLevel(level)
    if not log.handlers and not logging.getLogger().handlers:
        h = logging.StreamHandler()
        h.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        log.addHandler(h)


def set_log_none() -> None: _set_level(logging.CRITICAL + 10)
def set_log_detail() -> None: _set_level(logging.INFO)  # ComfyUI's DETAIL console level (aimdo has none)
def set_log_critical() -> None: _set_level(logging.CRITICAL)
def set_log_error() -> None: _set_level(logging.ERROR)
def set_log_warning() -> None: _set_level(logging.WARNING)
def set_log_info() -> None: _set_level(logging.INFO)
def set_log_debug() -> None: _set_level(logging.DEBUG)
def set_log_verbose() -> None: _set_level(logging.DEBUG)
def set_log_vverbose() -> None: _set_level(logging.DEBUG)


def analyze() -> None:
    """Logs each device's usage and pager counters."""
    for dev, p in _pagers.items():
        s = p.stats()
        log.info("comem.aimdo device %d: %d MiB committed, %d MiB reclaimable; %d faults (%d offloaded), "
                 "%d commits, %d evictions, %d release asks", dev, p.usage >> 20, p.reclaimable >> 20, s["faults"],
                 s["offloaded"], s["commits"], s["evictions"], s["release_asks"])


def get_total_vram_usage() -> int:
    """Bytes committed by this process's pagers."""
    return sum(p.usage for p in devctxs)


def record(stream: Any, assert_graph_breaks: bool = False) -> Any:
    """aimdo 0.5.0+: ``malloc_graph.record``; refused here (:mod:`comem.aimdo.malloc_graph`)."""
    from . import malloc_graph
    return malloc_graph.record(stream, assert_graph_breaks)


def plat_init() -> bool:  # part of comfy-aimdo's surface; nothing to do here
    return lib is not None


def plat_cleanup() -> None:
    pass
