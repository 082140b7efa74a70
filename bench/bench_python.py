#!/usr/bin/env python3
"""What the Python binding adds to the C library, measured side by side against one real comemd.

    python3 bench/bench_python.py [--rounds 5] [--n 2000]

Rounds interleave the C loop (build/bin/bench_admit, the library called from C) and
the same loop through the binding (comem.Client.admit, then Grant.cancel), on a
simulated card: admissions that fit (booked in shared memory by the booking
area's fast path, docs/booking.md: no round trip), admissions decided locally
(no coordinator: the difference is the binding's own cost), and shared-memory
view reads; then the comfy-env shape it replaces (bench/pickle_pingpong.py, a
Python socket + pickle exchange, same CPU). Medians per operation, a table,
then name=value lines. Figures, not assertions.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SOURCE, "tests", "python"))
import support  # noqa: E402

import comem  # noqa: E402


def c_loop(machine, n, view=False, socket=None, mode=None):
    args = [os.path.join(support.BIN_DIR, "bench_admit"), socket or machine.socket, str(n)]
    if view or mode:
        args.append("view" if view else mode)
    out = subprocess.run(args, env=machine.env, capture_output=True, text=True, check=True).stdout
    fields = dict(kv.split("=") for kv in out.split())
    return int(fields["median_ns"]) / 1000.0


def py_loop(client, view, n, do_view=False):
    times = []
    for _ in range(n):
        s = time.perf_counter_ns()
        if do_view:
            view.read(0)
        else:
            client.admit(1 << 20).cancel()
        times.append(time.perf_counter_ns() - s)
    return statistics.median(times) / 1000.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=2000)
    a = ap.parse_args()
    with support.Machine("sim:24GiB") as m, comem.Client("bench-py", socket=m.socket,
                                                           require_coordinator=True) as c, comem.View(m.socket) as v:
        nowhere = os.path.join(m.dir, "no-coordinator.sock")
        local = comem.Client("bench-py-local", socket=nowhere)
        py_loop(c, v, 200)  # warm
        py_loop(local, v, 200)
        rows = {"c_admit": [], "py_admit": [], "c_local": [], "py_local": [], "c_view": [], "py_view": []}
        for _ in range(a.rounds):
            rows["c_admit"].append(c_loop(m, a.n))
            rows["py_admit"].append(py_loop(c, v, a.n))
            rows["c_local"].append(c_loop(m, a.n * 10, socket=nowhere, mode="local"))
            rows["py_local"].append(py_loop(local, v, a.n * 10))
            rows["c_view"].append(c_loop(m, a.n * 10, view=True))
            rows["py_view"].append(py_loop(c, v, a.n * 10, do_view=True))
        local.close()
    med = {k: statistics.median(x) for k, x in rows.items()}
    pickle_us = float("nan")
    out = subprocess.run([sys.executable, os.path.join(HERE, "pickle_pingpong.py"), "--placement", "same",
                          "--n", str(a.n * 5)], capture_output=True, text=True).stdout
    for word in out.split():
        if word.startswith("p50="):
            pickle_us = float(word[4:])
    print(f"{'operation':<44}{'C library':>12}{'Python':>12}{'binding adds':>14}")
    print(f"{'admission that fits (admit + cancel), us':<44}{med['c_admit']:>12.2f}{med['py_admit']:>12.2f}"
          f"{med['py_admit'] - med['c_admit']:>14.2f}")
    print(f"{'admission decided locally, us':<44}{med['c_local']:>12.2f}{med['py_local']:>12.2f}"
          f"{med['py_local'] - med['c_local']:>14.2f}")
    print(f"{'shared-memory view read, us':<44}{med['c_view']:>12.3f}{med['py_view']:>12.3f}"
          f"{med['py_view'] - med['c_view']:>14.3f}")
    print(f"(medians of {a.rounds} interleaved rounds of {a.n} admissions / {a.n * 10} view reads)")
    print(f"a Python socket + pickle exchange (comfy-env's shape, same CPU): {pickle_us:.2f} us, "
          f"{pickle_us / med['py_admit']:.1f}x an admission through the binding")
    print(f"c_admit_us={med['c_admit']:.2f}")
    print(f"py_admit_us={med['py_admit']:.2f}")
    print(f"binding_over_c_admit_us={med['py_admit'] - med['c_admit']:.2f}")
    print(f"c_local_admit_us={med['c_local']:.2f}")
    print(f"py_local_admit_us={med['py_local']:.2f}")
    print(f"binding_cost_per_admission_us={med['py_local'] - med['c_local']:.2f}")
    print(f"c_view_us={med['c_view']:.3f}")
    print(f"py_view_us={med['py_view']:.3f}")
    print(f"binding_over_c_view_us={med['py_view'] - med['c_view']:.3f}")
    print(f"python_exchange_us={pickle_us:.2f}")
    print(f"py_fast_admit_vs_python={pickle_us / med['py_admit']:.1f}")


if __name__ == "__main__":
    main()
