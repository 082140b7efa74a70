"""What ComfyUI loads from custom_nodes/comem: the host adapter, and one node that shows the ledger."""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, Optional, Tuple

log = logging.getLogger("comem.comfy")

_host: Optional[Any] = None


def install_from_comfyui() -> Optional[Any]:
    """Installs the host adapter in this ComfyUI process (once; ``COMEM_COMFY=off`` skips it)."""
    global _host
    if _host is not None:
        return _host
    if os.environ.get("COMEM_COMFY", "").strip().lower() in ("0", "off", "false", "no"):
        log.info("comem: COMEM_COMFY=%s: the adapter is not installed", os.environ["COMEM_COMFY"])
        return None
    try:
        from .host import Host
        _host = Host().install()
    except Exception:
        log.exception("comem: the ComfyUI adapter could not be installed; ComfyUI runs without it")
        _host = None
    return _host


class ComemStatus:
    """A node that outputs the coordinator's status (the JSON ``comem status --json`` prints)."""

    CATEGORY = "utils/comem"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "status"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls) -> Dict[str, Any]:
        return {"required": {}}

    def status(self) -> Tuple[str]:
        if _host is None:
            return ("comem is not installed in this process",)
        return (json.dumps(_host.client.status(), indent=1),)


NODE_CLASS_MAPPINGS = {"ComemStatus": ComemStatus}
NODE_DISPLAY_NAME_MAPPINGS = {"ComemStatus": "comem status"}
