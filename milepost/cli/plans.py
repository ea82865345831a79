"""Plan commands: ``plan apply|export|scaffold|schema`` and ``graph``."""

from __future__ import annotations

import base64
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from milepost.errors import InputError, InvalidValueError, MilepostError
from milepost.graph.words import count, plural

if TYPE_CHECKING:
    from milepost.graph.dag import WorkGraph
    from milepost.graph.models import WorkItem
    from milepost.graph.revise import PlanRevision

from milepost.cli._base import (
    ID,
    Ctx,
    cli,
    item_synonym,
    output_option,
    pass_ctx,
    write_file,
)
from milepost.present.terminal import (
    show_graph_text,
    show_revision,
)


@cli.group()
def plan() -> None:
    """Plan files: a whole work item as YAML or JSON."""


@plan.command("apply")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--item",
    "item",
    type=ID,
    default=None,
    metavar="N",
    help="Refine work item N in place (milestones matched by name) instead of creating a new item.",
)
@click.option(
    "--expect-revision",
    type=ID,
    default=None,
    metavar="N",
    help="With --item: refuse (exit 2) unless the item is at revision N: safe read-modify-write.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="With --item: print the change (what is added, removed, changed and proven again) and write nothing.",
)
@pass_ctx
def plan_apply(c: Ctx, file: Path, item: int | None, expect_revision: int | None, dry_run: bool) -> None:
    """Validate FILE whole, then create its work item (focused), or with
    --item N refine item N in place as one revision.

    Every problem is reported at once (the first 50), each with the line where
    it starts and the milestone's name; nothing is written unless all is sound.
    A refinement keeps unchanged milestones' status and proofs and proves again
    those whose gate, inputs or deps changed (docs/plan-files.md)."""
    from milepost.planfile import gc_paused, load_plan, read_plan_text

    if item is None and (expect_revision is not None or dry_run):
        flag = "--expect-revision" if expect_revision is not None else "--dry-run"
        raise InvalidValueError(f"{flag} refines an existing item: pass --item N with it (or leave {flag} out)")
    with gc_paused():  # a large plan is millions of objects, none of them garbage
        if item is not None:
            text = read_plan_text(file)
            try:  # (a plan refused on its own is refused with what it would do to running attempts)
                r = c.service.revise_text(text, str(file), item=item, expect_revision=expect_revision, dry_run=dry_run)
            except InputError as e:
                raise _named_removed(c, item, e) from None
            c.emit(r.model_dump(mode="json"), lambda con: show_revision(con, r))
            return
        it = c.service.apply_plan(load_plan(file))  # validated before the store is touched
    c.emit(
        it.model_dump(mode="json") if c.json else None,
        lambda con: con.print(
            f"created work item {it.id} from {file}: {count(len(it.milestones), 'milestone')},"
            f" plan {it.plan_status.value} (current)"
        ),
    )


def _named_removed(c: Ctx, item: int, e: InputError) -> InputError:
    """A refined plan's unknown deps that are milestones of the item (the
    plan removes them) said so; the error as it was otherwise."""
    import re

    try:
        names = {m.name for m in c.service.graph(item)[1]}
    except MilepostError:
        return e  # (no such item, or not this agent's: the plan's own error first)

    def said(text: str) -> str:
        def one(m: re.Match[str]) -> str:
            dep = m.group(1)
            if dep not in names:
                return m.group(0)
            return (
                f"depends on {dep!r}, a milestone of work item {item} that this plan removes (keep it, or drop the dep)"
            )

        return re.sub(r"depends on unknown milestone '([^']+)'", one, text)

    details = dict(e.details)
    if isinstance(details.get("problems"), list):
        details["problems"] = [{**p, "message": said(str(p.get("message", "")))} for p in details["problems"]]
    return type(e)(said(e.message), **details)


@plan.command("scaffold")
@click.argument("package")
@click.option(
    "--path",
    "paths",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The folder holding PACKAGE (e.g. src; repeat to try several). Default: the workspace root, its src/,"
    " then where Python finds it (never the copy milepost itself imported); the copy read is named.",
)
@click.option(
    "--level",
    type=click.Choice(["module", "package"]),
    default="module",
    show_default=True,
    help="One milestone per module, or per package.",
)
@click.option(
    "--gate",
    "gates",
    multiple=True,
    metavar="TEMPLATE",
    help="Gate command template (repeat for a named multi-command gate); placeholders {module}, {path},"
    " {name}, {tests}. [default: python3 -m compileall -q {path}]",
)
@click.option("--acceptance", default=None, metavar="TEMPLATE", help="Acceptance text template (same placeholders).")
@click.option(
    "--tests",
    "tests_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A folder of tests (repeat); {tests} are the test files that import each module (the rule is in"
    " docs/decisions.md), else its test_<name>.py files. Tests inside the package are found too."
    " [default: ./tests when it exists]",
)
@click.option("--final", default=None, metavar="NAME", help="A last milestone depending on every top milestone.")
@click.option(
    "--final-gate",
    default=None,
    metavar="CMD",
    help="The final milestone's gate (default: the first --gate with {tests}, over every test file).",
)
@click.option(
    "--affected-by",
    default=None,
    metavar="GIT_REF",
    help="Only the milestones whose inputs changed since GIT_REF (committed, uncommitted and untracked files):"
    " changed modules, every module importing them, and the modules whose tests changed.",
)
@click.option(
    "--split-cycles",
    is_flag=True,
    help="Split each import cycle: a milestone cutting the fewest imports, then one milestone per module.",
)
@click.option("--objective", default=None, help="The work item's objective.")
@click.option(
    "--package-imports",
    is_flag=True,
    help="Count a module's import of an enclosing package (import pkg as p) as a dependency.",
)
@output_option("Write the plan to FILE (it says what it wrote); default: standard output.")
@click.option(
    "--map-tests",
    "map_with",
    type=click.Choice(["imports", "coverage"]),
    default="imports",
    show_default=True,
    help="How test files find their modules: named after one (test_<name>.py), else by their imports; or by the"
    " code they executed, running the suite once under coverage.py (needs coverage and pytest).",
)
@click.option(
    "--python",
    default=None,
    metavar="PATH",
    help="The interpreter that runs the tests for --map-tests coverage. [default: milepost's own]",
)
@click.option("--apply", "apply_", is_flag=True, help="Also create the work item from it (plan apply).")
@click.option(
    "--item",
    "item",
    type=ID,
    default=None,
    metavar="N",
    help="Scaffold again for work item N: its plan merged with the item's (milestones you edited by hand keep your"
    " edits; the rule is in docs/scaffold.md); with --apply, refine item N in place (plan apply --item N).",
)
@pass_ctx
def plan_scaffold(
    c: Ctx,
    package: str,
    paths: tuple[Path, ...],
    level: str,
    gates: tuple[str, ...],
    acceptance: str | None,
    tests_dirs: tuple[Path, ...],
    final: str | None,
    final_gate: str | None,
    affected_by: str | None,
    split_cycles: bool,
    objective: str | None,
    package_imports: bool,
    output: Path | None,
    map_with: str,
    python: str | None,
    apply_: bool,
    item: int | None,
) -> None:
    """Write a refactor plan for PACKAGE from its import graph: a milestone per
    module (or package) depending on what it imports, leaves first, with the
    files its proof depends on as inputs; import cycles are named, explained
    and, with --split-cycles, split. Paths are relative to the workspace root."""
    from milepost.scaffold import scaffold
    from milepost.workspace import find_home

    if item is not None and affected_by is not None:
        raise InvalidValueError(
            "--affected-by writes the milestones a change touched, not the whole plan: with --item N the"
            " scaffold's whole plan is merged with the item's; leave --affected-by out"
        )
    home = find_home(Path.cwd())
    base = home.parent if home is not None else Path.cwd()
    if not tests_dirs and (base / "tests").is_dir():
        tests_dirs = (base / "tests",)
    result = scaffold(
        package,
        paths=paths,
        level=level,  # type: ignore[arg-type]
        gates=gates,
        acceptance=acceptance,
        tests=tests_dirs,
        final=final,
        final_gate=final_gate,
        affected_by=affected_by,
        objective=objective,
        package_imports=package_imports,
        split_cycles=split_cycles,
        base=base,
        map_with=map_with,  # type: ignore[arg-type]
        python=python,
    )
    plan_data, text, merged = result.plan, result.text, None
    if item is not None:
        merged = _merged(c, item, result.plan, result.text)
        plan_data, text = merged.plan, merged.text
    if output is not None:
        write_file(output, text)
    made, revised = None, None
    notes = result.notes + (merged.notes if merged else [])
    if apply_:
        from milepost.graph.plan import Plan

        if merged is not None:
            # At the revision the merge read the item at: a change in between (an edit, a drive's
            # move) is a conflict (exit 2, nothing written), never merged over and lost.
            plan = Plan.model_validate(plan_data)
            revised = c.service.revise_item(plan, item=item, expect_revision=merged.revision)
        else:
            made = c.service.apply_plan(Plan.model_validate(result.plan))  # validated as it was written
        notes += _kept_base(c, item if item is not None else made.id, result.plan)  # type: ignore[union-attr]
    data: dict[str, Any] = {
        "milestones": len(plan_data["milestones"]),
        "modules": result.modules,
        "source": result.source,
        "cycles": result.cycles,
        "left_out": result.left_out,
        "notes": notes,
        "output": str(output) if output else None,
        "item": made.id if made else item,
        "plan": plan_data,
    }
    if merged is not None:
        data |= {"kept_edits": merged.kept_edits, "kept_milestones": merged.kept_milestones}
    if revised is not None:
        data["revision"] = revised.model_dump(mode="json")
    if c.json:
        click.echo(json.dumps(data))
        return
    for line in [*result.cycle_lines, *(f"note: {n}" for n in notes)]:
        click.echo(line, err=True)
    if output is None and not apply_:
        click.echo(text, nl=False)
        return
    _said_scaffolded(c, output, len(plan_data["milestones"]), result.modules, made, revised)


def _said_scaffolded(
    c: Ctx, output: Path | None, milestones: int, modules: int, made: WorkItem | None, revised: PlanRevision | None
) -> None:
    where = f"wrote {output}" if output else "scaffolded"
    done = f"; created work item {made.id} (current)" if made else ""
    click.echo(f"{where}: {count(milestones, 'milestone')} from {count(modules, 'module')}{done}")
    if revised is not None:
        show_revision(c.console(), revised)


def _kept_base(c: Ctx, item: int, plan: dict[str, Any]) -> list[str]:
    """Keep the plan a scaffold applied as the item's base for the next
    scaffold. It is a file beside the store, not a row, so it cannot share the
    revision's transaction: it is written after the revision committed, and
    its failure is made harmless (a note, exit 0): the revision stands, and the
    next ``--item`` scaffold merges against the older base, which at worst
    keeps this scaffold's values as if edited by hand (nothing is lost)."""
    try:
        c.service.keep_scaffold(item, plan)
    except OSError as e:
        return [
            f"the scaffold was applied, but its base for the next `plan scaffold --item {item}` was not kept"
            f" ({e.strerror or e}): that one will keep this scaffold's values as if you had edited them"
        ]
    return []


@dataclass
class _Rescaffold:
    plan: dict[str, Any]
    text: str
    notes: list[str]
    kept_edits: dict[str, list[str]]
    kept_milestones: list[str]
    revision: int  # the item's revision the merge read it at


def _merged(c: Ctx, item: int, plan: dict[str, Any], text: str) -> _Rescaffold:
    """A scaffold's plan merged with work item ``item``'s (milepost/scaffold/rescaffold.py), as data and text."""
    from milepost.planfile import dump_plan
    from milepost.scaffold.rescaffold import merge

    plain = json.loads(json.dumps(plan))  # (the scaffold's lists are flow-style lists for its own YAML)
    base = c.service.scaffold_base(item)
    current, revision = c.service.export_plan_at(item)
    m = merge(base, current, plain)
    head = [line for line in text.splitlines() if line.startswith("#")][:8]
    edits = "; ".join(f"{n} ({', '.join(f)})" for n, f in m.kept_edits.items())
    head.append(f"# merged with work item {item}'s plan: your edits kept: {edits or 'none'}")
    head.append(f"# apply it with `milepost plan apply FILE --item {item}` (--dry-run first)")
    text = "\n".join(head) + "\n" + dump_plan(m.plan)
    return _Rescaffold(m.plan, text, m.notes, m.kept_edits, m.kept_milestones, revision)


@plan.command("cycles")
@click.argument("package")
@click.option(
    "--path",
    "paths",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The folder holding PACKAGE (e.g. src), as for plan scaffold. Default: the workspace root, its src/,"
    " then where Python finds it.",
)
@click.option(
    "--level",
    type=click.Choice(["module", "package"]),
    default="module",
    show_default=True,
    help="Cycles between modules, or between packages.",
)
@click.option("--package-imports", is_flag=True, help="Count a module's import of an enclosing package.")
@click.option("--check", is_flag=True, help="Exit 1 while an import-time cycle remains (through --through).")
@click.option(
    "--through",
    default=None,
    metavar="A,B,...",
    help="Only the import-time cycles through any of these modules (packages with --level package),"
    " comma-separated: a cut milestone's gate names its cycle's modules.",
)
@pass_ctx
def plan_cycles(
    c: Ctx, package: str, paths: tuple[Path, ...], level: str, package_imports: bool, check: bool, through: str | None
) -> None:
    """Show PACKAGE's import cycles: those that exist at import time, with the
    module-level imports (file:line) whose cut breaks each, and those that
    close only through imports under TYPE_CHECKING or in a function (no
    import-time cycle). Reads the source, imports nothing; no store needed.

    With --check, exit 1 while an import-time cycle remains (any, or one
    through --through's modules), 0 once cut: a gate for the cut milestones of
    plan scaffold --split-cycles."""
    from milepost.scaffold.cycles import package_cycles
    from milepost.scaffold.render import listed, shown
    from milepost.workspace import find_home

    home = find_home(Path.cwd())
    base = home.parent if home is not None else Path.cwd()
    result = package_cycles(package, paths, base, level, package_imports)
    found, where = result.found, shown(result.source.folder, base)
    wanted: list[str] | None = None
    if through is not None:
        wanted = [w.strip() for w in through.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in result.units]
        if not wanted or unknown:
            kind = f"a {level}" if len(unknown) == 1 else f"{level}s"
            what = f"names {listed(unknown)}: not {kind}" if unknown else f"names no {level}"
            raise InvalidValueError(
                f"--through {what} of {package} (read from {where}); give some of its"
                f" {count(len(result.units), level)}, comma-separated, such as {listed(result.units, 3)}"
            )
    scope = f" through {listed(wanted)}" if wanted else ""
    real = found.real if wanted is None else found.through(wanted)
    deferred = found.deferred if wanted is None else [d for d in found.deferred if set(wanted) & set(d.members)]
    if c.json:
        click.echo(
            json.dumps(
                {
                    "package": package,
                    "source": where,
                    "level": level,
                    "units": len(result.units),
                    "through": wanted,
                    "import_time": len(real),
                    "cycles": [x.as_dict() for x in real] + [d.as_dict() for d in deferred],
                }
            )
        )
    else:
        n = count(len(real), "import-time cycle") if real else "no import-time cycle"
        click.echo(f"{package} ({count(len(result.units), level)}, read from {where}): {n}{scope}")
        for x in real:
            click.echo(f"import-time cycle at {x.head} ({count(len(x.members), level)}): {x.path_text}; {x.summary()}:")
            for i in x.imports:
                click.echo(f"  {i.shown()}")
        for d in deferred:
            click.echo(d.summary())
    if check and real:
        if not c.json:
            cuts = "; ".join(i.shown() for x in real for i in x.imports)
            click.echo(
                f"{plural(len(real), 'import-time cycle')} {plural(len(real), 'remains', 'remain')} in {package}"
                f"{scope}: cut {cuts}",
                err=True,
            )
        raise SystemExit(1)


@plan.command("schema")
def plan_schema() -> None:
    """Print the JSON Schema of plan files (for editors and validators).

    Point a YAML language server at it with a first line such as
    `# yaml-language-server: $schema=./milepost-plan.schema.json`."""
    from milepost.graph.plan import Plan

    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **Plan.model_json_schema()}
    schema["title"] = "milepost plan"
    click.echo(json.dumps(schema, indent=2))


@plan.command("export")
@click.argument("item_id", type=ID, required=False)
@click.option(
    "--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True, help="The file's format."
)
@output_option("Write to FILE (it says what it wrote); default: standard output.")
@item_synonym()
@pass_ctx
def plan_export(c: Ctx, item_id: int | None, fmt: str, output: Path | None) -> None:
    """Write a work item back as a plan file (stdout unless -o)."""
    from milepost.planfile import dump_plan

    data = c.service.export_plan(item_id)
    if c.json:
        fmt = "json"
    text = dump_plan(data, fmt)
    if output is None:
        click.echo(text, nl=False)
    else:
        write_file(output, text)
        if not c.json:
            click.echo(f"wrote {output}", err=True)


# -- graph, runs, logs -------------------------------------------------------


MEDIA_TYPES = {
    "json": "application/json",
    "mermaid": "text/vnd.mermaid",
    "dot": "text/vnd.graphviz",
    "svg": "image/svg+xml",
    "html": "text/html",
    "png": "image/png",
}


@cli.command()
@click.argument("item_id", type=ID, required=False)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "mermaid", "dot", "json", "svg", "png", "html"]),
    default="text",
    show_default=True,
    help="svg/png/html: a layered left-to-right picture with status colours and the critical path."
    " With --json, one JSON document holds the drawing: {item, revision, format, media_type, text}"
    " (png: base64 instead of text), or with -o {item, revision, format, media_type, output, bytes}.",
)
@output_option("Write to FILE (it says what it wrote); default: standard output.")
@item_synonym()
@pass_ctx
def graph(c: Ctx, item_id: int | None, fmt: str, output: Path | None) -> None:
    """Show the DAG with statuses: layers, critical path, bottlenecks; or as a picture."""
    if c.json and fmt == "text":
        fmt = "json"
    it, g = c.service.graph(item_id)
    durations = c.service.last_durations(it.id)  # the critical path by the gates' last run times
    if fmt == "text":
        show_graph_text(c.console(), it.id, it.objective, g, durations)
        return
    drawing = _drawing(c, it, g, fmt, durations)
    if fmt == "json" and c.json and output is None:
        click.echo(drawing, nl=False)  # the graph's own document
        return
    if output is not None:
        write_file(output, drawing)
    if c.json:
        _echo_drawing_json(it, fmt, drawing, output)
    elif output is not None:
        size = len(drawing) if isinstance(drawing, bytes) else len(drawing.encode())
        click.echo(f"wrote {output} ({fmt}, {size:,} bytes)", err=True)  # as plan export -o says it
    elif isinstance(drawing, bytes):
        if sys.stdout.isatty():
            raise InvalidValueError("--format png writes binary data: give -o FILE, redirect stdout, or add --json")
        sys.stdout.buffer.write(drawing)
        sys.stdout.buffer.flush()
    else:
        click.echo(drawing, nl=False)


def _drawing(c: Ctx, it: WorkItem, g: WorkGraph, fmt: str, durations: dict[str, float]) -> str | bytes:
    """The DAG drawn in ``fmt`` (any but text)."""
    from milepost.graph.analysis import graph_json
    from milepost.present.diagram import to_dot, to_mermaid

    title = f"work item {it.id}: {it.objective}"
    if fmt == "json":
        return json.dumps({"item": it.id, "revision": it.revision, **graph_json(g, durations)}) + "\n"
    if fmt == "mermaid":
        return to_mermaid(g)
    if fmt == "dot":
        return to_dot(g, f"item {it.id}")
    if fmt == "svg":
        from milepost.present.picture import to_svg

        return to_svg(g, title, durations=durations)
    if fmt == "html":
        from milepost.present.picture import to_html

        _, views = c.service.milestone_views(it.id)
        done = sum(1 for m in g if m.status.is_done)
        sub = (
            f"{it.state.value} · {it.readiness}: {it.readiness_reason} · {done}/{len(g)} done · revision {it.revision}"
        )
        return to_html(g, views, title, sub, durations)
    from milepost.present.picture import to_png, to_svg

    return to_png(to_svg(g, title, durations=durations))


def _echo_drawing_json(it: WorkItem, fmt: str, drawing: str | bytes, output: Path | None) -> None:
    """With --json, one document about the drawing: the file written, or the drawing itself."""
    doc: dict[str, object] = {"item": it.id, "revision": it.revision, "format": fmt, "media_type": MEDIA_TYPES[fmt]}
    if output is not None:
        size = len(drawing) if isinstance(drawing, bytes) else len(drawing.encode())
        doc |= {"output": str(output), "bytes": size}
    elif isinstance(drawing, bytes):
        doc["base64"] = base64.b64encode(drawing).decode()
    else:
        doc["text"] = drawing
    click.echo(json.dumps(doc))
