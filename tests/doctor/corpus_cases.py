"""The real-world corpus in tests/doctor/corpus: one public GitHub thread per file.

Each file has a header (`source:` link, `diagnosis:` the thread's conclusion in our
words, `outcome:` failed or degraded, `expect:` the finding id that names that cause,
optionally `also:` other findings that are true but not the cause, `command:` nccl or
nccl-tests, `cue:` a phrase the expected finding's message must contain to count as
naming the cause, `set:` development (collected while the checks were written) or
held-out (collected after, to measure them), `miss:` why the doctor does not name the
cause when it does not), a `---` line, then the log lines as the thread pasted them,
trimmed to the relevant part.
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
FIELDS = ("source", "diagnosis", "outcome", "set", "expect", "cue", "also", "command", "miss")


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
    cue: str | None = None
    set: str = "development"
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
        cue=values.get("cue"),
        set=values.get("set", "development"),
        miss=values.get("miss"),
    )


def cases() -> list[Case]:
    return [load(path) for path in sorted(CORPUS.glob("*.txt"))]


@dataclass
class Answer:
    """What the doctor said about one case."""

    findings: list[tuple[str, str]]  # (id, message) of every finding, in report order
    serious: list[tuple[str, str]]  # (id, message) of error and warning findings
    says_no_problems: bool

    @property
    def rules(self) -> list[str]:
        return [rule for rule, _ in self.findings]

    def named(self, case: Case) -> bool:
        """The expected finding is there and, with a cue, its message carries it."""
        messages = [message for rule, message in self.findings if rule == case.expect]
        cue = (case.cue or "").lower()
        return any(cue in message.lower() for message in messages)

    def wrong(self, case: Case) -> list[tuple[str, str]]:
        """Error or warning findings that are neither the cause nor listed as true; the
        doctor saying it does not know (`failure-unrecognised`) or that the logs do not show
        the job worked (`outcome-unproven`) is a miss, not wrong."""
        allowed = {case.expect, "failure-unrecognised", "outcome-unproven"} | case.also
        return [(rule, message) for rule, message in self.serious if rule not in allowed]


def answer(case: Case) -> Answer:
    stream = memory_stream(case.path.name, case.lines)
    if case.command == "nccl-tests":
        found = nccl_tests.analyse(nccl_tests.read_runs([stream]), None, 0.8)
        serious = [(f.rule, f.message) for f in found if f.severity in (ERROR, WARNING)]
        return Answer([(f.rule, f.message) for f in found], serious, not found)
    diagnosis = diagnose([stream], Expectation())
    findings = diagnosis.findings
    serious = [(f.rule, f.message) for f in findings if f.severity in (ERROR, WARNING)]
    everything = [(f.rule, f.message) for f in findings]
    return Answer(everything, serious, not serious and not diagnosis.failed)
