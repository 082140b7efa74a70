#!/usr/bin/env python3
"""comfy-aimdo's own examples/example.py, run on comem.aimdo with only its imports changed, beside aimdo itself.

    AIMDO_SRC=.../comfy-aimdo AIMDO_DIR=.../built python3 tests/gpu/aimdo_example.py [--only comem]

The example's three import lines are rewritten (comfy_aimdo -> comem.aimdo; the name
``comfy_aimdo`` stays bound, to comem.aimdo) and nothing else. Both runs print the
example's own lines; this script counts them per phase and checks that comem's run
behaves as aimdo documents: the first model's first pass populates a prefix and
offloads the rest, its later passes reuse that prefix and stream the rest; the second
model loads whole and is reused; the first model again, prioritized, reuses what
survived and reloads some, streaming the rest. Needs a GPU (exit 77 without one).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))

IMPORTS = [
    ("import comfy_aimdo.control\n", "import comem.aimdo as comfy_aimdo\nimport comem.aimdo.control\n"),
    ("import comfy_aimdo.torch\n", "import comem.aimdo.torch\n"),
    ("from comfy_aimdo.model_vbar import", "from comem.aimdo.model_vbar import"),
]


def switched(text: str) -> str:
    for old, new in IMPORTS:
        if old not in text:
            raise SystemExit(f"aimdo_example: the example no longer has {old.strip()!r}")
        text = text.replace(old, new, 1)
    rest = [ln for ln in text.splitlines() if re.match(r"\s*(import|from)\s+comfy_aimdo", ln)]
    if rest:
        raise SystemExit(f"aimdo_example: imports left unswitched: {rest}")
    return text


def phases(out: str):
    """Per model run, per printed iteration: the sequence of First/Reuse/Offloaded lines."""
    runs, cur = [], None
    for ln in out.splitlines():
        if ln.startswith("#####"):
            cur = []
            runs.append(cur)
        elif ln.startswith("Iteration") and cur is not None:
            cur.append([])
        elif cur and cur[-1] is not None:
            if "[First Load]" in ln:
                cur[-1].append("F")
            elif "[No Load Needed]" in ln:
                cur[-1].append("R")
            elif "[Offloaded]" in ln:
                cur[-1].append("O")
    return runs


def shape(it):
    """An iteration's lines as runs: 'F12 O18' (twelve first loads, then eighteen offloaded)."""
    out, prev, n = [], None, 0
    for c in it + [None]:
        if c == prev:
            n += 1
        else:
            if prev is not None:
                out.append(f"{prev}{n}")
            prev, n = c, 1
    return " ".join(out)


def check(runs) -> list:
    bad = []
    if len(runs) != 3:
        return [f"expected 3 model runs, saw {len(runs)}"]
    r1, r2, r3 = ([it for it in run if it] for run in runs)
    if not re.fullmatch(r"F\d+ O\d+", shape(r1[0])):
        bad.append(f"model 1, pass 1: expected first loads then offloaded, saw {shape(r1[0])}")
    for it in r1[1:]:
        if not re.fullmatch(r"R\d+ O\d+", shape(it)) or shape(it) != shape(r1[1]):
            bad.append(f"model 1, later pass: expected the same reused prefix then offloaded, saw {shape(it)}")
    if shape(r2[0]) != "F3" or any(shape(it) != "R3" for it in r2[1:]):
        bad.append(f"model 2: expected F3 then R3, saw {[shape(i) for i in r2]}")
    first = r3[0]
    if "R" not in first or "F" not in first or first[-1] != "O":
        bad.append(f"model 1 again: expected reuse, reloads, then offloaded, saw {shape(first)}")
    return bad


def run(example: str, env: dict, log: str) -> str:
    """Runs the example, its output going to log as it comes (so a timeout still leaves it)."""
    with open(log, "w") as f:
        p = subprocess.run([sys.executable, example], env=env, stdout=f, stderr=subprocess.STDOUT, text=True)
    out = open(log).read()
    if p.returncode != 0:
        raise SystemExit(f"aimdo_example: {example} failed ({p.returncode}):\n{out[-3000:]}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("comem", "aimdo"), help="run one implementation")
    ap.add_argument("--logdir", help="keep each run's output here (default: a temporary folder)")
    a = ap.parse_args()
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError
    except ImportError:
        print("aimdo_example: no CUDA device here; skipped")
        return 77
    src = os.environ.get("AIMDO_SRC")
    if not src or not os.path.isfile(os.path.join(src, "examples", "example.py")):
        print("aimdo_example: AIMDO_SRC must name comfy-aimdo's sources (with examples/example.py)", file=sys.stderr)
        return 2
    original = open(os.path.join(src, "examples", "example.py")).read()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.environ.get("AIMDO_DIR"), os.path.join(SOURCE, "python"),
                                                       env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    tmp = tempfile.mkdtemp(prefix="aimdo-example-")
    failed = False
    for impl in ("aimdo", "comem"):
        if a.only and impl != a.only:
            continue
        if impl == "aimdo" and not os.environ.get("AIMDO_DIR"):
            print("aimdo_example: AIMDO_DIR unset: comfy-aimdo itself not run")
            continue
        path = os.path.join(tmp, f"example_{impl}.py")
        with open(path, "w") as f:
            f.write(original if impl == "aimdo" else switched(original))
        out = run(path, env, os.path.join(a.logdir or tmp, f"example_{impl}.out"))
        runs = phases(out)
        print(f"== {impl}: " + " | ".join(" / ".join(shape(it) for it in run if it) for run in runs))
        if impl == "comem":
            bad = check(runs)
            for b in bad:
                print(f"   FAILED: {b}")
            failed = failed or bool(bad)
            if not bad:
                print("   behaves as aimdo documents: prefix populated, reused, tail streamed; model 2 displaces; "
                      "prioritize restores")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
