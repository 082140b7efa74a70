"""`comem demo` (the README's main command) tells the story it promises, with consistent books; `make demo`
builds what its replay needs and nothing else."""
import os
import re
import shutil
import subprocess
import unittest

from comem_cli import SOURCE_DIR, run


class Demo(unittest.TestCase):
    def test_demo_walks_every_step(self):
        p = run("demo", timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = p.stdout
        self.assertIn("demo finished.", out)
        for step in ("1. The host loads", "2. Worker 'sam3'", "3. Worker 'depth'", "4. 'sam3' is killed"):
            self.assertIn(step, out)
        # step 2: the worker's admission made the host release part of a model
        self.assertRegex(out, r"host: asked to release [\d.]+ GiB of t5-encoder; freed")
        # every ledger printed attributes every byte the card says is used
        self.assertEqual(len(re.findall(r"unattributed 0 B", out)), 4)
        # step 3: the idle worker released everything; step 4: sam3 is gone and its bytes are back
        step3, step4 = out.split("3. Worker 'depth'")[1].split("4. 'sam3' is killed")
        self.assertRegex(step3, r"worker depth .* resident 0 B")
        self.assertRegex(step3, r"worker sam3 .* resident 6.00 GiB\s+busy")
        self.assertNotIn("sam3", step4.split("demo finished.")[0].split("\n", 1)[1])
        free = [float(x) for x in re.findall(r"free ([\d.]+) GiB", out)]
        self.assertGreater(free[-1], free[-2] + 6.0)  # sam3's 6 GiB and its context came back


class MakeDemo(unittest.TestCase):
    def test_make_demo_builds_the_cli_alone(self):
        # Issue 41 item 9: `make demo` built all ~270 targets (tests, benchmarks: minutes on two cores) for a
        # replay that needs bin/comem. `make -n` says what it would run, running nothing.
        if not shutil.which("make"):
            self.skipTest("make is not installed")
        build = os.path.join(SOURCE_DIR, "build-not-there")
        p = subprocess.run(["make", "-n", "demo", f"BUILD={build}", "JOBS=2"], cwd=SOURCE_DIR, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        builds = [line for line in p.stdout.splitlines() if line.startswith("cmake --build")]
        self.assertEqual(builds, [f"cmake --build {build} -j 2 --target comem_cli"], p.stdout)
        self.assertIn(f"{build}/bin/comem simulate scenarios/demo.scn", p.stdout)
        self.assertFalse(os.path.exists(build))


if __name__ == "__main__":
    unittest.main()
