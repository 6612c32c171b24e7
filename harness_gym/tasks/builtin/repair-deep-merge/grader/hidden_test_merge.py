import unittest

from configtools.merge import deep_merge


class T(unittest.TestCase):
    def test_nested(self):
        self.assertEqual(deep_merge({"db": {"host": "x", "port": 1}}, {"db": {"port": 2}}), {"db": {"host": "x", "port": 2}})

    def test_inputs_untouched(self):
        base, override = {"a": {"b": 1}}, {"a": {"c": 2}, "d": [1]}
        result = deep_merge(base, override)
        result["a"]["b"] = 99
        result["d"].append(2)
        self.assertEqual(base, {"a": {"b": 1}})
        self.assertEqual(override, {"a": {"c": 2}, "d": [1]})

    def test_replace_non_dict(self):
        self.assertEqual(deep_merge({"a": 1}, {"a": {"b": 2}}), {"a": {"b": 2}})
