import unittest

from numerals import to_roman


class RomanTest(unittest.TestCase):
    def test_subtractive(self):
        self.assertEqual([to_roman(n) for n in (4, 9, 40, 90, 400, 900)], ["IV", "IX", "XL", "XC", "CD", "CM"])

    def test_years(self):
        self.assertEqual(to_roman(1994), "MCMXCIV")
        self.assertEqual(to_roman(3999), "MMMCMXCIX")

    def test_range(self):
        for bad in (0, 4000, -3, 2.5):
            with self.assertRaises(ValueError):
                to_roman(bad)
