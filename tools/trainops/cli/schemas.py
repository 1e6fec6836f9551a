"""`trainops schemas`: turn CRDs into the JSON schemas validation uses."""

from __future__ import annotations

from pathlib import Path

import click

from trainops.cli.common import project_config
from trainops.errors import InputError
from trainops.fsutil import write_if_changed
from trainops.render.discover import display_path
from trainops.schema import merge_keys
from trainops.schema.crd import NotACRD, schema_files, serialise
from trainops.schema.registry import SchemaRegistry
from trainops.yamlio import load_documents, read_text

MERGE_KEYS_PATH = Path("base/components/merge-keys/openapi.json")


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


@schemas.command("merge-keys")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"Where to write the document (default: {MERGE_KEYS_PATH} in the project).",
)
@click.option("--kubernetes-version", help="Minor whose core definitions to use.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if the file is out of date.")
def merge_keys_command(output, kubernetes_version, check):
    """Write the OpenAPI document kustomize needs to merge lists in training jobs.

    Without it, a strategic-merge patch on a PyTorchJob replaces whole lists:
    an overlay that sets one NCCL variable drops all the others. The
    base/components/merge-keys Component points kustomize at this document
    (core Kubernetes types with their merge keys, plus PyTorchJob, MPIJob and
    the other training kinds).
    """
    config = project_config()
    target = output or ((config.root or Path.cwd()) / MERGE_KEYS_PATH)
    version = kubernetes_version or config.kubernetes_version
    registry = SchemaRegistry(["default"], version, strict=False)
    text = merge_keys.serialise(merge_keys.build(registry.core_definitions))
    if check:
        if not target.is_file() or target.read_text() != text:
            click.echo(f"out of date: {display_path(target)}; run `trainops schemas merge-keys`")
            raise SystemExit(1)
        click.echo(f"{display_path(target)} is up to date.")
        return
    written = write_if_changed(target, text)
    click.echo(f"{display_path(target)} {'written' if written else 'unchanged'}.")
