#!/usr/bin/env python3
"""What `make check` did not run, counted by reason: the summary ctest's "100 % tests passed" leaves out.

    python3 scripts/skips.py BUILD/ctest-junit.xml

Reads the JUnit file ctest writes (`--output-junit`, with every passed suite's whole output kept:
`--test-output-size-passed`) and prints one summary: the suites ctest did not run (a skip exit
status or a skip line), then the test methods the Python suites skipped (unittest's `... skipped
'why'`) and the cmocka tests that skipped, each reason with its count, most first. Exit status 0
(a summary, not a verdict); 2 when the file cannot be read.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from typing import List, Tuple

UNITTEST_SKIP = re.compile(r"\.\.\. skipped (['\"])(.*)\1\s*$")
UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in ")
CMOCKA_SKIP = re.compile(r"^\[  SKIPPED \] (\S+)")
WIDTH = 110


def one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= WIDTH else text[:WIDTH - 3] + "..."


def read(path: str) -> Tuple[List[Tuple[str, str]], Counter, int, int]:
    """(suites not run with why, skipped methods by reason, methods run, suites)."""
    root = ET.parse(path).getroot()
    not_run: List[Tuple[str, str]] = []
    reasons: Counter = Counter()
    ran = suites = 0
    for case in root.iter("testcase"):
        suites += 1
        out = case.findtext("system-out") or ""
        if case.get("status") == "notrun" or case.find("skipped") is not None:
            lines = [ln for ln in out.splitlines() if ln.strip()]
            why = next((ln for ln in lines if "skip" in ln.lower()), lines[-1] if lines else "no reason given")
            not_run.append((case.get("name", "?"), one_line(why)))
            continue
        for line in out.splitlines():
            m = UNITTEST_SKIP.search(line)
            if m:
                reasons[one_line(m.group(2))] += 1
                continue
            m = UNITTEST_RAN.match(line)
            if m:
                ran += int(m.group(1))
                continue
            if CMOCKA_SKIP.match(line):
                reasons[f"cmocka test skipped in {case.get('name')} (its output says why)"] += 1
    return not_run, reasons, ran, suites


def main(argv: List[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        not_run, reasons, ran, suites = read(argv[1])
    except (OSError, ET.ParseError) as e:
        print(f"skips: cannot read {argv[1]}: {e}", file=sys.stderr)
        return 2
    skipped = sum(n for why, n in reasons.items() if not why.startswith("cmocka "))
    cmocka = sum(reasons.values()) - skipped
    print(f"== skips: {len(not_run)} of {suites} suites did not run; {skipped} of {ran} Python test methods skipped"
          + (f"; {cmocka} cmocka tests skipped" if cmocka else "")
          + (", by reason:" if not_run or reasons else " (nothing skipped)"))
    for name, why in sorted(not_run):
        print(f"   suite {name}: {why}")
    for why, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"   {n:5d} x {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
