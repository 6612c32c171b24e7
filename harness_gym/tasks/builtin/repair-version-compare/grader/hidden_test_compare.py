import unittest

from semver_lite.compare import compare_versions


class T(unittest.TestCase):
    def test_numeric(self):
        self.assertEqual(compare_versions("1.10", "1.9"), 1)
        self.assertEqual(compare_versions("2.0.1", "2.0.10"), -1)

    def test_padding(self):
        self.assertEqual(compare_versions("1.0", "1"), 0)
        self.assertEqual(compare_versions("1.0.0", "1.0.1"), -1)

    def test_invalid(self):
        with self.assertRaises(ValueError):
            compare_versions("1.a", "1")
