"""The processes of an app, as Linux's ``/proc`` shows them: who listens on a port, a process's
children, its resident memory. Standard library only; every reading may race the process's end
and says so by returning None or an empty result, never by raising.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Optional, Set


def rss(pid: int) -> Optional[int]:
    """Resident bytes of pid (``VmRSS``); None when the process is gone or cannot be read."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return 0  # a kernel thread, or a zombie: nothing resident


def alive(pid: int) -> bool:
    """Whether pid is a process that has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _ppids() -> Dict[int, int]:
    out: Dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                out[int(name)] = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return out


def descendants(pid: int) -> List[int]:
    """Every live process below pid (children, their children, ...), nearest first."""
    parents = _ppids()
    out: List[int] = []
    todo = [pid]
    while todo:
        p = todo.pop(0)
        kids = sorted(c for c, pp in parents.items() if pp == p and c not in out)
        out.extend(kids)
        todo.extend(kids)
    return [p for p in out if alive(p)]


def cmdline(pid: int) -> List[str]:
    """pid's arguments; [] when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _listening_inodes(port: int) -> Set[str]:
    inodes: Set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    cols = line.split()
                    if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(cols[9])  # 0A: LISTEN
        except (OSError, ValueError, IndexError):
            continue
    return inodes


def listener(port: int, among: Optional[Iterable[int]] = None) -> Optional[int]:
    """The pid of a process of this user listening on TCP port (loopback or any address); None if none.

    Only processes whose descriptors this user may read are found: another user's server is never
    taken for the app.
    """
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    pids = sorted(among) if among is not None else sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return pid
    return None
