import unittest

from searching.bisect_search import find


class T(unittest.TestCase):
    def test_found(self):
        self.assertEqual(find([1, 3, 5, 7], 5), 2)
        self.assertEqual(find([1, 3, 5, 7], 1), 0)

    def test_missing(self):
        self.assertEqual(find([1, 3, 5], 4), -1)
        self.assertEqual(find([1, 3, 5], 9), -1)
        self.assertEqual(find([], 1), -1)
        self.assertEqual(find([2], 1), -1)
