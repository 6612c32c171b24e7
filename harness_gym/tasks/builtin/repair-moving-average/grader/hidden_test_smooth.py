import unittest

from series.smooth import cumulative_sum, moving_average


class T(unittest.TestCase):
    def test_windows(self):
        self.assertEqual(moving_average([1, 2, 3, 4], 2), [1.5, 2.5, 3.5])
        self.assertEqual(moving_average([5], 1), [5.0])
        self.assertEqual(moving_average([1, 2], 3), [])

    def test_bad_window(self):
        with self.assertRaises(ValueError):
            moving_average([1], 0)

    def test_cumulative(self):
        self.assertEqual(cumulative_sum([1, 2, 3]), [1, 3, 6])
