"""Remote kustomize resources and the offline mirror that stands in for them.

Kustomize fetches `https://github.com/owner/repo//path?ref=TAG` and raw file
URLs at build time, which CI without network cannot do. A mirror directory
holds pinned copies laid out as `<mirror>/<owner>-<repo>-<ref>/<path>` or
`<mirror>/<repo>-<ref>/<path>`; this module maps a URL to its copy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from trainops.errors import InputError

_REMOTE_PREFIXES = ("http://", "https://", "git@", "ssh://", "git::", "file://")
_BARE_HOSTS = re.compile(r"^(github\.com|gitlab\.com|bitbucket\.org)/")
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
_TAG = re.compile(r"^v?\d+(\.\d+)*([.-][0-9A-Za-z.-]+)?$")


def is_remote(entry: str) -> bool:
    return entry.startswith(_REMOTE_PREFIXES) or bool(_BARE_HOSTS.match(entry))


@dataclass(frozen=True)
class RemoteRef:
    """A parsed remote resource URL."""

    url: str
    owner: str
    repo: str
    ref: str | None
    path: str
    is_file: bool

    @property
    def pinned(self) -> bool:
        """True when `ref` names a release tag or a commit, not a branch."""
        return bool(self.ref) and bool(_COMMIT.match(self.ref) or _TAG.match(self.ref))

    def mirror_names(self) -> list[str]:
        if not self.ref:
            return []
        return [f"{self.owner}-{self.repo}-{self.ref}", f"{self.repo}-{self.ref}"]


def parse_remote(url: str) -> RemoteRef | None:
    """Split a kustomize remote URL into owner, repo, ref and path (None if unknown)."""
    raw = url.removeprefix("git::")
    if raw.startswith("git@"):
        host_and_path = raw[len("git@") :].replace(":", "/", 1)
        raw = "ssh://" + host_and_path
    if not raw.startswith(("http://", "https://", "ssh://", "file://")):
        raw = "https://" + raw
    parts = urlsplit(raw)
    query = parse_qs(parts.query)
    ref = (query.get("ref") or query.get("version") or [None])[0]
    host = parts.hostname or ""
    segments = [s for s in parts.path.split("/") if s != ""]

    if host == "raw.githubusercontent.com" and len(segments) >= 4:
        owner, repo, ref = segments[0], segments[1], segments[2]
        return RemoteRef(url, owner, repo, ref, "/".join(segments[3:]), True)
    if host == "github.com" and len(segments) >= 5 and segments[2] in ("raw", "blob"):
        owner, repo, ref = segments[0], segments[1], segments[3]
        return RemoteRef(url, owner, repo, ref, "/".join(segments[4:]), True)
    if host == "github.com" and len(segments) >= 6 and segments[2:4] == ["releases", "download"]:
        # A release asset: the tag is part of the path.
        owner, repo, ref = segments[0], segments[1], segments[4]
        return RemoteRef(url, owner, repo, ref, "/".join(segments[5:]), True)

    path_text = parts.path
    if "//" in path_text.lstrip("/"):
        repo_part, _, subpath = path_text.lstrip("/").partition("//")
        repo_segments = [s for s in repo_part.split("/") if s]
    elif ".git/" in path_text or path_text.endswith(".git"):
        repo_part, _, subpath = path_text.lstrip("/").partition(".git")
        repo_segments = [s for s in repo_part.split("/") if s]
        subpath = subpath.lstrip("/")
    else:
        repo_segments, subpath = segments[:2], "/".join(segments[2:])
    if len(repo_segments) < 2:
        return None
    owner = "-".join(repo_segments[:-1])
    repo = repo_segments[-1].removesuffix(".git")
    is_file = subpath.endswith((".yaml", ".yml", ".json"))
    return RemoteRef(url, owner, repo, ref, subpath.strip("/"), is_file)


def resolve_in_mirror(ref: RemoteRef, mirror: Path | None) -> Path | None:
    """The mirror's copy of a remote resource, or None when it has none.

    The copy must lie inside the mirror once resolved: a URL whose path, repository
    or ref climbs out (`..`, a symbolic link) is refused, not looked up.
    """
    if mirror is None:
        return None
    top = mirror.resolve()
    for name in ref.mirror_names():
        candidate = mirror / name / ref.path if ref.path else mirror / name
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python 3.11)
            raise InputError(f"{candidate} cannot be resolved (a symbolic link loop?)") from None
        if resolved == top or not resolved.is_relative_to(top):
            raise InputError(f"the URL leads out of the remote mirror {mirror}")
        if resolved.exists():
            return resolved
    return None
