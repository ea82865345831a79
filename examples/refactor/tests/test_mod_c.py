import unittest

from interfaces import Counter
from mod_b import DictWriter
from mod_c import WriteCounter


class TestC(unittest.TestCase):
    def test_counter_interface(self) -> None:
        w = DictWriter()
        c: Counter = WriteCounter(w)
        w.write("a", "1")
        w.write("b", "2")
        self.assertEqual(c.count(), 2)
