"""A worker process for test_standin: models as ledger entries whose release frees simulated-card bytes as told.

argv: NAME. The client joins the coordinator named by COMEM_SOCKET and allocates on the card named by
COMEM_DEVICE, as a real worker's cudaMalloc would. Each model is one entry of the holder "models";
a release ask frees bytes of the entries its plan names, never of others, as ``mode`` says:
  "exact"  frees exactly what it is asked for (up to what the entry holds): the finest-grained
           worker, the one an ask truncated by a fraction of a byte costs a whole model
  "half"   frees half of what it is asked for (a short answer: ComfyUI escalates to a detach,
           which asks for everything, and then frees half of that)
  "zero"   frees nothing
  "busy"   raises comem.Busy (it cannot release now)

Commands (one JSON line each; see _driver.py): load(name, mib), mode(mode), asks() -> every ask seen
in order ([entry, bytes asked, bytes freed]), models() -> each entry's resident bytes, card() -> this
process's (context, allocated), busy(on), reserve() -> the reserve the coordinator tells this process to keep.
"""

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import comem  # noqa: E402
from _driver import serve  # noqa: E402

MiB = 1 << 20

client = comem.Client(sys.argv[1], role="worker", socket=os.environ["COMEM_SOCKET"], require_coordinator=True)
card = comem.SimCard(os.environ["COMEM_DEVICE"])
holder = None
state = {"mode": "exact"}
entries = {}
asks = []
lock = threading.Lock()


def on_release(ask):
    mode = state["mode"]
    if mode == "busy":
        with lock:
            asks.append([None, ask.bytes, "busy"])
        raise comem.Busy()
    total = 0
    for e, amount in ask.plan:
        want = {"exact": amount, "half": amount // 2, "zero": 0}[mode]
        n = max(0, min(want, e.resident))
        if n > 0:
            card.free(n)
            e.resident = e.resident - n
        total += n
        with lock:
            asks.append([e.name, amount, n])
    return total


def load(name, mib):
    global holder
    if holder is None:
        holder = client.add_holder("models", on_release=on_release)
    card.alloc(mib * MiB)
    e = entries[name] = holder.add_entry(name, mib * MiB, mib * MiB)
    return {"entry": e.id, "resident": e.resident}


def mode(mode):
    state["mode"] = mode
    return {"ok": True}


def get_asks():
    with lock:
        return {"asks": list(asks)}


def models():
    return {"models": {n: e.resident for n, e in entries.items()}}


def card_usage():
    ctx, alloc = card.usage()
    return {"context": ctx, "allocated": alloc}


def busy(on):
    client.set_busy(bool(on))
    return {"ok": True}


def reserve():
    r = client.reserve(0)
    return {"reserve": r.reserve}


serve({"load": load, "mode": mode, "asks": get_asks, "models": models, "card": card_usage, "busy": busy,
       "reserve": reserve},
      {"pid": os.getpid(), "session": client.session})
