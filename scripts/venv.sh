#!/usr/bin/env bash
# Makes the Python environments comem's tests run in, from PyPI, and nothing outside them:
#   .venv/            scripts/requirements-dev.txt (torch, comfy-aimdo 0.4.13, ComfyUI's server needs)
#   .venv-aimdo-new/  the newest comfy-aimdo, over .venv's packages (a .pth file), for the tests
#                     that compare comem.aimdo with more than one aimdo release
#   .venv-a125cd84/   a --target folder with what ComfyUI a125cd84's server pins differently
#                     (comfyui-workflow-templates 0.1.95), first on that era's ComfyUI PYTHONPATH
#   .venv-v039/       ComfyUI v0.39 as far as it can be assembled (comfyui/: ../shared/thirdparty/
#                     comfyui-v039-overlay/assemble.sh) and a --target folder (site/) with the
#                     comfy-aimdo it pins (0.5.6: it imports comfy_aimdo.malloc_graph), first on that
#                     era's PYTHONPATH; skipped, saying so, where the overlay is not beside the clone
# Run by `make check` (and `make venv`). A second run that finds both up to date (the stamp holds
# the requirements file's hash) costs a few milliseconds. COMEM_VENV moves the first folder.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${COMEM_VENV:-.venv}
newer=${venv}-aimdo-new
req=scripts/requirements-dev.txt
python=${COMEM_BASE_PYTHON:-python3}
stamp_of() { { sha256sum "$req" "$0" | sha256sum | cut -d' ' -f1; } }
want=$(stamp_of)

if [ "$(cat "$venv/.comem-stamp" 2>/dev/null)" != "$want" ]; then
  echo "venv: making $venv from $req (once; about two minutes)" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip 2>&1 | grep -v "is ignored" >&2 || true
  "$venv/bin/python" -m pip install -q -r "$req" 2>&1 | grep -v "is ignored" >&2 || true
  "$venv/bin/python" -c 'import torch, torchvision, numpy, comfy_aimdo.control, aiohttp, sqlalchemy' \
    || { echo "venv: $venv is incomplete (see pip's messages above)" >&2; exit 1; }
  echo "$want" > "$venv/.comem-stamp"
fi

if [ "$(cat "$newer/.comem-stamp" 2>/dev/null)" != "$want" ]; then
  echo "venv: making $newer (the newest comfy-aimdo over $venv)" >&2
  rm -rf "$newer"
  "$python" -m venv "$newer"
  base_site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  own_site=$("$newer/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # After its own site-packages: its comfy_aimdo is found first, everything else is .venv's.
  echo "$base_site" > "$own_site/comem-base-venv.pth"
  "$newer/bin/python" -m pip install -q --no-deps --upgrade comfy-aimdo 2>&1 | grep -v "is ignored" >&2 || true
  "$newer/bin/python" -c 'import comfy_aimdo.control' \
    || { echo "venv: $newer is incomplete (see pip's messages above)" >&2; exit 1; }
  echo "$want" > "$newer/.comem-stamp"
fi

a125=${venv}-a125cd84
if [ "$(cat "$a125/.comem-stamp" 2>/dev/null)" != "$want" ]; then
  echo "venv: making $a125 (what ComfyUI a125cd84's server pins differently)" >&2
  rm -rf "$a125"
  "$venv/bin/python" -m pip install -q --no-deps --target "$a125" comfyui-workflow-templates==0.1.95 2>&1 \
    | grep -v "is ignored" >&2 || true
  [ -d "$a125/comfyui_workflow_templates/templates" ] \
    || { echo "venv: $a125 is incomplete (see pip's messages above)" >&2; exit 1; }
  echo "$want" > "$a125/.comem-stamp"
fi

# ComfyUI v0.39: its memory surface laid over 783545f6 (the overlay says which upstream file is whose),
# with the comfy-aimdo release it pins. The stamp follows the overlay too: a new file there remakes it.
v039=${venv}-v039
overlay=../shared/thirdparty/comfyui-v039-overlay
if [ -f "$overlay/assemble.sh" ]; then
  want_v039=$({ echo "$want"; find "$overlay" -type f -print0 | sort -z | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$v039/.comem-stamp" 2>/dev/null)" != "$want_v039" ]; then
    echo "venv: making $v039 (ComfyUI v0.39 assembled, with the comfy-aimdo it pins)" >&2
    rm -rf "$v039"
    mkdir -p "$v039"
    bash "$overlay/assemble.sh" "$v039/comfyui" >/dev/null
    mkdir -p "$v039/comfyui/custom_nodes"
    "$venv/bin/python" -m pip install -q --no-deps --target "$v039/site" comfy-aimdo==0.5.6 2>&1 \
      | grep -v "is ignored" >&2 || true
    [ -f "$v039/site/comfy_aimdo/malloc_graph.py" ] && [ -f "$v039/comfyui/comfy/system_memory.py" ] \
      || { echo "venv: $v039 is incomplete (see the messages above)" >&2; exit 1; }
    echo "$want_v039" > "$v039/.comem-stamp"
  fi
else
  echo "venv: no $overlay beside this clone: the ComfyUI v0.39 suites will skip, saying why" >&2
fi
