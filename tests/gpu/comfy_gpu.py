#!/usr/bin/env python3
"""The ComfyUI adapter proven on a GPU: a real ComfyUI host and real torch workers sharing one card.

    python3 tests/gpu/comfy_gpu.py [--card-gib 48] [--json FILE] [--simulated]

This process is the host: ComfyUI's real model manager (COMFYUI_DIR) with comem's
host adapter, loading ModelPatcher-wrapped torch models through
``load_models_gpu``. Worker A holds plain torch models (tests/python/procs/
torch_worker.py); worker B pages a model through comem.aimdo while it computes
(procs/paged_worker.py). A foreign "ballast" allocation, outside comem, makes the
card ``--card-gib`` large, so models of a few GiB compete. comemd runs with
``--check``. With NVML's readings beside the ledger's it shows:

  (a) a worker's admission takes bytes back from the host through ComfyUI's own unload path;
  (b) the host's load_models_gpu takes bytes back from an idle worker through its stand-in;
  (c) the busy paged worker gives up unpinned pages while computing, and its loop sees
      only offloaded faults, never an exception;
  (d) a worker killed with SIGKILL: the ledger is clean at once, NVML within the driver's time;
  (e) NVML's per-process usage equals the ledger's figure within each process's context cost;
  (f) no process ever hits a CUDA out-of-memory error.

Without a GPU it says so and exits 77 (skipped), unless ``--simulated`` runs the same
script on the simulated card (a dry run of the choreography; NVML's part is then the
card's per-process reading). Prints a table, then ``name=value`` lines; exits 1 when a
claim fails.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SOURCE, "tests", "python"))
import support  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20


def gib(b: float) -> str:
    return f"{b / GiB:6.2f} GiB"


class Nvml:
    """Per-process device memory as the driver reports it (pynvml), or the simulated card's slots."""

    def __init__(self, simulated: bool, spec: str) -> None:
        self.simulated = simulated
        if simulated:
            import comem
            self.card = comem.SimCard(spec)
        else:
            import pynvml
            self.nv = pynvml
            pynvml.nvmlInit()
            self.h = pynvml.nvmlDeviceGetHandleByIndex(0)

    def used(self, pid: int) -> int:
        if self.simulated:
            ctx, alloc = self.card.usage(pid)
            return ctx + alloc
        for p in self.nv.nvmlDeviceGetComputeRunningProcesses(self.h):
            if p.pid == pid:
                return int(p.usedGpuMemory or 0)
        return 0

    def pids(self) -> set:
        if self.simulated:
            return set()
        return {p.pid for p in self.nv.nvmlDeviceGetComputeRunningProcesses(self.h)}

    def free(self) -> int:
        if self.simulated:
            return self.card.read(0).free
        return int(self.nv.nvmlDeviceGetMemoryInfo(self.h).free)

    def total(self) -> int:
        if self.simulated:
            return self.card.read(0).total
        return int(self.nv.nvmlDeviceGetMemoryInfo(self.h).total)


class Scene:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.failures = []
        self.figures = {}
        self.rows = []

    def claim(self, name: str, ok: bool, detail: str) -> None:
        print(f"  [{'ok' if ok else 'FAILED'}] {name}: {detail}", flush=True)
        self.figures[f"claim_{name}"] = 1 if ok else 0
        if not ok:
            self.failures.append(f"{name}: {detail}")

    def ledger(self, pid: int) -> int:
        """The ledger's figure for a process: its entries' resident bytes and the overhead it reported
        (torch's own working memory). Not the context floor: that one is derived from NVML itself."""
        for p in self.machine.status()["devices"][0]["processes"]:
            if p["pid"] == pid:
                overhead = sum(h.get("overhead", 0) or 0 for h in p["holders"])
                return p["resident"] + overhead
        return 0

    def snapshot(self, label: str) -> None:
        """NVML beside the ledger for every process; (e) is checked here."""
        row = {"label": label}
        for name, pid in self.pids.items():
            n, l = self.nv.used(pid), self.ledger(pid)
            row[name] = (n, l)
            # (e): the driver's figure and the ledger's agree within the process's context cost (a CUDA
            # context, as a fresh torch process shows it), plus 64 MiB for the caching allocator's rounding
            tol = self.context_cost + 64 * MiB
            if abs(n - l) > tol:
                self.claim("e_" + label.split()[0] + "_" + name, False,
                           f"NVML {gib(n)} vs ledger {gib(l)} for {name} differ by more than {gib(tol)}")
            self.figures.setdefault("e_max_diff_bytes", 0)
            self.figures["e_max_diff_bytes"] = max(self.figures["e_max_diff_bytes"], abs(n - l))
        self.rows.append(row)
        print(f"  {label:<34}" + "  ".join(f"{k} nvml {gib(v[0])} ledger {gib(v[1])}" for k, v in row.items()
                                            if k != "label"), flush=True)

    def run(self) -> int:
        a = self.args
        import torch
        simulated = a.simulated or not torch.cuda.is_available()
        if simulated and not a.simulated:
            print("comfy_gpu: no CUDA device here; skipped (use --simulated for a dry run on the simulated card)")
            return 77
        if not support.comfyui_dir():
            print("comfy_gpu: COMFYUI_DIR is unset; it must name a ComfyUI checkout", file=sys.stderr)
            return 2
        if simulated:
            card = f"sim:{a.card_gib}GiB:ctx=300MiB"
            self.machine = support.Machine(card, idle_release=600)
        else:
            self.machine = support.Machine("sim:1GiB", idle_release=600)  # replaced below: the real card
            self.machine.spec = "nvml"
            self.machine.env["COMEM_DEVICE"] = "nvml"
            self.machine.env.pop("COMEM_AIMDO_BACKEND", None)
        self.machine.env["COMEM_LOG"] = "info"
        if simulated:
            self.machine.env["COMEM_AIMDO_BACKEND"] = "sim"
        with self.machine:
            self.nv = Nvml(simulated, self.machine.spec)
            self.pids = {}
            return self.scenario(simulated)

    def scenario(self, simulated: bool) -> int:
        a, m = self.args, self.machine
        mm = support.import_comfy()
        import comfy.model_patcher
        import torch
        import comem
        from comem.comfy import Host
        t0 = time.monotonic()
        self.context_cost = 300 * MiB if simulated else 0

        # The card, made --card-gib large by a foreign allocation outside comem (a game, a browser...).
        ballast = None
        if not simulated:
            spare = self.nv.free() - a.card_gib * GiB
            if spare > 0:
                ballast = subprocess.Popen([sys.executable, "-c", (
                    "import torch, sys, time; x = torch.empty(%d, dtype=torch.uint8, device='cuda'); "
                    "print('ready', flush=True); time.sleep(3600)") % spare], stdout=subprocess.PIPE, text=True)
                ballast.stdout.readline()
                print(f"ballast: {gib(spare)} held outside comem (pid {ballast.pid})", flush=True)
        try:
            card = comem.SimCard(m.spec) if simulated else None
            host = Host(mm, socket=m.socket, embed=False, card=card).install()
            dev = mm.get_torch_device()
            if not simulated:
                torch.zeros(1, device=dev)  # the host's context exists before anything is measured
            self.pids["host"] = os.getpid()
            A = m.child("torch_worker.py", "worker-a")
            self.pids["A"] = A.pid
            if not simulated:
                A.ask("cuda")
                self.context_cost = max(self.nv.used(A.pid), 300 * MiB)  # what one CUDA context costs here
            E = a.card_gib * GiB
            print(f"card {gib(self.nv.total())}, effective {gib(E)}, context cost {gib(self.context_cost)}")
            self.figures["context_cost_bytes"] = self.context_cost
            self.snapshot("start")

            def patcher(total, layer=256 * MiB):
                n = max(1, int(total // layer))
                layers = []
                for _ in range(n):
                    lin = torch.nn.Linear(1, 1, bias=False)
                    lin.weight = torch.nn.Parameter(torch.empty(layer // 2, dtype=torch.float16), requires_grad=False)
                    layers.append(lin)
                return comfy.model_patcher.ModelPatcher(torch.nn.Sequential(*layers), load_device=dev,
                                                        offload_device=torch.device("cpu"))

            # 1. The host loads a UNet through ComfyUI; worker A loads a model that fits.
            unet = patcher(0.30 * E)
            mm.load_models_gpu([unet])
            self.snapshot("host loaded its UNet")
            sam_mib = int(0.22 * E / MiB)
            out = A.ask("load", name="sam", mib=sam_mib, parts=max(2, sam_mib // 256))
            self.snapshot("worker A loaded sam")

            # 2. (b) the host loads a VAE-sized model needing more than is free: ComfyUI's own free_memory
            #    evicts worker A's stand-in (idle), the worker frees, the load is admitted.
            free = comem.View(m.socket).read(0).free
            extra = max(mm.minimum_inference_memory(), mm.extra_reserved_memory())
            vae_bytes = int((free + 0.10 * E - extra) / 1.1)
            a_before = A.ask("resident", name="sam")["resident"]
            vae = patcher(vae_bytes)
            t = time.monotonic()
            mm.load_models_gpu([vae])
            self.figures["b_load_s"] = time.monotonic() - t
            a_after = A.ask("resident", name="sam")["resident"]
            asked = sum(sp._state["asks"] for sp in host.standins._patchers.values())
            self.claim("b", vae.loaded_size() == vae.model_size() and a_after < a_before and asked > 0,
                       f"the host loaded {gib(vae.loaded_size())}; worker A went {gib(a_before)} -> {gib(a_after)} "
                       f"through {asked} stand-in ask(s)")
            self.figures["b_worker_freed_bytes"] = a_before - a_after
            self.snapshot("(b) host took from idle A")

            # 3. (a) worker A asks for more than is free: the coordinator takes the host's bytes, and the host
            #    answers through ComfyUI's own LoadedModel.model_unload (the only other holder now).
            free = comem.View(m.socket).read(0).free
            want = int((free + 0.06 * E - 1.2 * GiB) / 1.1)
            host_before = host.models.resident(0)
            released_before = host.models.released
            t = time.monotonic()
            out = A.ask("load", name="sam2", mib=max(256, want // MiB), parts=max(2, want // (256 * MiB)),
                        timeout=120)
            self.figures["a_admit_s"] = time.monotonic() - t
            host_after = host.models.resident(0)
            self.claim("a", "refused" not in out and host.models.released > released_before and host_after < host_before,
                       f"worker A {'refused ' + str(out) if 'refused' in out else 'granted'} {gib(want)}; "
                       f"the host gave {gib(host.models.released - released_before)} "
                       f"through model_unload ({gib(host_before)} -> {gib(host_after)})")
            self.figures["a_host_released_bytes"] = host.models.released - released_before
            self.snapshot("(a) A took from the host")

            # 4. Worker B starts paging a model while it computes (busy from now on).
            B = m.child("paged_worker.py", "worker-b")
            self.pids["B"] = B.pid
            layer_mib = max(32, int(0.02 * E / MiB) // 32 * 32)
            B.ask("start", layers=max(8, int(0.5 * E / (layer_mib * MiB))), layer_mib=layer_mib,
                  admit_mib=int(0.25 * E / MiB), timeout=120)
            time.sleep(1.0)
            b0 = B.ask("stats")
            self.snapshot("worker B paging (busy)")

            # 5. (c) worker A asks again, for about half of what the busy pager could give: the coordinator
            #    takes unpinned pages from it (a pager releases while computing, most offloaded first).
            free = comem.View(m.socket).read(0).free
            want = int((free + 0.5 * b0["reclaimable"] - 1.2 * GiB) / 1.1)
            out = A.ask("load", name="sam3", mib=max(256, want // MiB), parts=max(2, want // (256 * MiB)),
                        timeout=120)
            time.sleep(0.5)
            b1 = B.ask("stats")
            gave = b0["usage"] - b1["usage"]
            self.claim("c", "refused" not in out and gave > 0 and b1["release_asks"] > b0["release_asks"]
                       and b1["exceptions"] == 0 and b1["offloaded"] > b0["offloaded"] and b1["passes"] > b0["passes"],
                       f"worker A {'refused' if 'refused' in out else 'granted'} {gib(want)}; busy worker B gave "
                       f"{gib(gave)} of pages while computing ({b1['passes'] - b0['passes']} passes meanwhile, "
                       f"{b1['offloaded'] - b0['offloaded']} offloaded faults, {b1['exceptions']} exceptions)")
            self.figures["c_pager_gave_bytes"] = gave
            self.snapshot("(c) A took from busy B")

            # 5. (d) worker A is killed.
            a_pid = A.pid
            os.kill(a_pid, signal.SIGKILL)
            t_kill = time.monotonic()
            A.proc.wait()  # the process is gone (the kernel has torn it down, its CUDA context included)
            t = time.monotonic()
            self.figures["d_exit_ms"] = (t - t_kill) * 1000
            gone = support.wait_for(lambda: m.process("worker-a") is None, 10, 0.001)
            ledger_ms = (time.monotonic() - t) * 1000
            nv_gone = support.wait_for(lambda: self.nv.used(a_pid) == 0 and a_pid not in self.nv.pids(), 30, 0.005)
            nvml_ms = (time.monotonic() - t) * 1000
            del self.pids["A"]
            host.sync()
            self.claim("d", bool(gone) and bool(nv_gone) and not any(
                sp._state["process"] == "worker-a" for sp in host.standins._patchers.values()),
                f"the process took {self.figures['d_exit_ms']:.0f} ms to die; then the ledger was clean after "
                f"{ledger_ms:.1f} ms, NVML after {nvml_ms:.1f} ms; its stand-ins gone")
            self.figures["d_ledger_ms"] = ledger_ms
            self.figures["d_nvml_ms"] = nvml_ms
            self.snapshot("(d) A killed")
            b2 = B.ask("stop")

            # (f) nobody hit an out-of-memory error.
            # The host is this process: an OOM in its loads would have ended the script above.
            self.claim("f", b2["ooms"] == 0 and b2["exceptions"] == 0,
                       f"worker B {b2['ooms']} OOM(s); the host's and worker A's loads all returned normally")
            m.check_ledger(_Case(self))
            self.figures["ledger_violations"] = m.status()["coordinator"]["violations"]
            self.figures["e_ok"] = int(not any(f.startswith("e_") for f in self.failures))
            self.figures["wall_s"] = time.monotonic() - t0
            host.close()
        finally:
            if ballast is not None:
                ballast.kill()
                ballast.wait()
        return 0


class _Case:
    """The few unittest assertions Machine.check_ledger uses, as claims."""

    def __init__(self, scene: Scene) -> None:
        self.s = scene

    def assertTrue(self, v, msg=None):
        self.s.claim("ledger_checking", bool(v), "comemd ran with --check")

    def assertGreater(self, a, b, msg=None):
        self.s.claim("ledger_checked", a > b, f"{a} ledger checks")

    def assertEqual(self, a, b, msg=None):
        self.s.claim("ledger_clean", a == b, f"{a} violations")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--card-gib", type=int, default=48, help="make the card this large with a foreign allocation")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--simulated", action="store_true", help="run on the simulated card (no GPU needed)")
    args = ap.parse_args()
    s = Scene(args)
    rc = s.run()
    if rc != 0:
        return rc
    print()
    for k, v in sorted(s.figures.items()):
        print(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"figures": s.figures, "rows": s.rows, "failures": s.failures}, f, indent=1, default=str)
    if s.failures:
        print("\nFAILED:\n  " + "\n  ".join(s.failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
