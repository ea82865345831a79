"""Module A: a key-value reader."""

from kv.interfaces import Reader


class DictReader(Reader):
    def __init__(self, data: dict[str, str]) -> None:
        self._data = data

    def read(self, key: str) -> str:
        return self._data[key]
