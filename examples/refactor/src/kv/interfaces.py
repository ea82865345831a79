"""The merged interfaces of modules A, B and C."""

from typing import Protocol


class Reader(Protocol):
    def read(self, key: str) -> str: ...


class Writer(Protocol):
    def write(self, key: str, value: str) -> None: ...


class Counter(Protocol):
    def count(self) -> int: ...
