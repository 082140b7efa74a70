"""comem's native programs (``comemd``, ``comem``) from Python, and the wheel's console scripts.

A wheel (``pyproject.toml``, ``cmake/wheel.cmake``) carries the compiled files inside this
package::

    comem/_native/bin/comem, comemd          the CLI and the coordinator daemon
    comem/_native/lib/libcomem.so.0          the library the binding loads (comem/_lib.py)
    comem/_native/lib/libcomem_preload.so    `comem run`'s preload (../lib beside bin/comem)
    comem/_native/build-info.json            version, json-c, the newest glibc they need

:func:`binary_path` finds a program: the wheel's copy first, then an installed tree above the
package (``make install``'s ``<prefix>/bin``), the source tree's ``build/bin`` (after ``make``),
then ``PATH``. Only a native (ELF) executable is taken, so the console scripts below, which
``pip`` writes into a venv's ``bin/`` under the same names, are never mistaken for the programs.
On Windows the programs are ``comem.exe`` and ``comemd.exe`` (PE files), and the source tree's
build is ``build-win/bin`` (docs/windows.md).

:func:`comem_main` and :func:`comemd_main` are those console scripts: each replaces the Python
process with the program (``os.execv``: the same pid, arguments and environment, so a signal
sent to it reaches the program itself). Windows has no exec: there the script runs the program
and exits with its status.

This module imports only the standard library; it is usable before ``libcomem`` loads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Dict, List, NoReturn, Optional, Tuple

PROGRAMS = ("comem", "comemd")
"""The names :func:`binary_path` knows."""

_HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE_DIR = os.path.join(_HERE, "_native")
"""Where a wheel keeps its compiled files (absent in a source tree or a ``make install`` tree)."""


_WINDOWS = sys.platform == "win32"


def _is_native(path: str, windows: bool = _WINDOWS) -> bool:
    """True when ``path`` is an executable of this system's (ELF; on Windows PE, "MZ"): not a script, not a folder."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head[:2] == b"MZ" if windows else head == b"\x7fELF"


def _candidates(name: str, windows: bool = _WINDOWS) -> List[Tuple[str, str]]:
    """(path, why it is a candidate) for program ``name``, in the order they are tried."""
    file = name + ".exe" if windows else name
    out = [(os.path.join(NATIVE_DIR, "bin", file), "bundled in the wheel")]
    up = _HERE
    for _ in range(4):  # <prefix>/lib/python3/dist-packages/comem -> <prefix>/bin
        up = os.path.dirname(up)
        out.append((os.path.join(up, "bin", file), "an installed tree above the package"))
    repo = os.path.dirname(os.path.dirname(_HERE))  # python/comem -> <repo>
    out.append((os.path.join(repo, "build-win" if windows else "build", "bin", file), "the source tree's build"))
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if d:
            out.append((os.path.join(d, file), "PATH"))
    return out


def binary_path(name: str) -> str:
    """The absolute path of comem's native program ``name`` (``"comemd"`` or ``"comem"``).

    Looked for in the wheel's ``comem/_native/bin`` first, then an installed tree above the
    package, the source tree's ``build/bin``, then ``PATH`` (native executables only).

    Raises ValueError for a name that is not one of :data:`PROGRAMS`, and FileNotFoundError,
    listing every place tried, when none holds it.
    """
    if name not in PROGRAMS:
        raise ValueError(f"comem: no native program named {name!r}; the programs are {', '.join(PROGRAMS)}")
    tried = []
    seen = set()
    for path, why in _candidates(name):
        path = os.path.abspath(path)
        if path in seen:
            continue
        seen.add(path)
        if _is_native(path):
            return path
        what = "not a native executable" if os.path.exists(path) else "no such file"
        tried.append(f"  {path} ({why}): {what}")
    raise FileNotFoundError(f"comem: cannot find the program {name}; tried:\n" + "\n".join(tried) +
                            "\nInstall the wheel (pip install comem) or build the source tree (make).")


def build_info() -> Optional[Dict[str, str]]:
    """The wheel's ``build-info.json`` (keys ``version``, ``glibc``, ``json_c``), or None outside a wheel."""
    try:
        with open(os.path.join(NATIVE_DIR, "build-info.json"), encoding="utf-8") as f:
            info = json.load(f)
    except FileNotFoundError:
        return None
    if not isinstance(info, dict):
        raise ValueError(f"comem: {NATIVE_DIR}/build-info.json is not a JSON object")
    return {str(k): str(v) for k, v in info.items()}


def system_glibc() -> Optional[str]:
    """This system's glibc version (``"2.36"``), or None where the C library is not glibc."""
    try:
        got = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36"
    except (ValueError, OSError, AttributeError):
        return None
    if not got or not got.startswith("glibc "):
        return None
    return got.split()[1]


def _version_key(v: str) -> Tuple[int, ...]:
    """"2.34" -> (2, 34); parts that are not numbers count as 0."""
    return tuple(int(p) if p.isdigit() else 0 for p in v.split("."))


def glibc_message(needed: str, loader_said: str = "") -> str:
    """The words for a wheel whose files need glibc ``needed`` on a system with an older one (or none)."""
    have = system_glibc()
    have_words = f"glibc {have}" if have else "no glibc (another C library)"
    msg = (f"comem: this wheel's native files need glibc >= {needed}, and this system has {have_words}. "
           f"Install a wheel built for an older glibc (its manylinux_2_X tag, X <= the system's), "
           f"or build comem here from source (docs/install.md).")
    if loader_said:
        msg += f"\nThe loader said: {loader_said}"
    return msg


def glibc_shortfall() -> Optional[str]:
    """glibc_message() when the wheel's build-info names a newer glibc than this system's, else None.

    None outside a wheel (no build-info) too: there the files were built on this system.
    """
    info = build_info()
    if not info or "glibc" not in info:
        return None
    have = system_glibc()
    if have is not None and _version_key(have) >= _version_key(info["glibc"]):
        return None
    return glibc_message(info["glibc"])


def _exec(name: str) -> NoReturn:
    """Replaces this process with the program ``name``, passing the arguments and the environment."""
    problem = glibc_shortfall()
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(1)
    try:
        path = binary_path(name)
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        sys.exit(127)
    try:
        if _WINDOWS:  # no exec: the program runs as a child, its status becomes ours
            sys.exit(subprocess.call([path] + sys.argv[1:]))
        os.execv(path, [name] + sys.argv[1:])
    except OSError as e:
        print(f"comem: cannot run {path}: {e.strerror}", file=sys.stderr)
        sys.exit(126)


def comem_main() -> NoReturn:
    """The ``comem`` console script: runs the bundled ``comem`` CLI with this command line."""
    _exec("comem")


def comemd_main() -> NoReturn:
    """The ``comemd`` console script: runs the bundled ``comemd`` daemon with this command line."""
    _exec("comemd")
