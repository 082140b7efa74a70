#!/usr/bin/env bash
# tests/install/test_wheel_win.sh PYTHON WINPYTHON - comem's Windows wheel, cross-built and used as a
# Windows user would, under wine (make windows-check). PYTHON has scikit-build-core (the dev venv,
# .venv: scripts/venv.sh); WINPYTHON is the Windows CPython the binding's suites run under.
#   1. scripts/wheel-windows.sh builds comem-VERSION-py3-none-win_amd64.whl: the binding's package with
#      comem.dll, comem.exe and comemd.exe (PE files) in comem/_native/bin, build-info.json, the
#      console scripts, no ELF file;
#   2. pip installs it for Windows (--platform win_amd64 --target): pip takes its tag;
#   3. the Windows CPython, with only that folder on its path (no PYTHONPATH to the tree, no COMEM_LIB,
#      no COMEM_BIN_DIR), run from another folder: the binding loads the wheel's comem.dll, starts the
#      wheel's comemd.exe by ensure_running on a simulated card, and registers a holder and an admitted
#      entry that the wheel's comem.exe (run by the `comem` console script's code) shows in
#      `status --json`.
# Skipped (77) without scikit-build-core or the Windows CPython.
set -euo pipefail
py=$1
winpy=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "test_wheel_win: $*" >&2; exit 1; }
"$py" -c 'import scikit_build_core' 2>/dev/null || { echo "test_wheel_win: skipped: $py lacks scikit-build-core (make venv)"; exit 77; }
[ -f "$winpy" ] || { echo "test_wheel_win: skipped: no Windows CPython at $winpy (scripts/windows-check.sh)"; exit 77; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export WINEDEBUG=-all PIP_NO_INDEX=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

# ---- 1. the wheel ----
PYTHON=$py bash "$src/scripts/wheel-windows.sh" "$tmp/dist" >"$tmp/wheel.log" 2>&1 ||
  { cat "$tmp/wheel.log"; fail "scripts/wheel-windows.sh failed"; }
version=$(sed -n 's/^project(comem VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
wheel=$tmp/dist/comem-$version-py3-none-win_amd64.whl
[ -f "$wheel" ] || fail "no $(basename "$wheel") in $(ls "$tmp/dist")"
"$py" - "$wheel" <<'PY' || fail "the wheel's contents"
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = set(z.namelist())
for f in ("comem/_native/bin/comem.dll", "comem/_native/bin/comem.exe", "comem/_native/bin/comemd.exe"):
    assert f in names, f"{f} missing"
    assert z.read(f)[:2] == b"MZ", f"{f} is not a PE file"
elf = [n for n in names if z.read(n)[:4] == b"\x7fELF"]
assert not elf, f"ELF files in a Windows wheel: {elf}"
assert "comem/_lib.py" in names and "comem/autostart.py" in names
info = json.loads(z.read("comem/_native/build-info.json"))
assert info["system"] == "windows" and "glibc" not in info, info
ep = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
assert "comem = comem._bin:comem_main" in ep and "comemd = comem._bin:comemd_main" in ep, ep
meta = z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
assert "Tag: py3-none-win_amd64" in meta, meta
PY

# ---- 2. pip installs it for Windows ----
"$py" -m pip install -q --no-deps --platform win_amd64 --only-binary=:all: --python-version 3.13 \
  --target "$tmp/site" "$wheel" || fail "pip refused the wheel for win_amd64"
[ -f "$tmp/site/comem/_native/bin/comem.dll" ] || fail "pip did not install comem.dll"

# ---- 3. the Windows CPython with only the installed wheel ----
mkdir -p "$tmp/elsewhere" # run/, the runtime folder, is made by comem itself, private
cat >"$tmp/elsewhere/use.py" <<'PY'
import ctypes, json, os, subprocess, sys
import comem
from comem import autostart
site = sys.argv[1].lower()
lib = comem.library_path
assert lib.lower().startswith(site) and lib.endswith(os.path.join("_native", "bin", "comem.dll")), lib
r = autostart.ensure_running(started_by="wheel test")
try:
    assert r.started and r.binary.lower().startswith(site), r  # the wheel's comemd.exe
    with comem.Client("wheel-user", socket=r.socket, require_coordinator=True) as c:
        models = c.add_holder("models")
        g = c.admit(512 << 20, holder=models)
        g.done(models.add_entry("unet", 512 << 20))
        code = "import sys; sys.argv = ['comem', 'status', '--json']; from comem._bin import comem_main; comem_main()"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        procs = json.loads(out.stdout)["devices"][0]["processes"]
    assert [(p["name"], p["resident"]) for p in procs] == [("wheel-user", 512 << 20)], procs
    print("ok", flush=True)
finally:  # the comemd.exe it started, ended as its user may (under wine it holds this output open while it runs)
    k32 = ctypes.WinDLL("kernel32")
    k32.OpenProcess.restype = ctypes.c_void_p
    h = k32.OpenProcess(1, False, r.pid)  # PROCESS_TERMINATE
    if h:
        k32.TerminateProcess(ctypes.c_void_p(h), 0)
        k32.CloseHandle(ctypes.c_void_p(h))
PY
winpath() { echo "Z:$(echo "$1" | tr / '\\')"; }
out=$(cd "$tmp/elsewhere" && env -u COMEM_LIB -u COMEM_BIN_DIR PYTHONPATH="$(winpath "$tmp/site")" \
      COMEM_RUNTIME_DIR="$(winpath "$tmp/run")" COMEM_SOCKET="\\\\.\\pipe\\comem-wheel-test-$$" \
      COMEM_DEVICE="sim:4GiB:path=$(winpath "$tmp/run")\\card" \
      timeout 120 wine "$winpy" use.py "$(winpath "$tmp/site")" 2>&1 </dev/null | cat) || true
echo "$out" | tr -d '\r' | grep -qx ok || { echo "$out"; fail "the installed wheel did not work under the Windows CPython"; }
echo "test_wheel_win: $(basename "$wheel") built, installed by pip for win_amd64 and used from its own folder"
