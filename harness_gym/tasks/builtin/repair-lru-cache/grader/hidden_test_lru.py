import unittest

from caching.lru import LRUCache


class T(unittest.TestCase):
    def test_get_refreshes(self):
        cache = LRUCache(2)
        cache.put("a", 1)
        cache.put("b", 2)
        self.assertEqual(cache.get("a"), 1)
        cache.put("c", 3)
        self.assertIsNone(cache.get("b"))
        self.assertEqual((cache.get("a"), cache.get("c")), (1, 3))

    def test_capacity(self):
        cache = LRUCache(1)
        cache.put("x", 1)
        cache.put("y", 2)
        self.assertEqual(len(cache), 1)
        with self.assertRaises(ValueError):
            LRUCache(0)
