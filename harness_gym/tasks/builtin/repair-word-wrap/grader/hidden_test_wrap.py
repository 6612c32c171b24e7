import unittest

from layout.wrap import wrap


class T(unittest.TestCase):
    def test_limit(self):
        self.assertEqual(wrap("aaaa bbb", 7), ["aaaa", "bbb"])
        self.assertEqual(wrap("aaa bbb ccc", 7), ["aaa bbb", "ccc"])

    def test_long_word_and_empty(self):
        self.assertEqual(wrap("abcdefghij xy", 4), ["abcdefghij", "xy"])
        self.assertEqual(wrap("   ", 5), [])
