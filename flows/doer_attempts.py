"""The doers of one drive (docs/doers.md): each attempt of a milestone with
a ``do:`` command works in a git worktree of its own, on the branch
``milepost/<item>/<milestone>``; its doer runs as the drive's ``do`` task
before the gate; what it changed is checked (protected paths, no change,
the same change again), committed on its branch, proven by the gate in the
judge's checkout of that commit (gates/judge.py: the gate's task makes it
from :meth:`Doing.judge_order`), and merged into the integration branch by
one writer at a time.

:class:`Doing` holds all of it for one drive (one object per drive, on the
loop); the loop calls :meth:`Doing.start` for a claimed doer milestone,
:meth:`Doing.after_do` when its do task ended, and :meth:`Doing.after_gate`
when its gate passed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from milepost.errors import InputError
from milepost.gates import git, judge, worktrees
from milepost.gates._crash import crash_point
from milepost.gates.attempt import AttemptFiles
from milepost.gates.doer_env import PromptFacts, doer_env, write_prompt
from milepost.gates.integration import (
    Integration,
    MergeResult,
    checked_out,
    integration_checkout,
    merge,
    merge_message,
)
from milepost.gates.outcome import GateResult, Outcome
from milepost.gates.prices import prices_env
from milepost.gates.supervisor import host_identity
from milepost.graph.models import DoerSettings, GateCommand, Milestone
from milepost.graph.status import Isolation
from milepost.results import Claim, DoRun
from milepost.service import Service
from milepost.service import do_evidence as evidence
from milepost.service.claims import interrupted_result
from milepost.settings import load_settings

__all__ = ["DoStart", "Doing", "JudgeStart", "NotStarted", "check_doers", "do_files"]


def check_doers(service: Service, item: int, until: str | None = None) -> bool:
    """Whether a drive of ``item`` (to ``until``) has doer milestones to
    work; refused (:class:`InputError`) when they could not work: a
    workspace that is not a git repository (with ``isolate: worktree``), a
    ``doer.base`` that is no branch. Nothing is written."""
    g = service.graph(item, proofs=False)[1]
    scope = set(g.ancestors(until)) | {until} if until is not None else None
    if not any(m.has_doer for m in g if scope is None or m.name in scope):
        return False
    Doing.open(service, item, 1, checkout=False)
    return True


def do_files(claim: Claim) -> AttemptFiles:
    """The files of an attempt's doer: ``attempt-N.do.log`` and beside it."""
    return AttemptFiles(Path(claim.log_path)).do


@dataclass
class DoStart:
    """A do task to submit: its commands (setup in a fresh worktree, then
    the doer), where and with what it runs."""

    commands: list[GateCommand]
    cwd: Path
    env: dict[str, str]
    log_path: str


@dataclass(frozen=True)
class NotStarted:
    """An attempt that ends before any doer started: its failure, and whether
    it is ``final`` (its budget is spent: no later attempt could start a
    doer, so the milestone is stuck at once)."""

    result: GateResult
    final: bool = False


@dataclass(frozen=True)
class JudgeStart:
    """The judge an attempt's gate task makes and runs in (gates/judge.py),
    and the environment its gate starts from (scrubbed as a doer's)."""

    order: judge.JudgeOrder
    env: dict[str, str]


@dataclass
class _Attempt:
    """One doer attempt between its start and its merge."""

    claim: Claim
    cwd: Path
    base: str | None  # the commit it started from (None: not a git worktree)
    started_at: datetime
    worktree: worktrees.Worktree | None = None
    run: DoRun | None = None
    judged: str | None = None  # the commit its judge checked out: the one its merge may bring in
    note: str | None = None  # what its do run says beside its end (a session of another host's not resumed)


@dataclass
class Doing:
    """The doers of one drive of ``item``."""

    service: Service
    item: int
    objective: str
    settings: DoerSettings
    max_doers: int = 1
    repo: git.Repo | None = None
    base: str | None = None  # the base branch (doer.base)
    integration: Integration | None = None  # where merges are made, and the branch they land on
    folder: Path | None = None  # the item's worktrees' folder (outside the workspace: gates.worktrees.item_folder)
    running: dict[tuple[str, int], _Attempt] = field(default_factory=dict)

    # -- the drive's start ---------------------------------------------------------

    @classmethod
    def open(cls, service: Service, item: int, max_doers: int, *, checkout: bool = True) -> Doing:
        """The doers of a drive of ``item``: the workspace's repository and
        integration branch checked before any doer runs. Raises
        :class:`InputError` for what no doer could work with."""
        it = service.get_item(item)
        doing = cls(service, item, it.objective, it.doer, max_doers)
        root = service.store.root
        if doing.settings.isolate is Isolation.NONE:
            doing.max_doers = 1  # in the workspace itself: one at a time
            return doing
        doing.repo = git.Repo.find(root)
        if doing.repo is None:
            raise InputError(
                f"work item {item} has milestones with do: and doer.isolate is worktree, but {root} is not in a git"
                " repository: run 'git init' and commit the work, or set doer.isolate: none"
            )
        doing.base = doing.settings.base or doing.repo.current_branch()
        if doing.base is None:
            raise InputError(
                f"work item {item}: the workspace's HEAD is detached and doer.base is not set:"
                " check out a branch or set doer.base to the integration branch"
            )
        if not doing.repo.branch_exists(doing.base):
            raise InputError(
                f"work item {item}: doer.base {doing.base!r} is not a branch of {doing.repo.root}:"
                " name an existing branch (git branch --list)"
            )
        root = worktrees.worktrees_root(load_settings().worktrees)
        doing.folder = worktrees.item_folder(doing.repo, root, item)
        if checkout:
            with contextlib.suppress(git.GitError):  # where they lived before: their branches are checked out again
                worktrees.Worktrees(doing.repo).remove_under(service.store.home / "worktrees")
            doing.integration = integration_checkout(doing.repo, doing.base, doing.folder, item)
        return doing

    def bring_in(self) -> str | None:
        """When the merges landed on the item's integration branch (the base
        branch is checked out under a working tree milepost must not move
        it under): the line naming the one command that brings them in."""
        if self.integration is None or not self.integration.aside or self.repo is None:
            return None
        if not self.repo.branch_exists(self.integration.branch):
            return None
        side, base = self.integration.branch, self.integration.base
        if self.repo.commits_missing(base, side) == 0:
            return None
        return (
            f"the merged work is on {side}, not on {base} (milepost never moves a branch under a working tree);"
            f" bring it in: {self.integration.bring_in()}"
        )

    def busy(self) -> bool:
        """Whether as many doers run as may (``--max-doers``). In the
        workspace itself (``isolate: none``) an attempt holds its place
        until its gate ended too: no doer edits the files a gate proves."""
        if self.settings.isolate is Isolation.NONE:
            return len(self.running) >= self.max_doers
        return len([a for a in self.running.values() if a.run is None]) >= self.max_doers

    # -- an attempt ------------------------------------------------------------------

    def start(self, claim: Claim) -> DoStart | NotStarted:
        """Make the attempt's worktree and its do task, or the attempt's
        failure without a doer (its budget spent: final; a worktree git refused)."""
        m = claim.milestone
        spent = self._budget_problem(claim)
        if spent is not None:
            return NotStarted(_failure(claim, spent), final=True)
        files = do_files(claim)
        files.log.parent.mkdir(parents=True, exist_ok=True)
        fresh, cwd, wt, base = False, self.service.store.root, None, None
        if self.repo is not None and self.folder is not None and self.integration is not None:
            path = self.folder / m.name
            try:
                fresh = not path.exists()
                wt = worktrees.Worktrees(self.repo).ensure(path, self._branch(m), self._tip())
            except git.GitError as e:
                return NotStarted(_failure(claim, f"do not started: {e}"))
            cwd, base = wt.path, wt.head()
        commands = [GateCommand(name="do", run=m.do or "")]
        if fresh and self.settings.setup:
            commands.insert(0, GateCommand(name="setup", run=self.settings.setup))
        env, note = self._env(claim, cwd, files)
        self.running[(m.name, claim.attempt)] = _Attempt(claim, cwd, base, datetime.now(UTC), wt, note=note)
        return DoStart(commands, cwd, env, str(files.log))

    def _branch(self, m: Milestone) -> str:
        return worktrees.doer_branch(self.item, m.name)

    def _into(self) -> str:
        """The branch merges land on: the integration branch, or the base branch."""
        assert self.base is not None
        return self.integration.branch if self.integration is not None else self.base

    def _tip(self) -> str:
        assert self.repo is not None
        return self.repo.tip(self._into())

    def _budget_problem(self, claim: Claim) -> str | None:
        """Why no doer may start for ``claim`` (a budget spent: no later
        attempt could start one either), or None."""
        limit, m = self.settings.budget_usd, claim.milestone
        if limit is not None:
            spent = evidence.spent(self.service.ctx, self.item)
            if spent >= limit:
                return f"budget: the item's doers cost ${spent:.2f} of doer.budget_usd ${limit:.2f}"
        if m.do_budget_usd is not None:
            spent = evidence.spent(self.service.ctx, self.item, claim.pk)
            if spent >= m.do_budget_usd:
                return f"budget: {m.name}'s doers cost ${spent:.2f} of do_budget_usd ${m.do_budget_usd:.2f}"
        return None

    def _budget_left(self, claim: Claim) -> float | None:
        """The dollars ``claim``'s doer may spend: the least of what is left of
        the item's and the milestone's budget (None: neither has one)."""
        left: list[float] = []
        if self.settings.budget_usd is not None:
            left.append(self.settings.budget_usd - evidence.spent(self.service.ctx, self.item))
        if claim.milestone.do_budget_usd is not None:
            left.append(claim.milestone.do_budget_usd - evidence.spent(self.service.ctx, self.item, claim.pk))
        return max(0.0, min(left)) if left else None

    def _usage(self, m: Milestone) -> str | None:
        """The form of ``m``'s doer's usage report: its own, the item's, or None (found)."""
        return m.do_usage or self.settings.usage

    def _env(self, claim: Claim, cwd: Path, files: AttemptFiles) -> tuple[dict[str, str], str | None]:
        m = claim.milestone
        before = AttemptFiles(Path(claim.log_path)).previous()
        last = before.log if before is not None else None
        failure = last.read_text(errors="replace")[-8000:] if last is not None and last.exists() else None
        prompt = write_prompt(
            files.prompt,
            m,
            PromptFacts(
                objective=self.objective,
                item=self.item,
                attempt=claim.attempt,
                worktree=str(cwd),
                deps_done=[(d, "done and merged" if self.repo is not None else "done") for d in m.deps],
                failure=failure,
                protect=self.settings.protect,
                isolated=self.repo is not None,
            ),
        )
        given = {
            "MILEPOST_ITEM": str(self.item),
            "MILEPOST_MILESTONE": m.name,
            "MILEPOST_ATTEMPT": str(claim.attempt),
            "MILEPOST_PROMPT": str(prompt),
            "MILEPOST_WORKTREE": str(cwd),
            "MILEPOST_COST_FILE": str(files.cost),
        }
        if failure is not None and last is not None:
            given["MILEPOST_FAILURE_LOG"] = str(last)
        agent, note = self._agent_env(claim)
        given.update(agent)
        return doer_env(os.environ, self.settings.env, given), note

    def _agent_env(self, claim: Claim) -> tuple[dict[str, str], str | None]:
        """What an agent needs beyond the prompt: what is left of its budget
        (the drive also stops a doer whose streamed cost passes it), the
        session of the milestone's last doer to resume, the usage form named;
        and why a session kept is not resumed (it was another host's)."""
        given: dict[str, str] = {}
        left = self._budget_left(claim)
        if left is not None:
            given["MILEPOST_BUDGET_LEFT_USD"] = f"{left:.4f}"
        session, note = self._session(claim)
        if session is not None:
            given["MILEPOST_DOER_SESSION"] = session
        form = self._usage(claim.milestone)
        if form is not None:
            given["MILEPOST_DO_USAGE"] = form
        if self.settings.prices:
            given["MILEPOST_DO_PRICES"] = prices_env(self.settings.prices)
        return given, note

    def _session(self, claim: Claim) -> tuple[str | None, str | None]:
        """The milestone's agent session to resume: only one a do run on this
        host reported (an agent keeps its sessions on its machine's disk: with
        a shared store, a retry on another host could not find it); else None,
        and why (the do run says it: a new session started)."""
        session, where = evidence.session_where(self.service.ctx, claim.pk)
        here = host_identity()["host"]
        if session is None or where == here:
            return session, None
        return None, (
            f"a new agent session started: the milestone's session {session} was reported on"
            f" {where or 'a host not recorded'}, not on {here} (an agent resumes only its own machine's sessions)"
        )

    # -- after the doer ----------------------------------------------------------------

    def after_do(self, claim: Claim, result: GateResult) -> tuple[GateResult | Path, DoRun]:
        """The do task ended with ``result``: the worktree its gate runs in,
        or the attempt's failure (the doer failed, or its change is refused);
        and its do run, recorded."""
        a = self.running[(claim.milestone.name, claim.attempt)]
        run = evidence.do_run_of(
            claim,
            result,
            self._usage(claim.milestone),
            ctx=self.service.ctx,
            prices=self.settings.prices,
            host=host_identity()["host"],
            worktree=str(a.cwd),
            base_commit=a.base,
        )
        outcome: GateResult | Path = a.cwd
        if a.worktree is not None and a.worktree.exists():
            run.diff_digest = a.worktree.diff_digest()  # (a failed doer's too: the next may make the same change)
        if result.passed:
            refusal = self._take_change(claim, a, run)
            if refusal is not None:
                run = run.model_copy(update={"outcome": "refused", "reason": refusal})
                outcome = _failure(claim, refusal)
        elif result.reason.removeprefix("do: ").startswith("budget:"):  # stopped past its budget (BudgetWatch)
            outcome = _failure(claim, result.reason.removeprefix("do: "), result)
        elif run.reason.startswith("budget:"):  # it stopped itself at its own cap (--max-budget-usd)
            outcome = _failure(claim, run.reason, result)
        else:
            outcome = _failure(claim, f"do {result.reason}", result)
        if a.note:
            run.reason = f"{run.reason}; {a.note}"
        a.run = run
        evidence.record_do_run(self.service.ctx, claim, run)
        if isinstance(outcome, GateResult):
            self.running.pop((claim.milestone.name, claim.attempt), None)
        return outcome, run

    def _take_change(self, claim: Claim, a: _Attempt, run: DoRun) -> str | None:
        """Check the doer's change and commit it on the attempt's branch;
        fills ``run``'s commits, digest and stat. Returns why the attempt is
        refused, or None."""
        wt = a.worktree
        if wt is None:
            return None  # isolate: none: the gate alone decides
        if not wt.exists():
            return "refused: the doer deleted its worktree (the next attempt makes it again)"
        changed = wt.changed_paths()
        refusal = self._protected(claim, wt, changed)
        if refusal is not None:
            return refusal
        if not changed:
            return self._nothing_new(claim, wt, run)
        last = evidence.last_do_run(self.service.ctx, claim)
        if last is not None and last.diff_digest == run.diff_digest:
            return f"refused: no progress, the same change as attempt {last.attempt}"
        head = wt.commit_all(f"milepost: {claim.milestone.name}, attempt {claim.attempt}")
        run.result_commit = head
        if head is not None and a.base is not None:
            run.diff_stat = wt.diff_stat(a.base, head)
            run.files = wt.files_between(a.base, head)
        return None

    def _protected(self, claim: Claim, wt: worktrees.Worktree, changed: list[str]) -> str | None:
        """Why the attempt is refused for protected paths, or None. Its
        uncommitted edits to them are discarded; a protected path changed by
        a commit on the branch (one the doer made itself, now or in an
        earlier attempt) is never merged: the branch starts again from the
        integration tip."""
        patterns = list(self.settings.protect)
        protected = worktrees.protected_changes(changed, patterns)
        committed = (
            worktrees.protected_changes(wt.branch_paths(self._tip()), patterns) if patterns and self.base else []
        )
        if not protected and not committed:
            return None
        wt.discard(protected)
        if committed:
            assert self.repo is not None
            worktrees.Worktrees(self.repo).reset_branch(wt.path, self._branch(claim.milestone), self._tip())
        both = sorted({*protected, *committed})
        shown = ", ".join(both[:5]) + (f" and {len(both) - 5} more" if len(both) > 5 else "")
        undone = "the branch starts again from the integration tip" if committed else "its edits to them were discarded"
        return f"refused: the doer changed protected paths ({shown}); {undone}"

    def _nothing_new(self, claim: Claim, wt: worktrees.Worktree, run: DoRun) -> str | None:
        """The doer changed nothing: refused, unless the branch holds an
        earlier attempt's committed work not merged yet (its gate failed, maybe
        for a reason outside the change, such as a tool missing then): the
        gate judges that work again."""
        if self.base is None or wt.ahead_of(self._into()) == 0:
            return "refused: the doer changed nothing"
        run.reason = f"{run.reason}; it changed nothing: the gate judges the branch's earlier work again"
        run.result_commit = wt.head()
        run.files = wt.branch_paths(self._into())
        return None

    # -- the judge -------------------------------------------------------------------------

    def judge_order(self, claim: Claim, packages: Sequence[str]) -> JudgeStart | None:
        """What the gate task needs to make the attempt's judge (the checkout of
        its committed result: gates/judge.py) and the environment its gate
        starts from (scrubbed as a doer's); None in the workspace itself
        (``isolate: none``: the gate runs there). ``packages``: those the
        import rule checks."""
        a = self.running[(claim.milestone.name, claim.attempt)]
        if a.worktree is None or self.repo is None:
            return None
        s = self.settings
        a.judged = a.worktree.head()
        order = judge.JudgeOrder(
            repo_root=str(self.repo.root),
            folder=str(judge.judge_folder(a.worktree.path)),
            commit=a.judged,
            tip=self._tip(),
            protect=tuple(s.protect),
            setup=s.judge_setup or s.setup,
            key_files=tuple(s.judge_key) or judge.DEFAULT_KEY_FILES,
            packages=tuple(packages),
            log=str(claim.log_path).removesuffix(".log") + ".judge.log",
            setup_timeout=claim.milestone.timeout,  # (a hung set-up ends as a timed-out gate would)
        )
        return JudgeStart(order, judge.judge_env(os.environ, s.env, {}))

    # -- after the gate ------------------------------------------------------------------

    def after_gate(self, claim: Claim, result: GateResult) -> GateResult:
        """The gate passed in the worktree: merge the attempt's branch into the
        integration branch, its merge commit naming the item, the milestone
        and the attempt (trailers: what a driver taking this one over looks
        for). A conflict fails the attempt (its log holds the conflict; the
        branch starts again from the new tip); so does any other git failure
        (its reason said), never the drive."""
        a = self.running.pop((claim.milestone.name, claim.attempt), None)
        if a is None or a.worktree is None or self.integration is None or self.repo is None:
            return result
        m = claim.milestone
        crash_point("merging")  # (its gate passed, nothing merged: a driver taking over records it interrupted)
        try:
            merged = self._merge(claim, a.judged)
        except git.GitError as e:
            return self._merge_failed(claim, result, f"merge of {self._branch(m)} failed: {e}", str(e))
        if merged.ok:
            crash_point("merged")  # (merged, not recorded: a driver taking over records it passed)
            if merged.commit is not None:
                evidence.set_merge_commit(self.service.ctx, claim, merged.commit)
            with contextlib.suppress(git.GitError):  # (merged: nothing left to keep; a leftover is harmless)
                worktrees.Worktrees(self.repo).drop(a.worktree.path, self._branch(m))
            return result
        with contextlib.suppress(git.GitError):
            worktrees.Worktrees(self.repo).reset_branch(a.worktree.path, self._branch(m), self._tip())
        why = f"merge conflict with {self._into()}: {merged.conflict.splitlines()[0] if merged.conflict else ''}"
        return self._merge_failed(claim, result, why.rstrip(": "), f"conflict\n{merged.conflict}")

    def _merge(self, claim: Claim, judged: str | None) -> MergeResult:
        """Merge ``claim``'s branch where the drive integrates (the workspace
        is looked at again first: a person may have started editing it), only
        while it holds the commit its gate judged (``judged``): what is proven
        is what is merged, never commits made on the branch since."""
        assert self.integration is not None and self.repo is not None and self.base is not None
        branch = self._branch(claim.milestone)
        if judged is not None and self.repo.tip(branch) != judged:
            raise git.GitError(
                f"{branch} moved after its gate judged {judged[:10]} (now {self.repo.tip(branch)[:10]}):"
                " its new commits were never judged; the next attempt's gate judges them"
            )
        if self._look_again(self.integration):
            assert self.folder is not None
            self.integration = integration_checkout(self.repo, self.base, self.folder, self.item)
        # (else a worktree of milepost's stays as it is: the drive's gates run in it, see Loop._gates_in_integration)
        m = claim.milestone
        return merge(self.integration.path, self._branch(m), merge_message(self.item, m.name, claim.attempt))

    def _look_again(self, into: Integration) -> bool:
        """Whether where the drive integrates must be looked at again before a
        merge: the workspace (a person may have started editing it), a branch
        gone, or a base branch moved by update-ref that someone has checked out
        since (milepost never moves a branch under a working tree)."""
        assert self.repo is not None
        if into.path.resolve() == self.repo.root.resolve() or not self.repo.branch_exists(into.branch):
            return True
        return not into.aside and into.base in checked_out(self.repo)

    def _merge_failed(self, claim: Claim, result: GateResult, why: str, logged: str) -> GateResult:
        """The attempt fails for its merge: its log ends with ``logged``."""
        with open(claim.log_path, "a", encoding="utf-8") as log:
            log.write(f"\n=== merge of {self._branch(claim.milestone)} into {self._into()} failed: {logged}\n")
        return result.model_copy(update={"outcome": Outcome.FAILED, "reason": why})

    def interrupted(self, claim: Claim, result: GateResult) -> None:
        """The do task was interrupted (the drive stopped): its do run recorded
        ``interrupted``, with how long the doer ran."""
        a = self.running.pop((claim.milestone.name, claim.attempt), None)
        if a is None:
            return
        duration = result.duration or do_files(claim).ran_for()
        why = result.reason
        if result.outcome is not Outcome.INTERRUPTED:  # it ended as the drive stopped: its change was never taken
            why = f"interrupted: the drive stopped ({result.reason})"
        if a.note:
            why = f"{why}; {a.note}"
        facts = {"host": host_identity()["host"], "worktree": str(a.cwd), "base_commit": a.base}
        run = evidence.do_run_of(
            claim,
            result,
            self._usage(claim.milestone),
            ctx=self.service.ctx,
            prices=self.settings.prices,
            **facts,
            outcome=Outcome.INTERRUPTED.value,
            reason=why,
            duration=duration,
        )
        evidence.record_do_run(self.service.ctx, claim, run)

    def ended_without_merge(self, claim: Claim, result: GateResult, why: str, *, doer_task: bool) -> GateResult:
        """What ``claim``'s attempt ends as when its drive ends it (``why``: it
        stopped, it lost a part) before its merge, its doer's task
        (``doer_task``) or its gate's having ended with ``result``: a doer's own
        end is never the attempt's verdict (its gate never ran: nothing proven;
        its do run says how long it ran), nor is a passed gate whose work was
        never merged (the next attempt's gate judges the branch again, then
        merges it); a failed gate stands."""
        if doer_task:
            self.interrupted(claim, result)
        else:
            self.forget(claim)
        if result.outcome is Outcome.INTERRUPTED or (not doer_task and not result.passed):
            return result
        where = "before its gate ran" if doer_task else "after its gate passed, before its merge"
        return interrupted_result(claim, result.started_at, reason=f"interrupted: {why} {where}")

    def forget(self, claim: Claim) -> None:
        """The attempt ended another way (interrupted, its gate failed)."""
        self.running.pop((claim.milestone.name, claim.attempt), None)


def _failure(claim: Claim, reason: str, result: GateResult | None = None) -> GateResult:
    """An attempt's failure before its gate ran."""
    now = datetime.now(UTC)
    return GateResult(
        outcome=Outcome.FAILED,
        reason=reason,
        exit_code=result.exit_code if result is not None else None,
        duration=result.duration if result is not None else 0.0,
        tail=result.tail if result is not None else "",
        started_at=result.started_at if result is not None else now,
        finished_at=now,
        log_path=str(do_files(claim).log),
    )
