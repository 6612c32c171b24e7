import unittest

from textstats import count_words


class CountWordsTest(unittest.TestCase):
    def test_counts_case_insensitively(self):
        self.assertEqual(count_words("The the THE cat")["the"], 3)


if __name__ == "__main__":
    unittest.main()
