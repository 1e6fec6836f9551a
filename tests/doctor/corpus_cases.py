"""The real-world corpus in tests/doctor/corpus: one public GitHub thread per file.

Each file has a header (`source:` link, `diagnosis:` the thread's conclusion in our
words, `outcome:` failed or degraded, `expect:` the finding id that names that cause,
optionally `also:` other findings that are true but not the cause, `command:` nccl or
nccl-tests, `miss:` why the doctor does not name the cause when it does not), a `---`
line, then the log lines as the thread pasted them, trimmed to the relevant part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trainops.doctor import nccl_tests
from trainops.doctor.analysis import diagnose
from trainops.doctor.expectation import Expectation
from trainops.doctor.sources import memory_stream
from trainops.model import ERROR, WARNING

CORPUS = Path(__file__).parent / "corpus"
FIELDS = ("source", "diagnosis", "outcome", "expect", "also", "command", "miss")


@dataclass
class Case:
    path: Path
    source: str
    diagnosis: str
    outcome: str
    expect: str
    lines: list[str]
    also: set[str] = field(default_factory=set)
    command: str = "nccl"
    miss: str | None = None

    @property
    def name(self) -> str:
        return self.path.stem


def load(path: Path) -> Case:
    header, separator, body = path.read_text().partition("\n---\n")
    assert separator, f"{path}: no --- line"
    values: dict[str, str] = {}
    for line in header.splitlines():
        key, _, value = line.partition(": ")
        assert key in FIELDS, f"{path}: unknown header {key!r}"
        values[key] = value.strip()
    return Case(
        path=path,
        source=values["source"],
        diagnosis=values["diagnosis"],
        outcome=values["outcome"],
        expect=values["expect"],
        lines=body.splitlines(),
        also=set(values.get("also", "").split()),
        command=values.get("command", "nccl"),
        miss=values.get("miss"),
    )


def cases() -> list[Case]:
    return [load(path) for path in sorted(CORPUS.glob("*.txt"))]


@dataclass
class Answer:
    """What the doctor said about one case."""

    rules: list[str]  # every finding id, in report order
    serious: list[tuple[str, str]]  # (id, message) of error and warning findings
    says_no_problems: bool

    def named(self, case: Case) -> bool:
        return case.expect in self.rules

    def wrong(self, case: Case) -> list[tuple[str, str]]:
        """Error or warning findings that are neither the cause nor listed as true."""
        allowed = {case.expect} | case.also
        return [(rule, message) for rule, message in self.serious if rule not in allowed]


def answer(case: Case) -> Answer:
    stream = memory_stream(case.path.name, case.lines)
    if case.command == "nccl-tests":
        found = nccl_tests.analyse(nccl_tests.read_runs([stream]), None, 0.8)
        serious = [(f.rule, f.message) for f in found if f.severity in (ERROR, WARNING)]
        return Answer([f.rule for f in found], serious, not found)
    diagnosis = diagnose([stream], Expectation())
    findings = diagnosis.findings
    serious = [(f.rule, f.message) for f in findings if f.severity in (ERROR, WARNING)]
    return Answer([f.rule for f in findings], serious, not serious and not diagnosis.failed)
