#!/usr/bin/env bash
# The milepost demo: plan the multi-module refactor of examples/refactor,
# work it milestone by milestone with start/done (each gate a real command),
# watch a bad edit fail a gate into needs_fix and then stuck, reset it, and
# finish. Runs in a fresh copy of the example (default ./demo-workspace).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ws=${1:-$PWD/demo-workspace}
# A workspace from an earlier run may still have its Prefect server running: stop it before its folder goes.
if [ -d "$ws/.milepost" ]; then (cd "$ws" && milepost server stop >/dev/null 2>&1) || true; fi
rm -rf "$ws"
cp -r "$here/refactor" "$ws"
cd "$ws"
echo "demo workspace: $ws"

# Each command is echoed quoted as a shell reads it (shlex.join), so it can be copied.
show() { printf '\n\033[1m$ %s\033[0m\n' "$(python3 -c 'import shlex, sys; print(shlex.join(sys.argv[1:]))' "$@")"; }
step() { show "$@"; "$@"; }
# A step whose failure is part of the story: show the exit code, go on.
expect_fail() { show "$@"; if "$@"; then echo "(unexpected success)"; exit 1; else echo "(exit $?)"; fi; }
next_name() { milepost --json next | python3 -c 'import json, sys; m = json.load(sys.stdin)["milestone"]; print(m["name"] if m else "")'; }

step milepost init
step milepost plan apply plan.yaml
step milepost graph

# Work the ready milestones in the order `next` gives (lowest id first).
for _ in 1 2 3 4; do
  name=$(next_name)
  step milepost start "$name"
  step milepost done "$name" --verdict "looks right"
done

# extract-b: a bad edit breaks module B; its gate fails until the budget is spent.
cp src/kv/mod_b.py "$ws/.mod_b.good"
printf 'def broken(:\n' >> src/kv/mod_b.py
step milepost start extract-b
expect_fail milepost done extract-b
step milepost start extract-b
expect_fail milepost done extract-b
step milepost start extract-b
expect_fail milepost done extract-b
expect_fail milepost start extract-b
step milepost next
step milepost runs extract-b
step milepost log extract-b --attempt 1

# The operator restores the file and gives the milestone a fresh budget.
mv "$ws/.mod_b.good" src/kv/mod_b.py
step milepost reset extract-b --reason "restored src/kv/mod_b.py"
while name=$(next_name) && [ -n "$name" ]; do
  step milepost start "$name"
  step milepost done "$name"
done

step milepost next
step milepost list
step milepost graph --format mermaid

# Part two: the same plan driven automatically as a Prefect flow, three gates
# at a time. The first drive starts the workspace's Prefect server in the
# background (its home in .milepost/prefect; it stops itself after 30 minutes
# unused); the second finds it up.
# The bad edit again: the gates that need module B fail until their budget is
# spent, the other branches still finish, and drive exits 1 naming what is stuck.
rm -rf dist
cp src/kv/mod_b.py "$ws/.mod_b.good"
step milepost plan apply plan.yaml
printf 'def broken(:\n' >> src/kv/mod_b.py
expect_fail milepost drive --max-parallel 3
step milepost runs analyze-b

# The operator undoes the edit and resets what is stuck; the next drive finishes.
mv "$ws/.mod_b.good" src/kv/mod_b.py
for name in $(milepost --json list | python3 -c 'import json, sys; print(" ".join(m["name"] for m in json.load(sys.stdin)["milestones"] if m["status"] == "stuck"))'); do
  step milepost reset "$name" --reason "removed the bad edit"
done
step milepost drive --max-parallel 3
echo
echo "demo finished: both work items are done (store: $ws/.milepost)"
echo "browse the runs in the Prefect UI: cd $ws && $(command -v milepost) server status (its address;"
echo "it stops by itself after 30 minutes unused, or: milepost server stop; server start starts it again)"
