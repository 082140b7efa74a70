"""``python -m comem.apps`` (``comem-apps``): put the LLM servers of the apps file under the ledger."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import List, Optional

from .. import errors
from .config import ConfigError, default_path, load
from .recipes import RECIPES
from . import procs
from .runner import Runner


def _take_lock(path: str) -> Optional[int]:
    """An exclusive lock on path (created private, never a link), held until exit; None when another holds it."""
    import fcntl
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="comem-apps",
        description="Speak for the LLM servers of the apps file (llama-server, Ollama, vLLM) on comem's ledger: "
                    "they give their memory back when ComfyUI needs it, and take it again when there is room. "
                    "See docs/apps.md.")
    p.add_argument("--config", metavar="PATH", help=f"the apps file (default: {default_path()})")
    p.add_argument("--socket", metavar="PATH", help="the coordinator's socket (default: COMEM_SOCKET, else the per-user one)")
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS", help="how often each server is looked at (default 1)")
    p.add_argument("--check", action="store_true", help="read the apps file, say what it configures, and exit")
    p.add_argument("--once", action="store_true", help="one look at every server, then take them off the ledger and exit")
    p.add_argument("--while-pid", type=int, metavar="PID", help="end once process PID has ended (what the ComfyUI "
                   "node passes when it starts comem-apps beside its coordinator)")
    p.add_argument("--lock", metavar="PATH", help="hold this lock file while running; exit at once (0) when another "
                   "comem-apps holds it")
    p.add_argument("-v", "--verbose", action="store_true", help="say every unload and load")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="%(message)s")
    try:
        apps = load(a.config)
    except ConfigError as e:
        print(f"comem-apps: {e}", file=sys.stderr)
        return 2
    if not apps:
        print(f"comem-apps: no apps configured ({a.config or default_path()} does not exist or lists none; "
              "docs/apps.md shows one)", file=sys.stderr)
        return 2
    if a.check:
        for x in apps:
            print(f"{x.name}: {x.recipe} at {x.url}, device {x.device}, priority {x.priority}, reload {x.reload}"
                  f"{'' if x.pid is None else ', pid ' + str(x.pid)}"
                  f"{'' if x.proxy is None else ', proxy on 127.0.0.1:' + str(x.proxy)}; an unload gives {RECIPES[x.recipe].gives}")
        return 0
    if a.while_pid is not None and (a.while_pid <= 0 or not procs.alive(a.while_pid)):
        print(f"comem-apps: --while-pid {a.while_pid}: no such process", file=sys.stderr)
        return 2
    lock = None
    if a.lock:
        lock = _take_lock(a.lock)
        if lock is None:
            print(f"comem-apps: another comem-apps holds {a.lock}; it speaks for these apps", file=sys.stderr)
            return 0
    try:
        r = Runner(apps, socket=a.socket, interval=a.interval, while_pid=a.while_pid)
    except (errors.Error, ValueError) as e:
        print(f"comem-apps: {e}", file=sys.stderr)
        return 1
    if a.once:
        r.step()
        r.close()
        return 0
    signal.signal(signal.SIGTERM, lambda *_: r.stop())
    try:
        r.run()
    except KeyboardInterrupt:
        r.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
