"""kubeconform's command line, parsed the way Go's `flag` package parses it.

Flags come first: parsing stops at the first argument that is not a flag (`-` is
one, meaning stdin) or after `--`. `-name`, `--name`, `-name=value` and, except for
booleans, `-name value` are accepted. Errors read as Go's do and are followed by the
usage, as kubeconform prints them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

OUTPUTS = ("json", "junit", "pretty", "tap", "text")
_VERSION = re.compile(r"(master|[0-9]+\.[0-9]+\.[0-9]+)\Z")


@dataclass(frozen=True)
class Flag:
    name: str
    kind: str  # "bool", "string", "int", "list" (repeatable) or "version"
    help: str
    default: str = ""


FLAGS = {
    flag.name: flag
    for flag in (
        Flag("cache", "string", "folder for schemas fetched over HTTP (read first, then filled)"),
        Flag("debug", "bool", "accepted for compatibility"),
        Flag("exit-on-error", "bool", "stop at the first resource that is invalid or in error"),
        Flag("h", "bool", "show this help"),
        Flag(
            "ignore-filename-pattern",
            "list",
            "regular expression of paths to leave out (repeatable)",
        ),
        Flag("ignore-missing-schemas", "bool", "skip resources whose kind has no schema"),
        Flag("insecure-skip-tls-verify", "bool", "accepted for compatibility"),
        Flag(
            "kubernetes-version",
            "version",
            'Kubernetes version of the core schemas, x.y.z or "master" (the newest bundled);\n'
            "a version outside the bundled 1.25-1.37 uses the nearest bundled one",
            "master",
        ),
        Flag("n", "int", "accepted for compatibility (validation is sequential)", "4"),
        Flag("output", "string", "output format: json, junit, pretty, tap or text", "text"),
        Flag("reject", "string", "comma-separated kinds or apiVersion/kind to reject"),
        Flag(
            "schema-location",
            "list",
            "schema location: a template, a folder or URL, or `default` (the core schemas\n"
            "bundled with trainops, read offline); repeatable, tried in order",
        ),
        Flag("skip", "string", "comma-separated kinds or apiVersion/kind to skip"),
        Flag("strict", "bool", "refuse fields not in the schema and duplicate keys"),
        Flag("summary", "bool", "print a summary at the end (not for junit)"),
        Flag("v", "bool", "show the version"),
        Flag("verbose", "bool", "also print valid and skipped resources (not for tap, junit)"),
    )
}


class UsageError(Exception):
    """A command line kubeconform refuses; `str()` is Go's message, usage follows it."""


@dataclass
class Options:
    cache: str = ""
    exit_on_error: bool = False
    help: bool = False
    ignore_filename_patterns: list[str] = field(default_factory=list)
    ignore_missing_schemas: bool = False
    kubernetes_version: str = "master"
    output: str = "text"
    reject: frozenset[str] = frozenset()
    schema_locations: list[str] = field(default_factory=list)
    skip: frozenset[str] = frozenset()
    strict: bool = False
    summary: bool = False
    version: bool = False
    verbose: bool = False
    files: list[str] = field(default_factory=list)


def usage(program: str) -> str:
    """kubeconform's usage text: the synopsis, then every flag as Go's PrintDefaults."""
    lines = [f"Usage: {program} [OPTION]... [FILE OR FOLDER]..."]
    for flag in FLAGS.values():
        argument = {"bool": "", "int": " int", "string": " string"}.get(flag.kind, " value")
        head = f"  -{flag.name}{argument}"
        head += "\t" if len(head) <= 4 else "\n    \t"
        text = flag.help.replace("\n", "\n    \t")
        if flag.default and flag.kind == "string":
            text += f' (default "{flag.default}")'
        elif flag.default:
            text += f" (default {flag.default})"
        lines.append(head + text)
    return "\n".join(lines) + "\n"


def parse(args: list[str]) -> Options:
    options = Options()
    values: dict[str, list[str]] = {}
    position = 0
    while position < len(args):
        arg = args[position]
        if len(arg) < 2 or arg[0] != "-":
            break
        position += 1
        if arg == "--":
            break
        name = arg[2:] if arg.startswith("--") else arg[1:]
        if not name or name[0] in "-=":
            raise UsageError(f"bad flag syntax: {arg}")
        name, has_value, value = name.partition("=")
        flag = FLAGS.get(name)
        if flag is None:
            if name in ("help", "h"):
                raise UsageError("")  # Go prints the usage alone and fails
            raise UsageError(f"flag provided but not defined: -{name}")
        if flag.kind == "bool":
            values.setdefault(name, []).append(_go_bool(value, name) if has_value else "true")
            continue
        if not has_value:
            if position >= len(args):
                raise UsageError(f"flag needs an argument: -{name}")
            value = args[position]
            position += 1
        values.setdefault(name, []).append(_checked(flag, value))
    options.files = args[position:]
    _apply(options, values)
    return options


def _go_bool(value: str, name: str) -> str:
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return "true"
    if value in ("0", "f", "F", "false", "FALSE", "False"):
        return "false"
    raise UsageError(f'invalid boolean value "{value}" for -{name}: parse error')


def _checked(flag: Flag, value: str) -> str:
    if flag.kind == "int" and not re.fullmatch(r"[-+]?[0-9]+", value):
        raise UsageError(f'invalid value "{value}" for flag -{flag.name}: parse error')
    if flag.kind == "version" and not _VERSION.match(value):
        raise UsageError(
            f'invalid value "{value}" for flag -{flag.name}: {value} is not a valid version. '
            'Valid values are "master" (default) or full version x.y.z (e.g. "1.27.2")'
        )
    return value


def _apply(options: Options, values: dict[str, list[str]]) -> None:
    def last(name: str, default: str) -> str:
        return values.get(name, [default])[-1]

    options.cache = last("cache", "")
    options.exit_on_error = last("exit-on-error", "false") == "true"
    options.help = last("h", "false") == "true"
    options.ignore_filename_patterns = values.get("ignore-filename-pattern", [])
    options.ignore_missing_schemas = last("ignore-missing-schemas", "false") == "true"
    options.kubernetes_version = last("kubernetes-version", "master")
    options.output = last("output", "text")
    options.reject = _kinds(last("reject", ""))
    options.schema_locations = values.get("schema-location", [])
    options.skip = _kinds(last("skip", ""))
    options.strict = last("strict", "false") == "true"
    options.summary = last("summary", "false") == "true"
    options.version = last("v", "false") == "true"
    options.verbose = last("verbose", "false") == "true"


def _kinds(csv: str) -> frozenset[str]:
    return frozenset(kind.strip() for kind in csv.split(",") if kind.strip())
