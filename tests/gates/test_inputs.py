"""Fingerprints of a gate's inputs, on real folders (with and without git):
content decides, what never counts, the stat cache, unreadable files, and a
gate that rewrites its own inputs."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from milepost.gates.attempt import AttemptFiles
from milepost.gates.command import run_gate
from milepost.gates.inputs import Snapshot, StatCache, changed_paths, spec_digest
from milepost.graph.models import GateCommand

GATE = [GateCommand(run="true")]
SPEC = spec_digest(GATE)


def tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def fp(root: Path, *patterns: str, cache: StatCache | None = None):  # type: ignore[no-untyped-def]
    return Snapshot(root, cache or StatCache(None)).fingerprint(list(patterns), SPEC)


@pytest.fixture(params=["git", "plain"])
def ws(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A workspace: a git work tree, or a plain folder (the files are walked)."""
    root = tmp_path / "ws"
    root.mkdir()
    tree(root, {"src/pkg/a.py": "a = 1\n", "src/pkg/b.py": "b = 2\n", "tests/test_a.py": "def test(): pass\n"})
    if request.param == "git":
        git(root, "init", "-q")
        git(root, "add", "-A")
        git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    return root


def test_content_decides_not_modification_times(ws: Path) -> None:
    before = fp(ws, "src/**")
    assert sorted(before.files) == ["src/pkg/a.py", "src/pkg/b.py"] and before.digest is not None
    os.utime(ws / "src/pkg/a.py", (time.time() + 100, time.time() + 100))  # a touch
    assert fp(ws, "src/**").digest == before.digest
    (ws / "src/pkg/a.py").write_text("a = 2\n")
    changed = fp(ws, "src/**")
    assert changed.digest != before.digest
    assert changed_paths(before.files, changed.files) == ["src/pkg/a.py"]
    (ws / "src/pkg/a.py").write_text("a = 1\n")  # reverted: proven again by what it was
    assert fp(ws, "src/**").digest == before.digest


def test_new_and_deleted_files_change_the_fingerprint_tracked_or_not(ws: Path) -> None:
    before = fp(ws, "src/**")
    tree(ws, {"src/pkg/new.py": "n = 1\n"})  # untracked in the git workspace: still an input
    added = fp(ws, "src/**")
    assert changed_paths(before.files, added.files) == ["src/pkg/new.py"]
    (ws / "src/pkg/b.py").unlink()  # tracked and deleted: no longer an input
    assert changed_paths(added.files, fp(ws, "src/**").files) == ["src/pkg/b.py"]


def test_bytecode_and_milepost_and_git_never_count(ws: Path) -> None:
    before = fp(ws, "**")
    tree(ws, {"src/pkg/__pycache__/a.cpython-311.pyc": "bytes", ".milepost/x.log": "log"})
    after = fp(ws, "**")
    assert after.digest == before.digest
    assert not any(p.startswith((".git/", ".milepost/")) or "__pycache__" in p for p in after.files)


def test_git_ignored_files_do_not_count_in_a_git_workspace(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    tree(root, {".gitignore": "build/\n*.log\n", "src/a.py": "a\n", "build/out.py": "x\n", "src/debug.log": "d\n"})
    git(root, "init", "-q")
    assert sorted(fp(root, "**/*.py", "**/*.log").files) == ["src/a.py"]
    # The same folder without git: nothing is ignored.
    (root / ".git").rename(tmp_path / "moved-git")
    assert sorted(fp(root, "**/*.py", "**/*.log").files) == ["build/out.py", "src/a.py", "src/debug.log"]


def test_a_workspace_inside_a_larger_repository_sees_paths_from_its_own_root(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    tree(repo, {"other/x.py": "x\n", "proj/src/a.py": "a\n"})
    git(repo, "init", "-q")
    assert list(fp(repo / "proj", "src/**").files) == ["src/a.py"]


def test_gitignore_patterns_anchoring_names_and_negation(ws: Path) -> None:
    tree(ws, {"docs/readme.md": "r\n", "src/pkg/notes.md": "n\n", "setup.py": "s\n", "deep/er/setup.py": "d\n"})
    assert sorted(fp(ws, "src/pkg/a.py").files) == ["src/pkg/a.py"]  # a literal path
    assert sorted(fp(ws, "src/pkg").files) == ["src/pkg/a.py", "src/pkg/b.py", "src/pkg/notes.md"]  # a folder
    assert sorted(fp(ws, "setup.py").files) == ["deep/er/setup.py", "setup.py"]  # a bare name: any depth
    assert sorted(fp(ws, "**/*.md").files) == ["docs/readme.md", "src/pkg/notes.md"]
    assert sorted(fp(ws, "src/**", "!**/*.md").files) == ["src/pkg/a.py", "src/pkg/b.py"]  # the last match wins
    assert sorted(fp(ws, "src/*/a.py", "tests/").files) == ["src/pkg/a.py", "tests/test_a.py"]
    # ./ anchors a name at the workspace root (git's leading '/', which milepost refuses as absolute).
    assert sorted(fp(ws, "./setup.py").files) == ["setup.py"]
    assert sorted(fp(ws, "./*.py").files) == ["setup.py"]
    assert sorted(fp(ws, "./docs/").files) == ["docs/readme.md"]
    assert sorted(fp(ws, "**/setup.py", "!./setup.py").files) == ["deep/er/setup.py"]


def test_the_spec_is_part_of_the_fingerprint_but_not_command_names() -> None:
    base = spec_digest([GateCommand(name="tests", run="pytest -q", env={"A": "1"}, timeout=10)])
    assert spec_digest([GateCommand(name="other", run="pytest -q", env={"A": "1"}, timeout=10)]) == base
    for changed in (
        GateCommand(name="tests", run="pytest", env={"A": "1"}, timeout=10),
        GateCommand(name="tests", run="pytest -q", env={"A": "2"}, timeout=10),
        GateCommand(name="tests", run="pytest -q", env={"A": "1"}, timeout=20),
        GateCommand(name="tests", run="pytest -q", env={"A": "1"}, timeout=10, cwd="sub"),
    ):
        assert spec_digest([changed]) != base
    # The milestone's timeout applies to commands without their own.
    assert spec_digest([GateCommand(run="x")], 5) != spec_digest([GateCommand(run="x")], 6)


def test_executable_bit_and_symlinks_are_content(ws: Path) -> None:
    before = fp(ws, "src/**")
    (ws / "src/pkg/a.py").chmod(0o755)
    assert fp(ws, "src/**").digest != before.digest
    (ws / "src/pkg/link.py").symlink_to("a.py")
    linked = fp(ws, "src/**")
    assert linked.files["src/pkg/link.py"].startswith("link:")
    (ws / "src/pkg/a.py").write_text("changed\n")  # the link's text did not change
    assert fp(ws, "src/**").files["src/pkg/link.py"] == linked.files["src/pkg/link.py"]


def test_a_file_that_cannot_be_read_makes_the_fingerprint_incomplete(tmp_path: Path) -> None:
    tree(tmp_path, {"src/pkg/a.py": "a\n"})
    os.mkfifo(tmp_path / "src/pkg/pipe.py")  # (root reads any mode-000 file; a pipe has no content to hash)
    got = fp(tmp_path, "src/**")
    assert got.digest is None and not got.complete
    assert got.unreadable == {"src/pkg/pipe.py": "not a regular file"}
    assert "src/pkg/pipe.py (not a regular file)" in got.problems()


def test_the_stat_cache_keeps_unchanged_files_from_being_hashed_again(ws: Path) -> None:
    path = ws / ".milepost" / "cache" / "inputs-stat.json"
    racy = StatCache(path)  # a file changed within the last 2 s is hashed every time
    digest = fp(ws, "src/**", cache=racy).digest
    racy.save()
    assert racy.hashed == 2 and not path.exists()
    first = StatCache(path, racy_seconds=0)
    assert fp(ws, "src/**", cache=first).digest == digest
    first.save()
    assert first.hashed == 2 and len(json.loads(path.read_text())["entries"]) == 2
    warm = StatCache(path, racy_seconds=0)
    assert fp(ws, "src/**", cache=warm).digest == digest and warm.hashed == 0
    # Same size, the old mtime put back, new content: the ctime (moved by the write) still tells.
    st = (ws / "src/pkg/a.py").stat()
    (ws / "src/pkg/a.py").write_text("a = 9\n")
    os.utime(ws / "src/pkg/a.py", ns=(st.st_atime_ns, st.st_mtime_ns))
    again = StatCache(path, racy_seconds=0)
    assert fp(ws, "src/**", cache=again).digest != digest and again.hashed == 1
    # A damaged cache only costs time.
    path.write_text("{not json")
    damaged = StatCache(path)
    assert fp(ws, "src/**", cache=damaged).digest == fp(ws, "src/**").digest and damaged.hashed == 2


def test_a_gate_records_its_fingerprint_and_says_when_it_rewrites_its_inputs(ws: Path) -> None:
    log = ws / ".milepost" / "logs" / "attempt-1.log"
    result = run_gate([GateCommand(run="true")], log, default_cwd=ws, inputs=["src/**"])
    want = fp(ws, "src/**")
    assert result.passed and result.fingerprint == want.digest and result.inputs_files == 2
    assert result.rewrote == [] and "milepost: inputs: 2 files" in log.read_text()
    files = AttemptFiles(log)
    assert files.read_inputs(want.inputs_digest) == want.files and files.inputs.is_file()
    assert files.recorded_fingerprint([GateCommand(run="true")], None) == want  # what recovery reads
    log2 = ws / ".milepost" / "logs" / "attempt-2.log"
    formatter = [GateCommand(run="echo '# formatted' >> src/pkg/b.py")]
    before = Snapshot(ws, StatCache(None)).fingerprint(["src/**"], spec_digest(formatter))
    fmt = run_gate(formatter, log2, default_cwd=ws, inputs=["src/**"])
    # What is proven is what the gate started on; it is no longer what is there.
    assert fmt.passed and fmt.rewrote == ["src/pkg/b.py"] and fmt.fingerprint == before.digest
    assert Snapshot(ws, StatCache(None)).fingerprint(["src/**"], spec_digest(formatter)).digest != fmt.fingerprint
    assert "the gate changed its own inputs: src/pkg/b.py" in log2.read_text()
