"""`comem simulate`: malformed scenarios are refused with file:line before anything runs; a run's
expectations decide the exit status; --json and --svg write what they promise; `comem release` refuses
bad arguments."""
import glob
import json
import os
import tempfile
import unittest

from comem_cli import SOURCE_DIR, run

GOOD = """\
scenario tiny "a worker loads and runs"
speed 200
card 8GiB
worker w
  model m 2GiB
  load m
  run 2
expect failed == 0
"""


class Simulate(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    @staticmethod
    def read(path):
        with open(path) as f:
            return f.read()

    def test_malformed_scenarios_name_file_and_line_and_run_nothing(self):
        cases = [
            ("card 8GiB\nworker w\n  load m\n", 3, "has no model 'm'"),
            ("card 8GiB\nbogus 1\n", 2, "unknown statement 'bogus'"),
            ("card 8GB\n", 1, "ambiguous unit"),
            ("card 8GiB\nload m\n", 2, "must follow a process"),
            ("card 8GiB\nworker w\n  model m 1GiB\n  run 1 m\nexpect nothing == 0\n", 5, "neither a figure"),
            ("card 8GiB\nworker w\n  release ghost\n", 3, "no process named 'ghost'"),
            ("worker w\n  idle 1\n", 2, "no 'card' line"),
            ("card 8GiB\nworker w x200\n", 2, "whole number from 1 to"),
            ("card 8GiB\nworker w\n  model m 1GiB\n  load m cancel 2\n", 4, "cancel"),
            ("card 8GiB\napp a\n  load m\n", 3, "an app"),
            ("card 8GiB\nworker w\n  idle 1\nexpect resident == 0\n", 4, "needs a process"),
            ('card 8GiB\nworker w\n  idle 1\nexpect-gap failed == 0\n', 4, "reason in quotes"),
            ("card 8GiB\nworker w\n  idle 1\nexpect free after line 9 == 0\n", 4, "no step is written on line 9"),
            ("card 8GiB\nworker w x2\n  idle 1\nexpect free after line 3 == 0\n", 4, "replicated"),
            ("card 8GiB\nworker w\n  idle 1\nexpect failed before line 3 == 0\n", 4, "not a reading"),
            ("card 8GiB\nworker w\n  idle 1\nexpect free at 1 after line 3 == 0\n", 4, "not both"),
            ("card 8GiB\nworker w\n  idle 1 until done\n", 3, "until released"),
            ("card 8GiB\napp a\n  idle 1 until released\n", 3, "holds no models"),
            ("card 8GiB\nram 8GiB ledger bogus\nworker w\n  idle 1\n", 2, "unknown or incomplete 'bogus'"),
            ("card 8GiB\napp llm\n  model m 1GiB paged\n", 3, "holds whole models"),
            ("card 8GiB\napp llm\n  idle 1\n  model m 1GiB\n", 4, "models come before its steps"),
            ("card 8GiB\napp llm\n  unload m\n", 3, "declare its models first"),
            ("card 8GiB\napp llm\n  pin 1GiB\n", 3, "an app (an unregistered program) cannot 'pin'"),
            ("card 8GiB\napp browser\n  foreign 1GiB\nworker w\n  release browser\n", 5, "no models"),
        ]
        for i, (text, line, what) in enumerate(cases):
            path = self.write(f"bad{i}.scn", text)
            p = run("simulate", path)
            self.assertEqual(p.returncode, 2, (text, p.stdout, p.stderr))
            self.assertIn(f"{path}:{line}: ", p.stderr, text)
            self.assertIn(what, p.stderr, text)
            self.assertEqual(p.stdout, "", "nothing runs for a malformed scenario")

    def test_every_bundled_scenario_parses(self):
        files = sorted(glob.glob(os.path.join(SOURCE_DIR, "scenarios", "*.scn")))
        self.assertGreaterEqual(len(files), 22)  # F1-F21 and the demo
        for f in files:
            p = run("simulate", f, "--check")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(": ok", p.stdout)

    def test_a_run_asserts_comem_and_writes_json_and_svg(self):
        good = self.write("good.scn", GOOD)
        js, svg = os.path.join(self.dir.name, "o.json"), os.path.join(self.dir.name, "o.svg")
        p = run("simulate", good, "--json", js, "--svg", svg, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        for policy in ("comem", "comfy-env", "uncoordinated"):
            self.assertIn(policy, p.stdout)
        self.assertIn("failed allocations / OOMs", p.stdout)
        d = json.load(open(js))
        self.assertEqual([r["policy"] for r in d["runs"]], ["comem", "comfy-env", "uncoordinated"])
        for r in d["runs"]:
            self.assertTrue(r["ran"])
            self.assertEqual(r["metrics"]["failed"], 0)
            self.assertTrue(r["expectations"][0]["ok"])
            self.assertTrue(any(e["process"] == "w" for e in r["events"]))
            self.assertGreater(len(r["samples"]), 4)
            # the worker's 2 GiB and its context were on the card while it ran
            self.assertTrue(any(s["process_bytes"][0] >= 2 * 2**30 for s in r["samples"]))
        text = open(svg).read()
        self.assertTrue(text.startswith("<svg") and text.rstrip().endswith("</svg>"))
        self.assertIn("card 0: 8 GiB, linux", text)

    def test_a_failed_expectation_under_comem_fails_the_run(self):
        bad = self.write("fails.scn", GOOD.replace("expect failed == 0", "expect failed == 1"))
        p = run("simulate", bad, "--policy", "comem", timeout=60)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("comem=FAIL", p.stdout)
        gap = self.write("gap.scn", GOOD.replace("expect failed == 0", 'expect-gap failed == 1 "not yet"'))
        p = run("simulate", gap, "--policy", "comem", timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)  # a known gap is reported, not asserted
        self.assertIn("a known gap, not asserted: not yet", p.stdout)

    def test_the_summary_explains_itself_and_shows_what_the_scenario_can_show(self):
        # Issue 41 item 9: "time over budget" is said, figures are said to vary, a recorded policy's miss does not
        # read like a test failure, and a linux scenario without pins has no WDDM or pinned rows, in the text or
        # the picture.
        text = GOOD.replace("expect failed == 0", 'expect failed == 0\nexpect-gap evictions == 1 "nothing evicts"')
        path, svg = self.write("words.scn", text), os.path.join(self.dir.name, "words.svg")
        p = run("simulate", path, "--svg", svg, "--timeline", "none", timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = p.stdout
        self.assertIn("time over budget: scenario seconds during which some card had less than 256M free", out)
        self.assertIn("Figures vary a little from run to run", out)
        self.assertIn("comem=pass comfy-env=holds uncoordinated=holds", out)
        self.assertIn("comem=FAIL comfy-env=does not hold (0) uncoordinated=does not hold (0)", out)  # the gap
        self.assertNotIn("comfy-env=FAIL", out)
        self.assertNotIn("uncoordinated=FAIL", out)
        for row in ("spilled past WDDM", "pinned peak", "pinned over budget"):
            self.assertNotIn(row, out)
        picture = self.read(svg)
        for part in ("pinned host RAM", "spilled (peak)", "WDDM spill", "pinned over budget"):
            self.assertNotIn(part, picture)
        self.assertIn("over budget", picture)

        # On a WDDM card the spill is shown, and where something is pinned the pinned rows and chart are.
        p = run("simulate", path, "--semantics", "wddm", "--policy", "comem", "--svg", svg, "--timeline", "none",
                timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("spilled past WDDM (peak)", p.stdout)
        self.assertIn("spilled (peak)", self.read(svg))
        pins = os.path.join(SOURCE_DIR, "scenarios", "F09-pins.scn")
        p = run("simulate", pins, "--policy", "comem", "--svg", svg, "--timeline", "none", timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("pinned peak", p.stdout)
        self.assertIn("pinned host RAM (dotted: the machine's pin budget)", self.read(svg))

    def test_readings_before_and_after_a_step_are_taken_by_the_process_in_order(self):
        # line 6 loads 2 GiB: nothing of it is there as the step begins, all of it as it ends, and a
        # step after the kill never comes (its reading is not taken: the expectation fails, JSON null)
        text = """\
scenario marks "readings at steps"
speed 200
card 8GiB
worker w
  model m 2GiB
  load m
  idle 1
  kill
  idle 1
expect resident w before line 6 == 0
expect resident w after line 6 == 2GiB
expect used after line 6 >= used before line 6 + 2GiB
expect free after line 7 == free before line 7
expect resident w after line 9 == 0
"""
        path, js = self.write("marks.scn", text), os.path.join(self.dir.name, "marks.json")
        p = run("simulate", path, "--policy", "comem", "--json", js, timeout=60)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("the step it waits for never came", p.stdout)
        ex = json.load(open(js))["runs"][0]["expectations"]
        self.assertEqual([e["ok"] for e in ex], [True, True, True, True, False], ex)
        self.assertEqual(ex[1]["value"], 2 * 2**30)
        self.assertIsNone(ex[4]["value"])

    def test_idle_until_released_waits_for_the_idle_release(self):
        # idle release after 20 s; the worker idles 12 s and then until its model is gone (12 s more at
        # most), which only the idle release can do: the next step begins with nothing on the card
        text = """\
scenario untilrel "idle until released"
idle-release 20
card 8GiB
worker w
  model m 2GiB
  load m
  idle 12 until released
  idle 1
expect resident w before line 8 == 0
expect resident w after line 6 == 2GiB
expect evictions == 1
"""
        path = self.write("until.scn", text)
        p = run("simulate", path, "--policy", "comem", timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_an_llm_server_unloads_whole_and_is_admitted_again(self):
        # An app with models is an LLM server. Under comem (comem-apps speaking for it) an ask for part of
        # its model takes all of it, a request loads it again through an admission (ComfyUI's idle host gives
        # room), and a request that finds no room is not served; nobody speaks for it under the others: it
        # keeps its model, ComfyUI streams beside it, and its load after the host's fails, all or nothing.
        text = """\
scenario llm "an LLM server beside ComfyUI"
speed 200
card 8GiB
app llm
  model chat 4GiB
  run 2
  at 30
  unload chat
  at 40
  run 2
host comfy start 5
  model sd 5GiB
  load sd
  run 2
  at 32
  run 2
expect failed == 0
expect resident llm after line 13 == 0
"""
        path, js = self.write("llm.scn", text), os.path.join(self.dir.name, "llm.json")
        p = run("simulate", path, "--json", js, "--timeline", "all", timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("serves a request for 2 s", p.stdout)
        runs = {r["policy"]: r for r in json.loads(self.read(js))["runs"]}
        ev = [e for e in runs["comem"]["events"] if e["process"] == "llm"]
        asked = [e for e in ev if e["kind"] == 6]  # EV_ASKED: asked for a, gave b
        self.assertTrue(asked and all(e["b"] == 4 * 2**30 for e in asked), asked)
        self.assertTrue(any(e["a"] < e["b"] for e in asked), "asked for part of it, it gave the whole model")
        self.assertTrue(any(e["kind"] == 9 and e["a"] == 4 * 2**30 for e in ev), "loaded again (EV_RELOAD)")
        self.assertEqual(runs["comem"]["metrics"]["streamed"], 0)
        for policy in ("comfy-env", "uncoordinated"):
            r = runs[policy]
            ev = [e for e in r["events"] if e["process"] == "llm"]
            self.assertFalse(any(e["kind"] in (6, 7, 8) for e in ev), "nobody asks it")
            self.assertEqual(r["metrics"]["failed"], 1, policy)  # its load at 40, after the host's at 32
            self.assertGreater(r["metrics"]["streamed"], 0, policy)  # the host beside its model
            self.assertIn("a request FAILED: 4.0G of its model not on the card", p.stdout)
            self.assertFalse(r["expectations"][0]["ok"])

    def test_scratch_folders_go_where_tmpdir_says(self):
        good = self.write("good.scn", GOOD)
        missing = os.path.join(self.dir.name, "no-such-folder")
        p = run("simulate", good, "--policy", "comem", env=dict(os.environ, TMPDIR=missing), timeout=60)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn(f"cannot make its folder {missing}/comem-sim-", p.stderr)

    def test_bad_flags(self):
        good = self.write("good.scn", GOOD)
        for args in (["--policy", "everyone"], ["--semantics", "macos"], ["--speed", "0"], ["--frobnicate"]):
            p = run("simulate", good, *args)
            self.assertEqual(p.returncode, 2, args)

    def test_release_refuses_bad_arguments(self):
        self.assertEqual(run("release").returncode, 2)
        self.assertEqual(run("release", "--process", "a", "--entry", "1").returncode, 2)
        sock = os.path.join(self.dir.name, "nobody.sock")
        p = run("release", "--socket", sock, "--process", "a")
        self.assertEqual(p.returncode, 1)
        self.assertIn("no coordinator", p.stderr)


if __name__ == "__main__":
    unittest.main()
