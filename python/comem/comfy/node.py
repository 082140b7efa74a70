"""What ComfyUI loads from custom_nodes/comem: the host adapter, and one node that shows the ledger.

Nothing here imports torch or ComfyUI at import time: the adapter (which does)
is imported when :func:`install_from_comfyui` runs, inside a ComfyUI process
that already has both.

The node's text is what ``comem status`` prints: this comem's own ``comem``
program is run for it (the wheel's, or ``$COMEM_BIN_DIR/comem`` where that is
set, as the autostart finds ``comemd``), so the node and the command never
differ. The JSON (``comem status --json``) is its second output.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from typing import Any, Dict, Optional, Tuple

from .. import errors

log = logging.getLogger("comem.comfy")

#: How long the node waits for ``comem status`` (its own ``--timeout`` is 5 s of that).
STATUS_TIMEOUT_S = 30.0

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
                     "its memory alone, outside the coordinator's ledger")
        return None
    try:
        from ..autostart import SWITCH, enabled
        from .host import Host
        # COMEM_AUTOSTART=0 means "I run the coordinator myself": no comemd is started, and none is embedded
        # in ComfyUI's process either. Until the user's answers, ComfyUI decides locally; it joins it then.
        starting = enabled()
        _host = Host(embed=starting).install()
        if starting:  # the LLM servers of the user's apps file, spoken for while this ComfyUI runs (docs/apps.md)
            from ..apps.launch import start_beside
            start_beside(None, os.getpid())
        if not starting and not _host.client.connected:
            log.info("comem: %s=%s and no coordinator answers: ComfyUI decides locally until one runs (start "
                     "`comemd` yourself, or the systemd user unit); it joins it then, within a second", SWITCH,
                     os.environ.get(SWITCH, "").strip())
    except Exception as e:
        log.exception("comem: the ComfyUI adapter could not be installed; ComfyUI runs without it")
        _host = None
        _why_none = (f"comem's adapter could not be installed in this ComfyUI ({type(e).__name__}: {e}); "
                     "ComfyUI's log has the details")
    return _host


def _program() -> str:
    """This comem's ``comem`` program: ``$COMEM_BIN_DIR/comem`` where that is an executable file (the choice
    :func:`comem.autostart.comemd_path` honours for ``comemd``), else :func:`comem.binary_path`'s. Raises
    FileNotFoundError, naming the places tried, where there is none."""
    from .._bin import binary_path
    bin_dir = os.environ.get("COMEM_BIN_DIR")
    if bin_dir:
        forced = os.path.join(bin_dir, "comem.exe" if os.name == "nt" else "comem")
        if os.path.isfile(forced) and os.access(forced, os.X_OK):
            return forced
    return binary_path("comem")


def _comem_status(*args: str) -> Tuple[bool, str]:
    """Runs ``comem status ARGS`` against the coordinator this ComfyUI uses (its host's socket, else
    ``COMEM_SOCKET``, else the per-user one): (True, what it printed) when one answered, else (False, why
    not: the command's own words, such as "comem status: no coordinator answers: ...")."""
    try:
        cmd = [_program(), "status", "--timeout", "5", *args]
    except FileNotFoundError as e:
        return False, str(e)
    if _host is not None and _host.client.socket:
        cmd += ["--socket", _host.client.socket]
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=STATUS_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"comem status could not run ({type(e).__name__}: {e})"
    if r.returncode == 0:
        return True, r.stdout.rstrip("\n")
    return False, (r.stderr.strip() or r.stdout.strip() or f"comem status exited with status {r.returncode}")


def _situation() -> Optional[str]:
    """What the text says before the ledger when this ComfyUI is not in it, else None."""
    if _host is None:
        return _why_none
    if _host.client.connected:
        return None
    from ..autostart import SWITCH, enabled
    if not enabled():
        return (f"comem: this ComfyUI is not connected to a coordinator and decides locally: {SWITCH}="
                f"{os.environ.get(SWITCH, '').strip()} starts none (start `comemd` yourself, or the systemd user "
                "unit; ComfyUI joins it within a second)")
    return ("comem: this ComfyUI is not connected to a coordinator now and decides locally; it joins one as soon "
            "as one answers (ComfyUI's log says why none did)")


def status_text() -> str:
    """What ``comem status`` prints for this ComfyUI's coordinator; before it, where this ComfyUI is not in the
    ledger (switched off, not connected), a paragraph saying so. Where no coordinator answers, the command's
    reason instead of the ledger."""
    _, text = _comem_status()
    lead = _situation()
    return text if lead is None else f"{lead}\n\n{text}"


def status_json() -> str:
    """The coordinator's status as ``comem status --json`` gives it (indented), or ``null`` where none answers.

    Taken through this ComfyUI's own client where it is connected (the same snapshot the adapter sees), else
    through ``comem status --json``."""
    if _host is not None and _host.client.connected:
        try:
            return json.dumps(_host.client.status(), indent=1)
        except errors.Error as e:
            log.debug("comem: the status node could not read the status through the host's client: %s", e)
    answered, text = _comem_status("--json")
    if not answered:
        return "null"
    try:
        return json.dumps(json.loads(text), indent=1)
    except ValueError:
        return "null"


class ComemStatus:
    """A node that outputs the coordinator's status: the text ``comem status`` prints, and its JSON.

    An output node: the text is shown on the node in the browser and recorded in the prompt's history
    (``outputs[node]["text"]``, with the JSON beside it in ``outputs[node]["json"]`` for API users); both are
    also the node's STRING outputs, ``status`` and ``json``. It runs on every queue (never served from
    ComfyUI's cache), since the ledger changes between runs.
    """

    CATEGORY = "utils/comem"
    DESCRIPTION = ("The comem coordinator's ledger: every process, model and grant on each card, as `comem status` "
                   "prints it (and its JSON, the second output).")
    RETURN_TYPES = ("STRING", "STRING")
    RETURN_NAMES = ("status", "json")
    OUTPUT_TOOLTIPS = ("the text `comem status` prints", "the same as JSON (`comem status --json`; null: none answers)")
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
        """``{"ui": {"text": [text], "json": [json]}, "result": (text, json)}``: shown on the node, recorded in
        the history, and passed on as the two STRING outputs."""
        text = status_text()
        doc = status_json()
        return {"ui": {"text": [text], "json": [doc]}, "result": (text, doc)}


NODE_CLASS_MAPPINGS = {"ComemStatus": ComemStatus}
NODE_DISPLAY_NAME_MAPPINGS = {"ComemStatus": "comem status"}
