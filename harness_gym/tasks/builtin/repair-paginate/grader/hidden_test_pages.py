import unittest

from apiutils.pages import page_count, paginate


class T(unittest.TestCase):
    def test_pages(self):
        items = list(range(10))
        self.assertEqual(paginate(items, 1, 3), [0, 1, 2])
        self.assertEqual(paginate(items, 4, 3), [9])
        self.assertEqual(paginate(items, 5, 3), [])

    def test_errors(self):
        with self.assertRaises(ValueError):
            paginate([1], 0, 3)

    def test_count(self):
        self.assertEqual(page_count(10, 3), 4)
        self.assertEqual(page_count(9, 3), 3)
