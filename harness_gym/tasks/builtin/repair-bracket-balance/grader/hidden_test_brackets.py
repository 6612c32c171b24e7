import unittest

from syntaxcheck.brackets import is_balanced


class T(unittest.TestCase):
    def test_balanced(self):
        for text in ("", "()", "a[b{c}d]e", "(()[]){}"):
            self.assertTrue(is_balanced(text), text)

    def test_unbalanced(self):
        for text in ("((", "{[}", ")(", "[(])", "}"):
            self.assertFalse(is_balanced(text), text)
