#!/bin/bash
# The preload on a real GPU: comemd on the card (NVML), then tests/gpu/preload_torch.py without the
# preload, under observe, under enforce (LD_PRELOAD) and through `comem run --policy enforce`.
#   tests/gpu/preload_gpu.sh DIR OUT     DIR holds bin/ (comemd, comem) and lib/ (libcomem_preload.so)
DIR=$(cd "${1:?DIR}" && pwd); OUT=${2:?OUT}; HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"; export LD_LIBRARY_PATH="$DIR:$DIR/lib:${LD_LIBRARY_PATH:-}"
RUN=$(mktemp -d); SOCK=$RUN/comem.sock
export COMEM_CLI=$DIR/bin/comem
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,driver_version --format=csv > "$OUT/nvidia-smi.csv" 2>&1
"$DIR/bin/comemd" --socket "$SOCK" --device nvml --check > "$OUT/comemd.log" 2>&1 &
CPID=$!
for _ in $(seq 50); do [ -S "$SOCK" ] && break; sleep 0.1; done
"$DIR/bin/comem" status --socket "$SOCK" > "$OUT/status-idle.txt" 2>&1
PY=${PYTHON:-python3}
COMEM_SOCKET=$SOCK timeout 120 $PY "$HERE/preload_torch.py" none > "$OUT/none.json" 2> "$OUT/none.err"
for mode in observe enforce; do
  COMEM_SOCKET=$SOCK COMEM_PRELOAD_POLICY=$mode COMEM_LOG=debug LD_PRELOAD=$DIR/lib/libcomem_preload.so \
    timeout 120 $PY "$HERE/preload_torch.py" $mode > "$OUT/$mode.json" 2> "$OUT/$mode.err"
  echo "$mode rc=$?" >> "$OUT/rc.txt"
done
COMEM_PRELOAD_LIB=$DIR/lib/libcomem_preload.so timeout 120 "$DIR/bin/comem" run --policy enforce --socket "$SOCK" -- \
  $PY "$HERE/preload_torch.py" comem-run > "$OUT/comem-run.json" 2> "$OUT/comem-run.err"
echo "comem-run rc=$?" >> "$OUT/rc.txt"
kill $CPID; wait $CPID 2>/dev/null
for f in none observe enforce comem-run; do echo "== $f"; cat "$OUT/$f.json"; grep -c "attributed" "$OUT/$f.err"; \
  grep -E "preload: (cuMem|cuGetProc)|refused|warn" "$OUT/$f.err" | sort | uniq -c | head -20; done
rm -rf "$RUN"
# The claims, checked: 77 without a GPU, 1 when one fails.
$PY - "$OUT" <<'PYEOF'
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        with open(os.path.join(out, name + ".json")) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError) as e:
        return {"unreadable": repr(e)}
runs = {n: load(n) for n in ("none", "observe", "enforce", "comem-run")}
if "skipped" in runs["none"]:
    print("preload_gpu: skipped (no GPU)"); sys.exit(77)
bad = []
def claim(ok, what):
    print(("  ok: " if ok else "  FAILED: ") + what)
    if not ok:
        bad.append(what)
claim("error" in (runs["none"].get("after_1GiB") or {}), "without the preload the process is not in the ledger")
for n in ("observe", "enforce", "comem-run"):
    r = runs[n]
    held = ((r.get("after_1GiB") or {}).get("holders") or {}).get("preload")
    claim(held == 1 << 30, f"{n}: the 1 GiB tensor is attributed to the preload holder ({held})")
    want = "allocated" if n == "observe" else "torch.cuda.OutOfMemoryError"
    claim(r.get("big_outcome") == want, f"{n}: the oversized allocation ends as {want} ({r.get('big_outcome')})")
    claim(r.get("still_works") is True, f"{n}: the program works on afterwards")
sys.exit(1 if bad else 0)
PYEOF
