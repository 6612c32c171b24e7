import unittest

from textstats import top_words


class TopWordsTest(unittest.TestCase):
    def test_returns_n_entries(self):
        self.assertEqual(top_words("a a a b b c", 2), [("a", 3), ("b", 2)])

    def test_ties_alphabetical(self):
        self.assertEqual(top_words("b a c", 3), [("a", 1), ("b", 1), ("c", 1)])

    def test_fewer_distinct_words(self):
        self.assertEqual(top_words("x x", 5), [("x", 2)])

    def test_zero(self):
        self.assertEqual(top_words("x y", 0), [])
