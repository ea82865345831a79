"""What every command shares: the context object (global flags, the lazily
opened service, output as JSON or rich text), parameter types, common
options, the root group, and small helpers."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from milepost.errors import EnvironmentProblem, InvalidValueError
from milepost.graph.status import PlanStatus

if TYPE_CHECKING:
    from rich.console import Console

    from milepost.service import Service

__all__ = ["DELAY", "ID", "PLAN_STATUS", "RETRIES", "SECONDS", "Ctx", "Seconds", "cli", "pass_ctx"]

F = TypeVar("F", bound=Callable[..., Any])


class Ctx:
    """What every command shares: global flags and the lazily opened service."""

    def __init__(self, db: str | None, agent: str | None, as_json: bool, operator: bool = False) -> None:
        self.db = db
        self.agent = agent
        self.json = as_json
        self.operator = operator
        self._service: Service | None = None

    @property
    def service(self) -> Service:
        if self._service is None:
            from milepost._startup import quiet_imports

            with quiet_imports():
                from milepost.service import Service

            self._service = Service.open(self.db, self.agent, operator=self.operator)
        return self._service

    def console(self) -> Console:
        from rich.console import Console

        class _Console(Console):
            def on_broken_pipe(self) -> None:
                # rich exits 1 here; a reader that left (`| head`) is not a failure.
                raise BrokenPipeError

        # Off a terminal rich would wrap at 80 columns; scripts and logs prefer long lines: COLUMNS when set
        # (`COLUMNS=100 milepost runs x | less`), else 200.
        width = None if sys.stdout.isatty() else _columns(200)
        # emoji=False: a ":smile:" someone wrote is shown as written, not as a picture.
        return _Console(highlight=False, soft_wrap=True, width=width, emoji=False)

    def emit(self, data: Any, human: Callable[[Console], None]) -> None:
        if self.json:
            # Strict JSON: a NaN or an infinity is a bug to report, never output.
            click.echo(json.dumps(data, default=str, allow_nan=False))
        else:
            human(self.console())


pass_ctx = click.make_pass_decorator(Ctx)


def _columns(default: int) -> int:
    """``COLUMNS`` when it is a whole number from 20 to 10,000, else ``default``."""
    value = os.environ.get("COLUMNS", "").strip()
    return int(value) if value.isdigit() and 20 <= int(value) <= 10_000 else default


class PrefectLost(SystemExit):
    """A drive's exit when it lost its Prefect API (and still ended: its work
    recorded): the CLI leaves without Prefect's drains (cli/__init__.py)."""


class Seconds(click.ParamType[float]):
    """A finite number of seconds within milepost's limits (no nan, no inf)."""

    name = "seconds"

    def __init__(self, minimum: float = 0.0, *, open_min: bool = True) -> None:
        self.minimum = minimum
        self.open_min = open_min

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        import math

        from milepost.graph.models import MAX_SECONDS

        try:
            v = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        low_ok = v > self.minimum if self.open_min else v >= self.minimum
        if not (math.isfinite(v) and low_ok and v <= MAX_SECONDS):
            rel = ">" if self.open_min else ">="
            self.fail(f"{value!r} is not a number of seconds {rel} {self.minimum:g} and <= {MAX_SECONDS:g}", param, ctx)
        return v


class _Id(click.ParamType[int]):
    """A whole number from 1 to the database's integer limit."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        from milepost.graph.models import MAX_ID

        try:
            v = int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a whole number", param, ctx)
        if not 1 <= v <= MAX_ID:
            self.fail(f"{value!r} is not a whole number from 1 to {MAX_ID}", param, ctx)
        return v


ID = _Id()
SECONDS = Seconds()
DELAY = Seconds(open_min=False)
RETRIES = click.IntRange(min=0, max=100)


def item_option(f: F) -> F:
    return click.option(
        "--item", "item", type=ID, default=None, metavar="N", help="Work item id (default: this agent's current item)."
    )(f)


def item_synonym(*, required: bool = False) -> Callable[[F], F]:
    """``--item N`` beside a command's positional ITEM_ID (the same thing,
    spelled as every other command spells it): given once either way, or
    twice with the same id. Put it right above ``@pass_ctx``."""

    def decorate(f: F) -> F:
        import functools

        @functools.wraps(f)
        def wrapper(*args: Any, item_flag: int | None = None, **kwargs: Any) -> Any:
            given = kwargs.get("item_id")
            if item_flag is not None:
                if given is not None and given != item_flag:
                    raise InvalidValueError(
                        f"two work items given: ITEM_ID {given} and --item {item_flag}; give one (they are synonyms)"
                    )
                kwargs["item_id"] = item_flag
            if required and kwargs.get("item_id") is None:
                raise InvalidValueError("which work item? pass --item N (or ITEM_ID)")
            return f(*args, **kwargs)

        help_ = "Work item id (the same as ITEM_ID" + (")." if required else "; default: this agent's current item).")
        return click.option("--item", "item_flag", type=ID, default=None, metavar="N", help=help_)(wrapper)  # type: ignore[return-value]

    return decorate


def output_option(help_: str) -> Callable[[F], F]:
    """``-o/--output FILE``: where a command writes what it would print."""
    return click.option(
        "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="FILE", help=help_
    )


def revision_option(f: F) -> F:
    return click.option(
        "--expect-revision",
        type=ID,
        default=None,
        metavar="N",
        help="Refuse (exit 2) unless the item is at revision N: safe read-modify-write.",
    )(f)


class Group(click.Group):
    """A command group whose list of commands shows each one's first sentence
    whole, wrapped, where click cuts it at the line's end (``Add a milestone
    to the current work item (its plan must be a...``). Its subgroups are of
    the same kind."""

    group_class = type

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--db", metavar="URL", help="SQLAlchemy database URL [env MILEPOST_DB].")
@click.option("--agent", metavar="NAME", help="Act as this agent [env MILEPOST_AGENT].")
@click.option("--json", "as_json", is_flag=True, help='Print one JSON document on stdout; errors as {"error": ...}.')
@click.option("--operator", is_flag=True, help="Act as an operator: change other agents' items too.")
@click.option("--debug", is_flag=True, help="Show the Python traceback of an error [env MILEPOST_DEBUG].")
@click.version_option(package_name="milepost")
@click.pass_context
def cli(ctx: click.Context, db: str | None, agent: str | None, as_json: bool, operator: bool, debug: bool) -> None:
    """milepost: plan a milestone DAG, prove each milestone with a gate.

    \b
    Exit codes: 0 ok; 1 the operation ran and failed (a gate failed);
    2 bad input or refused transition, nothing changed; 3 environment
    (no store, database unreachable); 130 interrupted.

    The options below may also follow the command: milepost list --json.
    """
    from milepost.settings import load_settings

    settings = load_settings()  # MILEPOST_* from the environment; flags win
    if agent is not None:  # given, it names someone: --agent "" is refused (a blank MILEPOST_AGENT is unset)
        from milepost.graph.models import check_name

        check_name(agent, "agent")
    agent = _doer_agent(agent, settings.agent, settings.worktrees) or agent
    ctx.obj = Ctx(db or settings.db, agent or settings.agent, as_json, operator)
    ctx.call_on_close(lambda: ctx.obj._service.close() if ctx.obj._service else None)


def _doer_agent(flag: str | None, setting: str | None, worktrees: str | None = None) -> str | None:
    """``doer`` when this command runs inside a doer's worktree or
    environment (docs/doers.md): no --agent flag makes it anyone else.
    (The name is gates.doer_env.DOER_AGENT, not imported: it costs pydantic.)"""
    if not _in_worktree(Path.cwd().resolve(), worktrees) and setting != "doer":
        return None
    if flag is not None and flag != "doer":
        from milepost.errors import DoerRefusedError

        raise DoerRefusedError(f"--agent {flag}: this command runs in a doer's worktree or environment (agent doer)")
    return "doer"


def _in_worktree(here: Path, worktrees: str | None) -> bool:
    """Whether ``here`` is inside a git worktree milepost made: under the
    worktrees' root (MILEPOST_WORKTREES, else the user's cache folder), or in
    any worktree whose own git dir holds milepost's mark (gates.worktrees.
    WORKTREE_MARK, wherever it lives), or under a ``.milepost/worktrees/``
    (where they lived before). A few stat calls: no git, no import."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(cache) if cache and Path(cache).is_absolute() else Path.home() / ".cache"
    roots = [base / "milepost" / "worktrees", *([Path(worktrees).expanduser()] if worktrees else [])]
    chain = (here, *here.parents)
    if any(f.name == "worktrees" and f.parent.name == ".milepost" for f in chain):
        return True
    if any(r.resolve() in chain for r in roots):
        return True
    for folder in chain:
        dot_git = folder / ".git"
        if dot_git.is_file():
            with contextlib.suppress(OSError, ValueError, IndexError):
                first = dot_git.read_text(encoding="utf-8", errors="replace").splitlines()[0]
                own = Path(first.removeprefix("gitdir:").strip())
                return (folder / own / "milepost-worktree").is_file()
            return False
        if dot_git.is_dir():
            return False
    return False


# -- init --------------------------------------------------------------------


def plan_status_of(value: str | None) -> Any:
    from milepost.graph.status import PlanStatus

    return PlanStatus(value) if value else None


PLAN_STATUS = click.Choice([s.value for s in PlanStatus])


def choice(values: type[StrEnum]) -> click.Choice[str]:
    """A click choice of an enum's values: the CLI offers what the domain defines."""
    return click.Choice([v.value for v in values])


def split_deps(deps: str | None) -> list[str]:
    return split_list(deps or "", "--deps", "milestone names")


def split_list(value: str, flag: str, what: str) -> list[str]:
    """``a,b`` as ``[a, b]``, blank as none; an empty entry (``a,,b``, ``a,``) means nothing: refused."""
    entries = [v.strip() for v in value.split(",")] if value.strip() else []
    if "" in entries:
        raise InvalidValueError(
            f"invalid {flag} {value!r}: entry {entries.index('') + 1} of {len(entries)} is empty;"
            f" give {what} separated by single commas, such as a,b"
        )
    return entries


def write_file(output: Path, data: str | bytes, flag: str = "-o") -> None:
    """Write what a command made to the file the user named (its ``flag``):
    a missing folder is bad input (exit 2), anything else the system's (exit 3)."""
    try:
        if isinstance(data, bytes):
            output.write_bytes(data)
        else:
            output.write_text(data, encoding="utf-8")
    except FileNotFoundError:
        raise InvalidValueError(
            f"cannot write {flag} {str(output)!r}: folder {str(output.parent)!r} does not exist"
        ) from None
    except IsADirectoryError:
        raise InvalidValueError(f"cannot write {flag} {str(output)!r}: it is a folder") from None
    except OSError as e:
        raise EnvironmentProblem(f"cannot write {flag} {str(output)!r}: {e.strerror or e}") from None


def home_of(c: Ctx) -> Path:
    from milepost.workspace import resolve_workspace

    return resolve_workspace(c.db).home


def hoist_global_options(args: list[str]) -> tuple[list[str], bool]:
    """``args`` with the global options (``--json``, ``--db URL``, ...)
    given after the command moved before it, as git and gh accept them, and
    whether ``--json`` is among them. The walk follows the command path and
    each command's own options, so an option's value (``--reason --json``)
    and everything after ``--`` stay where they are. ``--item N`` given
    before the command (``milepost --item 1 list``) goes after it, where every
    command that takes a work item takes it."""
    flags = {"--json", "--operator", "--debug"}
    valued = {"--db", "--agent"}
    front: list[str] = []
    out: list[str] = []
    item: list[str] = []  # --item N given before the command
    cmd: click.Command = cli
    as_json = False
    i = 0
    while i < len(args):
        t = args[i]
        i += 1
        if cmd is cli and t.split("=", 1)[0] == "--item":
            item = [t] if "=" in t else args[i - 1 : i + 1]
            i += len(item) - 1
            continue
        if t == "--":
            out += args[i - 1 :]
            break
        name = t.split("=", 1)[0]
        is_global = t in flags or name in valued
        if is_global and (cmd is cli or not _own_option(cmd, name)):
            as_json = as_json or t == "--json"
            moved = [t] if t in flags or "=" in t else args[i - 1 : i + 1]
            i += len(moved) - 1
            (out if cmd is cli else front).extend(moved)
            continue
        out.append(t)
        if t.startswith("-") and t != "-":
            opt = _own_option(cmd, name)
            if opt is not None and not opt.is_flag and not opt.count and "=" not in t and i < len(args):
                out.append(args[i])  # the option's value, whatever it looks like
                i += 1
        elif isinstance(cmd, click.Group) and t in cmd.commands:
            cmd = cmd.commands[t]
            if item and not isinstance(cmd, click.Group):
                out += item  # (a command without --item says so: "No such option: --item")
                item = []
    return front + item + out, as_json


def _own_option(cmd: click.Command, name: str) -> click.Option | None:
    for p in cmd.params:
        if isinstance(p, click.Option) and name in (*p.opts, *p.secondary_opts):
            return p
    return None
