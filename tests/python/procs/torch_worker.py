"""A worker process holding plain torch models through comem.comfy.Worker (no ComfyUI), on the simulated card.

argv: NAME. Commands: load(name, mib, parts), resident(name), node(seconds, prompt), busy(on),
released(), census(), pressure(mib), card() (simulated), cuda() (torch's figures and OOMs seen).
On a GPU the models really move to cuda:0 (comem.torch's CUDA placement).
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
    layers = torch.nn.ModuleList()
    for i in range(parts):  # one part per layer: what a partial release moves
        layer = torch.nn.Module()
        layer.register_parameter("weight", torch.nn.Parameter(torch.empty(per), requires_grad=False))
        layers.append(layer)
    return layers


ooms = []  # CUDA out-of-memory errors this process hit (the GPU proof requires none)


def load(name, mib, parts=4, inference=0):
    m = models.setdefault(name, model(mib, parts))
    try:
        e = w.load(m, name, memory_required=inference)
    except comem.Refused as r:
        return {"refused": True, "short_by": r.short_by, "asked": r.asked, "n_asked": r.n_asked}
    except torch.cuda.OutOfMemoryError as e:
        ooms.append(str(e))
        raise
    return {"entry": e.id, "size": e.size, "resident": e.resident}


def cuda():
    if not torch.cuda.is_available():
        return {"allocated": 0, "reserved": 0, "ooms": len(ooms)}
    torch.zeros(1, device="cuda")  # this process's context exists from the first question on
    return {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(), "ooms": len(ooms)}


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
       "pressure": pressure, "census": lambda: w.census(), "cuda": cuda}, {"pid": os.getpid(), "session": w.client.session})
