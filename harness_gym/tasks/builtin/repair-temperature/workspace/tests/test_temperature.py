import unittest

from units.temperature import celsius_to_fahrenheit


class T(unittest.TestCase):
    def test_boiling(self):
        self.assertEqual(celsius_to_fahrenheit(100), 212)
