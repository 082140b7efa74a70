#!/usr/bin/env python3
"""ComfyUI with two packs isolated by the real comfy-env 0.4.46, alone and with comem: OOMs, reloads, time.

    COMFYUI_DIR=.../comfyui-783545f6 python3 bench/bench_comfy_env.py [--policy both|comem|comfy-env]
        [--card-gib 4] [--host-mib 1536] [--a-mib 1024] [--b-mib 1024] [--rounds 3] [--hold 0.2]

The real ComfyUI 783545f6 server (``main.py``) with three packs in its custom_nodes/:
``host-probe`` (loads a model in ComfyUI's own process) and two packs isolated by
comfy-env (``ComfyUI-IsoDemo`` and a copy of it, ``ComfyUI-IsoTwo``), each in a worker
of its own, with the environments laid as ``tests/python/test_comfy_env.py`` lays them.
Each round is the same fixed mix, one prompt at a time: the host loads its model,
worker A loads and computes (holds the node ``--hold`` s), worker B loads and computes,
the host again, A again. Every model is layered (64 MiB layers), so a partial unload
gives back part of a model.

Policies: ``comem`` (comem's node installed, a real comemd; comfy-env's workers join the
ledger) and ``comfy-env`` (comfy-env alone: no comem anywhere). Without a GPU the card is
comem's simulated card (``--card-gib``), which only comem's processes charge: comfy-env
alone then manages nothing (it acts on CUDA memory only), so that policy is measured on a
GPU only and this says so. With a GPU, ComfyUI runs on CUDA and ``--card-gib`` is ignored
(size the models to the card instead).

Printed as ``name=value`` lines per policy:

- ``<policy>_ooms``: prompts that failed (out of memory, or any error);
- ``<policy>_bytes_reloaded``: bytes a model loaded again after its first load (what
  another process's room cost it);
- ``<policy>_bytes_evicted``: bytes taken from a model between two of its runs;
- ``<policy>_evicted_beyond_asked``: (comem) bytes receipts reported freed beyond what the
  coordinator's sized asks asked for (``bytes_freed - bytes_asked``, never below 0);
- ``<policy>_wall_s``: the mix, not the server's start.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SOURCE, "tests", "python"))

MIB = 1 << 20
_http = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only


def _gpu() -> bool:
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


class Server:
    """One ComfyUI server with the three packs, under one policy."""

    def __init__(self, comfyui: str, policy: str, card_gib: float, gpu: bool) -> None:
        import support
        import test_comfy_env as harness
        self.policy = policy
        self.base = tempfile.mkdtemp(prefix=f"bench-comfy-env-{policy}-")
        nodes = os.path.join(self.base, "custom_nodes")
        os.makedirs(nodes)
        self.machine: Optional[Any] = None
        env = dict(os.environ)
        if policy == "comem":
            card = "nvml" if gpu else f"sim:{card_gib:g}GiB"
            self.machine = support.Machine(card).__enter__()
            env = dict(self.machine.env)
            subprocess.run([sys.executable, "-m", "comem.comfy", "install", self.base], env=env, check=True,
                           capture_output=True, timeout=120)
        env.pop("PYTHONPATH", None)  # the node finds comem beside itself, as for a user
        root, home = os.path.join(self.base, "comfy-env-root"), os.path.join(self.base, "home")
        shutil.copytree(os.path.join(harness.FIXTURES, "host-probe"), os.path.join(nodes, "host-probe"))
        for pack, source in (("ComfyUI-IsoDemo", "ComfyUI-IsoDemo"), ("ComfyUI-IsoTwo", "ComfyUI-IsoDemo")):
            shutil.copytree(os.path.join(harness.FIXTURES, source), os.path.join(nodes, pack))
            harness.lay_environment(comfyui, os.path.join(nodes, pack), root, home)
        env.update({"COMFY_ENV_ROOT": root, "HOME": home, "COMFY_ENV_IDLE_REAP_SECONDS": "0",
                    "PYTHONUNBUFFERED": "1"})
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        argv = [sys.executable, os.path.join(comfyui, "main.py"), "--base-directory", self.base,
                "--database-url", "sqlite:///" + os.path.join(self.base, "comfyui.db"), "--disable-api-nodes",
                "--listen", "127.0.0.1", "--port", str(self.port), "--disable-auto-launch", "--dont-print-server"]
        if not gpu:
            argv.insert(2, "--cpu")
        self.log = open(os.path.join(self.base, "comfyui.log"), "w+")
        self.proc = subprocess.Popen(argv, cwd=self.base, env=env, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while True:
            try:
                self.get("/system_stats")
                break
            except Exception:  # noqa: BLE001
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"ComfyUI did not start ({policy}):\n{self.tail()}")
                time.sleep(0.25)

    def tail(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-5000:]

    def get(self, path: str) -> Any:
        with _http.open(f"http://127.0.0.1:{self.port}{path}", timeout=30) as r:
            return json.loads(r.read())

    def run(self, class_type: str, **inputs: Any) -> Optional[Dict[str, Any]]:
        """Queues one node; its report, or None where the prompt failed."""
        body = json.dumps({"prompt": {"1": {"class_type": class_type, "inputs": inputs}}}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/prompt", data=body,
                                     headers={"Content-Type": "application/json"}, method="POST")
        with _http.open(req, timeout=30) as r:
            pid = json.loads(r.read())["prompt_id"]
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            h = self.get(f"/history/{pid}").get(pid) or {}
            st = h.get("status") or {}
            if st.get("status_str") == "error":
                return None
            if st.get("completed"):
                return json.loads(h["outputs"]["1"]["text"][0])
            time.sleep(0.05)
        raise RuntimeError(f"prompt {class_type} did not finish in 600 s\n{self.tail()}")

    def counters(self) -> Dict[str, int]:
        return self.machine.status()["counters"] if self.machine is not None else {}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.machine is not None:
            self.machine.__exit__(None, None, None)
        self.log.close()
        shutil.rmtree(self.base, ignore_errors=True)


def steps(host_mib: int, a_mib: int, b_mib: int, hold: float,
          compute: bool = False) -> List[Tuple[str, Dict[str, Any]]]:
    """One round of the fixed mix: (node class, its inputs) in order (also tests/gpu/comfy_env_gpu.py's).

    ``compute``: each node runs its model's layers once after loading it (a dynamic model's pages come in
    only then); the CPU benchmark leaves it off."""
    c = {"compute": True} if compute else {}
    return [("HostLoad", {"name": "h", "mib": host_mib, **c}),
            ("IsoLoad", {"name": "a", "mib": a_mib, "hold": hold, **c}),
            ("IsoTwoLoad", {"name": "b", "mib": b_mib, "hold": hold, **c}),
            ("HostLoad", {"name": "h", "mib": host_mib, **c}),
            ("IsoLoad", {"name": "a", "mib": a_mib, "hold": hold, **c})]


class Tally:
    """The mix's figures from the nodes' reports (each model's residency before and after its own node)."""

    def __init__(self) -> None:
        self.figures: Dict[str, Any] = {"ooms": 0, "bytes_reloaded": 0, "bytes_evicted": 0}
        self._last: Dict[str, int] = {}  # model -> its residency when its last node ended

    def failed(self) -> None:
        self.figures["ooms"] += 1

    def ran(self, kind: str, inputs: Dict[str, Any], report: Dict[str, Any]) -> Tuple[int, int]:
        """Counts one node's report; returns the model's (before, after) bytes."""
        key = f"{kind}:{inputs['name']}"
        after = int(report.get("after", report.get("model_loaded", 0)))
        before = int(report.get("before", 0))
        if key in self._last:  # what others took since its last node, and what it loaded again
            self.figures["bytes_reloaded"] += max(0, after - before)
            self.figures["bytes_evicted"] += max(0, self._last[key] - before)
        self._last[key] = after
        return before, after


def mix(server: Server, args: argparse.Namespace) -> Dict[str, Any]:
    """The fixed workload; the figures of one policy."""
    tally = Tally()
    before_counters = server.counters()
    t0 = time.monotonic()
    for _ in range(args.rounds):
        for kind, inputs in steps(args.host_mib, args.a_mib, args.b_mib, args.hold):
            r = server.run(kind, **inputs)
            if r is None:
                tally.failed()
            else:
                tally.ran(kind, inputs, r)
    out = tally.figures
    out["wall_s"] = round(time.monotonic() - t0, 2)
    c = server.counters()
    if c:
        asked = c["bytes_asked"] - before_counters["bytes_asked"]
        freed = c["bytes_freed"] - before_counters["bytes_freed"]
        out["evicted_beyond_asked"] = max(0, freed - asked)
        out["asks"] = c["asks"] - before_counters["asks"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", choices=("both", "comem", "comfy-env"), default="both")
    ap.add_argument("--card-gib", type=float, default=4.0, help="the simulated card without a GPU (default 4)")
    ap.add_argument("--host-mib", type=int, default=1536)
    ap.add_argument("--a-mib", type=int, default=1024)
    ap.add_argument("--b-mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hold", type=float, default=0.2, help="seconds each worker node computes (holds)")
    args = ap.parse_args()
    comfyui = os.environ.get("COMFYUI_DIR")
    if not comfyui or not os.path.isfile(os.path.join(comfyui, "main.py")):
        print("bench_comfy_env: set COMFYUI_DIR to a ComfyUI 783545f6 tree (../shared/thirdparty/comfyui-783545f6)")
        return 0
    import test_comfy_env as harness
    why = harness.comfy_env_missing()
    if why:
        print(f"bench_comfy_env: {why}")
        return 0
    gpu = _gpu()
    print(f"device={'cuda' if gpu else 'simulated card %gGiB (no GPU)' % args.card_gib}")
    print(f"workload=rounds {args.rounds} x [host {args.host_mib}M, A {args.a_mib}M, B {args.b_mib}M, host, A], "
          f"hold {args.hold}s")
    policies = ["comem", "comfy-env"] if args.policy == "both" else [args.policy]
    for policy in policies:
        if policy == "comfy-env" and not gpu:
            print("comfy-env_measured=no (comfy-env manages CUDA memory only; on the simulated card nothing it "
                  "does moves a byte: run this on a GPU)")
            continue
        server = Server(comfyui, policy, args.card_gib, gpu)
        try:
            figures = mix(server, args)
        finally:
            server.close()
        for k, v in figures.items():
            print(f"{policy}_{k}={v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
