"""Every JSON output carries "schema": 1 and exactly the keys docs/json.md lists, null where unknown.

The shapes below are docs/json.md written as data: a key the code adds without documenting it
fails here as surely as a documented key that goes missing. A type ending in "?" may be null.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

from comem_cli import BIN_DIR, GiB, SOURCE_DIR, Machine, run

INT, NUM, STR, BOOL = "int", "num", "str", "bool"

ENTRY = {"id": STR, "name": STR, "size": INT, "resident": INT, "paged": BOOL, "refs": INT}
HOLDER = {"id": STR, "name": STR, "kind": STR, "app_pid": INT + "?", "app_use": INT + "?", "answers": [STR],
          "busy": BOOL, "idle_s": NUM + "?",
          "pinned": INT + "?", "overhead": INT + "?", "receipts_over": INT, "receipts_contradicted": INT, "unanswered": BOOL, "resident": INT, "entries": [ENTRY]}
PROCESS = {"session": STR, "pid": INT, "name": STR, "role": STR, "busy": BOOL, "prompt": STR + "?",
           "context_floor": INT, "resident": INT, "pinned": INT, "holders": [HOLDER],
           "ordinal": INT + "?", "context": INT, "overhead": INT, "unregistered": INT}
GRANT = {"id": STR, "session": STR, "holder": STR + "?", "bytes": INT, "expires_in_s": NUM}
DEVICE = {"index": INT, "uuid": STR, "name": STR, "scope": STR, "process_scope": STR, "capacity": INT,
          "free": INT + "?", "used": INT + "?", "driver_reserved": INT + "?", "overcommit": INT + "?",
          "reserve": {"base": INT, "published": INT, "host_told": INT + "?"}, "resident": INT, "context_floors": INT, "granted": INT,
          "attributed": INT, "unattributed": INT + "?", "processes": [PROCESS], "grants": [GRANT],
          "other_processes": ([{"pid": INT, "bytes": INT}], "?"),
          "unified": BOOL, "contexts": INT, "overhead": INT, "unregistered": INT,
          "spill": {"overcommit": INT, "events": INT, "peak": INT + "?", "pid": INT + "?", "process": STR + "?",
                    "pushed_by": INT + "?"},
          "booked": INT, "stock": INT, "booking_limit": INT,
          "host_ram": ({"budget": INT + "?", "mem_total": INT, "mem_available": INT, "cgroup_limit": INT + "?",
                        "cgroup_usage": INT + "?", "cgroup_dir": STR + "?", "asks": INT, "bytes_asked": INT,
                        "bytes_freed": INT}, "?")}
STATUS = {
    "schema": INT,
    "coordinator": {"pid": INT, "socket": STR, "source": STR, "card_spec": STR + "?", "uptime_s": NUM,
                    "started_by": STR + "?", "sessions": INT, "checking": BOOL,
                    "checks": INT, "violations": INT, "asks_in_flight": INT, "requests_in_flight": INT,
                    "booking_area": STR, "bookings_reconciled": INT, "booking_strikes": INT},
    "counters": {"admissions": INT, "refusals": INT, "asks": INT, "asks_busy": INT, "bytes_asked": INT,
                 "bytes_freed": INT, "idle_releases": INT, "sessions_ended": INT, "sessions_died": INT,
                 "admission_latency": {"bounds_s": [NUM], "counts": [INT], "count": INT, "sum_s": NUM},
                 "spill_events": INT},
    "pins": {"total": INT, "max": INT},
    "devices": [DEVICE],
    "wddm": [{"luid": STR, "device": INT + "?", "usage": INT,
              "processes": [{"session": STR, "pid": INT, "name": STR, "budget": INT, "usage": INT,
                             "device": INT + "?", "beyond_ledger": INT + "?", "age_s": NUM}]}],
    "warnings": [STR],
}
DEVICES = {"schema": INT,
           "devices": [{"index": INT, "name": STR, "uuid": STR, "source": STR, "scope": STR, "total": INT, "used": INT,
                        "free": INT, "reserved": INT, "overcommit": INT, "pci_bus_id": STR + "?",
                        "pcie_gen": INT + "?", "pcie_width": INT + "?",
                        "processes": ([{"pid": INT, "bytes": INT}], "?")}],
           "note": STR + "?",
           "host": ({"total": INT, "available": INT, "swap": INT, "disk_swap": INT, "cgroup_limit": INT + "?"}, "?")}
RELEASE_ASK = {"entry": STR, "name": STR, "holder": STR, "process": STR, "pid": INT, "device": INT,
               "asked": INT + "?", "status": STR, "freed": INT, "resident_after": INT}
RELEASE = {"schema": INT,
           "target": {"holder": STR + "?", "pid": INT + "?", "process": STR + "?", "entry": STR + "?", "all": BOOL,
                      "device": INT + "?"},
           "asked": INT + "?", "freed": INT, "answered": INT, "not_answering": INT, "asks": [RELEASE_ASK],
           "matched": BOOL}
SIMULATE = {"schema": INT, "scenario": {"id": STR, "title": STR, "file": STR, "semantics": STR, "cards": INT,
                                        "card_bytes": INT, "speed": NUM,
                                        "processes": [{"name": STR, "role": STR, "card": INT}]},
            "runs": [{"policy": STR, "ran": BOOL, "wall_s": NUM, "metrics": dict, "expectations": [
                {"line": INT, "text": STR, "gap": BOOL, "ok": BOOL, "value": NUM, "against": NUM}],
                "events": [{"t": NUM, "process": STR, "kind": INT, "model": STR, "a": INT, "b": INT}],
                "samples": [{"t": NUM, "used": [INT], "process_bytes": [INT], "pinned": [INT]}]}]}
# comem calc RULE: "schema" and "rule", then the rule's own keys, the same whatever flags are given.
CALC = {
    "reserve": ["reserve", "minimum_inference"],
    "admission": ["extra_mem", "free_target", "minimum_memory_required", "minimum_inference", "to_free",
                  "second_pass"],
    "lowvram": ["kind", "budget"],
    "evict": ["order", "actions", "freed", "free_after", "unloaded", "required_after"],
    "pinned-max": ["max_pinned", "host_buffer"],
    "pin-budget": ["shortfall", "ask", "passes_without_eviction"],
    "pin-registerable": ["shortfall", "target", "passes_without_eviction", "refused"],
    "cache-headroom": ["active", "inactive", "active_gb", "inactive_gb"],
    "ram-admission": ["reserve", "need"],
    "cgroup-clamp": ["limited", "total", "available"],
    "pin-tiers": ["tiers"],
    "charge": ["charge"],
    "total-reserve": ["total"],
    "next-reserve": ["reserve"],
    "ask-target": ["need"],
    "pager-headroom": ["headroom"],
    "requester-reserve": ["reserve"],
    "cast-forward": ["want_inference"],
}


def check(case, value, shape, path="$"):
    """Fails case unless value has exactly shape (see the module's docstring)."""
    nullable = False
    if isinstance(shape, tuple):
        shape, nullable = shape[0], True
    elif isinstance(shape, str) and shape.endswith("?"):
        shape, nullable = shape[:-1], True
    if value is None:
        case.assertTrue(nullable, f"{path} is null, and docs/json.md does not allow it")
        return
    if isinstance(shape, dict):
        case.assertIsInstance(value, dict, path)
        case.assertEqual(list(value), list(shape), f"{path}: keys differ from docs/json.md")
        for k, s in shape.items():
            check(case, value[k], s, f"{path}.{k}")
    elif isinstance(shape, list):
        case.assertIsInstance(value, list, path)
        for i, v in enumerate(value):
            check(case, v, shape[0], f"{path}[{i}]")
    elif shape is dict:
        case.assertIsInstance(value, dict, path)
    elif shape == INT:
        case.assertTrue(isinstance(value, int) and not isinstance(value, bool), f"{path}: {value!r} is not an integer")
    elif shape == NUM:
        case.assertTrue(isinstance(value, (int, float)) and not isinstance(value, bool), f"{path}: {value!r}")
    elif shape == STR:
        case.assertIsInstance(value, str, path)
    elif shape == BOOL:
        case.assertIsInstance(value, bool, path)
    else:
        raise AssertionError(f"bad shape {shape!r}")


def json_of(p):
    if p.returncode != 0:
        raise AssertionError(f"exited {p.returncode}: {p.stderr}")
    return json.loads(p.stdout)


class Schemas(unittest.TestCase):
    def test_status_release_and_metrics_json(self):
        with Machine("sim:8GiB") as m:
            empty = json_of(m.comem("status", "--json"))  # nobody joined yet: the reader is not counted
            self.assertEqual((empty["schema"], empty["coordinator"]["sessions"]), (1, 0))
            self.assertEqual([d["processes"] for d in empty["devices"]], [[] for _ in empty["devices"]])
            self.assertIn(", 0 session(s)", m.comem("status").stdout.splitlines()[0])
            check(self, json_of(m.comem("status", "--json")), STATUS)
            w = m.worker("w1", GiB)
            m.worker("w2", GiB)
            m.busy(w)  # a busy process: idle_s is null, and a prompt is named
            grant = self.open_grant(m)
            st = json_of(m.comem("--json", "status"))  # the global flag before the command
            check(self, st, STATUS)
            dev = st["devices"][0]
            self.assertEqual(len([p for p in dev["processes"] if p["holders"]]), 2 + (grant is not None))
            if grant is not None:
                self.assertEqual([g["holder"] is not None for g in dev["grants"]], [True])
            check(self, json_of(m.comem("metrics", "--json")), STATUS)
            out = json_of(m.comem("release", "--all", "--bytes", "512MiB", "--json"))
            check(self, out, RELEASE)
            self.assertEqual(sorted(a["status"] for a in out["asks"]), ["busy", "ok"])  # w1 is busy: it keeps its bytes
            p = m.comem("release", "--pid", str(w.pid), "--json")
            self.assertEqual(p.returncode, 1)  # nothing came back: a failure, with its receipt in JSON all the same
            out = json.loads(p.stdout)
            check(self, out, RELEASE)
            self.assertEqual(out["asks"][0]["status"], "busy")
            # a name the ledger does not hold: one line on stderr, and still a receipt on stdout
            p = m.comem("release", "--process", "nobody", "--json")
            self.assertEqual(p.returncode, 1)
            self.assertEqual(p.stderr.strip().splitlines(), ["comem release: no process 'nobody' in the ledger"])
            out = json.loads(p.stdout)
            check(self, out, RELEASE)
            self.assertEqual((out["matched"], out["asks"], out["freed"], out["target"]["process"]),
                             (False, [], 0, "nobody"))

    def open_grant(self, m):
        """An admission whose grant stays open, from a Python client; None when the binding cannot load here."""
        lib = os.path.join(os.path.dirname(BIN_DIR), "lib", "libcomem.so")
        code = ("import sys, time, comem; c = comem.Client('granted', socket=sys.argv[1], require_coordinator=True); "
                "h = c.add_holder('models', on_release=lambda a: 0); g = c.admit(1 << 28, holder=h); "
                "print('granted', flush=True); sys.stdin.read()")
        env = dict(m.env, COMEM_LIB=lib, PYTHONPATH=os.path.join(SOURCE_DIR, "python"))
        p = subprocess.Popen([sys.executable, "-c", code, m.socket], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline().strip()
        m.workers.append(p)
        if line != "granted":
            p.kill()
            print(f"(no open grant: the binding did not load here: {p.stderr.read().strip()[-200:]})")
            return None
        return p

    def test_devices(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, COMEM_RUNTIME_DIR=d, COMEM_DEVICE="sim:8GiB", COMEM_LOG="warn")
            out = json_of(run("devices", "--json", env=env))
            check(self, out, DEVICES)
            self.assertEqual(out["devices"][0]["pci_bus_id"], None)  # a simulated card has no bus

    def test_calc_every_rule(self):
        help_text = run("calc", "--help").stdout
        rules = re.findall(r"^  (\S+)\s+.*\n    (.*)$", help_text, re.M)
        self.assertEqual(sorted(r for r, _ in rules), sorted(CALC))
        for rule, flags in rules:
            args = []
            for flag, kind in re.findall(r"(?<!\[)--(\S+) (SIZE|N|TEXT)(?:\.\.\.)?(?!\])", flags):
                args += [f"--{flag}", {"SIZE": "1GiB", "N": "1", "TEXT": "size=1GiB"}[kind]]
            out = json_of(run("calc", rule, *args))
            self.assertEqual(list(out), ["schema", "rule", *CALC[rule]], rule)
            self.assertEqual((out["schema"], out["rule"]), (1, rule))
        # optional flags fill values in; they never add or remove keys
        self.assertEqual(list(json_of(run("calc", "admission", "--weights", "1GiB", "--free", "2GiB"))),
                         ["schema", "rule", *CALC["admission"]])
        self.assertEqual(list(json_of(run("calc", "pinned-max", "--ram", "8GiB", "--size", "1GiB"))),
                         ["schema", "rule", *CALC["pinned-max"]])
        self.assertIsNotNone(json_of(run("calc", "pinned-max", "--ram", "8GiB", "--size", "1GiB"))["host_buffer"])

    def test_simulate(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "out.json")
            p = run("simulate", os.path.join(SOURCE_DIR, "scenarios", "F19-cli-release.scn"), "--policy", "comem",
                    "--json", path, "--timeline", "none", timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            with open(path) as f:
                check(self, json.load(f), SIMULATE)


if __name__ == "__main__":
    unittest.main()
