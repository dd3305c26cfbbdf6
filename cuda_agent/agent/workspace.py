"""The directory one rollout works in, and the rule that every path the agent names stays inside it."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from cuda_agent import safefs
from cuda_agent.contracts.candidate import CandidateForm, CandidateSource

MODEL_FILE = "model.py"
SKILL_FILE = "SKILL.md"
CANDIDATE_FILE = "model_new.py"
KERNELS_DIR = "kernels"
KERNEL_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")
MAX_CANDIDATE_BYTES = 2 * 1024 * 1024
MAX_READ_BYTES = 8 * 1024 * 1024  # a file tool reads at most this much of one file


class PathError(ValueError):
    """A path the agent named that is not a file inside its workspace."""


class CandidateError(ValueError):
    """The workspace does not hold a candidate that can be submitted."""


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
        """The candidate as it stands in the workspace: model_new.py, plus kernels/* for the project form. Links
        are never shipped as source: a link to a file outside the workspace is not part of the candidate."""
        if not safefs.exists(self.root, CANDIDATE_FILE):
            raise CandidateError(f"{CANDIDATE_FILE} does not exist yet (or is not a regular file); write it first")
        names = [CANDIDATE_FILE]
        if form is CandidateForm.PROJECT:
            names += [n for n in self.files(f"{KERNELS_DIR}/**/*") if PurePosixPath(n).suffix in KERNEL_SUFFIXES]
        files, size = {}, 0
        for name in names:
            try:
                files[name] = safefs.read_text(self.root, name, MAX_CANDIDATE_BYTES - size)
            except safefs.UnsafePath as exc:
                raise CandidateError(
                    f"{name}: {_reason(exc)} (candidate sources total at most {MAX_CANDIDATE_BYTES} bytes)"
                ) from None
            size += len(files[name].encode())
        return CandidateSource(form=form, files=files)


def _reason(exc: safefs.UnsafePath) -> str:
    """safefs names the host path; the model knows only workspace-relative paths, so keep just the reason."""
    return str(exc).rsplit(": ", 1)[-1]
