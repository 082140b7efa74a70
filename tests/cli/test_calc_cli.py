"""`comem calc` as a user meets it: units, round-tripping numbers, and refusals."""
import json
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

    def test_refusals(self):
        p = run("calc", "lowvram", "--free", "2GiB", "--mmr", "3GiB", "--comfyui", "2024")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--comfyui: '2024' is not one of current, a125cd84", p.stderr)
        p = run("calc", "evict", "--required", "2GiB", "--free", "1GiB", "--for-dynamic", "--comfyui", "a125cd84",
                "--entry", "size=1GiB,loaded=1GiB")
        self.assertEqual(p.returncode, 2)
        self.assertIn("a125cd84 has no dynamic loads", p.stderr)


if __name__ == "__main__":
    unittest.main()
