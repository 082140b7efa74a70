#!/usr/bin/env bash
# Fuzzes the wire decoder: scripts/fuzz.sh [SECONDS] (default 60).
# Configures build-fuzz with clang and COMEM_FUZZ=ON, builds the libFuzzer target
# (ASan+UBSan) and its seed generator, writes the seeds into build-fuzz/corpus, and
# runs the fuzzer for SECONDS. Any crash, abort or sanitizer report exits non-zero;
# the input that caused it is left in build-fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-60}"
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh [SECONDS]  (a whole number of seconds, at least 1)" >&2
  exit 2
fi
command -v clang >/dev/null 2>&1 || { echo "fuzz: clang not found; run scripts/deps.sh" >&2; exit 1; }

dir=build-fuzz
CC=clang cmake -S . -B "$dir" -G Ninja -DCMAKE_C_COMPILER=clang -DCOMEM_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# Only the fuzz programs: the rest of the tree is built and tested by make check.
cmake --build "$dir" --target fuzz_wire fuzz_wire_corpus

mkdir -p "$dir/corpus" "$dir/artifacts"
"$dir/bin/fuzz_wire_corpus" "$dir/corpus"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
echo "fuzz: running fuzz_wire for ${secs}s over $dir/corpus" >&2
# New inputs that reach new code are added to the corpus, so later runs start further in.
# max_len: room for the largest legal frame (64 KiB + header) plus one byte of the next.
"$dir/bin/fuzz_wire" -max_total_time="$secs" -max_len=65553 -print_final_stats=1 -use_value_profile=1 \
  -artifact_prefix="$dir/artifacts/" "$dir/corpus"
echo "fuzz: clean after ${secs}s" >&2
