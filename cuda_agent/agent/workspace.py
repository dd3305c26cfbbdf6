"""The directory one rollout works in, and the rule that every path the agent names stays inside it."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from cuda_agent import safefs
from cuda_agent.contracts.candidate import CandidateForm, CandidateSource, read_candidate_dir

MODEL_FILE = "model.py"
SKILL_FILE = "SKILL.md"
MAX_READ_BYTES = 8 * 1024 * 1024  # a file tool reads at most this much of one file


class PathError(ValueError):
    """A path the agent named that is not a file inside its workspace."""


class Workspace:
    """Every host-side access goes through ``safefs``: the agent's ``bash`` writes this directory from a sandbox,
    so a link, FIFO or device node it leaves is refused, never followed (a link to /etc/shadow, the database or
    /dev/zero), and reads are bounded."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def create(self) -> None:
        self.root.mkdir(parents=True, exist_ok=False)

    def remove(self) -> None:
        safefs.remove_tree(self.root)

    def check(self, relpath: str) -> str:
        """``relpath`` if it names a path inside the workspace (no absolute path, no '..'), else PathError."""
        if not relpath or "\x00" in relpath:
            raise PathError("path is empty or contains a NUL byte")
        if os.path.isabs(relpath):
            raise PathError(f"{relpath}: absolute paths are not allowed; use a path relative to the workspace")
        if ".." in PurePosixPath(relpath).parts:
            raise PathError(f"{relpath}: '..' is not allowed; stay inside the workspace")
        return relpath

    def read_text(self, relpath: str, limit: int = MAX_READ_BYTES) -> str:
        try:
            return safefs.read_text(self.root, self.check(relpath), limit)
        except safefs.UnsafePath as exc:
            raise PathError(f"{relpath}: {_reason(exc)}") from None

    def write_text(self, relpath: str, content: str) -> None:
        """Create or replace a regular file; a link or FIFO at the path (or a link on the way) is never followed."""
        try:
            safefs.write_text(self.root, self.check(relpath), content)
        except safefs.UnsafePath as exc:
            raise PathError(f"{relpath}: {_reason(exc)}") from None

    def files(self, pattern: str = "**/*") -> list[str]:
        """Relative paths of the regular files matching a glob pattern, reached without following any link."""
        self.check(pattern)
        # The glob only lists names (it does not descend into linked directories); each is then checked without
        # following links, so a link, FIFO or device node is left out.
        names = (p.relative_to(self.root).as_posix() for p in self.root.glob(pattern))
        return sorted(name for name in names if safefs.exists(self.root, name))

    def candidate(self, form: CandidateForm) -> CandidateSource:
        """The candidate as it stands in the workspace, read by the contract's one folder reader."""
        return read_candidate_dir(self.root, form)


def _reason(exc: safefs.UnsafePath) -> str:
    """safefs names the host path; the model knows only workspace-relative paths, so keep just the reason."""
    return str(exc).rsplit(": ", 1)[-1]
