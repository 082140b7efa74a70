"""docs/comfyui-api.md classifies every public name of ComfyUI 783545f6's and v0.39's memory surface.

The real modules are imported (``COMFYUI_DIR``, the 783545f6 era or v0.39: their
``free_memory`` takes ``for_dynamic``); their public names are listed (the
module-level names of ``comfy.model_management``, ``comfy.memory_management``
and ``comfy.pinned_memory`` that the module itself defines or assigns, and the
methods and properties of ``ModelPatcher``, ``ModelPatcherDynamic`` and
``LoadedModel``); the document's tables are parsed; the test fails naming each
name the document does not classify, each classified name that no longer
exists, each name classified twice, and each relationship outside the four
words the document defines. A name only one of the two has is marked in the
document, ``(v0.39 only)`` or ``(783545f6 only)`` after it, and is expected
in that era alone.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import types
import unittest
from typing import Any, Dict, List, Set, Tuple

import support

DOC = os.path.join(support.SOURCE, "docs", "comfyui-api.md")
RELATIONS = ("wrapped", "answered", "read", "not needed")
PLANNED = "(planned, issue 19)"
SECTIONS = ("comfy.model_management", "comfy.memory_management", "comfy.pinned_memory", "ModelPatcher",
            "ModelPatcherDynamic", "LoadedModel")


def module_names(mod: types.ModuleType) -> Set[str]:
    """Public names the module defines or assigns (not modules, nor functions/classes imported from elsewhere)."""
    out = set()
    for n, v in vars(mod).items():
        if n.startswith("_") or isinstance(v, types.ModuleType) or type(v).__name__ == "_Feature":
            continue
        defined_in = getattr(v, "__module__", None) if (inspect.isfunction(v) or inspect.isclass(v)) else None
        if defined_in is not None and defined_in != mod.__name__:
            continue
        out.add(n)
    return out


def class_names(cls: type) -> Set[str]:
    """Public methods and properties the class itself defines (overrides included)."""
    return {n for n in vars(cls) if not n.startswith("_")}


ERA_MARK = re.compile(r"`([^`]+)`(?:\s*\((v0\.39|783545f6) only\))?")


def parse(text: str) -> Tuple[Dict[str, Dict[str, str]], List[str]]:
    """``{section: {name: relationship}}`` from the document's tables, and the problems found reading them.
    A name marked for one era only is keyed ``name@era``."""
    table: Dict[str, Dict[str, str]] = {s: {} for s in SECTIONS}
    problems: List[str] = []
    section = None
    for lineno, line in enumerate(text.splitlines(), 1):
        heading = re.match(r"^##\s+`([^`]+)`\s*$", line)
        if heading:
            section = heading.group(1) if heading.group(1) in SECTIONS else None
            if section is None:
                problems.append(f"line {lineno}: unknown section {heading.group(1)!r}")
            continue
        if section is None or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("name", "") or set(cells[0]) <= set("-: "):
            continue
        names = [f"{n}@{era}" if era else n for n, era in ERA_MARK.findall(cells[0])]
        rel = cells[1]
        base = rel.replace(PLANNED, "").strip()
        if base not in RELATIONS:
            problems.append(f"line {lineno}: relationship {rel!r} is not one of {RELATIONS} (optionally {PLANNED})")
        if not cells[2]:
            problems.append(f"line {lineno}: no reason given for {names}")
        if not names:
            problems.append(f"line {lineno}: a row names nothing")
        for n in names:
            if n in table[section]:
                problems.append(f"{section}.{n} is classified twice (line {lineno})")
            table[section][n] = rel
    return table, problems


def check(actual: Dict[str, Set[str]], text: str, era: str = "783545f6") -> List[str]:
    """Every disagreement between the real surface of ``era`` and the document."""
    table, problems = parse(text)
    for section in SECTIONS:
        have = actual[section]
        doc = set()
        for key in table[section]:
            name, _, only = key.partition("@")
            if not only or only == era:
                doc.add(name)
        problems += [f"{section}.{n} is not classified in docs/comfyui-api.md" for n in sorted(have - doc)]
        problems += [f"{section}.{n} is classified but ComfyUI no longer has it" for n in sorted(doc - have)]
    return problems


class TestComfyUIApi(unittest.TestCase):
    def setUp(self) -> None:
        d = support.need_comfyui(self)
        support.need_torch(self)
        support.import_comfy()
        import comfy.model_management as mm
        if "for_dynamic" not in inspect.signature(mm.free_memory).parameters:
            self.skipTest(f"docs/comfyui-api.md describes ComfyUI 783545f6 and v0.39 (dynamic VRAM); {d} is older")
        import comfy.memory_management
        import comfy.model_patcher as mp
        import comfy.pinned_memory
        self.actual = {
            "comfy.model_management": module_names(mm),
            "comfy.memory_management": module_names(comfy.memory_management),
            "comfy.pinned_memory": module_names(comfy.pinned_memory),
            "ModelPatcher": class_names(mp.ModelPatcher),
            "ModelPatcherDynamic": class_names(mp.ModelPatcherDynamic),
            "LoadedModel": class_names(mm.LoadedModel),
        }
        with open(DOC, encoding="utf-8") as f:
            self.text = f.read()

    def test_every_name_is_classified(self) -> None:
        problems = check(self.actual, self.text, support.comfyui_era() or "")
        self.assertEqual(problems, [], "\n".join(problems))

    def test_the_surface_was_read(self) -> None:
        # An empty reading would pass: make sure the names comem depends on are there.
        self.assertGreater(len(self.actual["comfy.model_management"]), 100)
        for section, name in (("comfy.model_management", "free_memory"), ("comfy.model_management", "EXTRA_RESERVED_VRAM"),
                              ("comfy.memory_management", "aimdo_enabled"), ("ModelPatcherDynamic", "loaded_size"),
                              ("LoadedModel", "model_unload")):
            self.assertIn(name, self.actual[section])

    def test_the_check_can_fail(self) -> None:
        actual = {k: set(v) for k, v in self.actual.items()}
        actual["comfy.model_management"].add("free_memory_harder")
        text = self.text.replace("| `soft_empty_cache` | read |", "| `soft_empty_caches` | read |")
        text = text.replace("| `model_load` | wrapped |", "| `model_load` | patched |")
        era = support.comfyui_era() or ""
        problems = check(actual, text, era)
        joined = "\n".join(problems)
        for expected in ("comfy.model_management.free_memory_harder is not classified",
                         "comfy.model_management.soft_empty_cache is not classified",
                         "comfy.model_management.soft_empty_caches is classified but ComfyUI no longer has it",
                         "relationship 'patched'"):
            self.assertIn(expected, joined)
        # A name marked for the other era only must not be here; one marked for this era must be.
        other = "783545f6" if era == "v0.39" else "v0.39"
        marked = self.text.replace("| `soft_empty_cache` | read |", f"| `soft_empty_cache` ({other} only) | read |")
        self.assertIn("comfy.model_management.soft_empty_cache is not classified", "\n".join(check(self.actual, marked, era)))
        marked = self.text.replace("| `soft_empty_cache` | read |", f"| `soft_empty_cache` ({era} only) | read |")
        self.assertEqual(check(self.actual, marked, era), check(self.actual, self.text, era))

    def test_what_the_adapter_wraps_is_classified_wrapped(self) -> None:
        # The adapter's own list (adapter.py's install) against the document's.
        table, _ = parse(self.text)
        for name in ("free_memory", "load_models_gpu", "get_torch_device", "get_free_memory", "get_total_memory"):
            self.assertEqual(table["comfy.model_management"][name], "wrapped", name)
        self.assertEqual(table["LoadedModel"]["model_load"], "wrapped")
        from comem.comfy.standin import SURFACE
        for name in sorted(SURFACE & self.actual["ModelPatcher"]):
            self.assertEqual(table["ModelPatcher"][name], "answered", f"the stand-in answers ModelPatcher.{name}")


if __name__ == "__main__":
    unittest.main()
