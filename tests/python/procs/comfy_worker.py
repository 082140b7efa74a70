"""A worker process running ComfyUI's real model manager (COMFYUI_DIR) with comem.comfy.Worker.

argv: NAME. Commands: load(name, mib, parts), loaded(name), card(), node(seconds), busy(on), unload(name).
With COMEM_TEST_WORKER_AIMDO=1 it is set up as ComfyUI 783545f6's main.py sets up dynamic VRAM: the real
comfy_aimdo initialised before torch (no device on this machine: its usage counts 0) and
``comfy.memory_management.aimdo_enabled``; its models stay plain ModelPatchers.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import support  # noqa: E402

AIMDO = os.environ.get("COMEM_TEST_WORKER_AIMDO") == "1"
if AIMDO:
    import comfy_aimdo.control  # noqa: E402
    comfy_aimdo.control.init()  # main.py's order: before torch
mm = support.import_comfy()
import comfy.model_patcher  # noqa: E402
import torch  # noqa: E402

from comem.comfy import Worker  # noqa: E402
from _driver import serve  # noqa: E402

MiB = 1 << 20
if AIMDO:
    import comfy.memory_management  # 783545f6 (a125cd84 has none)
    comfy.memory_management.aimdo_enabled = True
w = Worker(sys.argv[1], mm=mm)
patchers = {}


def module(mib, parts):
    layers = [torch.nn.Linear(1, 1) for _ in range(parts)]
    for layer in layers:  # torch.empty: no pages touched, so GiB-sized models cost no RAM here
        layer.weight = torch.nn.Parameter(torch.empty(mib * MiB // parts // 4), requires_grad=False)
        layer.bias = None
    return torch.nn.Sequential(*layers)


def load(name, mib, parts=4, inference=0):
    p = patchers.get(name)
    if p is None:
        p = comfy.model_patcher.ModelPatcher(module(mib, parts), load_device=mm.get_torch_device(),
                                             offload_device=torch.device("cpu"))
        patchers[name] = p
    w.load(p, memory_required=inference)
    return {"loaded": p.loaded_size(), "size": p.model_size()}


def loaded(name):
    p = patchers[name]
    return {"loaded": p.loaded_size(), "in_list": any(x.model is p for x in mm.current_loaded_models)}


def card():
    ctx, alloc = w.comfy.devices.card.usage()
    return {"context": ctx, "allocated": alloc}


def node(seconds, prompt=None):
    with w.node(prompt):
        time.sleep(seconds)


def busy(on, prompt=None):
    w.client.set_busy(bool(on), prompt)


def unload(name):
    return {"freed": w.unload(patchers[name])}


serve({"load": load, "loaded": loaded, "card": card, "node": node, "busy": busy, "unload": unload},
      {"pid": os.getpid(), "session": w.client.session, "device": str(mm.get_torch_device()),
       "steer": getattr(w.comfy.steer, "version", None)})
