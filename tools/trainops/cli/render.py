"""`trainops render`: print what kustomize builds, with where each document came from."""

from __future__ import annotations

import json
from pathlib import Path

import click

from trainops.cli.common import emit, find_targets, make_renderer, project_config, render_options
from trainops.yamlio import dump


@click.command()
@click.argument("paths", nargs=-1)
@render_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["yaml", "json"]),
    default="yaml",
    show_default=True,
    help="yaml: documents with a '# Source:' comment; json: a list of "
    '{"source", "object"} records.',
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE."
)
def render(paths, jobs, remote_mirror, allow_network, no_cache, max_file_size, fmt, output):
    """Render kustomizations and YAML files under PATHS (default: overlays/).

    Every directory holding a kustomization is built with the real kustomize
    (`kustomize build`, or `kubectl kustomize` when kustomize is not
    installed), in parallel. Plain YAML/JSON files outside kustomizations are
    passed through. Output is deterministic: targets in path order, documents
    in kustomize's order. Use `-` to read a YAML stream from stdin.
    """
    config = project_config()
    renderer, _ = make_renderer(config, jobs, remote_mirror, allow_network, no_cache, max_file_size)
    results = renderer.render(find_targets(paths, config))
    if fmt == "json":
        records = [
            {"source": doc.location, "object": doc.obj} for r in results for doc in r.documents
        ]
        text = json.dumps(records, indent=2) + "\n"
    else:
        chunks = []
        for result in results:
            for doc in result.documents:
                body = doc.text if doc.text is not None else dump(doc.obj)
                chunks.append(f"# Source: {doc.location}\n{body.rstrip()}\n")
        text = "---\n".join(chunks)
    emit(text, output)
    for result in results:
        for finding in result.findings:
            click.echo(f"{finding.location}: {finding.severity}: {finding.message}", err=True)
