"""A worker paging one model through comem.aimdo while it computes (CUDA, or the simulated card on the CPU).

argv: NAME. Commands:
  start(layers, layer_mib, admit_mib)
                            reserve a VBAR for the model; first (as ComfyUI's load_models_gpu frees room for a
                            dynamic model and its inference memory) admit admit_mib of its weights with three
                            layers of working memory, which asks idle holders elsewhere for the room, and let
                            the pages fill it; then run layers in a loop on a thread, marked busy:
                            fault each weight; resident -> copy it in if its signature changed, then use it;
                            offloaded -> stream it from pinned host memory; unpin. Every exception is counted.
  stats()                   faults seen resident/offloaded, copies, exceptions, OOMs, the pager's usage,
                            and torch's own figures
  stop()                    end the loop (the process stays busy until then)
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("COMEM_NAME", sys.argv[1])
import comem.aimdo as comfy_aimdo  # noqa: E402
import comem.aimdo.control  # noqa: E402

comfy_aimdo.control.init()
import torch  # noqa: E402

import comem  # noqa: E402
import comem._lib  # noqa: E402
import comem.aimdo.torch  # noqa: E402
from comem.aimdo.model_vbar import ModelVBAR, vbar_fault, vbar_signature_compare, vbar_unpin  # noqa: E402
from _driver import serve  # noqa: E402

MiB = 1 << 20
CUDA = torch.cuda.is_available()
DEV = torch.device("cuda", 0) if CUDA else torch.device("cpu")
comfy_aimdo.control.init_device(0)
pager = comfy_aimdo.control.get_devctx(0)
client = comfy_aimdo.control.client
counts = {"resident": 0, "offloaded": 0, "copies": 0, "exceptions": 0, "ooms": 0, "passes": 0}
errors = []
state = {"thread": None, "stop": False}


def report_overhead() -> None:
    """What torch itself holds on the card beside the pager's pages (the ledger's overhead figure)."""
    if CUDA and client is not None and pager.holder:
        comem._lib.lib.comem_holder_report(client._h(), pager.holder, -1, torch.cuda.memory_reserved(0))


def loop(weights, host_src):
    sigs = {}
    x = torch.zeros(host_src.numel(), dtype=host_src.dtype, device=DEV)
    while not state["stop"]:
        try:
            for w in weights:
                sig = vbar_fault(w)
                if sig is not None:
                    counts["resident"] += 1
                    t = comfy_aimdo.torch.aimdo_to_tensor(w, DEV).view(host_src.dtype)
                    if not vbar_signature_compare(sig, sigs.get(w)):
                        t.copy_(host_src, non_blocking=CUDA)
                        counts["copies"] += 1
                    sigs[w] = sig
                    x.add_(t)
                    if CUDA:
                        torch.cuda.current_stream().synchronize()  # done with the pages before unpinning
                    vbar_unpin(w)
                else:
                    counts["offloaded"] += 1
                    x.add_(host_src.to(DEV, non_blocking=CUDA))
            counts["passes"] += 1
        except torch.cuda.OutOfMemoryError as e:
            counts["ooms"] += 1
            errors.append(repr(e))
        except Exception as e:  # the loop must never see one; the test asserts none was counted
            counts["exceptions"] += 1
            errors.append(repr(e))
            time.sleep(0.01)
        finally:
            report_overhead()


def start(layers, layer_mib, admit_mib=0):
    nbytes = layer_mib * MiB
    vbar = ModelVBAR(layers * nbytes + 512 * layers, device=0)
    weights = [vbar.alloc(nbytes) for _ in range(layers)]
    # float16 as a model's weights are; float32 on the CPU, whose torch has no fast float16 kernels
    host_src = torch.ones(nbytes // 2, dtype=torch.float16) if CUDA else torch.ones(nbytes // 4)
    if CUDA:
        host_src = host_src.pin_memory()
    # The layer's working memory (the streamed copy of an offloaded weight, and x) lives in torch's
    # allocator, outside the pager: keep room for it, as ComfyUI does with its inference memory.
    pager.set_extra_headroom(3 * nbytes)
    if client is not None and admit_mib > 0:
        try:  # the room is made now; the grant goes, and the pages (and torch's working memory) take it
            client.admit(admit_mib * MiB, device=0, inference=3 * nbytes).cancel()
        except comem.Refused as r:
            counts["admit_short_by"] = r.short_by
    if client is not None:
        client.set_busy(True, "paging")  # computing from now on: only a pager may still be asked
    state["vbar"] = vbar
    t = threading.Thread(target=loop, args=(weights, host_src), daemon=True)
    state["thread"] = t
    t.start()
    while counts["passes"] == 0 and not errors:
        time.sleep(0.01)
    return stats()


def stats():
    out = dict(counts)
    out.update({"usage": pager.usage, "reclaimable": pager.reclaimable, "errors": errors[-3:],
                "release_asks": pager.stats()["release_asks"],
                "torch_reserved": torch.cuda.memory_reserved(0) if CUDA else 0})
    return out


def stop():
    state["stop"] = True
    if state["thread"] is not None:
        state["thread"].join(30)
    if client is not None:
        client.set_busy(False, "paging")
    return stats()


serve({"start": start, "stats": stats, "stop": stop}, {"pid": os.getpid(), "cuda": CUDA})
