"""Every conformance vector whose rule `comem calc` has, run through the CLI, bit-exact.

The expected values are the same ones tests/unit/test_vectors.c checks against the
C functions; this runs them through the flag parsing and JSON printing as well.
"""
import json
import os
import re
import unittest

from comem_cli import SOURCE_DIR, run, run_json

VECTOR_FILES = ("comfyui.json", "comfy_env.json", "derived.json")


def calc_rules():
    help_text = run("calc", "--help", check=True).stdout
    return set(re.findall(r"^  ([a-z-]+) ", help_text, re.M))


def num_text(v):
    return str(v) if isinstance(v, int) else repr(float(v))


def to_argv(rule, inp):
    argv = ["calc", rule]
    for key, value in inp.items():
        if value is True:
            argv.append("--" + key)
        elif value is False:
            continue
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):  # evict entries
                    parts = [f"size={item['size']}", f"loaded={item['loaded']}", f"refs={item['refs']}"]
                    parts += [k for k in ("dynamic", "keep", "dead") if item.get(k)]
                    argv += ["--" + key, ",".join(parts)]
                else:
                    argv += ["--" + key, num_text(item)]
        elif isinstance(value, str):
            argv += ["--" + key, value]
        else:
            argv += ["--" + key, num_text(value)]
    return argv


def same(want, got):
    """Exact equality: numbers as Python numbers (int == float compares exactly)."""
    if isinstance(want, bool) or isinstance(want, str):
        return want == got and type(want) is type(got)
    if isinstance(want, (int, float)):
        return isinstance(got, (int, float)) and not isinstance(got, bool) and float(want) == float(got)
    if isinstance(want, list):
        return isinstance(got, list) and len(want) == len(got) and all(same(w, g) for w, g in zip(want, got))
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and same(v, got[k]) for k, v in want.items())
    return False


class CalcVectors(unittest.TestCase):
    def test_every_vector_through_the_cli(self):
        rules = calc_rules()
        self.assertGreaterEqual(len(rules), 10)
        checked, failures = 0, []
        for name in VECTOR_FILES:
            with open(os.path.join(SOURCE_DIR, "tests", "vectors", name)) as f:
                cases = json.load(f)
            for case in cases:
                if case["rule"] not in rules or case.get("cli") is False:
                    continue
                got = run_json(*to_argv(case["rule"], case["input"])[0:])
                for key, want in case["expect"].items():
                    if key not in got or not same(want, got[key]):
                        failures.append(f"{case['id']}: {key}: want {want!r} got {got.get(key)!r}")
                checked += 1
        self.assertEqual(failures, [])
        self.assertGreaterEqual(checked, 300)

    def test_same_checks_can_fail(self):
        self.assertFalse(same(8579868262.4, 8579868262.400001))
        self.assertFalse(same([1, 0, 2], [1, 2, 0]))
        self.assertTrue(same(419430400, 419430400.0))


if __name__ == "__main__":
    unittest.main()
