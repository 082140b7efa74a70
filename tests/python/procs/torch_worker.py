"""A worker process holding plain torch models through comem.comfy.Worker (no ComfyUI), on the simulated card.

argv: NAME. Commands: load(name, mib, parts), resident(name), node(seconds, prompt), busy(on),
released(), census(), pressure(mib), card().
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import comem  # noqa: E402
from comem.comfy import Worker  # noqa: E402
from _driver import serve  # noqa: E402

MiB = 1 << 20
w = Worker(sys.argv[1], mm=False)
models = {}


def model(mib, parts):
    # torch.empty never touches its pages: "GiB-sized" models cost no RAM in CI
    per = mib * MiB // parts // 4
    m = torch.nn.Module()
    for i in range(parts):
        m.register_parameter(f"w{i}", torch.nn.Parameter(torch.empty(per), requires_grad=False))
    return m


def load(name, mib, parts=4, inference=0):
    m = models.setdefault(name, model(mib, parts))
    try:
        e = w.load(m, name, memory_required=inference)
    except comem.Refused as r:
        return {"refused": True, "short_by": r.short_by, "asked": r.asked, "n_asked": r.n_asked}
    return {"entry": e.id, "size": e.size, "resident": e.resident}


def resident(name):
    return {"resident": w.torch_models.resident(models[name])}


def node(seconds, prompt=None):
    with w.node(prompt):
        time.sleep(seconds)
    return {"ok": True}


def busy(on, prompt=None):
    w.client.set_busy(bool(on), prompt)
    return {"ok": True}


def released():
    return {"released": w.torch_models.released}


def card():
    ctx, alloc = w.torch_models.placement.card.usage()
    return {"context": ctx, "allocated": alloc}


def pressure(mib):
    return {"freed": w.pressure(mib * MiB)}


serve({"load": load, "resident": resident, "node": node, "busy": busy, "released": released, "card": card,
       "pressure": pressure, "census": lambda: w.census()}, {"pid": os.getpid(), "session": w.client.session})
