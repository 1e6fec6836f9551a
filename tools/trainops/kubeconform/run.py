"""`kubeconform [OPTION]... [FILE OR FOLDER]...`: flags in, results and exit code out.

Exit codes as kubeconform's: 0 when every resource is valid, skipped or empty, 1 when
one is invalid or in error, and 1 for a bad command line or setup (printed on stderr
with the usage where kubeconform prints it).
"""

from __future__ import annotations

import os
import stat
import sys
from typing import TextIO

from trainops import __version__
from trainops.kubeconform import flags
from trainops.kubeconform.checks import ERROR, INVALID, Result, check
from trainops.kubeconform.output import render
from trainops.kubeconform.resources import (
    MAX_BYTES,
    Resource,
    decode,
    find_files,
    read_file,
    resources_of,
)
from trainops.kubeconform.schemas import Registry, SetupError


def main(args: list[str], program: str, out: TextIO, err: TextIO) -> int:
    try:
        options = flags.parse(args)
    except flags.UsageError as exc:
        message = f"{exc}\n" if str(exc) else ""
        err.write(message + flags.usage(program))
        return 1
    if options.help:
        out.write(flags.usage(program))
        return 0
    if options.version:
        out.write(f"{__version__} (trainops)\n")
        return 0
    stdin = not options.files or options.files == ["-"]
    if stdin and stat.S_ISCHR(os.fstat(sys.stdin.fileno()).st_mode):
        err.write("failing to read data from stdin\n")
        return 1
    if options.output not in flags.OUTPUTS:
        err.write("'outputFormat' must be 'json', 'junit', 'pretty', 'tap' or 'text'\n")
        return 1
    try:
        registry = Registry(
            options.schema_locations, options.kubernetes_version, options.strict, options.cache
        )
    except SetupError as exc:
        err.write(f"{exc}\n")
        return 1
    results: list[Result] = []
    for resource in _resources(options, stdin):
        result = check(
            resource, registry, options.skip, options.reject, options.ignore_missing_schemas
        )
        results.append(result)
        resource.obj = None  # only the signature is reported: 100,000 resources stay small
        if options.exit_on_error and result.status in (INVALID, ERROR):
            break
    out.write(render(results, options.output, options.summary, stdin, options.verbose))
    return 1 if any(r.status in (INVALID, ERROR) for r in results) else 0


def _resources(options: flags.Options, stdin: bool):
    if stdin:
        text, problem = decode(sys.stdin.buffer.read(MAX_BYTES + 1))
        if text is None:
            yield Resource("stdin", error=problem)
            return
        yield from resources_of("stdin", text, options.strict, stdin=True)
        return
    for path, problem in find_files(options.files, options.ignore_filename_patterns):
        if problem:
            yield Resource(path, error=problem)
            continue
        text, problem = read_file(path)
        if text is None:
            yield Resource(path, error=problem)
            continue
        yield from resources_of(path, text, options.strict, stdin=False)
