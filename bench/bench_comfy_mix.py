#!/usr/bin/env python3
"""Three processes of current ComfyUI share one card, under comem and uncoordinated: reloads, OOMs, time.

    COMFYUI_DIR=.../comfyui-783545f6 python3 bench/bench_comfy_mix.py [--card-gib 24] [--rounds 2]
        [--host-gib 10] [--a-gib 8] [--b-gib 8] [--policy both|comem|uncoordinated]

The processes (issue 19 item 9): a ComfyUI 783545f6 host and worker A, each set up
as 783545f6's ``main.py`` does with dynamic VRAM (its own comfy-aimdo, a
``ModelPatcherDynamic`` of ComfyUI's own layers), and worker B, plain torch, which
allocates one working tensor per turn. Under ``comem`` a real comemd runs on NVML,
the host has comem's ``Host`` adapter, A its ``Worker``, and B runs under ``comem
run --policy enforce`` (the preload); ``uncoordinated`` is the same processes with
no comem at all, each aimdo deciding alone. A ballast outside both makes the card
``--card-gib`` large. Each round is the same fixed mix, one turn at a time:
host computes, A computes, B allocates and computes, host computes, A computes.

Printed as ``name=value`` lines per policy: ``<policy>_reloaded_bytes`` (pages a
dynamic model faulted in again after its first pass: what another process's
room cost it), ``<policy>_ooms`` (torch out-of-memory errors in any process),
``<policy>_b_failed`` (B's turns that could not allocate), ``<policy>_wall_s``
(the mix, not the processes' start). Needs a GPU: without one it says so and
exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SOURCE, "tests", "python"))

GiB = 1 << 30

# A ComfyUI 783545f6 process with dynamic VRAM: argv[1] role (host|worker), argv[2] GiB, argv[3] socket or "".
DYNAMIC = r"""
import json, os, sys, contextlib
sys.path.insert(0, os.environ["COMFYUI_DIR"])
import comfy_aimdo.control as control
control.init(simple_vram_headroom=None, nvml_pressure=True)
import torch
import comfy.model_management as mm
import comfy.model_patcher, comfy.memory_management, comfy.ops
def say(**kw): print(json.dumps(kw), flush=True)
if not control.init_devices([(0, 0)]):
    say(error="comfy-aimdo did not initialise device 0"); sys.exit(1)
comfy.model_patcher.CoreModelPatcher = comfy.model_patcher.ModelPatcherDynamic
comfy.memory_management.aimdo_enabled = True
role, gib, sock = sys.argv[1], float(sys.argv[2]), sys.argv[3]
node = lambda: contextlib.nullcontext()
if sock:
    if role == "host":
        from comem.comfy import Host
        adapter = Host(mm, socket=sock, embed=False).install()
        node = lambda: adapter.computing("bench")
    else:
        from comem.comfy import Worker
        adapter = Worker("worker-a", socket=sock, mm=mm)
        node = lambda: adapter.node("bench")
dev = mm.get_torch_device()
width = 4096
layers = []
for _ in range(int(gib * (1 << 30) // (width * width * 2))):
    lin = comfy.ops.disable_weight_init.Linear(width, width, bias=False, dtype=torch.float16)
    lin.weight = torch.nn.Parameter(torch.full((width, width), 0.001, dtype=torch.float16), requires_grad=False)
    layers.append(lin)
model = torch.nn.Sequential(*layers)
p = comfy.model_patcher.ModelPatcherDynamic(model, load_device=dev, offload_device=torch.device("cpu"))
x = torch.randn(8, width, dtype=torch.float16, device=dev)
say(ready=True, pid=os.getpid())
for line in sys.stdin:
    if line.strip() == "quit":
        break
    oom, before = 0, int(p.loaded_size())
    try:
        with node():
            mm.load_models_gpu([p])
            with torch.no_grad():
                model(x)
            torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError:
        oom = 1
    say(before=before, after=int(p.loaded_size()), oom=oom)
"""

# Plain torch: each turn allocates argv[1] bytes, touches them, frees them.
PLAIN = r"""
import json, sys, torch
torch.zeros(1, device="cuda")
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    if line.strip() == "quit":
        break
    oom = 0
    try:
        t = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda")
        t.fill_(1)
        torch.cuda.synchronize()
        del t
    except torch.cuda.OutOfMemoryError:
        oom = 1
    torch.cuda.empty_cache()
    print(json.dumps({"oom": oom}), flush=True)
"""


class Child:
    def __init__(self, args, env) -> None:
        self.p = subprocess.Popen(args, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def read(self):
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"a bench process exited ({self.p.wait()})")
        return json.loads(line)

    def turn(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()
        return self.read()

    def end(self) -> None:
        if self.p.poll() is None:
            try:
                self.p.stdin.write("quit\n")
                self.p.stdin.flush()
                self.p.wait(60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.p.kill()


def run_policy(policy: str, a: argparse.Namespace, comfyui: str) -> dict:
    import support
    machine = None
    env = dict(os.environ, COMFYUI_DIR=comfyui,
               PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(SOURCE, "python"), os.environ.get("PYTHONPATH")])))
    for k in ("COMEM_SOCKET", "COMEM_RUNTIME_DIR", "COMEM_DEVICE"):
        env.pop(k, None)
    sock = ""
    if policy == "comem":
        machine = support.Machine("sim:1GiB", idle_release=600)
        machine.spec = "nvml"
        machine.env["COMEM_DEVICE"] = "nvml"
        machine.__enter__()
        env.update({k: machine.env[k] for k in ("COMEM_SOCKET", "COMEM_RUNTIME_DIR")}, COMEM_DEVICE="nvml")
        sock = machine.socket
    kids = []
    try:
        host = Child([sys.executable, "-c", DYNAMIC, "host", str(a.host_gib), sock], env)
        wa = Child([sys.executable, "-c", DYNAMIC, "worker", str(a.a_gib), sock], env)
        b_cmd = [sys.executable, "-c", PLAIN, str(int(a.b_gib * GiB))]
        if policy == "comem":
            comem_bin = os.path.join(os.environ.get("COMEM_BIN_DIR", support.BIN_DIR), "comem")
            b_cmd = [comem_bin, "run", "--policy", "enforce", "--socket", sock, "--"] + b_cmd
        wb = Child(b_cmd, env)
        kids = [host, wa, wb]
        for k in kids:
            first = k.read()
            if "error" in first:
                raise RuntimeError(first["error"])
        seen = {id(host): False, id(wa): False}
        reloaded = ooms = b_failed = 0
        t0 = time.monotonic()
        for _ in range(a.rounds):
            for k in (host, wa, wb, host, wa):
                r = k.turn()
                ooms += r.get("oom", 0)
                if k is wb:
                    b_failed += r.get("oom", 0)
                    continue
                if seen[id(k)]:
                    reloaded += max(0, r["after"] - r["before"])
                seen[id(k)] = True
        wall = time.monotonic() - t0
        out = {"reloaded_bytes": reloaded, "ooms": ooms, "b_failed": b_failed, "wall_s": round(wall, 2)}
        if machine is not None:
            co = machine.status()["coordinator"]
            out["check_violations"] = co["violations"]
        return out
    finally:
        for k in kids:
            k.end()
        if machine is not None:
            machine.__exit__(None, None, None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--card-gib", type=float, default=24)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--host-gib", type=float, default=10)
    ap.add_argument("--a-gib", type=float, default=8)
    ap.add_argument("--b-gib", type=float, default=8)
    ap.add_argument("--policy", choices=("both", "comem", "uncoordinated"), default="both")
    a = ap.parse_args()
    comfyui = os.environ.get("COMFYUI_DIR")
    if not comfyui or not os.path.isdir(os.path.join(comfyui, "comfy")):
        print("bench_comfy_mix: COMFYUI_DIR must name ComfyUI 783545f6", file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("bench_comfy_mix: no CUDA device here; skipped")
        return 0
    free, _ = torch.cuda.mem_get_info()
    spare = free - int(a.card_gib * GiB)
    ballast = None
    if spare > 0:
        ballast = subprocess.Popen([sys.executable, "-c", (
            "import torch, time; x = torch.empty(%d, dtype=torch.uint8, device='cuda'); "
            "print('ready', flush=True); time.sleep(3600)") % spare], stdout=subprocess.PIPE, text=True)
        ballast.stdout.readline()
    try:
        policies = ("comem", "uncoordinated") if a.policy == "both" else (a.policy,)
        for pol in policies:
            res = run_policy(pol, a, comfyui)
            for k, v in res.items():
                print(f"{pol}_{k}={v}", flush=True)
    finally:
        if ballast is not None:
            ballast.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
