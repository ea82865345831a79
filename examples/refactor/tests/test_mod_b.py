import unittest

from kv.interfaces import Writer
from kv.mod_b import DictWriter


class TestB(unittest.TestCase):
    def test_writer_interface(self) -> None:
        w: Writer = DictWriter()
        w.write("k", "v")
        self.assertEqual(w.data, {"k": "v"})  # type: ignore[attr-defined]
