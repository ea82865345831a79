"""No module-level state that changes after import, anywhere in milepost
(issues 31 and 42): a drive's state lives on its own objects, so drives run
side by side in one process and a long-lived one (the MCP server) runs each
drive as the first. This test lists every module-level name (an assignment,
an imported module or name) whose object a function changes in place (item
or attribute assignment or ``del``, ``setattr``, a mutating method call: a
container's, an Event's or ContextVar's ``set``, a logger's level or
handlers), and every module-level name a function binds again (``global
NAME`` and an assignment to it), and fails on any not in the allow-list
below, each entry a per-process (or per-thread, per-context) fact with its
reason. (Another module's state changed on purpose, such as Prefect's logging
quieted after a loss, is changed through an object that puts it back:
flows/prefect_guard.Quieted.) (A cache of immutable facts keyed by what they are facts of, such
as ``functools.cache`` on this process's identity, is no registry.)"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIRS = ["flows", "gates", "graph", "milepost"]
MUTATORS = {
    "append",
    "extend",
    "insert",
    "pop",
    "popitem",
    "remove",
    "discard",
    "add",
    "clear",
    "update",
    "setdefault",
    "__setitem__",
    "__delitem__",
    "set",  # an Event, a ContextVar
    "setLevel",
    "addHandler",
    "removeHandler",
}
CONTAINERS = (ast.Dict, ast.Set, ast.List, ast.DictComp, ast.SetComp, ast.ListComp)
CONSTRUCTORS = {"dict", "set", "list", "defaultdict", "OrderedDict", "deque", "Counter"}

ALLOWED = {
    # Crash points, a testing aid: "die the N-th time this process reaches NAME" counts per process by its spec.
    "gates/_crash.py:_SEEN",
    # A stat -> digest cache of the workspace's files: keyed by (size, mtime, ctime, inode), an entry is a fact
    # that never changes; shared by every drive of the workspace in this process, under its lock.
    "gates/inputs.py:_CACHES",
    # Keyed by an open log descriptor (unique in the process while open), popped when its command is judged.
    "gates/log_room.py:_FAILED",
    # The Prefect servers this process started: processes it must stop when it exits (per process by nature).
    "flows/server.py:_CHILDREN",
    # This process's gate supervisor: one per process by nature (it watches the process, so gates die with
    # it), shared by every drive of the process; bound afresh only in a forked child, which is another process.
    "gates/supervisor.py:_HERE",
    # Context variables, set and reset around each drive's flow call: each drive's own (threads, MCP calls).
    "flows/drive.py:_RUN",
    "flows/drive.py:_EARLY",
    # A threading.local: each thread's own depth of nested retried reads.
    "milepost/retry.py:_DEPTH",
}


def _module_names(tree: ast.Module) -> set[str]:
    """Every name the module binds at its top level: assignments, and the modules and names it imports."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _changed_base(node: ast.AST) -> ast.expr | None:
    """What ``node`` changes in place, if it does: the object of an item or
    attribute stored or deleted, of a mutating method call, of ``setattr``."""
    if isinstance(node, ast.Subscript | ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
        return node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
        return node.func.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
        return node.args[0] if node.args else None
    return None


def _registries(path: Path) -> set[str]:
    """Module-level names whose object changes after import (see the module), and names bound again."""
    tree = ast.parse(path.read_text())
    names = _module_names(tree)
    mutated: set[str] = set()
    for fn in ast.walk(tree):  # (changes made while the module is imported are its making, not state)
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        local = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)} | {
            n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        declared = {n for node in ast.walk(fn) if isinstance(node, ast.Global) for n in node.names}
        for node in ast.walk(fn):
            base = _changed_base(node)
            if isinstance(base, ast.Name) and base.id in names and (base.id not in local or base.id in declared):
                mutated.add(base.id)
    return mutated | _rebound(tree)


def _rebound(tree: ast.Module) -> set[str]:
    """Module-level names a function binds again (``global NAME`` and an assignment to it)."""
    found: set[str] = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        declared = {n for node in ast.walk(fn) if isinstance(node, ast.Global) for n in node.names}
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del) and node.id in declared:
                found.add(node.id)
    return found


def test_no_module_level_mutable_registry() -> None:
    found, seen = set(), set()
    for d in DIRS:
        for path in sorted((ROOT / d).rglob("*.py")):
            if path.resolve() in seen:  # (milepost/flows is flows/, and so on)
                continue
            seen.add(path.resolve())
            found |= {f"{path.relative_to(ROOT)}:{n}" for n in _registries(path)}
    assert found - ALLOWED == set(), "module-level registries (move them onto the drive's objects)"
    assert ALLOWED - found == set(), "allow-listed registries that are gone: drop them from ALLOWED"


def test_the_rule_finds_a_registry(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text("_SEEN: dict[str, int] = {}\nKEEP = {'a': 1}\n\ndef f(k):\n    _SEEN[k] = 1\n    return KEEP[k]\n")
    assert _registries(p) == {"_SEEN"}


def test_the_rule_finds_a_global_bound_again(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text("_LAST = None\nLIMIT = 3\n\ndef f(x):\n    global _LAST, LIMIT\n    _LAST = x\n    return LIMIT\n")
    assert _registries(p) == {"_LAST"}


def test_the_rule_finds_process_wide_state_set_by_a_function(tmp_path: Path) -> None:
    """What quiet_prefect did before issue 42: a flag set, another module's attribute, a logger's."""
    p = tmp_path / "m.py"
    p.write_text(
        "import logging\nimport threading\n_LOST = threading.Event()\nLIMIT = 3\n\n"
        "def quiet(name):\n    _LOST.set()\n    logging.raiseExceptions = False\n"
        "    logger = logging.getLogger(name)\n    logger.disabled = True\n    return LIMIT\n"
    )
    assert _registries(p) == {"_LOST", "logging"}


def test_the_rule_leaves_a_functions_own_objects_alone(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text("import os\nSEEN = {}\n\ndef f(os, SEEN):\n    SEEN[1] = os\n    os.x = 1\n")
    assert _registries(p) == set()
