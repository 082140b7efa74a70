"""comem.calc: the rules through the binding (no ComfyUI needed), its argument checks and its callbacks."""

from __future__ import annotations

import unittest

import support  # noqa: F401  (puts the binding on sys.path)
from support import GiB, MiB

from comem import calc
import comem


class TestCalcBinding(unittest.TestCase):
    def test_vectors(self) -> None:
        self.assertEqual(calc.reserve(windows=True, total_vram_mib=16376), (734003200.0, 1592996659.2))
        self.assertEqual(calc.reserve(reserve_vram_gb=0.0), (0.0, 858993459.2))
        t = calc.admission(3 * GiB, 2 * GiB)
        self.assertEqual((t.extra_mem, t.minimum_memory_required), (3640655872.0, 2566914048.0))  # V3
        self.assertEqual(calc.free_target(6 * GiB, calc.admission(GiB).extra_mem), 8579868262.400001)
        b = calc.lowvram_budget(0.5 * GiB, 3 * GiB, 1493172224, 1278423859.2)  # V4i
        self.assertEqual(b, ("bytes", -956301312.0))
        self.assertEqual(calc.lowvram_budget(0.5 * GiB, 3 * GiB, 1493172224, 1278423859.2, rules="a125cd84"),
                         ("nothing", 0.1))
        self.assertEqual(calc.lowvram_budget(GiB, 0, 0, 0, vram_state="high").load_argument, 1e32)
        needs, all_dynamic = calc.load_needs([calc.Model(6 * GiB, 2 * GiB, current_device=0)])
        self.assertEqual((needs, all_dynamic), ([calc.LoadNeed(0, 4 * GiB, 6 * GiB)], False))

    def test_the_numbers_are_the_librarys(self) -> None:
        # calc.h's enums, flags, sentinels and the default reserve come from libcomem (comem_constant), as
        # calc.h has them: ComfyUI's values, never copies here.
        from comem import _lib
        self.assertEqual(calc.RULES, {"current": 0, "a125cd84": 1, "783545f6": 2, "v0.39": 3})
        self.assertEqual(calc.VRAM_STATES, {"disabled": 0, "no": 1, "low": 2, "normal": 3, "high": 4, "shared": 5})
        self.assertEqual((calc.CPU, calc.FULL_LOAD_SENTINEL, calc.NOTHING_BUDGET), (-1, 1e32, 0.1))
        self.assertEqual(calc.DEFAULT_RESERVE, 400 * MiB)
        self.assertEqual(calc.admission(GiB), calc.admission(GiB, reserve=400 * MiB))
        self.assertEqual([bit for bit, _ in calc.PIN_SUBSETS], [1, 2, 4, 8, 16, 32])
        self.assertEqual(calc.CPU, _lib.constant("CALC_CPU"))
        self.assertEqual(calc.lowvram_budget(GiB, 0, 0, 0, vram_state="no"), ("nothing", 0.1))  # the kinds' names

    def test_free_memory_drives_the_callbacks(self) -> None:
        models = [calc.Model(300 * MiB, 300 * MiB), calc.Model(6 * GiB, 4 * GiB), calc.Model(2 * GiB, 2 * GiB)]
        freed = [0]
        calls = []

        def part(i: int, t: float) -> float:
            calls.append(("partial", i, t))
            freed[0] += int(t)
            return int(t)

        def drop(i: int) -> None:
            calls.append(("detach", i))
            freed[0] += models[i].loaded

        r = calc.free_memory(models, 7 * GiB, free_now=lambda: GiB + freed[0], partially_unload=part, detach=drop)
        self.assertEqual(r.order, [1, 0, 2])
        self.assertEqual([c[:2] for c in calls], [("detach", 1), ("detach", 0), ("partial", 2)])
        self.assertEqual(r.unloaded, [1, 0])
        self.assertFalse(r.unloads[2].detached)

    def test_errors(self) -> None:
        with self.assertRaises(ValueError):
            calc.lowvram_budget(0, 0, 0, 0, rules="v0.1")
        with self.assertRaises(ValueError):
            calc.lowvram_budget(0, 0, 0, 0, vram_state="huge")
        with self.assertRaises(ValueError):
            calc.free_memory([calc.Model(1, 2)], 0, free_now=lambda: 0.0)
        with self.assertRaises(TypeError):
            calc.free_memory([calc.Model(1.5, 0)], 0, free_now=lambda: 0.0)
        with self.assertRaises(comem.Error):
            calc.free_memory([], 0, free_now=lambda: 0.0, for_dynamic=True, rules="a125cd84")
        with self.assertRaises(comem.Error):
            calc.free_memory([calc.Model(GiB, GiB)], GiB)  # smart memory measures: free_now is needed

        def broken() -> float:
            raise RuntimeError("card unreadable")
        with self.assertRaisesRegex(RuntimeError, "card unreadable"):
            calc.free_memory([calc.Model(GiB, GiB)], 2 * GiB, free_now=broken, detach=lambda i: None)


if __name__ == "__main__":
    unittest.main()
