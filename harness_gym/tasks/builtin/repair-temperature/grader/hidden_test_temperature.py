import unittest

from units.temperature import celsius_to_fahrenheit, fahrenheit_to_celsius, kelvin_to_celsius


class T(unittest.TestCase):
    def test_f_to_c(self):
        self.assertAlmostEqual(fahrenheit_to_celsius(212), 100.0)
        self.assertAlmostEqual(fahrenheit_to_celsius(-40), -40.0)

    def test_round_trip(self):
        for c in (-10, 0, 37.5):
            self.assertAlmostEqual(fahrenheit_to_celsius(celsius_to_fahrenheit(c)), c)

    def test_kelvin(self):
        self.assertAlmostEqual(kelvin_to_celsius(0), -273.15)
        with self.assertRaises(ValueError):
            kelvin_to_celsius(-1)
