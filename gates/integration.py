"""The integration branch (docs/doers.md): where a passed attempt's branch is
merged (:func:`integration_checkout`), and the merge itself (:func:`merge`),
one writer at a time. Every git call goes through :mod:`milepost.gates.git`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from milepost.gates.git import (
    _BASE_MARK,
    _CONFLICT_LINES,
    _QUIET_COMMIT,
    GitError,
    Repo,
    UnknownRefError,
    _branch_of,
    _common_dir,
    _git,
    _identity,
    _locked,
    _names,
    _out,
    _status,
)
from milepost.gates.worktrees import Worktrees

__all__ = [
    "Integration",
    "MergeResult",
    "checked_out",
    "find_merge",
    "integration_branch",
    "integration_checkout",
    "merge",
    "merge_message",
]


@dataclass(frozen=True)
class MergeResult:
    """A merge's end: ``ok`` with the merge commit, or the conflict (which
    files and their hunks, at most 200 lines) with the checkout left as it was."""

    ok: bool
    commit: str | None = None
    conflict: str | None = None


@dataclass(frozen=True)
class Integration:
    """Where a drive's merges are made (``path``) and the branch they land
    on (``branch``): ``base`` itself, or the item's integration branch
    ``milepost/<item>/integration`` when ``base`` is checked out under a
    working tree milepost must not move it under."""

    path: Path
    branch: str
    base: str
    why: str = ""  # why there, said to the user when it is not the workspace

    @property
    def aside(self) -> bool:
        """Whether the merges land on the integration branch, not on ``base``."""
        return self.branch != self.base

    def bring_in(self) -> str:
        """The one command that brings the work in (docs/doers.md)."""
        return f"git merge {self.branch}"


def integration_branch(item: int) -> str:
    return f"milepost/{item}/integration"


def integration_checkout(repo: Repo, base: str, folder: Path, item: int) -> Integration:
    """Where merges into ``base`` are made for work item ``item`` (see the
    module's docstring and docs/doers.md), ``folder`` being the item's
    worktrees' folder (:func:`milepost.gates.worktrees.item_folder`):

    - the item's integration branch, when it holds work ``base`` lacks (a
      later drive continues there until that work is brought in);
    - the workspace, when it has ``base`` checked out, nothing uncommitted
      and no merge half done (never finished nor undone by milepost);
    - a detached worktree at ``base``'s tip, when ``base`` is checked out in
      no working tree (the merge moves ``base`` by ``update-ref``);
    - else the integration branch, made (or moved, when it holds nothing
      ``base`` lacks) at ``base``'s tip, in a worktree of its own."""
    if not repo.branch_exists(base):
        raise UnknownRefError(f"{base!r} is not a branch of {repo.root}: name an existing branch (git branch --list)")
    side = integration_branch(item)
    path = folder / "_integration"  # (a milestone's name starts with a letter: never this folder's)
    worktrees = Worktrees(repo)
    ahead = repo.branch_exists(side) and repo.commits_missing(base, side) > 0
    if not ahead and repo.current_branch() == base and not repo.dirty_paths() and not repo.merging():
        return Integration(repo.root, base, base)
    if not ahead and base not in checked_out(repo):
        _detached_at(worktrees, path, base)
        return Integration(path, base, base, f"{base} is checked out in no working tree")
    wt = worktrees.ensure(path, side, repo.tip(base))
    if not ahead and wt.head() != repo.tip(base):
        worktrees.reset_branch(path, side, base)
    _mark(path, side)
    if ahead:
        why = f"{side} holds work {base} lacks"
    elif repo.current_branch() == base:
        state = "in the middle of a merge" if repo.merging() else "with uncommitted changes"
        why = f"{base} is checked out here {state}"
    else:
        why = f"{base} is checked out in another working tree"
    return Integration(path, side, base, why)


def checked_out(repo: Repo) -> set[str]:
    """The branches checked out in some working tree of ``repo``."""
    return _checked_out_at(repo.root)


def _detached_at(worktrees: Worktrees, path: Path, base: str) -> None:
    """A detached worktree at ``path`` at ``base``'s tip, clean, marked as merging into ``base``."""
    repo = worktrees.repo
    with worktrees._lock():
        if worktrees._ours(path):
            _git(path, "checkout", "-q", "-f", "--detach", repo.tip(base))
            _git(path, "reset", "-q", "--hard")  # a merge killed half way leaves MERGE_HEAD: gone
        else:
            worktrees._add(path, repo.tip(base), "--detach")
        _git(path, "clean", "-q", "-f", "-d")
    _mark(path, base)


def _mark(path: Path, branch: str) -> None:
    """Mark ``path`` (in its own git dir) as milepost's checkout merging into ``branch``."""
    mark = (path / _out(path, "rev-parse", "--git-dir")).resolve() / _BASE_MARK
    mark.write_text(branch + "\n", encoding="utf-8")


def _marked(path: Path) -> str | None:
    """The branch milepost's checkout ``path`` merges into; None: not milepost's (the workspace)."""
    mark = (path / _out(path, "rev-parse", "--git-dir")).resolve() / _BASE_MARK
    return mark.read_text(encoding="utf-8").strip() if mark.exists() else None


def merge_message(item: int, milestone: str, attempt: int) -> str:
    """A merge commit's message: its subject, then trailers naming the item,
    the milestone and the attempt (what a driver taking a dead one's attempt
    over looks for: :func:`find_merge`)."""
    return (
        f"milepost: merge {milestone} (attempt {attempt})\n\n"
        f"Milepost-Item: {item}\nMilepost-Milestone: {milestone}\nMilepost-Attempt: {attempt}\n"
    )


def find_merge(repo: Repo, item: int, milestone: str, attempt: int) -> str | None:
    """The merge commit of attempt ``attempt`` of ``milestone`` (item
    ``item``) reachable from a local branch, or None: whether that attempt's
    work was merged (:func:`merge_message`'s trailers)."""
    done = _git(
        repo.root,
        *("log", "--branches", "--merges", "-F", "--all-match", "--format=%H%x00%B%x00"),
        f"--grep=Milepost-Milestone: {milestone}",
        f"--grep=Milepost-Attempt: {attempt}",
        check=False,
    )
    if done.returncode != 0:
        return None
    parts = done.stdout.decode(errors="replace").split("\0")
    want = {"Milepost-Item": str(item), "Milepost-Milestone": milestone, "Milepost-Attempt": str(attempt)}
    for sha, body in zip(parts[0::2], parts[1::2], strict=False):
        trailers = dict(
            line.split(": ", 1) for line in body.splitlines() if line.startswith("Milepost-") and ": " in line
        )
        if all(trailers.get(k) == v for k, v in want.items()):
            return sha.strip()
    return None


def merge(integration: Path, branch: str, message: str) -> MergeResult:
    """Merge ``branch`` into the integration branch in the checkout
    ``integration`` (``git merge --no-ff``: one merge commit, ``message``).
    On a conflict the merge is aborted: the checkout and the branch stay as
    they were and the result holds the conflict. One merge at a time per
    repository (an exclusive ``flock`` on ``<git common dir>/milepost-merge.lock``).
    Any other failure raises :class:`GitError`."""
    with _locked(_common_dir(integration) / "milepost-merge.lock"):
        attached, ours = _branch_of(integration), _marked(integration)
        if attached and ours is None:
            dirty = _status(integration)
            if dirty:
                raise GitError(
                    f"the integration checkout {integration} has uncommitted changes ({', '.join(dirty[:3])}):"
                    " milepost never merges over a person's work; merge in integration_checkout()'s worktree"
                )
            return _merge_here(integration, branch, message, attached)
        if attached:  # milepost's own worktree of the integration branch: what a killed merge left goes
            half_done = _git(integration, "rev-parse", "-q", "--verify", "MERGE_HEAD", check=False).returncode == 0
            if half_done or _git(integration, "diff", "--quiet", "HEAD", check=False).returncode != 0:
                _git(integration, "reset", "-q", "--hard")
            return _merge_here(integration, branch, message, attached)
        if ours is None:
            raise GitError(f"{integration} has a detached HEAD and is no integration worktree of milepost's")
        return _merge_detached(integration, branch, message, ours)


def _merge_here(cwd: Path, branch: str, message: str, into: str) -> MergeResult:
    options = ("--no-ff", "--no-verify", "--no-verify-signatures", "--no-edit")
    args = (*_QUIET_COMMIT, "merge", *options, "-m", message, branch)
    done = _git(cwd, *args, env=_identity(cwd), check=False)
    if done.returncode == 0:
        return MergeResult(True, commit=_out(cwd, "rev-parse", "HEAD"))
    merging = _git(cwd, "rev-parse", "-q", "--verify", "MERGE_HEAD", check=False).returncode == 0
    if merging and _names(_git(cwd, "diff", "--name-only", "-z", "--diff-filter=U", check=False).stdout):
        conflict = _conflict_text(cwd, branch, into)
        _git(cwd, "merge", "--abort")
        return MergeResult(False, conflict=conflict)
    # failed half way for another reason (a lock held, the disk full): undone, or forgotten
    if merging and _git(cwd, "merge", "--abort", check=False).returncode != 0:
        _git(cwd, "merge", "--quit", check=False)
    said = [ln for ln in (done.stderr + done.stdout).decode(errors="replace").strip().splitlines() if ln.strip()]
    shown = next((ln for ln in said if ln.startswith(("fatal:", "error:"))), said[0] if said else "no message")
    raise GitError(f"git merge of {branch!r} into {into!r} in {cwd} failed: {shown}")


def _merge_detached(cwd: Path, branch: str, message: str, base: str) -> MergeResult:
    """Merge at ``base``'s tip in a detached worktree, then move ``base``
    there if no one moved it meanwhile (else merge again from its new tip)."""
    for _ in range(5):
        old = _out(cwd, "rev-parse", "--verify", f"refs/heads/{base}^{{commit}}")
        behind = _out(cwd, "rev-parse", "--verify", "HEAD^{commit}") != old
        if behind or _git(cwd, "diff", "--quiet", "HEAD", check=False).returncode != 0:
            # (at the tip and clean, as after milepost's own merge: the drive's gates may be running here)
            _git(cwd, "reset", "-q", "--hard", old)  # detached: HEAD moves, a half-done merge goes
            _git(cwd, "clean", "-q", "-f", "-d")
        result = _merge_here(cwd, branch, message, base)
        if not result.ok or result.commit is None:
            return result
        if base in _checked_out_at(cwd):
            raise GitError(
                f"branch {base!r} was checked out in a working tree while milepost merged {branch!r}: milepost never"
                " moves a branch under a working tree; the next attempt merges on the integration branch"
            )
        subject = message.splitlines()[0] if message else ""
        moved = _git(cwd, "update-ref", "-m", subject, f"refs/heads/{base}", result.commit, old, check=False)
        if moved.returncode == 0:
            return result
    raise GitError(f"branch {base!r} kept moving while milepost merged {branch!r} into it: drive again")


def _checked_out_at(cwd: Path) -> set[str]:
    listed = _out(cwd, "worktree", "list", "--porcelain")
    return {line.removeprefix("branch refs/heads/") for line in listed.splitlines() if line.startswith("branch ")}


def _conflict_text(cwd: Path, branch: str, into: str) -> str:
    files = _names(_git(cwd, "diff", "--name-only", "-z", "--diff-filter=U").stdout)
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    head = f"{len(files)} file(s) conflict merging {branch} into {into}: {shown}"
    shown_diff = _git(cwd, "diff", "--no-color", "--no-ext-diff", "--no-textconv", check=False).stdout
    hunks = shown_diff.decode(errors="replace").splitlines()
    lines = [head, *hunks]
    if len(lines) > _CONFLICT_LINES:
        lines = [*lines[: _CONFLICT_LINES - 1], f"... ({len(lines) - _CONFLICT_LINES + 1} more lines)"]
    return "\n".join(lines)
