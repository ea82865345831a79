import unittest

from kv.interfaces import Reader
from kv.mod_a import DictReader


class TestA(unittest.TestCase):
    def test_reader_interface(self) -> None:
        r: Reader = DictReader({"k": "v"})
        self.assertEqual(r.read("k"), "v")
