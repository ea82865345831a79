"""What milepost's optional extras bring, and the one line that says which
to install when a command needs one that is not installed.

| extra | brings | needed by |
|---|---|---|
| ``dask`` | prefect-dask (and Dask) | ``drive --task-runner dask`` |
| ``postgres`` | psycopg | a ``postgresql+psycopg://`` store (see ``milepost.store``) |
"""

from __future__ import annotations

from importlib.util import find_spec

from milepost.errors import EnvironmentProblem

__all__ = ["require_task_runner"]


def require_task_runner(kind: str) -> None:
    """Refuse, before anything runs, a task runner whose extra is not
    installed (an environment error: exit 3, one line naming the extra)."""
    if kind == "dask" and find_spec("prefect_dask") is None:
        raise EnvironmentProblem(
            "--task-runner dask needs prefect-dask, which is not installed:"
            " install milepost's dask extra (pip install 'milepost[dask]')"
        )
