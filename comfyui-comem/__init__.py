"""comem's ComfyUI custom node, as ComfyUI-Manager and the Comfy registry install it.

This folder holds no code of its own: the node (*comem status*) and the host
adapter are in the ``comem`` package, which ``pip install -r requirements.txt``
puts into ComfyUI's Python. ComfyUI imports this file from ``custom_nodes/``;
it imports them from :mod:`comem.comfy.node` and installs the adapter, as the
``comem.comfy`` folder does when a developer links it from a source tree
(``python3 -m comem.comfy install DIR``). The adapter starts the user's
coordinator (``comemd``) when none runs; ``COMEM_AUTOSTART=0`` switches that
off (no coordinator is started then, in ComfyUI's process or out of it) and
``COMEM_COMFY=off`` the adapter.

Without the package (the requirements not installed yet), or with one that
cannot load, ComfyUI starts without comem: one ERROR line says why and what to
run, and no node is registered. Nothing here imports torch; ComfyUI has
imported it already when it loads custom nodes.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Dict

#: The node classes ComfyUI registers from this folder (empty when comem cannot be loaded).
NODE_CLASS_MAPPINGS: Dict[str, Any] = {}
#: Their names in the browser's node library.
NODE_DISPLAY_NAME_MAPPINGS: Dict[str, str] = {}


def _unavailable(error: BaseException) -> str:
    """The one line ComfyUI's log gets when ``comem`` cannot be imported: why, and what to run."""
    requirements = os.path.join(os.path.dirname(os.path.abspath(__file__)), "requirements.txt")
    if isinstance(error, ModuleNotFoundError) and (error.name or "").split(".")[0] == "comem":
        why = f"the comem package is not installed in this Python ({sys.executable})"
    else:
        why = f"the comem package cannot be loaded ({type(error).__name__}: {error})"
    return (f"comem: {why}; ComfyUI runs without comem. Install it with "
            f"`{sys.executable} -m pip install -r {requirements}` once comem is on PyPI; until then from "
            f"comem's source: `{sys.executable} -m pip install /path/to/comem` (it builds the wheel: a C "
            f"compiler, CMake, Ninja and json-c's headers are needed; docs/install.md). Then restart ComfyUI")


try:
    from comem.comfy import node as _node
except Exception as _error:  # ImportError, or comem's own (a glibc too old says which it needs)
    logging.getLogger("comem.comfy").error("%s", _unavailable(_error))
else:
    NODE_CLASS_MAPPINGS = _node.NODE_CLASS_MAPPINGS
    NODE_DISPLAY_NAME_MAPPINGS = _node.NODE_DISPLAY_NAME_MAPPINGS
    _node.install_from_comfyui()

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]
