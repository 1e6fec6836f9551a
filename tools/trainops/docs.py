"""Generates the reference parts of docs/ from the code, so they cannot drift.

`python -m trainops.docs` rewrites docs/cli.md (every command's --help),
docs/policies.md (every rule's id, severity, why, fix, the real manifests it fires on
and stays quiet on, policies/examples.yaml, and the failure modes it catches),
docs/failure-modes.md (the catalog in policies/catalog/), the profile key
table in docs/overlays.md and the doctor's findings in docs/runbook.md (between
their GENERATED markers), and docs/doctor-messages.md (the doctor's message catalog);
`--check` only reports what is stale. tests/test_docs.py runs the check.
"""

from __future__ import annotations

import importlib
import re
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
    from trainops import failures
    from trainops.policy import SECURITY
    from trainops.policy.exemptions import EXEMPT_PREFIX
    from trainops.policy.settings import load_all
    from trainops.rules import DOCTOR, catalog

    load_all(pack)
    caught = failures.by_check(failures.load(pack / "catalog"))
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
        "Security rules (marked below) take exemptions only from `policies/config.yaml`,",
        "or from annotations on the paths its `annotation-paths` lists, never in a run:",
        "the change being checked cannot switch its own checks off. Every exemption in",
        "effect is reported (`exemption-in-effect`).",
        "",
        "## Severity contract",
        "",
        "- `error`: a cited, pinned source (an upstream code line or a versioned document,",
        "  listed under the rule as Sources) shows that the cluster refuses the object (the API",
        "  server, an operator's webhook, the namespace's Pod Security level, a",
        "  ValidatingAdmissionPolicy) or that the workload fails, hangs, loses data or runs",
        "  silently wrong.",
        "- `warning`: degradation, risk, or a security posture nobody declared.",
        "- `info`: advice and context.",
        "",
        "A rule that reports more than one severity says when it reports each. Host access",
        "(host namespaces and paths, privileges, capabilities, another service account) is",
        "graded by posture: an error in a run or a team's namespace and where",
        "`policies/config.yaml` says `security: enforce` for the path or namespace, info on a",
        "node agent (a DaemonSet mounting the kubelet's, CNI, device-plugin or driver paths),",
        "a warning elsewhere. tests/test_severity_contract.py holds every rule to this.",
        "",
        "| Rule | Severity | Checks |",
        "|---|---|---|",
    ]
    lines += [f"| [`{r.id}`](#{r.id}) | {r.severity} | {r.title} |" for r in rules]
    examples = _examples(pack)
    for rule in rules:
        marker = ", security rule" if rule.category == SECURITY else ""
        lines += ["", f"## {rule.id}", "", f"**{rule.title}** ({rule.severity}{marker})", ""]
        if rule.kinds:
            lines += [f"Applies to: {', '.join(rule.kinds)}.", ""]
        lines += [f"Why: {rule.why}", "", f"Fix: {rule.fix}"]
        if rule.when:
            lines += [
                "",
                "Severity: " + "; ".join(f"{lvl} {cond}" for lvl, cond in rule.when) + ".",
            ]
        if rule.sources:
            lines += [
                "",
                "Sources: "
                + ", ".join(
                    f"<{url}>"
                    if url.startswith("https://")
                    else f"[{url}]({url.removeprefix('docs/')})"
                    for url in rule.sources
                )
                + ".",
            ]
        if rule.id in examples:
            lines += ["", examples[rule.id]]
        if rule.id in caught:
            links = ", ".join(f"[{e.id}](failure-modes.md#{e.id})" for e in caught[rule.id])
            lines += ["", f"Catches: {links}."]
    return "\n".join(lines) + "\n"


def failure_modes(pack: Path) -> str:
    """docs/failure-modes.md: the catalog, a summary per component, then every entry."""
    from trainops import failures

    components = failures.load(pack / "catalog")
    kinds = check_kinds(pack)
    unknown = sorted(set(failures.by_check(components)) - set(kinds))
    if unknown:
        raise ValueError(f"the catalog names checks that do not exist: {', '.join(unknown)}")
    columns = ("policy", "admission", failures.DIFF)

    def caught_by(entry: failures.Entry, kind: str) -> bool:
        return any(kinds[c] == kind for c in entry.caught)

    lines = [
        "# Failure modes of training on Kubernetes",
        "",
        "Generated from `policies/catalog/*.yaml` by `python -m trainops.docs`; do not edit.",
        "Each entry is a way a run goes wrong that a public tracker thread or upstream source",
        "shows: what is written, what happens, the source, and the check that catches it before",
        "Argo CD syncs (a policy rule, the API server's and operators' admission checks, or",
        "`trainops diff`), or why only the live cluster can tell (where the doctor recognises",
        "it at run time, its finding is named).",
        "",
        "| Component | Version | Entries | Policy rules | Admission checks | trainops diff "
        "| Not detectable offline |",
        "|---|---|---|---|---|---|---|",
    ]
    totals = [0] * 5
    for component in components:
        rows = component.entries
        numbers = [len(rows), *(sum(caught_by(e, k) for e in rows) for k in columns)]
        numbers.append(sum(e.offline is not None for e in rows))
        totals = [a + b for a, b in zip(totals, numbers, strict=True)]
        cells = " | ".join(str(n) for n in numbers)
        lines.append(f"| [{component.name}](#{component.key}) | {component.version} | {cells} |")
    lines += [
        f"| Total | | {' | '.join(str(n) for n in totals)} |",
        "",
        "An entry counts in every column whose checks catch it. The admission checks are "
        "[`schema`](policies.md#schema), [`cel`](policies.md#cel), "
        "[`api-validation`](policies.md#api-validation) and [`webhook`](policies.md#webhook).",
    ]
    for component in components:
        lines += ["", f"## {component.key}", "", f"{component.name}, {component.version}."]
        for entry in component.entries:
            lines += [
                "",
                f"### {entry.id}",
                "",
                f"- Written: {entry.writes}",
                f"- Happens ({failures.HAPPENS[entry.happens]}): {entry.effect}",
                f"- Source: <{entry.source}>",
            ]
            offline = [_check_link(c) for c in entry.caught if kinds[c] != "doctor"]
            if offline:
                lines.append(f"- Caught by: {', '.join(offline)}")
            if entry.offline is not None:
                lines.append(f"- Not detectable offline: {entry.offline}")
            doctor = [f"`{c}`" for c in entry.caught if kinds[c] == "doctor"]
            if doctor:
                lines.append(
                    f"- At run time: `trainops doctor` reports {', '.join(doctor)} "
                    "([runbook](runbook.md))."
                )
    return "\n".join(lines) + "\n"


def check_kinds(pack: Path) -> dict[str, str]:
    """Every id a catalog entry may name -> policy | admission | doctor | diff."""
    from trainops import failures
    from trainops.policy.settings import load_all
    from trainops.rules import DOCTOR, catalog

    load_all(pack)
    kinds = {
        rule.id: "doctor"
        if rule.category == DOCTOR
        else ("policy" if rule.category == "policy" else "admission")
        for rule in catalog().values()
    }
    kinds[failures.DIFF] = failures.DIFF
    return kinds


def _check_link(check: str) -> str:
    if check == "diff":
        return "`trainops diff` (a warning before the sync)"
    return f"[`{check}`](policies.md#{check})"


_SOURCE = re.compile(r"https://github\.com/(\S+) at (\S+) \(commit ([0-9a-f]{12})")


def _examples(pack: Path) -> dict[str, str]:
    """Rule id -> the line naming the real manifests it fires on and stays quiet on
    (pack/examples.yaml; tests/test_rule_examples.py checks them)."""
    path = pack / "examples.yaml"
    if not path.is_file():
        return {}
    import yaml

    root = pack.parent
    cases = {c["name"]: c for c in yaml.safe_load((root / "tests/heldout/cases.yaml").read_text())}
    out = {}
    for rule, entry in yaml.safe_load(path.read_text()).items():
        if "fires" in entry:
            fires = f"fires on {_manifest(root, entry['fires'])}"
        elif "case" in entry:
            case = cases[entry["case"]]
            fires = (
                "no manifest of the corpus has this problem; the held-out case "
                f"`{case['name']}` ({case['source']}) shows it"
            )
        else:
            fires = "no manifest of the corpus has this problem; its fixture shows it"
        if "quiet" in entry:
            quiet = f"quiet on {_manifest(root, entry['quiet'])}"
        else:
            quiet = f"quiet on the good variant of held-out case `{entry['quiet_case']}`"
        out[rule] = f"Seen on: {fires}; {quiet}."
    return out


def _manifest(root: Path, path: str) -> str:
    """`path` and where it comes from (its corpus set's SOURCE.md)."""
    parts = Path(path).parts
    if parts[:2] == ("tests", "corpus"):
        source = (root / "tests" / "corpus" / parts[2] / "SOURCE.md").read_text()
        found = _SOURCE.search(source)
        if found:
            repo, ref, commit = found.groups()
            pinned = ref if ref.startswith(commit) else f"{ref}, {commit}"
            return f"`{path}` ({repo} {pinned})"
    if parts[:2] == ("tests", "seeds"):
        return f"`{path}` (a reference article's manifest)"
    if parts[0] == "upstream":
        return f"`{path}` (../shared/upstream)"
    if parts[0] == "crds":
        return f"`{path}` (vendored upstream CRD)"
    return f"`{path}` (this repository)"


def doctor_findings() -> str:
    """Every finding id `trainops doctor` prints, from the rule catalog."""
    from trainops.policy.settings import CATALOG_MODULES
    from trainops.rules import DOCTOR, catalog

    for module in CATALOG_MODULES:
        importlib.import_module(module)

    rules = sorted((r for r in catalog().values() if r.category == DOCTOR), key=lambda r: r.id)
    rows = ["| Finding | Severity | Checks | Fix |", "|---|---|---|---|"]
    for rule in rules:
        cells = (f"`{rule.id}`", rule.severity, f"{rule.title}. {rule.why}", rule.fix)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


def doctor_messages() -> str:
    """The doctor's message catalog: per component, each message with what it raises."""
    from trainops.doctor import catalog

    entries = catalog.entries()
    lines = [
        "# The doctor's message catalog",
        "",
        "Generated from `tools/trainops/doctor/catalog/*.yaml` by `python -m trainops.docs`; "
        "do not edit. Every message the doctor recognises by its source: each WARN and "
        "user-facing INFO format of NCCL 2.18 on and of aws-ofi-nccl 1.14 on (read from every "
        "release's sources by `scripts/extract-doctor-messages.py`), NCCL's result strings as "
        "its callers quote them, libfabric's EFA errors, UCX's errors, the error strings of "
        "torch.distributed and torch.cuda (with earlier wordings), Gloo's transport errors, "
        "Horovod's stall inspector, mismatch and launch errors, Accelerate's refusals to "
        "prepare a model placed for one process, Open MPI mpirun's launch "
        "failures and its TCP BTL's unreachable and lost peers, the CUDA error names and "
        "NVIDIA's Xid table. "
        "Each raises the finding shown at the severity shown; `benign` lines are printed by "
        "working systems and `evidence` lines are context (versions, transports, settings). "
        "`trainops policies explain ID` explains a finding.",
        "",
    ]
    counts = {c: sum(1 for e in entries if e.component == c) for c in catalog.COMPONENTS}
    lines += [f"- {c}: {n} messages" for c, n in counts.items()] + [""]
    lines += ["## Findings only the catalog raises", "", "| Finding | Severity | Checks |"]
    lines.append("|---|---|---|")
    for family in catalog.families().values():
        lines.append(f"| `{family.id}` | {family.severity} | {family.title}. {family.why} |")
    lines.append("")
    for component in catalog.COMPONENTS:
        chosen = sorted(
            (e for e in entries if e.component == component),
            key=lambda e: (e.finding, e.key),
        )
        if not chosen:
            continue
        lines += [f"## {component}", "", "| Message | Finding | Severity | Meaning | Source |"]
        lines.append("|---|---|---|---|---|")
        for e in chosen:
            shown = e.key if component != "cuda" else f"{e.key}: {e.text}"
            shown = " ".join(shown.split())
            where = e.source.split("/blob/")[-1].split("#")[0] if "/blob/" in e.source else "doc"
            cells = (
                f"`{shown.replace('`', chr(39))}`",
                f"`{e.finding}`",
                e.severity,
                e.meaning + (f" Fix: {e.fix}" if e.fix else ""),
                f"[{where}]({e.source})",
            )
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


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
        root / "docs" / "failure-modes.md": lambda _: failure_modes(root / "policies"),
        root / "docs" / "runbook.md": lambda text: splice(
            text, "doctor findings", doctor_findings()
        ),
        root / "docs" / "doctor-messages.md": lambda _: doctor_messages(),
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
