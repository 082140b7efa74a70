#!/usr/bin/env python3
"""libcomem_preload.so and comfy-aimdo's cuMemAlloc hooks in one process, in either order.

    comem run --policy observe -- python3 tests/gpu/aimdo_preload_gpu.py aimdo-first|torch-first|compiler

Run under the preload (``comem run`` sets LD_PRELOAD) against a coordinator. ``aimdo-first``
initialises comfy-aimdo before torch touches CUDA (ComfyUI main.py's order); ``torch-first``
lets torch create its context and allocate before aimdo hooks the driver; ``compiler`` is
aimdo-first with torch's allocations made inside comfy-aimdo 0.5's memory compiler
(``malloc_graph.record``, what ComfyUI v0.39 wraps each node in), to see whether the preload
still sees allocations the graph places. Then it allocates with torch, pages a VBAR
through aimdo and frees both. Prints one JSON line:
the bytes the coordinator attributes to this process's raw holder at each step, aimdo's
own usage and whether anything failed. Exits 77 without a GPU.
"""

from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

GiB = 1 << 30


def attributed(c) -> int:
    """What the preload's raw holders report for this process: bytes it counted outside entries.

    Summed over every session of this pid: the preload's connection and this script's probe client
    are two sessions of one process, in whichever order the coordinator lists them."""
    return sum((h.get("overhead") or 0) + sum(e.get("resident", 0) for e in h.get("entries", []))
               for p in c.status()["devices"][0]["processes"] if p["pid"] == os.getpid()
               for h in p["holders"] if h.get("kind") == "raw")


def main() -> int:
    order = sys.argv[1] if len(sys.argv) > 1 else "aimdo-first"
    import comfy_aimdo.control as control
    if order in ("aimdo-first", "compiler"):
        control.init()
        import torch
        if not torch.cuda.is_available():
            return 77
        ok = control.init_devices([0])
    else:
        import torch
        if not torch.cuda.is_available():
            return 77
        pre = torch.empty(GiB, dtype=torch.uint8, device="cuda")
        control.init()
        ok = control.init_devices([0])
    import comem
    import comfy_aimdo.model_vbar as mv
    out = {"order": order, "preloaded": "libcomem_preload" in os.environ.get("LD_PRELOAD", ""), "aimdo_init": ok}
    with comem.Client("probe", role="tool", require_coordinator=True) as c:
        time.sleep(0.3)
        out["attributed_start"] = attributed(c)
        graph = None
        if order == "compiler":
            import comfy_aimdo.malloc_graph as malloc_graph
            free_before = torch.cuda.mem_get_info()[0]
            graph = malloc_graph.record(torch.cuda.current_stream())
        x = torch.empty(2 * GiB, dtype=torch.uint8, device="cuda")
        x.fill_(1)
        torch.cuda.synchronize()
        time.sleep(0.3)
        out["attributed_after_torch_2gib"] = attributed(c)
        if graph is not None:
            out["card_taken_in_graph"] = int(free_before - torch.cuda.mem_get_info()[0])
            out["graph_in"] = {"peak": graph.peak_used, "virtual": graph.virtual_bytes,
                               "physical": graph.physical_bytes, "rogues": graph.rogue_count}
            del x
            out["graph_pop_broken"] = bool(graph.pop())
            out["graph_out"] = {"peak": graph.peak_used, "virtual": graph.virtual_bytes,
                                "physical": graph.physical_bytes, "rogues": graph.rogue_count}
            del graph
            torch.cuda.synchronize()
            time.sleep(0.3)
            out["attributed_after_graph"] = attributed(c)
            x = torch.empty(0, device="cuda")
        vbar = mv.ModelVBAR(4 * GiB, 0)
        t = vbar.alloc(1 * GiB)
        r = mv.vbar_fault(t)
        out["vbar_faulted"] = r is not None
        out["aimdo_usage_after_fault"] = int(control.get_total_vram_usage())
        mv.vbar_unpin(t)
        out["vbar_freed"] = int(vbar.free_memory(1 * GiB))
        del x
        torch.cuda.empty_cache()
        time.sleep(0.3)
        out["attributed_after_free"] = attributed(c)
    if order == "torch-first":
        del pre
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
