"""`comem calc` as a user meets it: units, round-tripping numbers, and refusals."""
import json
import re
import unittest

from comem_cli import run, run_json

GiB, MiB = 1024**3, 1024**2


class Units(unittest.TestCase):
    def test_units_equal_bytes(self):
        a = run_json("calc", "admission", "--weights", "6GiB", "--memory-required", "1024MiB")
        b = run_json("calc", "admission", "--weights", str(6 * GiB), "--memory-required", str(GiB))
        self.assertEqual(a, b)
        self.assertEqual(a["free_target"], 8579868262.400001)

    def test_fractional_and_spaced_units(self):
        out = run_json("calc", "admission", "--weights", "1.5 GiB", "--reserve", "0.3GiB")
        self.assertEqual(out["extra_mem"], (1024**3) * 0.8 + 0.3 * GiB)
        self.assertEqual(out["free_target"], 1.5 * GiB * 1.1 + out["extra_mem"])

    def test_case_insensitive_units_and_flag_equals(self):
        self.assertEqual(run_json("calc", "charge", "--residency=2gib", "--process-local")["charge"], 300 * MiB + 2 * GiB)

    def test_numbers_print_shortest_round_trip(self):
        p = run("calc", "admission", "--weights", "6GiB", "--memory-required", "1GiB")
        self.assertIn('"free_target":8579868262.400001', p.stdout)
        self.assertIn('"extra_mem":1493172224,', p.stdout)
        self.assertEqual(json.loads(p.stdout)["free_target"], 6442450944 * 1.1 + 1493172224)

    def test_pretty(self):
        p = run("calc", "reserve", "--pretty")
        self.assertEqual(p.returncode, 0)
        self.assertIn("\n", p.stdout.strip())
        self.assertEqual(json.loads(p.stdout)["reserve"], 419430400)


class Refusals(unittest.TestCase):
    def refused(self, *args, text):
        p = run(*args)
        self.assertEqual(p.returncode, 2, p.stdout)
        self.assertEqual(p.stdout, "")
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn(text, lines[0])

    def test_unknown_rule(self):
        self.refused("calc", "nope", text="unknown rule 'nope'")

    def test_unknown_flag(self):
        self.refused("calc", "reserve", "--bogus", "1", text="unknown flag '--bogus'")

    def test_negative_size(self):
        self.refused("calc", "charge", "--residency", "-5", text="must not be negative")

    def test_unparsable_size(self):
        self.refused("calc", "charge", "--residency", "lots", text="not a size")

    def test_decimal_unit_is_ambiguous(self):
        self.refused("calc", "admission", "--weights", "6GB", text="ambiguous unit")

    def test_unknown_unit(self):
        self.refused("calc", "admission", "--weights", "6 parsecs", text="unknown unit")

    def test_missing_required(self):
        self.refused("calc", "admission", text="missing required flag '--weights'")

    def test_missing_value(self):
        self.refused("calc", "admission", "--weights", text="needs a value")

    def test_flag_twice(self):
        self.refused("calc", "admission", "--weights", "1", "--weights", "2", text="given twice")

    def test_bad_state(self):
        self.refused("calc", "lowvram", "--free", "1GiB", "--mmr", "1GiB", "--vram-state", "huge", text="--vram-state")

    def test_bad_entry(self):
        self.refused("calc", "evict", "--required", "1", "--free", "0", "--entry", "size=1GiB,loaded=2GiB,refs=1",
                     text="exceeds size")
        self.refused("calc", "evict", "--required", "1", "--free", "0", "--entry", "loaded=1,refs=1", text="size=")
        self.refused("calc", "evict", "--required", "1", "--free", "0", "--entry", "size=1,colour=red", text="unknown field")

    def test_infinite_and_hex_refused(self):
        self.refused("calc", "charge", "--residency", "inf", text="not a size")
        self.refused("calc", "charge", "--residency", "0x10", text="not a size")

    def test_no_rule(self):
        p = run("calc")
        self.assertEqual(p.returncode, 2)
        self.assertIn("usage", p.stderr)


class Evict(unittest.TestCase):
    def test_v10_walkthrough(self):
        out = run_json("calc", "evict", "--required", "8579868262.400001", "--free", "6GiB",
                       "--entry", "size=300MiB,loaded=300MiB,refs=2", "--entry", "size=2GiB,loaded=2GiB,refs=2")
        self.assertEqual(out["order"], [0, 1])
        self.assertEqual([a["action"] for a in out["actions"]], ["detach", "partial"])
        self.assertEqual(out["actions"][1]["asked"], 1822844518.4000006)
        # partial frees ceil(asked); detach frees the entry's loaded bytes
        self.assertEqual(out["freed"], 300 * MiB + 1822844519)

    def test_dynamic_entries_are_skipped_for_dynamic_loads(self):
        out = run_json("calc", "evict", "--required", "4GiB", "--free", "1GiB", "--for-dynamic",
                       "--entry", "size=2GiB,loaded=2GiB,refs=1,dynamic", "--entry", "size=2GiB,loaded=2GiB,refs=1")
        self.assertEqual(out["required_after"], 2 * GiB)  # the dynamic resident counts as reclaimable
        self.assertEqual(out["actions"], [{"entry": 1, "action": "partial", "asked": 1 * GiB}])

    def test_no_smart_memory_detaches_everything(self):
        out = run_json("calc", "evict", "--required", "1", "--free", "100GiB", "--no-smart-memory",
                       "--entry", "size=1GiB,loaded=1GiB,refs=1", "--entry", "size=1GiB,loaded=0,refs=1")
        self.assertEqual([a["action"] for a in out["actions"]], ["detach", "detach"])
        self.assertEqual(out["actions"][0]["asked"], 1e32)


class ComfyVersions(unittest.TestCase):
    """--comfyui picks the snapshot's rule where it differs from the current one (docs/conformance.md)."""

    def test_lowvram_floor_of_the_snapshot(self):
        args = ("calc", "lowvram", "--free", "2GiB", "--mmr", "3GiB", "--vram-state", "low")
        self.assertEqual(run_json(*args), run_json(*args, "--comfyui", "current"))
        self.assertEqual((run_json(*args)["kind"], run_json(*args)["budget"]), ("nothing", 0.1))
        old = run_json(*args, "--comfyui", "a125cd84")
        self.assertEqual((old["kind"], old["budget"]), ("bytes", 128 * MiB))  # its floor: 128 MiB even when nothing fits

    def test_free_memory_acts_on_nothing_left_to_free_in_the_snapshot(self):
        args = ("calc", "evict", "--required", "2GiB", "--free", "2GiB", "--entry", "size=1GiB,loaded=1GiB")
        self.assertEqual(run_json(*args)["actions"], [])
        self.assertEqual(run_json(*args, "--comfyui", "a125cd84")["actions"],
                         [{"entry": 0, "action": "partial", "asked": 0}])

    def test_pin_rules_of_v039(self):
        old = run_json("calc", "pin-tiers", "--evict-active")["tiers"]
        new = run_json("calc", "pin-tiers", "--evict-active", "--comfyui", "v0.39")["tiers"]
        self.assertEqual(len(old), 5)
        self.assertEqual(len(new), 9)
        self.assertEqual(new[0], {"subsets": ["weights-fast", "patches-fast"], "current_prompt": False,
                                  "active": False, "unregister": False})
        reg = run_json("calc", "pin-tiers", "--registrations", "--comfyui", "v0.39")["tiers"]
        self.assertEqual([(t["subsets"][0], t["unregister"]) for t in reg],
                         [("weights-fast", False), ("weights", True)] * 2)
        # --fast-disk: 783545f6 compares with the ceiling, v0.39 reads RAM whatever the disk
        args = ("calc", "pin-budget", "--size", "1GiB", "--available", "2GiB", "--headroom", "0", "--fast-disk",
                "--total-pinned", "10GiB", "--max-pinned", "20GiB")
        self.assertEqual(run_json(*args)["shortfall"], -9 * GiB)
        self.assertEqual(run_json(*args, "--comfyui", "v0.39")["shortfall"], 1 * GiB)
        ceiling = ("calc", "pinned-max", "--ram", "16GiB", "--swap", "8GiB", "--cgroup")
        self.assertEqual(run_json(*ceiling)["max_pinned"], 8 * GiB)
        self.assertEqual(run_json(*ceiling, "--comfyui", "v0.39")["max_pinned"], 16 * GiB * 0.40)

    def test_refusals(self):
        p = run("calc", "lowvram", "--free", "2GiB", "--mmr", "3GiB", "--comfyui", "2024")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--comfyui: '2024' is not one of current, 783545f6, v0.39, a125cd84", p.stderr)
        p = run("calc", "pin-tiers", "--comfyui", "a125cd84")
        self.assertEqual(p.returncode, 2)
        self.assertIn("a125cd84 has no pinned-RAM budget", p.stderr)
        p = run("calc", "evict", "--required", "2GiB", "--free", "1GiB", "--for-dynamic", "--comfyui", "a125cd84",
                "--entry", "size=1GiB,loaded=1GiB")
        self.assertEqual(p.returncode, 2)
        self.assertIn("a125cd84 has no dynamic loads", p.stderr)


if __name__ == "__main__":
    unittest.main()


# One call per rule, with values that take the rule's interesting branch.
EXPLAINED = {
    "reserve": ["--windows", "--total-vram", "24GiB"],
    "admission": ["--weights", "4GiB", "--memory-required", "1GiB", "--free", "3GiB"],
    "lowvram": ["--free", "6GiB", "--loaded", "1GiB", "--mmr", "2GiB"],
    "evict": ["--required", "3GiB", "--free", "1GiB", "--entry", "size=2GiB,loaded=2GiB,refs=1",
              "--entry", "size=1GiB,loaded=512MiB,refs=2"],
    "pinned-max": ["--ram", "64GiB", "--swap", "8GiB", "--size", "1GiB"],
    "pin-budget": ["--size", "1GiB", "--available", "3GiB", "--headroom", "6GiB"],
    "pin-registerable": ["--total-pinned", "10GiB", "--size", "1GiB", "--max-pinned", "10GiB"],
    "cache-headroom": ["--total-ram-mib", "65536"],
    "ram-admission": ["--weights", "2GiB", "--working", "512MiB", "--total-ram", "32GiB"],
    "cgroup-clamp": ["--host-total", "128GiB", "--host-available", "100GiB", "--limit", "24GiB", "--usage", "8GiB"],
    "pin-tiers": ["--registrations", "--evict-active"],
    "charge": ["--residency", "2GiB", "--process-local"],
    "total-reserve": ["--base", "400MiB", "--charge", "1GiB", "--charge", "2GiB", "--device-total", "8GiB"],
    "next-reserve": ["--current", "2GiB", "--proposed", "1GiB"],
    "ask-target": ["--weights", "4GiB", "--min-inference", "1GiB", "--extra-reserved", "400MiB",
                   "--want-inference", "1GiB"],
    "pager-headroom": ["--published", "2GiB", "--base", "400MiB"],
    "requester-reserve": ["--published", "2GiB", "--own-charge", "512MiB"],
    "cast-forward": ["--largest-tensor", "64MiB", "--streams", "2"],
}


def numbers(result):
    """Every figure calc's JSON answer carries, as its JSON text (booleans and lists of indices left out)."""
    out = []
    for k, v in result.items():
        if k in ("schema", "order", "unloaded") or isinstance(v, bool) or v is None:
            continue
        if isinstance(v, (int, float)):
            out.append((k, json.dumps(v)))
        elif isinstance(v, list):
            out += [(f"{k}.asked", json.dumps(a["asked"])) for a in v if isinstance(a, dict) and "asked" in a]
    return out


class Explain(unittest.TestCase):
    def test_every_rule_has_an_explanation(self):
        listed = re.findall(r"^  (\S+) ", run("calc", "--help").stdout, re.M)
        self.assertEqual(sorted(listed), sorted(EXPLAINED))

    def test_each_names_its_source_and_ends_in_calcs_own_figures(self):
        for rule, args in EXPLAINED.items():
            with self.subTest(rule=rule):
                result = run_json("calc", rule, *args)
                p = run("calc", rule, *args, "--explain")
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(p.stderr, "")
                lines = p.stdout.splitlines()
                self.assertTrue(lines[0].startswith(f"{rule}: "), lines[0])
                follows = [x for x in lines if x.startswith("follows: ")]
                self.assertEqual(len(follows), 1, p.stdout)
                # the function it follows, and which release: a ComfyUI snapshot or a comfy-env commit
                self.assertRegex(follows[0], r"\((ComfyUI (783545f6|a125cd84)|comfy-env [0-9a-f]{7})")
                self.assertTrue(any(x.startswith("formula: ") for x in lines), p.stdout)
                values = "\n".join(lines[next(i for i, x in enumerate(lines) if x.startswith("values: ")):])
                for key, text in numbers(result):
                    self.assertRegex(values, rf"(?<![\d.]){re.escape(text)}(?![\d.])",
                                     f"{rule}: {key}={text} is not in the values it explains")

    def test_the_era_changes_the_words_with_the_rule(self):
        now = run("calc", "lowvram", "--free", "6GiB", "--mmr", "2GiB", "--explain").stdout
        old = run("calc", "lowvram", "--free", "6GiB", "--mmr", "2GiB", "--comfyui", "a125cd84", "--explain").stdout
        self.assertIn("ComfyUI 783545f6", now)
        self.assertIn("ComfyUI a125cd84", old)
        self.assertIn("128 MiB", old)
        self.assertNotIn("128 MiB", now)

    def test_explain_is_text_so_not_with_pretty(self):
        p = run("calc", "reserve", "--pretty", "--explain")
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stdout, "")
        self.assertIn("do not go together", p.stderr)
