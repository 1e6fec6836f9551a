"""Runs the real kustomize: `kustomize build` if installed, else `kubectl kustomize`.

A build can record where each object came from: the target is then built
through a one-line wrapper kustomization in a temporary directory that asks for
kustomize's origin and transformer annotations (`buildMetadata`), so the user's
files are never edited. The annotations' paths, relative to the wrapper, are
rewritten by the caller's function before anything else sees them.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from trainops.errors import InputError, ToolMissing
from trainops.render.discover import kustomization_file
from trainops.yamlio import load_yaml_mapping

BUILD_TIMEOUT_SECONDS = 600
# What every build records: the file each object came from and who changed it.
BUILD_METADATA = ["originAnnotations", "transformerAnnotations"]
_KLOG_ERR = re.compile(r'err="((?:[^"\\]|\\.)*)"')
_KLOG_PREFIX = re.compile(r"^[EWIF]\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] ")


@functools.cache
def kustomize_command() -> tuple[str, ...]:
    if path := shutil.which("kustomize"):
        return (path, "build")
    if path := shutil.which("kubectl"):
        return (path, "kustomize")
    raise ToolMissing(
        "neither `kustomize` nor `kubectl` is on PATH: install one (kubectl embeds kustomize)"
    )


@functools.cache
def tool_fingerprint() -> str:
    """Identifies the kustomize build in use, for cache keys."""
    binary = kustomize_command()[0]
    stat = os.stat(binary)
    return f"{binary}:{stat.st_size}:{stat.st_mtime_ns}"


def build(
    directory: Path,
    shown: str,
    allow_network: bool = False,
    origin_paths: Callable[[str], str] | None = None,
) -> str:
    """Render one kustomization directory and return its YAML stream.

    With `origin_paths`, every object carries kustomize's origin and transformer
    annotations, their local paths passed through `origin_paths` as absolute paths.
    """
    if origin_paths is None:
        return run(directory, shown, allow_network)
    with tempfile.TemporaryDirectory(prefix="trainops-origin-") as tmp:
        wrapper = Path(tmp)
        spec: dict = {
            "resources": [os.path.relpath(directory, wrapper)],
            "buildMetadata": BUILD_METADATA,
        }
        # kustomize honours sortOptions only in the kustomization it builds.
        if (sort := sort_options(directory)) is not None:
            spec["sortOptions"] = sort
        (wrapper / "kustomization.yaml").write_text(json.dumps(spec))
        try:
            text = run(wrapper, shown, allow_network)
        except InputError:
            # The plain build words its error without the wrapper's layer; should it
            # succeed, its output stands, with findings placed on the target alone.
            return run(directory, shown, allow_network)
        return rewrite_origin_paths(
            text, lambda path: origin_paths(os.path.normpath(wrapper / path))
        )


# Top-level metadata annotations, which kustomize writes at an indent of four spaces.
_ANNOTATION_BLOCK = re.compile(
    r"^    (?:alpha\.)?config\.kubernetes\.io/(?:origin|transformations): \|-?\n"
    r"(?:      .*\n)+",
    re.MULTILINE,
)
_LOCAL_PATH = re.compile(r"^(?P<lead> +(?:- )?(?:path|configuredIn): )(?P<path>\.\./.*)$", re.M)


def rewrite_origin_paths(text: str, function: Callable[[str], str]) -> str:
    """Apply `function` to each local path in the origin and transformer annotations."""

    def block(match: re.Match[str]) -> str:
        return _LOCAL_PATH.sub(
            lambda m: m.group("lead") + function(m.group("path")), match.group(0)
        )

    return _ANNOTATION_BLOCK.sub(block, text)


def sort_options(directory: Path) -> object | None:
    """The sortOptions of the kustomization in `directory` (None when unset or unreadable)."""
    kfile = kustomization_file(directory)
    if kfile is None:
        return None
    try:
        return load_yaml_mapping(kfile.read_text(errors="replace"), str(kfile)).get("sortOptions")
    except InputError:
        return None  # kustomize itself reports the broken file


def run(directory: Path, shown: str, allow_network: bool) -> str:
    """`kustomize build directory`'s output; an InputError names `shown`."""
    command = [*kustomize_command(), str(directory)]
    env = dict(os.environ)
    # kustomize is a short-lived Go process whose builds here are dominated by
    # parsing large CRDs; collecting garbage four times less often cuts its CPU
    # time by about a third for ~100 MB more peak memory. GOGC set by the user wins.
    env.setdefault("GOGC", "400")
    if not allow_network:
        # A remote that slipped past the mirror must fail fast, not hang on DNS.
        env.setdefault("GIT_TERMINAL_PROMPT", "0")
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_SECONDS,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise InputError(
            f"kustomize build timed out after {BUILD_TIMEOUT_SECONDS}s", shown
        ) from None
    if done.returncode != 0:
        raise InputError(f"kustomize build failed: {clean_error(done.stderr)}", shown)
    return done.stdout


def clean_error(stderr: str) -> str:
    """One readable line out of kustomize's or kubectl's error output."""
    match = _KLOG_ERR.search(stderr)
    if match:
        try:
            message = json.loads(f'"{match.group(1)}"')
        except json.JSONDecodeError:
            message = match.group(1)
    elif "err=<" in stderr:
        inner = stderr.split("err=<", 1)[1].rsplit(">", 1)[0]
        message = " ".join(line.strip() for line in inner.splitlines() if line.strip())
    else:
        lines = [_KLOG_PREFIX.sub("", line).strip() for line in stderr.splitlines()]
        lines = [line for line in lines if line]
        # A Go crash ends with its stack dump: its cause is the panic or fatal error line.
        crash = next((ln for ln in lines if ln.startswith(("panic:", "fatal error:"))), None)
        last = f"kustomize crashed ({crash})" if crash else (lines[-1] if lines else "")
        message = next((ln for ln in lines if ln.startswith("Error:")), last)
        message = message.removeprefix("Error:").strip()
    return " ".join(message.split()) or "no error message"
