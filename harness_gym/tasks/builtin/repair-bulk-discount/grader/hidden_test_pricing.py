import unittest

from shop.pricing import line_total


class LineTotalTest(unittest.TestCase):
    def test_ten_percent_tier(self):
        self.assertEqual(line_total(2.50, 12), 27.00)

    def test_tier_boundary(self):
        self.assertEqual(line_total(1.00, 10), 9.00)
        self.assertEqual(line_total(1.00, 9), 9.00)

    def test_twenty_percent_tier(self):
        self.assertEqual(line_total(1.00, 50), 40.00)

    def test_negative(self):
        with self.assertRaises(ValueError):
            line_total(1.0, -1)
