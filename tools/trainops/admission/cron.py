"""CronJob schedules as the API server parses them (robfig/cron v3 `ParseStandard`).

Five fields (minute, hour, day of month, month, day of week), each a comma list
of `*`, `?`, a value or a range with an optional `/step`; months and weekdays
also by name. Or a descriptor: @yearly, @annually, @monthly, @weekly, @daily,
@midnight, @hourly, `@every <duration>`.
"""

from __future__ import annotations

import re

_FIELDS = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    (
        "month",
        1,
        12,
        {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())},
    ),
    ("day of week", 0, 6, {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}),
)
_DESCRIPTORS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
_DURATION = re.compile(r"(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+")


def schedule_errors(schedule: str) -> list[str]:
    """Why the schedule does not parse; empty when it does."""
    text = schedule.strip()
    if text.startswith(("TZ=", "CRON_TZ=")):
        _, _, text = text.partition(" ")
    if text.startswith("@"):
        if text in _DESCRIPTORS:
            return []
        every = text.removeprefix("@every ").strip()
        if text.startswith("@every ") and _DURATION.fullmatch(every):
            return []
        return [f"unrecognized descriptor: {text}"]
    fields = text.split()
    if len(fields) != 5:
        return [f"expected exactly 5 fields, found {len(fields)}: {text}"]
    errors = []
    for value, (name, low, high, aliases) in zip(fields, _FIELDS, strict=True):
        for part in value.split(","):
            error = _range_error(part, low, high, aliases)
            if error:
                errors.append(f"{name}: {error}")
    return errors


def _range_error(part: str, low: int, high: int, aliases: dict[str, int]) -> str | None:
    span, _, step = part.partition("/")
    if step and not step.isdigit():
        return f"failed to parse int from {step}"
    if step and int(step) == 0:
        return f"step of range should be a positive number: {part}"
    if span in ("*", "?"):
        return None
    start_text, dash, end_text = span.partition("-")
    bounds = []
    for text in (start_text, end_text) if dash else (start_text,):
        number = aliases.get(text.lower())
        if number is None:
            if not text.isdigit():
                return f"failed to parse int from {text}"
            number = int(text)
        bounds.append(number)
    start, end = bounds[0], bounds[-1]
    if start < low:
        return f"beginning of range ({start}) below minimum ({low}): {part}"
    if end > high:
        return f"end of range ({end}) above maximum ({high}): {part}"
    if start > end:
        return f"beginning of range ({start}) beyond end of range ({end}): {part}"
    return None
