"""What shows a job worked: torchrun's worker group finishing successfully, NCCL destroying
its communicators, nccl-tests' bandwidth summary, and training progress (a step or
iteration count beside a loss); and that nccl-tests started (its banner and rank list),
so that a run without results reads as the hang it is.

The doctor says "no problems found" only on this evidence (`analysis`): a log without a
failure line is not yet a job that worked, since a hang prints nothing.
"""

from __future__ import annotations

from trainops.doctor import events as ev
from trainops.doctor.limits import Pattern

_FINISHED = (
    "worker group successfully finished",  # torch.distributed.elastic agent
    "Local worker group finished (WorkerState.SUCCEEDED)",
    "- Destroy COMPLETE",  # NCCL's ncclCommDestroy (INIT subsystem)
    "# Avg bus bandwidth",  # nccl-tests after its last size
)
_STEP = Pattern(r"(?i).*?\b(?:step|iter(?:ation)?|it|epoch|global_step)\b\W{0,3}(\d+)")
_LOSS = Pattern(r"(?i).*?\bloss\b\W{0,4}[-+]?(\d+\.\d*|\d*\.\d+|\d+)(?:e[-+]?\d+)?")


_TESTS_STARTED = ("# nThread ", "# Collective test starting", "# Using devices")


def read(text: str) -> list[tuple[str, dict]]:
    if any(marker in text for marker in _FINISHED):
        return [(ev.FINISHED, {})]
    if text.lstrip().startswith(_TESTS_STARTED) or (
        text.lstrip().startswith("#") and " Rank " in text and " Pid " in text
    ):
        return [(ev.TESTS_STARTED, {})]
    if ("loss" in text or "Loss" in text or "LOSS" in text) and _LOSS.match(text):
        found = _STEP.match(text)
        return [(ev.PROGRESS, {"step": int(found.group(1)) if found else None})]
    return []
