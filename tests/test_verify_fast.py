"""``verify`` at drive speed, on a real SQLite file and a real PostgreSQL
server with real subprocess gates: a state byte-identical to one that passed
is ``cached`` (naming the run), ``--fresh`` runs the gates, independent
milestones' gates run side by side up to ``max_parallel`` (seen in the
recorded start and end of their runs, not in wall-clock thresholds), a
milestone never runs before the re-proofs below it end, a failing re-proof
still reopens what is built on it, and a changed gate spec is never taken
from the cache. Every gate appends its milestone's name to a ledger outside
the workspace, so the tests count real executions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from milepost.gates.outcome import CachedFrom, Outcome
from milepost.graph import MilestoneStatus
from milepost.planfile import parse_plan
from milepost.results import GateRun
from milepost.service import Service
from tests.conftest import CLI, runs_program, wait_until

S = MilestoneStatus


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.txt"  # outside the workspace: never an input


def runs_of(ledger: Path) -> list[str]:
    return ledger.read_text().split() if ledger.exists() else []


def code(ws: Path, **files: str) -> None:
    (ws / "src").mkdir(exist_ok=True)
    for name, text in files.items():
        (ws / "src" / f"{name}.py").write_text(text)


def finish(svc: Service, *names: str, item: int | None = None) -> None:
    for n in names:
        svc.start(n, item=item)
        assert svc.done(n, item=item).passed


def last_run(svc: Service, name: str, item: int | None = None) -> GateRun:
    return svc.runs(name, item)[-1]


def views(svc: Service, item: int | None = None) -> dict[str, str]:
    return {v.name: v.view for v in svc.milestone_views(item)[1]}


def chain_plan(ledger: Path) -> str:
    """A leaf, a module importing it, a last step without inputs, and an independent module."""
    log = f"echo $MILEPOST_MILESTONE >> {ledger}"
    return f"""
objective: verify at drive speed
milestones:
  - name: leaf
    gate: "{log} && grep -q ok src/leaf.py"
    inputs: [src/leaf.py]
  - name: user
    deps: [leaf]
    gate: "{log} && grep -q ok src/user.py"
    inputs: [src/user.py, src/leaf.py]
  - name: ship
    deps: [user]
    gate: "{log}"
  - name: other
    gate: "{log} && grep -q ok src/other.py"
    inputs: [src/other.py]
"""


@pytest.fixture
def chain(any_service: Service, workspace: Path, ledger: Path) -> Service:
    code(workspace, leaf="ok = 1\n", user="ok = 2\n", other="ok = 3\n")
    any_service.apply_plan(parse_plan(chain_plan(ledger)))
    finish(any_service, "leaf", "user", "ship", "other")
    assert runs_of(ledger) == ["leaf", "user", "ship", "other"]
    return any_service


def test_a_revert_to_a_proven_state_runs_nothing_and_is_cached(chain: Service, workspace: Path, ledger: Path) -> None:
    svc = chain
    code(workspace, leaf="ok = 1  # edited\n")
    r = svc.verify()
    assert r.ok and [(v.milestone, v.outcome) for v in r.verified] == [("leaf", "passed"), ("user", "passed")]
    assert runs_of(ledger)[4:] == ["leaf", "user"]
    # Put back as it was proven at attempt 1: stale against attempt 2, byte-identical to attempt 1.
    code(workspace, leaf="ok = 1\n")
    assert views(svc) == {"leaf": "stale", "user": "stale", "ship": "done", "other": "done"}
    r = svc.verify(max_parallel=2)
    assert r.ok, r.message
    assert runs_of(ledger)[6:] == []  # no gate ran
    leaf, user = r.verified
    assert (leaf.milestone, leaf.outcome, leaf.status, leaf.attempt) == ("leaf", Outcome.CACHED, S.DONE, 3)
    assert leaf.cached_from == CachedFrom(item=1, milestone="leaf", attempt=1)
    assert leaf.stale is not None and leaf.stale.changed == ["src/leaf.py"]
    assert (user.outcome, user.cached_from) == (Outcome.CACHED, CachedFrom(item=1, milestone="user", attempt=1))
    assert r.message == "cached (the same gate passed on the same inputs before): leaf, user"
    assert (r.unchanged, r.unchecked) == (["other"], ["ship"])
    # Recorded as the drive records a cached attempt: a run naming its source, no budget spent, proven again.
    run = last_run(svc, "leaf")
    assert (run.attempt, run.outcome, run.cached_from) == (3, Outcome.CACHED, leaf.cached_from)
    assert [(m.name, m.status, m.attempts) for m in svc.get_item().milestones] == [
        ("leaf", S.DONE, 1),
        ("user", S.DONE, 1),
        ("ship", S.DONE, 1),
        ("other", S.DONE, 1),
    ]
    assert views(svc) == {"leaf": "done", "user": "done", "ship": "done", "other": "done"}
    assert svc.verify().message == "nothing to re-prove: 3 proven milestones unchanged since proven"


def test_fresh_runs_every_gate_it_checks(chain: Service, workspace: Path, ledger: Path) -> None:
    svc = chain
    code(workspace, leaf="ok = 1  # edited\n")
    assert svc.verify().ok
    code(workspace, leaf="ok = 1\n")  # a state that passed before
    r = svc.verify(fresh=True, max_parallel=2)
    assert r.ok and [(v.milestone, v.outcome, v.cached_from) for v in r.verified] == [
        ("leaf", Outcome.PASSED, None),
        ("user", Outcome.PASSED, None),
    ]
    assert runs_of(ledger)[6:] == ["leaf", "user"]
    assert r.message == "proven again: leaf, user"
    # --all re-runs every done gate, stale or not, and never from the cache either.
    r = svc.verify(all_=True)
    assert [v.outcome for v in r.verified] == [Outcome.PASSED] * 4 and runs_of(ledger)[8:] == [
        "leaf",
        "user",
        "ship",
        "other",
    ]


def test_a_failing_reproof_still_reopens_what_is_built_on_it(chain: Service, workspace: Path, ledger: Path) -> None:
    svc = chain
    code(workspace, leaf="bad = 1\n", other="ok = 3  # edited\n")
    r = svc.verify(max_parallel=2)
    assert not r.ok
    by = {v.milestone: v for v in r.verified}
    assert (by["leaf"].outcome, by["leaf"].status, by["leaf"].reopened) == ("failed", S.NEEDS_FIX, ["user", "ship"])
    assert (by["user"].outcome, by["user"].status, by["user"].reason) == (
        None,
        S.PENDING,
        "waits behind leaf (needs_fix)",
    )
    assert (by["ship"].outcome, by["ship"].reason) == (None, "waits behind user (pending)")
    assert (by["other"].outcome, by["other"].status) == ("passed", S.DONE)  # the independent branch goes on
    assert sorted(runs_of(ledger)[4:]) == ["leaf", "other"]  # nothing ran on top of the failed re-proof
    assert views(svc) == {"leaf": "needs_fix", "user": "blocked", "ship": "blocked", "other": "done"}
    # Put back as proven: the failed milestone and what waited behind it come back from the cache.
    code(workspace, leaf="ok = 1\n")
    r = svc.verify(max_parallel=2)
    assert r.ok, r.message
    assert [(v.milestone, v.outcome) for v in r.verified] == [
        ("leaf", "cached"),
        ("user", "cached"),
        ("ship", "passed"),  # ship has no inputs: never cached
    ]
    assert runs_of(ledger)[6:] == ["ship"]


def slow_plan(ledger: Path) -> str:
    log = f"echo $MILEPOST_MILESTONE >> {ledger}"
    return f"""
objective: two slow independent gates and one on top of the first
milestones:
  - name: a
    gate: "{log} && sleep 1"
    inputs: [src/a.py]
  - name: b
    gate: "{log} && sleep 1"
    inputs: [src/b.py]
  - name: c
    deps: [a]
    gate: "{log}"
    inputs: [src/c.py]
"""


def overlap(x: GateRun, y: GateRun) -> bool:
    return x.started_at < y.finished_at and y.started_at < x.finished_at


def test_independent_gates_run_side_by_side_and_a_milestone_waits_for_the_reproofs_below_it(
    any_service: Service, workspace: Path, ledger: Path
) -> None:
    svc = any_service
    code(workspace, a="1\n", b="1\n", c="1\n")
    svc.apply_plan(parse_plan(slow_plan(ledger)))
    finish(svc, "a", "b", "c")
    code(workspace, a="2\n", b="2\n", c="2\n")
    r = svc.verify(max_parallel=2)
    assert r.ok and [(v.milestone, v.outcome) for v in r.verified] == [(n, "passed") for n in "abc"]
    a, b, c = (last_run(svc, n) for n in "abc")
    assert (a.attempt, b.attempt, c.attempt) == (2, 2, 2)
    assert overlap(a, b)  # the two slow gates ran at the same time
    assert c.started_at >= a.finished_at  # c is built on a: it waited for a's re-proof
    # Room for all three: c still waits for a (a re-proof of a that fails would reopen it).
    code(workspace, a="3\n", b="3\n", c="3\n")
    assert svc.verify(max_parallel=3).ok
    a, b, c = (last_run(svc, n) for n in "abc")
    assert overlap(a, b) and c.started_at >= a.finished_at and c.attempt == 3
    # One at a time (the default): the same gates, one after another.
    code(workspace, a="4\n", b="4\n", c="4\n")
    assert svc.verify().ok
    a, b, c = (last_run(svc, n) for n in "abc")
    assert (a.attempt, b.attempt, c.attempt) == (4, 4, 4)
    assert a.finished_at <= b.started_at and b.finished_at <= c.started_at  # lowest id first
    assert runs_of(ledger)[9:] == ["a", "b", "c"]


def spec_plan(ledger: Path, objective: str, command: str, flavour: str) -> str:
    log = f"echo $MILEPOST_MILESTONE >> {ledger}"
    return f"""
objective: {objective}
milestones:
  - name: leaf
    gate:
      - name: check
        run: "{log} && {command}"
        env: {{FLAVOUR: {flavour}}}
    inputs: [src/leaf.py]
"""


@pytest.mark.parametrize(
    ("command", "flavour"), [("grep -q ok src/leaf.py && true", "plain"), ("grep -q ok src/leaf.py", "spicy")]
)
def test_a_changed_gate_spec_is_run_not_taken_from_the_cache(
    any_service: Service, workspace: Path, ledger: Path, command: str, flavour: str
) -> None:
    """The planted bug: a cache lookup by inputs alone (ignoring the gate's
    command or env) would take item 1's pass on these very files for item 2."""
    svc = any_service
    code(workspace, leaf="ok = 1\n")
    first = svc.apply_plan(parse_plan(spec_plan(ledger, "first", "grep -q ok src/leaf.py", "plain"))).id
    finish(svc, "leaf", item=first)
    code(workspace, leaf="ok = 1  # two\n")
    second = svc.apply_plan(parse_plan(spec_plan(ledger, "second", command, flavour))).id
    finish(svc, "leaf", item=second)
    assert runs_of(ledger) == ["leaf", "leaf"]
    code(workspace, leaf="ok = 1\n")  # the files item 1 proved its own gate on
    r = svc.verify(item=second)
    assert r.ok and [(v.milestone, v.outcome, v.cached_from) for v in r.verified] == [("leaf", "passed", None)]
    assert runs_of(ledger) == ["leaf"] * 3  # it ran
    # The same spec on the same files is cached (the control: the lookup does work).
    assert svc.verify(item=first).verified == []  # item 1 is not stale on its own files
    code(workspace, leaf="ok = 1  # two\n")
    r = svc.verify(item=second)
    assert [(v.outcome, v.cached_from) for v in r.verified] == [
        (Outcome.CACHED, CachedFrom(item=second, milestone="leaf", attempt=1))
    ]
    assert runs_of(ledger) == ["leaf"] * 3


def test_verify_cached_and_fresh_from_the_cli(cli: CLI, workspace: Path) -> None:
    code(workspace, a="ok = 1\n")
    cli("item", "create", "verify from the CLI", check=True)
    cli("add", "a", "--gate", "grep -q ok src/a.py", "--inputs", "src/a.py", check=True)
    cli("start", "a", check=True)
    cli("done", "a", check=True)
    code(workspace, a="ok = 1  # edited\n")
    assert cli("verify", check=True).code == 0
    code(workspace, a="ok = 1\n")
    r = cli("verify", "--max-parallel", "2")
    assert r.code == 0
    assert "a: done — cached (changed since proven: src/a.py): the same gate passed on the same inputs" in r.out
    assert "as item 1 'a' attempt 1 (attempt 3, no gate run)" in r.out
    code(workspace, a="ok = 1  # edited\n")
    j = cli("--json", "verify")
    assert j.code == 0
    [a] = j.data["verified"]
    assert (a["outcome"], a["cached_from"], a["attempt"]) == ("cached", {"item": 1, "milestone": "a", "attempt": 2}, 4)
    code(workspace, a="ok = 1\n")
    j = cli("--json", "verify", "--fresh")
    assert j.code == 0 and [(v["outcome"], v["cached_from"]) for v in j.data["verified"]] == [("passed", None)]
    code(workspace, a="ok = 1  # edited\n")
    j = cli("--json", "verify", "--no-cache")  # as drive's and done's
    assert [v["outcome"] for v in j.data["verified"]] == ["passed"]
    # The recorded runs say the same.
    runs = cli.json("runs", "a")["runs"]
    assert [x["outcome"] for x in runs] == ["passed", "passed", "cached", "cached", "passed", "passed"]
    assert runs[2]["cached_from"] == {"item": 1, "milestone": "a", "attempt": 1}
    # Bad input: exit 2, one line, nothing run.
    bad = cli("verify", "--max-parallel", "0")
    assert bad.code == 2 and "--max-parallel" in bad.err
    help_text = cli("verify", "--help").out
    assert "--fresh" in help_text and "--max-parallel" in help_text and "cached" in help_text


def test_sigterm_stops_every_running_gate_and_records_each_attempt(real_cli: CLI, workspace: Path) -> None:
    """Interrupted while two gates run side by side (on worker threads): both
    process groups are stopped and both attempts recorded as interrupted; the
    re-proof leaves its milestone done, the ordinary attempt is ready again
    (not left in progress), and the next verify takes both at once."""
    import signal
    import time

    cli = real_cli
    code(workspace, a="ok = 1\n", b="ok = 1\n")
    cli("item", "create", "interrupted", check=True)
    for n in "ab":
        gate = f"grep -q ok src/{n}.py && {{ test ! -e slow || {{ echo $$ > {n}.pid; sleep 60; }}; }}"
        cli("add", n, "--gate", gate, "--inputs", f"src/{n}.py", check=True)
        cli("start", n, check=True)
        cli("done", n, check=True)
    code(workspace, b="bad = 1\n")
    assert cli("verify").code == 1  # b's re-proof failed: needs_fix
    (workspace / "slow").write_text("")  # from here on the gates are slow (not an input)
    code(workspace, a="ok = 2\n", b="ok = 2\n")  # a: stale (a re-proof); b: changed since it failed (an attempt)
    proc = cli.popen("verify", "--max-parallel", "2")
    deadline = time.monotonic() + 60
    while not ((workspace / "a.pid").exists() and (workspace / "b.pid").exists()):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    pids = [int((workspace / f"{n}.pid").read_text()) for n in "ab"]
    for pid in pids:  # (the pid is written before sleep starts)
        wait_until(lambda pid=pid: runs_program(pid, "sleep"), 30, f"the gate {pid} running sleep")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert err.strip() == "milepost: error: interrupted"
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert [r["outcome"] for r in cli.json("runs", "a")["runs"]] == ["passed", "interrupted"]
    assert [r["outcome"] for r in cli.json("runs", "b")["runs"]] == ["passed", "failed", "interrupted"]
    listed = {m["name"]: m for m in cli.json("list")["milestones"]}
    assert (listed["a"]["status"], listed["a"]["view"]) == ("done", "stale")  # an interrupted re-proof: still done
    b = listed["b"]
    assert (b["status"], b["view"], b["attempts"]) == ("pending", "ready", 1)  # ready again (as a drive releases it)
    (workspace / "slow").unlink()
    r = cli("--json", "verify", "--max-parallel", "2")
    assert r.code == 0 and [(v["milestone"], v["outcome"]) for v in r.data["verified"]] == [
        ("a", "passed"),
        ("b", "passed"),
    ]


def test_the_mcp_tool_names_the_cached_run(chain: Service, workspace: Path) -> None:
    from milepost.agent.args import MilestoneArgs
    from milepost.agent.tools import milestone

    code(workspace, leaf="ok = 1  # edited\n")
    assert milestone(chain, MilestoneArgs(action="verify"))["ok"]
    code(workspace, leaf="ok = 1\n")
    r = milestone(chain, MilestoneArgs(action="verify"))
    assert r["ok"] and [(v["name"], v["outcome"], v["cached_from"]) for v in r["verified"]] == [
        ("leaf", "cached", {"item": 1, "milestone": "leaf", "attempt": 1}),
        ("user", "cached", {"item": 1, "milestone": "user", "attempt": 1}),
    ]


def test_a_cache_lookup_sees_what_an_earlier_gate_of_the_verify_wrote(
    any_service: Service, workspace: Path, ledger: Path
) -> None:
    """A generator's gate rewrites the input of the milestone built on it. The
    files read before the generator ran equal a state that passed; what it
    wrote does not: the lookup must read the files again (not cached) and run."""
    svc = any_service
    log = f"echo $MILEPOST_MILESTONE >> {ledger}"
    svc.apply_plan(
        parse_plan(f"""
objective: generated code
milestones:
  - name: gen
    gate: "{log} && cp src/gen.py src/out.py"
    inputs: [src/gen.py]
  - name: use
    deps: [gen]
    gate: "{log} && grep -q ok src/out.py"
    inputs: [src/out.py]
""")
    )
    code(workspace, gen="ok = 1\n")
    finish(svc, "gen", "use")  # use proven on out.py "ok = 1"
    code(workspace, gen="ok = 2\n", out="ok = 2\n")
    assert svc.verify().ok and runs_of(ledger)[-2:] == ["gen", "use"]  # use proven on "ok = 2" too
    code(workspace, gen="bad = 3\n", out="ok = 1\n")  # out.py as first proven, until gen runs
    r = svc.verify()
    assert [(v.milestone, v.outcome) for v in r.verified] == [("gen", "passed"), ("use", "failed")]
    assert not r.ok and runs_of(ledger)[-2:] == ["gen", "use"]
    assert (workspace / "src/out.py").read_text() == "bad = 3\n"


def test_a_parallel_verify_does_not_import_prefect(tmp_path: Path) -> None:
    """verify runs its gates on threads of its own: a verify at --max-parallel 2
    that runs gates and takes one from the cache loads neither Prefect nor the flows."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
    import contextlib, io, json, sys
    from pathlib import Path
    from milepost.cli import main

    def run(*args):
        try:
            main(list(args))
        except SystemExit as e:
            assert e.code in (0, None), (args, e.code)

    run("init")
    run("item", "create", "x")
    for n in "ab":
        Path(f"{n}.py").write_text("ok = 1\\n")
        run("add", n, "--gate", f"grep -q ok {n}.py", "--inputs", f"{n}.py")
        run("start", n)
        run("done", n)
    Path("a.py").write_text("ok = 2\\n")
    Path("b.py").write_text("ok = 2\\n")
    run("verify", "--max-parallel", "2")  # two gates side by side
    Path("a.py").write_text("ok = 1\\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run("--json", "verify", "--max-parallel", "2")  # one cached
    Path("verify.json").write_text(out.getvalue())
    Path("modules.json").write_text(json.dumps(sorted(sys.modules)))
    """)
    subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True)
    cached = json.loads((tmp_path / "verify.json").read_text())
    assert [(v["milestone"], v["outcome"]) for v in cached["verified"]] == [("a", "cached")]
    mods = set(json.loads((tmp_path / "modules.json").read_text()))
    assert "milepost.service.verify" in mods  # it did load
    assert not any(m == "prefect" or m.startswith("prefect.") for m in mods)
    assert not any(m == "milepost.flows" or m.startswith("milepost.flows.") for m in mods)
