"""Reading a container's command line: shells, launchers and their flags (no rules here).

Kubernetes runs `command + args` without a shell; when the first word is a shell
with `-c`, the script is one element and the words after it are its positional
parameters. Rules ask for the words a launcher sees, a flag's value in either
`--flag=value` or `--flag value` form, and what the command starts.
"""

from __future__ import annotations

import shlex
from functools import lru_cache
from typing import Any

from trainops.policy.pods import argv

SHELLS = ("sh", "bash", "dash", "zsh", "ash", "ksh")
# torchrun and the launchers that take its arguments (trainer-launch is torchrun passing on
# the failed worker's exit code).
TORCHRUN = (
    "torchrun",
    "torch.distributed.run",
    "torch.distributed.launch",
    "trainer-launch",
    "trainer.launch",
)
# Launchers of distributed training: the pod runs a job's ranks, not a service.
LAUNCHERS = (*TORCHRUN, "mpirun", "mpiexec", "deepspeed", "accelerate", "horovodrun", "trainer")
DATALOADER_WORKER_FLAGS = (
    "--num-workers",
    "--num_workers",
    "--workers",
    "--dataloader-num-workers",
    "--dataloader_num_workers",
    "--data-workers",
    "--num-data-workers",
)


def program(word: str) -> str:
    """The program a word names (its last path component)."""
    return word.rsplit("/", 1)[-1]


def shell_script(container: dict[str, Any]) -> tuple[int, str] | None:
    """(index in argv, text) of the script of `sh -c SCRIPT ...`, if the container runs one."""
    words = argv(container)
    if not words:
        return None
    start = 1 if program(words[0]) == "env" else 0
    if len(words) <= start or program(words[start]) not in SHELLS:
        return None
    for index in range(start + 1, len(words)):
        word = words[index]
        if word == "-c" or (word.startswith("-") and not word.startswith("--") and "c" in word):
            return (index + 1, words[index + 1]) if index + 1 < len(words) else None
        if not word.startswith("-"):
            return None
    return None


def runs_shell(container: dict[str, Any]) -> bool:
    """The command is a shell (with or without -c), so it may expand $VAR itself."""
    words = argv(container)
    start = 1 if words and program(words[0]) == "env" else 0
    return len(words) > start and program(words[start]) in SHELLS


# Several rules read the words of every script, and a render's pods share a few scripts:
# each is split once. Longer scripts (rare; any size in hostile input) are not kept.
CACHED_SCRIPT_CHARS = 16_384


def _split(text: str) -> tuple[str, ...]:
    text = text.replace("\\\n", " ")  # a shell joins a line ending in a backslash to the next
    try:
        return tuple(shlex.split(text, comments=True))
    except ValueError:
        return tuple(text.split())


_split_cached = lru_cache(maxsize=512)(_split)


def words(container: dict[str, Any]) -> list[str]:
    """The words a launcher sees: argv, or a shell script split the way a shell would
    (quotes honoured; a script that does not parse is split on blanks)."""
    script = shell_script(container)
    if script is None:
        return argv(container)
    index, text = script
    split = _split_cached(text) if len(text) <= CACHED_SCRIPT_CHARS else _split(text)
    return [*split, *argv(container)[index + 2 :]]


def flag(words: list[str], *names: str) -> tuple[str | None, int]:
    """The value of a flag given as --flag=value or --flag value, and its index."""
    for index, word in enumerate(words):
        for name in names:
            if word == name and index + 1 < len(words):
                return words[index + 1], index
            if word.startswith(name + "="):
                return word.split("=", 1)[1], index
    return None, -1


def has_flag(words: list[str], *names: str) -> bool:
    return any(word in names or word.split("=", 1)[0] in names for word in words)


def runs(container: dict[str, Any], launchers: tuple[str, ...]) -> bool:
    """The container's command line starts one of `launchers` (directly, through a shell
    script, or as `python -m <module>`)."""
    found = words(container)
    for index, word in enumerate(found):
        if program(word) in launchers:
            return True
        if word == "-m" and index + 1 < len(found) and found[index + 1] in launchers:
            return True
    return False


def runs_torchrun(container: dict[str, Any]) -> bool:
    return runs(container, TORCHRUN)


def dataloader_workers(container: dict[str, Any]) -> int:
    """DataLoader worker processes the command line asks for (0 when it does not say)."""
    value, _ = flag(words(container), *DATALOADER_WORKER_FLAGS)
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0
