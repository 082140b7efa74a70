"""The binding loads from the build tree and says where from; on Windows it looks for comem.dll and
comem.exe in the same places, and takes only PE files there (the lists checked here, on Linux)."""
import os
import stat
import tempfile
import unittest
from unittest import mock

import support  # noqa: F401  (puts python/ on sys.path)

import comem
from comem import _bin, _lib


class TestImport(unittest.TestCase):
    def test_library_found(self):
        self.assertTrue(os.path.exists(comem.library_path), comem.library_path)
        self.assertEqual(comem.status_str(-8), "busy")


class TestWhereEachSystemLooks(unittest.TestCase):
    def test_the_library_on_linux_and_on_windows(self):
        repo = os.path.dirname(os.path.dirname(os.path.dirname(_lib.__file__)))
        def listed(windows):  # what is looked for without COMEM_LIB (which the tests set)
            with mock.patch.dict(os.environ):
                os.environ.pop("COMEM_LIB", None)
                return _lib._candidates(windows=windows)
        linux = [p for p, _ in listed(False)]
        self.assertEqual(linux[0], os.path.join(_bin.NATIVE_DIR, "lib", "libcomem.so.0"))
        self.assertIn(os.path.join(repo, "build", "lib", "libcomem.so"), linux)
        self.assertEqual(linux[-1], "libcomem.so")
        windows = listed(True)
        self.assertEqual(windows[0], (os.path.join(_bin.NATIVE_DIR, "bin", "comem.dll"), "bundled in the wheel"))
        self.assertIn((os.path.join(repo, "build-win", "bin", "comem.dll"), "the source tree's build"), windows)
        self.assertEqual(windows[-1], ("comem.dll", "the dynamic loader's path"))
        self.assertFalse([p for p, _ in windows if p.endswith(".so") or ".so." in p])
        # The same order on both: a wheel's copy first, the loader's search last.
        self.assertEqual([w for _, w in windows], [w for _, w in listed(False)])

    def test_the_programs_on_windows_are_exe_files(self):
        repo = os.path.dirname(os.path.dirname(os.path.dirname(_bin.__file__)))
        paths = [p for p, _ in _bin._candidates("comemd", windows=True)]
        self.assertEqual(paths[0], os.path.join(_bin.NATIVE_DIR, "bin", "comemd.exe"))
        self.assertIn(os.path.join(repo, "build-win", "bin", "comemd.exe"), paths)
        self.assertTrue(all(p.endswith("comemd.exe") for p in paths), paths)
        self.assertTrue(all(os.path.basename(p) == "comemd" for p, _ in _bin._candidates("comemd", windows=False)))

    def test_only_the_systems_own_executables_are_taken(self):
        with tempfile.TemporaryDirectory() as d:
            pe, elf, script = (os.path.join(d, n) for n in ("pe", "elf", "script"))
            for path, head in ((pe, b"MZ\x90\x00"), (elf, b"\x7fELF"), (script, b"#!/bin/sh\n")):
                with open(path, "wb") as f:
                    f.write(head + b"\0" * 60)
                os.chmod(path, stat.S_IRWXU)
            self.assertEqual([_bin._is_native(p, windows=True) for p in (pe, elf, script)], [True, False, False])
            self.assertEqual([_bin._is_native(p, windows=False) for p in (pe, elf, script)], [False, True, False])


if __name__ == "__main__":
    unittest.main()
