"""The plug-in contract: a model, dataset, loss and optimizer defined in this file are
named in a config file by import path and trained by the unmodified trainer, under
torchrun with two gloo ranks on CPU."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tests.support import REPO
from tests.trainer.conftest import inspect, launch, trainer_env
from tests.trainer.test_cli import run_module
from trainer.cli import parse_args
from trainer.data import DataSpec
from trainer.errors import ConfigError

HERE = "tests.trainer.test_plugins"
FEATURES = 3
TEACHER = np.array([0.5, -1.0, 2.0], dtype=np.float32)
_called: set[str] = set()


def record(kind: str) -> None:
    """Leave a file per plug-in kind and rank: evidence the trainer called it."""
    if kind not in _called:
        _called.add(kind)
        marks = Path(os.environ["PLUGIN_MARKS"])
        (marks / f"{kind}.rank{os.environ['RANK']}").touch()


class Regressor(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).squeeze(-1)


def build_regressor(config, spec: DataSpec) -> nn.Module:
    record("model")
    return Regressor(spec.input_shape[0])


class LinearTeacherData:
    """Inputs on a grid, targets from a fixed linear teacher: a regression task."""

    def __init__(self, count: int):
        grid = np.linspace(-1, 1, count * FEATURES, dtype=np.float32).reshape(count, FEATURES)
        self.x = torch.from_numpy(np.roll(grid, 7))
        self.y = self.x @ torch.from_numpy(TEACHER)
        self.spec = DataSpec("regress", (FEATURES,))

    def __len__(self) -> int:
        return len(self.y)

    def batch(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.from_numpy(ids)
        return self.x[index], self.y[index]


def build_data(config) -> LinearTeacherData:
    record("dataset")
    return LinearTeacherData(config.num_samples)


def squared_error(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    record("loss")
    return ((outputs - targets) ** 2).mean()


def build_sgd(param_groups: list[dict], config) -> torch.optim.Optimizer:
    record("optimizer")
    return torch.optim.SGD(param_groups, momentum=0.9)


NOT_CALLABLE = 42


def test_a_model_defined_here_trains_through_the_contract_named_in_a_config_file(tmp_path):
    marks, directory = tmp_path / "marks", tmp_path / "ckpt"
    marks.mkdir()
    config = tmp_path / "run.toml"
    config.write_text(
        f'model = "{HERE}:build_regressor"\n'
        f'dataset = "{HERE}:build_data"\n'
        f'loss = "{HERE}:squared_error"\n'
        f'optimizer = "{HERE}:build_sgd"\n'
        "max-steps = 100\n"
        "num-samples = 64\n"
        "batch-size = 4\n"
        "lr = 0.05\n"
        'lr-scaling = "none"\n'
        "checkpoint-interval = 6\n"
        "log-interval = 4\n"
    )
    env = trainer_env(PYTHONPATH=str(REPO), PLUGIN_MARKS=str(marks))
    run = launch(
        "--config", str(config), "--max-steps", "12", "--checkpoint-dir", str(directory), env=env
    )
    assert run.code == 0, run.stderr
    called = sorted(path.name for path in marks.iterdir())
    assert called == sorted(
        f"{kind}.rank{rank}"
        for kind in ("dataset", "loss", "model", "optimizer")
        for rank in (0, 1)
    )
    start = run.events("start")[0]
    assert start["params"] == FEATURES + 1 and start["dataset_size"] == 64
    losses = [step["loss"] for step in run.events("step")]
    assert losses[-1] < losses[0] / 4, losses
    assert run.end["step"] == 12  # the flag won over the file's max-steps
    recorded = inspect(directory, "--no-params")["config"]
    assert recorded["model"] == f"{HERE}:build_regressor"
    assert recorded["optimizer"] == f"{HERE}:build_sgd"
    assert recorded["max-steps"] == 12 and recorded["lr"] == 0.05


@pytest.mark.parametrize(
    ("flag", "path", "message"),
    [
        ("--model", f"{HERE}:missing", f"--model '{HERE}:missing': '{HERE}' has no 'missing'"),
        ("--optimizer", "no_such_team.opt:Lion", "cannot import 'no_such_team.opt'"),
        ("--loss", f"{HERE}:NOT_CALLABLE", "'NOT_CALLABLE' is not callable"),
        ("--dataset", f"{HERE}:", "expected an import path module:attr"),
        ("--model", "llama2", "expected one of mlp, cnn, gpt, llama or an import path"),
    ],
)
def test_bad_plugin_paths_are_config_errors(flag, path, message):
    with pytest.raises(ConfigError) as error:
        parse_args(["--max-steps", "1", flag, path], {})
    assert message in str(error.value)


def test_a_plugin_model_may_read_the_builtin_token_shards(tmp_path):
    model = f"{HERE}:build_regressor"
    shards = str(tmp_path / "shards")
    args = ["--max-steps", "1", "--model", model, "--dataset", "tokens", "--data-path", shards]
    config = parse_args(args, {})
    assert config.model.name == model and config.data.dataset == "tokens"
    with pytest.raises(ConfigError, match="use --model gpt or llama"):
        parse_args(["--max-steps", "1", "--dataset", "tokens", "--data-path", "x"], {})


def test_a_bad_import_path_is_one_line_and_exit_2():
    done = run_module(
        "--max-steps", "1", "--model", f"{HERE}:missing", env=trainer_env(PYTHONPATH=str(REPO))
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"trainer: error: --model '{HERE}:missing': '{HERE}' has no 'missing'"
    )
