"""The git layer of doers (milepost.gates.git, worktrees, integration) on real git repositories in
temporary folders: worktrees made, reused and made again, what a doer
changed and its digest, protected paths, commits, and merges into the
integration branch (clean, conflicting, beside a user's uncommitted work, two
processes at once)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from milepost.gates.git import GitError, Repo, UnknownRefError
from milepost.gates.integration import find_merge, integration_checkout, merge, merge_message
from milepost.gates.worktrees import Worktree, Worktrees, item_folder, protected_changes, worktrees_root
from tests.conftest import flock_waiters, wait_until

ROOT = Path(__file__).resolve().parent.parent


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(autouse=True)
def _no_outside_git_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No global or system git config and no identity from the environment: each test's repo says what it has."""
    empty = tmp_path / "empty.gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(name, raising=False)


def make_repo(ws: Path, *, identity: bool = True) -> Repo:
    """``ws`` on ``main`` with a module, a test and a .gitignore committed; an
    untracked, NOT ignored ``.milepost/`` beside them (it must never count)."""
    ws.mkdir(parents=True, exist_ok=True)
    git(ws, "init", "-q", "-b", "main")
    if identity:
        git(ws, "config", "user.name", "dev")
        git(ws, "config", "user.email", "dev@example.com")
    files = {"src/app.py": "x = 1\ny = 2\n", "tests/test_app.py": "def test_x(): pass\n", ".gitignore": "build/\n"}
    for rel, text in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    env = {"GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.com"}
    env |= {"GIT_COMMITTER_NAME": "dev", "GIT_COMMITTER_EMAIL": "dev@example.com"}
    git(ws, "add", "-A")
    subprocess.run(["git", "commit", "-q", "-m", "start"], cwd=ws, check=True, env={**os.environ, **env})
    (ws / ".milepost").mkdir()
    (ws / ".milepost" / "store.db").write_text("not the user's work\n")
    repo = Repo.find(ws)
    assert repo is not None
    return repo


def folder(repo: Repo) -> Path:
    """Item 1's worktrees' folder (under MILEPOST_WORKTREES: tests/conftest.py)."""
    return item_folder(repo, worktrees_root(os.environ.get("MILEPOST_WORKTREES")), 1)


def wt_path(repo: Repo, name: str) -> Path:
    return folder(repo) / name


def work(repo: Repo, name: str, files: dict[str, str], start: str = "main") -> Worktree:
    """A doer's attempt: a worktree for milestone ``name`` with ``files`` written and committed."""
    wt = Worktrees(repo).ensure(wt_path(repo, name), f"milepost/1/{name}", start)
    for rel, text in files.items():
        (wt.path / rel).parent.mkdir(parents=True, exist_ok=True)
        (wt.path / rel).write_text(text)
    assert wt.commit_all(f"milepost: {name}") is not None
    return wt


def status(cwd: Path) -> str:
    """``git status`` without milepost's home (untracked, not ignored, in these repositories)."""
    lines = git(cwd, "status", "--porcelain", "--untracked-files=all").splitlines()
    return "\n".join(line for line in lines if ".milepost/" not in line)


# -- the repository -----------------------------------------------------------------


def test_a_repository_is_found_and_read(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    assert Repo.find(tmp_path / "ws" / "src") == repo and repo.root == (tmp_path / "ws").resolve()
    (tmp_path / "plain").mkdir()
    assert Repo.find(tmp_path / "plain") is None
    assert repo.current_branch() == "main" and repo.branch_exists("main") and not repo.branch_exists("dev")
    assert repo.tip("main") == git(repo.root, "rev-parse", "HEAD")
    with pytest.raises(UnknownRefError, match="'nope' names no commit") as caught:
        repo.tip("nope")
    assert caught.value.exit_code == 2 and isinstance(caught.value, GitError)
    assert repo.dirty_paths() == []  # .milepost/ is untracked and not ignored, and still does not count
    (repo.root / "src" / "app.py").write_text("x = 'edited'\n")
    (repo.root / "notes.txt").write_text("mine\n")
    (repo.root / "build").mkdir()
    (repo.root / "build" / "out.o").write_text("ignored\n")
    (repo.root / "staged.py").write_text("s = 1\n")
    git(repo.root, "add", "staged.py")
    assert repo.dirty_paths() == ["notes.txt", "src/app.py", "staged.py"]
    git(repo.root, "checkout", "-q", "--detach")
    assert repo.current_branch() is None


# -- worktrees ----------------------------------------------------------------------


def test_a_worktree_starts_at_the_tip_and_a_retry_builds_on_the_last_attempt(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    tip = repo.tip("main")
    wt = Worktrees(repo).ensure(wt_path(repo, "a"), "milepost/1/a", "main")
    assert wt.start == tip and wt.head() == tip and wt.exists()
    assert git(wt.path, "symbolic-ref", "--short", "HEAD") == "milepost/1/a"
    (wt.path / "src" / "a.py").write_text("A = 1\n")
    first = wt.commit_all("milepost: a, attempt 1")
    assert first is not None and repo.tip("milepost/1/a") == first and repo.tip("main") == tip
    assert git(wt.path, "log", "-1", "--format=%an <%ae>|%s") == "dev <dev@example.com>|milepost: a, attempt 1"
    # attempt 2: the same branch, as attempt 1 left it, even when asked to start elsewhere
    again = Worktrees(repo).ensure(wt_path(repo, "a"), "milepost/1/a", "main")
    assert again.start == first and (again.path / "src" / "a.py").read_text() == "A = 1\n"
    assert again.diff_stat(tip, first) == "1 file changed, 1 insertion(+)"


def test_a_killed_attempts_junk_is_reset_but_ignored_setup_stays(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    wt = work(repo, "a", {"src/a.py": "A = 1\n"})
    committed = wt.head()
    (wt.path / "src" / "a.py").write_text("half written")
    (wt.path / "src" / "app.py").unlink()
    (wt.path / "junk").mkdir()
    (wt.path / "junk" / "tmp.txt").write_text("left by a killed doer\n")
    git(wt.path, "add", "junk/tmp.txt")
    (wt.path / "build").mkdir()
    (wt.path / "build" / "venv.txt").write_text("doer.setup's install\n")
    again = Worktrees(repo).ensure(wt.path, wt.branch, "main")
    assert again.head() == committed and status(again.path) == ""
    assert (again.path / "src" / "a.py").read_text() == "A = 1\n" and (again.path / "src" / "app.py").exists()
    assert not (again.path / "junk").exists()
    assert (again.path / "build" / "venv.txt").exists()  # ignored: a fresh setup is not needed


def test_a_deleted_worktree_is_made_again_on_its_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    wt = work(repo, "a", {"src/a.py": "A = 1\n"})
    committed = wt.head()
    shutil.rmtree(wt.path)  # a doer deleted its own worktree
    assert not wt.exists()
    again = Worktrees(repo).ensure(wt.path, wt.branch, "main")
    assert again.exists() and again.head() == committed and (again.path / "src" / "a.py").exists()
    assert len(git(repo.root, "worktree", "list", "--porcelain").split("\n\n")) == 2


def test_a_folder_that_is_not_a_worktree_is_refused_and_kept(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    path = wt_path(repo, "a")
    path.mkdir(parents=True)
    (path / "precious.txt").write_text("keep\n")
    with pytest.raises(GitError, match="is not a git worktree of"):
        Worktrees(repo).ensure(path, "milepost/1/a", "main")
    assert (path / "precious.txt").read_text() == "keep\n" and not repo.branch_exists("milepost/1/a")


def test_reset_branch_starts_again_at_the_new_tip_and_remove_keeps_the_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    wt = work(repo, "a", {"src/a.py": "A = 1\n"})
    other = work(repo, "b", {"src/b.py": "B = 1\n"})
    assert merge(repo.root, other.branch, "merge b").ok
    fresh = Worktrees(repo).reset_branch(wt.path, wt.branch, "main")
    assert fresh.start == repo.tip("main") == repo.tip(wt.branch) and not (wt.path / "src" / "a.py").exists()
    Worktrees(repo).remove(wt.path)
    assert not wt.path.exists() and repo.branch_exists(wt.branch)


# -- what a doer changed --------------------------------------------------------------


def test_changed_paths_count_every_change_but_ignored_files_and_milepost_home(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    wt = Worktrees(repo).ensure(wt_path(repo, "a"), "milepost/1/a", "main")
    assert wt.changed_paths() == []
    (wt.path / "src" / "app.py").write_text("x = 2\n")  # modified
    (wt.path / "tests" / "test_app.py").unlink()  # deleted
    (wt.path / "src" / "new.py").write_text("n = 1\n")  # untracked
    (wt.path / "build").mkdir()
    (wt.path / "build" / "x.o").write_text("ignored\n")
    (wt.path / ".milepost").mkdir()
    (wt.path / ".milepost" / "x").write_text("milepost's own\n")
    (wt.path / "done_by_doer.py").write_text("d = 1\n")
    git(wt.path, "add", "done_by_doer.py")
    git(wt.path, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-q", "-m", "the doer committed itself")
    assert wt.changed_paths() == ["done_by_doer.py", "src/app.py", "src/new.py", "tests/test_app.py"]
    head = wt.commit_all("milepost: a")
    assert head is not None and head != wt.start
    assert ".milepost/x" not in git(wt.path, "ls-tree", "-r", "--name-only", "HEAD")


def test_the_same_change_has_the_same_digest_and_another_change_another(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    worktrees, digests = [], []
    for name, text in (("one", "x = 2\n"), ("two", "x = 2\n"), ("three", "x = 3\n")):
        wt = Worktrees(repo).ensure(wt_path(repo, name), f"milepost/1/{name}", "main")
        (wt.path / "src" / "app.py").write_text(text)
        (wt.path / "src" / "new.bin").write_bytes(b"\x00\x01binary\xff")
        before = status(wt.path)
        digests.append(wt.diff_digest([]))
        assert wt.diff_digest([]) == digests[-1] and status(wt.path) == before  # stable; the index untouched
        worktrees.append(wt)
    assert digests[0] == digests[1] != digests[2]
    # the differing file excluded (gitignore patterns): the same change is left
    assert worktrees[2].diff_digest(["app.py"]) == worktrees[0].diff_digest(["src/app.py"]) != digests[0]
    empty = Worktrees(repo).ensure(wt_path(repo, "four"), "milepost/1/four", "main")
    assert empty.diff_digest([]) not in digests


def test_protected_changes_use_gitignore_rules_and_discard_puts_them_back(tmp_path: Path) -> None:
    changed = ["src/app.py", "src/tests/helper.py", "tests/sub/deep.py", "tests/test_app.py"]
    assert protected_changes(changed, ["tests/**"]) == ["tests/sub/deep.py", "tests/test_app.py"]
    assert protected_changes(changed, ["tests/"]) == ["src/tests/helper.py", "tests/sub/deep.py", "tests/test_app.py"]
    assert protected_changes(changed, []) == []
    repo = make_repo(tmp_path / "ws")
    wt = Worktrees(repo).ensure(wt_path(repo, "a"), "milepost/1/a", "main")
    (wt.path / "tests" / "test_app.py").write_text("def test_x(): assert True  # weakened\n")
    (wt.path / "tests" / "sub").mkdir()
    (wt.path / "tests" / "sub" / "deep.py").write_text("new test file\n")
    git(wt.path, "add", "tests/sub/deep.py")
    (wt.path / "src" / "app.py").write_text("x = 'the real work'\n")
    protected = protected_changes(wt.changed_paths(), ["tests/**"])
    assert protected == ["tests/sub/deep.py", "tests/test_app.py"]
    wt.discard(protected)
    assert wt.changed_paths() == ["src/app.py"]
    assert (wt.path / "tests" / "test_app.py").read_text() == "def test_x(): pass\n"
    assert not (wt.path / "tests" / "sub" / "deep.py").exists()


def test_commit_all_commits_nothing_when_nothing_changed_and_uses_milepost_when_git_has_no_identity(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "ws", identity=False)
    wt = Worktrees(repo).ensure(wt_path(repo, "a"), "milepost/1/a", "main")
    assert wt.commit_all("nothing") is None and wt.head() == wt.start
    (wt.path / "src" / "a.py").write_text("A = 1\n")
    head = wt.commit_all("milepost: a")
    assert head is not None
    assert git(wt.path, "log", "-1", "--format=%an <%ae>|%cn <%ce>") == (
        "milepost <milepost@localhost>|milepost <milepost@localhost>"
    )
    git(wt.path, "checkout", "-q", "-b", "elsewhere")
    with pytest.raises(GitError, match="not on 'milepost/1/a'"):
        wt.commit_all("on the wrong branch")


# -- merges -------------------------------------------------------------------------


def merges(cwd: Path, ref: str = "main") -> list[str]:
    return git(cwd, "log", "--merges", "--reverse", "--format=%s", ref).splitlines()


def test_a_clean_merge_is_one_merge_commit_in_the_workspace(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    wt = work(repo, "a", {"src/a.py": "A = 1\n"})
    into = integration_checkout(repo, "main", folder(repo), 1)
    assert into.path == repo.root and into.branch == "main"  # on main, nothing uncommitted (.milepost/ aside)
    checkout = into.path
    before = repo.tip("main")
    result = merge(checkout, wt.branch, "milepost: merge a (attempt 1)")
    assert result.ok and result.conflict is None and result.commit == repo.tip("main")
    assert merges(repo.root) == ["milepost: merge a (attempt 1)"]
    assert git(repo.root, "rev-list", "--parents", "-n", "1", "main").split()[1:] == [before, wt.head()]
    assert (repo.root / "src" / "a.py").read_text() == "A = 1\n"
    assert status(repo.root) == ""
    with pytest.raises(UnknownRefError, match="'dev' is not a branch"):
        integration_checkout(repo, "dev", folder(repo), 1)


def test_a_conflict_is_returned_and_the_checkout_stays_at_the_first_merge(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    first = work(repo, "a", {"src/app.py": "x = 'from a'\ny = 2\n"})
    second = work(repo, "b", {"src/app.py": "x = 'from b'\ny = 2\n"})
    assert merge(repo.root, first.branch, "merge a").ok
    after_first = repo.tip("main")
    result = merge(repo.root, second.branch, "merge b")
    assert not result.ok and result.commit is None and result.conflict is not None
    lines = result.conflict.splitlines()
    assert lines[0] == "1 file(s) conflict merging milepost/1/b into main: src/app.py"
    assert any("x = 'from a'" in line for line in lines) and any("x = 'from b'" in line for line in lines)
    assert any(line.lstrip("+ ").startswith("<<<<<<<") for line in lines)
    assert repo.tip("main") == after_first and status(repo.root) == ""
    assert (repo.root / "src" / "app.py").read_text() == "x = 'from a'\ny = 2\n"
    assert not (repo.root / ".git" / "MERGE_HEAD").exists()


def test_a_conflict_text_is_at_most_200_lines(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    a = work(repo, "a", {f"src/m{i}.py": "".join(f"a{j}\n" for j in range(30)) for i in range(12)})
    b = work(repo, "b", {f"src/m{i}.py": "".join(f"b{j}\n" for j in range(30)) for i in range(12)})
    assert merge(repo.root, a.branch, "merge a").ok
    conflict = merge(repo.root, b.branch, "merge b").conflict
    assert conflict is not None and len(conflict.splitlines()) == 200
    assert conflict.startswith("12 file(s) conflict") and " and 7 more" in conflict.splitlines()[0]
    assert conflict.splitlines()[-1].endswith("more lines)")


def test_a_users_uncommitted_work_is_never_touched_and_their_next_commit_reverts_nothing(tmp_path: Path) -> None:
    """The workspace has main checked out with uncommitted work: milepost
    never moves main under it. The merges land on milepost/1/integration (in
    a worktree outside the workspace); the user's files, index and main stay
    as they were; after their own ``git add -A && git commit``, the one
    command (``git merge milepost/1/integration``) brings both together."""
    repo = make_repo(tmp_path / "ws")
    (repo.root / "src" / "app.py").write_text("x = 'mine, not committed'\ny = 2\n")
    (repo.root / "notes.txt").write_text("my notes\n")
    mine, main_before = status(repo.root), repo.tip("main")
    a = work(repo, "a", {"src/a.py": "A = 1\n"})
    b = work(repo, "b", {"src/b.py": "B = 1\n"})
    with pytest.raises(GitError, match="has uncommitted changes"):
        merge(repo.root, a.branch, "merge a")  # never into a dirty checkout
    into = integration_checkout(repo, "main", folder(repo), 1)
    assert (into.branch, into.path, into.aside) == ("milepost/1/integration", folder(repo) / "_integration", True)
    assert repo.root not in into.path.parents and into.bring_in() == "git merge milepost/1/integration"
    assert into.why == "main is checked out here with uncommitted changes"
    assert merge(into.path, a.branch, "merge a").ok
    assert merge(integration_checkout(repo, "main", folder(repo), 1).path, b.branch, "merge b").ok
    assert merges(repo.root, "milepost/1/integration") == ["merge a", "merge b"]
    # main, the user's files and index are as they were
    assert repo.tip("main") == main_before and status(repo.root) == mine
    assert (repo.root / "src" / "app.py").read_text() == "x = 'mine, not committed'\ny = 2\n"
    assert not (repo.root / "src" / "a.py").exists()
    # a later look (the workspace clean again) continues on the integration branch: it holds work main lacks
    git(repo.root, "stash", "-u", "-q")
    again = integration_checkout(repo, "main", folder(repo), 1)
    assert again.branch == "milepost/1/integration" and again.path == into.path
    assert again.why == "milepost/1/integration holds work main lacks"
    git(repo.root, "stash", "pop", "-q")
    # the user commits their own work, then brings the merged work in: both stay
    git(repo.root, "add", "-A")
    git(repo.root, "commit", "-q", "-m", "my own change")
    git(repo.root, *into.bring_in().split()[1:], "--no-edit")
    assert (repo.root / "src" / "app.py").read_text() == "x = 'mine, not committed'\ny = 2\n"
    assert (repo.root / "src" / "a.py").read_text() == "A = 1\n" and (repo.root / "src" / "b.py").exists()
    assert (repo.root / "notes.txt").read_text() == "my notes\n" and status(repo.root) == ""
    # brought in: the next look merges into the workspace again
    assert integration_checkout(repo, "main", folder(repo), 1).path == repo.root


def test_a_conflict_on_the_integration_branch_leaves_it_where_it_was(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    (repo.root / "notes.txt").write_text("my notes\n")
    a = work(repo, "a", {"src/app.py": "x = 'a'\ny = 2\n"})
    into = integration_checkout(repo, "main", folder(repo), 1)
    first = merge(into.path, a.branch, "merge a")
    assert first.ok
    c = work(repo, "c", {"src/app.py": "x = 'c'\ny = 2\n"})
    result = merge(integration_checkout(repo, "main", folder(repo), 1).path, c.branch, "merge c")
    assert not result.ok and repo.tip("milepost/1/integration") == first.commit and status(into.path) == ""


def test_two_processes_merging_at_once_take_turns_and_both_land(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    a = work(repo, "a", {"src/a.py": "A = 1\n"})
    b = work(repo, "b", {"src/b.py": "B = 1\n"})
    code = (
        "import sys; from pathlib import Path; from milepost.gates.integration import merge;"
        "r = merge(Path(sys.argv[1]), sys.argv[2], sys.argv[3]); print(r.ok, r.commit)"
    )
    lock = repo.common_dir() / "milepost-merge.lock"
    with open(lock, "a+b") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a third writer holds the lock: both must wait for it
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code, str(repo.root), wt.branch, f"merge {name}"],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name, wt in (("a", a), ("b", b))
        ]
        wait_until(lambda: flock_waiters(lock) == 2, 60, "both merges waiting for the lock")
        assert all(p.poll() is None for p in procs) and merges(repo.root) == []
        fcntl.flock(held, fcntl.LOCK_UN)
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert all(out.startswith("True ") for out, _ in outs), outs
    assert sorted(merges(repo.root)) == ["merge a", "merge b"]
    assert (repo.root / "src" / "a.py").exists() and (repo.root / "src" / "b.py").exists()
    assert status(repo.root) == ""


def test_a_merge_killed_half_way_in_the_integration_worktree_does_not_stop_the_next(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    git(repo.root, "checkout", "-q", "-b", "feature")  # main is checked out nowhere: moved by update-ref
    a = work(repo, "a", {"src/app.py": "x = 'a'\ny = 2\n"})
    b = work(repo, "b", {"src/app.py": "x = 'b'\ny = 2\n"})
    into = integration_checkout(repo, "main", folder(repo), 1)
    checkout = into.path
    assert checkout != repo.root and into.branch == "main" and merge(checkout, a.branch, "merge a").ok
    # as if a driver died inside a conflicting merge there
    subprocess.run(["git", "merge", "--no-ff", "-m", "half", b.branch], cwd=checkout, capture_output=True, check=False)
    assert git(checkout, "rev-parse", "-q", "--verify", "MERGE_HEAD")
    c = work(repo, "c", {"src/c.py": "C = 1\n"})
    assert merge(integration_checkout(repo, "main", folder(repo), 1).path, c.branch, "merge c").ok
    assert merges(repo.root) == ["merge a", "merge c"] and repo.current_branch() == "feature"


def test_no_git_on_path_is_an_environment_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ws").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    with pytest.raises(GitError, match="git is not installed") as caught:
        Repo.find(tmp_path / "ws")
    assert caught.value.exit_code == 3


# -- no side doors (issue 38) ----------------------------------------------------------

HOOKS = ("post-checkout", "post-merge", "pre-commit", "commit-msg", "post-commit", "pre-merge-commit")
HOOKS += ("reference-transaction", "post-rewrite", "pre-auto-gc", "post-index-change")


def test_a_hook_a_doer_wrote_never_runs_during_milepost_git_calls(tmp_path: Path) -> None:
    """A doer writes hooks into the repository's common git dir, points
    core.hooksPath at more, and names an fsmonitor program: none of them runs
    while milepost makes worktrees, commits, merges (in the workspace, on the
    integration branch, by update-ref), lists files or drops a worktree."""
    from milepost.gates.listing import git_files

    repo = make_repo(tmp_path / "ws")
    ran = tmp_path / "ran"
    ran.mkdir()
    elsewhere = tmp_path / "elsewhere-hooks"
    elsewhere.mkdir()
    for hooks in (repo.common_dir() / "hooks", elsewhere):
        for name in HOOKS:
            hook = hooks / name
            hook.write_text(f'#!/bin/sh\necho "$MILEPOST_SECRET" > {ran}/{hooks.name}-{name}\nexit 0\n')
            hook.chmod(0o755)
    monitor = tmp_path / "fsmonitor.sh"
    monitor.write_text(f"#!/bin/sh\ntouch {ran}/fsmonitor\nexit 1\n")
    monitor.chmod(0o755)
    # (as a doer would, from its worktree: the config is the repository's own)
    git(repo.root, "config", "core.fsmonitor", str(monitor))
    a = work(repo, "a", {"src/a.py": "A = 1\n"})
    into = integration_checkout(repo, "main", folder(repo), 1)
    assert into.path == repo.root and merge(into.path, a.branch, merge_message(1, "a", 1)).ok
    git(repo.root, "config", "core.hooksPath", str(elsewhere))
    (repo.root / "notes.txt").write_text("my notes\n")  # dirty: the integration branch
    b = work(repo, "b", {"src/b.py": "B = 1\n"})
    aside = integration_checkout(repo, "main", folder(repo), 1)
    assert aside.aside and merge(aside.path, b.branch, merge_message(1, "b", 1)).ok
    c = work(repo, "c", {"src/c.py": "C = 1\n"})
    Worktrees(repo).drop(c.path, c.branch)
    assert git_files(repo.root) is not None and git_files(a.path) is not None
    assert sorted(p.name for p in ran.iterdir()) == []
    # (the hooks are real: git itself runs them when not told otherwise)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "by hand"], cwd=a.path, check=True)
    assert "elsewhere-hooks-pre-commit" in {p.name for p in ran.iterdir()}


def test_a_base_checked_out_nowhere_is_moved_by_update_ref_without_hooks(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    git(repo.root, "checkout", "-q", "-b", "feature")
    ran = tmp_path / "ran"
    ran.mkdir()
    for name in HOOKS:
        hook = repo.common_dir() / "hooks" / name
        hook.write_text(f"#!/bin/sh\ntouch {ran}/{name}\n")
        hook.chmod(0o755)
    a = work(repo, "a", {"src/a.py": "A = 1\n"})
    into = integration_checkout(repo, "main", folder(repo), 1)
    assert (into.branch, into.aside) == ("main", False) and into.path != repo.root
    assert into.why == "main is checked out in no working tree"
    done = merge(into.path, a.branch, merge_message(1, "a", 1))
    assert done.ok and repo.tip("main") == done.commit and repo.current_branch() == "feature"
    assert list(ran.iterdir()) == []


def test_worktrees_live_outside_the_workspace_keyed_by_the_repository(tmp_path: Path) -> None:
    from milepost.gates.worktrees import WORKTREE_MARK, repo_key

    home = tmp_path / "home"
    assert worktrees_root(None, {"HOME": str(home)}) == home / ".cache" / "milepost" / "worktrees"
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert worktrees_root(None, env) == tmp_path / "xdg" / "milepost" / "worktrees"
    assert worktrees_root(str(tmp_path / "mine"), env) == tmp_path / "mine"
    assert worktrees_root(None, {"HOME": str(home), "XDG_CACHE_HOME": "relative"}).is_relative_to(home)
    repo = make_repo(tmp_path / "ws")
    other = make_repo(tmp_path / "other" / "ws")
    wt = work(repo, "a", {"src/a.py": "A = 1\n"})
    assert not wt.path.is_relative_to(repo.root) and not wt.path.is_relative_to(repo.root / ".milepost")
    assert wt.path == worktrees_root(os.environ["MILEPOST_WORKTREES"]) / repo_key(repo) / "item-1" / "a"
    inside = Repo.find(wt.path)
    assert inside is not None and repo_key(inside) == repo_key(repo) != repo_key(other)
    assert repo_key(repo).startswith("ws-")
    own = Path(git(wt.path, "rev-parse", "--absolute-git-dir"))
    assert (own / WORKTREE_MARK).is_file()


def test_a_milepost_command_inside_any_milepost_worktree_acts_as_the_doer(tmp_path: Path) -> None:
    from milepost.cli._base import _doer_agent, _in_worktree
    from milepost.errors import DoerRefusedError

    repo = make_repo(tmp_path / "ws")
    wt = work(repo, "a", {"src/a.py": "A = 1\n"})
    (wt.path / "src" / "deep").mkdir()
    assert _in_worktree(wt.path / "src" / "deep", None)
    assert not _in_worktree(repo.root / "src", None)
    # made under a root no one names: the mark in its own git dir still tells
    custom = Worktrees(repo).ensure(tmp_path / "anywhere" / "b", "milepost/1/b", "main")
    assert _in_worktree(custom.path, None)
    # a worktree a person made is not milepost's
    git(repo.root, "worktree", "add", "-q", str(tmp_path / "theirs"), "-b", "theirs")
    assert not _in_worktree(tmp_path / "theirs", None)
    assert _in_worktree(tmp_path / "x" / ".milepost" / "worktrees" / "item-1" / "a", None)  # where they lived
    old = Path.cwd()
    try:
        os.chdir(wt.path)
        assert _doer_agent(None, None) == "doer"
        with pytest.raises(DoerRefusedError):
            _doer_agent("operator-bob", None)
        os.chdir(repo.root)
        assert _doer_agent(None, None) is None and _doer_agent(None, "doer") == "doer"
    finally:
        os.chdir(old)


# -- merge and record (issue 38) -------------------------------------------------------------


def test_a_merge_commit_names_item_milestone_and_attempt_and_is_found_by_them(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    a = work(repo, "a", {"src/a.py": "A = 1\n"})
    done = merge(repo.root, a.branch, merge_message(12, "a", 2))
    assert done.ok and done.commit
    body = git(repo.root, "log", "-1", "--format=%B", "main")
    assert body.splitlines()[0] == "milepost: merge a (attempt 2)"
    trailers = git(repo.root, "log", "-1", "--format=%(trailers:only,unfold)", "main").splitlines()
    assert trailers == ["Milepost-Item: 12", "Milepost-Milestone: a", "Milepost-Attempt: 2"]
    assert find_merge(repo, 12, "a", 2) == done.commit
    assert find_merge(repo, 1, "a", 2) is None and find_merge(repo, 12, "a", 1) is None
    assert find_merge(repo, 12, "b", 2) is None
    # on the integration branch too (any local branch)
    (repo.root / "notes.txt").write_text("mine\n")
    b = work(repo, "b", {"src/b.py": "B = 1\n"})
    into = integration_checkout(repo, "main", folder(repo), 12)
    merged = merge(into.path, b.branch, merge_message(12, "b", 1))
    assert find_merge(repo, 12, "b", 1) == merged.commit
    assert a.files_between(a.start, a.head()) == ["src/a.py"]


def test_a_merge_failing_for_another_reason_than_a_conflict_raises_git_error(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    a = work(repo, "a", {"src/a.py": "A = 1\n"})
    (repo.common_dir() / "index.lock").write_text("")  # another git process (an editor's) holds the index
    with pytest.raises(GitError, match=r"git merge of 'milepost/1/a' into 'main' .* failed: .*Unable to write index"):
        merge(repo.root, a.branch, merge_message(1, "a", 1))
    assert not (repo.root / "src" / "a.py").exists() and not (repo.common_dir() / "MERGE_HEAD").exists()
    (repo.common_dir() / "index.lock").unlink()
    assert status(repo.root) == "" and merge(repo.root, a.branch, merge_message(1, "a", 1)).ok


def test_the_scrub_removes_the_store_secrets_agents_kube_and_credential_urls() -> None:
    from milepost.gates.doer_env import doer_env, scrubbed_env

    inherited = {
        "PATH": "/usr/bin",
        "HOME": "/home/dev",
        "MILEPOST_DB": "postgresql://milepost:hunter2@db/milepost",
        "MILEPOST_WORKTREES": "/tmp/w",
        "PREFECT_API_URL": "http://127.0.0.1:4200/api",
        "SSH_AUTH_SOCK": "/run/user/1000/ssh-agent",
        "SSH_AGENT_PID": "42",
        "KUBECONFIG": "/home/dev/.kube/config",
        "GITHUB_TOKEN": "ghp_x",
        "ANTHROPIC_API_KEY": "sk-ant",
        "REDIS": "redis://default:s3cret@cache:6379/0",
        "PIP_OPTIONS": "--extra-index-url https://me:tok@pypi.example/simple",
        "PLAIN_URL": "https://pypi.org/simple",
        "GIT_REMOTE": "ssh://git@github.com/org/repo.git",
        "ORIGIN": "https://ghp_x@github.com/org/repo.git",  # a token given as the user alone
        "CLONE_FROM": "git clone https://oauth2token@gitlab.example/org/repo.git",
        "EMPTY_USER": "https://:tok@pypi.example/simple",
    }
    kept = scrubbed_env(inherited, ["ANTHROPIC_API_KEY"])
    assert kept == {
        "PATH": "/usr/bin",
        "HOME": "/home/dev",
        "ANTHROPIC_API_KEY": "sk-ant",
        "PLAIN_URL": "https://pypi.org/simple",
        "GIT_REMOTE": "ssh://git@github.com/org/repo.git",
    }
    assert "KUBECONFIG" in scrubbed_env(inherited, ["KUBECONFIG"])  # named in doer.env: passed on
    env = doer_env(inherited, [], {"MILEPOST_ITEM": "1"})
    assert env["MILEPOST_AGENT"] == "doer" and env["MILEPOST_ITEM"] == "1" and "MILEPOST_DB" not in env
    assert {k: v for k, v in env.items() if not k.startswith("MILEPOST_")} == scrubbed_env(inherited, [])


def test_an_interrupted_doer_says_how_long_it_ran(tmp_path: Path) -> None:
    import json

    from milepost.gates.attempt import AttemptFiles

    files = AttemptFiles(tmp_path / "attempt-1.log").do
    assert files.ran_for() == 0.0
    files.prompt.write_text("the prompt\n")
    files.log.write_text("working\n")
    os.utime(files.prompt, (1000.0, 1000.0))
    os.utime(files.log, (1042.5, 1042.5))
    assert files.ran_for() == pytest.approx(42.5)  # its supervisor died too: from its files' times
    with open(files.proc, "w") as f:
        f.write(json.dumps({"event": "start", "cmd": 0, "pid": 1}) + "\n")
        f.write(json.dumps({"event": "end", "cmd": 0, "duration": 7.25}) + "\n")
    assert files.ran_for() == 7.25  # what its supervisor recorded as it stopped it


def test_a_base_checked_out_meanwhile_is_never_moved_by_update_ref(tmp_path: Path) -> None:
    from milepost.gates.integration import checked_out

    repo = make_repo(tmp_path / "ws")
    git(repo.root, "checkout", "-q", "-b", "feature")
    a = work(repo, "a", {"src/a.py": "A = 1\n"})
    into = integration_checkout(repo, "main", folder(repo), 1)
    assert not into.aside and "main" not in checked_out(repo) and "feature" in checked_out(repo)
    before = repo.tip("main")
    git(repo.root, "worktree", "add", "-q", str(tmp_path / "mine"), "main")  # the user checks main out
    with pytest.raises(GitError, match="never moves a branch under a working tree"):
        merge(into.path, a.branch, merge_message(1, "a", 1))
    assert repo.tip("main") == before and not (tmp_path / "mine" / "src" / "a.py").exists()
    again = integration_checkout(repo, "main", folder(repo), 1)  # looked at again: the integration branch
    assert again.aside and again.why == "main is checked out in another working tree"
    assert merge(again.path, a.branch, merge_message(1, "a", 1)).ok
    assert repo.tip("main") == before


def test_worktrees_where_they_lived_before_are_removed_and_their_branches_kept(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    old = repo.root / ".milepost" / "worktrees" / "item-1" / "a"
    before = Worktrees(repo).ensure(old, "milepost/1/a", "main")
    (before.path / "src" / "a.py").write_text("A = 1\n")
    assert before.commit_all("attempt 1") is not None
    assert Worktrees(repo).remove_under(repo.root / ".milepost" / "worktrees") == [old]
    assert not old.exists() and repo.branch_exists("milepost/1/a")
    again = work(repo, "a", {"src/a2.py": "A2 = 2\n"})  # the branch, checked out again outside the workspace
    assert (again.path / "src" / "a.py").read_text() == "A = 1\n"
    assert Worktrees(repo).remove_under(repo.root / ".milepost" / "worktrees") == []


def test_what_git_itself_may_run_sees_no_store_and_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A filter driver cannot be switched off without naming it: one a doer
    configured runs as milepost commits its work, but with the environment
    scrubbed as a doer's is. Signature checks and textconv programs a doer
    names never run."""
    monkeypatch.setenv("MILEPOST_DB", "postgresql://milepost:hunter2@db/milepost")
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/run/agent")
    repo = make_repo(tmp_path / "ws")
    ran = tmp_path / "ran"
    ran.mkdir()
    git(repo.root, "config", "filter.leak.clean", f"sh -c 'env > {ran}/filter-env; cat'")
    git(repo.root, "config", "diff.leak.textconv", f"sh -c 'touch {ran}/textconv; cat \"$1\"' -")
    git(repo.root, "config", "merge.verifySignatures", "true")
    git(repo.root, "config", "gpg.program", f"sh -c 'touch {ran}/gpg; exit 1'")
    a = work(repo, "a", {".gitattributes": "*.py filter=leak diff=leak\n", "src/a.py": "A = 1\n"})
    assert a.diff_stat(a.start, a.head()).startswith("2 files changed")
    assert merge(repo.root, a.branch, merge_message(1, "a", 1)).ok
    seen = (ran / "filter-env").read_text()
    assert "hunter2" not in seen and "SECRET_TOKEN" not in seen and "SSH_AUTH_SOCK" not in seen
    assert "PATH=" in seen
    assert not (ran / "textconv").exists() and not (ran / "gpg").exists()


def test_a_real_milepost_command_in_a_worktree_outside_the_workspace_acts_as_the_doer(tmp_path: Path) -> None:
    from tests.conftest import CLI

    repo = make_repo(tmp_path / "ws")
    wt = work(repo, "a", {"src/a.py": "A = 1\n"})
    refused = CLI(wt.path / "src")("--agent", "bob", "list")
    assert refused.code == 2 and "runs in a doer's worktree or environment (agent doer)" in refused.err, refused
    mine = CLI(repo.root / "src")("--agent", "bob", "list")
    assert "doer" not in mine.err, mine  # (no store here: another error, not the doer's)


def test_a_merge_killed_half_way_on_the_integration_branch_does_not_stop_the_next(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    (repo.root / "notes.txt").write_text("mine\n")  # main checked out with changes: the integration branch
    a = work(repo, "a", {"src/app.py": "x = 'a'\ny = 2\n"})
    b = work(repo, "b", {"src/app.py": "x = 'b'\ny = 2\n"})
    into = integration_checkout(repo, "main", folder(repo), 1)
    assert into.aside and merge(into.path, a.branch, "merge a").ok
    # as if a driver died inside a conflicting merge there, then the conflict was resolved by nobody
    subprocess.run(["git", "merge", "--no-ff", "-m", "half", b.branch], cwd=into.path, capture_output=True, check=False)
    git(into.path, "checkout", "-q", "HEAD", "--", "src/app.py")
    assert git(into.path, "rev-parse", "-q", "--verify", "MERGE_HEAD")
    c = work(repo, "c", {"src/c.py": "C = 1\n"})
    assert merge(into.path, c.branch, "merge c").ok  # (the same checkout, not looked at again)
    assert merges(repo.root, "milepost/1/integration") == ["merge a", "merge c"]


def test_a_workspace_in_the_middle_of_a_merge_is_left_to_its_user(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    a = work(repo, "a", {"src/app.py": "x = 'a'\ny = 2\n"})
    b = work(repo, "b", {"src/app.py": "x = 'b'\ny = 2\n"})
    git(repo.root, "merge", "-q", "--no-ff", "-m", "a", a.branch)
    subprocess.run(["git", "merge", "--no-ff", "-m", "b", b.branch], cwd=repo.root, capture_output=True, check=False)
    git(repo.root, "checkout", "-q", "HEAD", "--", "src/app.py")  # nothing changed, MERGE_HEAD still there
    assert status(repo.root) == "" and repo.merging()
    into = integration_checkout(repo, "main", folder(repo), 1)
    assert into.aside and into.path != repo.root and repo.merging()  # the user's merge, untouched
    assert into.why == "main is checked out here in the middle of a merge"
