"""What ComfyUI loads from custom_nodes/comem: the host adapter, and one node that shows the ledger.

Nothing here imports torch or ComfyUI at import time: the adapter (which does)
is imported when :func:`install_from_comfyui` runs, inside a ComfyUI process
that already has both.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, Optional

log = logging.getLogger("comem.comfy")

_host: Optional[Any] = None
#: Why this process has no adapter, as the status node says it (set by install_from_comfyui).
_why_none = "comem's node was not loaded by ComfyUI in this process"


def announce_binding() -> str:
    """What a custom node's ``prestartup_script.py`` does: logs where the binding and its library were loaded from.

    Called by both custom node folders (this package's own, linked from a source tree, and the
    ``comfyui-comem`` folder ComfyUI-Manager and the registry install), before ComfyUI imports its model
    manager; it touches none of ComfyUI's state. Returns the line it logged.
    """
    import comem
    line = f"comem: binding loaded from {os.path.dirname(comem.__file__)} (library {comem.library_path})"
    log.info("%s", line)
    return line


def install_from_comfyui() -> Optional[Any]:
    """Installs the host adapter in this ComfyUI process (once; ``COMEM_COMFY=off`` skips it).

    Returns the installed :class:`comem.comfy.Host`, or None where it is switched off or could not
    be installed (then ComfyUI runs on without it, and the error is logged once).
    """
    global _host, _why_none
    if _host is not None:
        return _host
    switch = os.environ.get("COMEM_COMFY", "").strip()
    if switch.lower() in ("0", "off", "false", "no"):
        log.info("comem: COMEM_COMFY=%s: the adapter is not installed", switch)
        _why_none = (f"comem is installed, and switched off in this ComfyUI (COMEM_COMFY={switch}): ComfyUI manages "
                     "its memory alone. `comem status` shows the other processes' ledger")
        return None
    try:
        from .host import Host
        _host = Host().install()
    except Exception as e:
        log.exception("comem: the ComfyUI adapter could not be installed; ComfyUI runs without it")
        _host = None
        _why_none = (f"comem's adapter could not be installed in this ComfyUI ({type(e).__name__}: {e}); "
                     "ComfyUI's log has the details")
    return _host


def status_text() -> str:
    """The coordinator's status as ``comem status --json`` prints it, or a sentence saying why there is none."""
    if _host is None:
        return _why_none
    return json.dumps(_host.client.status(), indent=1)


class ComemStatus:
    """A node that outputs the coordinator's status (the JSON ``comem status --json`` prints).

    An output node: its text is shown on the node in the browser and recorded in the prompt's
    history (``outputs[node]["text"]``), and it is also the node's STRING output. It runs on
    every queue (never served from ComfyUI's cache), since the ledger changes between runs.
    """

    CATEGORY = "utils/comem"
    DESCRIPTION = "The comem coordinator's ledger: every process, model and grant on each card."
    RETURN_TYPES = ("STRING",)
    RETURN_NAMES = ("status",)
    FUNCTION = "status"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls) -> Dict[str, Any]:
        """No inputs."""
        return {"required": {}}

    @classmethod
    def IS_CHANGED(cls) -> float:
        """NaN, which equals nothing: ComfyUI runs the node again on every queue."""
        return float("nan")

    def status(self) -> Dict[str, Any]:
        """``{"ui": {"text": [json]}, "result": (json,)}``: shown on the node and passed on as STRING."""
        text = status_text()
        return {"ui": {"text": [text]}, "result": (text,)}


NODE_CLASS_MAPPINGS = {"ComemStatus": ComemStatus}
NODE_DISPLAY_NAME_MAPPINGS = {"ComemStatus": "comem status"}
