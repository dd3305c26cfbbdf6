"""The directory one rollout works in, and the rule that every path the agent names stays inside it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from cuda_agent.contracts.compile import CandidateForm, CandidateSource

MODEL_FILE = "model.py"
SKILL_FILE = "SKILL.md"
CANDIDATE_FILE = "model_new.py"
KERNELS_DIR = "kernels"
KERNEL_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")
MAX_CANDIDATE_BYTES = 2 * 1024 * 1024


class PathError(ValueError):
    """A path the agent named that is not a file inside its workspace."""


class CandidateError(ValueError):
    """The workspace does not hold a candidate that can be submitted."""


class Workspace:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def create(self) -> None:
        self.root.mkdir(parents=True, exist_ok=False)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def resolve(self, relpath: str) -> Path:
        """The real path of ``relpath``; rejects absolute paths, ``..`` and symlinks pointing outside."""
        if not relpath or "\x00" in relpath:
            raise PathError("path is empty or contains a NUL byte")
        if os.path.isabs(relpath):
            raise PathError(f"{relpath}: absolute paths are not allowed; use a path relative to the workspace")
        if ".." in Path(relpath).parts:
            raise PathError(f"{relpath}: '..' is not allowed; stay inside the workspace")
        # resolve() follows every symlink on the way, so a link anywhere in the path that leaves the
        # workspace is caught here, not only a link at the last component.
        real = (self.root / relpath).resolve()
        if real != self.root and self.root not in real.parents:
            raise PathError(f"{relpath}: resolves outside the workspace (symlink escape)")
        return real

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def read_text(self, relpath: str) -> str:
        path = self.resolve(relpath)
        if not path.is_file():
            raise PathError(f"{relpath}: no such file")
        return path.read_text(encoding="utf-8", errors="replace")

    def write_text(self, relpath: str, content: str) -> Path:
        path = self.resolve(relpath)
        if path == self.root or path.is_dir():
            raise PathError(f"{relpath}: is a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        return path

    def candidate(self, form: CandidateForm) -> CandidateSource:
        """The candidate as it stands in the workspace: model_new.py, plus kernels/* for the project form."""
        main = self.root / CANDIDATE_FILE
        if not main.is_file() or main.is_symlink():
            raise CandidateError(f"{CANDIDATE_FILE} does not exist yet; write it first")
        files = {CANDIDATE_FILE: main.read_text(encoding="utf-8", errors="replace")}
        kernels = self.root / KERNELS_DIR
        if form is CandidateForm.PROJECT and kernels.is_dir() and not kernels.is_symlink():
            for path in sorted(kernels.rglob("*")):
                # Symlinks are skipped: a link to a file outside the workspace must not be shipped as source.
                if path.is_symlink() or not path.is_file() or path.suffix not in KERNEL_SUFFIXES:
                    continue
                files[self.relative(path)] = path.read_text(encoding="utf-8", errors="replace")
        size = sum(len(text.encode()) for text in files.values())
        if size > MAX_CANDIDATE_BYTES:
            raise CandidateError(f"candidate sources total {size} bytes, over the {MAX_CANDIDATE_BYTES} byte limit")
        return CandidateSource(form=form, files=files)
