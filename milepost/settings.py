"""milepost's settings: one object, read from ``MILEPOST_*`` environment
variables by the CLI, by ``Service.open()`` and by every flow body alike, so
a flow run that Prefect starts (served, deployed, run by a worker on another
machine) opens the store the user named.

Command-line flags (``--db``, ``--agent``, ``--debug``) win over the
environment; the environment wins over the defaults here.

The object is a plain pydantic model filled from the environment by
:meth:`Settings.from_env` (names matched case-insensitively, as
pydantic-settings does): importing pydantic-settings cost every command more
than the rest of milepost's own start-up (docs/benchmarks.md).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails  # (pydantic's own dependency: a type only)

from milepost.errors import SettingsError

__all__ = ["Settings", "load_settings"]

ENV_PREFIX = "MILEPOST_"
# A week: a lease is renewed every quarter of it, so longer makes no sense.
MAX_LEASE_TTL = 7 * 24 * 3600.0
# The longest wait any fault setting allows (an hour): past it a user wants to know.
MAX_WAIT = 3600.0


def _wait(default: float, description: str, *, positive: bool = False) -> Any:
    """A fault bound in seconds: at least 0 (above 0 when ``positive``), at most :data:`MAX_WAIT`."""
    return Field(
        default=default, gt=0 if positive else None, ge=None if positive else 0, le=MAX_WAIT, description=description
    )


class Settings(BaseModel):
    """Every setting of milepost (environment variable ``MILEPOST_<NAME>``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    db: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the store; default: the SQLite file of the nearest .milepost/",
    )
    agent: str | None = Field(default=None, description="the acting agent (default: 'default')")
    lease_ttl: float = Field(
        default=120.0,
        gt=0,
        le=MAX_LEASE_TTL,
        description="seconds a gate's claim stays valid without renewal (renewed every quarter of it)",
    )
    debug: bool = Field(default=False, description="show Python tracebacks of errors")
    busy_timeout: float = _wait(30.0, "seconds a SQLite write waits for another process's lock before exit 3")
    db_retry: float = _wait(30.0, "seconds in all a lost database connection is retried (with backoff) before exit 3")
    prefect_timeout: float = _wait(10.0, "seconds one request to the Prefect API may take", positive=True)
    prefect_retries: int = Field(
        default=3, ge=0, le=10, description="retries of a failed Prefect API request (backoff 2, 4, 8 ... s)"
    )
    prefect_grace: float = _wait(
        10.0, "seconds the Prefect API may stay unreachable before a drive stops claiming (exit 3)"
    )
    server: Literal["background", "temporary"] = Field(
        default="background",
        description="the Prefect server a drive starts when none is up: 'background' (the workspace's,"
        " kept for the next drives until unused for MILEPOST_SERVER_IDLE) or 'temporary' (one per drive,"
        " stopped with it: CI, one-shot use)",
    )
    server_idle: float = Field(
        default=1800.0,
        gt=0,
        le=MAX_LEASE_TTL,
        description="seconds a Prefect server a drive started in the background stays up unused",
    )
    worktrees: str | None = Field(
        default=None,
        description="the folder milepost's git worktrees live under (docs/doers.md); default:"
        " $XDG_CACHE_HOME/milepost/worktrees, or ~/.cache/milepost/worktrees",
    )

    @field_validator("lease_ttl", "busy_timeout", "db_retry", "prefect_timeout", "prefect_grace", "server_idle")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v

    @field_validator("db", "agent", "worktrees")
    @classmethod
    def _blank_is_unset(cls, v: str | None) -> str | None:
        return v if v is None or v.strip() else None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings ``MILEPOST_<NAME>`` variables give (any letter case)."""
        env = os.environ if environ is None else environ
        found = {k.upper(): v for k, v in env.items() if k.upper().startswith(ENV_PREFIX)}
        return cls.model_validate(
            {name: found[ENV_PREFIX + name.upper()] for name in cls.model_fields if ENV_PREFIX + name.upper() in found}
        )


def load_settings() -> Settings:
    """The settings from the environment; a bad value is an environment error
    (exit 3) naming the variable, what was found and what is accepted."""
    try:
        return Settings.from_env()
    except ValidationError as e:
        err = e.errors()[0]
        name = ENV_PREFIX + str(err["loc"][0]).upper() if err.get("loc") else ENV_PREFIX + "*"
        found = err.get("input")
        raise SettingsError(
            f"invalid setting {name}={found!r}: {_accepted(err)}", variable=name, found=repr(found)
        ) from None


def _accepted(err: ErrorDetails) -> str:
    field = str(err["loc"][0]) if err.get("loc") else ""
    if field == "lease_ttl":
        return f"expected seconds, a number > 0 and at most {MAX_LEASE_TTL:g}"
    if field in ("busy_timeout", "db_retry", "prefect_grace"):
        return f"expected seconds, a number >= 0 and at most {MAX_WAIT:g}"
    if field == "prefect_timeout":
        return f"expected seconds, a number > 0 and at most {MAX_WAIT:g}"
    if field == "server":
        return "expected 'background' or 'temporary'"
    if field == "server_idle":
        return f"expected seconds, a number > 0 and at most {MAX_LEASE_TTL:g}"
    if field == "prefect_retries":
        return "expected a whole number from 0 to 10"
    if field == "debug":
        return "expected 1/0, true/false, yes/no or on/off"
    return str(err.get("msg", "invalid value"))
