"""No module-level mutable registry in flows/, gates/ or service/ (issue 31):
a drive's state lives on its own objects, so drives run side by side in one
process. This test lists every module-level name bound to a dict, set or list
(literal, comprehension or constructor call) that the module mutates (item
assignment, ``del``, or a mutating method call on it), and every module-level
name a function binds again (``global NAME`` and an assignment to it), and
fails on any not in the allow-list below, each entry a per-process fact with
its reason. (A cache of immutable facts keyed by what they are facts of, such
as ``functools.cache`` on this process's identity, is no registry.)"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIRS = ["flows", "gates", "milepost/service"]
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
}


def _registries(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        is_container = isinstance(value, CONTAINERS) or (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in CONSTRUCTORS
        )
        if is_container:
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    mutated: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
            base = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            base = node.func.value
        else:
            continue
        if isinstance(base, ast.Name) and base.id in names:
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
    found = set()
    for d in DIRS:
        for path in sorted((ROOT / d).rglob("*.py")):
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
