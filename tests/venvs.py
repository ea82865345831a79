"""Real virtualenvs with an editable install of a small package (issue 38):
made in a temporary folder, offline and fast (no pip in the venv: the test
environment's site-packages, pytest and setuptools among them, reach it
through a ``.pth`` file; ``pip install -e --no-build-isolation --no-deps``)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

HELPERS = "def is_even(n):\n    return n % 2 == 0\n"
BROKEN = "def is_even(n):\n    return True\n"
FIXED = "def is_even(n):\n    return not n % 2\n"


def git(ws: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True, text=True).stdout


def bare_venv(where: Path) -> Path:
    """A real virtualenv at ``where`` (``python -m venv``, no pip of its own) that
    sees this interpreter's packages (pytest, pip) through a .pth file: nothing
    is downloaded. Its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "_outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def shared_venv(where: Path) -> Path:
    """:func:`bare_venv`, with ``wheel`` for setuptools' editable installs; its python."""
    python = bare_venv(where)
    # setuptools builds an editable install as a wheel: ``wheel`` (from the local package index) where it builds
    subprocess.run([str(python), "-m", "pip", "install", "-q", "wheel"], check=True, capture_output=True)
    return python


def package_repo(ws: Path, name: str, layout: str) -> Path:
    """``ws`` a git repository on ``main`` holding the package ``name`` (``src``
    or ``flat`` layout) with a helper and its tests; the package's folder."""
    top = ws / "src" / name if layout == "src" else ws / name
    top.mkdir(parents=True)
    (top / "__init__.py").write_text("")
    (top / "helpers.py").write_text(HELPERS)
    (ws / "tests").mkdir()
    (ws / "tests" / "test_helpers.py").write_text(
        f"from {name}.helpers import is_even\n\n\ndef test_even():\n    assert is_even(2)\n\n\n"
        "def test_odd():\n    assert not is_even(3)\n"
    )
    find = "where = ['src']" if layout == "src" else f"include = ['{name}*']"
    (ws / "pyproject.toml").write_text(
        "[build-system]\nrequires = ['setuptools']\nbuild-backend = 'setuptools.build_meta'\n\n"
        f"[project]\nname = '{name}'\nversion = '0.1'\n\n[tool.setuptools.packages.find]\n{find}\n"
    )
    (ws / ".gitignore").write_text("*.egg-info/\n__pycache__/\n.pytest_cache/\nbuild/\n.milepost/\n")
    git(ws, "init", "-q", "-b", "main")
    git(ws, "config", "user.email", "dev@example.com")
    git(ws, "config", "user.name", "dev")
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "start")
    return top


def install_editable(python: Path, ws: Path) -> None:
    """``pip install -e ws`` into ``python``'s virtualenv (offline)."""
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--no-index", "-e", str(ws)],
        check=True,
        capture_output=True,
    )
