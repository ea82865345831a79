"""What the import indexes of one workspace found out (:mod:`.imports`),
kept for the next snapshot of the process while the folders they looked
in are as they were."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ImportMemo", "Known", "folder_mtime"]


@dataclass
class Known:
    """What an index found out, valid while no folder it looked in changed
    (a file added, removed or renamed in a folder changes its mtime): which
    paths are files and folders, the files' modules, each file's imports
    (with the content digest they were read from) and each entry's closure
    (with the digests of its files)."""

    isfile: dict[str, bool] = field(default_factory=dict)
    isdir: dict[str, bool] = field(default_factory=dict)
    modules: dict[str, Any] = field(default_factory=dict)  # rel and roots -> its module
    imports: dict[tuple[str, tuple[str, ...]], tuple[str, list[Any], set[str]]] = field(default_factory=dict)
    expanded: dict[tuple[str, tuple[str, ...]], tuple[dict[str, str | None], Any]] = field(default_factory=dict)
    # rel, roots and lines -> (its content digest, where the imports on those lines resolve): gates/unit_blocks.py
    by_lines: dict[tuple[str, tuple[str, ...], frozenset[int]], tuple[str, list[str]]] = field(default_factory=dict)
    # unit key -> the answer of its records as last found, with what it read (gates/unit_blocks.py: unit_state)
    units: dict[str, Any] = field(default_factory=dict)
    folders: dict[str, int | None] = field(default_factory=dict)  # folder -> mtime_ns when first looked in


class ImportMemo:
    """One workspace's :class:`Known`, shared by the indexes (snapshots) of a
    process: a new index takes it when every folder it records is as it was
    (same mtime, not changed within ``racy_ns`` of being recorded), else
    starts afresh. Costs a stat per folder looked in (a handful) instead of
    resolving every file's imports again."""

    def __init__(self, racy_ns: float = 2e9) -> None:
        self.racy_ns = racy_ns
        self._known = Known()
        self._recorded_at = time.time_ns()
        self._lock = threading.Lock()

    def current(self, root: Path) -> Known:
        with self._lock:
            k = self._known
            for folder, mtime in list(k.folders.items()):
                now = folder_mtime(root, folder)
                if now != mtime or (mtime is not None and mtime >= self._recorded_at - self.racy_ns):
                    self._known = k = Known()
                    self._recorded_at = time.time_ns()
                    break
            return k


def folder_mtime(root: Path, folder: str) -> int | None:
    try:
        return os.stat(os.path.join(root, folder) if folder else root).st_mtime_ns
    except OSError:
        return None
