"""Shared helpers for the CLI tests: where the binary is, and how to run it."""
import json
import os
import subprocess

SOURCE_DIR = os.environ.get("COMEM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN_DIR = os.environ.get("COMEM_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin"))
COMEM = os.path.join(BIN_DIR, "comem")


def run(*args, check=False, env=None, timeout=60):
    """Runs comem with args; returns the CompletedProcess (text mode)."""
    return subprocess.run([COMEM, *map(str, args)], capture_output=True, text=True, check=check,
                          env=env, timeout=timeout)


def run_json(*args, env=None):
    p = run(*args, env=env)
    if p.returncode != 0:
        raise AssertionError(f"comem {' '.join(map(str, args))} exited {p.returncode}: {p.stderr}")
    return json.loads(p.stdout)
