"""The `trainops` command line: one click group, one module per command family."""

from __future__ import annotations

import os
import sys

import click

from trainops import __version__
from trainops.cli.kubeconform import run_as as kubeconform_as
from trainops.errors import EXIT_INPUT, InputError


class _Group(click.Group):
    """Turns InputError into one line on stderr and exit code 2, never a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except InputError as exc:
            click.echo(f"trainops: error: {exc}", err=True)
            ctx.exit(EXIT_INPUT)
        except KeyboardInterrupt:
            click.echo("trainops: interrupted", err=True)
            ctx.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trainops")
def cli() -> None:
    """Render, validate and review a GitOps repository for multi-node GPU training.

    Exit codes: 0 clean (warnings allowed), 1 error findings, 2 unreadable input.
    """


def _register() -> None:
    from trainops.cli import (
        cluster,
        diff,
        doctor,
        kubeconform,
        plan,
        policies,
        preflight,
        render,
        schemas,
        validate,
    )

    cli.add_command(render.render)
    cli.add_command(validate.validate)
    cli.add_command(schemas.schemas)
    cli.add_command(kubeconform.kubeconform)
    cli.add_command(cluster.new_cluster)
    cli.add_command(cluster.set_profile)
    cli.add_command(cluster.new_run)
    cli.add_command(policies.policies)
    cli.add_command(diff.diff)
    cli.add_command(doctor.doctor)
    cli.add_command(preflight.preflight)
    cli.add_command(plan.plan)


_register()


def main() -> None:
    if os.path.basename(sys.argv[0]) == "kubeconform":  # linked under kubeconform's name
        sys.exit(kubeconform_as(sys.argv[1:], sys.argv[0]))
    try:
        cli(prog_name="trainops")
    except BrokenPipeError:  # `trainops render | head`
        sys.stderr.close()
        sys.exit(0)
