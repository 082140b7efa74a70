#!/usr/bin/env bash
# Installs the Debian packages comem needs to build and test (the C side), and nothing more;
# the Python packages the tests use come from PyPI into .venv/ (scripts/venv.sh).
# Run by `make demo`, `make check` and `.ci/run`; `deps.sh windows` by `make windows-check`. Already-installed packages are
# detected with dpkg-query, so a second run costs a few milliseconds and needs no root.
# Optional, used by tests when present and skipped (saying so) otherwise: systemd-analyze
# (package systemd) verifies the installed unit, groff checks the man pages.
set -euo pipefail

packages=(
  gcc make cmake ninja-build pkg-config   # the build
  dpkg-dev                                 # dpkg-buildflags: CI builds Release once with its hardening flags
  libcmocka-dev                            # unit-test framework
  libjson-c-dev                            # JSON for the CLI, vectors and status output
  clang libclang-rt-dev                    # libFuzzer and sanitizer runtimes
  python3 python3-venv                     # Python binding and CLI tests; scripts/venv.sh makes the
                                           # environment (PyPI's torch, comfy-aimdo, ComfyUI's needs)
  tmux                                     # comem watch's test runs it in a real terminal
  prometheus                               # a real server scrapes comemd --metrics (test_prometheus), and
                                           # promtool checks the format (test_metrics): 22.5 MB to fetch,
                                           # 330 MB installed with its web assets, ~12 s to install here.
                                           # On a host run by systemd, Debian also starts its own
                                           # prometheus.service (port 9090): `systemctl disable --now
                                           # prometheus` if it is not wanted; the test starts its own
)

# `deps.sh windows`: what scripts/windows-check.sh needs instead (MinGW-w64, wine, and a virtual
# display for wine's DXGI).
if [ "${1:-}" = windows ]; then
  packages=(mingw-w64 wine wine64 cmake ninja-build xz-utils xvfb xauth)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: missing packages (${missing[*]}) and no apt-get here; install them by hand" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "deps: missing packages (${missing[*]}); run this script as root" >&2
    exit 1
  fi
fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Another apt or dpkg (unattended-upgrades, a second build) may hold the package locks: wait for it,
# up to 10 minutes, as a package step on a shared machine must, rather than fail at once.
wait_lock=(-o DPkg::Lock::Timeout=600)
$sudo apt-get "${wait_lock[@]}" update -qq
$sudo apt-get "${wait_lock[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
