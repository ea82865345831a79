"""Shared fixtures and helpers: temp workspaces, the CLI (in this process by
default, the real entry point in a subprocess where a test needs a process),
and a real PostgreSQL server when one is installed (CI installs one; set
MILEPOST_REQUIRE_POSTGRES=1 to make its absence an error instead of a skip)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from milepost.service import Service

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


# The suite's kinds (pyproject.toml's markers). `make test-fast` runs the pure
# ones: no Prefect, no PostgreSQL, no browser, none marked slow. Every test
# under tests/flows/ starts Prefect; so do these modules elsewhere.
STARTS_PREFECT = frozenset({"test_demo.py", "test_readme.py"})
STARTS_A_BROWSER = frozenset({"test_ui.py"})
# Seconds to minutes each: real processes and signals, whole packages, hundreds
# of generated examples (modules, then single tests as file::name).
SLOW = frozenset(
    {
        "test_hostile.py",
        "test_hostile_plans.py",
        "test_hostile_workspaces.py",
        "test_fencing.py",
        "test_mcp.py",
        "test_scaffold_real.py",
        "test_plainyaml.py",
        "test_verify_fast.py",
        "test_test_mapping.py",
        "test_units.py",
        "test_supervisor.py",
        "test_command.py",
        "test_matcher.py",
        "test_properties.py",
        "test_liveness.py",
        "test_planfile.py::test_an_honest_100000_milestone_plan_applies",
        "test_store.py::test_processes_racing_through_the_cli",
        "test_extras.py::test_the_default_drive_path_imports_no_dask",
        "test_lifecycle.py::test_two_processes_race_the_same_expected_revision",
        "test_picture.py::test_png_where_a_converter_is_installed",
        "test_picture.py::test_svg_scales_to_its_window_and_its_legend_says_how_the_path_was_measured",
        "test_picture.py::test_json_graph_holds_every_format_in_one_document",
        "test_picture.py::test_graph_command_writes_every_format",
        "test_picture.py::test_the_html_page_fits_a_1500_px_window",
        "test_cli.py::test_example_plan_works_by_hand",
        "test_public_api.py::test_state_commands_do_not_import_prefect",
        "test_public_api.py::test_next_imports_only_what_it_uses",
        "test_public_api.py::test_the_gate_modules_do_not_import_prefect",
        "test_scaffold.py::test_scaffold_edit_apply_drive_order",
        "test_scaffold.py::test_editing_a_leaf_makes_exactly_it_and_its_importers_stale",
        "test_dag.py::test_large_graph_next_ready_loop_is_incremental",
        "test_scaffold_cycles.py::test_plan_cycles_reports_as_json_and_imports_neither_prefect_nor_a_store",
        "test_scaffold_cycles.py::test_the_cut_milestones_gate_fails_until_the_cycle_is_cut_in_the_files",
        "test_scaffold_cycles.py::test_jinja2s_twenty_module_cycle_is_no_import_time_cycle",
        "test_next.py::test_next_answers_what_the_graph_answers",
        "test_small_promises.py::test_a_lease_holder_reads_as_a_pid_on_a_host",
        "test_store.py::test_a_large_plan_is_written_in_file_order_with_its_deps",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path
        if path.parent.name == "flows" or path.name in STARTS_PREFECT:
            item.add_marker(pytest.mark.prefect)
        if path.name in STARTS_A_BROWSER:
            item.add_marker(pytest.mark.browser)
        if path.name in SLOW or f"{path.name}::{item.name.split('[')[0]}" in SLOW:
            item.add_marker(pytest.mark.slow)


def pytest_configure(config: pytest.Config) -> None:
    """The tests send SIGINT to the processes they start (Ctrl-C). A shell
    without job control starts its background commands with SIGINT ignored,
    and an ignored signal stays ignored in every child: started that way
    (`.ci/run &` in a script), the suite would test an uninterruptible drive.
    A handler here is reset to the default in each child it starts."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # A drive with no Prefect server up starts one per drive, as before: a test's
    # workspace must not leave a background server running for its idle time.
    os.environ.setdefault("MILEPOST_SERVER", "temporary")
    # pytest-xdist's workers run with COLUMNS=80, and milepost's tables off a
    # terminal honour COLUMNS (else 200 columns): without this the same test
    # would see other tables under `-n 2` than alone. A test that is about
    # COLUMNS sets it itself.
    os.environ.pop("COLUMNS", None)


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def data(self) -> Any:
        return json.loads(self.out)


class CLI:
    """Runs the real ``milepost`` entry point (``python -m milepost``) in a
    subprocess, in a workspace directory, with a clean MILEPOST_* environment."""

    def __init__(self, cwd: Path, env: dict[str, str] | None = None) -> None:
        self.cwd = cwd
        self.extra = dict(env or {})

    @property
    def env(self) -> dict[str, str]:
        # Read at call time: session fixtures (a Prefect server) may set variables later.
        kept = ("MILEPOST_LEASE_TTL", "MILEPOST_SERVER", "MILEPOST_WORKTREES")
        base = {k: v for k, v in os.environ.items() if not k.startswith("MILEPOST_") or k in kept}
        return {**base, **self.extra}

    def popen(self, *args: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "milepost", *args],
            cwd=self.cwd,
            env={**self.env, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def __call__(self, *args: str, check: bool | None = None, timeout: float = 120, **env: str) -> Result:
        p = subprocess.run(
            [sys.executable, "-m", "milepost", *args],
            cwd=self.cwd,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        r = Result(p.returncode, p.stdout, p.stderr)
        if check is True and r.code != 0:
            raise AssertionError(f"milepost {' '.join(args)} exited {r.code}: {r.err}{r.out}")
        return r

    def json(self, *args: str, **kw: Any) -> Any:
        r = self("--json", *args, check=True, **kw)
        return r.data


class InProcessCLI(CLI):
    """Runs ``milepost.cli.main`` in this process, in the workspace directory,
    with a clean MILEPOST_* environment and stdout/stderr captured by click's
    test runner: the same exit codes and output as the real entry point,
    without an interpreter start per call. ``popen`` (signals, kills) still
    starts the real entry point; tests of the real process use ``CLI``."""

    def __call__(self, *args: str, check: bool | None = None, timeout: float = 120, **env: str) -> Result:
        from click.testing import CliRunner

        from milepost.cli import main

        clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("MILEPOST_")}
        clean.update({k: v for k, v in self.env.items() if k.startswith("MILEPOST_")})
        clean.update(self.extra)
        clean.update(env)
        here = os.getcwd()
        code = 0
        runner = CliRunner()
        with runner.isolation(env=clean) as (out, err, _):
            os.chdir(self.cwd)
            try:
                main(list(args))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            finally:
                os.chdir(here)
            r = Result(code, out.getvalue().decode(), err.getvalue().decode())
        if check is True and r.code != 0:
            raise AssertionError(f"milepost {' '.join(args)} exited {r.code}: {r.err}{r.out}")
        return r


def wait_until(
    check: Callable[[], object],
    timeout: float = 30,
    what: str = "the condition",
    *,
    step: float = 0.05,
    output: Callable[[], str] | None = None,
) -> float:
    """Poll ``check`` every ``step`` seconds until it holds; the seconds it
    took. Fails after ``timeout`` naming ``what``; ``output`` (called on
    every poll, and free to fail itself, e.g. when a process it watches has
    exited) adds what a process printed to the failure."""
    t0 = time.monotonic()
    while not check():
        printed = output() if output is not None else ""
        assert time.monotonic() - t0 < timeout, f"timed out after {timeout:g} s waiting for {what}" + (
            f"; the output:\n{printed}" if printed else ""
        )
        time.sleep(step)
    return time.monotonic() - t0


def ctrl_c_once(
    proc: subprocess.Popen[str], ready: Callable[[], object], what: str, timeout: float = 120, after: float = 0.0
) -> tuple[str, str]:
    """Once ``ready`` holds (and ``after`` seconds more: a time the test is
    about), Ctrl-C ``proc`` (SIGINT) and read its (stdout, stderr); killed
    if it outlives that by 60 s or the test fails first."""
    try:
        wait_until(ready, timeout, what)
        time.sleep(after)
        proc.send_signal(signal.SIGINT)
        return proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def runs_program(pid: int, program: str) -> bool:
    """Whether process ``pid`` (a gate's shell, say) runs ``program`` now,
    itself (an exec) or as one of its children: what a test waits for before
    it stops a gate whose pid was written just before that program started."""

    def cmd(p: int | str) -> bytes:
        try:
            return Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            return b""

    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return any(Path(c.decode()).name == program for c in [cmd(pid), *map(cmd, children)] if c)


def flock_waiters(path: Path) -> int:
    """How many processes wait for a flock on ``path`` (/proc/locks' blocked entries of its inode)."""
    st = path.stat()
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return sum(1 for line in Path("/proc/locks").read_text().splitlines() if "->" in line and inode in line)


@pytest.fixture
def milepost_bin(tmp_path: Path) -> Path:
    """A folder holding a ``milepost`` command that runs this interpreter's entry point: put it
    first on PATH to run scripts and README lines as a user's shell would."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "milepost"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m milepost "$@"\n')
    wrapper.chmod(0o755)
    return bin_dir


@pytest.fixture(scope="session", autouse=True)
def _worktrees_outside_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """milepost's git worktrees (docs/doers.md) under this session's temporary
    folder, not the user's cache folder (keyed by repository: tests share it)."""
    before = os.environ.get("MILEPOST_WORKTREES")
    os.environ["MILEPOST_WORKTREES"] = str(tmp_path_factory.mktemp("worktrees"))
    yield
    if before is None:
        os.environ.pop("MILEPOST_WORKTREES", None)
    else:
        os.environ["MILEPOST_WORKTREES"] = before


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def cli(workspace: Path) -> CLI:
    """The CLI in this process, in an initialized workspace."""
    c = InProcessCLI(workspace)
    c("init", check=True)
    return c


@pytest.fixture
def bare_cli(workspace: Path) -> CLI:
    """The CLI in this process, in a folder with no store."""
    return InProcessCLI(workspace)


@pytest.fixture
def real_cli(workspace: Path) -> CLI:
    """The real entry point (``python -m milepost``) in a subprocess, in an initialized workspace."""
    c = CLI(workspace)
    c("init", check=True)
    return c


@pytest.fixture
def real_bare_cli(workspace: Path) -> CLI:
    """The real entry point in a subprocess, in a folder with no store."""
    return CLI(workspace)


@pytest.fixture
def service(workspace: Path) -> Iterator[Service]:
    from milepost.store import Store
    from milepost.workspace import init_workspace

    ws = init_workspace(workspace)
    svc = Service(Store.open(ws.url, ws.home, ws.root, create=True))
    yield svc
    svc.close()


class MovableClock:
    """The time leases go by for the services a test makes (``Service(clock=...)``):
    the real time plus what the test moved it by. A lease another process
    took by the real time is expired for them once the clock moved past it,
    without sleeping it out."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> MovableClock:
    """A clock every ``Service`` made in this process during the test goes
    by (the in-process CLI's, a drive's); processes the test starts keep
    the real time."""
    moved = MovableClock()
    init = Service.__init__

    def with_clock(self: Service, *args: Any, **kw: Any) -> None:
        kw.setdefault("clock", moved)
        init(self, *args, **kw)

    monkeypatch.setattr(Service, "__init__", with_clock)
    return moved


# -- PostgreSQL ----------------------------------------------------------------


def _pg_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return candidates[-1].parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Postgres:
    host: str
    port: int
    user: str

    def url(self, db: str) -> str:
        return f"postgresql+psycopg://{self.user}@{self.host}:{self.port}/{db}"

    def create_db(self, name: str) -> str:
        import psycopg

        with psycopg.connect(
            f"host={self.host} port={self.port} user={self.user} dbname=postgres", autocommit=True
        ) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}"')
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


class PgCluster:
    """A PostgreSQL cluster of the tests' own (initdb in a temp folder, the
    server on a free loopback port), which a test may stop and start again."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        # Not under pytest's tmp dir: that is private to root, and the server runs as postgres.
        self.base = Path(tempfile.mkdtemp(prefix="milepost-pg-"))
        self.data = self.base / "data"
        self.run_as: list[str] = []
        self.user = "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")
        if os.geteuid() == 0:
            # initdb refuses to run as root: run the server as the postgres user.
            shutil.chown(self.base, "postgres")
            self.run_as = ["runuser", "-u", "postgres", "--"]
        self.port = _free_port()
        subprocess.run(
            [*self.run_as, str(bindir / "initdb"), "-D", str(self.data), "-U", self.user, "--auth=trust", "-E", "UTF8"],
            check=True,
            capture_output=True,
        )

    def _ctl(self, *args: str, check: bool = True) -> None:
        # Not captured: a server it starts would hold the pipe open (its output goes to the -l log).
        subprocess.run(
            [*self.run_as, str(self.bindir / "pg_ctl"), "-D", str(self.data), *args],
            check=check,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    @property
    def _server_args(self) -> list[str]:
        opts = f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.base} -c fsync=off"
        return ["-o", opts, "-l", str(self.base / "log")]

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)

    def start(self) -> None:
        self._ctl(*self._server_args, "-w", "start")
        self._wait_listening()

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "-w", "stop", check=False)

    def restart(self) -> None:
        """``pg_ctl -m fast restart``: every connection is cut, the server is back within a second or so."""
        self._ctl(*self._server_args, "-m", "fast", "-w", "restart")
        self._wait_listening()

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)

    @property
    def server(self) -> Postgres:
        return Postgres("127.0.0.1", self.port, self.user)


def pg_cluster() -> PgCluster:
    """A new, running cluster (skips, or fails under MILEPOST_REQUIRE_POSTGRES=1, without PostgreSQL)."""
    bindir = _pg_bin()
    if bindir is None:
        if os.environ.get("MILEPOST_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL is required (MILEPOST_REQUIRE_POSTGRES=1) but pg_ctl was not found")
        pytest.skip("no PostgreSQL server installed here (CI installs one)")
    cluster = PgCluster(bindir)
    cluster.start()
    return cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[PgCluster]:
    """A cluster of the module's own, which its tests may stop, start and restart."""
    c = pg_cluster()
    try:
        yield c
    finally:
        c.remove()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    cluster = pg_cluster()
    try:
        yield cluster.server
    finally:
        cluster.remove()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, workspace: Path) -> str:
    """Every store contract test runs on a real SQLite file and a real PostgreSQL server."""
    if request.param == "sqlite":
        (workspace / ".milepost").mkdir(exist_ok=True)
        return f"sqlite:///{workspace / '.milepost' / 'milepost.db'}"
    pg: Postgres = request.getfixturevalue("postgres")
    name = "mp_" + request.node.name.lower().replace("[", "_").replace("]", "").replace("-", "_")[:50]
    return pg.create_db(name)


@pytest.fixture
def any_service(store_url: str, workspace: Path) -> Iterator[Service]:
    from milepost.store import Store

    home = workspace / ".milepost"
    home.mkdir(exist_ok=True)
    svc = Service(Store.open(store_url, home, workspace, create=True))
    yield svc
    svc.close()
