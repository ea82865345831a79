"""The ``milepost`` command line.

Three layers: :func:`main` parses, runs and turns errors into one line and an
exit code; each command asks the service for plain data;
:mod:`milepost.present.terminal` formats that data as rich text or, with
``--json``, the command prints one JSON document on stdout. Heavy imports (the
service, the store, SQLAlchemy) happen when a command first uses the service
(``Ctx.service``); Prefect is imported by no state command.

The commands live by concern: :mod:`.items` (init, item, ref, history),
:mod:`.milestones` (add, remove, the milestone actions, done, verify, next,
list, inputs, runs, log), :mod:`.plans` (plan apply/scaffold/cycles/schema/
export, graph), :mod:`.runtime` (drive, tick, serve, deploy, server, mcp,
prime); :mod:`._base` holds what they share (the context, parameter types,
the root group).

Exit codes: 0 success; 1 the operation ran and failed (a gate failed);
2 bad input or refused transition (nothing changed); 3 environment
(no store, database unreachable); 130 interrupted.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from typing import Any, NoReturn

from milepost._startup import quiet_imports

with quiet_imports():  # most of what a state command costs is starting: see milepost._startup
    import click

    import milepost.graph.models
    import milepost.results
    import milepost.settings  # noqa: F401  (its model is built here, with the others)
    from milepost.cli import items, milestones, plans, runtime  # noqa: F401  (they register their commands)
    from milepost.cli._base import PrefectLost, cli
    from milepost.errors import MilepostError


__all__ = ["cli", "main", "run"]


def _fail(as_json: bool, payload: dict[str, Any], message: str, code: int) -> NoReturn:
    if as_json:
        click.echo(json.dumps({"error": payload}))
    else:
        from milepost._text import printable

        click.echo(f"milepost: error: {printable(message)}", err=True)
    if code == 130:
        _forget_caught_interrupt()
    raise SystemExit(code)


def _forget_caught_interrupt() -> None:
    """Make exit 130 stay 130 under ``python -m milepost``.

    CPython (3.11 here) flags a KeyboardInterrupt that ends any code run by
    ``exec``/``eval`` of a string, even when it is caught later, and a
    ``python -m`` process with that flag set kills itself with SIGINT at exit
    (status -2, not 130). Prefect's import runs thousands of such strings
    (dataclasses, namedtuples), so a Ctrl-C while it loads hit this now and
    then. Running one more string clears the flag: it is reset where it is set."""
    exec("pass")


def run() -> None:
    """The process's entry point (the ``milepost`` script, ``python -m
    milepost``): :func:`main`, then leave without tearing the interpreter
    down once the exit's duties are done (:mod:`milepost.cli._leave`)."""
    from milepost.cli._leave import QuickExit

    leaving = QuickExit()
    try:
        main()
    except SystemExit as e:
        leaving.ended(e)
        raise
    leaving.ended(None)


def main(argv: list[str] | None = None) -> None:
    """The entry point: run one command, turn every error into one line (or a
    JSON error document) and an exit code of the contract. ``--debug`` or
    ``MILEPOST_DEBUG=1`` adds the Python traceback."""
    from milepost.cli._base import hoist_global_options

    args, as_json = hoist_global_options(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or _debug_setting()
    if not args:
        click.echo(cli.get_help(click.Context(cli, info_name="milepost")))
        raise SystemExit(0)
    previous = _sigterm_interrupts()
    try:
        cli.main(args=args, prog_name="milepost", standalone_mode=False)
    except BaseException as e:
        code, payload, message = _classify(e)
        if code is None:
            _leave_if_prefect_lost(e.code if isinstance(e, SystemExit) and isinstance(e.code, int) else 1, e)
            raise
        if debug and not isinstance(e, SystemExit):
            import traceback

            traceback.print_exception(e, file=sys.stderr)
        if code == 0:
            raise SystemExit(0) from None
        try:
            _fail(as_json, payload, message, code)
        finally:
            _leave_if_prefect_lost(code, e)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _debug_setting() -> bool:
    """``MILEPOST_DEBUG``, read through the one settings object; a bad value
    is reported by the command itself (exit 3), not here."""
    from milepost.errors import SettingsError
    from milepost.settings import load_settings

    try:
        return load_settings().debug
    except SettingsError:
        return False


def _leave_if_prefect_lost(code: int, ended: BaseException | None = None) -> None:
    """A drive that lost its Prefect API has said so (its error, or its
    summary's ``prefect_lost`` on the exit it raised: :class:`PrefectLost`);
    Prefect's background services would now spend seconds per event and log
    line they hold trying to send them at interpreter exit. Leave without
    those drains (the store has everything; see milepost.flows.prefect_guard)."""
    from milepost.errors import PrefectUnreachableError

    if isinstance(ended, PrefectUnreachableError | PrefectLost):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _sigterm_interrupts() -> Any:
    """SIGTERM (a CI timeout, ``kill``) stops a command the way Ctrl-C does:
    a running gate's process group is killed and the attempt recorded as
    interrupted, then exit 130."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, handler)


def _classify(e: BaseException) -> tuple[int | None, dict[str, Any], str]:
    """(exit code, JSON error payload, one-line message) for an exception that
    ended a command; code None: let it propagate (a SystemExit of a command)."""
    if isinstance(e, SystemExit):
        return None, {}, ""
    if isinstance(e, MilepostError):
        return e.exit_code, e.to_dict(), e.message
    if isinstance(e, click.exceptions.Exit):
        if e.exit_code == 0:
            return 0, {}, ""
        return e.exit_code, {"type": "usage", "message": "exit", "exit_code": e.exit_code}, "exit"
    if isinstance(e, click.Abort | KeyboardInterrupt):
        return 130, {"type": "interrupted", "message": "interrupted", "exit_code": 130}, "interrupted"
    if isinstance(e, click.ClickException):
        message = _one_line(e.format_message())
        if isinstance(e, click.UsageError) and e.ctx is not None:
            message += f" (see `{e.ctx.command_path} --help`)"
        return 2, {"type": "usage", "message": message, "exit_code": 2}, message
    if isinstance(e, BrokenPipeError):
        # `milepost history | head -1`: the reader left; that is not an error.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0, {}, ""
    from sqlalchemy.exc import SQLAlchemyError

    if isinstance(e, SQLAlchemyError | OSError):
        what = "database" if isinstance(e, SQLAlchemyError) else "system"
        detail = _one_line(str(getattr(e, "orig", None) or e)) or type(e).__name__
        message = f"{what} error: {detail}"
        return 3, {"type": "environment", "message": message, "exit_code": 3}, message
    message = f"internal error: {type(e).__name__}: {_one_line(str(e))}; rerun with --debug for the traceback"
    return 1, {"type": "internal", "message": message, "exit_code": 1}, message


def _one_line(text: str) -> str:
    return " ".join(text.split())
