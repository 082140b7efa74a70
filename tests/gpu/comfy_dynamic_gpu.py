#!/usr/bin/env python3
"""comem inside current ComfyUI on a GPU: dynamic VRAM over the real comfy-aimdo, steered from the ledger.

    COMFYUI_DIR=.../comfyui-783545f6 python3 tests/gpu/comfy_dynamic_gpu.py [--card-gib 24] [--json FILE]
    COMFYUI_DIR=.venv-v039/comfyui PYTHONPATH=.venv-v039/site:... python3 tests/gpu/comfy_dynamic_gpu.py
        [--compiler on|off]

ComfyUI v0.39 (the assembled tree, with the comfy-aimdo 0.5.6 it pins first on the path) runs the
same claims; ``--compiler on`` (its default) wraps every compute in v0.39's memory-compiler scope
(``comfy.model_prefetch.malloc_graph_scope``, as its executor does around a node), ``off`` is
``--disable-comfy-compiler``. v0.39's assembled ``model_management`` lacks the
``DISABLE_PINNED_MEMORY`` its ``pinned_memory`` reads on the CUDA + aimdo path: this script (the
host and worker A) sets it as upstream v0.39 does, from ``--disable-pinned-memory``, and says so.

This process is a ComfyUI 783545f6 host set up as its main.py does with dynamic
VRAM on: ``comfy_aimdo.control.init`` before torch, ``init_devices``,
``CoreModelPatcher = ModelPatcherDynamic``, ``aimdo_enabled``; then comem's host
adapter, which finds aimdo and steers its headroom. Its model is a
``ModelPatcherDynamic`` over ComfyUI's own ``comfy.ops`` layers, so its weights
live in an aimdo VBAR and fault in as it computes. A ballast outside comem makes
the card ``--card-gib`` large; comemd runs on NVML with ``--check``. Child
processes are plain comem clients with torch. Claims, each with its figures:

  (h) a grant the ledger gave another process is kept from the host's aimdo: the host computes
      while the grant is outstanding, and the card's free bytes never fall below it; the other
      process then allocates it without an out-of-memory error;
  (a) another process's admission that does not fit takes bytes from the host's VBAR through the
      ledger (an ask, answered by ComfyUI's model_unload -> partially_unload -> vbar.free_memory);
  (e) NVML's figure for the host equals the ledger's within one CUDA context;
  (b) worker A, a second ComfyUI 783545f6 process with its own aimdo and a ModelPatcherDynamic
      under comem's Worker adapter, sits idle with its pages in; the host's load of a plain
      ModelPatcher that does not fit takes bytes from A (A's VBAR shrinks through the same
      model_unload -> partially_unload -> vbar.free_memory path, in A);
  (c) worker A computes (one node, pass after pass) with its pages in, and another process's admission
      needs half of them: A's holder is asked while busy, its aimdo evicts unpinned pages at A's next
      faults (the steer raises its headroom: aimdo's calls are not thread-safe, so no other thread calls
      into its VBARs), the admission is granted while A still computes, and A computes on without an
      out-of-memory error;
  (g) worker B, plain torch under ``comem run --policy enforce`` (the preload), allocates one tensor
      larger than the card's free bytes: the preload's admission before cuMemAlloc gets the room from
      A or the host, and the allocation succeeds instead of an out-of-memory error;
  (d) A SIGKILLed: the ledger drops its session and NVML its process, timed from its reap;
  (p) ComfyUI's own pins (``TOTAL_PINNED_MEMORY``) are booked with the ledger before ComfyUI makes them;
  (f) no out-of-memory error anywhere.

Without a GPU it says so and exits 77. Exits 1 when a claim fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SOURCE, "tests", "python"))
import support  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20

# A process that is granted bytes, holds the grant until told, then allocates them with torch.
GRANTEE = r"""
import sys, json, torch, comem
c = comem.Client(sys.argv[1], role="worker", require_coordinator=True)
h = c.add_holder("models")
torch.zeros(1, device="cuda")  # its context, before it asks
def say(**kw): print(json.dumps(kw), flush=True)
try:
    g = c.admit(int(sys.argv[2]), holder=h, timeout=120)
except comem.Refused as r:
    say(refused=r.short_by); sys.exit(0)
say(granted=int(sys.argv[2]))
sys.stdin.readline()
oom = 0
try:
    x = torch.empty(int(sys.argv[2]), dtype=torch.uint8, device="cuda")
    g.done(h.add_entry("m", int(sys.argv[2])), int(sys.argv[2]))
except torch.cuda.OutOfMemoryError:
    oom = 1
say(allocated=not oom, oom=oom)
sys.stdin.readline()
"""


# Worker A: a ComfyUI 783545f6 process as main.py sets one up with dynamic VRAM, its own aimdo, comem's
# Worker adapter, a ModelPatcherDynamic of argv[2] GiB. Reports its state as JSON lines; "compute" runs
# one node, "state" reports, "quit" closes.
WORKER_A = r"""
import json, os, sys
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
import contextlib
from comfy.cli_args import args as comfy_args
if hasattr(comfy_args, "disable_comfy_compiler"):  # v0.39: the compiler as this run has it
    comfy_args.disable_comfy_compiler = os.environ.get("COMEM_GPU_COMPILER", "on") == "off"
if "comfy.system_memory" in sys.modules and not hasattr(mm, "DISABLE_PINNED_MEMORY"):
    mm.DISABLE_PINNED_MEMORY = bool(comfy_args.disable_pinned_memory)  # as upstream v0.39 defines it
try:
    import comfy.model_prefetch as prefetch
except ImportError:
    prefetch = None
from comem.comfy import Worker
w = Worker("worker-a", socket=sys.argv[1], mm=mm)
dev = mm.get_torch_device()
width = 4096
layers = []
for _ in range(int(float(sys.argv[2]) * (1 << 30) // (width * width * 2))):
    lin = comfy.ops.disable_weight_init.Linear(width, width, bias=False, dtype=torch.float16)
    lin.weight = torch.nn.Parameter(torch.full((width, width), 0.001, dtype=torch.float16), requires_grad=False)
    layers.append(lin)
model = torch.nn.Sequential(*layers)
p = comfy.model_patcher.ModelPatcherDynamic(model, load_device=dev, offload_device=torch.device("cpu"))
x = torch.randn(8, width, dtype=torch.float16, device=dev)
oom = 0
def state(**kw):
    say(resident=int(p.loaded_size()), size=int(p.model_size()), released=int(w.comfy.models.released),
        released_busy=int(w.comfy.models.released_busy), pid=os.getpid(), oom=oom,
        steer=getattr(w.comfy.steer, "version", None), **kw)
def compute(seconds=0.0, report=False):
    # one node: a pass, then (report) a state line once its pages are in, then passes until `seconds` passed
    global oom
    import time
    passes, end = 0, time.monotonic() + seconds
    try:
        with w.node("worker-a"):
            w.load(p)
            with torch.no_grad(), (prefetch.malloc_graph_scope(dev) if prefetch else contextlib.nullcontext()):
                while True:
                    model(x)
                    torch.cuda.synchronize()
                    passes += 1
                    if report and passes == 1:
                        state(computing=True)
                    if time.monotonic() >= end:
                        break
            if prefetch:
                prefetch.cleanup_prefetch_queues()  # v0.39's per-node teardown, as its executor does
    except torch.cuda.OutOfMemoryError:
        oom += 1
    return passes, time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine
compute()
state(ready=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "compute":
        compute()
    if cmd.startswith("busy "):
        passes, ended = compute(float(cmd.split()[1]), report=True)
        state(passes=passes, ended_at=ended)
        continue
    if cmd == "quit":
        break
    state()
w.close()
"""

# Worker B: plain torch, run under `comem run --policy enforce` (the preload): one tensor of argv[1] bytes.
WORKER_B = r"""
import json, sys, torch
torch.zeros(1, device="cuda")
print(json.dumps({"ready": True}), flush=True)
sys.stdin.readline()
oom = 0
try:
    t = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
except torch.cuda.OutOfMemoryError as e:
    oom = 1
print(json.dumps({"oom": oom}), flush=True)
sys.stdin.readline()
"""


class Lines:
    """A child that speaks JSON lines: one line in, one line out."""

    def __init__(self, args, env) -> None:
        self.p = subprocess.Popen(args, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.first = self.read()

    def read(self):
        line = self.p.stdout.readline()
        return json.loads(line) if line else {"error": f"exited {self.p.poll()}"}

    def ask(self, cmd: str = ""):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return self.read()

    def end(self) -> None:
        if self.p.poll() is None:
            try:
                self.ask("quit")
            except (BrokenPipeError, ValueError):
                pass
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()


def gib(b: float) -> str:
    return f"{b / GiB:6.2f} GiB"


class Grantee:
    def __init__(self, env, name: str, nbytes: int) -> None:
        self.p = subprocess.Popen([sys.executable, "-c", GRANTEE, name, str(nbytes)], env=env, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.first = json.loads(self.p.stdout.readline())

    def next(self):
        self.p.stdin.write("\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def end(self):
        try:
            self.p.stdin.write("\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            pass
        self.p.wait(30)


class _PinsOnly(Exception):
    """--pins-only: the claims it makes are done."""


def support_aimdo() -> str:
    from importlib.metadata import version
    return version("comfy-aimdo")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--card-gib", type=float, default=24)
    ap.add_argument("--model-gib", type=float, default=8)
    ap.add_argument("--worker-gib", type=float, default=6, help="worker A's dynamic model")
    ap.add_argument("--json")
    ap.add_argument("--pins-only", action="store_true", help="steer, e, h, a, then p: no workers")
    ap.add_argument("--compiler", choices=("on", "off"), default="on",
                    help="ComfyUI v0.39's memory compiler around each compute (off: --disable-comfy-compiler)")
    a = ap.parse_args()
    d = support.comfyui_dir()
    if d is None or support.comfyui_era(d) not in support.DYNAMIC_ERAS:
        print("comfy_dynamic_gpu: COMFYUI_DIR must name ComfyUI 783545f6 or v0.39", file=sys.stderr)
        return 2
    os.environ["COMEM_GPU_COMPILER"] = a.compiler  # worker A's too
    sys.path.insert(0, d)
    import comfy_aimdo.control as control
    control.init(simple_vram_headroom=None, nvml_pressure=True)  # main.py's order: before torch
    import torch
    if not torch.cuda.is_available():
        print("comfy_dynamic_gpu: no CUDA device here; skipped")
        return 77
    import comfy.model_management as mm
    import comfy.model_patcher
    import comfy.memory_management
    import comfy.ops
    if not control.init_devices([(0, 0)]):
        print("comfy_dynamic_gpu: comfy-aimdo did not initialise device 0", file=sys.stderr)
        return 1
    comfy.model_patcher.CoreModelPatcher = comfy.model_patcher.ModelPatcherDynamic
    comfy.memory_management.aimdo_enabled = True
    import contextlib
    from comfy.cli_args import args as comfy_args
    era = support.comfyui_era(d)
    prefetch = None
    if era == "v0.39":
        import comfy.model_prefetch as prefetch
        comfy_args.disable_comfy_compiler = a.compiler == "off"
        if not hasattr(mm, "DISABLE_PINNED_MEMORY"):
            mm.DISABLE_PINNED_MEMORY = bool(comfy_args.disable_pinned_memory)
            print("comfy_dynamic_gpu: set model_management.DISABLE_PINNED_MEMORY as upstream v0.39 does "
                  "(the assembled tree lacks it)", flush=True)
    print(f"comfy_dynamic_gpu: ComfyUI {era}, comfy-aimdo {getattr(control, '__version__', None) or support_aimdo()}, "
          f"compiler {a.compiler if era == 'v0.39' else 'absent'}", flush=True)

    figures_graph = {"breaks": 0, "rogues": 0, "used": 0}

    @contextlib.contextmanager
    def scope():
        """v0.39's memory-compiler scope around a compute, and its per-node teardown after, as its executor
        does around a node (a graph left at exit held the host's exit in the first run)."""
        if prefetch is None:
            yield
            return
        with prefetch.malloc_graph_scope(mm.get_torch_device()):
            yield
        figures_graph["used"] |= int(bool(prefetch.MALLOC_GRAPH_USED))
        prefetch.cleanup_prefetch_queues()  # logs and resets the counters: kept above first
        figures_graph["breaks"] += int(prefetch.MALLOC_GRAPH_BREAKS)
        figures_graph["rogues"] += int(prefetch.MALLOC_GRAPH_ROGUES)
    import pynvml
    pynvml.nvmlInit()
    nvh = pynvml.nvmlDeviceGetHandleByIndex(0)

    def nv_free() -> int:
        return int(pynvml.nvmlDeviceGetMemoryInfo(nvh).free)

    def nv_used(pid: int) -> int:
        return sum(int(p.usedGpuMemory or 0) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(nvh) if p.pid == pid)

    figures, failures = {}, []

    def claim(name: str, ok: bool, detail: str) -> None:
        print(f"  [{'ok' if ok else 'FAILED'}] {name}: {detail}", flush=True)
        figures[f"claim_{name}"] = int(ok)
        if not ok:
            failures.append(name)

    machine = support.Machine("sim:1GiB", idle_release=600)
    machine.spec = "nvml"
    machine.env["COMEM_DEVICE"] = "nvml"
    machine.env["COMEM_LOG"] = "info"
    ballast = None
    with machine:
        import comem
        from comem.comfy import Host
        torch.zeros(1, device="cuda")
        spare = nv_free() - int(a.card_gib * GiB)
        if spare > 0:
            ballast = subprocess.Popen([sys.executable, "-c", (
                "import torch, time; x = torch.empty(%d, dtype=torch.uint8, device='cuda'); "
                "print('ready', flush=True); time.sleep(3600)") % spare], stdout=subprocess.PIPE, text=True)
            ballast.stdout.readline()
            print(f"ballast: {gib(spare)} held outside comem", flush=True)
        try:
            host = Host(mm, socket=machine.socket, embed=False).install()
            claim("steer", host.steer is not None,
                  f"the host adapter steers comfy-aimdo {getattr(host.steer, 'version', None)}")
            view = comem.View(machine.socket)
            dev = mm.get_torch_device()
            width = 4096
            n = int(a.model_gib * GiB // (width * width * 2))
            layers = []
            for _ in range(n):  # ComfyUI's own layers (comfy_cast_weights): their weights live in the VBAR
                lin = comfy.ops.disable_weight_init.Linear(width, width, bias=False, dtype=torch.float16)
                lin.weight = torch.nn.Parameter(torch.randn(width, width, dtype=torch.float16) * 0.01,
                                                requires_grad=False)
                layers.append(lin)
            model = torch.nn.Sequential(*layers)
            patcher = comfy.model_patcher.ModelPatcherDynamic(model, load_device=dev,
                                                             offload_device=torch.device("cpu"))
            mm.load_models_gpu([patcher])
            x = torch.randn(8, width, dtype=torch.float16, device=dev)

            def compute() -> None:
                with host.computing("dynamic"):
                    with torch.no_grad(), scope():
                        model(x)
                    torch.cuda.synchronize()

            def claim_pins() -> None:
                # (p) ComfyUI's own pins (783545f6's pin ladder, when its weights stream from host RAM): each
                # booked with the ledger before ComfyUI made it (comem/comfy/pins.py)
                from comem.comfy.pins import CHUNK
                tp = int(mm.TOTAL_PINNED_MEMORY)
                me = next(p for p in machine.status()["devices"][0]["processes"] if p["pid"] == os.getpid())
                pins = host.pins
                claim("p", pins is not None and tp <= pins.booked <= tp + CHUNK and me["pinned"] == pins.booked,
                      f"ComfyUI has pinned {gib(tp)}; booked with the ledger {gib(pins.booked if pins else 0)} (the "
                      f"ledger's figure for the host {gib(me['pinned'])}); {pins.refused if pins else '-'} refused")
                figures.update(p_comfy_pinned_bytes=tp, p_booked_bytes=pins.booked if pins else None)

            compute()
            resident = patcher.loaded_size()
            print(f"host: dynamic model {gib(patcher.model_size())}, resident after one pass {gib(resident)}; "
                  f"card free {gib(nv_free())}", flush=True)
            figures["host_resident_bytes"] = resident

            # (e) the driver's figure for the host against the ledger's
            time.sleep(0.3)
            st = machine.status()
            me = next(p for p in st["devices"][0]["processes"] if p["pid"] == os.getpid())
            led = me["resident"] + me.get("context_floor", 0)
            nvu = nv_used(os.getpid())
            claim("e", abs(nvu - led) <= 600 * MiB,
                  f"NVML {gib(nvu)} vs ledger {gib(led)} (resident {gib(me['resident'])} + floor)")
            figures["e_diff_bytes"] = abs(nvu - led)

            # (h) another process is granted most of what is free; the host computes again meanwhile
            r = view.read(0)
            want = max(1 * GiB, r.free - r.reserve - 1 * GiB)
            env = dict(machine.env, PYTHONPATH=os.pathsep.join([os.path.join(SOURCE, "python"),
                                                               machine.env.get("PYTHONPATH", "")]))
            g = Grantee(env, "grantee", want)
            if "granted" not in g.first:
                claim("h", False, f"the grant itself was refused: {g.first}")
            else:
                time.sleep(0.1)
                headroom = host.steer.last if host.steer else None
                low = nv_free()
                for _ in range(3):
                    compute()
                    low = min(low, nv_free())
                after = g.next()
                claim("h", low >= want and after.get("oom") == 0,
                      f"granted {gib(want)} to another process; the host's aimdo headroom {gib(headroom or 0)}; "
                      f"card free while the host computed at least {gib(low)}; the grantee allocated "
                      f"{'without' if after.get('oom') == 0 else 'WITH'} an out-of-memory error")
                figures.update(h_granted_bytes=want, h_min_free_bytes=low, h_headroom_bytes=headroom or 0)
            g.end()

            # (a) an admission that does not fit takes bytes from the host's VBAR through the ledger; first the
            #     view must show the grantee gone (its bytes back on the card), or the figure below is stale
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and abs(view.read(0).free - nv_free()) > 256 * MiB:
                time.sleep(0.05)
            r = view.read(0)
            before = patcher.loaded_size()
            # weights count 1.1x in ComfyUI's admission, with its minimum inference memory on top: half the
            # host's pages must come back for this to fit
            want = max(1 * GiB, int((r.free - r.reserve + before // 2 - 1200 * MiB) / 1.1))
            released = host.models.released
            t = time.monotonic()
            g = Grantee(env, "taker", want)
            took = time.monotonic() - t
            after_bytes = patcher.loaded_size()
            ok = "granted" in g.first
            nxt = g.next() if ok else {}
            claim("a", ok and after_bytes < before and host.models.released > released and nxt.get("oom") == 0,
                  f"{'granted' if ok else 'refused'} {gib(want)} in {took:.2f} s; the host's VBAR went "
                  f"{gib(before)} -> {gib(after_bytes)} (its holder reported {gib(host.models.released - released)}"
                  f" freed); the taker allocated {'without' if nxt.get('oom') == 0 else 'WITH'} an OOM")
            figures.update(a_host_before_bytes=before, a_host_after_bytes=after_bytes,
                           a_released_bytes=host.models.released - released)
            g.end()
            compute()  # the host computes again: its pages come back as far as the ledger lets them
            if a.pins_only:  # its VBAR smaller than the model now: what streams may be pinned
                claim_pins()
                co = machine.status()["coordinator"]
                claim("check", co["violations"] == 0 and co["checks"] > 0,
                      f"comemd --check: {co['checks']} ledger checks, {co['violations']} violations")
                host.close()
                raise _PinsOnly()

            # (b) worker A (its own aimdo) idle with its pages in; the host loads a plain ModelPatcher that
            #     does not fit beside A and the host's own pages
            a_env = dict(env, COMFYUI_DIR=d)
            wa = Lines([sys.executable, "-c", WORKER_A, machine.socket, str(a.worker_gib)], a_env)
            print(f"worker A: {wa.first}", flush=True)
            a_before = wa.first.get("resident", 0)
            figures["a_worker_resident_bytes"] = a_before
            time.sleep(0.5)
            r = view.read(0)
            host_res = patcher.loaded_size()
            size_b = max(1 * GiB, int((r.free - r.reserve + host_res + a_before // 2 - 1200 * MiB) / 1.1))
            plain_layers = []
            for _ in range(max(1, size_b // (width * width * 2))):
                lin = torch.nn.Linear(width, width, bias=False, dtype=torch.float16)
                torch.nn.init.constant_(lin.weight, 0.001)
                lin.weight.requires_grad_(False)
                plain_layers.append(lin)
            plain = comfy.model_patcher.ModelPatcher(torch.nn.Sequential(*plain_layers), load_device=dev,
                                                     offload_device=torch.device("cpu"))
            a_rel = wa.first.get("released", 0)
            t = time.monotonic()
            mm.load_models_gpu([plain])
            took = time.monotonic() - t
            sa = wa.ask("state")
            loaded_b = plain.loaded_size()
            claim("b", sa.get("resident", a_before) < a_before and sa.get("released", 0) > a_rel and loaded_b > 0
                  and sa.get("oom") == 0,
                  f"the host loaded {gib(loaded_b)} of a {gib(plain.model_size())} plain ModelPatcher in {took:.2f} s; "
                  f"idle worker A's VBAR went {gib(a_before)} -> {gib(sa.get('resident', 0))} (its holder reported "
                  f"{gib(sa.get('released', 0) - a_rel)} freed); the host's VBAR {gib(host_res)} -> "
                  f"{gib(patcher.loaded_size())}; card free now {gib(nv_free())}")
            figures.update(b_loaded_bytes=loaded_b, b_a_before_bytes=a_before, b_a_after_bytes=sa.get("resident", 0),
                           b_a_released_bytes=sa.get("released", 0) - a_rel)

            # (g) worker B, plain torch under the preload (enforce), allocates more than the card has free
            comem_bin = os.path.join(os.environ.get("COMEM_BIN_DIR", support.BIN_DIR), "comem")
            free_g = nv_free()
            want_g = free_g + 2 * GiB
            released_before = host.models.released + wa.ask("state").get("released", 0)
            wb = Lines([comem_bin, "run", "--policy", "enforce", "--socket", machine.socket, "--",
                        sys.executable, "-c", WORKER_B, str(want_g)], env)
            t = time.monotonic()
            gb = wb.ask()
            took = time.monotonic() - t
            sa = wa.ask("state")
            released_after = host.models.released + sa.get("released", 0)
            claim("g", gb.get("oom") == 0 and released_after > released_before,
                  f"B allocated {gib(want_g)} with {gib(free_g)} free on the card "
                  f"{'without' if gb.get('oom') == 0 else 'WITH'} an out-of-memory error, in {took:.2f} s; "
                  f"A and the host gave back {gib(released_after - released_before)} (A's VBAR now "
                  f"{gib(sa.get('resident', 0))})")
            figures.update(g_allocated_bytes=want_g, g_free_before_bytes=free_g,
                           g_released_bytes=released_after - released_before, g_oom=gb.get("oom", -1))
            wb.end()

            # (c) busy A gives unpinned pages: the host lets go of its own models first, so that the bytes the
            #     admission needs can only come from A
            with host.lock:
                host.models.release(0, None, [])
                host.models.sync()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and abs(view.read(0).free - nv_free()) > 256 * MiB:
                time.sleep(0.05)
            busy_s = 8.0
            start = wa.ask(f"busy {busy_s}")
            a_res = start.get("resident", 0)
            a_rel, a_rel_busy = start.get("released", 0), start.get("released_busy", 0)
            r = view.read(0)
            want_c = max(1 * GiB, int((r.free - r.reserve + a_res // 2 - 1200 * MiB) / 1.1))
            t = time.monotonic()
            g = Grantee(env, "taker-c", want_c)
            took = time.monotonic() - t
            granted_at = time.monotonic()
            ok = "granted" in g.first
            nxt = g.next() if ok else {}
            end = wa.read()  # the node's last state, once its time is up
            given = end.get("released_busy", 0) - a_rel_busy
            claim("c", ok and granted_at < end.get("ended_at", 0) and given > 0 and end.get("resident", a_res) < a_res
                  and end.get("oom") == 0 and nxt.get("oom") == 0 and end.get("passes", 0) > 1,
                  f"{'granted' if ok else 'refused'} {gib(want_c)} in {took:.2f} s while A computed "
                  f"({end.get('passes')} passes in {busy_s:.0f} s); A's VBAR {gib(a_res)} -> "
                  f"{gib(end.get('resident', 0))}, {gib(given)} given while busy (all its gifts: "
                  f"{gib(end.get('released', 0) - a_rel)}); A's OOMs {end.get('oom')}, the taker allocated "
                  f"{'without' if nxt.get('oom') == 0 else 'WITH'} an OOM")
            figures.update(c_granted_bytes=want_c if ok else 0, c_a_before_bytes=a_res,
                           c_a_after_bytes=end.get("resident", 0), c_given_busy_bytes=given,
                           c_passes=end.get("passes", 0), c_grant_s=round(took, 3))
            g.end()

            # (d) A SIGKILLed: from its reap, how long until the ledger and NVML no longer know it
            pid_a = wa.p.pid
            wa.p.kill()
            wa.p.wait()
            t_reap = time.monotonic()
            led_ms = nv_ms = None
            while time.monotonic() - t_reap < 10 and (led_ms is None or nv_ms is None):
                now = (time.monotonic() - t_reap) * 1000
                if led_ms is None and not any(p["pid"] == pid_a for p in machine.status()["devices"][0]["processes"]):
                    led_ms = now
                if nv_ms is None and nv_used(pid_a) == 0:
                    nv_ms = now
            claim("d", led_ms is not None and nv_ms is not None and led_ms <= 5 and nv_ms <= 5,
                  f"A SIGKILLed: out of the ledger {led_ms if led_ms is None else round(led_ms, 2)} ms and out of "
                  f"NVML's process list {nv_ms if nv_ms is None else round(nv_ms, 2)} ms after its reap (first "
                  f"reading each: a reading takes about a millisecond)")
            figures.update(d_ledger_ms=led_ms, d_nvml_ms=nv_ms)
            claim_pins()
            claim("f", True, "no out-of-memory error in the host (a torch OOM would have ended this script); "
                             f"worker A's: {sa.get('oom')}, B's: {gb.get('oom')}")
            co = machine.status()["coordinator"]
            claim("check", co["violations"] == 0 and co["checks"] > 0,
                  f"comemd --check: {co['checks']} ledger checks, {co['violations']} violations")
            host.close()
        except _PinsOnly:
            pass
        finally:
            if ballast is not None:
                ballast.kill()
    figures["comfyui"] = era
    if prefetch is not None:  # what v0.39's compiler did in this (the host) process
        figures["compiler"] = a.compiler
        figures["malloc_graph_used"] = figures_graph["used"]
        figures["malloc_graph_breaks"] = figures_graph["breaks"]
        figures["malloc_graph_rogues"] = figures_graph["rogues"]
    for k, v in figures.items():
        print(f"{k}={v}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(figures, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
