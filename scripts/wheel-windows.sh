#!/usr/bin/env bash
# comem's wheel for 64-bit Windows, cross-built here with MinGW-w64: comem-VERSION-py3-none-win_amd64.whl,
# the binding's package with comem.dll, comem.exe and comemd.exe in comem/_native/bin (cmake/windows.cmake).
#
#   scripts/wheel-windows.sh [OUTDIR]      (default dist/; PYTHON names the Python with
#                                           scikit-build-core, default .venv/bin/python)
#
# The same pip wheel as Linux's (pyproject.toml), told the MinGW toolchain and where json-c for MinGW
# is (build-win-deps/, which scripts/windows-check.sh builds), and that the wheel is for win-amd64
# (_PYTHON_HOST_PLATFORM, which gives the platform tag). Offline: the build backend comes from PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
py=${PYTHON:-.venv/bin/python}
deps=$PWD/build-win-deps
[ -f "$deps/lib/libjson-c.a" ] || { echo "wheel-windows: no json-c for MinGW in $deps: run scripts/windows-check.sh first" >&2; exit 1; }
export _PYTHON_HOST_PLATFORM=win-amd64
export SKBUILD_CMAKE_ARGS="-DCMAKE_TOOLCHAIN_FILE=$PWD/cmake/mingw-w64.cmake;-DCOMEM_WIN_DEPS=$deps"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
PIP_NO_INDEX=1 "$py" -m pip wheel -q --no-build-isolation --no-deps -w "$out" .
ls "$out"/comem-*-py3-none-win_amd64.whl
