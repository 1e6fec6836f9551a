"""How the pack reads a container's command line (policies/commandline.py): the words a
launcher sees through a shell script, whether the script's split is remembered or not."""

from __future__ import annotations

import importlib

from tests.support import REPO
from trainops.policy.settings import PACK_MODULE, load_pack

load_pack(REPO / "policies")
commandline = importlib.import_module(f"{PACK_MODULE}.commandline")


def _container(script: str, *after: str) -> dict:
    return {"name": "c", "command": ["/bin/bash", "-c", script, *after]}


def test_a_script_is_split_as_a_shell_would():
    script = 'torchrun --nnodes=2 \\\n  --rdzv-endpoint "$MASTER:29400" train.py # a comment'
    assert commandline.words(_container(script, "ignored-0", "x")) == [
        "torchrun",
        "--nnodes=2",
        "--rdzv-endpoint",
        "$MASTER:29400",
        "train.py",
        "x",
    ]


def test_a_script_that_does_not_parse_is_split_on_blanks():
    assert commandline.words(_container("echo 'unclosed quote")) == ["echo", "'unclosed", "quote"]


def test_a_long_script_is_split_like_a_short_one_and_not_kept():
    flags = " ".join(f"--opt-{i}=v" for i in range(3000))
    script = f"torchrun {flags} train.py"
    assert len(script) > commandline.CACHED_SCRIPT_CHARS
    commandline._split_cached.cache_clear()
    words = commandline.words(_container(script))
    assert words[0] == "torchrun" and words[-1] == "train.py" and len(words) == 3002
    assert commandline._split_cached.cache_info().currsize == 0


def test_what_is_remembered_is_bounded_and_callers_get_their_own_list():
    commandline._split_cached.cache_clear()
    for index in range(2000):
        commandline.words(_container(f"python train.py --seed {index}"))
    assert commandline._split_cached.cache_info().currsize <= 512
    first = commandline.words(_container("python train.py"))
    first.append("--changed")
    assert commandline.words(_container("python train.py")) == ["python", "train.py"]
