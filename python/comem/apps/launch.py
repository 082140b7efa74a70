"""Starting ``comem-apps`` beside a coordinator a ComfyUI process uses, where the user has an apps file.

The ComfyUI node calls :func:`start_beside` once its adapter is installed: when the apps file
(:func:`comem.apps.config.default_path`) lists a server and no ``comem-apps`` already speaks for this
user's apps, it starts one, detached, logging to ``comem-apps.log`` in the private runtime
directory, told to end when the ComfyUI process ends (``--while-pid``), so that it never keeps a
coordinator the autostart made alive after ComfyUI is gone. One runs per runtime directory: a
second sees the first's lock (``comem-apps.lock``) and exits at once.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from typing import Optional

from .. import errors
from ..client import runtime_dir
from .config import ConfigError, default_path, load

log = logging.getLogger("comem.apps")

LOG_NAME = "comem-apps.log"
LOCK_NAME = "comem-apps.lock"


def start_beside(socket: Optional[str], owner_pid: int) -> Optional[int]:
    """Starts ``comem-apps`` for the apps file while owner_pid lives; its pid, or None (no apps file,
    an unreadable one, already running, or it could not start: each said once in the log)."""
    path = default_path()
    try:
        apps = load()
    except ConfigError as e:
        log.warning("comem: the apps file cannot be used, so no LLM server is put under the ledger: %s", e)
        return None
    if not apps:
        return None
    if sys.platform == "win32":  # the process readings comem.apps takes are Linux's (/proc)
        log.info("comem: %s lists LLM servers; comem-apps runs on Linux only", path)
        return None
    try:
        folder = runtime_dir()
        from ..autostart import _open_log
        fd = _open_log(os.path.join(folder, LOG_NAME))
    except (errors.Error, OSError) as e:
        log.warning("comem: comem-apps not started (its log cannot be opened: %s)", e)
        return None
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    args = [sys.executable, "-m", "comem.apps", "--while-pid", str(owner_pid), "--lock",
            os.path.join(folder, LOCK_NAME)]
    if socket:
        args += ["--socket", socket]
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=env, cwd="/",
                                start_new_session=True, close_fds=True)
    except OSError as e:
        log.warning("comem: comem-apps could not start: %s", e)
        return None
    finally:
        os.close(fd)
    threading.Thread(target=proc.wait, name=f"comem-apps-{proc.pid}", daemon=True).start()  # reaped when it ends
    log.info("comem: comem-apps started for the LLM servers of %s (pid %d; log %s)", path, proc.pid,
             os.path.join(folder, LOG_NAME))
    return proc.pid
