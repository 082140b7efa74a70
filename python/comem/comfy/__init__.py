"""comem's ComfyUI adapter: ComfyUI's model manager across processes. Also a ComfyUI custom node.

As a library::

    from comem.comfy import Host, Worker
    host = Host().install()          # in the ComfyUI process (the custom node does this)
    worker = Worker("sam3")          # in a node pack's isolated process
    worker.load(model_patcher_or_module)
    with worker.node(prompt_id):
        ...

As a custom node: link or copy this folder to ``ComfyUI/custom_nodes/comem``
(``python3 -m comem.comfy install /path/to/ComfyUI`` does it); ComfyUI then
runs ``prestartup_script.py`` first and imports this package, which installs
the host adapter. ``COMEM_COMFY=off`` disables it; ``COMEM_SOCKET``,
``COMEM_DEVICE`` and the rest of comem's environment apply.
"""

from __future__ import annotations

import os
import sys

if __name__ not in ("comem.comfy",):
    # Loaded by ComfyUI from custom_nodes/: reach the real package (beside this folder's target) and install.
    _here = os.path.dirname(os.path.realpath(__file__))
    _python = os.path.dirname(os.path.dirname(_here))
    if _python not in sys.path:
        sys.path.insert(0, _python)
    from comem.comfy.node import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS, install_from_comfyui

    install_from_comfyui()
    __all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]
else:
    # Imported on first use (PEP 562): they need torch, and `python3 -m comem.comfy install` does not.
    _LAZY = {"Adapter": ".adapter", "active": ".adapter", "Host": ".host", "Recorder": ".standin",
             "StandIn": ".standin", "Worker": ".worker"}
    __all__ = sorted(_LAZY)

    def __getattr__(name: str):
        if name not in _LAZY:
            raise AttributeError(f"module 'comem.comfy' has no attribute {name!r}")
        import importlib
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value

    def __dir__():
        return sorted(set(globals()) | set(_LAZY))
