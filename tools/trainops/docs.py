"""Generates the reference parts of docs/ from the code, so they cannot drift.

`python -m trainops.docs` rewrites docs/cli.md (every command's --help),
docs/policies.md (every rule's id, severity, why and fix), the profile key
table in docs/overlays.md and the doctor's findings in docs/runbook.md (between
their GENERATED markers);
`--check` only reports what is stale. tests/test_docs.py runs the check.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from trainops.fsutil import write_if_changed

BEGIN = "<!-- GENERATED: {name} -->"
END = "<!-- END GENERATED: {name} -->"


def cli_reference() -> str:
    from trainops.cli import cli

    lines = [
        "# trainops command reference",
        "",
        "Generated from the commands' `--help` by `python -m trainops.docs`; do not edit.",
        "",
    ]

    def walk(command: click.Command, name: str, parent: click.Context | None) -> None:
        # A fixed width keeps the text identical whatever terminal generates it.
        context = click.Context(
            command,
            info_name=name,
            parent=parent,
            terminal_width=88,
            max_content_width=88,
            **(cli.context_settings if parent is None else {}),
        )
        lines.extend(
            [f"## `{context.command_path}`", "", "```", command.get_help(context), "```", ""]
        )
        if isinstance(command, click.Group):
            for child in sorted(command.list_commands(context)):
                walk(command.get_command(context, child), child, context)

    walk(cli, "trainops", None)
    return "\n".join(lines)


def profile_table() -> str:
    from trainops.profile.model import FIELD_DOCS, REQUIRED, ClusterProfile
    from trainops.profile.observability_settings import SECTIONS

    defaults = ClusterProfile(name="x", fabric="tcp", gpusPerNode=1, nodes=1, image="i:1")
    rows = ["| Key | Required | Default | Meaning |", "|---|---|---|---|"]
    for key, doc in FIELD_DOCS.items():
        default = getattr(defaults, key)
        derived = key in REQUIRED or default in ("", None, [], {}, 0)
        shown = "" if derived else f"`{default}`"
        rows.append(f"| `{key}` | {'yes' if key in REQUIRED else ''} | {shown} | {doc} |")
        for sub, (_, sub_default, sub_doc) in SECTIONS.get(key, {}).items():
            if isinstance(sub_default, bool):
                sub_default = str(sub_default).lower()
            sub_shown = "" if sub_default is None else f"`{sub_default}`"
            rows.append(f"| `{key}.{sub}` |  | {sub_shown} | {sub_doc} |")
    return "\n".join(rows)


def policy_reference(pack: Path) -> str:
    from trainops.policy.engine import EXEMPT_PREFIX
    from trainops.policy.settings import load_pack
    from trainops.rules import DOCTOR, catalog

    load_pack(pack)
    rules = sorted(
        (r for r in catalog().values() if r.category != DOCTOR),
        key=lambda r: (r.category != "builtin", r.id),
    )
    lines = [
        "# Policy reference",
        "",
        "Generated from the rules by `python -m trainops.docs`; do not edit. `trainops policies",
        "explain ID` prints the same text. `trainops validate` runs every rule after the schema",
        "check; runs and job templates of a cluster are checked together with that cluster's",
        "platform (networks, volumes, queues) and profile.",
        "",
        "Exempt one resource with an annotation that gives the reason,",
        f"`{EXEMPT_PREFIX}<rule-id>: <why>`, or several resources until a date in",
        "`policies/config.yaml`, which also overrides severities (`off` disables a rule).",
        "",
        "| Rule | Severity | Checks |",
        "|---|---|---|",
    ]
    lines += [f"| [`{r.id}`](#{r.id}) | {r.severity} | {r.title} |" for r in rules]
    for rule in rules:
        lines += ["", f"## {rule.id}", "", f"**{rule.title}** ({rule.severity})", ""]
        if rule.kinds:
            lines += [f"Applies to: {', '.join(rule.kinds)}.", ""]
        lines += [f"Why: {rule.why}", "", f"Fix: {rule.fix}"]
    return "\n".join(lines) + "\n"


def doctor_findings() -> str:
    """Every finding id `trainops doctor` prints, from the rule catalog."""
    import trainops.cli.doctor  # noqa: F401 - registers the doctor's checks
    from trainops.rules import DOCTOR, catalog

    rules = sorted((r for r in catalog().values() if r.category == DOCTOR), key=lambda r: r.id)
    rows = ["| Finding | Severity | Checks | Fix |", "|---|---|---|---|"]
    for rule in rules:
        cells = (f"`{rule.id}`", rule.severity, f"{rule.title}. {rule.why}", rule.fix)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


def splice(text: str, name: str, body: str) -> str:
    begin, end = BEGIN.format(name=name), END.format(name=name)
    head, found, rest = text.partition(begin)
    if not found:
        raise ValueError(f"marker {begin} missing")
    _, found, tail = rest.partition(end)
    if not found:
        raise ValueError(f"marker {end} missing")
    return f"{head}{begin}\n{body}\n{end}{tail}"


def targets(root: Path) -> dict[Path, Callable[[str], str]]:
    """File -> function from its current text to its generated text."""
    return {
        root / "docs" / "cli.md": lambda _: cli_reference() + "\n",
        root / "docs" / "overlays.md": lambda text: splice(text, "profile keys", profile_table()),
        root / "docs" / "policies.md": lambda _: policy_reference(root / "policies"),
        root / "docs" / "runbook.md": lambda text: splice(
            text, "doctor findings", doctor_findings()
        ),
    }


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[2]
    stale = []
    for path, make in targets(root).items():
        current = path.read_text() if path.exists() else ""
        wanted = make(current)
        if current != wanted:
            stale.append(path)
            if "--check" not in argv:
                write_if_changed(path, wanted)
    for path in stale:
        print(f"{'stale' if '--check' in argv else 'wrote'}: {path.relative_to(root)}")
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
