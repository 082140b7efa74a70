#!/usr/bin/env bash
# The two commands under load: `make check` N times and `make demo` M times in a row, with one
# busy loop per CPU running beside them (issue 21: a test asserts what happens and in what order,
# never how fast a loaded machine does it). Prints one line per run and a summary; exits 1 when
# any run failed. Logs of failed runs are kept under $TMPDIR/comem-hog-*.
#
#   scripts/hog-check.sh [--check N] [--demo M] [--hogs K]
#
# Defaults: --check 10 --demo 50 --hogs $(nproc). The first `make check` also builds and makes
# the Python environment; later ones only run the tests.
set -uo pipefail
cd "$(dirname "$0")/.."

checks=10 demos=50 hogs=$(nproc 2>/dev/null || echo 2)
while [ $# -gt 0 ]; do
    case "$1" in
    --check) checks=$2; shift 2 ;;
    --demo) demos=$2; shift 2 ;;
    --hogs) hogs=$2; shift 2 ;;
    -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "hog-check: unknown argument '$1' (--check N, --demo M, --hogs K)" >&2; exit 2 ;;
    esac
done
for v in "$checks" "$demos" "$hogs"; do
    case "$v" in '' | *[!0-9]*) echo "hog-check: '$v' is not a whole number" >&2; exit 2 ;; esac
done

logs=$(mktemp -d "${TMPDIR:-/tmp}/comem-hog-XXXXXX")
pids=()
stop_hogs() { [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; }
trap stop_hogs EXIT
for _ in $(seq "$hogs"); do
    (while :; do :; done) &
    pids+=($!)
done
echo "hog-check: $hogs busy loop(s) running; logs of failed runs in $logs"

fail=0
run_one() { # kind index command...
    local kind=$1 i=$2
    shift 2
    local t0=$SECONDS log="$logs/$kind-$i.log"
    if "$@" >"$log" 2>&1; then
        echo "$kind $i: pass ($((SECONDS - t0)) s)"
        rm -f "$log"
    else
        echo "$kind $i: FAIL ($((SECONDS - t0)) s): $log"
        grep -E "\*\*\*Failed|FAIL|Error" "$log" | head -5 | sed 's/^/    /'
        fail=$((fail + 1))
    fi
}
t_all=$SECONDS
for i in $(seq "$checks"); do run_one check "$i" make check; done
for i in $(seq "$demos"); do run_one demo "$i" make demo; done
echo "hog-check: $checks check run(s), $demos demo run(s), $fail failed, $((SECONDS - t_all)) s, $hogs hog(s) on $(nproc) CPU(s)"
[ "$fail" -eq 0 ]
