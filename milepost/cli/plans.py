"""Plan commands: ``plan apply|export|scaffold|schema`` and ``graph``."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from milepost.errors import InvalidValueError

if TYPE_CHECKING:
    pass

from milepost.cli._base import (
    ID,
    Ctx,
    cli,
    pass_ctx,
    write_file,
)
from milepost.present.terminal import (
    show_graph_text,
)


@cli.group()
def plan() -> None:
    """Plan files: a whole work item as YAML or JSON."""


@plan.command("apply")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@pass_ctx
def plan_apply(c: Ctx, file: Path) -> None:
    """Validate FILE whole, then create its work item (focused).

    Every problem is reported at once (the first 20), each with the line where
    it starts and the milestone's name; nothing is written unless all is sound."""
    from milepost.planfile import gc_paused, load_plan

    with gc_paused():  # a large plan is millions of objects, none of them garbage
        p = load_plan(file)  # validated before the store is touched
        it = c.service.apply_plan(p)
    c.emit(
        it.model_dump(mode="json") if c.json else None,
        lambda con: con.print(
            f"created work item {it.id} from {file}: {len(it.milestones)}"
            f" milestone{'s' if len(it.milestones) != 1 else ''}, plan {it.plan_status.value} (current)"
        ),
    )


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
@click.option("--final-gate", default=None, metavar="CMD", help="The final milestone's gate (e.g. the whole suite).")
@click.option(
    "--affected-by",
    default=None,
    metavar="GIT_REF",
    help="Only the milestones whose inputs changed since GIT_REF (committed, uncommitted and untracked files):"
    " changed modules, every module importing them, and the modules whose tests changed.",
)
@click.option("--split-cycles", is_flag=True, help="Split each import cycle: a milestone cutting the fewest imports,"
              " then one milestone per module.")  # fmt: skip
@click.option("--objective", default=None, help="The work item's objective.")
@click.option(
    "--package-imports",
    is_flag=True,
    help="Count a module's import of an enclosing package (import pkg as p) as a dependency.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the plan here (default: stdout).",
)
@click.option("--apply", "apply_", is_flag=True, help="Also create the work item from it (plan apply).")
@pass_ctx
def plan_scaffold(c: Ctx, package: str, paths: tuple[Path, ...], level: str, gates: tuple[str, ...],
                  acceptance: str | None, tests_dirs: tuple[Path, ...], final: str | None, final_gate: str | None,
                  affected_by: str | None, split_cycles: bool, objective: str | None, package_imports: bool,
                  output: Path | None, apply_: bool) -> None:  # fmt: skip
    """Write a refactor plan for PACKAGE from its import graph: a milestone per
    module (or package) depending on what it imports, leaves first, with the
    files its proof depends on as inputs; import cycles are named, explained
    and, with --split-cycles, split. Paths are relative to the workspace root."""
    from milepost.scaffold import scaffold
    from milepost.workspace import find_home

    home = find_home(Path.cwd())
    base = home.parent if home is not None else Path.cwd()
    if not tests_dirs and (base / "tests").is_dir():
        tests_dirs = (base / "tests",)
    result = scaffold(
        package, paths=paths, level=level, gates=gates, acceptance=acceptance,  # type: ignore[arg-type]
        tests=tests_dirs, final=final, final_gate=final_gate, affected_by=affected_by, objective=objective,
        package_imports=package_imports, split_cycles=split_cycles, base=base,
    )  # fmt: skip
    if output is not None:
        write_file(output, result.text)
    item = None
    if apply_:
        from milepost.graph.plan import Plan

        item = c.service.apply_plan(Plan.model_validate(result.plan))  # validated as it was written
    data = {
        "milestones": len(result.plan["milestones"]), "modules": result.modules, "source": result.source,
        "cycles": result.cycles, "left_out": result.left_out, "notes": result.notes,
        "output": str(output) if output else None, "item": item.id if item else None, "plan": result.plan,
    }  # fmt: skip
    if c.json:
        click.echo(json.dumps(data))
        return
    for line in result.cycle_lines:
        click.echo(line, err=True)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    if output is None and item is None:
        click.echo(result.text, nl=False)
    else:
        from milepost.scaffold.render import count

        where = f"wrote {output}" if output else "scaffolded"
        made = f"; created work item {item.id} (current)" if item else ""
        made_of = f"{count(len(result.plan['milestones']), 'milestone')} from {count(result.modules, 'module')}"
        click.echo(f"{where}: {made_of}{made}")


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
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
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


MEDIA_TYPES = {"json": "application/json", "mermaid": "text/vnd.mermaid", "dot": "text/vnd.graphviz",
               "svg": "image/svg+xml", "html": "text/html", "png": "image/png"}  # fmt: skip


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
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write to this file (default: stdout).")  # fmt: skip
@pass_ctx
def graph(c: Ctx, item_id: int | None, fmt: str, output: Path | None) -> None:
    """Show the DAG with statuses: layers, critical path, bottlenecks; or as a picture."""
    from milepost.graph.analysis import graph_json
    from milepost.present.diagram import to_dot, to_mermaid

    if c.json and fmt == "text":
        fmt = "json"
    it, g = c.service.graph(item_id)
    durations = c.service.last_durations(it.id)  # the critical path by the gates' last run times
    title = f"work item {it.id}: {it.objective}"
    drawing: str | bytes
    if fmt == "json":
        drawing = json.dumps({"item": it.id, "revision": it.revision, **graph_json(g, durations)}) + "\n"
        if c.json and output is None:
            click.echo(drawing, nl=False)  # the graph's own document
            return
    elif fmt == "mermaid":
        drawing = to_mermaid(g)
    elif fmt == "dot":
        drawing = to_dot(g, f"item {it.id}")
    elif fmt == "svg":
        from milepost.present.picture import to_svg

        drawing = to_svg(g, title, durations=durations)
    elif fmt == "html":
        from milepost.present.picture import to_html

        _, views = c.service.milestone_views(it.id)
        done = sum(1 for m in g if m.status.is_done)
        sub = (
            f"{it.state.value} · {it.readiness}: {it.readiness_reason} · {done}/{len(g)} done · revision {it.revision}"
        )
        drawing = to_html(g, views, title, sub, durations)
    elif fmt == "png":
        from milepost.present.picture import to_png, to_svg

        drawing = to_png(to_svg(g, title, durations=durations))
    else:
        show_graph_text(c.console(), it.id, it.objective, g, durations)
        return
    if output is not None:
        write_file(output, drawing)
    if c.json:
        doc: dict[str, object] = {"item": it.id, "revision": it.revision, "format": fmt, "media_type": MEDIA_TYPES[fmt]}
        if output is not None:
            size = len(drawing) if isinstance(drawing, bytes) else len(drawing.encode())
            doc |= {"output": str(output), "bytes": size}
        elif isinstance(drawing, bytes):
            doc["base64"] = base64.b64encode(drawing).decode()
        else:
            doc["text"] = drawing
        click.echo(json.dumps(doc))
    elif output is not None:
        return
    elif isinstance(drawing, bytes):
        if sys.stdout.isatty():
            raise InvalidValueError("--format png writes binary data: give -o FILE, redirect stdout, or add --json")
        sys.stdout.buffer.write(drawing)
        sys.stdout.buffer.flush()
    else:
        click.echo(drawing, nl=False)
