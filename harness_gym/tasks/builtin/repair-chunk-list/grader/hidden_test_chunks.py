import unittest

from batching.chunks import chunked


class T(unittest.TestCase):
    def test_partial_last(self):
        self.assertEqual(chunked([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]])

    def test_exact_and_empty(self):
        self.assertEqual(chunked([1, 2], 2), [[1, 2]])
        self.assertEqual(chunked([], 3), [])
        self.assertEqual(chunked([1], 5), [[1]])

    def test_bad_size(self):
        with self.assertRaises(ValueError):
            chunked([1], 0)
