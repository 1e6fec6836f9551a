"""Options and helpers shared by the commands that render."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click

from trainops.cache import Cache, default_cache_dir
from trainops.config import ProjectConfig, load_project_config
from trainops.errors import InputError
from trainops.fsutil import write_atomic
from trainops.model import Target
from trainops.render.discover import discover
from trainops.render.engine import Renderer, RenderOptions
from trainops.yamlio import MAX_FILE_BYTES

DEFAULT_PATH = "overlays"


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
    if not paths:
        if Path(DEFAULT_PATH).is_dir():
            paths = (DEFAULT_PATH,)
        elif config.root is not None and (config.root / DEFAULT_PATH).is_dir():
            paths = (str(config.root / DEFAULT_PATH),)
        else:
            raise InputError(f"no paths given and there is no ./{DEFAULT_PATH} directory")
    exclude = [config.remote_mirror] if config.remote_mirror else []
    targets = discover(paths, exclude=exclude)
    if not targets:
        raise InputError(f"nothing to render under {', '.join(paths)}: no kustomization or YAML")
    return targets


def emit(text: str, output: Path | None) -> None:
    """Write the whole result at once: to a file atomically, or to stdout."""
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
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
