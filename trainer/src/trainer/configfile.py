"""The trainer's config file: TOML whose keys are the long flags, and its resolved form.

A file holds `key = value` lines, one per flag (`max-steps = 1000`, `model = "llama"`,
`inject-fault = ["sigkill@5"]`, `no-resume = true`); the flags are the schema, so every
flag of `python -m trainer --help` is a key and nothing else is. Precedence, lowest
first: built-in defaults, the file, the environment the job templates set, the
command line. Values are checked by the same parsers as the flags, with TOML's types
(a number where the flag takes a number, a string where it takes a name or a path).

The resolved config, every flag with the value the run uses, is what `--print-config`
prints (as a file `--config` reads back) and what each checkpoint records as JSON.
"""

from __future__ import annotations

import argparse
import json
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

from trainer.errors import ConfigError

MAX_CONFIG_BYTES = 1 << 20
# Flags about the config itself, not about the run.
NOT_KEYS = ("help", "config", "print-config")

_TOML_TYPES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def read(path: Path) -> dict:
    """The file's table, parsed; bad TOML is a ConfigError naming the file and line."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ({error.strerror})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None


def flag_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The parser's actions by long flag name without dashes, config flags left out."""
    actions = {}
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs and longs[0][2:] not in NOT_KEYS:
            actions[longs[0][2:]] = action
    return actions


def defaults_from(
    path: Path, parser: argparse.ArgumentParser, env_set: Iterable[str]
) -> dict[str, object]:
    """The parser defaults the file sets, by dest; keys whose flag's environment
    variable is set (dests in `env_set`) are left to the environment."""
    table = read(path)
    actions = flag_actions(parser)
    skip = set(env_set)
    defaults = {}
    for key, value in table.items():
        if isinstance(value, dict):
            raise ConfigError(f"{path}: [{key}] is a table; the file is flat: one key per flag")
        action = actions.get(key)
        if action is None:
            raise ConfigError(f"{path}: unknown key {key!r}; keys are the long flags")
        try:
            parsed = _parse(action, value)
        except (argparse.ArgumentTypeError, ConfigError, ValueError) as error:
            raise ConfigError(f"{path}: key {key!r}: {error}") from None
        if action.dest not in skip:
            defaults[action.dest] = parsed
    return defaults


def _parse(action: argparse.Action, value: object) -> object:
    if isinstance(action, argparse._StoreTrueAction):
        return _expect(value, bool)
    if isinstance(action, argparse._AppendAction):
        if not isinstance(value, list):
            raise ConfigError(f"expected a list of strings, got {_toml_type(value)}")
        return [_convert(action, _expect(item, str)) for item in value]
    return _convert(action, _expect(value, _toml_type_of(action)))


def _convert(action: argparse.Action, value: object) -> object:
    text = value if isinstance(value, str) else repr(value)
    converted = action.type(text) if action.type else text
    if action.choices is not None and converted not in action.choices:
        raise ConfigError(f"expected one of {', '.join(map(str, action.choices))}, got {value!r}")
    return converted


def _toml_type_of(action: argparse.Action) -> type:
    # trainer.cli names its number parsers *_int and *_float.
    name = getattr(action.type, "__name__", "")
    if name.endswith("_int"):
        return int
    if name.endswith("_float"):
        return float
    return str


def _expect(value: object, expected: type) -> object:
    ok = isinstance(value, expected) and not (expected is not bool and isinstance(value, bool))
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise ConfigError(f"expected {_TOML_TYPES[expected]}, got {_toml_type(value)}")
    return value


def _toml_type(value: object) -> str:
    for kind, text in (
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a float"),
        (str, "a string"),
        (list, "an array"),
        (dict, "a table"),
    ):
        if isinstance(value, kind):
            return text
    return type(value).__name__


def resolved(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, object]:
    """Every flag's value in this run, JSON-ready (paths and faults as their text)."""
    config = {}
    for key, action in flag_actions(parser).items():
        config[key] = _plain(getattr(args, action.dest))
    return config


def _plain(value: object) -> object:
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value)


def to_toml(config: Mapping[str, object]) -> str:
    """A file `--config` reads back; unset values (None) are left out."""
    lines = ["# resolved config of python -m trainer; read back with --config FILE"]
    for key, value in config.items():
        if value is not None:
            # JSON's scalars, strings and arrays of strings are also TOML's.
            lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"
