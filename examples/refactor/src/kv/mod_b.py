"""Module B: a key-value writer."""

from kv.interfaces import Writer


class DictWriter(Writer):
    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def write(self, key: str, value: str) -> None:
        self.data[key] = value
