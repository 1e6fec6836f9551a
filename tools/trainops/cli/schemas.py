"""`trainops schemas`: turn CRDs into the JSON schemas validation uses."""

from __future__ import annotations

from pathlib import Path

import click

from trainops.cli.common import project_config
from trainops.errors import InputError
from trainops.fsutil import write_if_changed
from trainops.render.discover import display_path
from trainops.schema.crd import NotACRD, schema_files, serialise
from trainops.yamlio import load_documents, read_text


@click.group()
def schemas() -> None:
    """Manage the JSON schemas of custom resources (schemas/)."""


@schemas.command("import")
@click.argument("crd_files", nargs=-1, required=True)
@click.option(
    "-o",
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write schemas (default: schema-dir in [tool.trainops], else ./schemas).",
)
@click.option(
    "--check",
    is_flag=True,
    help="Write nothing; exit 1 if any schema is missing or differs (for CI).",
)
def import_crds(crd_files, output_dir, check):
    """Convert the CRDs in CRD_FILES into JSON schemas.

    For each served version of each CustomResourceDefinition two files are
    written: GROUP/KIND_VERSION.json and GROUP/KIND_VERSION-strict.json (the
    strict variant rejects unknown fields). The layout matches the kubeconform
    location template
    'schemas/{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}{{.StrictSuffix}}.json'.
    Documents that are not CRDs are ignored. Re-running changes nothing.
    """
    config = project_config()
    out_dir = output_dir or config.schema_dir or Path("schemas")
    wanted: dict[Path, str] = {}
    crds = 0
    for crd_file in crd_files:
        text = read_text(crd_file, 64 * 2**20)
        for doc in load_documents(text, source=crd_file, file=crd_file):
            if doc.kind != "CustomResourceDefinition":
                continue
            try:
                files = schema_files(doc.obj)
            except NotACRD as exc:
                raise InputError(str(exc), crd_file, doc.line) from None
            crds += 1
            for name, schema in files.items():
                wanted[out_dir / name] = serialise(schema)
    if not crds:
        raise InputError("no CustomResourceDefinition found in the given files")
    if check:
        stale = [p for p, text in wanted.items() if not p.is_file() or p.read_text() != text]
        for path in stale:
            click.echo(f"out of date: {display_path(path)}")
        if stale:
            click.echo(f"{len(stale)} schema file(s) differ; run `trainops schemas import`.")
            raise SystemExit(1)
        click.echo(f"{len(wanted)} schema files from {crds} CRDs are up to date.")
        return
    written = sum(write_if_changed(path, text) for path, text in sorted(wanted.items()))
    click.echo(
        f"{crds} CRDs -> {len(wanted)} schema files in {display_path(out_dir)} "
        f"({written} written, {len(wanted) - written} unchanged)."
    )
