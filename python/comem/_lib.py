"""Finding libcomem.so (comem.dll on Windows) and declaring the C API to ctypes.

The library is looked for, in order: the file named by ``COMEM_LIB``; the
wheel's own copy, ``comem/_native/lib/libcomem.so.0`` (``pip install``:
docs/install.md); next to this package (an installed tree that keeps
``libcomem.so`` beside it, or a ``lib/`` folder above it); the source tree's
``build/lib`` (after ``make``); and the dynamic loader's own search path. When
none loads, the ImportError lists every place that was tried and why it failed.
On Windows the same places hold ``comem.dll``, in ``bin/`` folders where Linux
has ``lib/`` (a DLL lives beside the programs), and the source tree's build is
``build-win/bin`` (``make windows-check``: docs/windows.md).

A wheel built on a newer glibc than this system's fails here with
:class:`GlibcTooOld`, naming the glibc it needs and the one this system has.

Every prototype is declared here once, so a call with a wrong argument type
fails in Python (``ctypes.ArgumentError``) instead of corrupting memory.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from ctypes import (POINTER, Structure, c_char_p, c_double, c_int, c_int32, c_int64, c_size_t, c_uint, c_uint8,
                    c_uint32, c_uint64, c_void_p)
from typing import List, Tuple

from . import _bin

_HERE = os.path.dirname(os.path.abspath(__file__))
_WINDOWS = sys.platform == "win32"
_WHY_BUNDLED = "bundled in the wheel"


def _layout(windows: bool) -> Tuple[str, str, str, str]:
    """(the library's file name, the wheel's copy, the folder an installed tree keeps it in, the source tree's build folder)."""
    if windows:
        return "comem.dll", os.path.join(_bin.NATIVE_DIR, "bin", "comem.dll"), "bin", os.path.join("build-win", "bin")
    return "libcomem.so", os.path.join(_bin.NATIVE_DIR, "lib", "libcomem.so.0"), "lib", os.path.join("build", "lib")


class GlibcTooOld(ImportError):
    """The wheel's libcomem.so.0 needs a newer glibc than this system's (raised by ``import comem``)."""


def _candidates(windows: bool = _WINDOWS) -> List[Tuple[str, str]]:
    """(path, why it is a candidate) in the order they are tried, on Windows (``windows``) or elsewhere."""
    name, bundled, installed, build = _layout(windows)
    out: List[Tuple[str, str]] = []
    env = os.environ.get("COMEM_LIB")
    if env:
        out.append((env, "COMEM_LIB"))
    out.append((bundled, _WHY_BUNDLED))
    out.append((os.path.join(_HERE, name), "next to the package"))
    up = _HERE
    for _ in range(4):  # <prefix>/lib/python3/dist-packages/comem -> <prefix>/lib
        up = os.path.dirname(up)
        out.append((os.path.join(up, installed, name), "an installed tree above the package"))
    # The source tree: python/comem -> <repo>/build/lib
    repo = os.path.dirname(os.path.dirname(_HERE))
    out.append((os.path.join(repo, build, name), "the source tree's build"))
    out.append((name, "the dynamic loader's path"))
    seen = set()
    uniq = []
    for path, why in out:
        key = os.path.normpath(path) if os.sep in path else path
        if key not in seen:
            seen.add(key)
            uniq.append((path, why))
    return uniq


def _glibc_needed(loader_said: str) -> str:
    """The newest glibc the wheel needs: its build-info's figure, or a newer one the loader names."""
    info = _bin.build_info() or {}
    versions = re.findall(r"GLIBC_([0-9]+(?:\.[0-9]+)+)", loader_said)
    if info.get("glibc"):
        versions.append(info["glibc"])
    if not versions:
        return "(unknown: the wheel has no build-info.json)"
    return max(versions, key=_bin._version_key)


def _load() -> Tuple[ctypes.CDLL, str]:
    tried = []
    for path, why in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"  {path} ({why}): no such file")
            continue
        if why == _WHY_BUNDLED:
            # Said before the loader tries: its own error names only the first missing version.
            short = _bin.glibc_shortfall()
            if short:
                raise GlibcTooOld(short)
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            if why == _WHY_BUNDLED and "GLIBC_" in str(e):
                raise GlibcTooOld(_bin.glibc_message(_glibc_needed(str(e)), str(e))) from e
            tried.append(f"  {path} ({why}): {e}")
            if why in ("COMEM_LIB", _WHY_BUNDLED):
                break  # an explicit choice, or the wheel's own copy, that fails is not silently replaced
    raise ImportError(f"comem: cannot load {_layout(_WINDOWS)[0]}; tried:\n" + "\n".join(tried) +
                      "\nInstall the wheel (docs/install.md), build it with `make` in the source tree, or set COMEM_LIB to its path.")


lib, path = _load()

# ---- callback type ----

RELEASE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_uint64, c_int, c_int64, POINTER(c_uint64), POINTER(c_int64),
                              c_size_t, POINTER(c_int64))


def _proto(name: str, restype, *argtypes) -> None:
    try:
        fn = getattr(lib, name)
    except AttributeError:
        raise ImportError(f"comem: {path} has no {name}: the binding and the library differ (an older "
                          f"libcomem?)") from None
    fn.restype = restype
    fn.argtypes = list(argtypes)


_P = c_void_p  # opaque handles
_I64P = POINTER(c_int64)

# common.h
_proto("comem_status_str", c_char_p, c_int)

# comem.h: the client
_proto("comem_client_open", c_int, c_char_p, c_int, c_char_p, c_int64, c_uint, POINTER(c_void_p))
_proto("comem_client_close", None, _P)
_proto("comem_client_connected", c_int, _P)
_proto("comem_client_session", c_uint64, _P)
_proto("comem_client_set_timeout", None, _P, c_int)
_proto("comem_take_reason", c_size_t, ctypes.c_char_p, c_size_t)
_proto("comem_client_map_device", c_int, _P, c_int, c_char_p)
_proto("comem_device_host_ram", c_int)
_proto("comem_constant", c_int64, c_char_p, POINTER(c_int))


def constant(name: str) -> int:
    """The library's value of its public constant ``COMEM_<name>`` (bindings never copy one)."""
    found = c_int()
    value = lib.comem_constant(name.encode(), ctypes.byref(found))
    if not found.value:
        raise ImportError(f"libcomem has no constant COMEM_{name}: the binding and the library differ")
    return int(value)


def _check_layout(record: type, prefix: str) -> None:
    """Refuses to load when this copy of a C record's layout is not the library's: its size, and each
    field's offset, as the library reports them (``<prefix>_SIZE``, ``<prefix>_OFFSET_<FIELD>``)."""
    size = constant(prefix + "_SIZE")
    if ctypes.sizeof(record) != size:
        raise ImportError(f"comem: {record.__name__} is {ctypes.sizeof(record)} bytes here and {size} in "
                          f"libcomem: the binding and the library differ")
    for field in record._fields_:  # type: ignore[attr-defined]
        here, there = getattr(record, field[0]).offset, constant(f"{prefix}_OFFSET_{field[0].upper()}")
        if here != there:
            raise ImportError(f"comem: {record.__name__}.{field[0]} is at byte {here} here and {there} in "
                              f"libcomem: the binding and the library differ")


class Admission(Structure):
    """comem_admission: one admission's decision, written by comem_admit_record and read by field name.

    Its layout is the library's, checked at import (``_check_layout``); the bound of ``asked`` is the
    library's ``ADMISSION_ASKED_MAX``.
    """
    _fields_ = [("grant", c_uint64), ("short_by", c_int64), ("fits", c_int64), ("need", c_int64),
                ("free_before", c_int64), ("free_after", c_int64), ("freed", c_int64), ("decided", c_int32),
                ("n_asked", c_int32), ("n_busy", c_int32), ("n_ids", c_int32),
                ("asked", c_uint64 * constant("ADMISSION_ASKED_MAX"))]


_check_layout(Admission, "ADMISSION")
_proto("comem_holder_add", c_int, _P, c_char_p, c_int, c_int, c_uint, RELEASE_FN, c_void_p, POINTER(c_uint64))
_proto("comem_holder_add_app", c_int, _P, c_char_p, c_int, c_int, c_uint, RELEASE_FN, c_void_p, POINTER(c_uint64))
_proto("comem_holder_remove", c_int, _P, c_uint64)
_proto("comem_holder_busy", c_int, _P, c_uint64, c_int, c_char_p)
_proto("comem_entry_add", c_int, _P, c_uint64, c_char_p, c_int64, c_int64, c_uint, POINTER(c_uint64))
_proto("comem_entry_remove", c_int, _P, c_uint64)
_proto("comem_entry_set_resident", c_int, _P, c_uint64, c_int64)
_proto("comem_entry_census", c_int, _P, c_uint64, c_int64, c_int64)
_proto("comem_holder_report", c_int, _P, c_uint64, c_int64, c_int64)
_proto("comem_admit_record", c_int, _P, c_int, c_uint64, c_int64, c_int64, c_int64, POINTER(c_uint64), c_size_t,
       c_int, POINTER(Admission))
_proto("comem_grant_done", c_int, _P, c_uint64, c_uint64, c_int64)
_proto("comem_pressure", c_int, _P, c_int, c_int64, c_int, _I64P)
_proto("comem_ask_release", c_int, _P, c_uint64, c_int64, c_int, _I64P, _I64P)
_proto("comem_pin_acquire", c_int, _P, c_uint64, c_int64, _I64P)
_proto("comem_pin_release", c_int, _P, c_uint64, c_int64)
_proto("comem_reserve", c_int, _P, c_int, _I64P, _I64P)
_proto("comem_status_json", c_int, _P, POINTER(c_void_p))
_proto("comem_wddm_report", c_int, _P)
_proto("comem_free", None, c_void_p)
_proto("comem_view_open", c_int, c_char_p, POINTER(c_void_p))
_proto("comem_view_read", c_int, _P, c_int, _I64P, _I64P, _I64P, _I64P)
_proto("comem_view_state", c_int, _P, _I64P)
_proto("comem_view_unregistered", c_int, _P, c_int, _I64P)
_proto("comem_view_granted", c_int, _P, c_int, _I64P)
_proto("comem_view_room", c_int, _P, c_int, _I64P)
_proto("comem_view_close", None, _P)
_proto("comem_client_view", c_int, _P, POINTER(c_void_p))
_proto("comem_coord_start", c_int, c_char_p, c_char_p, POINTER(c_void_p))
_proto("comem_coord_stop", None, _P)
_proto("comem_default_socket", c_int, ctypes.c_char_p, c_size_t)
_proto("comem_name_check", c_int, ctypes.c_char_p, ctypes.c_char_p, c_size_t)
_proto("comem_probe", c_int, ctypes.c_char_p, c_int, ctypes.c_char_p, c_size_t)
_proto("comem_probe_peer", c_int, ctypes.c_char_p, c_int, _I64P, POINTER(c_int), ctypes.c_char_p, c_size_t)
_proto("comem_default_socket_why", c_int, ctypes.c_char_p, c_size_t, ctypes.c_char_p, c_size_t)
_proto("comem_runtime_dir_why", c_int, ctypes.c_char_p, c_size_t, ctypes.c_char_p, c_size_t)

# pager.h
_proto("comem_pager_open", c_int, c_int, c_int, c_char_p, POINTER(c_void_p))
_proto("comem_pager_close", None, _P)
_proto("comem_pager_granularity", c_int64, _P)
_proto("comem_pager_set_simple_headroom", c_int, _P, c_int64)
_proto("comem_pager_simple_headroom", c_int64, _P)
_proto("comem_pager_set_extra_headroom", c_int, _P, c_int64)
_proto("comem_pager_set_device_poll", c_int, _P, c_int64, c_int64)
_proto("comem_pager_budget_deficit", c_int64, _P, c_int64)
_proto("comem_pager_usage", c_int64, _P)
_proto("comem_pager_set_keep", c_int, _P, c_int64)
_proto("comem_pager_keep", c_int64, _P)
_proto("comem_pager_kept", c_int64, _P)
_proto("comem_pager_reclaimable", c_int64, _P)
_proto("comem_pager_free_memory", c_int, _P, c_int64, _I64P)
_proto("comem_pager_reset_watermark_limits", c_int, _P)
_proto("comem_pager_stat", c_int64, _P, c_int)
_proto("comem_vbar_create", c_int, _P, c_int64, c_int64, POINTER(c_void_p))
_proto("comem_vbar_destroy", None, _P)
_proto("comem_vbar_base", c_uint64, _P)
_proto("comem_vbar_page_size", c_int64, _P)
_proto("comem_vbar_pages", c_int64, _P)
_proto("comem_vbar_size", c_int64, _P)
_proto("comem_vbar_fault", c_int, _P, c_int64, c_int64, POINTER(c_uint32), c_size_t)
_proto("comem_vbar_unpin", c_int, _P, c_int64, c_int64)
_proto("comem_vbar_prioritize", c_int, _P)
_proto("comem_vbar_deprioritize", c_int, _P)
_proto("comem_vbar_set_watermark", c_int, _P, c_int64)
_proto("comem_vbar_watermark", c_int64, _P)
_proto("comem_vbar_set_watermark_limit", c_int, _P, c_int64)
_proto("comem_vbar_watermark_limit", c_int64, _P)
_proto("comem_vbar_free_memory", c_int, _P, c_int64, _I64P)
_proto("comem_vbar_loaded_size", c_int64, _P)
_proto("comem_vbar_residency", c_int64, _P, POINTER(c_uint8), c_size_t)
_proto("comem_vbar_write", c_int, _P, c_int64, c_void_p, c_int64)
_proto("comem_vbar_read", c_int, _P, c_int64, c_void_p, c_int64)
_proto("comem_pager_attach", c_int, _P, _P, c_char_p)
_proto("comem_pager_holder", c_uint64, _P)
_proto("comem_pager_detach", c_int, _P)

# simcard.h
_proto("comem_simcard_open", c_int, c_char_p, POINTER(c_void_p))
_proto("comem_simcard_close", None, _P)
_proto("comem_simcard_count", c_int, _P)
_proto("comem_simcard_path", c_char_p, _P)
_proto("comem_simcard_alloc", c_int, _P, c_int, c_int64)
_proto("comem_simcard_free", c_int, _P, c_int, c_int64)
_proto("comem_simcard_touch", c_int, _P, c_int)
_proto("comem_simcard_release_self", c_int, _P)
_proto("comem_simcard_read", c_int, _P, c_int, c_int, _I64P, _I64P, _I64P, _I64P, POINTER(c_int))
_proto("comem_simcard_usage", c_int, _P, c_int, c_int32, _I64P, _I64P)

# calc.h: the rules, as plain functions
class CalcModel(Structure):
    """comem_calc_model."""
    _fields_ = [("size", c_int64), ("loaded", c_int64), ("refs", c_int64), ("device", c_int32),
                ("current_device", c_int32), ("flags", c_uint32), ("reserved", c_uint32)]


class CalcUnload(Structure):
    """comem_calc_unload."""
    _fields_ = [("entry", c_uint64), ("asked", c_double), ("partial_freed", c_double), ("detached", c_int32),
                ("tried_partial", c_int32)]


CALC_FREE_FN = ctypes.CFUNCTYPE(c_double, c_void_p)
CALC_PARTIAL_FN = ctypes.CFUNCTYPE(c_double, c_void_p, c_size_t, c_double)
CALC_DETACH_FN = ctypes.CFUNCTYPE(None, c_void_p, c_size_t)
_DP = POINTER(c_double)
_proto("comem_calc_reserve", c_int, c_int, c_double, c_int, c_double, _DP, _DP)
_proto("comem_calc_admission", c_int, c_double, c_int, c_double, c_double, _DP, _DP, _DP)
_proto("comem_calc_free_target", c_double, c_double, c_double)
_proto("comem_calc_nothing_budget", c_double)
_proto("comem_calc_full_load_sentinel", c_double)
_proto("comem_calc_needs_second_pass", c_int, c_double, c_double)
_proto("comem_calc_load_needs", c_int, POINTER(CalcModel), c_size_t, POINTER(c_int32), _I64P, _I64P, c_size_t,
       POINTER(c_size_t), POINTER(c_int))
_proto("comem_calc_lowvram_budget", c_int, c_int, c_int, c_uint, c_double, c_double, c_double, c_double, c_double,
       POINTER(c_int), _DP)
_proto("comem_calc_free_memory", c_int, c_int, c_double, c_int, c_uint, POINTER(CalcModel), c_size_t, CALC_FREE_FN,
       CALC_PARTIAL_FN, CALC_DETACH_FN, c_void_p, POINTER(c_size_t), POINTER(c_size_t), POINTER(CalcUnload),
       POINTER(c_size_t), _DP)
_proto("comem_calc_should_empty_cache", c_int, c_int, c_int, c_int, c_double, c_double)
