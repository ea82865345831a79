"""``--affected-by REF``: the files changed since a git revision.

Changed = what ``git diff --name-only REF`` lists (committed and uncommitted
changes, deletions included) plus the untracked files git does not ignore
(a new module not yet added). Paths come back absolute.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from milepost.errors import EnvironmentProblem, InvalidValueError
from milepost.gates.git import NO_SIDE_DOORS

__all__ = ["changed_files"]


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            ["git", *NO_SIDE_DOORS, *args],
            cwd=cwd,
            capture_output=True,
            check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except OSError as e:
        raise EnvironmentProblem(f"--affected-by needs git: {e.strerror or e}") from None


def _first_line(out: bytes) -> str:
    lines = [ln.strip() for ln in out.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[0] if lines else ""


def changed_files(ref: str, base: Path) -> set[Path]:
    """Files changed since ``ref`` in the git work tree holding ``base``,
    tracked or not; one-line errors for a folder outside git or a bad ref."""
    top = _git(["rev-parse", "--show-toplevel"], base)
    if top.returncode != 0:
        raise InvalidValueError(
            f"--affected-by {ref!r}: {base} is not in a git work tree ({_first_line(top.stderr) or 'git said no'});"
            " run it in a git checkout, or leave --affected-by out"
        )
    root = Path(os.fsdecode(top.stdout.strip()))
    if ref.startswith("-") or _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], root).returncode != 0:
        raise InvalidValueError(
            f"--affected-by {ref!r}: no such commit in {root}: give a branch, tag or commit (e.g. HEAD, origin/main)"
        )
    diff = _git(["diff", "--name-only", "-z", ref, "--"], root)
    if diff.returncode != 0:
        raise InvalidValueError(f"--affected-by {ref!r}: git diff failed: {_first_line(diff.stderr)}")
    new = _git(["ls-files", "-z", "--others", "--exclude-standard"], root)
    names = [*diff.stdout.split(b"\0"), *(new.stdout.split(b"\0") if new.returncode == 0 else [])]
    return {(root / os.fsdecode(n)).resolve() for n in names if n}
