import unittest

from intervals import merge


class MergeTest(unittest.TestCase):
    def test_touching(self):
        self.assertEqual(merge([(1, 3), (3, 5)]), [(1, 5)])

    def test_overlapping_and_separate(self):
        self.assertEqual(merge([(6, 8), (1, 4), (2, 5)]), [(1, 5), (6, 8)])

    def test_contained(self):
        self.assertEqual(merge([(1, 10), (2, 3)]), [(1, 10)])

    def test_empty(self):
        self.assertEqual(merge([]), [])
