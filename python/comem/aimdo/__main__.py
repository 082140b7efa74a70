"""``python -m comem.aimdo SCRIPT [ARGS...]``: runs SCRIPT (ComfyUI's ``main.py``) with comem.aimdo as comfy_aimdo."""

from __future__ import annotations

import os
import runpy
import sys

from . import as_comfy_aimdo


def main(argv: list) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m comem.aimdo SCRIPT [ARGS...]\n\nRuns SCRIPT as __main__ with every comfy_aimdo "
              "module name bound to comem.aimdo (comem's pager), e.g. ComfyUI's main.py; ComfyUI v0.39 then "
              "needs --disable-comfy-compiler.", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    script = argv[0]
    if not os.path.isfile(script):
        print(f"python -m comem.aimdo: no such script: {script}", file=sys.stderr)
        return 2
    as_comfy_aimdo()
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python SCRIPT` puts its folder first
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
