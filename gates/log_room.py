"""A gate's log that could not be written completely: a full disk, or the
file-size limit (``ulimit -f``, RLIMIT_FSIZE) reached.

The gate's own output goes into its log through the kernel, so its writes
fail in the gate (it usually exits non-zero with "No space left on device"
or "File too large"); milepost's own lines in the log must not crash the
driver either (:func:`write`). When a command has ended, :func:`judge`
looks at the log's room and appends what it found to the command's reason,
so the attempt names the full disk: a failed command stays failed, a
command that passed stays passed with a note that its log is incomplete.
"""

from __future__ import annotations

import errno
import os
import resource
from pathlib import Path

from milepost.gates.outcome import Outcome
from milepost.graph.models import GateCommand

__all__ = ["command_header", "judge", "note", "problem", "write"]

# Less free room than this on the log's file system counts as full.
FULL_BELOW = 64 * 1024
# The errors of the last failed write of milepost's own lines, by descriptor.
_FAILED: dict[int, str] = {}


def command_header(cmd: GateCommand) -> str:
    """The line(s) an attempt's log holds before a command's output."""
    return f"=== [{cmd.name}] $ {cmd.run}\n"


def note(fd: int | None, text: str) -> None:
    """A line of milepost's own in an attempt's log (``milepost: ...``)."""
    if fd is not None:
        write(fd, f"milepost: {text}\n")


def write(fd: int, text: str) -> None:
    """Append milepost's own ``text`` to a log; a full disk is noted, not raised."""
    try:
        os.write(fd, text.encode(errors="replace"))
    except OSError as e:
        _FAILED[fd] = _name(e.errno, e.strerror)


def _name(code: int | None, text: str | None) -> str:
    if code == errno.ENOSPC:
        return "no space left on device"
    if code == errno.EFBIG:
        return "file too large (the file-size limit, ulimit -f)"
    return (text or "write failed").lower()


def problem(fd: int, log_path: Path) -> str | None:
    """Why the log at ``log_path`` (open as ``fd``) may be incomplete, or None."""
    failed = _FAILED.pop(fd, None)
    size = 0
    try:
        size = os.fstat(fd).st_size
        room = os.statvfs(log_path.parent)
        if room.f_bavail * room.f_frsize < FULL_BELOW:
            return f"no space left on device ({room.f_bavail * room.f_frsize} bytes free for {log_path})"
    except OSError:
        pass
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and size >= limit - 4096:
        return f"the file-size limit (ulimit -f: {limit} bytes) was reached by {log_path}"
    if failed is not None:
        return f"{failed} ({log_path})"
    return None


def judge(fd: int, log_path: Path, outcome: Outcome, reason: str) -> tuple[Outcome, str]:
    """A command's outcome and reason, with a note when its log is incomplete."""
    found = problem(fd, log_path)
    if found is None:
        return outcome, reason
    return outcome, f"{reason}; the log is incomplete: {found}"
