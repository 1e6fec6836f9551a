"""`trainops validate`: render, check every document, report, set the exit code."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from trainops.cli.common import (
    affected_targets,
    check_rule_ids,
    complete_rule_ids,
    emit,
    find_targets,
    make_renderer,
    project_config,
    render_options,
    rule_ids,
    use_colour,
)
from trainops.errors import InputError
from trainops.model import ERROR, SEVERITIES, WARNING
from trainops.output import FORMATS, reporter
from trainops.output.progress import ProgressLine
from trainops.output.text import render as text_report
from trainops.pipeline import ValidateOptions, Validation
from trainops.report import Invocation, keep_rules, summary_line
from trainops.schema.check import SKIP
from trainops.schema.registry import DEFAULT_KUBERNETES_VERSION, crd_location


class _ValidateCommand(click.Command):
    """Points the rule flags of other linters (--skip-rule, --disable, --exclude-check,
    --enable-rule...) at --ignore and --select instead of a look-alike such as --skip."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            name = exc.option_name.lstrip("-")
            if any(word in name for word in ("skip", "disable", "exclude")) and name != "skip":
                exc.possibilities = ["--ignore"]
            elif any(word in name for word in ("enable", "include", "only")):
                exc.possibilities = ["--select"]
            elif "rule" in name or "check" in name:
                exc.possibilities = ["--ignore", "--select"]
            raise


@click.command(cls=_ValidateCommand)
@click.argument("paths", nargs=-1)
@render_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="Report format. json: {summary, findings}; junit: a testsuite per overlay or "
    "file, a testcase per resource (also written, with one error case, when the input "
    "cannot be read); sarif: SARIF 2.1.0 for code scanning; github: workflow annotations.",
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
    help="Say nothing about custom resource kinds that have no schema (by default each is "
    "a warning: not checked).",
)
@click.option(
    "--strict-schemas",
    is_flag=True,
    help="Make a custom resource kind without a schema an error (default: a warning; "
    "strict-schemas = true in [tool.trainops] sets it for a project). A built-in kind at an "
    "apiVersion the Kubernetes version does not serve is always an error.",
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
    "--select",
    multiple=True,
    metavar="RULE",
    shell_complete=complete_rule_ids,
    help="Report only findings of these rule ids (repeatable or comma-separated; "
    "`trainops policies list` lists them).",
)
@click.option(
    "--ignore",
    multiple=True,
    metavar="RULE",
    shell_complete=complete_rule_ids,
    help="Drop findings of these rule ids (repeatable or comma-separated).",
)
@click.option(
    "--env",
    "envsubst",
    is_flag=True,
    help="Render plain files and stdin from the environment first, as GNU envsubst does "
    "($NAME and ${NAME} become the value, or nothing when unset; ${NAME:-x} and Helm's "
    "{{ }} stay, and such a file is reported as a template, not checked).",
)
@click.option(
    "--changed",
    is_flag=True,
    help="PATHS are changed files (as pre-commit passes them): validate the targets under "
    "the project's paths whose inputs include one of them.",
)
@click.option(
    "--color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    help="Colour severities in text output; auto: on a terminal unless NO_COLOR is set.",
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
    strict_schemas,
    strict,
    skip,
    skip_cel,
    skip_api_checks,
    policies,
    policy_config,
    fail_on,
    select,
    ignore,
    envsubst,
    changed,
    color,
    show_info,
    quiet,
):
    """Render PATHS and check every resource.

    Without PATHS: the current directory inside a project, the project's paths
    (`paths` in [tool.trainops], default overlays/) at its root.

    Each kustomization is built with real kustomize and each document checked
    against the strict schema of its kind: core kinds against the Kubernetes
    schemas bundled for --kubernetes-version, custom resources against the
    schemas imported from their CRDs (schemas/, and CRDs in the same input).
    Unknown fields, wrong types and missing required fields are errors; a custom
    resource kind without a schema is a warning (not checked) unless
    --strict-schemas. Then the
    policy pack (policies/, `trainops policies list`) checks what schemas
    cannot: NCCL settings against the pod's networks, volumes shared by
    replicas, launch arguments against replicas, and more. Runs and job
    templates inside a cluster overlay are checked together with that cluster's
    platform (its networks, volumes and queues).

    Every finding names the file and line to fix: the plain file, or for a
    rendered object the base, patch or kustomization that wrote the field, and
    for a file generated from a cluster profile the cluster.yaml key as well.
    Text output lists errors and warnings with their fixes and ends with one
    summary line counting every severity; --show-info adds the info findings,
    --quiet keeps only the summary. JSON, JUnit, SARIF and GitHub annotations
    carry every finding. --select and --ignore keep or drop rule ids.
    On a terminal, a run longer than two seconds shows a progress line on stderr.

    Exit codes: 0 clean (warnings allowed unless --fail-on warning), 1 findings
    at or above --fail-on, 2 unreadable input (bad YAML, missing path, kustomize
    failure), reported on one line.
    """
    config = project_config()
    renderer, cache = make_renderer(
        config, jobs, remote_mirror, allow_network, no_cache, max_file_size
    )
    renderer.options.envsubst = envsubst
    if not schema_locations:
        schema_locations = ("default",)
        if config.schema_dir is not None:
            schema_locations += (crd_location(config.schema_dir),)
    options = ValidateOptions(
        kubernetes_version=kubernetes_version or config.kubernetes_version,
        schema_locations=tuple(schema_locations),
        strict=strict,
        missing_schemas=SKIP
        if ignore_missing_schemas
        else (ERROR if strict_schemas or config.strict_schemas else WARNING),
        skip=tuple(skip),
        cel=not skip_cel,
        api_checks=not skip_api_checks,
        policy_pack=config.policy_pack if policies else None,
        policy_config=(policy_config or (config.policy_pack / "config.yaml"))
        if policies and config.policy_pack
        else None,
    )
    selected, ignored = rule_ids(select), rule_ids(ignore)
    if selected or ignored:
        check_rule_ids([*selected, *ignored], config.policy_pack)
    progress = ProgressLine() if ProgressLine.wanted() else None
    try:
        if changed:
            targets = affected_targets(paths, config, renderer)
        else:
            targets = find_targets(paths, config)
        report = Validation(renderer, options, cache).run(targets, progress)
    except InputError as error:
        if fmt == "junit":  # CI viewers still get a report naming the problem
            from trainops.output.junit import render_error

            emit(render_error(error), output)
        raise
    finally:
        if progress is not None:
            progress.close()
    keep_rules(report, selected, ignored)
    report.fail_on = fail_on
    report.invocation = Invocation(
        command_line=shlex.join(["trainops", *sys.argv[1:]]),
        directory=str(Path.cwd()),
        repo_url=config.repo_url,
    )
    if fmt == "text":
        colour = use_colour(color, output)
        text = text_report(report, colour=colour, show_info=show_info, quiet=quiet)
    else:
        text = reporter(fmt)(report)
    emit(text, output)
    if output is not None:
        click.echo(f"trainops: {summary_line(report)} -> {output}", err=True)
    raise SystemExit(report.exit_code)
