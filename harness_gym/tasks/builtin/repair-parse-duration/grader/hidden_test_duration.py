import unittest

from timeparse.duration import parse_duration


class T(unittest.TestCase):
    def test_values(self):
        self.assertEqual(parse_duration("1h30m"), 5400)
        self.assertEqual(parse_duration("45s"), 45)
        self.assertEqual(parse_duration("2h5s"), 7205)
        self.assertEqual(parse_duration(" 10M "), 600)

    def test_errors(self):
        for bad in ("", "1x", "h"):
            with self.assertRaises(ValueError):
                parse_duration(bad)
