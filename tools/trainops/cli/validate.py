"""`trainops validate`: render, check every document, report, set the exit code."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from trainops.cli.common import emit, find_targets, make_renderer, project_config, render_options
from trainops.model import ERROR, SEVERITIES
from trainops.output import FORMATS, reporter
from trainops.output.progress import ProgressLine
from trainops.output.text import render as text_report
from trainops.pipeline import ValidateOptions, Validation
from trainops.report import Invocation, summary_line
from trainops.schema.registry import DEFAULT_KUBERNETES_VERSION, crd_location


@click.command()
@click.argument("paths", nargs=-1)
@render_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="Report format. json: {summary, findings}; junit: a testsuite per overlay or "
    "file, a testcase per resource; sarif: SARIF 2.1.0 with rule metadata.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report to FILE (a one-line summary still goes to stderr).",
)
@click.option(
    "--kubernetes-version",
    help="Kubernetes minor whose core schemas to use "
    f"(default: kubernetes-version in [tool.trainops], else {DEFAULT_KUBERNETES_VERSION}).",
)
@click.option(
    "--schema-location",
    "schema_locations",
    multiple=True,
    help="Where to look for schemas, in order, kubeconform-style (a template ending in "
    ".json, a directory, or `default` for the bundled core schemas). Default: `default` "
    "then the project's imported CRD schemas.",
)
@click.option(
    "--ignore-missing-schemas",
    is_flag=True,
    help="Skip kinds that have no schema instead of reporting an error.",
)
@click.option(
    "--strict/--no-strict",
    default=True,
    show_default=True,
    help="Reject fields the schema does not define.",
)
@click.option(
    "--skip",
    multiple=True,
    help="Kind (or apiVersion/Kind) to leave unchecked; repeatable.",
)
@click.option(
    "--skip-cel",
    is_flag=True,
    help="Do not evaluate the x-kubernetes-validations (CEL) rules of custom resources.",
)
@click.option(
    "--skip-api-checks",
    is_flag=True,
    help="Skip the API server's built-in validation (names, pod specs, workload specs) and "
    "the operators' webhook checks.",
)
@click.option(
    "--policies/--no-policies",
    default=True,
    show_default=True,
    help="Run the training-aware policy pack after the schema check.",
)
@click.option(
    "--policy-config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Severity overrides and exemptions (default: config.yaml of the policy pack).",
)
@click.option(
    "--fail-on",
    type=click.Choice(SEVERITIES),
    default=ERROR,
    show_default=True,
    help="Lowest severity that makes the exit code 1 (warning: warnings fail the run too).",
)
@click.option(
    "--show-info",
    "-v",
    "show_info",
    is_flag=True,
    help="Text format: also print info findings (by default only counted in the summary).",
)
@click.option(
    "--quiet",
    "-q",
    is_flag=True,
    help="Text format: print only the summary line.",
)
def validate(
    paths,
    jobs,
    remote_mirror,
    allow_network,
    no_cache,
    max_file_size,
    fmt,
    output,
    kubernetes_version,
    schema_locations,
    ignore_missing_schemas,
    strict,
    skip,
    skip_cel,
    skip_api_checks,
    policies,
    policy_config,
    fail_on,
    show_info,
    quiet,
):
    """Render PATHS (default: overlays/) and check every resource.

    Each kustomization is built with real kustomize and each document checked
    against the strict schema of its kind: core kinds against the Kubernetes
    schemas bundled for --kubernetes-version, custom resources against the
    schemas imported from their CRDs (schemas/). Unknown fields, wrong types,
    missing required fields and kinds without a schema are errors. Then the
    policy pack (policies/, `trainops policies list`) checks what schemas
    cannot: NCCL settings against the pod's networks, volumes shared by
    replicas, launch arguments against replicas, and more. Runs and job
    templates inside a cluster overlay are checked together with that cluster's
    platform (its networks, volumes and queues).

    Text output lists errors and warnings with their fixes and ends with one
    summary line counting every severity; --show-info adds the info findings,
    --quiet keeps only the summary. JSON, JUnit and SARIF carry every finding.
    On a terminal, a run longer than two seconds shows a progress line on stderr.

    Exit codes: 0 clean (warnings allowed unless --fail-on warning), 1 findings
    at or above --fail-on, 2 unreadable input (bad YAML, missing path, kustomize
    failure), reported on one line.
    """
    config = project_config()
    renderer, cache = make_renderer(
        config, jobs, remote_mirror, allow_network, no_cache, max_file_size
    )
    if not schema_locations:
        schema_locations = ("default",)
        if config.schema_dir is not None:
            schema_locations += (crd_location(config.schema_dir),)
    options = ValidateOptions(
        kubernetes_version=kubernetes_version or config.kubernetes_version,
        schema_locations=tuple(schema_locations),
        strict=strict,
        ignore_missing_schemas=ignore_missing_schemas,
        skip=tuple(skip),
        cel=not skip_cel,
        api_checks=not skip_api_checks,
        policy_pack=config.policy_pack if policies else None,
        policy_config=(policy_config or (config.policy_pack / "config.yaml"))
        if policies and config.policy_pack
        else None,
    )
    progress = ProgressLine() if ProgressLine.wanted() else None
    try:
        report = Validation(renderer, options, cache).run(find_targets(paths, config), progress)
    finally:
        if progress is not None:
            progress.close()
    report.fail_on = fail_on
    report.invocation = Invocation(
        command_line=shlex.join(["trainops", *sys.argv[1:]]),
        directory=str(Path.cwd()),
        repo_url=config.repo_url,
    )
    if fmt == "text":
        colour = output is None and click.get_text_stream("stdout").isatty()
        text = text_report(report, colour=colour, show_info=show_info, quiet=quiet)
    else:
        text = reporter(fmt)(report)
    emit(text, output)
    if output is not None:
        click.echo(f"trainops: {summary_line(report)} -> {output}", err=True)
    raise SystemExit(report.exit_code)
