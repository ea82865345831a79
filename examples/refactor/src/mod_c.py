"""Module C: counts what was written."""

from mod_b import DictWriter


class WriteCounter:
    def __init__(self, writer: DictWriter) -> None:
        self._writer = writer

    def count(self) -> int:
        return len(self._writer.data)
