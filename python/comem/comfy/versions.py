"""Which ComfyUI releases the adapter was tested with, and one warning for any other.

The adapter wraps ComfyUI's memory functions as it finds them, so an untested
release still runs; what it cannot promise is that a change in those functions
since (a new parameter, a new pool of pins) is followed. The table is data:
the release ``comfyui_version.py`` names, and the tree comem's suites ran
(``docs/comfyui-api.md`` classifies each one's names).
"""

from __future__ import annotations

import logging
import sys
from typing import Dict, Optional

log = logging.getLogger("comem.comfy")

TESTED: Dict[str, str] = {"0.3.64": "a125cd84", "0.33.0": "783545f6", "0.39.1": "v0.39 (assembled)"}
"""ComfyUI's ``__version__`` -> the tree comem's suites ran against."""

_warned = False


def comfyui_version() -> Optional[str]:
    """The running ComfyUI's version (its ``comfyui_version`` module), or None where it has none."""
    module = sys.modules.get("comfyui_version")
    if module is None:
        try:
            import comfyui_version as module  # type: ignore[import-not-found,no-redef]
        except Exception:
            return None
    version = getattr(module, "__version__", None)
    return str(version) if version is not None else None


def warn_if_untested() -> Optional[str]:
    """Logs one warning (per process) naming a ComfyUI release comem was not tested with, and what
    that leaves open. Returns the version read (None where ComfyUI says none)."""
    global _warned
    version = comfyui_version()
    if version is not None and version not in TESTED and not _warned:
        _warned = True
        log.warning("comem: ComfyUI %s is not a release comem was tested with (%s); the adapter wraps its "
                    "memory functions as it finds them, and a change in them since is not followed: ComfyUI "
                    "runs on", version, ", ".join(sorted(TESTED)))
    return version
