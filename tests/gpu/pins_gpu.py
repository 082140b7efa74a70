#!/usr/bin/env python3
"""Pinned host RAM across processes with real page-locking, on a bounded host-RAM budget (issue 23 item 6).

    python3 tests/gpu/pins_gpu.py [--budget-gib 12] [--json FILE]

comemd serves the card (NVML) and host RAM on a budget (``--ram``). Two child processes with torch on
CUDA each hold a pins holder; a pin is booked with the ledger (``Holder.pin``) and then made as
ComfyUI makes its pins: a host buffer whose every page is written, page-locked with
``cudaHostRegister``. A's holder answers a pin ask by unregistering and freeing its buffer, then
unbooking it. Once both children are up, the pin size is 60 % of host RAM's free figure: A pins it;
B's pin of the same size cannot fit beside A's: refused, and A is asked in the background, so B asks
again (every 0.1 s, up to 20 s), as ComfyUI pins again at its next module. Claims:

  (1) B is granted only after A unlocked its pin (A's cudaHostUnregister stamped before B's grant,
      CLOCK_MONOTONIC of one machine; the coordinator grants B once A's resident set shows the room,
      which can be while A's free is still returning pages), and the page-locked bytes of A and B
      together never exceed the budget;
  (2) afterwards the ledger's pins are B's alone, and A's resident set fell by what it dropped;
  (3) a pin beyond what the budget has left, with nobody holding pins to give, is refused with a
      shortfall, and nothing is page-locked for it.

Without CUDA it says so and exits 77. Exits 1 when a claim fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SOURCE, "tests", "python"))
import support  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20

PINNER = r"""
import json, os, sys, threading, time
import torch, comem
torch.zeros(1, device="cuda")  # the CUDA context first, as ComfyUI has it before it pins
cudart = torch.cuda.cudart()
c = comem.Client(sys.argv[1], role="worker", require_coordinator=True)
lock = threading.Lock()
held, drops = {}, []

def rss():
    with open(f"/proc/{os.getpid()}/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))

def drop():
    # unlocks and frees the buffer: (bytes, when its pages were unlocked); the freeing itself follows
    buf = held.pop("buf", None)
    if buf is None:
        return 0, None
    n = buf.numel()
    cudart.cudaHostUnregister(buf.data_ptr())
    unlocked = time.monotonic()
    del buf  # its pages go back to the system (a 3 GiB munmap takes a moment; RSS falls meanwhile)
    return n, unlocked

def on_ask(ask):
    with lock:
        n, unlocked = drop()
        if n:
            drops.append({"at": unlocked, "freed_at": time.monotonic(), "bytes": n, "asked": ask.bytes, "rss": rss()})
            h.unpin(n)
        return n

h = c.add_holder("pins", kind="pins", on_release=on_ask, answers=("pins",))
print(json.dumps({"ready": True, "rss": rss()}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["cmd"] == "pin":
        n = cmd["bytes"]
        until, short_by = time.monotonic() + cmd.get("wait", 0.0), None
        while True:  # a refusal asks other pin holders in the background: asked again until `wait` passes
            try:
                h.pin(n)
                short_by = None
                break
            except comem.Refused as r:
                short_by = r.short_by
                if time.monotonic() >= until:
                    break
                time.sleep(0.1)
        if short_by is not None:
            print(json.dumps({"refused": True, "short_by": short_by, "rss": rss()}), flush=True)
            continue
        granted = time.monotonic()
        with lock:
            buf = torch.empty(n, dtype=torch.uint8)
            buf.fill_(1)  # every page resident, as a host buffer holding weights is
            rc = int(cudart.cudaHostRegister(buf.data_ptr(), n, 0))
            held["buf"] = buf
            del buf  # held is its only reference: a drop frees it
        print(json.dumps({"granted_at": granted, "register_rc": rc, "rss": rss()}), flush=True)
    elif cmd["cmd"] == "drops":
        with lock:
            print(json.dumps({"drops": drops, "rss": rss(), "held": held["buf"].numel() if "buf" in held else 0}),
                  flush=True)
    elif cmd["cmd"] == "exit":
        with lock:
            drop()
        break
"""


class Pinner:
    def __init__(self, env, name: str) -> None:
        self.p = subprocess.Popen([sys.executable, "-c", PINNER, name], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        self.ready = self.read()

    def read(self):
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"a pinner ended (rc {self.p.poll()})")
        return json.loads(line)

    def ask(self, cmd: str, **kw):
        kw["cmd"] = cmd
        self.p.stdin.write(json.dumps(kw) + "\n")
        self.p.stdin.flush()
        return self.read()

    def end(self) -> None:
        try:
            self.ask("exit")
        except (RuntimeError, BrokenPipeError, ValueError):
            pass
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-gib", type=float, default=12)
    ap.add_argument("--json")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("pins_gpu: no torch here; skipped")
        return 77
    if not torch.cuda.is_available():
        print("pins_gpu: no CUDA device here; skipped")
        return 77
    figures, failures = {}, []

    def claim(name: str, ok: bool, detail: str) -> None:
        print(f"  [{'ok' if ok else 'FAILED'}] {name}: {detail}", flush=True)
        figures[f"claim_{name}"] = int(ok)
        if not ok:
            failures.append(name)

    machine = support.Machine("sim:1GiB", idle_release=600, extra=["--ram", f"{int(a.budget_gib * 1024)}MiB"])
    machine.spec = "nvml"
    machine.env["COMEM_DEVICE"] = "nvml"
    with machine:
        pa = Pinner(machine.env, "A")
        pb = Pinner(machine.env, "B")
        try:
            ram = machine.status()["devices"][-1]
            free = ram["free"]
            size = int(free * 0.6) // MiB * MiB
            print(f"host RAM budget {a.budget_gib:.1f} GiB, free {free / GiB:.2f} GiB with both pinners up "
                  f"(A {pa.ready['rss'] / GiB:.2f} GiB, B {pb.ready['rss'] / GiB:.2f} GiB resident); "
                  f"each pins {size / GiB:.2f} GiB", flush=True)
            figures.update(budget_bytes=int(a.budget_gib * GiB), free_bytes=free, pin_bytes=size)
            ra = pa.ask("pin", bytes=size)
            ok_a = "granted_at" in ra and ra["register_rc"] == 0
            rb = pb.ask("pin", bytes=size, wait=20.0)
            da = pa.ask("drops")
            drops = da["drops"]
            ok_b = "granted_at" in rb and rb["register_rc"] == 0
            dropped_first = bool(drops) and ok_b and drops[0]["at"] < rb["granted_at"]
            both = (da["held"] + (size if ok_b else 0))
            claim("1", ok_a and ok_b and dropped_first and both <= int(a.budget_gib * GiB),
                  f"A pinned {size / GiB:.2f} GiB (cudaHostRegister rc {ra.get('register_rc')}); B's pin of the same "
                  f"asked A, which dropped {sum(d['bytes'] for d in drops) / GiB:.2f} GiB "
                  f"{(rb.get('granted_at', 0) - drops[0]['at']) * 1e3 if drops else float('nan'):.1f} ms before "
                  f"B's grant (rc {rb.get('register_rc')}); page-locked together afterwards {both / GiB:.2f} GiB")
            st = machine.status()
            rss_fall = ra["rss"] - da["rss"]
            claim("2", st["pins"]["total"] == size and rss_fall >= size * 0.9,
                  f"the ledger's pins {st['pins']['total'] / GiB:.2f} GiB (B's); A's RSS fell "
                  f"{rss_fall / GiB:.2f} GiB")
            left = machine.status()["devices"][-1]["free"]
            rc = pa.ask("pin", bytes=left + 512 * MiB)
            claim("3", rc.get("refused") is True and rc.get("short_by", 0) > 0,
                  f"A's pin of {(left + 512 * MiB) / GiB:.2f} GiB with {left / GiB:.2f} GiB free: refused, short by "
                  f"{rc.get('short_by', 0) / GiB:.2f} GiB")
            figures.update(drop_to_grant_ms=(rb.get("granted_at", 0) - drops[0]["at"]) * 1e3 if drops else None,
                           a_rss_fall_bytes=rss_fall)
            co = machine.status()["coordinator"]
            claim("check", co["violations"] == 0 and co["checks"] > 0,
                  f"comemd --check: {co['checks']} ledger checks, {co['violations']} violations")
        finally:
            pa.end()
            pb.end()
    for k, v in figures.items():
        print(f"{k}={v}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(figures, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
