#!/usr/bin/env bash
# The milepost demo: plan the multi-module refactor of examples/refactor,
# work it milestone by milestone with start/done (each gate a real command),
# watch a bad edit fail a gate into needs_fix and then stuck, reset it, and
# finish. Runs in a fresh copy of the example (default ./demo-workspace).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ws=${1:-$PWD/demo-workspace}
rm -rf "$ws"
cp -r "$here/refactor" "$ws"
cd "$ws"
echo "demo workspace: $ws"

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }
# A step whose failure is part of the story: show the exit code, go on.
expect_fail() { printf '\n\033[1m$ %s\033[0m\n' "$*"; if "$@"; then echo "(unexpected success)"; exit 1; else echo "(exit $?)"; fi; }
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
cp src/mod_b.py "$ws/.mod_b.good"
printf 'def broken(:\n' >> src/mod_b.py
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
mv "$ws/.mod_b.good" src/mod_b.py
step milepost reset extract-b --reason "restored src/mod_b.py"
while name=$(next_name) && [ -n "$name" ]; do
  step milepost start "$name"
  step milepost done "$name"
done

step milepost next
step milepost list
step milepost graph --format mermaid
echo
echo "demo finished: every milestone is done (store: $ws/.milepost)"
