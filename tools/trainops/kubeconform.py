"""A kubeconform-compatible front end for CI scripts written for kubeconform.

`trainops kubeconform ARGS` accepts kubeconform's flags (Go style: `-strict`,
`-output json`, `-output=json`, `--summary`). When a real `kubeconform` is on
PATH it runs that with the same arguments; otherwise the built-in engine
validates with trainops' schema registry and prints kubeconform's output
formats. Like kubeconform it reads plain YAML/JSON files (no kustomize) and
treats a file it cannot parse as an error result, not a fatal one.

One difference is deliberate: the location `default` (also used when no
location is given) reads the core schemas bundled with kubernetes-validate
instead of downloading them, since CI has no network.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from trainops.errors import InputError
from trainops.model import Document
from trainops.schema.check import violations
from trainops.schema.registry import SchemaRegistry, bundled_versions
from trainops.yamlio import decode, load_documents, read_text

BOOL_FLAGS = {
    "strict",
    "summary",
    "verbose",
    "ignore-missing-schemas",
    "exit-on-error",
    "insecure-skip-tls-verify",
    "debug",
    "v",
    "h",
    "help",
}
VALUE_FLAGS = {"output", "kubernetes-version", "skip", "reject", "n", "cache", "cpu-prof"}
MULTI_FLAGS = {"schema-location", "ignore-filename-pattern"}
OUTPUTS = ("text", "json", "junit", "tap")
VALID, INVALID, ERROR, SKIPPED, EMPTY = "valid", "invalid", "error", "skipped", "empty"


@dataclass
class Options:
    strict: bool = False
    summary: bool = False
    verbose: bool = False
    ignore_missing_schemas: bool = False
    exit_on_error: bool = False
    output: str = "text"
    kubernetes_version: str = "master"
    skip: tuple[str, ...] = ()
    reject: tuple[str, ...] = ()
    schema_locations: list[str] = field(default_factory=list)
    ignore_patterns: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    show_version: bool = False
    show_help: bool = False


@dataclass
class Result:
    filename: str
    kind: str
    name: str
    namespace: str
    version: str
    status: str
    msg: str = ""
    errors: list[tuple[str, str]] = field(default_factory=list)  # (JSON pointer, message)


class UsageError(InputError):
    pass


def parse_args(args: list[str]) -> Options:
    """Parse Go-flag style arguments as kubeconform does."""
    options = Options()
    position = 0
    while position < len(args):
        arg = args[position]
        position += 1
        if arg == "--":
            options.paths.extend(args[position:])
            break
        if not arg.startswith("-") or arg == "-":
            options.paths.append(arg)
            continue
        name, has_value, value = arg.lstrip("-").partition("=")
        if name in BOOL_FLAGS:
            flag = value.lower() not in ("false", "0") if has_value else True
            _set_bool(options, name, flag)
        elif name in VALUE_FLAGS or name in MULTI_FLAGS:
            if not has_value:
                if position >= len(args):
                    raise UsageError(f"flag needs an argument: -{name}")
                value = args[position]
                position += 1
            _set_value(options, name, value)
        else:
            raise UsageError(f"flag provided but not defined: -{name}")
    if options.output not in OUTPUTS:
        raise UsageError(f"-output must be one of {', '.join(OUTPUTS)}, not '{options.output}'")
    return options


def _set_bool(options: Options, name: str, flag: bool) -> None:
    attribute = {
        "ignore-missing-schemas": "ignore_missing_schemas",
        "exit-on-error": "exit_on_error",
        "v": "show_version",
        "h": "show_help",
        "help": "show_help",
    }.get(name, name.replace("-", "_"))
    if hasattr(options, attribute):
        setattr(options, attribute, flag)


def _set_value(options: Options, name: str, value: str) -> None:
    if name == "output":
        options.output = value
    elif name == "kubernetes-version":
        options.kubernetes_version = value
    elif name in ("skip", "reject"):
        setattr(options, name, tuple(v.strip() for v in value.split(",") if v.strip()))
    elif name == "schema-location":
        options.schema_locations.append(value)
    elif name == "ignore-filename-pattern":
        options.ignore_patterns.append(value)
    elif name == "n" and not value.isdigit():
        raise UsageError(f"invalid value {value!r} for flag -n")


def find_files(paths: list[str], ignore: list[str]) -> list[str]:
    patterns = [re.compile(p) for p in ignore]
    files: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for found in sorted(path.rglob("*")):
                if found.is_file() and found.suffix in (".yaml", ".yml", ".json"):
                    files.append(str(found))
        else:
            files.append(raw)
    return [f for f in files if not any(p.search(f) for p in patterns)]


def run(options: Options) -> list[Result]:
    version = options.kubernetes_version
    if version == "master":
        version = bundled_versions()[-1]
    registry = SchemaRegistry(options.schema_locations or ["default"], version, options.strict)
    results: list[Result] = []
    sources = find_files(options.paths, options.ignore_patterns) if options.paths else ["-"]
    for filename in sources:
        for result in _validate_file(filename, registry, options):
            results.append(result)
            if options.exit_on_error and result.status in (INVALID, ERROR):
                return results
    return results


def _validate_file(filename: str, registry: SchemaRegistry, options: Options) -> list[Result]:
    shown = "stdin" if filename == "-" else filename
    try:
        text = decode(sys.stdin.buffer.read(), "stdin") if filename == "-" else read_text(filename)
        documents = load_documents(text, source=shown, file=shown)
    except InputError as exc:
        message = exc.message if exc.line is None else f"line {exc.line}: {exc.message}"
        if filename != "-" and not os.path.exists(filename):
            message = f"failed opening {filename}: no such file or directory"
        return [Result(shown, "", "", "", "", ERROR, message)]
    if not documents:
        return [Result(shown, "", "", "", "", EMPTY)]
    return [_validate_document(doc, shown, registry, options) for doc in documents]


def _validate_document(
    doc: Document, filename: str, registry: SchemaRegistry, options: Options
) -> Result:
    result = Result(filename, doc.kind, doc.name, doc.namespace, doc.api_version, VALID)
    signature = {doc.kind, f"{doc.api_version}/{doc.kind}"}
    if signature & set(options.skip):
        result.status = SKIPPED
        return result
    if signature & set(options.reject):
        result.status, result.msg = ERROR, f"prohibited resource kind {doc.kind}"
        return result
    found = violations(doc, registry)
    if found is None:
        if options.ignore_missing_schemas:
            result.status = SKIPPED
        else:
            result.status, result.msg = ERROR, f"could not find schema for {doc.kind}"
        return result
    if found:
        result.status = INVALID
        result.errors = [(_pointer(v.path), v.message) for v in found]
        result.msg = " - ".join(f"{msg} at '{ptr}'" if ptr else msg for ptr, msg in result.errors)
    return result


def _pointer(path: tuple) -> str:
    parts = [str(p).replace("~", "~0").replace("/", "~1") for p in path]
    return "/" + "/".join(parts) if parts else ""


def exit_code(results: list[Result]) -> int:
    return 1 if any(r.status in (INVALID, ERROR) for r in results) else 0
