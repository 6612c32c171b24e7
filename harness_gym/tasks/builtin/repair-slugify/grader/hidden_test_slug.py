import unittest

from textkit import slugify


class SlugTest(unittest.TestCase):
    def test_runs_collapse(self):
        self.assertEqual(slugify("Hello,   World!!"), "hello-world")

    def test_edges(self):
        self.assertEqual(slugify("  --Already slugged--  "), "already-slugged")

    def test_accents_and_separator(self):
        self.assertEqual(slugify("Crème Brûlée", separator="_"), "creme_brulee")

    def test_simple(self):
        self.assertEqual(slugify("Hello World"), "hello-world")
