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
# nccl-tests' rank list (src/common.cu): "#  Rank %2d Group %2d Pid %6d on %10s device %2d ..."
# (older releases: no Group; the first, single-process ones: "#   Rank %2d uses device %2d [0x%02x]
# %s", every rank in this one process); and its results' column header (`algbw busbw`).
_TESTS_RANK = Pattern(
    r".*?Rank\s+(\d+)\s+(?:(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device|uses device\s+\d+ \[)"
)
_ONE_PROCESS = "this process"


# The end of a framework's training loop, printed on rank 0: Lightning's fit loop
# (src/lightning/pytorch/loops/fit_loop.py: "`Trainer.fit` stopped: `max_epochs=...`
# reached.") and transformers' Trainer (trainer.py: "Training completed. Do not forget ...").
_LOOP_ENDED = ("`Trainer.fit` stopped:", "Training completed. Do not forget")


def read(text: str) -> list[tuple[str, dict]]:
    if any(marker in text for marker in _FINISHED):
        return [(ev.FINISHED, {})]
    if any(marker in text for marker in _LOOP_ENDED):
        return [(ev.LOOP_ENDED, {})]
    shown = text.lstrip().lstrip("#>").strip()
    rank = _TESTS_RANK.match(shown) if shown.startswith("Rank ") else None
    if rank is not None:
        host = rank.group(2) or _ONE_PROCESS
        return [(ev.TESTS_STARTED, {"listed": int(rank.group(1)), "host": host})]
    if (
        text.lstrip().startswith(_TESTS_STARTED)
        or shown == "Using devices"
        or ("algbw" in text and "busbw" in text)
    ):
        return [(ev.TESTS_STARTED, {})]
    if ("loss" in text or "Loss" in text or "LOSS" in text) and _LOSS.match(text):
        found = _STEP.match(text)
        return [(ev.PROGRESS, {"step": int(found.group(1)) if found else None})]
    return []
