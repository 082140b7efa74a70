"""A worker process for the binding suites: holders whose callbacks really free simulated-card bytes.

argv: NAME. The client joins the coordinator named by COMEM_SOCKET (required) and allocates on the
card named by COMEM_DEVICE, as a real worker's cudaMalloc would.

Commands (one JSON line each; see _driver.py):
  hold(holder, entry, mib, mode, answers, while_busy): allocates mib on the card and registers it as
      an entry of holder (created on first use; entry None: the holder alone). mode is how the
      holder's release callback answers (in "free" and "slow", a "pins" ask unpins what it asks for):
        "free"   frees what it was asked (up to what it holds) and reports the new residency
        "zero"   frees nothing (answers 0 bytes)
        "lie"    frees nothing and answers 2**40 bytes freed
        "busy"   raises comem.Busy
        "raise"  raises RuntimeError (the binding logs it and answers 0 bytes)
        "slow"   waits for go(), then frees like "free"
  mode(holder, mode), go(), asks() -> every ask seen, with the thread it ran on
  admit(mib, inference_mib, timeout): an admission from this process (its grant stays open)
  done(entry_mib): the last grant done into a new entry; cancel(): the last grant cancelled
  busy(on, holder): a node boundary (holder None: the whole process)
  pin(mib, holder): pinned host RAM booked for holder (a "pins" ask gives it back)
  pressure(mib), card() -> this process's (context, allocated) on the card, fill(mib): bytes on
  the card that no ledger entry accounts for, register(holder, entry, mib): those bytes registered
  as an entry afterwards, entries() -> each entry's resident bytes.
  raw(holder, mib): allocates mib on the card for a raw holder with no entries, which reports them
      as its bytes (census overhead) and, asked, frees what it is asked for and reports what is left.
"""

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import comem  # noqa: E402
from _driver import serve  # noqa: E402

MiB = 1 << 20
MAIN = threading.get_ident()

client = comem.Client(sys.argv[1], role="worker", socket=os.environ["COMEM_SOCKET"], require_coordinator=True)
card = comem.SimCard(os.environ["COMEM_DEVICE"])
holders = {}
modes = {}
entries = {}
asks = []
go_event = threading.Event()
grants = []
pinned = {}
raw_pools = {}  # raw holder name -> bytes it holds on the card outside any entry
lock = threading.Lock()


def free_entry(e, nbytes):
    n = min(nbytes, e.resident)
    if n > 0:
        card.free(n)
        e.resident = e.resident - n
    return n


def on_release(ask):
    mode = modes[ask.holder.name]
    with lock:
        asks.append({"holder": ask.holder.name, "kind": ask.kind, "bytes": ask.bytes, "mode": mode,
                     "plan": [[e.name, b] for e, b in ask.plan], "thread": threading.get_ident(), "main": MAIN})
    if mode == "busy":
        raise comem.Busy()
    if mode == "raise":
        raise RuntimeError("this holder's callback fails on purpose")
    if mode == "zero":
        return 0
    if mode == "lie":
        return 1 << 40
    if mode == "slow":
        go_event.wait(60)
    if ask.holder.name in raw_pools:
        n = min(ask.bytes if ask.kind == "bytes" else 1 << 62, raw_pools[ask.holder.name])
        card.free(n)
        raw_pools[ask.holder.name] -= n
        ask.holder.report(overhead=raw_pools[ask.holder.name])
        return n
    if ask.kind == "pins":
        n = min(ask.bytes, pinned.get(ask.holder.name, 0))
        ask.holder.unpin(n)
        pinned[ask.holder.name] -= n
        return n
    want = ask.bytes if ask.kind == "bytes" else 1 << 62
    freed = 0
    order = [e for e, _ in ask.plan] + [e for e in ask.holder.entries if e not in [p[0] for p in ask.plan]]
    for e in order:
        if freed >= want:
            break
        freed += free_entry(e, want - freed)
    return freed


def hold(holder, entry=None, mib=0, mode="free", answers=("release", "idle"), while_busy=False):
    h = holders.get(holder)
    if h is None:
        h = holders[holder] = client.add_holder(holder, on_release=on_release, answers=list(answers),
                                                releases_while_busy=while_busy)
    modes[holder] = mode
    if entry is None:
        return {"holder": h.id}
    card.alloc(mib * MiB)
    entries[entry] = h.add_entry(entry, mib * MiB, mib * MiB)
    return {"holder": h.id, "entry": entries[entry].id}


def register(holder, entry, mib):
    """Registers bytes this process allocated earlier (fill) as an entry: a worker that loaded first."""
    entries[entry] = holders[holder].add_entry(entry, mib * MiB, mib * MiB)
    return {"entry": entries[entry].id}


def mode(holder, mode):
    modes[holder] = mode
    return {"ok": True}


def go():
    go_event.set()
    return {"ok": True}


def get_asks():
    with lock:
        return {"asks": list(asks)}


def admit(mib, inference_mib=0, timeout=None):
    try:
        g = client.admit(mib * MiB, inference=inference_mib * MiB, timeout=timeout)
    except comem.Refused as r:
        return {"refused": True, "short_by": r.short_by, "need": r.need, "free_before": r.free_before,
                "free_after": r.free_after, "freed": r.freed, "asked": r.asked, "n_asked": r.n_asked,
                "n_busy": r.n_busy}
    grants.append(g)
    return {"granted": True, "bytes": g.bytes, "need": g.need, "free_before": g.free_before,
            "free_after": g.free_after, "freed": g.freed, "asked": g.asked, "n_asked": g.n_asked,
            "n_busy": g.n_busy}


def done(entry_mib):
    g = grants.pop()
    h = holders.get("loads") or client.add_holder("loads")
    holders["loads"] = h
    card.alloc(entry_mib * MiB)
    e = h.add_entry(f"load{len(h.entries)}", entry_mib * MiB, 0)
    g.done(e, entry_mib * MiB)
    return {"resident": e.resident}


def cancel():
    grants.pop().cancel()
    return {"ok": True}


def busy(on, holder=None):
    if holder is None:
        client.set_busy(bool(on))
    else:
        holders[holder].set_busy(bool(on))
    return {"ok": True}


def pressure(mib):
    return {"freed": client.pressure(mib * MiB)}


def card_usage():
    ctx, alloc = card.usage()
    return {"context": ctx, "allocated": alloc}


def pin(mib, holder):
    holders[holder].pin(mib * MiB)
    pinned[holder] = pinned.get(holder, 0) + mib * MiB
    return {"pinned": pinned[holder]}


def fill(mib):
    card.alloc(mib * MiB)
    return {"ok": True}


def raw(holder, mib):
    h = holders.get(holder)
    if h is None:
        h = holders[holder] = client.add_holder(holder, kind="raw", on_release=on_release)
    modes[holder] = "free"
    card.alloc(mib * MiB)
    raw_pools[holder] = raw_pools.get(holder, 0) + mib * MiB
    h.report(overhead=raw_pools[holder])
    return {"holder": h.id, "bytes": raw_pools[holder]}


def get_entries():
    return {"entries": {n: e.resident for n, e in entries.items()}}


serve({"hold": hold, "mode": mode, "go": go, "asks": get_asks, "admit": admit, "done": done, "cancel": cancel,
       "busy": busy, "pressure": pressure, "card": card_usage, "fill": fill, "register": register, "pin": pin, "entries": get_entries,
       "raw": raw},
      {"pid": os.getpid(), "session": client.session})
