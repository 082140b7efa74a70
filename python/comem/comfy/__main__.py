"""``python3 -m comem.comfy install COMFYUI_DIR``: link this adapter into ComfyUI's custom_nodes/."""

from __future__ import annotations

import argparse
import os
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m comem.comfy",
                                 description="Install comem's ComfyUI adapter as a custom node.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("install", help="link custom_nodes/comem to this adapter")
    i.add_argument("comfyui", help="the ComfyUI folder (the one holding main.py and custom_nodes/)")
    i.add_argument("--copy", action="store_true", help="(not supported) copying would lose the binding beside it")
    u = sub.add_parser("uninstall", help="remove custom_nodes/comem")
    u.add_argument("comfyui")
    a = ap.parse_args(argv)
    here = os.path.dirname(os.path.realpath(__file__))
    nodes = os.path.join(os.path.abspath(a.comfyui), "custom_nodes")
    target = os.path.join(nodes, "comem")
    if not os.path.isdir(nodes):
        print(f"comem: {nodes} is not a folder; is {a.comfyui} a ComfyUI checkout?", file=sys.stderr)
        return 2
    if a.cmd == "install":
        if a.copy:
            print("comem: --copy is not supported: the adapter imports the binding beside it; use the link",
                  file=sys.stderr)
            return 2
        if os.path.islink(target):
            if os.path.realpath(target) == here:
                print(f"comem: already installed: {target} -> {here}")
                return 0
            os.unlink(target)
        elif os.path.exists(target):
            print(f"comem: {target} exists and is not comem's link; remove it first", file=sys.stderr)
            return 1
        os.symlink(here, target)
        print(f"comem: installed {target} -> {here}; restart ComfyUI")
        return 0
    if os.path.islink(target) and os.path.realpath(target) == here:
        os.unlink(target)
        print(f"comem: removed {target}")
        return 0
    print(f"comem: {target} is not comem's link; nothing removed", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
