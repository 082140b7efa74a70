"""comem.aimdo beside the real comfy-aimdo: every public name and every signature, release by release.

The comfy_aimdo this Python imports (0.4.13 in .venv, the newest in
.venv-aimdo-new) is read in-process; when ``COMEM_PYTHON_AIMDO_NEW`` names
another Python, this file runs there too (``python test_aimdo_api.py --dump``
prints that Python's aimdo surface as JSON), so one run covers both releases.
A public name of aimdo must be offered by comem.aimdo with the same kind and
a compatible signature (the same parameters, in order, of the same kinds,
with defaults where aimdo has them; comem may add trailing ones with
defaults), or be listed in ``comem.aimdo.NOT_PROVIDED`` with a reason. The
names ComfyUI 783545f6 reaches (``comfy_aimdo.<module>.<name>`` in its sources,
and the members it calls on aimdo's objects) are checked the same way. Both
tables are checked for stale rows. No GPU is needed: nothing of aimdo is
initialised, only imported (its modules import with ``control.lib`` unset).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import types
import unittest
from typing import Any, Dict, List, Optional

MODULES = ("control", "model_vbar", "torch", "host_buffer", "vram_buffer", "model_mmap", "malloc_graph", "storage")

#: Members ComfyUI 783545f6 calls on aimdo's objects (not visible as ``comfy_aimdo.x.y`` in its source):
#: from comfy/model_patcher.py, model_management.py, pinned_memory.py, memory_management.py, ops.py, utils.py.
COMFYUI_MEMBER_USES = {
    "model_vbar.ModelVBAR": ("alloc", "prioritize", "loaded_size", "free_memory"),
    "vram_buffer.VRAMBuffer": ("get", "size"),
    "host_buffer.HostBuffer": ("extend", "truncate", "read_file_slice", "get_raw_address"),
    "model_mmap.ModelMMAP": ("get", "get_file_handle"),
}
#: What v0.39 adds (comfy/model_prefetch.py, on the graph control.record / malloc_graph.record returns).
COMFYUI_V039_MEMBER_USES = {
    "malloc_graph.MallocGraph": ("push", "pop", "abort", "pause", "resume", "use_stream", "iterate", "rogue_count"),
}
#: The calls ComfyUI 783545f6's main.py makes first (it falls back on TypeError, but should not need to).
COMFYUI_CALLS = {
    "control.init": {"simple_vram_headroom": None, "nvml_pressure": True},
    "control.init_devices": {"device_ids": [(0, 0)]},
}
SIMPLE_DEFAULTS = (type(None), bool, int, float, str)


# ---- reading a surface (runs in this Python, or in the other one with --dump) ----

def _imported(module: str, name: str, value: Any) -> bool:
    """True for a module, or a function/class that another module defines under the same name."""
    if isinstance(value, types.ModuleType) or type(value).__name__ == "_Feature":
        return True
    defined_in = getattr(value, "__module__", None)
    if not isinstance(defined_in, str) or defined_in == module:
        return False
    owner = sys.modules.get(defined_in)
    return owner is not None and getattr(owner, name, None) is value


def _params(fn: Any, drop_self: bool) -> Optional[List[List[Any]]]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    out = []
    for i, p in enumerate(sig.parameters.values()):
        if drop_self and i == 0 and p.name in ("self", "cls"):
            continue
        has_default = p.default is not inspect.Parameter.empty
        default = repr(p.default) if has_default and isinstance(p.default, SIMPLE_DEFAULTS) else None
        out.append([p.name, p.kind.name, has_default, default])
    return out


def _describe(value: Any, member: bool = False) -> Dict[str, Any]:
    if isinstance(value, property):
        return {"kind": "property"}
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if inspect.isclass(value):
        members = {}
        for n, v in vars(value).items():
            if not n.startswith("_"):
                members[n] = _describe(v, member=True)
        init = value.__dict__.get("__init__")
        return {"kind": "class", "params": _params(init, True) if init is not None else None, "members": members}
    if inspect.isfunction(value) or inspect.isbuiltin(value) or callable(value):
        return {"kind": "function", "params": _params(value, member)}
    return {"kind": "value"}


def surface(package: str) -> Dict[str, Any]:
    """``{"version": ..., "modules": {module: {name: description}}}`` of a package shaped like comfy_aimdo."""
    modules: Dict[str, Any] = {}
    for m in MODULES:
        try:
            mod = importlib.import_module(f"{package}.{m}")
        except ImportError:
            continue
        names = {}
        for n, v in vars(mod).items():
            if n.startswith("_") or _imported(mod.__name__, n, v):
                continue
            names[n] = _describe(v)
        modules[m] = names
    try:
        version = importlib.import_module(f"{package}._version").__version__
    except ImportError:
        version = "unknown"
    return {"version": version, "modules": modules}


if __name__ == "__main__" and sys.argv[1:] == ["--dump"]:
    json.dump(surface("comfy_aimdo"), sys.stdout)
    sys.exit(0)


# ---- the comparison ----

import support  # noqa: E402  (not needed by --dump)
from support import MiB  # noqa: E402


def covered(table: Dict[str, str], qualname: str) -> bool:
    """True when ``qualname`` (``module.name.member``) or a prefix of it is a row of ``table``."""
    parts = qualname.split(".")
    return any(".".join(parts[:i]) in table for i in range(1, len(parts) + 1))


def lookup(surf: Dict[str, Any], qualname: str) -> Optional[Dict[str, Any]]:
    """The description of ``module``, ``module.name`` or ``module.Class.member`` in a surface, or None."""
    parts = qualname.split(".")
    mod = surf["modules"].get(parts[0])
    if mod is None:
        return None
    if len(parts) == 1:
        return {"kind": "module"}
    d = mod.get(parts[1])
    for p in parts[2:]:
        if d is None or d.get("kind") != "class":
            return None
        d = d["members"].get(p)
    return d


def signature_problems(where: str, real: Optional[List[List[Any]]], ours: Optional[List[List[Any]]]) -> List[str]:
    """What makes ``ours`` unable to take every call ``real`` takes (same names, order, kinds, defaults)."""
    if real is None or ours is None:
        return []
    out = []
    for i, (name, kind, has_default, default) in enumerate(real):
        if i >= len(ours):
            out.append(f"{where}: comem.aimdo lacks parameter {name!r} (aimdo: position {i})")
            continue
        oname, okind, ohas, odefault = ours[i]
        if oname != name or okind != kind:
            out.append(f"{where}: parameter {i} is {oname!r} ({okind}); aimdo's is {name!r} ({kind})")
        elif has_default and not ohas:
            out.append(f"{where}: parameter {name!r} needs a default (aimdo's is {default})")
        elif has_default and default is not None and odefault is not None and default != odefault:
            out.append(f"{where}: parameter {name!r} defaults to {odefault}; aimdo's to {default}")
        elif ohas and not has_default:
            out.append(f"{where}: parameter {name!r} has a default aimdo's lacks")
    for name, kind, has_default, _ in ours[len(real):]:
        if not has_default and kind not in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            out.append(f"{where}: comem.aimdo adds a required parameter {name!r}")
    return out


def compare(real: Dict[str, Any], ours: Dict[str, Any], not_provided: Dict[str, str]) -> List[str]:
    """Every difference between aimdo's surface and comem.aimdo's that the table does not explain."""
    problems = []
    tag = f"aimdo {real['version']}"

    def walk(qual: str, r: Dict[str, Any]) -> None:
        if covered(not_provided, qual):
            return
        o = lookup(ours, qual)
        if o is None:
            problems.append(f"{tag}: {qual} ({r['kind']}) is neither in comem.aimdo nor in comem.aimdo.NOT_PROVIDED")
            return
        if r["kind"] != o["kind"] and {r["kind"], o["kind"]} != {"function", "value"}:
            problems.append(f"{tag}: {qual} is a {r['kind']} in aimdo, a {o['kind']} in comem.aimdo")
            return
        if r["kind"] == "function" and o["kind"] == "function":
            problems.extend(f"{tag}: {p}" for p in signature_problems(qual, r.get("params"), o.get("params")))
        if r["kind"] == "class":
            problems.extend(f"{tag}: {p}" for p in signature_problems(qual + "()", r.get("params"), o.get("params")))
            for m, d in r["members"].items():
                walk(f"{qual}.{m}", d)

    for module, names in real["modules"].items():
        if covered(not_provided, module):
            continue
        if module not in ours["modules"]:
            problems.append(f"{tag}: module {module} is neither in comem.aimdo nor in comem.aimdo.NOT_PROVIDED")
            continue
        for n, d in names.items():
            walk(f"{module}.{n}", d)
    return problems


def comem_surface() -> Dict[str, Any]:
    s = surface("comem.aimdo")
    s["version"] = "comem"
    return s


def need_aimdo(case: unittest.TestCase) -> None:
    support.need_torch(case)
    try:
        import comfy_aimdo.control  # noqa: F401
    except ImportError:
        case.skipTest("comfy_aimdo is not installed: run in the environment scripts/venv.sh makes")


class TestAgainstInstalledAimdo(unittest.TestCase):
    """The comfy_aimdo of this Python."""

    def setUp(self) -> None:
        need_aimdo(self)
        import comem.aimdo
        self.tables = comem.aimdo
        self.real = surface("comfy_aimdo")
        self.ours = comem_surface()

    def test_every_public_name_is_provided_or_listed(self) -> None:
        problems = compare(self.real, self.ours, self.tables.NOT_PROVIDED)
        self.assertEqual(problems, [], "\n".join(problems))

    def test_the_surface_was_read(self) -> None:
        # A reader that sees nothing would pass the comparison: make sure it sees aimdo's core.
        for qual in ("control.init", "control.init_devices", "model_vbar.ModelVBAR.fault", "model_vbar.vbars_analyze",
                     "vram_buffer.VRAMBuffer.get", "torch.aimdo_to_tensor"):
            self.assertIsNotNone(lookup(self.real, qual), f"{qual} not found in aimdo {self.real['version']}")

    def test_a_missing_name_fails(self) -> None:
        fake = json.loads(json.dumps(self.real))
        fake["modules"]["control"]["set_everything_right"] = {"kind": "function", "params": []}
        fake["modules"]["model_vbar"]["ModelVBAR"]["members"]["fault"]["params"].append(["flags", "POSITIONAL_OR_KEYWORD",
                                                                                         False, None])
        problems = compare(fake, self.ours, self.tables.NOT_PROVIDED)
        self.assertTrue(any("control.set_everything_right" in p for p in problems), problems)
        self.assertTrue(any("ModelVBAR.fault" in p and "flags" in p for p in problems), problems)


class TestAgainstNewestAimdo(unittest.TestCase):
    """The comfy_aimdo of ``COMEM_PYTHON_AIMDO_NEW`` (the newest release), read by that Python."""

    def test_every_public_name_is_provided_or_listed(self) -> None:
        need_aimdo(self)
        other = os.environ.get("COMEM_PYTHON_AIMDO_NEW")
        if not other or not os.access(other, os.X_OK):
            self.skipTest("COMEM_PYTHON_AIMDO_NEW names no Python (scripts/venv.sh makes .venv-aimdo-new)")
        out = subprocess.run([other, os.path.abspath(__file__), "--dump"], capture_output=True, text=True, timeout=300,
                             env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        self.assertEqual(out.returncode, 0, f"{other} could not read its comfy_aimdo:\n{out.stderr[-3000:]}")
        real = json.loads(out.stdout)
        import comem.aimdo
        problems = compare(real, comem_surface(), comem.aimdo.NOT_PROVIDED)
        self.assertEqual(problems, [], "\n".join(problems))


class TestTables(unittest.TestCase):
    """NOT_PROVIDED and LIMITS say only what is true, and the document prints them."""

    def setUp(self) -> None:
        need_aimdo(self)
        import comem.aimdo
        self.tables = comem.aimdo
        self.ours = comem_surface()
        self.real = surface("comfy_aimdo")

    def test_not_provided_rows_are_not_provided(self) -> None:
        for qual, why in self.tables.NOT_PROVIDED.items():
            self.assertTrue(why.strip(), f"NOT_PROVIDED[{qual!r}] gives no reason")
            self.assertIsNone(lookup(self.ours, qual), f"{qual} is listed as not provided, but comem.aimdo has it")

    def test_limit_rows_name_what_comem_provides(self) -> None:
        for row, how in self.tables.LIMITS.items():
            qual, _, param = row.partition("(")
            d = lookup(self.ours, qual)
            self.assertIsNotNone(d, f"LIMITS names {qual}, which comem.aimdo does not have")
            if param:
                names = [p[0] for p in (d.get("params") or [])]
                self.assertIn(param.rstrip(")"), names, f"LIMITS names {row}: no such parameter")

    def test_document_lists_both_tables(self) -> None:
        path = os.path.join(support.SOURCE, "docs", "aimdo-versions.md")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        rows = set(re.findall(r"^\|\s*`([^`]+)`\s*\|", text, re.M))
        for qual in list(self.tables.NOT_PROVIDED) + list(self.tables.LIMITS):
            self.assertIn(qual, rows, f"docs/aimdo-versions.md does not list {qual}")


class TestComfyUIUses(unittest.TestCase):
    """What ComfyUI 783545f6 and v0.39 reach in aimdo is in comem.aimdo or in NOT_PROVIDED."""

    def setUp(self) -> None:
        self.dir = support.need_comfyui(self, support.DYNAMIC_ERAS)
        need_aimdo(self)
        import comem.aimdo
        self.tables = comem.aimdo
        self.ours = comem_surface()
        self.real = surface("comfy_aimdo")

    def uses(self) -> List[str]:
        found = set()
        for root, dirs, files in os.walk(self.dir):
            dirs[:] = [d for d in dirs if not d.startswith((".", "tests"))]
            for f in files:
                if f.endswith(".py"):
                    with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
                        text = fh.read()
                    found.update(m.group(1) for m in re.finditer(r"\bcomfy_aimdo\.(\w+\.\w+)", text))
                    # v0.39's comfy/storage.py: `from comfy_aimdo.storage import fast_disk`
                    found.update(f"{m.group(1)}.{m.group(2)}" for m in
                                 re.finditer(r"\bfrom\s+comfy_aimdo\.(\w+)\s+import\s+(\w+)", text))
        return sorted(found)

    def test_module_level_uses(self) -> None:
        uses = self.uses()
        self.assertGreater(len(uses), 10, "ComfyUI's uses of comfy_aimdo were not found")
        missing = [u for u in uses if lookup(self.ours, u) is None and not covered(self.tables.NOT_PROVIDED, u)]
        self.assertEqual(missing, [], f"ComfyUI {support.comfyui_era()} uses these, which comem.aimdo neither "
                         "offers nor lists")

    def test_member_uses(self) -> None:
        uses = dict(COMFYUI_MEMBER_USES, **(COMFYUI_V039_MEMBER_USES if support.comfyui_era() == "v0.39" else {}))
        for cls, members in uses.items():
            for m in members:
                qual = f"{cls}.{m}"
                self.assertIsNotNone(lookup(self.real, qual), f"{qual} is not in aimdo {self.real['version']}: "
                                     "COMFYUI_MEMBER_USES is stale")
                self.assertTrue(lookup(self.ours, qual) is not None or covered(self.tables.NOT_PROVIDED, qual),
                                f"ComfyUI 783545f6 calls {qual}, which comem.aimdo neither offers nor lists")

    def test_main_py_calls_bind(self) -> None:
        import comem.aimdo.control as control
        for qual, kwargs in COMFYUI_CALLS.items():
            fn = getattr(control, qual.split(".")[1])
            inspect.signature(fn).bind(**kwargs)  # a TypeError here is ComfyUI's fallback path, not its first


class TestHostBuffer(unittest.TestCase):
    """comem.aimdo.host_buffer's HostBuffer as ComfyUI v0.39 drives it: made empty, grown pin by pin,
    viewed as a tensor, filled from a file, cut back (on the CPU: no page locks to take)."""

    def setUp(self) -> None:
        support.need_torch(self)
        from comem.aimdo import host_buffer, torch as atorch
        self.hb, self.atorch = host_buffer, atorch

    def test_grow_view_read_and_cut(self) -> None:
        import tempfile
        empty = self.hb.HostBuffer(0, 0, 0)  # what ModelPatcherDynamic makes for each pool at start
        self.assertEqual(empty.size, 0)
        with self.assertRaises(RuntimeError):
            empty.extend(1)  # nothing reserved: ComfyUI catches this and steals a pin instead
        buf = self.hb.HostBuffer(0, 64 * MiB, 3 * MiB)
        base = buf.get_raw_address()
        self.assertEqual(buf.extend(size=MiB, register=False), base)
        self.assertEqual(buf.extend(size=MiB, register=False), base + MiB)  # the new bytes' address
        self.assertEqual(buf.size, 2 * MiB)
        view = self.atorch.hostbuf_to_tensor(buf)
        self.assertEqual(view.numel(), 2 * MiB)
        view[:] = 5
        data = bytes(range(256)) * 4096  # 1 MiB of a known pattern
        with tempfile.TemporaryFile() as f:
            f.write(b"x" * 100 + data)
            f.flush()
            buf.read_file_slice(f, 100, MiB, offset=2 * MiB)  # past the end in use: the buffer grows to cover it
            self.assertEqual(buf.size, 3 * MiB)
            tail = self.atorch.hostbuf_to_tensor(buf)[2 * MiB:]
            self.assertEqual(bytes(tail.numpy()), data)
            with self.assertRaises(RuntimeError):
                buf.read_file_slice(f, 0, 2 * MiB, offset=2 * MiB)  # outside the reservation
            with self.assertRaises(RuntimeError):
                buf.read_file_slice(f, 100 + MiB - 10, 100, offset=2 * MiB)  # the file ends short of the slice
        self.assertEqual(int(view[0]), 5)  # the first pin's bytes are untouched
        buf.truncate(MiB, do_unregister=False)
        self.assertEqual(buf.size, MiB)
        self.assertEqual(buf.extend(size=MiB, register=False), base + MiB)  # the buffer never moves
        again = self.atorch.hostbuf_to_tensor(buf)
        self.assertEqual(int(again[MiB:].sum()), 0, "the cut pages went back: they read as zeros")
        self.assertEqual(int(again[:MiB].sum()), 5 * MiB)
        with self.assertRaises(RuntimeError):
            buf.truncate(4 * MiB)

    def test_registration_is_tracked(self) -> None:
        buf = self.hb.HostBuffer(0, 0, 2 * MiB)
        buf.extend(MiB, register=True)  # no GPU here: nothing to lock, but the range is recorded
        with self.assertRaises(RuntimeError):
            buf.register(MiB, MiB)  # not in use
        buf.unregister(0)
        with self.assertRaises(RuntimeError):
            buf.unregister(0)

    def test_files_written_from_host_memory(self) -> None:
        import tempfile
        buf = self.hb.HostBuffer(4096, 0, 4096)
        self.atorch.hostbuf_to_tensor(buf)[:] = 9
        with tempfile.TemporaryFile() as f:
            self.hb.write_host_to_file(f, 10, 4096, buf.get_raw_address())
            f.seek(0)
            self.assertEqual(f.read(), b"\0" * 10 + b"\x09" * 4096)

    def test_record_refuses_and_names_the_way_out(self) -> None:
        from comem.aimdo import control, malloc_graph
        for fn in (malloc_graph.record, control.record):
            with self.assertRaises(RuntimeError) as cm:
                fn(None, assert_graph_breaks=True)
            self.assertIn("--disable-comfy-compiler", str(cm.exception))


class TestComfyUIOverComemAimdo(unittest.TestCase):
    """ComfyUI v0.39 starts with comem.aimdo as its comfy_aimdo (python -m comem.aimdo main.py), the real
    comfy-aimdo installed beside it and never imported (issue 39 item 3)."""

    def test_v039_starts(self) -> None:
        import tempfile
        d = support.need_comfyui(self, "v0.39")
        support.need_torch(self)
        base = tempfile.mkdtemp(prefix="comem-v039-")
        self.addCleanup(__import__("shutil").rmtree, base, True)
        os.makedirs(os.path.join(base, "custom_nodes"))
        probe = os.path.join(base, "custom_nodes", "aimdo_probe.py")
        with open(probe, "w", encoding="utf-8") as f:  # a custom node that says whose aimdo ComfyUI imported
            f.write("import sys\n"
                    "print('probe:', sys.modules['comfy_aimdo.control'].__name__, "
                    "sys.modules['comfy_aimdo.host_buffer'].__name__, sys.modules['comfy_aimdo.malloc_graph'].__name__)\n"
                    "NODE_CLASS_MAPPINGS = {}\n")
        # The era's own folders (v0.39's comfy-aimdo 0.5.6) stay off the path: the real aimdo found is .venv's.
        pinned = set(support.comfyui_pythonpath())
        path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in pinned]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
        out = subprocess.run([sys.executable, "-m", "comem.aimdo", "main.py", "--cpu", "--quick-test-for-ci",
                              "--base-directory", base], cwd=d, env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stdout[-3000:] + out.stderr[-3000:])
        self.assertIn("probe: comem.aimdo.control comem.aimdo.host_buffer comem.aimdo.malloc_graph",
                      out.stdout + out.stderr)

    def test_the_launcher_refuses_what_it_cannot_run(self) -> None:
        for args, code, text in (([], 2, "usage: python -m comem.aimdo"), (["/no/such/main.py"], 2, "no such script"),
                                 (["--help"], 0, "usage: python -m comem.aimdo")):
            out = subprocess.run([sys.executable, "-m", "comem.aimdo", *args], capture_output=True, text=True,
                                 timeout=60)
            self.assertEqual(out.returncode, code, out.stderr)
            self.assertIn(text, out.stdout + out.stderr)

    def test_the_real_aimdo_imported_first_is_refused(self) -> None:
        need_aimdo(self)
        code = ("import comfy_aimdo.control, comem.aimdo\n"
                "try:\n    comem.aimdo.as_comfy_aimdo()\nexcept RuntimeError as e:\n    print(e)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        self.assertIn("the real comfy-aimdo is imported already (", out.stdout, out.stderr)
        self.assertIn("comfy_aimdo.control", out.stdout)


class TestNewPieces(unittest.TestCase):
    """The names added for aimdo's newer surface work on the simulated card."""

    def setUp(self) -> None:
        support.need_torch(self)
        self.machine = support.Machine("sim:1GiB:reserved=64MiB:ctx=64MiB").__enter__()
        self.addCleanup(self.machine.__exit__, None, None, None)
        os.environ["COMEM_AIMDO_BACKEND"] = "sim"
        self.addCleanup(os.environ.pop, "COMEM_AIMDO_BACKEND", None)
        from comem.aimdo import control
        self.control = control
        self.assertTrue(control.init(simple_vram_headroom=128 << 20, nvml_pressure=True))
        self.addCleanup(control.deinit)
        self.assertTrue(control.init_devices([(0, 0)]))

    def test_headroom_getter_and_setter(self) -> None:
        c = self.control
        self.assertEqual(c.get_simple_vram_headroom(), 128 << 20)
        c.set_simple_vram_headroom(300 << 20)
        self.assertEqual(c.get_simple_vram_headroom(), 300 << 20)
        self.assertEqual(c.get_devctx(0).simple_headroom, 300 << 20)
        self.assertEqual(c.lib.get_simple_vram_headroom(), 300 << 20)
        with self.assertRaises(ValueError):
            c.set_simple_vram_headroom((1 << 60) + 1)
        self.assertTrue(c.nvml_pressure_requested)

    def test_vram_buffer_grows_and_is_never_evicted(self) -> None:
        from comem.aimdo import model_vbar, vram_buffer
        p = self.control.get_devctx(0)
        buf = vram_buffer.VRAMBuffer(256 << 20, 0)
        owner, addr, size = buf.get(5 << 20)
        self.assertIs(owner, buf)
        self.assertEqual((addr, size), (buf.base_addr, 5 << 20))
        self.assertEqual(buf.size(), 16 << 20)
        buf.get(20 << 20, offset=8 << 20)
        self.assertEqual(buf.size(), 32 << 20)
        self.assertEqual(p.usage, 32 << 20)
        v = model_vbar.ModelVBAR(64 << 20, 0)
        weight = v.alloc(64 << 20)
        self.assertIsNotNone(model_vbar.vbar_fault(weight))
        model_vbar.vbar_unpin(weight)
        model_vbar.vbars_reset_watermark_limits()
        p.free_memory(1 << 40)  # everything evictable goes; the buffer's pinned pages stay
        self.assertEqual(v.loaded_size(), 0)
        self.assertEqual(p.usage, 32 << 20)
        buf.get(40 << 20)  # grows again after the limits were reset
        self.assertEqual(buf.size(), 48 << 20)
        with self.assertRaises(RuntimeError):
            buf.get(300 << 20)
        v.close()
        v.close()

    def test_pageout_callback_is_refused(self) -> None:
        from comem.aimdo import model_vbar
        with self.assertRaises(NotImplementedError):
            model_vbar.ModelVBAR(64 << 20, 0, pageout_callback=lambda off, n: None)
        model_vbar.ModelVBAR(64 << 20, 0).prioritize(malloc_async_clamp=1 << 20)

    def test_model_mmap(self) -> None:
        import ctypes
        import tempfile
        from comem.aimdo import model_mmap
        with tempfile.NamedTemporaryFile() as f:
            f.write(b"comem-weights" * 1000)
            f.flush()
            m = model_mmap.ModelMMAP(f.name)
            self.assertEqual(ctypes.string_at(m.get(), 13), b"comem-weights")
            self.assertEqual(os.fstat(m.get_file_handle()).st_size, 13000)
            self.assertTrue(m.bounce())
            self.assertEqual(ctypes.string_at(m.get() + 13, 5), b"comem")
            m.close()
        with self.assertRaises(RuntimeError):
            model_mmap.ModelMMAP("/nonexistent/model.safetensors")

    def test_storage_and_vendor(self) -> None:
        from comem.aimdo import storage
        self.assertIsNone(storage.fast_disk("/"))
        self.assertIn(self.control.detect_vendor(), (None, "cuda", "rocm"))


if __name__ == "__main__":
    unittest.main()
