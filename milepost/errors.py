"""The one exception tree of milepost.

Every error a user can cause is a :class:`MilepostError`. Its message is one
line that names the thing, says what was found and what would be accepted.
``exit_code`` is the CLI exit code of the contract (2: bad input or a refused
transition, nothing changed; 3: environment). Outcomes that are not misuse (a
gate that fails) are values, never exceptions.

    MilepostError
    ├── InputError (ValueError)                 exit 2
    │   ├── InvalidNameError
    │   ├── InvalidValueError
    │   └── PlanError
    │       ├── UnknownDependencyError
    │       ├── DuplicateNameError
    │       ├── SelfDependencyError
    │       ├── CycleError
    │       └── PlanFileError                    (malformed YAML/JSON, unknown field)
    ├── NotFoundError (LookupError)             exit 2
    ├── TransitionError                         exit 2
    │   ├── BlockedError                        (deps not done)
    │   ├── BudgetSpentError
    │   └── FrozenPlanError                     (structure edit on a non-draft plan)
    ├── NotOwnerError                           exit 2 (another agent's item)
    ├── StaleRevisionError                      exit 2
    ├── ConcurrentUpdateError                   exit 2 (retries exhausted under contention)
    └── EnvironmentProblem                      exit 3
        ├── StoreNotFoundError                  (no store here, or its database is missing or empty)
        ├── StoreDamagedError                   (a database that is not a sound milepost store)
        ├── DatabaseUnreachableError
        └── SettingsError                       (a bad MILEPOST_* value)
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "BlockedError",
    "BudgetSpentError",
    "ConcurrentUpdateError",
    "CycleError",
    "DatabaseUnreachableError",
    "DuplicateNameError",
    "EnvironmentProblem",
    "FrozenPlanError",
    "InputError",
    "InvalidNameError",
    "InvalidValueError",
    "MilepostError",
    "NotFoundError",
    "NotOwnerError",
    "PlanError",
    "PlanFileError",
    "SelfDependencyError",
    "SettingsError",
    "StaleRevisionError",
    "StoreDamagedError",
    "StoreNotFoundError",
    "TransitionError",
    "UnknownDependencyError",
]


class MilepostError(Exception):
    """Base of every error milepost raises on purpose."""

    exit_code: ClassVar[int] = 2
    kind: ClassVar[str] = "error"

    def __init__(self, message: str, **details: Any) -> None:
        # One line, always: scripts split stderr by line.
        self.message = " ".join(message.split("\n"))
        self.details = details
        super().__init__(self.message)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "message": self.message, "exit_code": self.exit_code, **self.details}


class InputError(MilepostError, ValueError):
    kind = "input"


class InvalidNameError(InputError):
    kind = "invalid_name"


class InvalidValueError(InputError):
    kind = "invalid_value"


class PlanError(InputError):
    kind = "plan"


class UnknownDependencyError(PlanError):
    kind = "unknown_dependency"


class DuplicateNameError(PlanError):
    kind = "duplicate_name"


class SelfDependencyError(PlanError):
    kind = "self_dependency"


class CycleError(PlanError):
    kind = "cycle"


class PlanFileError(PlanError):
    kind = "plan_file"


class NotFoundError(MilepostError, LookupError):
    kind = "not_found"


class TransitionError(MilepostError):
    kind = "transition"


class BlockedError(TransitionError):
    kind = "blocked"


class BudgetSpentError(TransitionError):
    kind = "budget_spent"


class FrozenPlanError(TransitionError):
    kind = "frozen_plan"


class NotOwnerError(MilepostError):
    kind = "not_owner"


class StaleRevisionError(MilepostError):
    kind = "stale_revision"


class ConcurrentUpdateError(MilepostError):
    kind = "concurrent_update"


class EnvironmentProblem(MilepostError):
    exit_code = 3
    kind = "environment"


class StoreNotFoundError(EnvironmentProblem):
    kind = "store_not_found"


class DatabaseUnreachableError(EnvironmentProblem):
    kind = "database_unreachable"


class StoreDamagedError(EnvironmentProblem):
    kind = "store_damaged"


class SettingsError(EnvironmentProblem):
    kind = "settings"
