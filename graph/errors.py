"""The domain's errors: the base of milepost's one exception tree and every
refusal the pure domain raises (bad names and values, plan faults, unknown
milestones, refused transitions). :mod:`milepost.errors` re-exports them with
the rest of the tree (the store's and the environment's), and draws it whole."""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "BlockedError",
    "BudgetSpentError",
    "CycleError",
    "DuplicateNameError",
    "FrozenPlanError",
    "InputError",
    "InvalidNameError",
    "InvalidValueError",
    "MilepostError",
    "NotFoundError",
    "PlanError",
    "PlanFileError",
    "SelfDependencyError",
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
