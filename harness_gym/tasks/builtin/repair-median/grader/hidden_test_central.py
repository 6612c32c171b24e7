import unittest

from stats.central import mean, median


class T(unittest.TestCase):
    def test_even(self):
        self.assertEqual(median([1, 2, 3, 4]), 2.5)
        self.assertEqual(median([4, 1]), 2.5)

    def test_odd(self):
        self.assertEqual(median([3, 1, 2]), 2)

    def test_empty(self):
        with self.assertRaises(ValueError):
            median([])
        with self.assertRaises(ValueError):
            mean([])
