"""Module C: counts what was written."""

from kv.interfaces import Counter
from kv.mod_b import DictWriter


class WriteCounter(Counter):
    def __init__(self, writer: DictWriter) -> None:
        self._writer = writer

    def count(self) -> int:
        return len(self._writer.data)
