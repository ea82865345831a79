"""A deterministic stand-in for a coding agent (no LLM needed): it reads
which milestone it works from MILEPOST_MILESTONE, writes that module into
its worktree, and reports a cost. Its first square is wrong on purpose; on
the retry it reads the failure (MILEPOST_FAILURE_LOG) and fixes it, as an
agent fed the gate's output would.

Real agents go where this script is: see docs/doers.md."""

import json
import os
from pathlib import Path

MODULES = {
    "circle": (
        "src/shapes/circle.py",
        "import math\n\n\nclass Circle:\n    def __init__(self, r: float) -> None:\n        self.r = r\n\n"
        "    def area(self) -> float:\n        return math.pi * self.r**2\n",
    ),
    "square": (
        "src/shapes/square.py",
        "class Square:\n    def __init__(self, side: float) -> None:\n        self.side = side\n\n"
        "    def area(self) -> float:\n        return self.side * {factor}\n",
    ),
    "registry": (
        "src/shapes/registry.py",
        "from shapes.circle import Circle\nfrom shapes.square import Square\n\n"
        "SHAPES = {'circle': Circle, 'square': Square}\n\n\ndef make(kind: str, size: float):\n"
        "    return SHAPES[kind](size)\n",
    ),
}

name = os.environ["MILEPOST_MILESTONE"]
path, text = MODULES[name]
failure = os.environ.get("MILEPOST_FAILURE_LOG")
fixed = failure is not None and "assert" in Path(failure).read_text(errors="replace")
said = " (reading the failure)" if failure else ""
print(f"agent: working {name!r}, attempt {os.environ['MILEPOST_ATTEMPT']}{said}")
Path(path).write_text(text.replace("{factor}", "self.side" if fixed else "4"))
Path(os.environ["MILEPOST_COST_FILE"]).write_text(json.dumps({"usd": 0.05, "tokens": 1200}))
