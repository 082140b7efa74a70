#!/usr/bin/env bash
# tests/cli/test_cli_win.sh - comem.exe against comemd.exe under wine (issue 26; scripts/windows-check.sh
# runs it through ctest): status, metrics, release and devices as Windows users run them, over a named
# pipe of the test's own on a simulated 4 GiB card; the daemon's --metrics file; calc; the commands
# Windows has not, refused with why; and a status with nobody listening. Every check compares a value; the first that fails stops
# the test (exit 1), saying what it saw.
#
#   tests/cli/test_cli_win.sh BIN_DIR        (comem.exe and comemd.exe in BIN_DIR)
set -uo pipefail
bin=$1
pipe="\\\\.\\pipe\\comem-test-cli-$$"
work=$(mktemp -d)
card="sim:4GiB:path=$(winepath -w "$work/card" 2>/dev/null)"
daemon=
cleanup() {
  [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "test_cli_win: $*" >&2; exit 1; }
# comem.exe's lines for a person end in CRLF, as Windows programs' do: compared without the CR.
comem() { wine "$bin/comem.exe" "$@" | tr -d '\r'; }

# Nobody listens yet: exit 1, and the line says so.
out=$(comem --socket "$pipe" status 2>&1); rc=$?
[ "$rc" = 1 ] || fail "status with no coordinator: exit $rc, not 1: $out"
grep -q "nothing listens at" <<<"$out" || fail "status with no coordinator said: $out"

wine "$bin/comemd.exe" --socket "$pipe" --device "$card" --metrics "$(winepath -w "$work/comem.prom")" \
  --metrics-interval 0.2 >"$work/comemd.log" 2>&1 &
daemon=$!
for _ in $(seq 300); do
  comem --socket "$pipe" status >/dev/null 2>&1 && break
  sleep 0.1
done
out=$(comem --socket "$pipe" status 2>&1) || fail "status: exit $?: $out"
grep -q "capacity 4.00 GiB" <<<"$out" || fail "status does not show the 4 GiB card: $out"

# --json: the card as the ledger sees it.
comem --socket "$pipe" --json status >"$work/status.json" || fail "status --json: exit $?"
python3 - "$work/status.json" <<'PY' || fail "status --json: $(cat "$work/status.json")"
import json, sys
st = json.load(open(sys.argv[1]))
dev = st["devices"][0]
assert dev["capacity"] == 4 << 30, dev["capacity"]
assert st["coordinator"]["source"] == "sim", st["coordinator"]
assert st["coordinator"]["socket"].startswith("\\\\.\\pipe\\comem-test-cli-"), st["coordinator"]["socket"]
PY

# metrics: the exposition format (its lines end in LF alone, on Windows too), the card's capacity in bytes.
wine "$bin/comem.exe" --socket "$pipe" metrics >"$work/metrics.txt" || fail "metrics: exit $?"
! grep -q $'\r' "$work/metrics.txt" || fail "metrics' lines end in CRLF"
out=$(cat "$work/metrics.txt")
grep -qx "comem_up 1" <<<"$out" || fail "metrics has no 'comem_up 1'"
grep -qE '^comem_device_capacity_bytes\{device="0",.*\} 4294967296$' <<<"$out" || fail "metrics' capacity: $(grep capacity <<<"$out")"

# comemd --metrics: the file kept current (every 0.2 s; its lines end in LF alone).
for _ in $(seq 100); do grep -q "^comem_device_capacity_bytes" "$work/comem.prom" 2>/dev/null && break; sleep 0.1; done
grep -qx "comem_up 1" "$work/comem.prom" || fail "comemd --metrics: $(head -c 300 "$work/comem.prom" 2>&1)"
grep -qE '^comem_device_capacity_bytes\{device="0",.*\} 4294967296$' "$work/comem.prom" \
  || fail "comemd --metrics' capacity: $(grep capacity "$work/comem.prom")"
! grep -q $'\r' "$work/comem.prom" || fail "comemd --metrics' lines end in CRLF"

# release: nothing is held, so nothing comes back, and that is success (exit 0).
out=$(comem --socket "$pipe" release --all 2>&1) || fail "release --all: exit $?: $out"
grep -q "released 0 B" <<<"$out" || fail "release --all said: $out"

# devices on a card of its own (no coordinator), calc: the same arithmetic as on Linux.
comem devices --device sim:2x12GiB --json >"$work/devices.json" || fail "devices: exit $?"
python3 - "$work/devices.json" <<'PY' || fail "devices --json: $(cat "$work/devices.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert [x["total"] for x in d["devices"]] == [12 << 30, 12 << 30], d["devices"]
PY
out=$(comem calc reserve --windows --total-vram 24GiB) || fail "calc: exit $?"
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["rule"]=="reserve" and 0 < r["reserve"] < 24<<30, r' "$out" \
  || fail "calc reserve said: $out"

# What Windows has not: refused, with why, exit 2.
for cmd in watch demo simulate run; do
  out=$(comem "$cmd" 2>&1); rc=$?
  [ "$rc" = 2 ] || fail "$cmd: exit $rc, not 2: $out"
  grep -q "not on Windows" <<<"$out" || fail "$cmd said: $out"
done

# The daemon goes: status says nobody listens again.
kill "$daemon"; wait "$daemon" 2>/dev/null; daemon=
out=$(comem --socket "$pipe" status 2>&1); rc=$?
[ "$rc" = 1 ] || fail "status after the daemon went: exit $rc: $out"
echo "test_cli_win: passed"
