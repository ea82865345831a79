"""Hostile input and damaged workspaces, as a table.

Every case runs through the entry point (``milepost.cli.main``, what the
``milepost`` script calls), in a fresh copy of a workspace, once plain and
once with ``--json``. For every one: no traceback, one error line (plain) or
a strict JSON error document (no NaN, no Infinity), the exit code of the
contract, and, for a refusal, a store exactly as it was (every row, every
evidence file). Damaged workspaces are made by a setup step before the run.

``tests/test_cli.py`` covers the same contract through a real subprocess for
a few cases; this table runs in-process so it can hold many."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CLI, InProcessCLI, Result

DB = Path(".milepost") / "milepost.db"


def run_main(cwd: Path, args: list[str], env: dict[str, str] | None = None) -> Result:
    """``milepost ARGS`` in-process, through the tests' one in-process runner."""
    return InProcessCLI(cwd)(*args, **(env or {}))


def strict_json(text: str) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def fingerprint(ws: Path) -> str:
    """Every row of the store and every evidence file (name and size)."""
    db = ws / DB
    parts = []
    if db.is_file():
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                parts.append("\n".join(con.iterdump()))
            finally:
                con.close()
        except sqlite3.DatabaseError as e:
            parts.append(f"unreadable: {e}; {db.read_bytes()!r}")
    home = ws / ".milepost"
    if home.is_dir():
        for p in sorted(home.rglob("*")):
            if p.is_file() and not p.name.startswith("milepost.db") and "prefect" not in p.parts:
                parts.append(f"{p.relative_to(home)} {p.stat().st_size}")
    return "\n".join(parts)


# -- setups: damage a copy of the workspace before the run ---------------------------


def sql(statement: str) -> Callable[[Path], None]:
    def setup(ws: Path) -> None:
        con = sqlite3.connect(ws / DB)
        con.execute(statement)
        con.commit()
        con.close()

    return setup


def delete_db(ws: Path) -> None:
    (ws / DB).unlink()
    for extra in ws.glob(".milepost/milepost.db-*"):
        extra.unlink()


def empty_db(ws: Path) -> None:
    delete_db(ws)
    (ws / DB).write_bytes(b"")


def garbage_db(ws: Path) -> None:
    delete_db(ws)
    (ws / DB).write_bytes(os.urandom(8192))


def damaged_pages(ws: Path) -> None:
    con = sqlite3.connect(ws / DB)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.execute("PRAGMA journal_mode=DELETE")
    con.close()
    data = bytearray((ws / DB).read_bytes())
    page = 4096
    for start in range(page, len(data), page):  # every page but the header's
        data[start : start + page] = b"\xa5" * min(page, len(data) - start)
    (ws / DB).write_bytes(bytes(data))


def write(name: str, content: bytes | str) -> Callable[[Path], None]:
    def setup(ws: Path) -> None:
        data = content.encode() if isinstance(content, str) else content
        (ws / name).write_bytes(data)

    return setup


def make_dir(name: str) -> Callable[[Path], None]:
    return lambda ws: (ws / name).mkdir()


def logs_blocked(ws: Path) -> None:
    """The store's log folder cannot be created: a file is in its way."""
    logs = ws / ".milepost" / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.write_text("not a folder")


def no_workspace(ws: Path) -> None:
    shutil.rmtree(ws / ".milepost")


def milepost_is_a_file(ws: Path) -> None:
    shutil.rmtree(ws / ".milepost")
    (ws / ".milepost").write_text("in the way")


# -- the table ----------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    args: list[str]
    code: int
    setup: Callable[[Path], None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    says: str = ""  # a piece of the error message
    unchanged: bool = True  # the store and its files must be as before
    modes: tuple[bool, ...] = (False, True)  # plain, --json


BIG = "99999999999999999999"
# The classic: nine levels of nine aliases, 9**9 (387 million) strings once expanded.
BILLION_LAUGHS = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    + "objective: *i\n"
)
PLAN_BAD = {
    "recursive alias": ("objective: &a [*a]\n", "recursive alias"),
    "yaml duplicate key": ("objective: x\nobjective: y\n", "duplicate key 'objective'"),
    "json duplicate key": ('{"objective": "x", "objective": "y"}', "duplicate key 'objective'"),
    "alias bomb": (BILLION_LAUGHS, "alias bomb"),
    "deep nesting": ("[" * 50000 + "]" * 50000, "nested too deeply"),
    "huge retries": ("objective: x\nmilestones: [{name: a, retries: 100000000000000000000}]\n", "retries"),
    "yaml inf timeout": ("objective: x\nmilestones: [{name: a, timeout: .inf}]\n", "finite number"),
    "json NaN timeout": ('{"objective": "x", "milestones": [{"name": "a", "timeout": NaN}]}', "finite number"),
    "json Infinity delay": ('{"objective": "x", "defaults": {"retry_delay": Infinity}}', "finite number"),
    "nul in objective": ('objective: "a\\0b"\n', "NUL"),
    "nul in gate": ('objective: x\nmilestones: [{name: a, gate: "true\\0"}]\n', "NUL"),
    "env key with =": ("objective: x\nmilestones: [{name: a, gate: [{run: 'true', env: {'A=B': x}}]}]\n", "'A=B'"),
    "name with newline": ('objective: x\nmilestones: [{name: "a\\n"}]\n', "invalid milestone name"),
    "unknown field": ("objective: x\nmilestonez: []\n", "unknown field 'milestonez'"),
    "cycle": ("objective: x\nmilestones: [{name: a, deps: [b]}, {name: b, deps: [a]}]\n", "a -> b -> a"),
    "scalar document": ("just words\n", "one mapping"),
    "empty document": ("", "one mapping"),
    "timestamp objective": ("objective: 2026-01-01\n", "objective"),
    "huge objective": ("objective: " + "x" * 1_000_001 + "\n", "1000000"),
    "gate of wrong type": ("objective: x\nmilestones: [{name: a, gate: 5}]\n", "gate"),
}

CASES: list[Case] = [
    # ids and numbers
    Case("id beyond 64 bits", ["item", "show", BIG], 2, says="from 1 to 2147483647"),
    Case("id zero", ["item", "show", "0"], 2),
    Case("id not a number", ["item", "show", "abc"], 2),
    Case("item beyond INTEGER", ["list", "--item", "2147483648"], 2),
    Case("attempt beyond 64 bits", ["log", "a", "--attempt", BIG], 2),
    Case("expect-revision zero", ["start", "a", "--expect-revision", "0"], 2),
    Case("retries beyond 64 bits", ["add", "x", "--retries", "100000000000000000000"], 2),
    Case("retries over the limit", ["add", "x", "--retries", "101"], 2),
    Case("timeout nan", ["add", "x", "--timeout", "nan"], 2, says="seconds"),
    Case("timeout inf", ["add", "x", "--timeout", "inf"], 2),
    Case("timeout -inf", ["add", "x", "--timeout", "-inf"], 2),
    Case("timeout overflowing", ["add", "x", "--timeout", "1e309"], 2),
    Case("timeout zero", ["add", "x", "--timeout", "0"], 2),
    Case("retry delay nan", ["add", "x", "--retry-delay", "nan"], 2),
    Case("retry delay negative", ["add", "x", "--retry-delay", "-1"], 2),
    Case("item default timeout nan", ["item", "create", "y", "--timeout", "nan"], 2),
    Case("item default retries negative", ["item", "create", "y", "--retries", "-1"], 2),
    Case("max-parallel zero", ["drive", "--max-parallel", "0"], 2),
    Case("max-parallel huge", ["drive", "--max-parallel", BIG], 2),
    Case("serve interval nan", ["serve", "--interval", "nan"], 2),
    Case("server port out of range", ["server", "start", "--port", "70000"], 2),
    # names
    Case("name with trailing newline", ["add", "build\n"], 2, says="invalid milestone name 'build\\n'"),
    Case("name with capitals", ["add", "Build"], 2),
    Case("empty name", ["add", ""], 2),
    Case("name with a space", ["add", "a b"], 2),
    Case("unknown milestone with newline", ["start", "a\n"], 2),
    Case("bad agent name", ["--agent", "Bad Agent", "list"], 2, says="invalid agent name"),
    Case("dep not a milestone", ["add", "x", "--deps", "a,B!"], 2, says="unknown milestone 'B!'"),
    # text
    Case("empty objective", ["item", "create", ""], 2),
    Case("blank objective", ["item", "create", "   "], 2),
    Case("empty ref", ["ref", "add", "", "x"], 2),
    Case("blank gate", ["add", "x", "--gate", " "], 2),
    Case("blank fix", ["add", "x", "--fix", " "], 2),
    Case("empty reason", ["lock", "c", "--reason", " "], 2),
    # conflicting or malformed flags
    Case("todo and clear-todo", ["item", "update", "--todo", "x:pending", "--clear-todo"], 2, says="contradict"),
    Case("blocked-by and clear", ["item", "update", "--blocked-by", "x", "--clear-blocked-by"], 2, says="contradict"),
    Case(
        "report and report-file",
        ["item", "complete", "--report", "x", "--report-file", "r.txt"],
        2,
        setup=write("r.txt", "done"),
        says="contradict",
    ),
    Case("todo without state", ["item", "update", "--todo", "bad"], 2),
    Case("todo without text", ["item", "update", "--todo", ":pending"], 2),
    Case("recheck not a time", ["item", "update", "--recheck-at", "tomorrow"], 2),
    Case("recheck without zone", ["item", "update", "--recheck-at", "2030-01-01T00:00:00"], 2, says="zone"),
    Case("timer without until", ["item", "wait", "--wake", "timer", "--reason", "r"], 2),
    Case("unknown wait kind", ["item", "wait", "--wake", "bogus", "--reason", "r"], 2),
    Case("external without resource", ["item", "wait", "--wake", "external", "--reason", "r"], 2),
    Case("empty wake resource", ["item", "wake", "--resource", ""], 2),
    Case("unknown filter", ["item", "list", "--filter", "bogus"], 2),
    Case("unknown format", ["graph", "--format", "png2"], 2),
    Case("unknown option", ["list", "--bogus"], 2, says="see `milepost list --help`"),
    Case("unknown command", ["bogus"], 2),
    Case("missing argument", ["start"], 2),
    Case("missing required option", ["needs-fix", "a"], 2),
    # files
    Case("plan file missing", ["plan", "apply", "missing.yaml"], 2, says="not found"),
    Case("plan file is a folder", ["plan", "apply", "adir"], 2, setup=make_dir("adir")),
    Case(
        "plan file binary",
        ["plan", "apply", "bin.yaml"],
        2,
        setup=write("bin.yaml", b"\xff\xfe\x00bin"),
        says="not UTF-8",
    ),
    *(
        Case(
            f"plan: {k}",
            ["plan", "apply", "p.json" if "json" in k else "p.yaml"],
            2,
            setup=write("p.json" if "json" in k else "p.yaml", text),
            says=says,
        )
        for k, (text, says) in PLAN_BAD.items()
    ),
    Case(
        "report file binary",
        ["item", "complete", "--report-file", "r.bin"],
        2,
        setup=write("r.bin", b"\xff\x00"),
        says="not UTF-8",
    ),
    Case("report file missing", ["item", "complete", "--report-file", "nope.txt"], 2),
    Case("export into a missing folder", ["plan", "export", "-o", "no/such/dir/p.yaml"], 2, says="does not exist"),
    Case("export onto a folder", ["plan", "export", "-o", "adir"], 2, setup=make_dir("adir")),
    # exit codes for things that are not there
    Case("history of a missing item", ["history", "--item", "99"], 2, says="no work item 99"),
    Case("refs of a missing item", ["ref", "list", "--item", "99"], 2, says="no work item 99"),
    Case("runs of a missing milestone", ["runs", "zzz"], 2),
    Case("log without runs", ["log", "a"], 2, says="no gate runs"),
    Case("graph of a missing item", ["graph", "99"], 2),
    Case("export of a missing item", ["plan", "export", "99"], 2),
    Case("pick a missing item", ["item", "pick", "99"], 2),
    # environment: settings
    Case("lease ttl not a number", ["list"], 3, env={"MILEPOST_LEASE_TTL": "abc"}, says="MILEPOST_LEASE_TTL"),
    Case("lease ttl negative", ["list"], 3, env={"MILEPOST_LEASE_TTL": "-1"}),
    Case("db retry not a number", ["list"], 3, env={"MILEPOST_DB_RETRY": "soon"}, says="MILEPOST_DB_RETRY"),
    Case("busy timeout negative", ["list"], 3, env={"MILEPOST_BUSY_TIMEOUT": "-5"}, says="MILEPOST_BUSY_TIMEOUT"),
    Case("prefect retries not whole", ["list"], 3, env={"MILEPOST_PREFECT_RETRIES": "1.5"}, says="whole number"),
    Case("lease ttl nan", ["list"], 3, env={"MILEPOST_LEASE_TTL": "nan"}),
    Case("lease ttl inf", ["list"], 3, env={"MILEPOST_LEASE_TTL": "inf"}),
    Case("debug not a boolean", ["list"], 3, env={"MILEPOST_DEBUG": "maybe"}),
    # environment: the store
    Case("mistyped sqlite path", ["--db", "sqlite:///milepost.dbb", "list"], 3, says="run `milepost init`"),
    Case("new MILEPOST_DB file", ["list"], 3, env={"MILEPOST_DB": "sqlite:///other.db"}),
    Case("db in a missing folder", ["--db", "sqlite:////no/such/dir/x.db", "list"], 3),
    Case("db url unparsable", ["--db", "not a url", "list"], 3),
    Case("db driver missing", ["--db", "mysql://u@localhost/x", "list"], 3),
    Case("db unreachable", ["--db", "postgresql+psycopg://u:secret@127.0.0.1:9/x", "list"], 3, says="***"),
    Case("db file deleted", ["list"], 3, setup=delete_db, says="no milepost database"),
    Case("db file emptied", ["list"], 3, setup=empty_db, says="holds no milepost store"),
    Case("db file garbage", ["list"], 3, setup=garbage_db, says="damaged"),
    Case("db pages damaged", ["list"], 3, setup=damaged_pages, says="damaged"),
    Case("db pages damaged, a write", ["start", "a"], 3, setup=damaged_pages),
    Case("db table missing", ["list"], 3, setup=sql("DROP TABLE events"), says="events missing"),
    Case("db version row removed", ["list"], 3, setup=sql("DELETE FROM alembic_version"), says="no schema version"),
    Case("db version table removed", ["list"], 3, setup=sql("DROP TABLE alembic_version"), says="no schema version"),
    Case(
        "db version set back",
        ["list"],
        3,
        setup=sql("UPDATE alembic_version SET version_num='0001'"),
        says="cannot upgrade",
    ),
    Case("db identity removed", ["list"], 3, setup=sql("DELETE FROM store_meta"), says="identity"),
    Case(
        "db newer than milepost", ["list"], 3, setup=sql("UPDATE alembic_version SET version_num='9999'"), says="newer"
    ),
    Case("no workspace", ["list"], 3, setup=no_workspace, says="milepost init"),
    Case("init where .milepost is a file", ["init"], 3, setup=milepost_is_a_file, says="in the way"),
    Case("init under a file", ["init", "/dev/null/ws"], 3),
    # a gate that cannot start is a failed attempt, and its lease is freed
    Case("gate log folder blocked", ["done", "a"], 1, setup=logs_blocked, unchanged=False),
    # success, for contrast: valid uses of the same commands
    Case("bare milepost prints the help", [], 0, unchanged=False, modes=(False,)),
    Case("json and no command", [], 2, modes=(True,), says="Missing command"),
    Case("version", ["--version"], 0, unchanged=False, modes=(False,)),
]


def _readonly_case() -> Case:
    # root ignores file permissions: open the database read-only instead.
    url = "sqlite:///file:{db}?mode=ro&uri=true"
    return Case("read-only database", ["start", "c"], 3, env={"MILEPOST_DB": url}, says="read")


CASES.append(_readonly_case())


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with an item: a (gate true, started), b <- a (gate exit 1), c; a gate run exists."""
    ws = tmp_path_factory.mktemp("template")
    cli = CLI(ws)
    cli("init", check=True)
    cli("item", "create", "Refactor", check=True)
    cli("add", "a", "--gate", "true", check=True)
    cli("add", "b", "--deps", "a", "--gate", "exit 1", "--retries", "1", check=True)
    cli("add", "c", check=True)
    cli("start", "a", check=True)
    return ws


def fresh(template: Path, tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(template, ws)
    return ws


@pytest.mark.parametrize(
    ("case", "as_json"),
    [(c, mode) for c in CASES for mode in c.modes],
    ids=[f"{c.id}-{'json' if mode else 'plain'}" for c in CASES for mode in c.modes],
)
def test_hostile_input(case: Case, as_json: bool, template: Path, tmp_path: Path) -> None:
    ws = fresh(template, tmp_path)
    if case.setup is not None:
        case.setup(ws)
    env = {k: v.replace("{db}", str(ws / DB)) for k, v in case.env.items()}
    if case.id == "gate log folder blocked":
        before = None
    else:
        before = fingerprint(ws)
    args = (["--json"] if as_json else []) + case.args
    r = run_main(ws, args, env)
    assert "Traceback" not in r.err and "Traceback" not in r.out, r.err
    assert r.code == case.code, (r.code, r.out[-500:], r.err[-500:])
    if as_json:
        doc = strict_json(r.out)
        if case.code in (2, 3):
            assert doc["error"]["exit_code"] == case.code and doc["error"]["type"], doc
            assert case.says in doc["error"]["message"], doc
    elif case.code in (2, 3):
        lines = r.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("milepost: error: "), r.err
        assert case.says in lines[0], lines[0]
    if case.code in (2, 3) and case.unchanged:
        assert fingerprint(ws) == before
