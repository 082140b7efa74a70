"""Run by ComfyUI before it imports its model manager: make the comem binding importable and say so.

Nothing here touches ComfyUI's state; the adapter is installed when ComfyUI
imports this folder as a custom node (``__init__.py``).
"""

import logging
import os
import sys

_python = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
if _python not in sys.path:
    sys.path.insert(0, _python)
try:
    from comem.comfy.node import announce_binding

    announce_binding()
except ImportError as e:
    logging.error("comem: the binding cannot be loaded, so the adapter will not run: %s", e)
