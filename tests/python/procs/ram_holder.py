"""A worker process for the host-RAM suite: RAM holders backed by real memory of this process.

argv: NAME. The client joins the coordinator named by COMEM_SOCKET (required), which serves host RAM
(comemd --ram SIZE); every holder and admission here is on comem.HOST_RAM.

Commands (one JSON line each; see _driver.py):
  cache(holder, entry, mib, mode): allocates mib of real RAM (every page written, so it is resident) and
      registers it as an entry of holder (created on first use; tier "cache", "file" or None, as
      Holder.add_entry takes it). mode is how the holder's
      release callback answers:
        "free"  drops whole entries, in the plan's order, until it freed what it was asked (their memory
                goes back to the system), reports their residency 0 and answers the bytes freed
        "lie"   frees nothing and answers what it was asked for
  pin(holder_name, mib): pinned host RAM booked for holder (refused: the shortfall)
  busy(on): the whole process at a node boundary (True) or idle (False)
  admit(mib, timeout): a RAM admission; granted, the memory is allocated and the grant done into an entry
      of the holder "loads" (figures of the grant or refusal are answered)
  stall(mib): a RAM admission whose memory is allocated, and the grant never done (killed there)
  grow(mib): real RAM outside anything registered
  late(holder_name, entry, mib): real RAM registered as an entry with nothing resident; census(entry, mib) says it
  asks() -> every ask seen; rss() -> this process's VmRSS
"""

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import comem  # noqa: E402
from _driver import serve  # noqa: E402

MiB = 1 << 20

client = comem.Client(sys.argv[1], role="worker", socket=os.environ["COMEM_SOCKET"], require_coordinator=True)
holders = {}
modes = {}
memory = {}    # entry name -> the bytearray holding its bytes
entries = {}   # entry name -> comem.Entry
outside = []   # memory no entry accounts for
grants = []
asks = []
lock = threading.Lock()


def allocate(nbytes):
    """nbytes of memory, every page written (a bytearray of 0x01: resident, not a lazily zeroed map)."""
    return bytearray(b"\x01") * nbytes


def rss():
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def on_release(ask):
    mode = modes[ask.holder.name]
    with lock:
        asks.append({"holder": ask.holder.name, "kind": ask.kind, "bytes": ask.bytes, "mode": mode,
                     "plan": [[e.name, b] for e, b in ask.plan], "rss": rss()})
    if mode == "lie":
        return ask.bytes
    want = ask.bytes if ask.kind == "bytes" else 1 << 62
    freed = 0
    order = [e for e, _ in ask.plan] + [e for e in ask.holder.entries if e not in [p[0] for p in ask.plan]]
    for e in order:
        if freed >= want:
            break
        if e.resident <= 0 or e.name not in memory:
            continue
        n = len(memory.pop(e.name))
        e.resident = 0
        freed += n
    return freed


def holder(name, mode="free"):
    h = holders.get(name)
    if h is None:
        h = holders[name] = client.add_holder(name, device=comem.HOST_RAM, on_release=on_release)
    modes[name] = mode
    return h


def cache(holder_name, entry, mib, mode="free", tier=None):
    h = holder(holder_name, mode)
    memory[entry] = allocate(mib * MiB)
    entries[entry] = h.add_entry(entry, mib * MiB, mib * MiB, tier=tier)
    return {"holder": h.id, "entry": entries[entry].id, "rss": rss()}


def late(holder_name, entry, mib):
    """Allocates mib and registers it as an entry with nothing resident yet (a census says it later)."""
    h = holder(holder_name)
    memory[entry] = allocate(mib * MiB)
    entries[entry] = h.add_entry(entry, mib * MiB, 0)
    return {"rss": rss()}


def census(entry, mib):
    entries[entry].resident = mib * MiB
    return {"ok": True}


def pin(holder_name, mib):
    """Books mib of pinned host RAM for holder (the host buffer is the caller's to allocate after)."""
    try:
        holder(holder_name).pin(mib * MiB)
    except comem.Refused as r:
        return {"refused": True, "short_by": r.short_by}
    return {"pinned": True}


def busy(on):
    client.set_busy(bool(on))
    return {"ok": True}


def figures(g):
    return {"bytes": g.bytes, "need": g.need, "free_before": g.free_before, "free_after": g.free_after,
            "freed": g.freed, "asked": g.asked, "n_asked": g.n_asked, "n_busy": g.n_busy}


def admit(mib, timeout=None):
    h = holder("loads")
    try:
        g = client.admit(mib * MiB, device=comem.HOST_RAM, holder=h, timeout=timeout)
    except comem.Refused as r:
        return {"refused": True, "short_by": r.short_by, "need": r.need, "freed": r.freed, "asked": r.asked,
                "n_asked": r.n_asked}
    name = f"load{len(memory)}"
    memory[name] = allocate(mib * MiB)
    e = h.add_entry(name, mib * MiB, 0)
    g.done(e, mib * MiB)
    out = figures(g)
    out.update(granted=True, entry=e.id, rss=rss())
    return out


def stall(mib):
    g = client.admit(mib * MiB, device=comem.HOST_RAM, holder=holder("loads"))
    grants.append(g)
    outside.append(allocate(mib * MiB))
    out = figures(g)
    out.update(rss=rss())
    return out


def grow(mib):
    outside.append(allocate(mib * MiB))
    return {"rss": rss()}


def get_asks():
    with lock:
        return {"asks": list(asks)}


serve({"cache": cache, "late": late, "pin": pin, "census": census, "busy": busy, "admit": admit, "stall": stall, "grow": grow, "asks": get_asks,
       "rss": lambda: {"rss": rss()}},
      {"pid": os.getpid(), "session": client.session, "rss": rss()})
