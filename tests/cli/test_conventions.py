"""The conventions every command keeps: --help anywhere, global flags before or after, --version, exit codes."""
import json
import os
import subprocess
import unittest

import re

from comem_cli import BIN_DIR, SOURCE_DIR, Machine, run

COMMANDS = ["status", "watch", "metrics", "release", "devices", "calc", "simulate", "demo", "run", "stop"]


class Conventions(unittest.TestCase):
    def test_the_manuals_name_every_metric_and_variable(self):
        # what `comem metrics` can print and what the programs read from the environment, in comem(1)/comemd(8)
        def read(*parts):
            with open(os.path.join(SOURCE_DIR, *parts)) as f:
                return f.read()
        man = read("docs", "man", "comem.1") + read("docs", "man", "comemd.8")
        metrics = set(re.findall(r'"(comem_[a-z_]+_total)"', read("tools", "common", "prom.c")))
        self.assertGreater(len(metrics), 5)
        self.assertEqual(sorted(m for m in metrics if m not in man), [])
        code = "".join(read("tools", d, f) for d in ("comem", "comemd", "common", "preload")
                       for f in sorted(os.listdir(os.path.join(SOURCE_DIR, "tools", d))) if f.endswith(".c"))
        variables = set(re.findall(r'getenv\("(COMEM_[A-Z_]+)"\)', code))
        self.assertIn("COMEM_PRELOAD_POLICY", variables)
        self.assertEqual(sorted(v for v in variables if v not in man), [])

    def test_version_on_both_binaries(self):
        v = run("--version")
        self.assertEqual(v.returncode, 0)
        self.assertRegex(v.stdout, r"^comem \d+\.\d+\.\d+\n$")
        self.assertEqual(run("version").stdout, v.stdout)
        d = subprocess.run([os.path.join(BIN_DIR, "comemd"), "--device", "sim:1GiB", "--version"],
                           capture_output=True, text=True, timeout=10)
        self.assertEqual((d.returncode, d.stdout), (0, v.stdout.replace("comem ", "comemd ")))

    def test_help_anywhere(self):
        for cmd in COMMANDS:
            for args in ([cmd, "--help"], [cmd, "--bogus", "--help"], [cmd, "-h"], ["--json", cmd, "--help"]):
                p = run(*args)
                self.assertEqual(p.returncode, 0, (args, p.stderr))
                self.assertIn("usage: comem", p.stdout, args)
        d = subprocess.run([os.path.join(BIN_DIR, "comemd"), "--bogus", "--help"], capture_output=True, text=True,
                           timeout=10)
        self.assertEqual(d.returncode, 0)
        self.assertIn("usage: comemd", d.stdout)

    def test_usage_errors_exit_2(self):
        for args in (["frobnicate"], [], ["--bogus", "status"], ["--json", "simulate", "x.scn"],
                     ["--socket", "/x", "calc", "reserve"], ["status", "--bogus"]):
            p = run(*args)
            self.assertEqual(p.returncode, 2, args)
            self.assertEqual(p.stdout, "", args)
        d = subprocess.run([os.path.join(BIN_DIR, "comemd"), "--bogus"], capture_output=True, text=True, timeout=10)
        self.assertEqual(d.returncode, 2)

    def test_global_flags_before_or_after(self):
        with Machine("sim:8GiB") as m:
            env = {k: v for k, v in m.env.items() if k != "COMEM_SOCKET"}  # only the flag names the socket
            for args in (["--socket", m.socket, "--json", "status"], ["status", "--socket", m.socket, "--json"],
                         ["--json", "status", "--socket", m.socket], [f"--socket={m.socket}", "status", "--json"]):
                p = run(*args, env=env)
                self.assertEqual(p.returncode, 0, (args, p.stderr))
                self.assertEqual(json.loads(p.stdout)["schema"], 1, args)
            p = run("--socket", m.socket + ".nobody", "status", env=env)
            self.assertEqual(p.returncode, 1)  # no coordinator: a failure, not a usage error
            self.assertIn("no coordinator answers", p.stderr)
            self.assertEqual(json.loads(run("--json", "calc", "reserve").stdout)["rule"], "reserve")


if __name__ == "__main__":
    unittest.main()
