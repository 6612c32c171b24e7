import unittest

from calendar_tools.leap import days_in_month, is_leap_year


class T(unittest.TestCase):
    def test_rule(self):
        self.assertTrue(is_leap_year(2000))
        self.assertTrue(is_leap_year(2024))
        self.assertFalse(is_leap_year(1900))
        self.assertFalse(is_leap_year(2023))

    def test_february(self):
        self.assertEqual(days_in_month(2000, 2), 29)
        self.assertEqual(days_in_month(2100, 2), 28)
        self.assertEqual(days_in_month(2023, 4), 30)
