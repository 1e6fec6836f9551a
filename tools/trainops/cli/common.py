"""Options and helpers shared by the commands that render."""

from __future__ import annotations

import functools
import math
import os
import sys
from pathlib import Path

import click

from trainops.cache import Cache, default_cache_dir
from trainops.config import ProjectConfig, load_project_config
from trainops.errors import InputError
from trainops.fsutil import write_atomic
from trainops.model import Target
from trainops.render.discover import discover, display_path
from trainops.render.engine import Renderer, RenderOptions
from trainops.yamlio import MAX_FILE_BYTES

DEFAULT_PATH = "overlays"


class FiniteFloatRange(click.FloatRange):
    """A FloatRange that refuses nan and inf, which pass a range's comparisons and
    would print as results."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def render_options(command):
    """-j, --remote-mirror, --allow-network, --no-cache, --max-file-size."""

    @click.option(
        "-j",
        "--jobs",
        type=click.IntRange(min=0),
        default=0,
        show_default="one per CPU",
        help="Kustomize builds to run in parallel.",
    )
    @click.option(
        "--remote-mirror",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Directory with offline copies of remote resources, laid out as "
        "<mirror>/<owner>-<repo>-<ref>/<path> or <mirror>/<repo>-<ref>/<path>. "
        "Default: $TRAINOPS_REMOTE_MIRROR, then remote-mirror in [tool.trainops].",
    )
    @click.option(
        "--allow-network",
        is_flag=True,
        help="Let kustomize fetch remote resources the mirror lacks (off by default: "
        "they are reported as warnings instead).",
    )
    @click.option(
        "--no-cache",
        is_flag=True,
        help="Neither read nor write the render/validation cache "
        "($TRAINOPS_CACHE_DIR, default ~/.cache/trainops).",
    )
    @click.option(
        "--max-file-size",
        type=click.IntRange(min=1),
        default=MAX_FILE_BYTES // 2**20,
        show_default=True,
        help="Largest plain manifest file accepted, in MiB.",
    )
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        return command(*args, **kwargs)

    return wrapper


def make_renderer(
    config: ProjectConfig,
    jobs: int = 0,
    remote_mirror: Path | None = None,
    allow_network: bool = False,
    no_cache: bool = False,
    max_file_size: int = MAX_FILE_BYTES // 2**20,
) -> tuple[Renderer, Cache]:
    mirror = remote_mirror or config.remote_mirror
    if remote_mirror is not None and not remote_mirror.is_dir():
        raise InputError("remote mirror is not a directory", str(remote_mirror))
    cache = Cache(None if no_cache else default_cache_dir())
    options = RenderOptions(
        mirror=mirror if mirror is not None and mirror.is_dir() else None,
        allow_network=allow_network,
        jobs=jobs,
        max_file_bytes=max_file_size * 2**20,
    )
    return Renderer(options, cache), cache


def find_targets(paths: tuple[str, ...], config: ProjectConfig) -> list[Target]:
    """Targets under PATHS; without PATHS, the current directory when it lies inside
    the project (an overlay, a run), else the project's default paths."""
    if not paths:
        paths = _default_paths(config)
    targets = discover(paths, exclude=_excluded(config))
    if not targets:
        raise InputError(f"nothing to render under {', '.join(paths)}: no kustomization or YAML")
    return targets


def _default_paths(config: ProjectConfig) -> tuple[str, ...]:
    here = Path.cwd().resolve()
    if config.root is not None and here != config.root and here.is_relative_to(config.root):
        return (".",)
    root = config.root or here
    found = tuple(display_path(root / p) for p in config.paths if (root / p).exists())
    if not found:
        named = " or ".join(f"./{p}" for p in config.paths)
        raise InputError(f"no paths given and there is no {named} directory")
    return found


def affected_targets(changed: tuple[str, ...], config: ProjectConfig, renderer) -> list[Target]:
    """The targets under the project's paths that read one of the `changed` files
    (pre-commit passes the files a commit touches; an overlay is checked when its
    kustomization, patches, profile or bases change)."""
    files = {Path(path).resolve() for path in changed}
    root = config.root or Path.cwd()
    candidates = [p for p in config.paths if (root / p).exists()]
    if not files or not candidates:
        return []
    targets = discover([display_path(root / p) for p in candidates], exclude=_excluded(config))
    from trainops.pipeline import cluster_dir

    affected = []
    for plan in renderer.plan(targets):
        reads = set(plan.inputs.files) if plan.inputs is not None else {Path(plan.target.path)}
        cluster = cluster_dir(plan.target)
        if cluster is not None:  # its profile decides the target's checks
            reads.add(cluster / "cluster.yaml")
        if any(path.resolve() in files for path in reads):
            affected.append(plan.target)
    return affected


def _excluded(config: ProjectConfig) -> list[Path]:
    return [config.remote_mirror] if config.remote_mirror else []


def rule_ids(values: tuple[str, ...]) -> list[str]:
    """Rule ids given as repeated or comma-separated values."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def known_rules(policy_pack: Path | None) -> list[str]:
    from trainops.policy.settings import load_all
    from trainops.rules import DOCTOR, catalog

    if policy_pack is not None:
        load_all(policy_pack)
    return sorted(r.id for r in catalog().values() if r.category != DOCTOR)


def check_rule_ids(ids: list[str], policy_pack: Path | None) -> None:
    """Refuse unknown rule ids with the nearest known one."""
    import difflib

    known = known_rules(policy_pack)
    for rule in ids:
        if rule not in known:
            close = difflib.get_close_matches(rule, known, n=1)
            hint = f": did you mean '{close[0]}'?" if close else ""
            raise InputError(f"unknown rule id '{rule}'{hint} (trainops policies list)")


def complete_rule_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """Shell completion: the rule ids of the project's policy pack and built-in checks."""
    config = load_project_config()
    head, _, last = incomplete.rpartition(",")
    prefix = f"{head}," if head else ""
    return [
        click.shell_completion.CompletionItem(prefix + rule)
        for rule in known_rules(config.policy_pack)
        if rule.startswith(last)
    ]


def complete_clusters(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """Shell completion: the clusters of the project (overlays/NAME with a cluster.yaml)."""
    config = load_project_config()
    overlays = (config.root or Path.cwd()) / DEFAULT_PATH
    names = sorted(p.parent.name for p in overlays.glob("*/cluster.yaml"))
    return [click.shell_completion.CompletionItem(n) for n in names if n.startswith(incomplete)]


def use_colour(choice: str, output: Path | None) -> bool:
    """--color: always, never, or (auto) on a terminal unless NO_COLOR is set."""
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR") or output is not None:
        return False
    return click.get_text_stream("stdout").isatty()


def emit(text: str, output: Path | None) -> None:
    """Write the whole result at once: to a file atomically, or to stdout.

    A file that exists and is not a regular file (/dev/null, /dev/stdout, a FIFO) is
    written as it is: renaming over it would put a regular file in its place.
    """
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    elif output.exists() and not output.is_file() and not output.is_dir():
        with output.open("w") as handle:
            handle.write(text)
    else:
        write_atomic(output, text)


def project_config() -> ProjectConfig:
    return load_project_config()


def cluster_options(command):
    """--context, --recording, --save-recording for commands that read a live cluster."""
    options = (
        click.option("--context", help="kubeconfig context (default: the current one)."),
        click.option(
            "--recording",
            type=click.Path(dir_okay=False, exists=True, path_type=Path),
            help="Replay a session saved with --save-recording instead of asking a cluster.",
        ),
        click.option(
            "--save-recording",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Save every API response of this session to FILE (share it, replay it).",
        ),
    )
    for option in reversed(options):
        command = option(command)
    return command


def open_cluster(context: str | None, recording: Path | None, save_recording: Path | None):
    from trainops.kube import connect

    if recording is not None and save_recording is not None:
        raise InputError("--save-recording records a live session; drop --recording")
    return connect(recording, context)


def save_session(cluster, save_recording: Path | None) -> None:
    from trainops.kube import LiveCluster

    if save_recording is not None and isinstance(cluster, LiveCluster):
        cluster.save(save_recording)
