"""Start-up sweep of what stopped services left behind: run cgroups and per-run work directories.

A worker killed mid-run (an OOM kill, a deploy) never reaches the ``finally`` that removes its sandbox's cgroup
and scratch directory. Each service calls ``sweep_stale`` when it starts, with the directories under which it
creates one child per run. Another worker on the same host may be using its own children right now, so only
those untouched for longer than any run may last (``older_than_s``: the task time limit) are removed, and only
cgroups with no process left in them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path

from cuda_agent import safefs
from cuda_agent.sandbox.cgroup import sweep_stale_cgroups

log = logging.getLogger(__name__)


def sweep_stale(roots: Iterable[Path] = (), *, older_than_s: float, cgroup_grace_s: float = 60.0) -> list[Path]:
    """Remove run cgroups with no process left (older than ``cgroup_grace_s``: a run joins its cgroup within
    milliseconds of creating it) and the children of ``roots`` not modified for ``older_than_s`` seconds; returns
    what was removed. A missing root is skipped; links are removed, never followed."""
    removed = sweep_stale_cgroups(cgroup_grace_s)
    cutoff = time.time() - older_than_s
    for root in roots:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError), os.scandir(root) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    # A directory's mtime changes when entries come and go in it, so a live run keeps it fresh.
                    if info.st_mtime < cutoff:
                        safefs.remove_tree(Path(entry.path))
                        removed.append(Path(entry.path))
    if removed:
        log.info("swept %d stale sandbox leftover(s): %s", len(removed), ", ".join(map(str, removed[:10])))
    return removed
