import unittest

from interfaces import Reader
from mod_a import DictReader

from tests import _path  # noqa: F401


class TestA(unittest.TestCase):
    def test_reader_interface(self) -> None:
        r: Reader = DictReader({"k": "v"})
        self.assertEqual(r.read("k"), "v")
