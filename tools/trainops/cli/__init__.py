"""The `trainops` command line: one click group, one module per command family."""

from __future__ import annotations

import importlib
import os
import sys

import click

from trainops import __version__
from trainops.errors import EXIT_INPUT, InputError

# Each command's module is imported only when that command runs (or for --help), so
# that `trainops --version` and a validate of one file start fast.
COMMANDS = {
    "diff": ("trainops.cli.diff", "diff"),
    "doctor": ("trainops.cli.doctor", "doctor"),
    "kubeconform": ("trainops.cli.kubeconform", "kubeconform"),
    "new-cluster": ("trainops.cli.cluster", "new_cluster"),
    "new-run": ("trainops.cli.cluster", "new_run"),
    "plan": ("trainops.cli.plan", "plan"),
    "policies": ("trainops.cli.policies", "policies"),
    "preflight": ("trainops.cli.preflight", "preflight"),
    "render": ("trainops.cli.render", "render"),
    "schemas": ("trainops.cli.schemas", "schemas"),
    "set": ("trainops.cli.cluster", "set_profile"),
    "validate": ("trainops.cli.validate", "validate"),
}


class _Group(click.Group):
    """Loads commands on demand; turns InputError into one line on stderr and exit
    code 2, never a traceback."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attribute = COMMANDS[name]
        return getattr(importlib.import_module(module), attribute)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except InputError as exc:
            # One line, whatever the input put into the message (a name with a newline).
            line = str(exc).replace("\r", "\\r").replace("\n", "\\n")
            click.echo(f"trainops: error: {line}", err=True)
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


def main() -> None:
    if os.path.basename(sys.argv[0]) == "kubeconform":  # linked under kubeconform's name
        from trainops.cli.kubeconform import run_as

        sys.exit(run_as(sys.argv[1:], sys.argv[0]))
    try:
        cli(prog_name="trainops")
    except BrokenPipeError:  # `trainops render | head`
        sys.stderr.close()
        sys.exit(0)
