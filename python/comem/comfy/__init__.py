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
    from .adapter import Adapter, active
    from .host import Host
    from .standin import Recorder, StandIn
    from .worker import Worker

    __all__ = ["Adapter", "Host", "Recorder", "StandIn", "Worker", "active"]
