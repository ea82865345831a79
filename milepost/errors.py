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
    │   └── FrozenPlanError                     (no longer raised: plans change at any status)
    ├── NotOwnerError                           exit 2 (another agent's item)
    │   └── DoerRefusedError                    (a doer marking, approving, resetting a milestone)
    ├── StaleRevisionError                      exit 2
    ├── ConcurrentUpdateError                   exit 2 (retries exhausted under contention)
    ├── GitError (milepost.gates.git)           exit 3 (git missing, a git command failed)
    │   └── UnknownRefError (NotFoundError)     exit 2 (a branch the repository does not have)
    └── EnvironmentProblem                      exit 3
        ├── StoreNotFoundError                  (no store here, or its database is missing or empty)
        ├── StoreDamagedError                   (a database that is not a sound milepost store)
        ├── DatabaseUnreachableError
        ├── PrefectUnreachableError             (the Prefect API stopped answering under a drive)
        └── SettingsError                       (a bad MILEPOST_* value)
"""

from __future__ import annotations

from milepost.gates.git import GitError, UnknownRefError
from milepost.graph.errors import (
    BlockedError,
    BudgetSpentError,
    CycleError,
    DuplicateNameError,
    FrozenPlanError,
    InputError,
    InvalidNameError,
    InvalidValueError,
    MilepostError,
    NotFoundError,
    PlanError,
    PlanFileError,
    SelfDependencyError,
    TransitionError,
    UnknownDependencyError,
)

__all__ = [
    "BlockedError",
    "BudgetSpentError",
    "ConcurrentUpdateError",
    "CycleError",
    "DatabaseUnreachableError",
    "DoerRefusedError",
    "DuplicateNameError",
    "EnvironmentProblem",
    "FrozenPlanError",
    "GitError",
    "InputError",
    "InvalidNameError",
    "InvalidValueError",
    "MilepostError",
    "NotFoundError",
    "NotOwnerError",
    "PlanError",
    "PlanFileError",
    "PrefectUnreachableError",
    "SelfDependencyError",
    "SettingsError",
    "StaleRevisionError",
    "StoreDamagedError",
    "StoreNotFoundError",
    "TransitionError",
    "UnknownDependencyError",
    "UnknownRefError",
]


class NotOwnerError(MilepostError):
    kind = "not_owner"


class DoerRefusedError(NotOwnerError):
    """A milepost command run by a doer (docs/doers.md) tried to decide a
    milestone: only the gate the drive runs does."""

    kind = "doer_refused"


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


class PrefectUnreachableError(EnvironmentProblem):
    kind = "prefect_unreachable"


class StoreDamagedError(EnvironmentProblem):
    kind = "store_damaged"


class SettingsError(EnvironmentProblem):
    kind = "settings"
