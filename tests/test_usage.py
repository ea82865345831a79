"""What a doer's attempt cost, read from its agent's own report
(milepost.gates.usage; docs/doers.md, "What a doer costs"), with recorded
outputs in the forms the agents document: Claude Code's result object
(``claude -p --output-format json`` and ``stream-json``), Codex's events
(``codex exec --json``, the sample of its docs/exec.md), aider's analytics
log (``--analytics-log``, the form of its sample-analytics.jsonl), and the
cost file as before."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from milepost.errors import MilepostError
from milepost.gates.command import run_gate
from milepost.gates.outcome import Outcome
from milepost.gates.prices import PRICES, Price, family, price_of, price_table, prices_env, prices_from_env
from milepost.gates.usage import BudgetWatch, Cost, UsageReader, read_cost, read_usage
from milepost.graph.models import GateCommand
from milepost.graph.plan import plan_from_item
from milepost.planfile import parse_plan
from milepost.service import Service

# Claude Code, `claude -p "..." --output-format json`: one JSON object (one line).
CLAUDE_RESULT = {
    "type": "result",
    "subtype": "success",
    "is_error": False,
    "duration_ms": 8421,
    "duration_api_ms": 7954,
    "num_turns": 6,
    "result": "I added the parser and its tests pass.",
    "session_id": "4f6c1a9e-2b7d-4c35-9e0a-1d2f3b4c5d6e",
    "total_cost_usd": 0.1834,
    "usage": {
        "input_tokens": 21,
        "cache_creation_input_tokens": 5120,
        "cache_read_input_tokens": 40213,
        "output_tokens": 1402,
        "server_tool_use": {"web_search_requests": 0},
    },
    "permission_denials": [],
}
CLAUDE_JSON = json.dumps(CLAUDE_RESULT, separators=(",", ":"))
CLAUDE_TOKENS = 21 + 5120 + 40213 + 1402

# Claude Code, `--output-format stream-json --verbose`: one object a line, the result last.
_TEXT = {"role": "assistant", "content": [{"type": "text", "text": "Reading."}], "usage": {}}
CLAUDE_STREAM = "\n".join(
    json.dumps(o)
    for o in [
        {"type": "system", "subtype": "init", "cwd": "/w", "session_id": "s-1", "tools": ["Edit"], "model": "m"},
        {"type": "assistant", "message": _TEXT, "session_id": "s-1"},
        {"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "content": "ok"}]}},
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "session_id": "s-1",
            "total_cost_usd": 0.42,
            "usage": {"input_tokens": 10, "output_tokens": 90},
        },
    ]
)

# Claude Code, `--output-format json` with `--verbose` (or `"verbose": true` in its settings; newer versions):
# a JSON array of every message of the run, the result last (anthropics/claude-code#84784).
_INIT = {"type": "system", "subtype": "init", "cwd": "/w", "session_id": CLAUDE_RESULT["session_id"], "tools": ["Edit"]}
_SONNET = "claude-sonnet-4-5-20250929"
CLAUDE_ARRAY = [
    {**_INIT, "model": _SONNET, "permissionMode": "default"},
    {"type": "assistant", "message": _TEXT | {"model": _SONNET}, "session_id": _INIT["session_id"]},
    {"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "content": "ok"}]}},
    CLAUDE_RESULT,
]

# Codex, `codex exec --json`: the sample output of codex's docs/exec.md.
_TURN = {"input_tokens": 24763, "cached_input_tokens": 24448, "output_tokens": 122}
_LS = {"id": "item_1", "type": "command_execution", "command": "bash -lc ls", "status": "in_progress"}
CODEX_EVENTS = "".join(
    json.dumps(o) + "\n"
    for o in [
        {"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "item_0", "type": "reasoning", "text": "**Searching**"}},
        {"type": "item.started", "item": _LS},
        {"type": "item.completed", "item": {"id": "item_3", "type": "agent_message", "text": "Yep."}},
        {
            "type": "turn.completed",
            "usage": {"input_tokens": 24763, "cached_input_tokens": 24448, "output_tokens": 122},
        },
    ]
)


def _send(prompt: int, completion: int, cost: float, total: float) -> dict[str, object]:
    props = {"main_model": "gemini/gemini-2.5-pro", "edit_format": "ask", "prompt_tokens": prompt}
    props |= {"completion_tokens": completion, "total_tokens": prompt + completion, "cost": cost, "total_cost": total}
    return {"event": "message_send", "properties": props, "user_id": "u", "time": 1755100406}


# aider, `--analytics-log FILE`: events of the form of its sample-analytics.jsonl.
AIDER_LOG = "".join(
    json.dumps(o) + "\n"
    for o in [
        {"event": "launched", "properties": {}, "user_id": "u", "time": 1755100400},
        {"event": "message_send_starting", "properties": {}, "user_id": "u", "time": 1755100401},
        _send(10006, 81, 0.0133175, 0.0133175),
        _send(10829, 591, 0.01944625, 0.03276375),
        {"event": "exit", "properties": {"reason": "Completed --message"}, "user_id": "u", "time": 1755100864},
    ]
)


def _log(tmp_path: Path, text: str) -> Path:
    """A do log as the drive writes it: milepost's header, then the doer's output."""
    log = tmp_path / "attempt-1.do.log"
    log.write_text(f"=== [do] $ the agent\n{text}\n")
    return log


def _usage(tmp_path: Path, out: str, form: str | None = None, cost_file: str | None = None) -> Cost:
    cost = tmp_path / "attempt-1.cost.json"
    if cost_file is not None:
        cost.write_text(cost_file)
    return read_usage(_log(tmp_path, out), cost, form)


@pytest.mark.parametrize("form", [None, "claude-json"])
def test_claude_codes_json_result_gives_its_cost_tokens_and_session(tmp_path: Path, form: str | None) -> None:
    got = _usage(tmp_path, CLAUDE_JSON, form)
    assert got == Cost(0.1834, CLAUDE_TOKENS, "4f6c1a9e-2b7d-4c35-9e0a-1d2f3b4c5d6e", "claude-json", None)


def test_claude_codes_stream_gives_its_last_result_and_the_init_lines_session(tmp_path: Path) -> None:
    assert _usage(tmp_path, CLAUDE_STREAM) == Cost(0.42, 100, "s-1", "claude-json", None)
    # killed before its result line: the session of its init line, no figure, and it is said
    cut = CLAUDE_STREAM.rsplit("\n", 1)[0]
    got = _usage(tmp_path, cut, "claude-json")
    assert (got.usd, got.session) == (None, "s-1") and "no Claude Code result" in (got.problem or "")


@pytest.mark.parametrize("form", [None, "claude-json"])
@pytest.mark.parametrize("indent", [None, 2], ids=["one line", "pretty-printed"])
def test_claude_codes_json_array_of_messages_gives_its_results_figures(
    tmp_path: Path, form: str | None, indent: int | None
) -> None:
    """``--verbose`` turns ``--output-format json``'s one object into an array of every message, the result last."""
    out = json.dumps(CLAUDE_ARRAY, indent=indent, separators=(",", ":") if indent is None else None)
    got = _usage(tmp_path, f"stderr: a warning before it\n{out}\nstderr: and one after", form)
    assert got == Cost(0.1834, CLAUDE_TOKENS, "4f6c1a9e-2b7d-4c35-9e0a-1d2f3b4c5d6e", "claude-json", None)
    # a pretty-printed result object alone, and the array read as it arrives in pieces
    assert _usage(tmp_path, json.dumps(CLAUDE_RESULT, indent=2), form).usd == 0.1834
    r = UsageReader()
    data = out.encode()
    for i in range(0, len(data), 7):
        r.feed(data[i : i + 7])
    r.finish()
    assert (r.claude_usd, r.claude_session) == (0.1834, CLAUDE_RESULT["session_id"])


def test_an_array_cut_off_before_its_end_is_a_warning(tmp_path: Path) -> None:
    out = json.dumps(CLAUDE_ARRAY, indent=2)
    got = _usage(tmp_path, out[: out.rindex('"usage"')], "claude-json")
    assert got.usd is None and "not JSON (cut off?)" in (got.problem or "")
    # brackets that are no report: nothing said
    assert _usage(tmp_path, "[\n  1,\n  2\n]\n[INFO] done\n[{not json}]") == Cost()
    # a bracket alone that never closes does not swallow a report printed after it
    assert _usage(tmp_path, f"{{\n  int x;\n{CLAUDE_JSON}").usd == 0.1834


def test_results_of_one_process_are_running_totals_and_sessions_add_up() -> None:
    r = UsageReader()
    for session, usd in [("a", 0.1), ("a", 0.3), ("b", 0.2), ("a", 0.05)]:  # a drop: a new process of a
        r.line(json.dumps({"type": "result", "session_id": session, "total_cost_usd": usd}))
    assert r.claude_usd == pytest.approx(0.3 + 0.05 + 0.2)


def test_codex_events_give_tokens_and_the_thread_never_dollars(tmp_path: Path) -> None:
    got = _usage(tmp_path, CODEX_EVENTS)
    assert got == Cost(None, 24763 + 122, "0199a213-81c0-7800-8aa1-bbab2a035a53", "codex-json", None)
    # each turn.completed's usage is the thread's total so far: the last one counts, never their sum
    total = {"input_tokens": 24863, "cached_input_tokens": 24448, "output_tokens": 127}
    turn = {"type": "turn.completed", "usage": total}
    two_turns = CODEX_EVENTS + json.dumps(turn) + "\n"
    assert _usage(tmp_path, two_turns, "codex-json").tokens == 24863 + 127
    # a second thread in the same output (a wrapper that ran codex twice) adds its own total
    other = {"type": "thread.started", "thread_id": "t-2"}
    more = two_turns + json.dumps(other) + "\n" + json.dumps({**turn, "usage": {"input_tokens": 50}}) + "\n"
    assert _usage(tmp_path, more, "codex-json").tokens == 24863 + 127 + 50


def test_aiders_analytics_log_in_the_cost_file(tmp_path: Path) -> None:
    got = _usage(tmp_path, "Tokens: 10k sent, 81 received. Cost: $0.01 message, $0.01 session.", None, AIDER_LOG)
    assert got == Cost(pytest.approx(0.0133175 + 0.01944625), 10087 + 11420, None, "file", None)


def test_the_cost_file_still_works_and_wins_over_a_report(tmp_path: Path) -> None:
    assert _usage(tmp_path, "plain output", None, '{"usd": 0.12, "tokens": 3400}') == Cost(0.12, 3400, form="file")
    # a wrapper that wrote the cost file from the report: counted once, from the file
    assert _usage(tmp_path, CLAUDE_JSON, None, '{"usd": 0.2}').usd == 0.2
    # named: the file only, or the report only
    assert _usage(tmp_path, CLAUDE_JSON, "file", '{"usd": 0.2}').usd == 0.2
    assert _usage(tmp_path, CLAUDE_JSON, "claude-json", '{"usd": 0.2}').usd == 0.1834
    assert read_cost(tmp_path / "absent.json") == Cost()


def test_a_named_cost_file_not_written_is_a_warning_never_a_silent_zero(tmp_path: Path) -> None:
    got = _usage(tmp_path, "edited 2 files", "file")
    assert got == Cost(form="file", problem="no cost file written ($MILEPOST_COST_FILE)")
    assert got.usd is None and got.tokens is None
    assert _usage(tmp_path, "edited 2 files") == Cost()  # unnamed: a plain script, nothing to say


def test_a_plain_script_has_no_report_and_no_warning(tmp_path: Path) -> None:
    assert _usage(tmp_path, "edited 2 files\n{not json") == Cost()


@pytest.mark.parametrize(
    ("form", "out", "said"),
    [
        ("claude-json", "I am done.", "no Claude Code report in its output"),
        ("codex-json", "Done.", "no Codex events in its output"),
        (None, '{"type":"result","session_id":"s","total_cost_usd":0.5', "result line is not JSON"),
        (None, '{"type":"result","session_id":"s","total_cost_usd":-1}', "total_cost_usd -1 is not a number >= 0"),
        (None, '{"type":"result","session_id":"s","total_cost_usd":"0.5"}', "total_cost_usd '0.5' is not a number"),
        (None, '{"type":"result","session_id":"s","total_cost_usd":1,"usage":{"output_tokens":-3}}', "output_tokens"),
    ],
)
def test_a_report_milepost_cannot_read_is_a_warning_never_a_crash_nor_a_zero(
    tmp_path: Path, form: str | None, out: str, said: str
) -> None:
    got = _usage(tmp_path, out, form)
    assert said in (got.problem or ""), got
    assert got.usd != 0.0  # a figure left out is not counted as nothing spent
    if "-1" in out or '"0.5"' in out:
        assert got.usd is None and got.session == "s"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"usd": -0.5, "tokens": 10}', "usd -0.5 is not a number >= 0: left out"),
        ('{"usd": "a lot"}', "usd 'a lot' is not a number >= 0"),
        ('{"usd": 0.1, "tokens": 1.5}', "tokens 1.5 is not a whole number"),
        ("[1, 2]", "holds a list"),
        ("not json at all", "neither"),
        ('{"event": "launched", "properties": {}}', "no message_send event"),
    ],
)
def test_a_bad_cost_file_is_a_warning_and_its_good_figures_count(tmp_path: Path, text: str, said: str) -> None:
    got = _usage(tmp_path, "", "file", text)
    assert said in (got.problem or ""), got
    if text.startswith('{"usd": -0.5'):
        assert (got.usd, got.tokens) == (None, 10)


def test_a_session_id_that_cannot_be_kept_is_not_kept(tmp_path: Path) -> None:
    long = json.dumps({"type": "result", "session_id": "x" * 500, "total_cost_usd": 0.1})
    assert _usage(tmp_path, long).session is None


# Claude Code, `claude -p --output-format stream-json --verbose` (one prompt): an assistant line a content block, each
# with its API call's message id, model and usage (the last block's output_tokens the call's); the cost only at the end.
_5M = {"ephemeral_5m_input_tokens": 4200, "ephemeral_1h_input_tokens": 0}


def _said(mid: str, block: dict[str, object], usage: dict[str, object], model: str = _SONNET) -> dict[str, object]:
    message = {"id": mid, "type": "message", "role": "assistant", "model": model, "content": [block]}
    message |= {"stop_reason": None, "usage": usage | {"service_tier": "standard"}}
    return {"type": "assistant", "message": message, "parent_tool_use_id": None, "session_id": "s-9"}


_A = {"input_tokens": 3, "cache_creation_input_tokens": 4200, "cache_read_input_tokens": 13000, "cache_creation": _5M}
_B = {"input_tokens": 5, "cache_creation_input_tokens": 800, "cache_read_input_tokens": 17200, "output_tokens": 600}
_EDIT = {"type": "tool_use", "id": "toolu_1", "name": "Edit", "input": {"file_path": "src/a.py"}}
STREAMED_TURNS = [
    {**_INIT, "session_id": "s-9", "model": _SONNET},
    _said("msg_01A", {"type": "text", "text": "I'll read it."}, _A | {"output_tokens": 8}),
    _said("msg_01A", _EDIT, _A | {"output_tokens": 150}),  # (the same call: counted once, its last figures)
    {"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "content": "ok"}]}},
    _said("msg_01B", {"type": "text", "text": "Done."}, _B),
]
# Sonnet, USD per million: input 3, output 15, 5-minute cache writes 3.75, cache reads 0.30
TURNS_USD = (3 * 3 + 150 * 15 + 4200 * 3.75 + 13000 * 0.3 + 5 * 3 + 600 * 15 + 800 * 3.75 + 17200 * 0.3) / 1e6
TURNS_TOKENS = 3 + 4200 + 13000 + 150 + 5 + 800 + 17200 + 600


def _lines(objs: list[dict[str, object]]) -> str:
    return "".join(json.dumps(o) + "\n" for o in objs)


def test_the_prices_are_anthropics_by_model_family() -> None:
    assert family("claude-sonnet-4-5-20250929") == "claude-sonnet-4-5"
    assert (
        family("us.anthropic.claude-opus-4-1-20250805-v1:0") == family("claude-opus-4-1@20250805") == "claude-opus-4-1"
    )
    assert price_of("claude-opus-4-20250514") == Price(15.0, 75.0)
    assert price_of("claude-opus-4-5-20251101") == Price(5.0, 25.0)
    assert price_of("claude-haiku-4-5-20251001") == Price(1.0, 5.0)
    assert price_of("gpt-5-codex") is None and price_of("<synthetic>") is None
    one_hour = {"cache_creation_input_tokens": 1000, "ephemeral_1h_input_tokens": 400, "cache_read_input_tokens": 0}
    assert Price(3.0, 15.0).usd(one_hour) == pytest.approx((600 * 3.75 + 400 * 6.0) / 1e6)
    assert set(PRICES) >= {"claude-opus-4-5", "claude-sonnet-4-5", "claude-haiku-4-5"}


def test_a_stream_cut_before_its_result_is_charged_the_estimate_of_its_turns_said_as_such(tmp_path: Path) -> None:
    got = _usage(tmp_path, _lines(STREAMED_TURNS), "claude-json")
    assert (got.usd, got.tokens, got.session) == (pytest.approx(TURNS_USD), TURNS_TOKENS, "s-9")
    assert got.problem == (
        "no Claude Code result in its output (it ended before its result line): its cost is milepost's estimate"
        " from its assistant lines' token counts at list prices"
    )
    # its result line gives the real total: it replaces the estimate
    result = {"type": "result", "subtype": "success", "session_id": "s-9", "total_cost_usd": 0.05, "usage": _B}
    assert _usage(tmp_path, _lines([*STREAMED_TURNS, result])) == Cost(0.05, 18605, "s-9", "claude-json", None)


def test_the_watch_stops_a_single_prompt_stream_on_its_estimate(tmp_path: Path) -> None:
    log = tmp_path / "do.log"
    log.write_text("=== [do] $ claude -p ...\n")
    watch = BudgetWatch(log, left=0.03)
    with open(log, "a") as f:
        f.write(_lines(STREAMED_TURNS[:3]))
        f.flush()
        assert watch.check() is None  # $0.0219 so far
        f.write(_lines(STREAMED_TURNS[3:]))
    assert watch.check() == "budget: its doer's estimated cost $0.04 passed the $0.03 left of its budget"


def test_a_model_without_a_price_is_not_estimated_said_once_and_its_result_counts(tmp_path: Path) -> None:
    other = [_said(f"m{i}", {"type": "text", "text": "."}, _B, "claude-nova-9") for i in range(3)]
    log = _log(tmp_path, "")
    watch = BudgetWatch(log, left=0.0, form="claude-json")
    with open(log, "a") as f:
        f.write(_lines([STREAMED_TURNS[0], *other]))
    assert watch.check() is None and watch.pos == log.stat().st_size  # read, no estimate: no stop
    unread = read_usage(log, tmp_path / "none.json", "claude-json")
    said = "no price known for model claude-nova-9: its running cost is not estimated"
    assert unread.usd is None and (unread.problem or "").count(said) == 1
    result = {"type": "result", "session_id": "s-9", "total_cost_usd": 0.8}
    got = _usage(tmp_path, _lines([STREAMED_TURNS[0], *other, result]), "claude-json")
    assert got.usd == 0.8 and said in (got.problem or "")
    # Claude Code's own synthetic messages (no API call, no tokens) are no model to price
    synthetic = _said("m", {"type": "text", "text": "No response requested."}, {"input_tokens": 0}, "<synthetic>")
    assert _usage(tmp_path, _lines([STREAMED_TURNS[0], synthetic, result])).problem is None


def test_a_plans_prices_add_a_model_or_replace_one(tmp_path: Path, service: Service) -> None:
    """``doer.prices``: a model milepost has no price for is estimated at the
    plan's; the drive hands them to the watch as MILEPOST_DO_PRICES."""
    text = (
        "objective: o\n"
        "doer:\n"
        "  prices:\n"
        "    claude-nova-9: {input: 2, output: 10}\n"
        "    claude-sonnet-4-5-20250929: {input: 30, output: 150}\n"
        "milestones:\n"
        "  - {name: a, do: ./agent, gate: 'true'}\n"
    )
    item = service.apply_plan(parse_plan(text))
    prices = service.get_item(item.id).doer.prices
    table = price_table(prices)
    assert table["claude-nova-9"] == Price(2.0, 10.0) and table["claude-sonnet-4-5"] == Price(30.0, 150.0)
    assert table["claude-haiku-4-5"] == PRICES["claude-haiku-4-5"] and PRICES["claude-sonnet-4-5"] == Price(3.0, 15.0)
    assert plan_from_item(service.get_item(item.id))["doer"]["prices"]["claude-nova-9"] == {
        "input": 2.0,
        "output": 10.0,
    }
    assert prices_from_env(prices_env(prices)) == table
    assert prices_from_env('{"m": {"input": -1, "output": 1}}') == prices_from_env(None) == PRICES
    other = [_said(f"m{i}", {"type": "text", "text": "."}, _B, "claude-nova-9") for i in range(3)]
    log = _log(tmp_path, "")
    watch = BudgetWatch(log, left=0.01, form="claude-json", prices=prices_from_env(prices_env(prices)))
    with open(log, "a") as f:
        f.write(_lines([STREAMED_TURNS[0], *other]))
    nova = 3 * (5 * 2 + 600 * 10 + 800 * 2.5 + 17200 * 0.2) / 1e6
    assert watch.check() == f"budget: its doer's estimated cost ${nova:.2f} passed the $0.01 left of its budget"
    got = read_usage(log, tmp_path / "none.json", "claude-json", prices=table)
    assert got.usd == pytest.approx(nova) and "no price known" not in (got.problem or "")


def test_a_bad_price_is_a_plan_error_at_its_line() -> None:
    text = "objective: o\ndoer:\n  prices:\n    claude-nova-9: {input: -2, output: 10}\nmilestones: []\n"
    with pytest.raises(MilepostError) as info:
        parse_plan(text, "plan.yaml")
    assert info.value.message.startswith("plan.yaml:4: invalid doer.prices.claude-nova-9.input:"), info.value.message


def test_the_watch_reads_the_stream_as_it_grows_lines_cut_anywhere(tmp_path: Path) -> None:
    log = tmp_path / "do.log"
    log.write_text("=== [setup] $ something\n")
    watch = BudgetWatch(log, left=0.5)
    line = json.dumps({"type": "result", "session_id": "s", "total_cost_usd": 0.3}) + "\n"
    over = json.dumps({"type": "result", "session_id": "s", "total_cost_usd": 0.61}) + "\n"
    with open(log, "a") as f:
        f.write(line[:20])
        f.flush()
        assert watch.check() is None
        f.write(line[20:] + over[:30])
        f.flush()
        assert watch.check() is None  # $0.30 so far: the rest of the line is not there yet
        f.write(over[30:])
        f.flush()
    assert watch.check() == "budget: its doer's reported cost $0.61 passed the $0.50 left of its budget"
    assert BudgetWatch(log, left=0.5, form="codex-json").check() is None  # no dollars in Codex's form


def test_a_watched_command_past_its_budget_is_stopped_and_fails_with_the_reason(tmp_path: Path) -> None:
    """The gate runner kills the process group of a command its watch stops."""
    log = tmp_path / "attempt-1.do.log"
    results = " ".join(
        f"'{json.dumps({'type': 'result', 'session_id': 's', 'total_cost_usd': usd})}'" for usd in (0.2, 0.4, 0.7)
    )
    run = f'for r in {results}; do echo "$r"; sleep 0.3; done; sleep 60 & wait; touch {tmp_path}/late'
    log.touch()
    watch = BudgetWatch(log, left=0.5)
    t0 = time.monotonic()
    result = run_gate([GateCommand(name="do", run=run)], log, default_cwd=tmp_path, watch=watch.check)
    assert time.monotonic() - t0 < 20
    assert result.outcome is Outcome.FAILED
    assert result.reason == "budget: its doer's reported cost $0.70 passed the $0.50 left of its budget"
    assert not (tmp_path / "late").exists()
    assert "process group killed" in log.read_text()
    assert read_usage(log, tmp_path / "none.json").usd == 0.7  # what it spent is charged


def test_the_watch_is_asked_only_while_a_command_runs(tmp_path: Path) -> None:
    asked = threading.Event()

    def watch() -> str | None:
        asked.set()
        return None

    log = tmp_path / "g.log"
    result = run_gate([GateCommand(name="g", run="sleep 0.5")], log, default_cwd=tmp_path, watch=watch)
    assert result.passed and asked.is_set()


def test_an_unknown_usage_form_is_a_plan_error_at_its_line() -> None:
    text = (
        "objective: o\n"  # 1
        "doer: {usage: claude}\n"  # 2
        "milestones:\n"  # 3
        "  - name: a\n"  # 4
        "    do: ./agent\n"  # 5
        "    do_usage: json\n"  # 6
    )
    with pytest.raises(MilepostError) as info:
        parse_plan(text, "plan.yaml")
    assert info.value.message == (
        "plan.yaml:2: invalid doer.usage: input should be 'claude-json', 'codex-json' or 'file' (found 'claude');"
        " plan.yaml:6: milestone 'a': invalid do_usage: input should be 'claude-json', 'codex-json' or 'file'"
        " (found 'json')"
    )


def test_the_usage_forms_are_kept_and_exported(service: Service) -> None:
    text = "objective: o\ndoer: {usage: codex-json}\nmilestones:\n  - {name: a, do: ./agent, do_usage: claude-json}\n"
    item = service.apply_plan(parse_plan(text))
    it = service.get_item(item.id)
    assert (it.doer.usage, it.milestones[0].do_usage) == ("codex-json", "claude-json")
    out = plan_from_item(it)
    assert out["doer"] == {"usage": "codex-json"} and out["milestones"][0]["do_usage"] == "claude-json"


def test_add_names_the_form_and_refuses_an_unknown_one(service: Service) -> None:
    from milepost.gates.usage import USAGE_FORMS
    from milepost.graph.models import USAGE_FORMS as NAMED

    assert NAMED == USAGE_FORMS
    service.apply_plan(parse_plan("objective: o\nmilestones:\n  - {name: a, gate: 'true'}\n"))
    service.add_milestone("b", do="./agent", do_usage="codex-json")
    assert service.get_item().milestones[1].do_usage == "codex-json"
    with pytest.raises(MilepostError) as info:
        service.add_milestone("c", do="./agent", do_usage="json")
    assert info.value.message == "invalid do_usage 'json' for milestone 'c': use one of claude-json, codex-json, file"


def test_a_do_runs_line_names_its_cost_tokens_session_and_an_unread_report() -> None:
    from datetime import UTC, datetime

    from milepost.present.terminal import do_outcome
    from milepost.results import DoRun

    now = datetime.now(UTC)
    run = DoRun(
        item=1,
        milestone="a",
        attempt=2,
        outcome="failed",
        reason="budget: its doer's reported cost $0.70 passed the $0.50 left of its budget",
        exit_code=None,
        duration=1.5,
        command="claude",
        cost_usd=0.7,
        tokens=1552,
        session="sess-a",
        started_at=now,
        finished_at=now,
    )
    assert do_outcome(run) == (
        "do failed: budget: its doer's reported cost $0.70 passed the $0.50 left of its budget"
        " (1.50 s, $0.70, 1552 tokens, session sess-a)"
    )
    unread = run.model_copy(update={"cost_usd": None, "tokens": None, "session": None, "usage_warning": "no report"})
    assert do_outcome(unread).endswith("(1.50 s, usage not read: no report)")


def test_a_claude_result_at_its_own_cap_says_budget_and_a_later_success_does_not() -> None:
    capped = {"type": "result", "subtype": "error_max_budget_usd", "is_error": True, "total_cost_usd": 0.5}
    r = UsageReader()
    r.line(json.dumps(capped))
    assert r.cost("claude-json").stopped == "budget" and r.cost("claude-json").usd == 0.5
    r.line(json.dumps({**capped, "subtype": "success", "is_error": False, "total_cost_usd": 0.6}))
    assert r.cost("claude-json").stopped is None  # the last result decides (a resumed run went on)
    assert r.cost("codex-json").stopped is None
