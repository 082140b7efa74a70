"""The binding loads from the build tree and says where from."""
import os
import unittest

import support  # noqa: F401  (puts python/ on sys.path)

import comem


class TestImport(unittest.TestCase):
    def test_library_found(self):
        self.assertTrue(os.path.exists(comem.library_path), comem.library_path)
        self.assertEqual(comem.status_str(-8), "busy")


if __name__ == "__main__":
    unittest.main()
