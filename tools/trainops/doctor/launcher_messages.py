"""What `trainer-launch` (the trainer image's launcher) says about its workers: the hang
report it prints when a watchdog fired, and its verdict on how the workers ended.

    trainer-launch: hang report (attempt 0): the watchdog of rank 0 fired first, at step 4
    trainer-launch: culprit: rank 1, outside any collective, while rank 0 waits for it in one
    trainer-launch: rank 1: device-fault (RuntimeError: CUDA error: ...); exiting 203 (...)
    trainer-launch: that is retryable failure 3 in a row without a new checkpoint in
        /checkpoints (budget 2, TRAINER_RETRY_BUDGET): exiting 6 (not retried)

The last form follows a retryable verdict whose retry budget is spent: the launcher
exits 6, not the retryable code the line before it names.

The wording is trainer.hangreport's and trainer.launch's; it is read by fixed prefixes
and `str.find`, no pattern. Lines the launcher prints are its own verdicts: the other
parsers do not read them (the workers' lines they quote were already read where the
workers wrote them).
"""

from __future__ import annotations

from trainops.doctor import events as ev

PREFIX = "trainer-launch: "
_REPORT = "hang report (attempt "
_CULPRIT = "culprit: "
_EXITING = "; exiting "
_EXHAUSTED = "that is retryable failure "
_EXHAUSTED_EXIT = "): exiting "


def read(text: str) -> list[tuple[str, dict]] | None:
    """The launcher's facts in `text`; None when the line is not the launcher's."""
    if not text.startswith(PREFIX):
        return None
    body = text[len(PREFIX) :]
    if body.startswith(_REPORT):
        return [(ev.HANG_REPORT, _report(body[len(_REPORT) :]))]
    if body.startswith(_CULPRIT):
        detail = body[len(_CULPRIT) :]
        ranks, _ = _ranks(detail)
        return [(ev.HANG_CULPRIT, {"culprits": ranks, "detail": detail})]
    if body.startswith(_EXHAUSTED) and _EXHAUSTED_EXIT in body:
        verdict = _exhausted(body[len(_EXHAUSTED) :])
        return [(ev.LAUNCHER_EXIT, verdict)] if verdict["code"] is not None else []
    if _EXITING in body:
        verdict = _verdict(body)
        return [(ev.LAUNCHER_EXIT, verdict)] if verdict["code"] is not None else []
    return []


def _exhausted(rest: str) -> dict:
    """`3 in a row without a new checkpoint in DIR (budget 2, ...): exiting 6 (not retried)`."""
    head, _, tail = rest.rpartition(_EXHAUSTED_EXIT)
    code_text, _, meaning = tail.partition(" ")
    return {
        "decider": None,
        "cause": "retry budget spent",
        "evidence": f"retryable failure {head})",
        "code": int(code_text) if code_text.isdigit() else None,
        "meaning": meaning.strip().removeprefix("(").removesuffix(")"),
        "exhausted": True,
    }


def _report(rest: str) -> dict:
    """`0): the watchdog of rank 0 fired first, at step 4`."""
    attempt, _, tail = rest.partition(")")
    noticed = tail.split("the watchdog of ", 1)[1] if "the watchdog of " in tail else ""
    first, _ = _ranks(noticed)
    step = tail.rsplit("at step ", 1)[1].strip() if "at step " in tail else ""
    return {
        "attempt": attempt,
        "first": first[0] if first else None,
        "step": int(step) if step.isdigit() else None,
    }


def _ranks(text: str) -> tuple[list[int], str]:
    """`rank 1, ...` or `ranks 1, 2, ...`: the numbers, and what follows them."""
    for word in ("ranks ", "rank "):
        if text.startswith(word):
            rest = text[len(word) :]
            break
    else:
        return [], text
    numbers = []
    while True:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        if digits == 0 or digits > 9:
            break
        numbers.append(int(rest[:digits]))
        rest = rest[digits:]
        if not (rest.startswith(", ") and rest[2:3].isdigit()):
            break
        rest = rest[2:]
    return numbers, rest.lstrip(", ").strip()


def _verdict(body: str) -> dict:
    """`rank 1: device-fault (EVIDENCE); exiting 203 (MEANING)`."""
    head, _, tail = body.rpartition(_EXITING)
    code_text, _, meaning = tail.partition(" ")
    rank = None
    if head.startswith("rank "):
        number, _, head = head[len("rank ") :].partition(": ")
        rank = int(number) if number.isdigit() and len(number) <= 9 else None
    cause, _, evidence = head.partition(" (")
    return {
        "decider": rank,
        "cause": cause.strip(),
        "evidence": evidence.removesuffix(")"),
        "code": int(code_text) if code_text.isdigit() else None,
        "meaning": meaning.strip().removeprefix("(").removesuffix(")"),
    }
