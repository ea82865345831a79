"""What a doer's attempt cost, read from what the doer left: its agent's own
usage report in its output, or the cost file it may write (docs/doers.md,
"What a doer costs").

The forms read (``do_usage``; unnamed: found by looking):

- ``claude-json``: Claude Code's result object, ``claude -p --output-format
  json`` (one JSON object; with ``--verbose``, a JSON array of every message,
  the result last, on one line or pretty-printed) or ``stream-json`` (one
  per line, the ``result`` ones): ``total_cost_usd``, ``usage`` (``input_tokens``, ``output_tokens``,
  ``cache_creation_input_tokens``, ``cache_read_input_tokens``, all counted)
  and ``session_id`` (also on the stream's first ``system`` line). A
  ``result`` restates the cost of its process so far: results of one
  session are running totals (one that drops starts a new process's);
  different sessions add up.
- ``codex-json``: Codex's events, ``codex exec --json``: ``thread.started``
  (``thread_id``: the session ``codex exec resume`` takes) and the last
  ``turn.completed``'s ``usage`` (``input_tokens`` and ``output_tokens``;
  ``cached_input_tokens`` is part of the input): the thread's running total
  (a resumed thread's restates its earlier runs': the store counts only its
  growth, milepost.service.do_evidence). Codex reports no dollars.
- ``file``: ``MILEPOST_COST_FILE``: ``{"usd": 0.12, "tokens": 3400}``, or
  aider's analytics log (``aider --analytics-log "$MILEPOST_COST_FILE"
  --no-analytics``: one JSON event a line, each ``message_send`` with its
  ``cost`` and ``total_tokens``).

A report that cannot be read is said (:attr:`Cost.problem`, the do run's
warning) and counts nothing: never a crash, never a silent zero. A negative
or non-numeric figure is left out, with a warning.

:class:`BudgetWatch` reads a running doer's output as it grows: a doer whose
streamed cost passes what is left of its budget is stopped.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milepost.gates.prices import PRICES, Price, price_of

__all__ = ["CLAUDE", "CODEX", "FILE", "USAGE_FORMS", "BudgetWatch", "Cost", "UsageReader", "read_cost", "read_usage"]

CLAUDE, CODEX, FILE = "claude-json", "codex-json", "file"
USAGE_FORMS = (CLAUDE, CODEX, FILE)

_COST_FORM = '{"usd": 0.12, "tokens": 3400}'
_CLAUDE_TOKENS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
_CODEX_TOKENS = ("input_tokens", "output_tokens")  # (cached_input_tokens is a part of input_tokens)
# A line longer than this is not read as a report (a stream's tool output can be megabytes).
_MAX_LINE = 8 * 1024 * 1024


@dataclass(frozen=True)
class Cost:
    """What a doer's attempt cost, as far as it is known: dollars, tokens, the
    agent's session, the form it was read in, and what could not be read."""

    usd: float | None = None
    tokens: int | None = None
    session: str | None = None
    form: str | None = None
    problem: str | None = None  # unread or left out: said in the do run, not counted
    stopped: str | None = None  # the agent stopped itself at its own cap ("budget": --max-budget-usd), or None

    def noting(self, problem: str | None) -> Cost:
        if not problem:
            return self
        both = f"{self.problem}; {problem}" if self.problem else problem
        return Cost(self.usd, self.tokens, self.session, self.form, both, self.stopped)


def _number(value: object) -> float | None:
    """A finite number >= 0, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _session(value: object) -> str | None:
    """An agent's session id as it can be kept (up to 200 printable characters), or None."""
    if not isinstance(value, str) or not value or len(value) > 200 or not value.isprintable():
        return None
    return value


def _whole(value: object) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number == int(number) else None


# -- the doer's output ----------------------------------------------------------------


@dataclass
class _Running:
    """One agent session's running totals in an output (Claude Code's results,
    Codex's turns); one that drops starts a new process's."""

    usd_before: float = 0.0
    usd: float | None = None
    tokens_before: int = 0
    tokens: int | None = None

    def take(self, usd: float | None, tokens: int | None) -> None:
        if usd is not None:
            if self.usd is not None and usd < self.usd:
                self.usd_before += self.usd
            self.usd = usd
        if tokens is not None:
            if self.tokens is not None and tokens < self.tokens:
                self.tokens_before += self.tokens
            self.tokens = tokens


@dataclass
class _Estimate:
    """What Claude Code's ``assistant`` lines since its last ``result`` cost,
    as milepost estimates it: each API call's usage (by its message id: a
    message printed as several lines, one a content block, is one call)
    priced by its model (milepost.gates.prices). A result's total replaces it."""

    prices: Mapping[str, Price] = field(default_factory=lambda: PRICES)
    calls: dict[str, tuple[str, dict[str, int]]] = field(default_factory=dict)

    def take(self, message: dict[str, Any]) -> str | None:
        """An assistant line's message; what cannot be estimated, said once a model."""
        usage = message.get("usage")
        numbers = _usage_numbers(usage) if isinstance(usage, dict) else {}
        if not any(numbers.values()):
            return None
        model = message.get("model")
        model = model if isinstance(model, str) and model else "(none named)"
        key = str(message.get("id") or f"#{len(self.calls)}")
        before = self.calls.get(key, (model, {}))[1]
        self.calls[key] = (model, {k: max(v, before.get(k, 0)) for k, v in numbers.items()})
        if price_of(model, self.prices) is None:
            return (
                f"no price known for model {model}: its running cost is not estimated"
                " (no stop before its result line; the result's total counts)"
            )
        return None

    @property
    def usd(self) -> float | None:
        priced = [(p, u) for m, u in self.calls.values() if (p := price_of(m, self.prices)) is not None]
        return sum(p.usd(u) for p, u in priced) if priced else None

    @property
    def tokens(self) -> int:
        return sum(sum(u.get(k, 0) for k in _CLAUDE_TOKENS) for _, u in self.calls.values())


def _usage_numbers(usage: dict[str, Any]) -> dict[str, int]:
    """An Anthropic usage object's token counts (a bad one: 0), with its 1-hour cache writes."""
    numbers = {k: _whole(usage.get(k)) or 0 for k in _CLAUDE_TOKENS}
    written = usage.get("cache_creation")
    if isinstance(written, dict):
        numbers["ephemeral_1h_input_tokens"] = _whole(written.get("ephemeral_1h_input_tokens")) or 0
    return numbers


@dataclass
class UsageReader:
    """The usage reports in a doer's output, fed line by line (or in chunks),
    a streamed Claude Code's running cost estimated at ``prices``."""

    prices: Mapping[str, Price] = field(default_factory=lambda: PRICES)

    claude: dict[str, _Running] = field(default_factory=dict)
    claude_seen: bool = False
    claude_results: int = 0
    claude_session: str | None = None
    claude_stopped: str | None = None  # the last result's cap, when it ended on one ("budget")
    claude_pending: _Estimate = field(init=False)  # the assistant lines since the last result
    codex_seen: bool = False
    codex: dict[str, _Running] = field(default_factory=dict)  # each thread's running total (turn.completed)
    codex_session: str | None = None
    problems: list[str] = field(default_factory=list)
    _partial: bytes = b""
    _block: list[str] | None = None  # a JSON document printed over many lines, as far as read
    _block_size: int = 0

    def __post_init__(self) -> None:
        self.claude_pending = _Estimate(self.prices)

    def feed(self, data: bytes) -> None:
        """More output; complete lines are read, the rest waits for its end."""
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > _MAX_LINE:
            self._partial = b""
        for line in lines:
            self.line(line.decode("utf-8", errors="replace"))

    def finish(self) -> None:
        """The output ended: its last line, if it had no line break."""
        if self._partial:
            self.line(self._partial.decode("utf-8", errors="replace"))
            self._partial = b""
        if self._block is not None:  # a document never closed (cut off): said if it held a result
            text, self._block = "\n".join(self._block), None
            self._document(text)

    def line(self, text: str) -> None:
        """One line of output: a JSON object, or an array of them (Claude
        Code's ``--output-format json`` with ``--verbose``: every message of
        the run, its result last), on one line or pretty-printed over many
        (from a ``[`` or ``{`` line to its ``]`` or ``}`` line, unindented)."""
        raw, text = text.rstrip(), text.strip()
        if self._block is not None and raw.startswith(('{"', "[{")):
            self._block = None  # (a document's own lines are indented: this one is not of it)
        if self._block is not None:
            self._more(raw)
        elif raw in ("[", "{"):
            self._block, self._block_size = [raw], 1
        elif (text.startswith("{") or text.startswith("[{")) and len(text) <= _MAX_LINE:
            self._document(text)

    def _more(self, raw: str) -> None:
        """A line of a document printed over many lines: read once it closes."""
        assert self._block is not None
        self._block.append(raw)
        self._block_size += len(raw) + 1
        if raw == {"[": "]", "{": "}"}[self._block[0]]:
            text, self._block = "\n".join(self._block), None
            self._document(text)
        elif self._block_size > _MAX_LINE:
            self._block = None  # (too long to be a report: left)

    def _document(self, text: str) -> None:
        try:
            obj = json.loads(text)
        except ValueError:
            if '"type":"result"' in text.replace(" ", ""):
                self.claude_seen = True
                self._problem("a Claude Code result line is not JSON (cut off?): not counted")
            return
        for one in obj if isinstance(obj, list) else [obj]:
            if isinstance(one, dict):
                self._event(one)

    def _event(self, obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        if kind == "result" and ("total_cost_usd" in obj or "session_id" in obj or "usage" in obj):
            self._claude_result(obj)
        elif kind == "system" and obj.get("subtype") == "init" and "session_id" in obj:
            self.claude_seen = True
            self.claude_session = _session(obj["session_id"]) or self.claude_session
        elif kind == "assistant" and isinstance(obj.get("message"), dict):
            self.claude_seen = True
            self._problem(self.claude_pending.take(obj["message"]))
        elif kind == "thread.started" and "thread_id" in obj:
            self.codex_seen = True
            self.codex_session = _session(obj["thread_id"]) or self.codex_session
        elif kind in ("turn.completed", "turn.failed"):
            self.codex_seen = True
            if isinstance(obj.get("usage"), dict):
                self._codex_usage(obj["usage"])

    def _claude_result(self, obj: dict[str, Any]) -> None:
        self.claude_seen = True
        self.claude_results += 1
        self.claude_pending = _Estimate(self.prices)  # (its total holds them)
        self.claude_stopped = "budget" if obj.get("subtype") == "error_max_budget_usd" else None
        session = _session(obj.get("session_id"))
        if session is not None:
            self.claude_session = session
        usd = None
        if "total_cost_usd" in obj:
            usd = _number(obj["total_cost_usd"])
            if usd is None and obj["total_cost_usd"] is not None:
                self._problem(f"total_cost_usd {obj['total_cost_usd']!r} is not a number >= 0: left out")
        self.claude.setdefault(session or "", _Running()).take(usd, self._tokens(obj.get("usage"), _CLAUDE_TOKENS))

    def _codex_usage(self, usage: dict[str, Any]) -> None:
        """A ``turn.completed``'s usage: the thread's total so far, not the turn's."""
        self.codex.setdefault(self.codex_session or "", _Running()).take(None, self._tokens(usage, _CODEX_TOKENS))

    def _tokens(self, usage: object, names: tuple[str, ...]) -> int | None:
        if not isinstance(usage, dict):
            return None
        total, known = 0, False
        for name in names:
            if usage.get(name) is None:
                continue
            n = _whole(usage[name])
            if n is None:
                self._problem(f"usage {name} {usage[name]!r} is not a whole number >= 0: left out")
                continue
            total, known = total + n, True
        return total if known else None

    def _problem(self, text: str | None) -> None:
        if text and text not in self.problems and len(self.problems) < 5:
            self.problems.append(text)

    @property
    def claude_usd(self) -> float | None:
        """What the Claude Code results said so far, in dollars (None: none said)."""
        said = [r for r in self.claude.values() if r.usd is not None]
        return sum(r.usd_before + (r.usd or 0.0) for r in said) if said else None

    @property
    def claude_tokens(self) -> int | None:
        said = [r for r in self.claude.values() if r.tokens is not None]
        return sum(r.tokens_before + (r.tokens or 0) for r in said) if said else None

    def claude_running(self) -> tuple[float | None, bool]:
        """What the doer has cost so far: its results' totals and milepost's
        estimate of what it did since (None: nothing known); whether an
        estimate is part of it."""
        estimate = self.claude_pending.usd
        if estimate is None:
            return self.claude_usd, False
        return (self.claude_usd or 0.0) + estimate, True

    @property
    def codex_tokens(self) -> int | None:
        """What the Codex threads' last totals said (None: none said)."""
        said = [r for r in self.codex.values() if r.tokens is not None]
        return sum(r.tokens_before + (r.tokens or 0) for r in said) if said else None

    def cost(self, form: str) -> Cost:
        """What the output says in ``form`` (claude-json or codex-json)."""
        notes = "; ".join(self.problems) or None
        if form == CLAUDE:
            return self._claude_cost(notes)
        if not self.codex_seen:
            notes = _join(notes, "no Codex events in its output (codex exec --json)")
        return Cost(None, self.codex_tokens, self.codex_session, CODEX, notes)

    def _claude_cost(self, notes: str | None) -> Cost:
        usd, estimated = self.claude_running()
        tokens = self.claude_tokens
        if estimated:
            tokens = (tokens or 0) + self.claude_pending.tokens
        said = _ESTIMATED if estimated else ""
        if not self.claude_seen:
            notes = _join(notes, "no Claude Code report in its output (claude -p --output-format json)")
        elif self.claude_results == 0:
            notes = _join(notes, f"no Claude Code result in its output (it ended before its result line){said}")
        elif estimated:
            notes = _join(notes, f"its output goes on past its last result line{said}")
        return Cost(usd, tokens, self.claude_session, CLAUDE, notes, self.claude_stopped)


_ESTIMATED = ": its cost is milepost's estimate from its assistant lines' token counts at list prices"


def _join(a: str | None, b: str) -> str:
    return f"{a}; {b}" if a else b


def _read_output(log: Path, start: int, prices: Mapping[str, Price]) -> tuple[UsageReader, str | None]:
    reader = UsageReader(prices)
    try:
        with open(log, "rb") as f:
            f.seek(start)
            while chunk := f.read(1 << 20):
                reader.feed(chunk)
    except FileNotFoundError:
        return reader, None
    except OSError as e:
        return reader, f"cannot read the doer's output {log.name}: {e.strerror or e}"
    reader.finish()
    return reader, None


def read_usage(
    log: Path, cost_file: Path, form: str | None = None, start: int = 0, prices: Mapping[str, Price] = PRICES
) -> Cost:
    """What the doer's attempt cost: its output ``log`` (from byte ``start``)
    read in ``form`` (a streamed Claude Code's cost estimated at ``prices``
    when it has no result line), or its ``cost_file``. Unnamed (None): the cost file when
    the doer wrote one, else the first report its output holds (Claude
    Code's, then Codex's), else nothing known (no problem: a plain script)."""
    if form == FILE:
        if not cost_file.exists():  # (named: a doer that wrote none is said, never a silent $0)
            return Cost(form=FILE, problem="no cost file written ($MILEPOST_COST_FILE)")
        return read_cost(cost_file)
    if form is None:
        written = read_cost(cost_file)
        if written.form is not None or written.problem is not None:
            return written
    reader, unreadable = _read_output(log, start, prices)
    if form is None:
        form = CLAUDE if reader.claude_seen else CODEX if reader.codex_seen else None
        if form is None:
            return Cost(problem=unreadable)
    return reader.cost(form).noting(unreadable)


# -- the cost file -------------------------------------------------------------------


def read_cost(path: Path) -> Cost:
    """The cost file a doer may write: ``{"usd": 0.12, "tokens": 3400}``, or
    aider's analytics log. Absent: nothing known. Unreadable or of another
    form: nothing counted, with the problem named (the do run says so)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Cost()
    except OSError as e:
        return Cost(problem=f"cannot read {path.name}: {e.strerror}")
    except UnicodeDecodeError:
        return Cost(problem=f"{path.name} is not text: write {_COST_FORM}")
    try:
        data = json.loads(text)
    except ValueError:
        return _aider_log(path.name, text)
    if not isinstance(data, dict):
        return Cost(problem=f"{path.name} holds a {type(data).__name__}: write {_COST_FORM}")
    if "event" in data:
        return _aider_log(path.name, text)
    return _cost_object(path.name, data)


def _cost_object(name: str, data: dict[str, Any]) -> Cost:
    usd, tokens, problems = data.get("usd"), data.get("tokens"), []
    read_usd = _number(usd)
    if usd is not None and read_usd is None:
        problems.append(f"{name}: usd {usd!r} is not a number >= 0: left out")
    read_tokens = _whole(tokens)
    if tokens is not None and read_tokens is None:
        problems.append(f"{name}: tokens {tokens!r} is not a whole number >= 0: left out")
    return Cost(usd=read_usd, tokens=read_tokens, form=FILE, problem="; ".join(problems) or None)


def _aider_log(name: str, text: str) -> Cost:
    """Aider's analytics log (``--analytics-log``): the ``message_send`` events."""
    usd, tokens, sends, problems = 0.0, 0, 0, []
    for line in text.splitlines():
        try:
            event = json.loads(line) if line.strip() else None
        except ValueError:
            return Cost(problem=f"{name} is neither {_COST_FORM} nor aider's analytics log (a line is not JSON)")
        if not isinstance(event, dict) or event.get("event") != "message_send":
            continue
        found = event.get("properties")
        props: dict[str, Any] = found if isinstance(found, dict) else {}
        sends += 1
        cost, count = _number(props.get("cost")), _whole(props.get("total_tokens"))
        if cost is None and props.get("cost") is not None:
            problems.append(f"{name}: an aider message's cost {props.get('cost')!r} is not a number >= 0: left out")
        usd += cost or 0.0
        tokens += count or 0
    if sends == 0:
        return Cost(form=FILE, problem=f"{name}: aider's analytics log holds no message_send event")
    return Cost(usd=usd, tokens=tokens, form=FILE, problem="; ".join(dict.fromkeys(problems)) or None)


# -- while the doer runs ---------------------------------------------------------------


class BudgetWatch:
    """Reads a running doer's output (its log, from where it was when the
    watch was made) as it grows; :meth:`check` says why the doer must stop
    once its streamed Claude Code cost passes ``left``: what its results
    report, plus the estimate (at ``prices``) of its assistant lines since."""

    def __init__(self, log: Path, left: float, form: str | None = None, prices: Mapping[str, Price] = PRICES) -> None:
        self.log, self.left, self.form = log, left, form
        try:
            self.pos = os.path.getsize(log)
        except OSError:
            self.pos = 0
        self.reader = UsageReader(prices)

    def check(self) -> str | None:
        """Why the doer must stop (its budget is spent), or None."""
        if self.form in (CODEX, FILE):
            return None  # (no dollars in the output: only a report in Claude Code's form streams them)
        try:
            with open(self.log, "rb") as f:
                f.seek(self.pos)
                data = f.read(1 << 22)
        except OSError:
            return None
        self.pos += len(data)
        self.reader.feed(data)
        spent, estimated = self.reader.claude_running()
        if spent is not None and spent > self.left:
            what = "estimated" if estimated else "reported"
            return f"budget: its doer's {what} cost ${spent:.2f} passed the ${self.left:.2f} left of its budget"
        return None
