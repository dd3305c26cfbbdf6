"""Size-bounded eviction of the compile caches: the least recently used entries go first.

An entry is a child of a cache root: an artifact's key directory, one file of the object cache, a precompiled
header's directory. Its recency is its own mtime, which ``mark_used`` sets on every use: access times are not kept
on noatime mounts. Names starting with a dot are never entries: ``.staging`` holds the builds in flight and
``safefs.write_bytes`` writes ``.<name>.<uuid>.tmp`` before renaming it into place.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import uuid
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import NamedTuple

from cuda_agent import safefs
from cuda_agent.settings import get_settings

log = logging.getLogger(__name__)

TRASH_PREFIX = ".trash-"
_MAX_FILES = 10_000  # per entry: as many as an artifact may hold (store.ARTIFACT_MAX_FILES)


class _Entry(NamedTuple):
    used_ns: int
    size: int
    path: Path


def mark_used(path: Path) -> None:
    """Make ``path`` the most recently used entry. Best effort: it may just have been evicted, or be read-only."""
    with contextlib.suppress(OSError):
        os.utime(path, follow_symlinks=False)


def _entry(path: Path) -> _Entry | None:
    try:
        info = os.stat(path, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):  # a link is an entry of its own, never followed
            return _Entry(info.st_mtime_ns, info.st_size, path)
        files = safefs.walk_files(path, max_files=_MAX_FILES)
        return _Entry(info.st_mtime_ns, sum(os.stat(path / f, follow_symlinks=False).st_size for f in files), path)
    except safefs.UnsafePath:
        # A link, FIFO or device node below it: no build writes one, so nothing can use it; it goes first.
        return _Entry(0, 0, path)
    except FileNotFoundError:  # evicted meanwhile by a concurrent build
        return None


def _entries(root: Path) -> list[_Entry]:
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        if name.startswith(TRASH_PREFIX):  # left by an eviction that died halfway
            _remove(root / name)
        elif not name.startswith(".") and (entry := _entry(root / name)):
            found.append(entry)
    return found


def _discard(path: Path) -> bool:
    """Rename, then delete: a reader finds the whole entry under its name or nothing (``store.has_artifact``
    looks for the record), never a half-deleted one. False when a concurrent eviction took it first."""
    trash = path.with_name(f"{TRASH_PREFIX}{uuid.uuid4().hex}")
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return False
    _remove(trash)
    return True


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):  # a concurrent eviction clearing leftover trash got there first
        safefs.remove_tree(path)


def evict(roots: Iterable[Path], max_bytes: int, keep: Collection[Path] = ()) -> list[Path]:
    """Remove the least recently used entries of ``roots`` until they hold ``max_bytes`` or less together; the
    entries removed. ``keep`` (what the calling build uses) stays whatever it costs, so the total may stay over."""
    entries = sorted(e for root in roots for e in _entries(root))
    total = sum(e.size for e in entries)
    removed = []
    for entry in entries:
        if total <= max_bytes:
            break
        if entry.path not in keep and _discard(entry.path):
            total -= entry.size
            removed.append(entry.path)
    if removed:
        log.info("compile caches over %d bytes: evicted %d entries, %d bytes left", max_bytes, len(removed), total)
    return removed


def within_budget(roots: Iterable[Path], keep: Collection[Path] = ()) -> None:
    """``evict`` down to ``compile_cache_max_bytes``, best effort: a failure costs disk space, not the caller's
    build or fetch."""
    try:
        evict(roots, get_settings().compile_cache_max_bytes, keep)
    except OSError:
        log.exception("evicting from the compile caches failed")
