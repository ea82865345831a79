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
from milepost.gates.integration import integration_checkout, merge
from milepost.gates.worktrees import Worktree, Worktrees, protected_changes
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


def wt_path(repo: Repo, name: str) -> Path:
    return repo.root / ".milepost" / "worktrees" / "item-1" / name


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
    home = repo.root / ".milepost"
    wt = work(repo, "a", {"src/a.py": "A = 1\n"})
    checkout = integration_checkout(repo, "main", home)
    assert checkout == repo.root  # on main, nothing uncommitted (.milepost/ aside)
    before = repo.tip("main")
    result = merge(checkout, wt.branch, "milepost: merge a (attempt 1)")
    assert result.ok and result.conflict is None and result.commit == repo.tip("main")
    assert merges(repo.root) == ["milepost: merge a (attempt 1)"]
    assert git(repo.root, "rev-list", "--parents", "-n", "1", "main").split()[1:] == [before, wt.head()]
    assert (repo.root / "src" / "a.py").read_text() == "A = 1\n"
    assert status(repo.root) == ""
    with pytest.raises(UnknownRefError, match="'dev' is not a branch"):
        integration_checkout(repo, "dev", home)


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


def test_a_users_uncommitted_work_is_never_touched(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "ws")
    home = repo.root / ".milepost"
    (repo.root / "src" / "app.py").write_text("x = 'mine, not committed'\ny = 2\n")
    (repo.root / "notes.txt").write_text("my notes\n")
    mine = status(repo.root)
    a = work(repo, "a", {"src/a.py": "A = 1\n"})
    b = work(repo, "b", {"src/app.py": "x = 'b'\ny = 2\n"})  # the very file the user is editing
    with pytest.raises(GitError, match="has uncommitted changes"):
        merge(repo.root, a.branch, "merge a")  # never into a dirty checkout
    checkout = integration_checkout(repo, "main", home)
    assert checkout == home / "worktrees" / "integration"
    first = merge(checkout, a.branch, "merge a")
    assert first.ok and repo.tip("main") == first.commit
    second = merge(integration_checkout(repo, "main", home), b.branch, "merge b")
    assert second.ok and repo.tip("main") == second.commit
    assert merges(repo.root) == ["merge a", "merge b"]
    assert git(repo.root, "show", "main:src/app.py") == "x = 'b'\ny = 2"
    # the user's files are as they were; the merged work went to main, not into their checkout
    assert (repo.root / "src" / "app.py").read_text() == "x = 'mine, not committed'\ny = 2\n"
    assert (repo.root / "notes.txt").read_text() == "my notes\n"
    assert not (repo.root / "src" / "a.py").exists()
    assert "src/app.py" in mine and "notes.txt" in status(repo.root)
    # a conflict in the integration worktree leaves main where it was
    c = work(repo, "c", {"src/app.py": "x = 'c'\ny = 2\n"}, start=first.commit or "")
    result = merge(integration_checkout(repo, "main", home), c.branch, "merge c")
    assert not result.ok and repo.tip("main") == second.commit and status(checkout) == ""


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
    home = repo.root / ".milepost"
    git(repo.root, "checkout", "-q", "-b", "feature")  # the workspace is not on the base: a worktree merges
    a = work(repo, "a", {"src/app.py": "x = 'a'\ny = 2\n"})
    b = work(repo, "b", {"src/app.py": "x = 'b'\ny = 2\n"})
    checkout = integration_checkout(repo, "main", home)
    assert checkout != repo.root and merge(checkout, a.branch, "merge a").ok
    # as if a driver died inside a conflicting merge there
    subprocess.run(["git", "merge", "--no-ff", "-m", "half", b.branch], cwd=checkout, capture_output=True, check=False)
    assert git(checkout, "rev-parse", "-q", "--verify", "MERGE_HEAD")
    c = work(repo, "c", {"src/c.py": "C = 1\n"})
    assert merge(integration_checkout(repo, "main", home), c.branch, "merge c").ok
    assert merges(repo.root) == ["merge a", "merge c"] and repo.current_branch() == "feature"


def test_no_git_on_path_is_an_environment_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ws").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    with pytest.raises(GitError, match="git is not installed") as caught:
        Repo.find(tmp_path / "ws")
    assert caught.value.exit_code == 3
