"""Stand-ins for the coding agents of docs/doers.md's recipes (no model, no
network): ``claude``, ``codex`` and ``aider`` executables that do a scripted
edit and print their usage report in the form each agent documents.

- ``claude -p PROMPT --output-format json|stream-json [--resume ID]``: Claude
  Code's result object (``total_cost_usd``, ``usage``: the sum of its
  turns', ``session_id``); with ``stream-json`` a ``system`` init line, then
  for each turn (one API call) its ``assistant`` message as Claude Code
  prints it, one line a content block (a text, then a tool use), each with
  the message's ``id``, ``model`` and ``usage``, ``gap`` seconds apart; then
  its ``result`` line (one per cost in ``stream``, each the process's
  running total, as with ``--input-format stream-json``).
- ``codex exec [flags] [resume ID] PROMPT`` with ``--json``: Codex's JSONL
  events (``thread.started``, ``turn.started``, ``item.completed``,
  ``turn.completed`` with its ``usage``: the thread's running total, so a
  resumed thread's includes its earlier runs').
- ``aider ... --analytics-log FILE``: aider's human lines on stdout and its
  analytics events (``message_send`` with ``cost`` and ``total_tokens``)
  appended to FILE.

``STANDIN_SCENARIO`` (a JSON file) maps ``milestone#attempt`` (or
``milestone``) to a step: ``write`` {path: text}, ``usd``, ``tokens``
{input, output, cache_read, cache_creation} (Claude Code: one turn's; ``turns``
[tokens, ...]: each turn's), ``model`` (Claude Code's: ``claude-sonnet-4-5-20250929``),
``session`` (a new session's id), ``stream`` [usd, ...], ``gap``,
``before_result`` (seconds after its turns, before its result line),
``sleep`` (seconds after the report),
``raw`` (printed instead of the report), ``exit``, ``capped`` (Claude Code
past its ``--max-budget-usd``: its result says ``error_max_budget_usd``, and
it exits 1). Each run appends its
argv, pid and MILEPOST_ variables to ``STANDIN_RECORD`` (JSON lines).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _step() -> tuple[str, dict[str, Any]]:
    name, attempt = os.environ.get("MILEPOST_MILESTONE", "m"), os.environ.get("MILEPOST_ATTEMPT", "1")
    path = os.environ.get("STANDIN_SCENARIO")
    scenario = json.loads(Path(path).read_text()) if path else {}
    return f"{name}#{attempt}", scenario.get(f"{name}#{attempt}", scenario.get(name, {}))


def _record(agent: str, key: str, argv: list[str]) -> None:
    path = os.environ.get("STANDIN_RECORD")
    if not path:
        return
    env = {k: v for k, v in os.environ.items() if k.startswith("MILEPOST_")}
    with open(path, "a") as f:
        f.write(json.dumps({"agent": agent, "key": key, "argv": argv, "pid": os.getpid(), "env": env}) + "\n")


def _edit(step: dict[str, Any]) -> None:
    for rel, text in step.get("write", {}).items():
        target = Path.cwd() / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def _emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


def _claude_usage(t: dict[str, int]) -> dict[str, int]:
    return {
        "input_tokens": t.get("input", 0),
        "cache_creation_input_tokens": t.get("cache_creation", 0),
        "cache_read_input_tokens": t.get("cache_read", 0),
        "output_tokens": t.get("output", 0),
    }


def _turn(n: int, session: str, model: str, usage: dict[str, int]) -> None:
    """One API call's assistant message, one line a content block, as Claude Code's stream-json prints it."""
    blocks = [
        {"type": "text", "text": "Working on it."},
        {"type": "tool_use", "id": f"toolu_{n}", "name": "Edit", "input": {"file_path": "src/x.py"}},
    ]
    for block in blocks:
        message = {"id": f"msg_{session}_{n}", "type": "message", "role": "assistant", "model": model}
        message |= {"content": [block], "stop_reason": None, "usage": usage}
        _emit({"type": "assistant", "message": message, "parent_tool_use_id": None, "session_id": session})


def claude(argv: list[str], key: str, step: dict[str, Any]) -> None:
    session = _option(argv, "--resume") or step.get("session") or f"claude-session-{key}"
    model = step.get("model", "claude-sonnet-4-5-20250929")
    one = step.get("tokens", {"input": 12, "output": 340, "cache_read": 1000, "cache_creation": 200})
    turns = step.get("turns") or [one]
    usage = {k: sum(_claude_usage(t)[k] for t in turns) for k in _claude_usage({})}

    capped = bool(step.get("capped"))

    def result(usd: object) -> dict[str, Any]:
        return {
            "type": "result",
            "subtype": "error_max_budget_usd" if capped else "success",
            "is_error": capped,
            "duration_ms": 2310,
            "duration_api_ms": 2100,
            "num_turns": 4,
            "result": "Done: the change is made.",
            "session_id": session,
            "total_cost_usd": usd,
            "usage": usage,
        }

    fmt = _option(argv, "--output-format") or "text"
    _edit(step)
    if "raw" in step:
        print(step["raw"], flush=True)
    elif fmt == "json":
        _emit(result(step.get("usd", 0.1)))
    elif fmt == "stream-json":
        _emit({"type": "system", "subtype": "init", "cwd": os.getcwd(), "session_id": session, "model": model})
        for n, t in enumerate(turns):
            _turn(n, session, model, _claude_usage(t))
            time.sleep(step.get("gap", 0.0))
        time.sleep(step.get("before_result", 0.0))
        for usd in step.get("stream", [step.get("usd", 0.1)]):
            _emit(result(usd))
            time.sleep(step.get("gap", 0.0))
    else:
        print("Done: the change is made.", flush=True)


def codex(argv: list[str], key: str, step: dict[str, Any]) -> None:
    args = argv[1:] if argv[:1] == ["exec"] else argv
    resumed = args[args.index("resume") + 1] if "resume" in args else None
    thread = resumed or step.get("session") or f"codex-thread-{key}"
    t = step.get("tokens", {"input": 24763, "cached": 24448, "output": 122})
    _edit(step)
    if "raw" in step:
        print(step["raw"], flush=True)
        return
    if "--json" not in argv:
        print("Done: the change is made.", flush=True)
        return
    _emit({"type": "thread.started", "thread_id": thread})
    _emit({"type": "turn.started"})
    _emit({"type": "item.completed", "item": {"id": "item_0", "type": "agent_message", "text": "Done."}})
    usage = {"input_tokens": t["input"], "cached_input_tokens": t["cached"], "output_tokens": t["output"]}
    _emit({"type": "turn.completed", "usage": _thread_total(thread, usage)})


def _thread_total(thread: str, usage: dict[str, int]) -> dict[str, int]:
    """Codex's turn.completed usage is its thread's running total: a resumed
    thread's includes what its earlier runs used (kept beside STANDIN_RECORD)."""
    record = os.environ.get("STANDIN_RECORD")
    if not record:
        return usage
    kept = Path(record + ".threads.json")
    threads = json.loads(kept.read_text()) if kept.exists() else {}
    total = {k: v + threads.get(thread, {}).get(k, 0) for k, v in usage.items()}
    kept.write_text(json.dumps({**threads, thread: total}))
    return total


def aider(argv: list[str], key: str, step: dict[str, Any]) -> None:
    _edit(step)
    usd, t = step.get("usd", 0.0132), step.get("tokens", {"input": 4213, "output": 312})
    print("Aider v0.86.2 (stand-in)", flush=True)
    print(f"Tokens: {t['input']} sent, {t['output']} received. Cost: ${usd:.4f} message, ${usd:.4f} session.")
    log = _option(argv, "--analytics-log")
    if log is None:
        return
    events = [
        {"event": "launched", "properties": {}},
        {
            "event": "message_send",
            "properties": {
                "main_model": "stand-in",
                "edit_format": "diff",
                "prompt_tokens": t["input"],
                "completion_tokens": t["output"],
                "total_tokens": t["input"] + t["output"],
                "cost": usd,
                "total_cost": usd,
            },
        },
        {"event": "exit", "properties": {"reason": "Completed --message"}},
    ]
    with open(log, "a") as f:
        for e in events:
            f.write(json.dumps({**e, "user_id": "stand-in", "time": int(time.time())}) + "\n")


def main(agent: str) -> int:
    argv = sys.argv[1:]
    key, step = _step()
    _record(agent, key, argv)
    {"claude": claude, "codex": codex, "aider": aider}[agent](argv, key, step)
    time.sleep(step.get("sleep", 0.0))
    return int(step.get("exit", 1 if step.get("capped") else 0))


def install(bin_dir: Path) -> Path:
    """The three stand-ins as executables in ``bin_dir`` (put it first on PATH)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).parent
    for agent in ("claude", "codex", "aider"):
        exe = bin_dir / agent
        exe.write_text(
            f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(here)!r})\n"
            f"from standin import main\nsys.exit(main({agent!r}))\n"
        )
        exe.chmod(0o755)
    return bin_dir
