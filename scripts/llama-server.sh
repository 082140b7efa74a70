#!/usr/bin/env bash
# Builds llama.cpp's server (llama-server) from PyPI's llama-cpp-python source release, CPU only, into
# .cache/llama/ (or $COMEM_LLAMA_DIR), for tests/python/test_apps.py's real-server tests (which skip,
# saying so, without it). PyPI carries no prebuilt llama-server: `pip install llama-cpp-python` builds
# only its shared libraries, so the vendored llama.cpp is built here with its server and nothing else
# (no web UI, no download at build time). About 11-12 minutes on an idle 2-core machine; run once.
#
#   scripts/llama-server.sh          prints the binary's path when done (or already built)
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.3.36   # llama.cpp 0c1e570 vendored; docs/apps.md says what its server's calls are
dir=${COMEM_LLAMA_DIR:-$PWD/.cache/llama}
bin=$dir/build/bin/llama-server
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
py=${COMEM_PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || command -v python3 )}
mkdir -p "$dir/dl"
"$py" -m pip download -q --no-deps --no-binary :all: -d "$dir/dl" "llama-cpp-python==$version" >&2
rm -rf "$dir/src"
mkdir -p "$dir/src"
tar -xzf "$dir/dl/llama_cpp_python-$version.tar.gz" -C "$dir/src" --strip-components=1
cmake -S "$dir/src/vendor/llama.cpp" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
  -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF -DLLAMA_TOOLS_INSTALL=OFF >&2
ninja -C "$dir/build" llama-server >&2
echo "$bin"
