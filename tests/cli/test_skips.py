"""scripts/skips.py: the summary `make check` prints of what did not run, from a real ctest run's JUnit file.

A small CTest project in a temporary folder holds a unittest suite that skips three methods for two
reasons (one a whole class), a suite that exits with ctest's skip code, and one that passes; ctest runs
it as `make check` runs comem's (`--output-junit`, every passed suite's whole output kept), and the
summary must count each reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

SOURCE = os.environ.get("COMEM_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIPS = os.path.join(SOURCE, "scripts", "skips.py")

SUITE = '''
import unittest

class A(unittest.TestCase):
    def test_one(self):
        self.skipTest("no ComfyUI here (set COMFYUI_DIR)")

    def test_two(self):
        """A docstring line, printed before the result."""
        self.skipTest("no ComfyUI here (set COMFYUI_DIR)")

    def test_runs(self):
        self.assertEqual(1 + 1, 2)

@unittest.skip("torch is not installed")
class B(unittest.TestCase):
    def test_three(self):
        pass
'''

PROJECT = '''
cmake_minimum_required(VERSION 3.21)
project(skips NONE)
enable_testing()
add_test(NAME py_suite COMMAND {python} -m unittest -v suite WORKING_DIRECTORY {dir})
add_test(NAME gpu_suite COMMAND {python} -c "print('skipped: no NVML device here'); raise SystemExit(77)")
set_tests_properties(gpu_suite PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME plain COMMAND {python} -c "print('[==========] 1 test(s) run.')")
'''


@unittest.skipUnless(shutil.which("cmake") and shutil.which("ctest"), "cmake and ctest are not on PATH")
class TestSkipsSummary(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="comem-skips-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def run_ctest(self) -> str:
        with open(os.path.join(self.dir, "suite.py"), "w") as f:
            f.write(SUITE)
        with open(os.path.join(self.dir, "CMakeLists.txt"), "w") as f:
            f.write(textwrap.dedent(PROJECT.format(python=sys.executable, dir=self.dir)))
        build = os.path.join(self.dir, "build")
        subprocess.run(["cmake", "-S", self.dir, "-B", build], check=True, capture_output=True, timeout=120)
        junit = os.path.join(build, "ctest-junit.xml")
        r = subprocess.run(["ctest", "--test-dir", build, "--output-junit", junit, "--test-output-size-passed",
                            "8000000"], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("100% tests passed", r.stdout)  # what ctest alone says of it
        return junit

    def test_each_reason_is_counted(self):
        junit = self.run_ctest()
        r = subprocess.run([sys.executable, SKIPS, junit], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "== skips: 1 of 3 suites did not run; 3 of 4 Python test methods skipped, by reason:")
        self.assertEqual(lines[1:], ["   suite gpu_suite: skipped: no NVML device here",
                                     "       2 x no ComfyUI here (set COMFYUI_DIR)",
                                     "       1 x torch is not installed"])

    def test_an_unreadable_file_says_so(self):
        r = subprocess.run([sys.executable, SKIPS, os.path.join(self.dir, "missing.xml")], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot read", r.stderr)


if __name__ == "__main__":
    unittest.main()
