"""A bound on retries that make no progress, kept in the checkpoint directory.

Under the operator's `ExitCode` policy every exit of 128 or more recreates the pod
and is never counted against `backoffLimit` (kubeflow/trainer#2045): a failure that
comes back every time (a bad GPU the pod keeps landing on, a CUDA error the program
itself causes) would restart forever. So each node's `trainer-launch` counts its
retryable failures in `<checkpoint dir>/.trainer-launch/`, a directory that outlives
the pod. Progress resets the count: a new entry in the checkpoint directory (a new
checkpoint; partial `.tmp` saves, set-aside `.corrupt` ones and hidden files do not
count). After `TRAINER_RETRY_BUDGET` (default 5) failures in a row without progress
the launcher exits `RETRIES_EXHAUSTED`, which the operator does not retry. SIGTERM
(an eviction, the job being stopped) is not the job's fault and is not counted; a
successful run removes the record.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

BUDGET_ENV = "TRAINER_RETRY_BUDGET"
DEFAULT_BUDGET = 5
DIRECTORY = ".trainer-launch"
MAX_ENTRIES = 100_000  # entries of the checkpoint directory read for the progress mark


class BudgetError(ValueError):
    pass


def budget_from(env: Mapping[str, str]) -> int:
    value = env.get(BUDGET_ENV, str(DEFAULT_BUDGET))
    if not value.isdigit() or int(value) < 1:
        raise BudgetError(f"{BUDGET_ENV}={value!r}: give a whole number of retries, 1 or more")
    return int(value)


def node_name(env: Mapping[str, str]) -> str:
    """This node's stable name within the job: its node rank, else the pod's name."""
    for key in ("PET_NODE_RANK", "GROUP_RANK", "HOSTNAME"):
        value = env.get(key, "")
        if value and all(c.isalnum() or c in "-_." for c in value) and len(value) <= 253:
            return value
    return "node"


def progress_mark(directory: Path) -> str:
    """A digest of the checkpoint directory's visible, complete entries."""
    names = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                name = entry.name
                if name.startswith(".") or name.endswith(".tmp") or ".corrupt" in name:
                    continue
                names.append(name)
                if len(names) > MAX_ENTRIES:
                    break
    except OSError:
        return ""
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()


@dataclass
class Verdict:
    failures: int  # retryable failures in a row without progress, this one included
    exhausted: bool


class RetryBudget:
    def __init__(self, checkpoint_dir: Path, node: str, budget: int):
        self.checkpoint_dir = checkpoint_dir
        self.budget = budget
        self.record = checkpoint_dir / DIRECTORY / f"retries-{node}.json"

    def count_failure(self, code: int, cause: str) -> Verdict:
        """Record one retryable failure; exhausted once the budget is spent."""
        mark = progress_mark(self.checkpoint_dir)
        previous = self._read()
        failures = 1
        if previous.get("progress") == mark and isinstance(previous.get("failures"), int):
            failures = previous["failures"] + 1
        self._write({"failures": failures, "progress": mark, "code": code, "cause": cause})
        return Verdict(failures, failures > self.budget)

    def succeeded(self) -> None:
        self.record.unlink(missing_ok=True)

    def _read(self) -> dict:
        try:
            value = json.loads(self.record.read_text())
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def _write(self, value: dict) -> None:
        self.record.parent.mkdir(parents=True, exist_ok=True)
        partial = self.record.with_name(f"{self.record.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps(value))
        os.replace(partial, self.record)


def budget_for(env: Mapping[str, str]) -> RetryBudget | None:
    """The budget of this node, or None when the job has no checkpoint directory."""
    directory = env.get("TRAINER_CHECKPOINT_DIR")
    if not directory:
        return None
    return RetryBudget(Path(directory), node_name(env), budget_from(env))
