"""`trainops kubeconform`: drop-in for CI scripts that call kubeconform.

Also reached as `kubeconform` when the trainops executable is linked under that name
(`ln -s "$(command -v trainops)" /usr/local/bin/kubeconform`): the usage then names
the link, as kubeconform names itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import click


@click.command(
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "help_option_names": [],
    },
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def kubeconform(args):
    """Validate manifests with kubeconform's flags, outputs and exit codes (see -h).

    Runs a real `kubeconform` found on PATH (TRAINOPS_KUBECONFORM=builtin forces the
    built-in engine); the built-in one serves the `default` schema location offline
    from the core schemas bundled with trainops.
    """
    raise SystemExit(run_as(list(args), "trainops kubeconform"))


def run_as(args: list[str], program: str) -> int:
    real = _real_kubeconform()
    if real and os.environ.get("TRAINOPS_KUBECONFORM") != "builtin":
        return subprocess.run([real, *args], check=False).returncode
    from trainops.kubeconform.run import main

    return main(args, program, sys.stdout, sys.stderr)


def _real_kubeconform() -> str | None:
    """A kubeconform on PATH that is not trainops itself under that name."""
    found = shutil.which("kubeconform")
    ours = shutil.which(sys.argv[0]) or sys.argv[0]
    if found and os.path.realpath(found) != os.path.realpath(ours):
        return found
    return None
