#!/usr/bin/env bash
# Builds comfy-aimdo's Linux CUDA library once per VBAR page size, for bench_pager_aimdo's
# side-by-side runs at 32, 64 and 128 MiB pages (aimdo's page size is a compile-time constant,
# 32 MiB upstream). Nothing of aimdo enters comem: the sources are read from THIRDPARTY (a folder
# holding comfy-aimdo/, funchook/ and distorm/, as /work/shared/thirdparty does), compiled in a
# temporary folder, and the libraries land in OUTDIR/aimdo-<MiB>/aimdo.so.
#
#   bench/build_aimdo_pages.sh THIRDPARTY OUTDIR [MiB...]     (default: 32 64 128)
#
# Needs gcc, cmake and make; no CUDA toolkit (aimdo finds the driver at run time).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 THIRDPARTY OUTDIR [MiB...]" >&2; exit 2; }
tp=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(32 64 128)
for d in comfy-aimdo funchook distorm; do
  [ -d "$tp/$d" ] || { echo "$0: $tp/$d is missing" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake -S "$tp/funchook" -B "$work/fh" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  -DFUNCHOOK_BUILD_SHARED=OFF -DFUNCHOOK_BUILD_STATIC=ON -DFUNCHOOK_BUILD_TESTS=OFF \
  -DFUNCHOOK_DISASM=distorm -DFUNCHOOK_INSTALL=OFF \
  -DFETCHCONTENT_SOURCE_DIR_DISTORM="$tp/distorm" -DFETCHCONTENT_FULLY_DISCONNECTED=ON >/dev/null
cmake --build "$work/fh" -j"${JOBS:-2}" >/dev/null
a="$tp/comfy-aimdo"
for mib in "${sizes[@]}"; do
  src="$work/src-$mib"
  cp -rL "$a/." "$src" # a copy, also when THIRDPARTY holds links: the sed below edits it
  # the one constant that fixes aimdo's page size; fail loudly if upstream renamed it
  grep -q '^#define VBAR_PAGE_SIZE (32 << 20)$' "$src/src/model-vbar.c" ||
    { echo "$0: VBAR_PAGE_SIZE not found as expected in model-vbar.c" >&2; exit 1; }
  sed -i "s/^#define VBAR_PAGE_SIZE (32 << 20)\$/#define VBAR_PAGE_SIZE ((size_t)$mib << 20)/" "$src/src/model-vbar.c"
  mkdir -p "$out/aimdo-$mib"
  gcc -shared -o "$out/aimdo-$mib/aimdo.so" -fPIC -O2 -pthread \
    "$src"/src/*.c "$src"/src-cuda/dispatch.c "$src"/src-posix/*.c \
    -I"$src/src" -I"$tp/funchook/include" "$work/fh/libfunchook.a" "$work/fh/libdistorm.a" -ldl 2>/dev/null
  echo "built $out/aimdo-$mib/aimdo.so (VBAR pages of $mib MiB)"
done
