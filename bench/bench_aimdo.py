#!/usr/bin/env python3
"""comfy-aimdo and comem.aimdo, side by side: the same fault-in and eviction work through the same Python API.

    AIMDO_DIR=/path/with/comfy_aimdo python3 bench/bench_aimdo.py [--gib 8] [--rounds 5] [--page-mib 32]

Each round runs one child process per implementation, alternating which goes first
(the two hook the CUDA driver differently, so they never share a process). A child
reserves a VBAR of --gib, then for every page-sized weight: ``vbar_fault``, a tensor
over it (``aimdo_to_tensor``) and ``copy_`` from pinned host memory, ``vbar_unpin``;
the time until the last copy is done is the fault-in. Then ``free_memory`` of the
whole VBAR (synchronised) is the eviction. Beside them, a plain pinned
host-to-device copy of the same bytes is the ceiling. Medians over the rounds, a
table, then name=value lines (``fault_in_vs_aimdo`` above 1 and
``evict_vs_aimdo`` below 1 mean comem is ahead). Needs a GPU: without one it says
so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)

CHILD = r"""
import json, os, sys, time
impl, gib, page_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if impl == "aimdo":
    import comfy_aimdo.control as control
    control.init()
    import torch
    import comfy_aimdo.torch as atorch
    from comfy_aimdo.model_vbar import ModelVBAR, vbar_fault, vbar_unpin
    control.set_log_none()
else:
    import comem.aimdo.control as control
    control.init()
    import torch
    import comem.aimdo.torch as atorch
    from comem.aimdo.model_vbar import ModelVBAR, vbar_fault, vbar_unpin
    control.set_log_none()
control.init_device(0)
page = page_mib << 20
n = (gib << 30) // page
src = torch.empty(page, dtype=torch.uint8).pin_memory()
dev = torch.device("cuda", 0)
out = {}
# the plain pinned copy of the same bytes: the ceiling
dst = torch.empty(page * 4, dtype=torch.uint8, device=dev)
torch.cuda.synchronize()
t = time.perf_counter()
for i in range(n):
    dst[(i % 4) * page:(i % 4 + 1) * page].copy_(src, non_blocking=True)
torch.cuda.synchronize()
out["plain_s"] = time.perf_counter() - t
del dst
torch.cuda.empty_cache()
vbar = ModelVBAR(n * page, device=0)
weights = [vbar.alloc(page) for _ in range(n)]
torch.cuda.synchronize()
t = time.perf_counter()
for w in weights:
    if vbar_fault(w) is None:
        raise SystemExit("offloaded: the card cannot hold the benchmark's bytes")
    atorch.aimdo_to_tensor(w, dev).copy_(src, non_blocking=True)
    vbar_unpin(w)
torch.cuda.synchronize()
out["fault_s"] = time.perf_counter() - t
out["loaded"] = vbar.loaded_size()
t = time.perf_counter()
freed = vbar.free_memory(n * page)
torch.cuda.synchronize()
out["evict_s"] = time.perf_counter() - t
out["freed"] = int(freed)
out["bytes"] = n * page
print(json.dumps(out))
"""


def run(impl: str, gib: int, page_mib: int, env: dict) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, impl, str(gib), str(page_mib)], env=env, capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench_aimdo: the {impl} child failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--page-mib", type=int, default=32)
    a = ap.parse_args()
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError
    except ImportError:
        print("bench_aimdo: no CUDA device here; nothing measured")
        return 0
    aimdo_dir = os.environ.get("AIMDO_DIR")
    if not aimdo_dir or not os.path.isdir(os.path.join(aimdo_dir, "comfy_aimdo")):
        print("bench_aimdo: AIMDO_DIR must name the folder holding comfy_aimdo/ (build-aimdo.sh OUTDIR)",
              file=sys.stderr)
        return 2
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([aimdo_dir, os.path.join(SOURCE, "python"), env.get("PYTHONPATH", "")])
    env.setdefault("COMEM_LOG", "warn")
    res = {"aimdo": [], "comem": []}
    for r in range(a.rounds):
        order = ("aimdo", "comem") if r % 2 == 0 else ("comem", "aimdo")
        for impl in order:
            res[impl].append(run(impl, a.gib, a.page_mib, env))

    def med(impl: str, key: str) -> float:
        return statistics.median(x[key] for x in res[impl])

    nbytes = res["comem"][0]["bytes"]
    gbps = {i: nbytes / med(i, "fault_s") / 1e9 for i in res}
    plain = {i: nbytes / med(i, "plain_s") / 1e9 for i in res}
    ev = {i: med(i, "evict_s") * 1000 for i in res}
    print(f"{a.gib} GiB in {a.page_mib} MiB pages, medians of {a.rounds} interleaved rounds")
    print(f"{'':<10}{'fault-in GB/s':>15}{'vs plain copy':>15}{'evict ms':>11}")
    for i in ("aimdo", "comem"):
        print(f"{i:<10}{gbps[i]:>15.2f}{gbps[i] / plain[i] * 100:>14.1f}%{ev[i]:>11.2f}")
    print(f"fault_in_aimdo_gbps={gbps['aimdo']:.2f}")
    print(f"fault_in_comem_gbps={gbps['comem']:.2f}")
    print(f"fault_in_vs_aimdo={gbps['comem'] / gbps['aimdo']:.3f}")
    print(f"fault_in_comem_vs_plain={gbps['comem'] / plain['comem']:.3f}")
    print(f"evict_aimdo_ms={ev['aimdo']:.2f}")
    print(f"evict_comem_ms={ev['comem']:.2f}")
    print(f"evict_vs_aimdo={ev['comem'] / ev['aimdo']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
