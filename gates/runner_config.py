"""The test runner's configuration as an input of a test file's proof.

pytest reads its configuration from the first of ``pytest.ini``,
``.pytest.ini``, ``pyproject.toml`` (``[tool.pytest.ini_options]``, or
pytest 9's ``[tool.pytest]``), ``tox.ini`` (``[pytest]``) and ``setup.cfg``
(``[tool:pytest]``) found in the test file's folder or a folder above it
(its rootdir). A test file's proof counts each of these files in every
folder from the test file's own up to the workspace root (so a section
added to a nearer file, which would shadow a farther one, is a change too):

* ``pytest.ini`` and ``.pytest.ini``: the whole file (all of it is pytest's);
* ``pyproject.toml``, ``tox.ini``, ``setup.cfg``: only pytest's section, as
  the input ``FILE[SECTION]`` (``pyproject.toml[tool.pytest]``), its content
  the digest of what the section holds, or ``absent``. A version bump in
  ``[project]`` re-proves nothing; a dependency change reaches the tests
  through the environment (``env:`` entries), which is an input of its own.
  A ``pyproject.toml`` that is not valid TOML counts whole (pytest would
  refuse it: a change must show).

Files above the workspace root, ``-c FILE`` and ``--rootdir`` on a command
line are not followed. Sections other plugins read (``[tool.coverage]``
for pytest-cov) are not counted: name the file in the inputs for them.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Callable

__all__ = ["CANDIDATES", "config_inputs", "section_digest"]

DIGEST_CHARS = 32
# (file name, its pytest section; None: the whole file), in pytest's order of precedence.
CANDIDATES: tuple[tuple[str, str | None], ...] = (
    ("pytest.ini", None),
    (".pytest.ini", None),
    ("pyproject.toml", "tool.pytest"),
    ("tox.ini", "pytest"),
    ("setup.cfg", "tool:pytest"),
)
ABSENT = "absent"


def _short(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:DIGEST_CHARS]


def _ini_section(text: str, section: str) -> str | None:
    """The lines of ``[section]`` in an ini file (to the next section header), or None."""
    out: list[str] | None = None
    for line in text.splitlines():
        head = line.strip()
        if head.startswith("[") and head.endswith("]") and not line[:1].isspace():
            if out is not None:
                break
            if head[1:-1].strip() == section:
                out = []
            continue
        if out is not None:
            out.append(line.rstrip())
    if out is None:
        return None
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)


def section_digest(name: str, section: str, data: bytes) -> str:
    """The digest of pytest's section in one file's content (``absent`` when it has none)."""
    if name == "pyproject.toml":
        try:
            doc = tomllib.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError):
            return "unparsed:" + _short(data)
        table = doc.get("tool", {}).get("pytest") if isinstance(doc.get("tool"), dict) else None
        if table is None:
            return ABSENT
        return "toml:" + _short(json.dumps(table, sort_keys=True, default=str).encode())
    body = _ini_section(data.decode("utf-8", "replace"), section)
    return ABSENT if body is None else "ini:" + _short(body.encode())


def config_inputs(
    test_rel: str, digest: Callable[[str], str | None], section: Callable[[str, str, str], str]
) -> dict[str, str]:
    """The configuration inputs of the test file ``test_rel`` (relative,
    '/'-separated): key -> content digest. ``digest(rel)`` is a file's content
    digest (None: no such file), ``section(rel, name, section)`` the digest of
    pytest's section in it (:func:`section_digest` of its bytes)."""
    out: dict[str, str] = {}
    folder = test_rel.rpartition("/")[0]
    while True:
        for name, part in CANDIDATES:
            rel = f"{folder}/{name}" if folder else name
            whole = digest(rel)
            if whole is None:
                continue
            if part is None:
                out[rel] = whole  # (the same digest as the file's as a pattern input: the keys agree)
            else:
                out[f"{rel}[{part}]"] = section(rel, name, part)
        if not folder:
            return out
        folder = folder.rpartition("/")[0]
