"""Module A: a key-value reader."""


class DictReader:
    def __init__(self, data: dict[str, str]) -> None:
        self._data = data

    def read(self, key: str) -> str:
        return self._data[key]
