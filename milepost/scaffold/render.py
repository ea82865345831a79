"""Writing a scaffolded plan: names, gate commands, input patterns, YAML."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from milepost.errors import InvalidValueError
from milepost.graph.models import check_name
from milepost.graph.words import count

__all__ = ["PLACEHOLDERS", "command_name", "count", "dump", "input_patterns", "render", "shown", "slug", "unique"]

PLACEHOLDERS = ("module", "path", "name", "tests")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_INTERPRETER = re.compile(r"(?:python|pypy)[0-9.]*(?:\.exe)?")
_WRAPPERS = frozenset({"env", "time", "nice", "nohup", "timeout", "exec", "command", "xvfb-run", "stdbuf"})
_RUNNERS = frozenset({"uv", "uvx", "poetry", "pipenv", "pdm", "hatch", "rye", "pixi", "conda"})
_PYTHON_ARG_OPTIONS = frozenset({"-W", "-X", "-Q"})  # interpreter options that take a value


def listed(items: list[str], limit: int = 4) -> str:
    """``a, b, c, d and 3 more``."""
    shown_ = ", ".join(items[:limit])
    more = len(items) - limit
    return shown_ + (f" and {more} more" if more > 0 else "")


def slug(module: str) -> str:
    """A valid milestone name for a module: lowercase, other characters as
    '-', a letter first, at most 64 characters (a hash keeps long ones unique)."""
    s = re.sub(r"[^a-z0-9._-]", "-", module.lower())
    if not s or not s[0].isalpha():
        s = "m" + s
    if len(s) > 64:
        digest = hashlib.sha1(module.encode()).hexdigest()[:8]
        s = s[:55].rstrip(".-_") + "-" + digest
    return s


def unique(names: Iterable[str]) -> list[str]:
    """The names in order, a repeated one suffixed ``-2``, ``-3``..."""
    seen: dict[str, int] = {}
    taken = set(names := list(names))
    out = []
    for n in names:
        if n in seen:
            while True:
                seen[n] += 1
                suffix = f"-{seen[n]}"
                cand = n[: 64 - len(suffix)] + suffix
                if cand not in taken:
                    break
            taken.add(cand)
            n = cand
        else:
            seen[n] = 1
        out.append(check_name(n))
    return out


def render(template: str, values: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        key = m.group(1)
        if key not in values:
            allowed = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
            raise InvalidValueError(f"unknown placeholder {{{key}}} in {template!r}: use {allowed}")
        return values[key]

    return _PLACEHOLDER.sub(sub, template)


def _tool(words: list[str]) -> str:
    """The tool a command runs: past environment assignments, wrappers
    (``env``, ``timeout 60``...), runners (``uv run``...) and the interpreter
    (``/venv/bin/python -m pytest`` runs pytest)."""
    i = 0
    while i < len(words):
        word = words[i]
        name = Path(word).name
        if re.fullmatch(r"[A-Za-z_]\w*=.*", word):
            i += 1
        elif name in _WRAPPERS:
            i += 1
            while i < len(words) and (words[i].startswith("-") or (name == "timeout" and words[i][:1].isdigit())):
                i += 1
        elif name in _RUNNERS and i + 1 < len(words) and words[i + 1] in ("run", "exec"):
            i += 2
            while i < len(words) and words[i].startswith("-"):
                i += 1
        elif name in ("sh", "bash") and i + 2 < len(words) and words[i + 1] == "-c":
            return _tool(shlex.split(words[i + 2]))
        elif _INTERPRETER.fullmatch(name):
            i += 1
            while i < len(words) and words[i].startswith("-"):
                opt = words[i]
                if opt == "-m" and i + 1 < len(words):
                    return words[i + 1]
                if opt == "-c":
                    return name
                i += 2 if opt in _PYTHON_ARG_OPTIONS else 1
            return Path(words[i]).stem if i < len(words) else name
        else:
            return name
    return ""


def command_name(template: str, taken: set[str]) -> str:
    """A gate step's name: the tool it runs (``pytest``, ``compileall``,
    ``mypy``...), made unique among ``taken``."""
    try:
        words = shlex.split(_PLACEHOLDER.sub("x", template), posix=True)
    except ValueError:
        words = template.split()
    base = re.sub(r"[^a-z0-9._-]", "-", _tool(words).lower()).strip("-._") or "step"
    if not base[0].isalpha():
        base = "step-" + base
    name, n = base[:60], 1
    while name in taken:
        n += 1
        name = f"{base[:58]}-{n}"
    taken.add(name)
    return name


def shown(path: Path, base: Path) -> str:
    """A path as the plan writes it: relative to the workspace when inside it
    (both resolved), else absolute."""
    text, root = str(path), str(base)
    if text == root:
        return "."
    if text.startswith(root.rstrip(os.sep) + os.sep):
        return text[len(root.rstrip(os.sep)) + 1 :].replace(os.sep, "/")
    return text


def input_patterns(files: Iterable[str], base: Path, folder_files: dict[str, frozenset[str]]) -> list[str]:
    """Input patterns for ``files`` (paths relative to ``base``), sorted: a
    folder whose every ``.py`` file is listed is written ``folder/*.py``
    (``*`` does not cross folders), other files by their path (``./name``
    for a file at the root: a bare name would match at any depth).
    ``folder_files`` caches the ``.py`` files found in each folder."""
    by_folder: dict[str, set[str]] = {}
    for f in files:
        folder, _, name = f.rpartition("/")
        by_folder.setdefault(folder, set()).add(name)
    out: list[str] = []
    for folder, names in by_folder.items():
        on_disk = folder_files.get(folder)
        if on_disk is None:
            try:
                with os.scandir(base / folder) as entries:
                    on_disk = frozenset(e.name for e in entries if e.name.endswith(".py") and e.is_file())
            except OSError:
                on_disk = frozenset()
            folder_files[folder] = on_disk
        if folder and len(names) >= 2 and on_disk <= names:
            out.append(f"{folder}/*.py")
        else:
            out += [f"{folder}/{n}" if folder else f"./{n}" for n in names]
    return sorted(out)


class _Flow(list[str]):
    """A list written on one line (deps, inputs)."""


class _FlowDict(dict[str, str]):
    """A mapping written on one line (a named gate command)."""


def flow(items: Iterable[str]) -> list[str]:
    return _Flow(items)


def flow_dict(**items: str) -> dict[str, str]:
    return _FlowDict(**items)


def dump(plan: dict[str, Any]) -> str:
    import yaml

    base = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's C emitter when PyYAML has it

    class _PlanDumper(base):  # type: ignore[valid-type,misc]
        pass

    _PlanDumper.add_representer(_Flow, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))
    _PlanDumper.add_representer(
        _FlowDict, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v, flow_style=True)
    )
    return str(yaml.dump(plan, Dumper=_PlanDumper, sort_keys=False, allow_unicode=True, width=120))
