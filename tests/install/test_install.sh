#!/usr/bin/env bash
# tests/install/test_install.sh BUILD_DIR [SANITIZE] - comem installed into a temporary prefix,
# used from outside as a packager and a user would: the file layout, the versioned soname, a C
# program built with `pkg-config --cflags --libs comem` (and one linked statically), the installed
# binaries, the Python package, the man pages, and `systemd-analyze verify` on the unit (skipped,
# saying so, where systemd-analyze is absent).
set -euo pipefail
build=$(cd "$1" && pwd)
sanitize=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "test_install: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install failed"; }

for f in bin/comem bin/comemd lib/libcomem.a lib/libcomem.so include/comem/comem.h include/comem/common.h \
         include/comem/pager.h include/comem/simcard.h include/comem/calc.h lib/pkgconfig/comem.pc share/man/man1/comem.1 \
         share/man/man8/comemd.8 lib/systemd/user/comemd.service share/doc/comem/README.md share/doc/comem/json.md \
         share/doc/comem/scenarios/demo.scn; do
  [ -e "$prefix/$f" ] || fail "missing $f"
done
py=$(find "$prefix/lib" -path '*-packages/comem/__init__.py' -print -quit)
[ -n "$py" ] || fail "the Python package is not installed"
real=$(readlink -f "$prefix/lib/libcomem.so")
soname=$(readelf -d "$real" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libcomem.so.0" ] || fail "soname is '$soname', not libcomem.so.0"
[ "$(readlink -f "$prefix/lib/libcomem.so.0")" = "$real" ] || fail "libcomem.so.0 is not the library"

# A program outside the tree, from the installed headers and library only.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
flags=$(pkg-config --cflags --libs comem) || fail "pkg-config does not know comem"
case "$flags" in *"-I"*"/include"*) ;; *) fail "pkg-config --cflags gives no include path: $flags" ;; esac
[ "$(pkg-config --modversion comem)" = "$("$prefix/bin/comem" --version | cut -d' ' -f2)" ] ||
  fail "comem.pc's version is not the binary's"
san=()
[ -n "$sanitize" ] && san=(-fsanitize="$sanitize")
cc -std=c17 -Wall -Werror "${san[@]}" -o "$tmp/outside" "$here/outside.c" $flags
cc -std=c17 -Wall -Werror "${san[@]}" -o "$tmp/outside-static" "$here/outside.c" \
   $(pkg-config --cflags comem) "$prefix/lib/libcomem.a" $(pkg-config --static --libs-only-l --libs-only-other comem | sed 's/-lcomem//')
run_dir=$tmp/run
mkdir -m 700 "$run_dir"
export COMEM_RUNTIME_DIR=$run_dir COMEM_LOG=warn
# (Outputs are captured before they are matched: with pipefail, `grep -q` leaving a pipe early
# would fail the writer with SIGPIPE.)
out=$(LD_LIBRARY_PATH=$prefix/lib "$tmp/outside" "$run_dir/a.sock" sim:8GiB) || fail "the outside program (shared) failed"
[ "$out" = "outside: ok ok" ] || fail "the outside program (shared) said: $out"
libs=$(LD_LIBRARY_PATH=$prefix/lib ldd "$tmp/outside")
case "$libs" in *"libcomem.so.0 => $prefix/lib/libcomem.so.0"*) ;;
  *) fail "the program does not load the installed libcomem.so.0: $libs" ;; esac
out=$("$tmp/outside-static" "$run_dir/b.sock" sim:8GiB) || fail "the outside program (static) failed"
[ "$out" = "outside: ok ok" ] || fail "the outside program (static) said: $out"
libs=$(ldd "$tmp/outside-static")
case "$libs" in *libcomem*) fail "the static program still loads libcomem.so: $libs" ;; esac

# The installed binaries.
[[ "$("$prefix/bin/comem" --version)" =~ ^comem\ [0-9] ]] || fail "comem --version"
[[ "$("$prefix/bin/comemd" --version)" =~ ^comemd\ [0-9] ]] || fail "comemd --version"
[[ "$("$prefix/bin/comem" calc reserve)" == *'"schema":1'* ]] || fail "the installed comem calc"

# The Python package finds the installed library by itself (not for a sanitized build: its library
# needs the sanitizer runtime loaded first, which python3 is not).
if [ -z "$sanitize" ]; then
  got=$(cd "$tmp" && env -u COMEM_LIB PYTHONPATH="$(dirname "$(dirname "$py")")" python3 -c \
        'import comem; print(comem.library_path)')
  [ "$(readlink -f "$got")" = "$real" ] || fail "import comem loaded '$got', not the installed library"
fi

# The man pages: they render, and document exit codes and the environment.
for page in share/man/man1/comem.1 share/man/man8/comemd.8; do
  grep -q '^\.SH EXIT STATUS' "$prefix/$page" || fail "$page has no EXIT STATUS"
  grep -q '^\.SH ENVIRONMENT' "$prefix/$page" || fail "$page has no ENVIRONMENT"
  if command -v groff >/dev/null; then
    warn=$(groff -man -Tutf8 -ww -z "$prefix/$page" 2>&1) || fail "$page: groff failed"
    [ -z "$warn" ] || fail "$page: groff warns: $warn"
  fi
done

# The unit starts the installed daemon, and systemd accepts it.
unit=$prefix/lib/systemd/user/comemd.service
grep -qx "ExecStart=$prefix/bin/comemd" "$unit" || fail "the unit does not start $prefix/bin/comemd: $(grep ExecStart "$unit")"
if command -v systemd-analyze >/dev/null; then
  mkdir -m 700 "$tmp/xdg"
  # --user needs a runtime directory; no MANPATH: the unit names pages outside man's path by file.
  out=$(XDG_RUNTIME_DIR=$tmp/xdg systemd-analyze --user verify "$unit" 2>&1) ||
    fail "systemd-analyze verify: $out"
  [ -z "$out" ] || fail "systemd-analyze verify warns: $out"
  echo "test_install: systemd-analyze verify passed"
else
  echo "test_install: systemd-analyze is not installed here; the unit's check is skipped"
fi
echo "test_install: ok ($prefix)"
