import unittest

from collections_extra.unique import unique, unique_by


class T(unittest.TestCase):
    def test_order(self):
        self.assertEqual(unique([3, 1, 3, 2, 1]), [3, 1, 2])
        self.assertEqual(unique(["b", "a", "b"]), ["b", "a"])
        self.assertEqual(unique([]), [])

    def test_by_key(self):
        self.assertEqual(unique_by(["Ab", "ab", "c"], str.lower), ["Ab", "c"])
