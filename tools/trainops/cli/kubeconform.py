"""`trainops kubeconform`: drop-in for CI scripts that call kubeconform."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import click

from trainops import __version__
from trainops.kubeconform import exit_code, parse_args, run
from trainops.output.kubeconform import render

HELP = """Usage: trainops kubeconform [OPTION]... [FILE OR FOLDER]...

Validates plain YAML/JSON manifests with kubeconform's flags and outputs. Runs the
real `kubeconform` when it is on PATH (set TRAINOPS_KUBECONFORM=builtin to force the
built-in engine), otherwise trainops' own engine. Reads stdin when given no files.

  -strict                   reject fields not in the schema
  -summary                  print a summary at the end
  -verbose                  also print valid and skipped resources
  -output FORMAT            text, json, junit or tap (default text)
  -schema-location LOC      schema location template, directory or `default`
                            (repeatable; `default` reads the bundled core schemas offline)
  -kubernetes-version VER   e.g. 1.35.0 (default "master": newest bundled)
  -skip KINDS               comma-separated kinds or apiVersion/kind to skip
  -reject KINDS             comma-separated kinds or apiVersion/kind to reject
  -ignore-missing-schemas   skip resources whose kind has no schema
  -ignore-filename-pattern  regular expression of paths to ignore (repeatable)
  -exit-on-error            stop at the first invalid resource
  -n N                      accepted for compatibility (validation is sequential)
  -v                        print the version

Exit codes: 0 all valid, 1 invalid resources or errors.
"""


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
    """Validate manifests with kubeconform's flags and outputs (see -h)."""
    real = shutil.which("kubeconform")
    if real and os.environ.get("TRAINOPS_KUBECONFORM") != "builtin":
        raise SystemExit(subprocess.run([real, *args], check=False).returncode)
    options = parse_args(list(args))
    if options.show_help:
        click.echo(HELP, nl=False)
        return
    if options.show_version:
        click.echo(f"trainops {__version__} (kubeconform-compatible engine)")
        return
    results = run(options)
    sys.stdout.write(render(results, options))
    raise SystemExit(exit_code(results))
