"""Extract the message formats of NCCL and aws-ofi-nccl from their sources, at every release.

A maintainer's tool, run when a new release is supported (`make doctor-catalog`): it reads
each release tag of a local git clone with `git grep` and `git show`, finds every
`WARN(...)` and `INFO(flags, ...)` call, resolves the format string (concatenated literals,
`PRIu64`-style macros) and writes one record per distinct format with the newest release
that prints it, the file and line there, and the first release, into the doctor's catalog
(tools/trainops/doctor/catalog/<component>.yaml). What people wrote there (finding,
severity, meaning, fix) is kept for every format the sources still print; a new format
gets severity `unclassified`, which tests/doctor/test_message_catalog.py refuses until
someone reads its code and classifies it. The checking macros of NCCL's include/checks.h
that warn with the call's name (SYSCHECK's `"Call to " name " failed: %s"`), and those a
source file defines for itself (nvmlwrap.cc's NVMLCHECK, `#name "() failed: %s"`), are
expanded at each use, so "Call to bind failed: %s" is a format of socket.cc and
"nvmlDeviceGetHandleByPciBusId() failed: %s" one of nvmlwrap.cc. A record marked
`expanded: true` was written by hand for what no call shows whole (a later line of a
multi-line warning, a wrapper of another library's macro) and is kept as it is.

    python scripts/extract-doctor-messages.py ~/src/nccl --component nccl
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import yaml

_MACROS = {
    "PRIu64": "lu",
    "PRId64": "ld",
    "PRIx64": "lx",
    "PRIX64": "lX",
    "PRIi64": "li",
    "PRIu32": "u",
    "PRId32": "d",
    "PRIx32": "x",
    "PRIu16": "u",
    "PRIu8": "u",
    "PRIxPTR": "lx",
    "PRIuPTR": "lu",
}
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'", "0": ""}
_MAX_CALL = 4000
# An INFO format is user-facing when it reports a decision or a problem: a fallback, a
# disabled feature, a value read from the environment, the version, the transport chosen.
# The rest (topology dumps, per-channel detail) is context the parsers read without a catalog.
USER_FACING_INFO = re.compile(
    r"fail|error|unable|cannot|can't|could not|couldn't|not |disabl|fallback|falling|fall back"
    r"|ignor|invalid|mismatch|timeout|timed out|retry|abort|skip|unsupported|no \w+ found"
    r"|warning|deprecated|too many|too large|too small|exceed|limit|Using network|NET/Plugin"
    r"|version|Init COMPLETE|via NET|via P2P|via SHM|set by environment|set to",
    re.IGNORECASE,
)


COMPONENTS = {
    # component: (repository URL, first minor release, source roots, WARN macro, INFO macro,
    # the text the macro puts before the format)
    "nccl": ("https://github.com/NVIDIA/nccl", (2, 18), ("src",), "WARN", "INFO", ""),
    "aws-ofi-nccl": (
        "https://github.com/aws/aws-ofi-nccl",
        (1, 14),
        ("src", "include"),
        "NCCL_OFI_WARN",
        "NCCL_OFI_INFO",
        "NET/OFI ",
    ),
}


def _tags(repo: Path, first: tuple[int, int]) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(repo), "tag"], capture_output=True, text=True, check=True
    ).stdout.split()

    def version(tag: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", tag))

    chosen = [t for t in out if re.fullmatch(r"v\d+\.\d+\.\d+(-\d+|-aws)?", t)]
    chosen = [t for t in chosen if version(t)[:2] >= first]
    return sorted(chosen, key=version)


def _arguments(text: str, start: int) -> list[str] | None:
    """The top-level arguments of the call whose `(` is at `start`, or None if unbalanced."""
    depth, current, args, index = 0, [], [], start
    in_string = None
    while index < min(len(text), start + _MAX_CALL):
        char = text[index]
        if in_string:
            current.append(char)
            if char == "\\":
                current.append(text[index + 1])
                index += 1
            elif char == in_string:
                in_string = None
        elif char in "\"'":
            in_string = char
            current.append(char)
        elif char == "(":
            depth += 1
            if depth > 1:
                current.append(char)
        elif char == ")":
            depth -= 1
            if depth == 0:
                args.append("".join(current).strip())
                return args
            current.append(char)
        elif char == "," and depth == 1:
            args.append("".join(current).strip())
            current = []
        else:
            current.append(char)
        index += 1
    return None


def format_string(expression: str) -> str | None:
    """Concatenated C string literals and PRI macros -> the format; None if not a literal."""
    parts, index = [], 0
    expression = expression.strip()
    while index < len(expression):
        char = expression[index]
        if char.isspace():
            index += 1
        elif char == '"':
            index += 1
            while index < len(expression) and expression[index] != '"':
                if expression[index] == "\\" and index + 1 < len(expression):
                    parts.append(_ESCAPES.get(expression[index + 1], expression[index + 1]))
                    index += 2
                else:
                    parts.append(expression[index])
                    index += 1
            index += 1
        else:
            word = re.match(r"[A-Za-z_]\w*", expression[index:])
            if not word or word.group(0) not in _MACROS:
                return None
            parts.append(_MACROS[word.group(0)])
            index += len(word.group(0))
    return "".join(parts) if parts else None


def _calls(source: str, call: re.Pattern, warn: str):
    """(level, flags, format, line) of every WARN/INFO call in one file."""
    for found in call.finditer(source):
        before = source[max(0, found.start() - 8) : found.start()]
        if before.endswith(("define ", "_")):
            continue
        args = _arguments(source, found.end() - 1)
        if not args:
            continue
        level = "WARN" if found.group(1) == warn else "INFO"
        flags, fmt_arg = (
            (None, args[0]) if level == "WARN" else (args[0], args[1] if len(args) > 1 else "")
        )
        fmt = format_string(fmt_arg)
        if fmt is None:
            continue
        yield level, flags, fmt, source.count("\n", 0, found.start()) + 1


_DEFINE = re.compile(r"#define\s+(\w+)\(([^)]*)\)((?:[^\n]*\\\n)*[^\n]*)")
_NAMED_WARN = re.compile(r'WARN\(\s*"((?:[^"\\]|\\.)*)"\s*name\s*"((?:[^"\\]|\\.)*)"')
# nvmlwrap.cc's NVMLCHECK: `WARN(#name "() failed: %s", ...)`, the called function's name.
_STRINGIFIED_WARN = re.compile(r'WARN\(\s*#name\s*"((?:[^"\\]|\\.)*)"')
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def checking_macros(header: str) -> dict[str, tuple[int, str, str, bool]]:
    """Macro -> (position of its `name` parameter, text before and after the name, whether
    the name is an identifier it stringifies) for each macro whose warning prints the name
    it is given: checks.h's SYSCHECK and its kin, and any defined in a source file."""
    found = {}
    for define in _DEFINE.finditer(header):
        params = [p.strip() for p in define.group(2).split(",")]
        if "name" not in params:
            continue
        if warn := _NAMED_WARN.search(define.group(3)):
            found[define.group(1)] = (params.index("name"), warn.group(1), warn.group(2), False)
        elif warn := _STRINGIFIED_WARN.search(define.group(3)):
            found[define.group(1)] = (params.index("name"), "", warn.group(1), True)
    return found


def _macro_calls(source: str, macros: dict[str, tuple[int, str, str, bool]]):
    """(WARN, None, format, line) of each use of a checking macro with a literal name."""
    if not macros:
        return
    call = re.compile(rf"\b({'|'.join(sorted(macros))})\s*\(")
    for found in call.finditer(source):
        if source[max(0, found.start() - 8) : found.start()].endswith("define "):
            continue
        position, before, after, stringified = macros[found.group(1)]
        args = _arguments(source, found.end() - 1)
        name = args[position] if args and len(args) > position else None
        if stringified:
            name = name if name is not None and _IDENTIFIER.fullmatch(name) else None
        elif name is not None:
            name = format_string(name)
        if name is not None:
            yield "WARN", None, before + name + after, source.count("\n", 0, found.start()) + 1


def _show(repo: Path, tag: str, path: str) -> str:
    """A file as the release has it ("" where the release has no such file)."""
    return subprocess.run(
        ["git", "-C", str(repo), "show", f"{tag}:{path}"],
        capture_output=True,
        text=True,
        errors="replace",
    ).stdout


def extract(repo: Path, component: str) -> list[dict]:
    url, first, roots, warn, info, prefix = COMPONENTS[component]
    call = re.compile(rf"\b({warn}|{info})\s*\(")
    records: dict[tuple[str, str], dict] = {}
    for tag in _tags(repo, first):
        macros = (
            checking_macros(_show(repo, tag, "src/include/checks.h")) if component == "nccl" else {}
        )
        names = "|".join([warn, info, *sorted(macros)])
        listing = subprocess.run(
            [
                "git",
                "-C",
                str(repo),
                "grep",
                "-l",
                "-E",
                rf"\b({names})\s*\(",
                tag,
                "--",
                *roots,
            ],
            capture_output=True,
            text=True,
        ).stdout.split()
        for entry in listing:
            path = entry.split(":", 1)[1]
            if not path.endswith((".c", ".cc", ".cu", ".h", ".cpp", ".hpp")):
                continue
            source = _show(repo, tag, path)
            local = checking_macros(source) if component == "nccl" else {}
            found = [*_calls(source, call, warn), *_macro_calls(source, {**macros, **local})]
            for level, flags, fmt, line in found:
                if level == "INFO" and not USER_FACING_INFO.search(fmt):
                    continue
                fmt = prefix + fmt
                record = records.setdefault(
                    (level, fmt),
                    {"level": level, "format": fmt, "first": tag},
                )
                # The newest release's line; of files printing the same format in one release,
                # one on the job's own path rather than the Windows port or the RAS service
                # (src/ras/), which runs beside the job and whose failures NCCL goes on without.
                aside = "windows" in path.lower() or path.startswith("src/ras/")
                if record.get("last") != tag or not aside or record.get("aside", True):
                    record["source"] = f"{url}/blob/{tag}/{path}#L{line}"
                    record["aside"] = aside
                record["last"] = tag
                if flags:
                    record["subsystem"] = flags.replace("NCCL_", "").replace(" ", "")
    return sorted(records.values(), key=lambda r: (r["source"].split("#")[0], r["format"]))


CATALOG = Path(__file__).resolve().parents[1] / "tools" / "trainops" / "doctor" / "catalog"
KEPT = ("finding", "severity", "meaning", "fix")


def merge(rows: list[dict], current: list[dict]) -> list[dict]:
    """The extracted formats in the catalog's shape, with what people wrote kept."""
    written = {(e["level"], e["key"]): e for e in current}
    extracted = {(row["level"], row["format"]) for row in rows}
    merged = []
    for row in rows:
        entry = {"key": row["format"], "level": row["level"], "source": row["source"]}
        row.pop("aside", None)
        entry |= {"first": row["first"], "last": row["last"]}
        before = written.get((row["level"], row["format"]))
        if before is None:
            entry |= {"finding": "nccl-warning", "severity": "unclassified", "meaning": ""}
        else:
            entry |= {k: before[k] for k in KEPT if k in before}
        merged.append(entry)
    merged += [e for e in current if e.get("expanded") and (e["level"], e["key"]) not in extracted]
    return sorted(merged, key=lambda e: (e["source"].split("#")[0], e["key"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("repo", type=Path, help="a git clone of the component, with its tags")
    parser.add_argument("--component", choices=sorted(COMPONENTS), required=True)
    parser.add_argument(
        "--catalog",
        type=Path,
        default=CATALOG,
        help="the catalog directory (default: the doctor's)",
    )
    args = parser.parse_args(argv)
    if not (args.repo / ".git").exists() and not (args.repo / "HEAD").exists():
        parser.error(f"{args.repo}: not a git clone")
    path = args.catalog / f"{args.component}.yaml"
    text = path.read_text() if path.exists() else ""
    head = "".join(line for line in text.splitlines(True) if line.startswith("#"))
    current = yaml.safe_load(text) or []
    merged = merge(extract(args.repo, args.component), current)
    body = yaml.safe_dump(merged, sort_keys=False, allow_unicode=True, width=100)
    temporary = path.with_suffix(".yaml.tmp")
    temporary.write_text(head + body)
    temporary.replace(path)
    new = sum(1 for e in merged if e["severity"] == "unclassified")
    print(f"{len(merged)} formats, {new} to classify -> {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
