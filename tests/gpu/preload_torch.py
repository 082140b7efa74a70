#!/usr/bin/env python3
"""A plain torch program (it knows nothing of comem), run under libcomem_preload.so on a real GPU.

    tests/gpu/preload_gpu.sh BUILD_DIR OUT_DIR      (starts comemd, runs this under each policy)

This program allocates 1 GiB, asks the coordinator (through `comem status --json`, with the preload
stripped from the child's environment) what it holds in the ledger, then allocates 92 % of what the
driver says is free: that fits on the card, but comem's admission (ComfyUI's load arithmetic:
1.1 x the bytes + the inference floor) refuses it. Under COMEM_PRELOAD_POLICY=enforce torch sees
the refusal as its own torch.cuda.OutOfMemoryError, which this program catches; under observe the
allocation goes ahead. Prints one JSON object. Exit 77 without a GPU.
"""

import json
import os
import subprocess
import sys
import time

MiB = 1 << 20
GiB = 1 << 30


def ledger_bytes(comem: str, socket: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = subprocess.run([comem, "status", "--json", "--socket", socket], capture_output=True, text=True, env=env,
                         timeout=30)
    if out.returncode != 0:
        return {"error": out.stderr.strip()}
    st = json.loads(out.stdout)
    for d in st["devices"]:
        for p in d["processes"]:
            if p["pid"] == os.getpid():
                return {"device": d["index"], "uuid": d["uuid"],
                        "holders": {h["name"]: h.get("overhead", 0) for h in p["holders"]},
                        "unregistered": p.get("unregistered"), "context_floor": p.get("context_floor")}
    return {"error": "this process is not in the ledger"}


def main() -> int:
    import torch
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "no GPU"}))
        return 77
    label = sys.argv[1] if len(sys.argv) > 1 else "run"
    comem, socket = os.environ.get("COMEM_CLI", "comem"), os.environ.get("COMEM_SOCKET", "")
    dev = torch.device("cuda")
    r = {"label": label, "policy": os.environ.get("COMEM_PRELOAD_POLICY", "(unset)"), "torch": torch.__version__}
    x = torch.empty(GiB, dtype=torch.uint8, device=dev)
    x.fill_(1)
    torch.cuda.synchronize()
    time.sleep(0.3)  # the preload reports from its own thread
    r["after_1GiB"] = ledger_bytes(comem, socket) if socket else None
    r["torch_reserved"] = torch.cuda.memory_reserved()
    # Allocation latency: 20 fresh 256 MiB segments (each one cudaMalloc: admitted first under the preload).
    times = []
    for _ in range(20):
        torch.cuda.empty_cache()
        t0 = time.perf_counter()
        y = torch.empty(256 * MiB, dtype=torch.uint8, device=dev)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        del y
    times.sort()
    r["alloc_256MiB_median_ms"] = round(times[len(times) // 2] * 1e3, 3)
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    big = int(free * 0.92) // (2 * MiB) * (2 * MiB)
    r["free_before_big"], r["total"], r["big"] = free, total, big
    try:
        z = torch.empty(big, dtype=torch.uint8, device=dev)
        torch.cuda.synchronize()
        r["big_outcome"] = "allocated"
        time.sleep(0.3)
        r["after_big"] = ledger_bytes(comem, socket) if socket else None
        del z
    except torch.cuda.OutOfMemoryError as e:  # torch's own OOM error: the program catches it and goes on
        r["big_outcome"] = "torch.cuda.OutOfMemoryError"
        r["oom_message"] = str(e).splitlines()[0][:300]
    torch.cuda.empty_cache()
    w = torch.ones(16 * MiB, device=dev)  # and the program still works afterwards
    r["still_works"] = float(w.sum().item()) == 16 * MiB
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
