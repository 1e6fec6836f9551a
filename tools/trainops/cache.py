"""A content-addressed cache on disk for renders and validation results.

Keys are hashes of everything that decides the result (input file contents,
tool versions, options), so a stale entry can never be returned: changing an
input changes the key. Entries are written atomically; an entry that cannot be
read back (truncated, not JSON, planted) is a miss and is replaced.

The cache holds results, not code: nothing in it is executed or unpickled. Whoever
can write it can make validate report what they like, so it lives under the user's
home (created 0700) and is never shared between people who do not trust each other.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import threading
from pathlib import Path

from trainops import __version__
from trainops.fsutil import write_atomic


def default_cache_dir() -> Path:
    if env := os.environ.get("TRAINOPS_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trainops"


# Larger results are not cached; reading an entry never takes more than this.
MAX_ENTRY_BYTES = 256 << 20


class Cache:
    """Get/put bytes by (namespace, key); a Cache(None) stores nothing."""

    def __init__(self, root: Path | None):
        self.root = root

    @property
    def enabled(self) -> bool:
        """Whether entries are kept: callers skip encoding an entry nobody will store."""
        return self.root is not None

    def _path(self, namespace: str, key: str) -> Path:
        assert self.root is not None
        return self.root / __version__ / namespace / key[:2] / key

    def get(self, namespace: str, key: str) -> bytes | None:
        """The entry's bytes; None (a miss) for anything but a regular file of sane size.

        A link, a FIFO or a device planted where an entry belongs is never opened
        for reading (O_NOFOLLOW, O_NONBLOCK, then fstat), so it can neither block nor
        feed endless bytes; callers treat unparsable content as a miss too.
        """
        if self.root is None:
            return None
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(self._path(namespace, key), flags)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ENTRY_BYTES:
                return None
            with os.fdopen(fd, "rb", closefd=False) as handle:
                return handle.read(MAX_ENTRY_BYTES + 1)
        except OSError:
            return None
        finally:
            os.close(fd)

    def has(self, namespace: str, key: str) -> bool:
        """Whether an entry is there (`get` may still find it unreadable: a miss)."""
        return self.root is not None and os.path.isfile(self._path(namespace, key))

    def put(self, namespace: str, key: str, data: bytes) -> None:
        if self.root is None or len(data) > MAX_ENTRY_BYTES:
            return
        try:
            # Results are the user's own. exist_ok: another thread or process of this
            # run may create the root at the same moment.
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_atomic(self._path(namespace, key), data)
        except OSError:
            return  # a cache that cannot be written only costs speed


class FileHasher:
    """sha256 of file contents, each file read once per process."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int, int], str] = {}
        self._lock = threading.Lock()

    def __call__(self, path: Path) -> str:
        stat = path.stat()
        memo_key = (str(path), stat.st_size, stat.st_mtime_ns)
        with self._lock:
            known = self._known.get(memo_key)
        if known is not None:
            return known
        with open(path, "rb") as handle:  # in chunks: a big input never sits in memory
            digest = hashlib.file_digest(handle, "sha256").hexdigest()
        with self._lock:
            self._known[memo_key] = digest
        return digest


@functools.cache
def code_fingerprint() -> str:
    """Hash of trainops' own source, so cached results never outlive a code change."""
    package = Path(__file__).resolve().parent
    hasher = hashlib.sha256(__version__.encode())
    for path in sorted(package.rglob("*.py")):
        hasher.update(str(path.relative_to(package)).encode())
        hasher.update(path.read_bytes())
    return hasher.hexdigest()


def digest(*parts: str) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(part.encode())
        hasher.update(b"\0")
    return hasher.hexdigest()
