#!/usr/bin/env python3
"""ComfyUI's host and two packs isolated by the real comfy-env 0.4.46 on one GPU: comfy-env alone, then with comem.

    COMFYUI_DIR=.../comfyui-783545f6 python3 tests/gpu/comfy_env_gpu.py [--card-gib 40] [--host-gib 16]
        [--a-gib 12] [--b-gib 12] [--rounds 2] [--hold 0.5] [--policy both|comem|comfy-env] [--json FILE]

The workload of ``bench/bench_comfy_env.py`` (issue 38 item 9) on CUDA. The host is a
process set up as ComfyUI sets itself up (its defaults: CUDA, the ``ModelPatcher`` path; with
``--aimdo``, comfy-aimdo and ``ModelPatcherDynamic`` as 783545f6's ``main.py`` enables them,
which comfy-env then enables in its workers),
that imports three packs from a ``custom_nodes/`` folder as ComfyUI does: ``host-probe``
(a model in the host) and ``ComfyUI-IsoDemo`` and ``ComfyUI-IsoTwo``, isolated by the real
comfy-env in a worker each (their environments laid as ``tests/python/test_comfy_env.py``
lays them, reaching this Python's packages). Each round, one node at a time: the host
loads and runs its model's layers once (a dynamic model's pages come in only as it computes),
worker A loads, runs its layers and holds ``--hold`` s, worker B the same, the host again,
A again. A ballast outside both makes the card ``--card-gib`` large.

Policies (each a fresh host process and fresh workers): ``comfy-env`` (no comem: comfy-env's
proxies, budget call, idle and pressure asks) and ``comem`` (a real comemd on NVML with
``--check``, comem's ``Host`` adapter, the workers joined through the bridge, every node
marked as ComfyUI's executor marks it).

Prints ``<policy>_<figure>=value`` (``ooms``: nodes that raised, ``bytes_reloaded``,
``bytes_evicted``, ``wall_s``, and for comem ``asks``, ``evicted_beyond_asked``,
``ledger_violations``), the rows of the host's list at the end (``<policy>_rows``), and
the failures, if any, of the claims that hold only with comem: every worker joined as a
session named after its environment, no comfy-env proxy in the host's list, no OOM.
Needs a GPU: without one it says so and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SOURCE, "tests", "python"))
sys.path.insert(0, os.path.join(SOURCE, "bench"))

GiB = 1 << 30
MiB = 1 << 20
PACKS = (("ComfyUI-IsoDemo", "ComfyUI-IsoDemo"), ("ComfyUI-IsoTwo", "ComfyUI-IsoDemo"))


def child(policy: str, base: str, a: argparse.Namespace) -> int:
    """The host process of one policy: prints one JSON line of figures."""
    comfyui = os.environ["COMFYUI_DIR"]
    sys.path.insert(0, comfyui)
    control = None
    if a.aimdo:  # as ComfyUI 783545f6's main.py does: aimdo before torch
        import comfy_aimdo.control as control
        control.init(simple_vram_headroom=None, nvml_pressure=True)
    if a.simulated:
        import comfy.cli_args
        comfy.cli_args.args.cpu = True  # the dry run: ComfyUI on the CPU, comem's simulated card
    import folder_paths  # noqa: F401 - comfy-env finds ComfyUI's source through it
    import comfy.model_management as mm
    import comfy.model_patcher  # noqa: F401
    if control is not None:  # and after ComfyUI's model manager: the devices, the dynamic patcher
        import comfy.memory_management
        if not control.init_devices([(d.index, 0) for d in mm.get_all_torch_devices()]):
            print(json.dumps({"error": "comfy-aimdo did not initialise the devices"}), flush=True)
            return 1
        comfy.model_patcher.CoreModelPatcher = comfy.model_patcher.ModelPatcherDynamic
        comfy.memory_management.aimdo_enabled = True  # comfy-env gives its workers aimdo too (COMFY_ENV_WORKER_AIMDO)
    node: Any = contextlib.nullcontext
    host = None
    if policy == "comem":
        from comem.comfy import Host
        host = Host(mm, socket=os.environ["COMEM_SOCKET"], embed=False).install()
        node = lambda: host.computing("bench")  # noqa: E731 - as ComfyUI's executor marks every node
    nodes: Dict[str, Any] = {}
    for pack in ("host-probe",) + tuple(p for p, _ in PACKS):
        path = os.path.join(base, "custom_nodes", pack)
        spec = importlib.util.spec_from_file_location(pack, os.path.join(path, "__init__.py"),
                                                      submodule_search_locations=[path])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[pack] = mod
        spec.loader.exec_module(mod)
        nodes.update(mod.NODE_CLASS_MAPPINGS)
    missing = [n for n in ("HostLoad", "IsoLoad", "IsoTwoLoad") if n not in nodes]
    if missing:
        print(json.dumps({"error": f"nodes not registered: {missing}"}), flush=True)
        return 1

    def run(kind: str, **inputs: Any) -> Dict[str, Any]:
        cls = nodes[kind]
        with node():
            r = getattr(cls(), cls.FUNCTION)(**inputs)
        text = r["result"][0] if isinstance(r, dict) else r[0]
        return json.loads(text)

    from bench_comfy_env import Tally, steps
    tally = Tally()
    errors: List[str] = []
    t0 = time.monotonic()
    for rnd in range(a.rounds):
        for kind, inputs in steps(int(a.host_gib * 1024), int(a.a_gib * 1024), int(a.b_gib * 1024), a.hold,
                                  compute=not a.simulated):
            t = time.monotonic()
            try:
                r = run(kind, **inputs)
            except Exception as e:  # noqa: BLE001 - an OOM in a process is a figure
                tally.failed()
                errors.append(f"{kind}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
                print(f"  round {rnd} {kind}: FAILED {errors[-1]}", flush=True, file=sys.stderr)
                continue
            before, after = tally.ran(kind, inputs, r)
            print(f"  round {rnd} {kind}: {before / GiB:.2f} -> {after / GiB:.2f} GiB in {time.monotonic() - t:.2f} s",
                  flush=True, file=sys.stderr)
    out: Dict[str, Any] = dict(tally.figures, errors=errors)
    out["wall_s"] = round(time.monotonic() - t0, 2)
    out["rows"] = sorted(type(lm.model).__name__ for lm in mm.current_loaded_models)
    if host is not None:
        host.sync()
        out["bridge"] = sorted((w["name"], bool(w["joined"])) for w in (host.comfy_env.workers().values()
                                                                          if host.comfy_env else []))
        st = host.client.status()
        out["sessions"] = sorted(p["name"] for d in st["devices"] if not d.get("host_ram")
                                 for p in d.get("processes", []))
    print(json.dumps(out), flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--card-gib", type=float, default=40.0)
    ap.add_argument("--host-gib", type=float, default=16.0)
    ap.add_argument("--a-gib", type=float, default=12.0)
    ap.add_argument("--b-gib", type=float, default=12.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--hold", type=float, default=0.5)
    ap.add_argument("--policy", choices=("both", "comem", "comfy-env"), default="both")
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument("--aimdo", action="store_true",
                    help="the host runs comfy-aimdo as ComfyUI's main.py does (dynamic VRAM), and so its workers")
    ap.add_argument("--simulated", action="store_true",
                    help="dry run without a GPU: ComfyUI on the CPU, comem's simulated card of --card-gib, comem only")
    ap.add_argument("--child", nargs=2, metavar=("POLICY", "BASE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], a.child[1], a)
    import torch
    if not torch.cuda.is_available() and not a.simulated:
        print("comfy_env_gpu: no GPU here; nothing to run (--simulated dry-runs it on the CPU)")
        return 0
    comfyui = os.environ.get("COMFYUI_DIR")
    if not comfyui:
        print("comfy_env_gpu: set COMFYUI_DIR to a ComfyUI 783545f6 tree")
        return 2
    import support
    import test_comfy_env as harness
    why = harness.comfy_env_missing()
    if why:
        print(f"comfy_env_gpu: {why}")
        return 2
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if p and os.path.realpath(p) != os.path.realpath(support.PYTHON_DIR)]
    base = tempfile.mkdtemp(prefix="comfy-env-gpu-")
    nodes = os.path.join(base, "custom_nodes")
    os.makedirs(nodes)
    root, home = os.path.join(base, "comfy-env-root"), os.path.join(base, "home")
    shutil.copytree(os.path.join(harness.FIXTURES, "host-probe"), os.path.join(nodes, "host-probe"))
    for pack, source in PACKS:
        shutil.copytree(os.path.join(harness.FIXTURES, source), os.path.join(nodes, pack))
        harness.lay_environment(comfyui, os.path.join(nodes, pack), root, home, extra)
    ballast, spare = None, 0
    if not a.simulated:
        import pynvml
        pynvml.nvmlInit()
        torch.zeros(1, device="cuda")
        spare = int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).free) - int(a.card_gib * GiB)
    if spare > 0:
        ballast = subprocess.Popen([sys.executable, "-c", (
            "import torch, time; x = torch.empty(%d, dtype=torch.uint8, device='cuda'); "
            "print('ready', flush=True); time.sleep(3600)") % spare], stdout=subprocess.PIPE, text=True)
        ballast.stdout.readline()
    print(f"card: {a.card_gib:g} GiB free for the mix ({spare / GiB:.1f} GiB held by a ballast); workload: "
          f"{a.rounds} x [host {a.host_gib:g}, A {a.a_gib:g}, B {a.b_gib:g}, host, A] GiB, hold {a.hold} s", flush=True)
    figures: Dict[str, Any] = {}
    failures: List[str] = []
    policies = ["comfy-env", "comem"] if a.policy == "both" else [a.policy]
    if a.simulated:
        policies = ["comem"]  # comfy-env alone moves no byte of the simulated card
    try:
        for policy in policies:
            env = dict(os.environ, COMFY_ENV_ROOT=root, HOME=home, COMFY_ENV_IDLE_REAP_SECONDS="0",
                       PYTHONUNBUFFERED="1")
            machine = None
            if policy == "comem":
                machine = support.Machine(f"sim:{a.card_gib:g}GiB" if a.simulated else "sim:1GiB", idle_release=600)
                if not a.simulated:
                    machine.spec = "nvml"
                    machine.env["COMEM_DEVICE"] = "nvml"
                machine.__enter__()
                env.update({k: machine.env[k] for k in ("COMEM_SOCKET", "COMEM_RUNTIME_DIR", "COMEM_DEVICE")})
            argv = [sys.executable, os.path.abspath(__file__), "--child", policy, base] + [
                f"--{k.replace('_', '-')}={getattr(a, k)}" for k in ("host_gib", "a_gib", "b_gib", "rounds", "hold")] + (
                ["--simulated"] if a.simulated else []) + (["--aimdo"] if a.aimdo else [])
            t = time.monotonic()
            r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
            sys.stderr.write(r.stderr[-20000:])
            line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith("{")), None)
            if r.returncode != 0 or line is None:
                failures.append(f"{policy}: the host exited {r.returncode}: {r.stdout[-2000:]}")
                if machine is not None:
                    machine.__exit__(None, None, None)
                continue
            out = json.loads(line)
            out["process_s"] = round(time.monotonic() - t, 1)
            if machine is not None:
                co = machine.status()["coordinator"]
                c = machine.status()["counters"]
                out["asks"], out["evicted_beyond_asked"] = c["asks"], max(0, c["bytes_freed"] - c["bytes_asked"])
                out["ledger_checks"], out["ledger_violations"] = co["checks"], co["violations"]
                machine.__exit__(None, None, None)
                joined = [n for n, j in out.get("bridge", []) if j]
                if sorted(joined) != ["isodemo-nodes", "isotwo-nodes"]:
                    failures.append(f"comem: the workers that joined: {out.get('bridge')}")
                if "SubprocessModelPatcher" in out["rows"]:
                    failures.append(f"comem: a comfy-env proxy in the host's list: {out['rows']}")
                if out["ooms"]:
                    failures.append(f"comem: {out['ooms']} nodes failed: {out['errors']}")
                if out["ledger_violations"]:
                    failures.append("comem: the ledger check failed")
            for k, v in out.items():
                print(f"{policy}_{k}={v}", flush=True)
                figures[f"{policy}_{k}"] = v
    finally:
        if ballast is not None:
            ballast.kill()
        shutil.rmtree(base, ignore_errors=True)
    figures["failures"] = failures
    if a.json:
        with open(a.json, "w") as f:
            json.dump(figures, f, indent=1)
    for f in failures:
        print(f"FAILED: {f}")
    print("comfy_env_gpu: " + ("every claim held" if not failures else f"{len(failures)} claim(s) failed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
