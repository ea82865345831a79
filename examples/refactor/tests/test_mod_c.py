import unittest

from kv.interfaces import Counter
from kv.mod_b import DictWriter
from kv.mod_c import WriteCounter


class TestC(unittest.TestCase):
    def test_counter_interface(self) -> None:
        w = DictWriter()
        c: Counter = WriteCounter(w)
        w.write("a", "1")
        w.write("b", "2")
        self.assertEqual(c.count(), 2)
