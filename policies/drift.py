"""Generated overlays match the profile they are generated from."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from trainops.model import ERROR, Document
from trainops.policy import Context, Violation, render_rule
from trainops.render.discover import display_path


@render_rule(
    id="profile-drift",
    severity=ERROR,
    title="A cluster overlay is exactly what its cluster.yaml generates",
    why="Every file of a cluster overlay but cluster.yaml is derived from it. A hand edit, a "
    "merge that kept one side of a generated file, or an edit killed half-way leaves an "
    "overlay that no longer matches its profile: the next `trainops set` silently reverts "
    "it, and what the profile says (nodes, fabric, NCCL) is not what Argo CD syncs. The "
    "same holds for argocd/projects.yaml: an AppProject without the cluster's destinations "
    "makes Argo CD refuse its applications (a new-cluster killed after writing the overlay "
    "leaves exactly that).",
    fix="Put the change in cluster.yaml and run `trainops set CLUSTER` (no assignment "
    "regenerates the overlay), then review the diff it prints.",
    source="docs/overlays.md#what-the-generator-derives",
)
def profile_drift(ctx: Context) -> Iterator[tuple[Document | None, Violation]]:
    if ctx.profile is None or ctx.has_platform:
        return  # only the cluster overlay itself; its runs and templates are checked with it
    directory = Path(ctx.target.path).resolve()
    if not (directory / "cluster.yaml").is_file() or directory.parent.name != "overlays":
        return
    # The generator (and ruamel.yaml with it) is imported only for a cluster overlay.
    from trainops.profile.writer import PROJECTS, missing_destinations, plan_overlay

    root = directory.parent.parent
    missing: dict[str, list[str]] = {}
    for project, namespace in missing_destinations(root, ctx.profile):
        missing.setdefault(project, []).append(namespace)
    for project, namespaces in missing.items():
        yield (
            None,
            Violation(
                f"{PROJECTS}: project {project} does not let cluster {directory.name} be deployed "
                f"to ({', '.join(namespaces)}): Argo CD refuses those applications; "
                f"`trainops set {directory.name}` writes it"
            ),
        )
    for change in plan_overlay(root, directory.name, ctx.profile):
        shown = display_path(change.path)
        if change.old is None:
            message = f"{shown} is missing: cluster.yaml generates it"
        elif change.new is None:
            message = f"{shown} is generated but cluster.yaml no longer calls for it"
        else:
            message = f"{shown} differs from what cluster.yaml generates"
        yield None, Violation(message)
