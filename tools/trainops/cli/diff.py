"""`trainops diff`: what a change does to the resources Argo CD syncs."""

from __future__ import annotations

from pathlib import Path

import click

from trainops.appsets import application_paths
from trainops.cli.common import emit, make_renderer, project_config, render_options
from trainops.config import load_project_config
from trainops.diff.apps import ARGOCD_DIR, keyed
from trainops.diff.compare import ResourceKey, compare
from trainops.diff.formats import FORMATS, DiffReport
from trainops.diff.hazards import hazards
from trainops.diff.revisions import checkout, resolve
from trainops.errors import InputError
from trainops.model import Target
from trainops.render.discover import discover, kustomization_file


@click.command("diff")
@click.argument("paths", nargs=-1)
@click.option("--base", default="HEAD", show_default=True, help="Git revision before the change.")
@click.option(
    "--head", default=None, help="Git revision after the change [default: the working tree]."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(list(FORMATS)),
    default="text",
    show_default=True,
    help="text for terminals, json for tools, markdown for a pull-request comment.",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE."
)
@click.option(
    "--fail-on-warning",
    is_flag=True,
    help="Exit 1 when a change cannot be applied in place or edits an existing run.",
)
@render_options
def diff(paths, base, head, fmt, output, fail_on_warning, **render_flags):
    """Show what Argo CD would change between two revisions, resource by resource.

    Renders every Application the ApplicationSets in argocd/ generate (each
    overlays/<cluster> platform and each overlays/<cluster>/runs/<run>), plus
    argocd/ itself, at both revisions, and compares the resources field by
    field. Lists of named items (containers, env, volumes) are matched by name.
    PATHS limit the comparison to Applications under them; a path that selects none
    at either revision is an error. A run written as plain manifests (no
    kustomization) is read as Argo CD's directory source syncs it.

    Each revision is read from Git as Argo CD would sync it (submodules at the
    commits it records); the working tree counts as what `git add -A` would
    commit, ignored files left out. Both revisions are resolved before anything
    is rendered.

    Warnings mark changes a sync will not apply as an ordinary update: immutable
    fields (a training job's queue or managedBy, TrainJob specs, Job templates,
    selectors, claim modes), edits to runs that already exist, runs that Argo CD
    would prune.

    \b
    Examples:
      trainops diff                                 # uncommitted changes vs HEAD
      trainops diff --base origin/main --head HEAD --format markdown
      trainops diff --base HEAD~1 --head HEAD overlays/prod-roce
    """
    config = project_config()
    root = config.root or Path.cwd()
    wanted = [_relative(root, path) for path in paths]
    revisions = [resolve(root, base), resolve(root, head)]  # both, before any rendering
    sides = []
    matched: set[str] = set()
    for revision in revisions:
        with checkout(root, revision) as tree:
            try:
                resources, found = _render_tree(tree, wanted, render_flags)
            except InputError as error:
                raise InputError(f"at {revision.describe()}: {error}") from None
            sides.append(resources)
            matched |= found
    for path in wanted:
        if path not in matched:
            raise InputError(
                f"no Application Argo CD syncs is at or under this path at "
                f"{revisions[0].describe()} or {revisions[1].describe()} (nor {ARGOCD_DIR}/)",
                path,
            )
    diffs = compare(*sides)
    for resource_diff in diffs:
        resource_diff.warnings = hazards(resource_diff)
    report = DiffReport(revisions[0].describe(), revisions[1].describe(), diffs)
    emit(FORMATS[fmt](report), output)
    if fail_on_warning and report.summary()["warnings"]:
        raise SystemExit(1)


def _relative(root: Path, path: str) -> str:
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(root.resolve()))
    except ValueError:
        raise InputError("is outside the repository", path) from None


def _selected(app: str, wanted: list[str]) -> bool:
    if not wanted:
        return True
    return any(
        app == w or app.startswith(w.rstrip("/") + "/") or w.startswith(app + "/") for w in wanted
    )


def _render_tree(
    tree: Path, wanted: list[str], flags: dict
) -> tuple[dict[ResourceKey, dict], set[str]]:
    """The resources of every Application under `wanted` (all when empty), and which of
    `wanted` selected any."""
    renderer, _ = make_renderer(load_project_config(tree), **flags)
    argocd = tree / ARGOCD_DIR
    if kustomization_file(argocd) is None:
        raise InputError(f"no {ARGOCD_DIR}/kustomization.yaml: nothing says what Argo CD syncs")
    [control] = renderer.render([Target("kustomization", str(argocd))])
    appsets = [doc for doc in control.documents if doc.kind == "ApplicationSet"]
    every = [*application_paths(tree, appsets), ARGOCD_DIR]
    found = {w for w in wanted if any(_selected(app, [w]) for app in every)}
    apps = [app for app in every[:-1] if _selected(app, wanted)]
    resources = keyed(ARGOCD_DIR, control.documents) if _selected(ARGOCD_DIR, wanted) else {}
    targets = [(app, target) for app in apps for target in _app_targets(tree / app)]
    results = renderer.render([target for _, target in targets])
    for (app, _), result in zip(targets, results, strict=True):
        resources.update(keyed(app, result.documents))
    return resources, found


def _app_targets(directory: Path) -> list[Target]:
    """What Argo CD renders for an Application's path: its kustomization, else (a run
    written as plain manifests) the files its directory source syncs, as validate reads
    them."""
    if kustomization_file(directory) is not None:
        return [Target("kustomization", str(directory))]
    return discover([str(directory)])
