"""``milepost mcp`` as an agent client meets it: the server started as a
subprocess and driven with the official SDK's stdio client."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.conftest import CLI, EXAMPLES
from tests.test_hostile import fingerprint

T = TypeVar("T")
TOKEN_BUDGET = 2000
CHARS_PER_TOKEN = 3.5  # a conservative stand-in for a BPE tokenizer (tiktoken cannot download here)


@asynccontextmanager
async def server(cwd: Path, log: Path, **env: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "milepost", "mcp"], cwd=str(cwd), env=env)
    with open(log, "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def run(fn: Callable[[], Awaitable[T]]) -> T:
    return anyio.run(fn)


async def call(session: ClientSession, tool: str, **args: Any) -> Any:
    r = await session.call_tool(tool, args)
    assert not r.is_error, (tool, args, r.content)
    data = json.loads(r.content[0].text)  # type: ignore[union-attr]
    # Structured content too (every tool declares an output schema; the client checks it).
    assert r.structured_content == data
    return data


async def refused(session: ClientSession, tool: str, **args: Any) -> dict[str, Any]:
    r = await session.call_tool(tool, args)
    assert r.is_error, (tool, args, r.content)
    err: dict[str, Any] = json.loads(r.content[0].text)  # type: ignore[union-attr]
    assert "\n" not in err["message"]
    return err


@pytest.fixture
def refactor(tmp_path: Path) -> Path:
    ws = tmp_path / "refactor"
    shutil.copytree(EXAMPLES / "refactor", ws)
    CLI(ws)("init", check=True)
    return ws


def tool_list_chars(tools: Any) -> int:
    listed = [t.model_dump(by_alias=True, exclude_none=True) for t in tools.tools]
    return len(json.dumps(listed))


def test_the_tool_list_fits_the_token_budget(refactor: Path, tmp_path: Path) -> None:
    async def go() -> None:
        async with server(refactor, tmp_path / "mcp.log") as s:
            tools = await s.list_tools()
            names = [t.name for t in tools.tools]
            assert names == ["work_item", "milestone", "wait", "graph", "drive"]
            chars = tool_list_chars(tools)
            tokens = chars / CHARS_PER_TOKEN
            print(f"tool list: {len(names)} tools, {chars} characters, ~{tokens:.0f} tokens (budget {TOKEN_BUDGET})")
            assert len(names) <= 8 and tokens < TOKEN_BUDGET
            for t in tools.tools:
                assert t.description and t.input_schema["additionalProperties"] is False
                assert t.output_schema is not None and t.output_schema["type"] == "object"

    run(go)


def test_an_agent_works_the_example_refactor_through_tools_only(refactor: Path, tmp_path: Path) -> None:
    plan = (refactor / "plan.yaml").read_text()

    async def go() -> None:
        async with server(refactor, tmp_path / "mcp.log") as s:
            item = await call(s, "work_item", action="create", plan=plan)
            assert item["plan_status"] == "ready" and len(item["milestones"]) == 9
            brief = (await s.get_prompt("prime", {})).messages[0].content.text  # type: ignore[union-attr]
            assert "analyze-a" in brief and "done NAME" in brief and len(brief) / CHARS_PER_TOKEN < 1000
            broke = False
            worked: list[str] = []
            while True:
                nxt = await call(s, "milestone", action="next")
                m = nxt["next"]
                if m is None:
                    assert nxt["why"].startswith("all 9 milestones are done")
                    break
                name = m["name"]
                assert m["acceptance"]  # the agent sees what it must achieve
                started = await call(s, "milestone", action="start", name=name)
                assert started["milestone"]["status"] == "in_progress"
                if name == "extract-b" and not broke:
                    # A bad edit: the gate fails, the milestone needs a fix.
                    good = (refactor / "src" / "kv" / "mod_b.py").read_text()
                    (refactor / "src" / "kv" / "mod_b.py").write_text(good + "\ndef broken(:\n")
                    failed = await call(s, "milestone", action="done", name=name)
                    assert failed["passed"] is False and failed["milestone"]["status"] == "needs_fix"
                    assert "SyntaxError" in failed["gate"]["tail"] or "Error" in failed["gate"]["tail"]
                    (refactor / "src" / "kv" / "mod_b.py").write_text(good)  # the repair
                    broke = True
                    await call(s, "milestone", action="start", name=name)
                done = await call(s, "milestone", action="done", name=name)
                assert done["passed"] is True and done["milestone"]["status"] == "done", done
                worked.append(name)
            assert broke and len(worked) == 9
            graph = await call(s, "graph")
            assert graph["next"] is None and graph["critical_path"][-1] == "commit"
            premature = await refused(s, "work_item", action="complete", report="  ")
            assert premature["exit_code"] == 2
            closed = await call(s, "work_item", action="complete", report="interfaces extracted and merged")
            assert closed == {"completed": item["id"], "already": False, "warnings": []}
            shown = await call(s, "work_item", action="show", id=item["id"])
            assert shown["state"] == "completed"

    run(go)
    runs = CLI(refactor).json("runs", "extract-b", "--item", "1")["runs"]
    assert [r["outcome"] for r in runs] == ["failed", "passed"]


def test_bad_arguments_come_back_as_tool_errors_and_change_nothing(refactor: Path, tmp_path: Path) -> None:
    cli = CLI(refactor)
    cli("plan", "apply", "plan.yaml", check=True)
    before = fingerprint(refactor)

    async def go() -> None:
        async with server(refactor, tmp_path / "mcp.log") as s:
            e = await refused(s, "milestone", action="start", nme="analyze-a")
            assert e["type"] == "input" and "unknown field 'nme'" in e["message"]
            e = await refused(s, "milestone", action="start", name="analyze-a", retries="many")
            assert e["type"] == "input" and "retries" in e["message"]
            e = await refused(s, "milestone", action="fly", name="analyze-a")
            assert "action" in e["message"]
            e = await refused(s, "milestone", action="start", name="zzz")
            assert e["type"] == "not_found" and "no milestone 'zzz'" in e["message"]
            e = await refused(s, "milestone", action="start", name="analyze-a", expect_revision=99)
            assert e["type"] == "stale_revision" and "not 99" in e["message"]
            e = await refused(s, "milestone", action="start", name="extract-a")
            assert e["type"] == "blocked" and "blocked by analyze-a (pending)" in e["message"]
            e = await refused(s, "milestone", action="start")
            assert "start needs name" in e["message"]
            e = await refused(s, "nope")
            assert "unknown tool 'nope'" in e["message"]
            # Refusals name the tools' own arguments, not the CLI's flags.
            e = await refused(s, "milestone", action="needs_fix", name="analyze-a")
            assert e["message"] == "needs-fix 'analyze-a' needs a reason: pass reason"
            e = await refused(s, "wait", action="wait", kind="timer", reason="later")
            assert "until=TIME" in e["message"] and "--" not in e["message"]

    run(go)
    assert fingerprint(refactor) == before


def test_two_servers_racing_to_start_one_milestone_one_wins(refactor: Path, tmp_path: Path) -> None:
    CLI(refactor)("plan", "apply", "plan.yaml", check=True)
    results: list[Any] = []

    async def agent(label: str) -> None:
        async with server(refactor, tmp_path / f"{label}.log") as s:
            await call(s, "milestone", action="list")  # both connected and warm
            r = await s.call_tool("milestone", {"action": "start", "name": "analyze-a"})
            results.append((label, r.is_error, json.loads(r.content[0].text)))  # type: ignore[union-attr]

    async def go() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent, "one")
            tg.start_soon(agent, "two")

    run(go)
    wins = [r for r in results if not r[1]]
    losses = [r for r in results if r[1]]
    assert len(wins) == 1 and len(losses) == 1, results
    message = losses[0][2]["message"]
    assert "already in progress, started by agent 'default'" in message, message
    events = CLI(refactor).json("history")["events"]
    assert [e["action"] for e in events if e["milestone"] == "analyze-a"] == ["start"]


def test_prime_and_plan_schema_from_the_cli(refactor: Path) -> None:
    cli = CLI(refactor)
    cli("plan", "apply", "plan.yaml", check=True)
    brief = cli("prime", check=True).out
    assert brief.startswith("milepost work item 1") and "ready (lowest id first):" in brief
    assert "analyze-a: the public surface of module A is known" in brief
    assert len(brief) / CHARS_PER_TOKEN < 1000
    # How to refine: this item in place, with the commands that do it (the item's own id in them).
    assert "Refine this item, never a new one for the\n  same goal" in brief
    assert "`plan export --item 1 -o p.yaml`" in brief
    assert "`plan apply p.yaml --item 1 --dry-run`, then `plan apply p.yaml --item 1`" in brief
    schema = json.loads(cli("plan", "schema", check=True).out)
    assert schema["title"] == "milepost plan" and schema["additionalProperties"] is False
    milestone = schema["$defs"]["PlanMilestone"]["properties"]
    assert "retry budget" in milestone["retries"]["description"]
    assert set(milestone) == {
        "name",
        "deps",
        "acceptance",
        "gate",
        "retries",
        "timeout",
        "review",
        "fix",
        "retry_delay",
        "hypothesis",
        "inputs",
        "cache",
        "flaky",
        "do",
        "do_timeout",
        "do_budget_usd",
        "do_usage",
    }
    doer = schema["$defs"]["PlanDoer"]["properties"]
    judge = {"judge_setup", "judge_key"}
    assert set(doer) == {"isolate", "base", "setup", *judge, "protect", "env", "budget_usd", "usage", "prices"}
    assert "doer" in schema["properties"]
    assert "gitignore-style" in milestone["inputs"]["description"]
    assert "inputs" in schema["$defs"]["PlanDefaults"]["properties"]


def test_waits_and_wakes_through_the_wait_tool(refactor: Path, tmp_path: Path) -> None:
    async def go() -> None:
        async with server(refactor, tmp_path / "mcp.log") as s:
            item = await call(s, "work_item", action="create", objective="waits on a review")
            waiting = await call(
                s, "wait", action="wait", kind="external", resource="pr/42", reason="review", expect_revision=1
            )
            assert waiting["readiness"] == "blocked" and "pr/42" in waiting["why"] and waiting["revision"] == 2
            e = await refused(s, "wait", action="wait", kind="timer", reason="later")
            assert "until=TIME" in e["message"]
            assert await call(s, "wait", action="wake", resource="pr/42") == {"woken": [item["id"]]}
            assert (await call(s, "work_item", action="show"))["readiness"] != "blocked"

    run(go)


def test_the_milestone_tool_offers_every_user_action_and_its_own_reads() -> None:
    """The tool's choices are the domain's user actions (one source: ``USER_ACTIONS``)
    plus what only the tool does: read (next, list, runs), change the plan (add, remove, edit), verify."""
    from typing import get_args

    from milepost.agent import MilestoneArgs
    from milepost.graph.status import USER_ACTIONS

    offered = set(get_args(MilestoneArgs.model_fields["action"].annotation))
    assert offered == {a.value for a in USER_ACTIONS} | {"next", "list", "runs", "add", "remove", "edit", "verify"}


def test_another_agents_item_is_refused_in_the_tools_words(refactor: Path, tmp_path: Path) -> None:
    """A server serving agent 'claude' meets items planned from a shell (agent
    'default'): its refusals say how to pick an item and how to serve the
    tools as their owner, in the tools' arguments and the server's start."""
    CLI(refactor)("plan", "apply", "plan.yaml", check=True)
    before = fingerprint(refactor)

    async def go() -> None:
        async with server(refactor, tmp_path / "mcp.log", MILEPOST_AGENT="claude") as s:
            e = await refused(s, "milestone", action="next")
            assert "work_item action=pick id=ID, or pass item=ID" in e["message"], e
            assert "--item" not in e["message"]
            e = await refused(s, "milestone", action="start", name="analyze-a", item=1)
            assert "belongs to agent 'default', not 'claude'" in e["message"], e
            assert "serve the tools as that agent (milepost --agent default mcp" in e["message"], e
            assert "(--operator)" not in e["message"]

    run(go)
    assert fingerprint(refactor) == before


def test_tool_words_of_a_finish_before_a_start() -> None:
    from milepost.agent.words import tool_words

    text = "cannot finish 'a': status is pending; allowed from pending: start, lock (start it first: milepost start a)"
    assert tool_words(text).endswith("(start it first: milestone action=start name=a)")
