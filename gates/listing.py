"""Which files a milestone's input patterns match: gitignore-style patterns
(``pathspec``, git's own rules) over the files git lists (tracked or not,
what git ignores left out), or, outside a git work tree, over the folders the
patterns reach. ``.milepost/``, ``.git/`` and ``__pycache__`` never count.
A literal path or folder is a range found by bisection in the sorted list;
only globs are tried path by path."""

from __future__ import annotations

import bisect
import functools
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from milepost.gates.git import NO_SIDE_DOORS

__all__ = ["NEVER", "FileIndex", "git_files", "walk_files"]

# Folders never counted, at any depth.
NEVER = frozenset({".git", ".milepost", "__pycache__"})
_GLOB = frozenset("*?[\\!")


def _counted(rel: str) -> bool:
    return not any(part in NEVER for part in rel.split("/"))


def git_files(root: Path) -> list[str] | None:
    """Tracked and untracked-but-not-ignored files under ``root`` (relative
    to it), or None when ``root`` is not in a git work tree (or git is missing)."""
    try:
        out = subprocess.run(
            ["git", *NO_SIDE_DOORS, "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            timeout=120,
            check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    names = (os.fsdecode(n) for n in out.stdout.split(b"\0") if n)
    return [n for n in dict.fromkeys(names) if _counted(n)]


def _git_form(pattern: str) -> str:
    """milepost's spelling to git's: ``./name`` (anchored at the workspace
    root) is ``/name`` in a ``.gitignore``."""
    neg = pattern.startswith("!")
    body = pattern[1:] if neg else pattern
    if body.startswith("./"):
        body = "/" + body[2:]
    return ("!" if neg else "") + body


def _literal_prefix(pattern: str) -> str | None:
    """The folder an anchored pattern can only match inside (``src/pkg``
    for ``src/pkg/**/*.py``), '' for anywhere, None for a negation."""
    if pattern.startswith("!"):
        return None
    pattern = _git_form(pattern)
    if pattern.startswith("/"):
        body = pattern[1:].rstrip("/")
        if "/" not in body:
            return body if _is_literal(body) else ""
    else:
        body = pattern.rstrip("/")
    if "/" not in body:
        return ""  # matches at any depth
    parts = body.split("/")
    fixed: list[str] = []
    for part in parts:
        if any(ch in _GLOB for ch in part):
            break
        fixed.append(part)
    return "/".join(fixed)


def walk_files(root: Path, patterns: Sequence[str]) -> list[str]:
    """Outside git: the files under the folders the patterns can reach."""
    prefixes = {p for p in (_literal_prefix(x) for x in patterns) if p is not None}
    if "" in prefixes:
        prefixes = {""}
    # A prefix inside another one is walked with it.
    tops = sorted(p for p in prefixes if not any(p != q and (q == "" or p.startswith(q + "/")) for q in prefixes))
    out: list[str] = []
    for top in tops:
        base = root / top if top else root
        if not _counted(top):
            continue
        if base.is_file() or (base.is_symlink() and not base.is_dir()):
            out.append(top)
            continue
        for folder, dirs, files in os.walk(base):
            rel_folder = os.path.relpath(folder, root)
            rel_folder = "" if rel_folder == "." else rel_folder.replace(os.sep, "/")
            kept = []
            for d in dirs:
                if d in NEVER:
                    continue
                if os.path.islink(os.path.join(folder, d)):
                    files.append(d)  # a link to a folder counts as its text, as git keeps it
                    continue
                kept.append(d)
            dirs[:] = kept
            out.extend(f"{rel_folder}/{f}" if rel_folder else f for f in files)
    return out


@functools.lru_cache(maxsize=256)
def _spec(patterns: tuple[str, ...]) -> Any:
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines([_git_form(p) for p in patterns])


def _is_literal(pattern: str) -> bool:
    return not any(ch in _GLOB for ch in pattern)


class FileIndex:
    """The listed files, sorted, for matching without a scan: a literal
    anchored pattern (``src/pkg/mod.py``, ``src/pkg/``: what scaffolded plans
    hold) is a range found by bisection, a glob is tried only on the paths
    under its literal folder (``src/`` for ``src/**/*.py``)."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = sorted(paths)
        self._names: dict[str, list[str]] | None = None

    def under(self, prefix: str, *, folder_only: bool = False) -> list[str]:
        """``prefix`` itself (unless ``folder_only``) and every path under it; all for ''."""
        if not prefix:
            return self.paths
        ps = self.paths
        out: list[str] = []
        i = bisect.bisect_left(ps, prefix)
        if not folder_only and i < len(ps) and ps[i] == prefix:
            out.append(prefix)
        # '0' follows '/' in code-point order: [prefix/, prefix0) is everything under the folder.
        out.extend(ps[bisect.bisect_left(ps, prefix + "/") : bisect.bisect_left(ps, prefix + "0")])
        return out

    def named(self, name: str, *, folder_only: bool = False) -> list[str]:
        """Paths with a component ``name`` at any depth (a file so named, or anything under such a folder)."""
        if self._names is None:
            names: dict[str, list[str]] = {}
            for p in self.paths:
                for part in dict.fromkeys(p.split("/")):
                    names.setdefault(part, []).append(p)
            self._names = names
        found = self._names.get(name, [])
        if folder_only:
            found = [p for p in found if name in p.split("/")[:-1]]
        return found

    def match(self, patterns: Sequence[str]) -> list[str]:
        """The paths ``patterns`` match under git's rules, sorted."""
        sure: set[str] = set()
        maybe: set[str] = set()
        globs: list[str] = []
        for p in patterns:
            if p.startswith("!"):
                continue
            anchored = p.startswith("./")
            if anchored:
                p = p[2:]
            if p.endswith("/**") and _is_literal(p[:-3]) and p[:-3].strip("/"):
                # Everything under an anchored folder: a range, not a regex per path.
                sure.update(self.under(p[:-3].strip("/"), folder_only=True))
                continue
            body = p.rstrip("/")
            folder = p.endswith("/")
            if _is_literal(p) and body:
                if anchored or "/" in body:
                    sure.update(self.under(body, folder_only=folder))
                else:
                    sure.update(self.named(body, folder_only=folder))
            else:
                p = "./" + p if anchored else p
                prefix = _literal_prefix(p) or ""
                maybe.update(self.under(prefix, folder_only=True) if prefix else self.paths)
                globs.append(p)
        if globs:
            spec = _spec(tuple(globs))
            sure.update(x for x in maybe - sure if spec.match_file(x))
        if any(p.startswith("!") for p in patterns):
            full = _spec(tuple(patterns))  # the last matching pattern wins
            sure = {x for x in sure if full.match_file(x)}
        return sorted(sure)
