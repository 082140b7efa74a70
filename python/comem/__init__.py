"""comem: cross-process memory co-management for ML processes that share GPUs and host RAM.

A ctypes binding over ``libcomem.so`` (standard library only; torch is
optional and imported lazily by :mod:`comem.torch`)::

    import comem

    with comem.Client("sam3", role="worker") as c:
        models = c.add_holder("models", on_release=free_some)   # free_some(ask) -> bytes freed
        with c.admit(6 << 30, holder=models) as grant:           # raises comem.Refused when short
            ...load the weights...
            grant.done(models.add_entry("sam3-vit-h", 6 << 30), 6 << 30)
        with c.node("prompt-1"):                                 # never asked while computing
            ...run...

Layers above, each importable alone: :mod:`comem.torch` (tensors over pager
pages, the torch census figure, a release ladder for torch models),
:mod:`comem.aimdo` (comfy-aimdo's module shapes over comem's pager) and
:mod:`comem.comfy` (the ComfyUI adapter, also a custom node).
"""

from ._bin import binary_path
from ._lib import path as library_path
from .client import (ANSWERS, HOST_RAM, KINDS, ROLES, Client, Entry, Grant, Holder, Released, ReleaseAsk, Reserve,
                     default_socket, runtime_dir)
from .coordinator import Coordinator
from .errors import (Busy, Closed, Error, Forked, NoDevice, NotFound, PermissionDenied, Refused, TimedOut,
                     status_str)
from .pager import Pager, VBar
from .simcard import CardReading, SimCard
from .view import View, ViewReading, ViewState

__version__ = "0.1.0"

__all__ = [
    "ANSWERS", "HOST_RAM", "KINDS", "ROLES", "Busy", "CardReading", "Client", "Closed", "Coordinator", "Entry", "Error", "Forked",
    "Grant", "Holder", "NoDevice", "NotFound", "Pager", "PermissionDenied", "Refused", "Released", "ReleaseAsk", "Reserve",
    "SimCard", "TimedOut", "VBar", "View", "ViewReading", "ViewState", "binary_path", "default_socket", "library_path",
    "runtime_dir", "status_str",
]
