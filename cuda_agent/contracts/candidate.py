"""The candidate contract: which files a candidate consists of, how they are named and checked, how a folder is read
into one, and its content key.

Compile, eval, the agent's workspace, the CLI and the store all go through this module; nothing else names the
files or lists suffixes, so a file the build accepts is never one the evaluation rejects.
"""

from __future__ import annotations

import hashlib
import json
import re
from enum import StrEnum
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field, field_validator

from cuda_agent import safefs
from cuda_agent.contracts.common import MAX_CANDIDATE_FILES, MAX_PATH_CHARS, MAX_SOURCE_CHARS

MODEL_NEW_FILE = "model_new.py"  # defines ModelNew; in both forms
# The problem a candidate is judged against, when it is written beside it: the evaluation's child directories and
# the bench's case folders (<name>/problem.py beside <name>/model_new.py).
PROBLEM_FILE = "problem.py"
KERNELS_DIR = "kernels"  # the project form's native sources, any depth below it
# Translation units are compiled and linked; headers are only included. Both ship with the candidate.
UNIT_SUFFIXES = (".cu", ".cpp")
HEADER_SUFFIXES = (".h", ".cuh", ".hpp", ".inl")
KERNEL_SUFFIXES = UNIT_SUFFIXES + HEADER_SUFFIXES
# Reading a folder stops here: the agent's bash can leave anything in its workspace.
MAX_CANDIDATE_BYTES = 2 * 1024 * 1024
# The workdir form (the released CUDA Agent environment's layout): the platform supplies these two files and builds
# them with the candidate's kernels into one Python module, EXTENSION_MODULE, that model_new.py imports. A workspace
# also holds the reference (model.py) and the environment's scripts (utils/); none of them is part of a candidate.
WORKDIR_BINDING_FILE = "binding.cpp"
WORKDIR_REGISTRY_HEADER = "binding_registry.h"
WORKDIR_PLATFORM_FILES = frozenset({WORKDIR_BINDING_FILE, WORKDIR_REGISTRY_HEADER})
WORKDIR_REFERENCE_FILE = "model.py"
EXTENSION_MODULE = "cuda_extension"
# Where the evaluation child finds a workdir candidate's built module (set from its artifact).
EXTENSION_DIR_ENV = "CUDA_AGENT_EXTENSION_DIR"
BINDING_SUFFIX = "_binding.cpp"  # kernels/<name>_binding.cpp: the PyTorch binding of kernels/<name>.cu


class CandidateForm(StrEnum):
    # One Python file defining ModelNew that builds its code with torch.utils.cpp_extension.load_inline.
    KERNELBENCH = "kernelbench"
    # model_new.py + kernels/*.cu|*.cpp|headers, built without torch headers and bound by our fixed launcher
    # (cuda_agent.kernels); the fast path.
    PROJECT = "project"
    # The released CUDA Agent environment's layout: model_new.py imports `cuda_extension`, built from kernels/*.cu,
    # their torch bindings kernels/*_binding.cpp, vendor calls in kernels/*.cpp and the platform's binding.cpp.
    WORKDIR = "workdir"


class RuleProfile(StrEnum):
    """What a candidate may use besides its own kernels; a named set of static and run-time rules."""

    # PyTorch compute only where the problem allows it; the allow-listed CUDA math libraries (libraries.py).
    STANDARD = "standard"
    # The CUDA Agent paper's rules: cuBLAS only for GEMM, cuDNN only for convolution, no torch operator in Python
    # or C++ beyond allocation, judged at the paper tolerance (atol = rtol = 1e-2).
    PAPER = "paper"


def default_rules(form: CandidateForm) -> RuleProfile:
    """The workdir form is the released environment's, so its rules are the paper's unless a request says so."""
    return RuleProfile.PAPER if form is CandidateForm.WORKDIR else RuleProfile.STANDARD


class CandidateSource(BaseModel):
    """A candidate as submitted: relative path -> file text. KERNELBENCH holds `model_new.py` only."""

    form: CandidateForm
    files: dict[str, str] = Field(
        description=f"Relative path -> content; `{MODEL_NEW_FILE}` is always present, native sources lie under "
        f"`{KERNELS_DIR}/` with suffixes {', '.join(KERNEL_SUFFIXES)}. At most {MAX_CANDIDATE_FILES} files of "
        f"{MAX_SOURCE_CHARS} characters each, paths of at most {MAX_PATH_CHARS}.",
        max_length=MAX_CANDIDATE_FILES,
    )

    @field_validator("files")
    @classmethod
    def _bounded(cls, files: dict[str, str]) -> dict[str, str]:
        for name, text in files.items():
            if not name or len(name) > MAX_PATH_CHARS:
                raise ValueError(f"file path {name[:80]!r} must be 1-{MAX_PATH_CHARS} characters")
            if len(text) > MAX_SOURCE_CHARS:
                raise ValueError(f"{name}: {len(text)} characters, more than the limit of {MAX_SOURCE_CHARS}")
        return files

    @property
    def model_new(self) -> str:
        return self.files[MODEL_NEW_FILE]

    @property
    def key(self) -> str:
        """The content key: identical form and files, identical key, whatever the dict order."""
        return hashlib.sha256(
            json.dumps({"form": self.form.value, "files": self.files}, sort_keys=True).encode()
        ).hexdigest()


class CandidateFileError(ValueError):
    """A path or folder that does not hold a valid candidate; the message says what is wrong."""


def is_kernel_file(name: str) -> bool:
    """A native source of the project form: under kernels/, with an allowed suffix."""
    path = PurePosixPath(name)
    return len(path.parts) > 1 and path.parts[0] == KERNELS_DIR and path.suffix in KERNEL_SUFFIXES


def is_unit(name: str) -> bool:
    return is_kernel_file(name) and PurePosixPath(name).suffix in UNIT_SUFFIXES


def layout_error(candidate: CandidateSource) -> str | None:
    """Why the candidate's file set breaks the contract, or None. One line, for a diagnostic or a verdict."""
    files = candidate.files
    if MODEL_NEW_FILE not in files:
        return f"the candidate has no {MODEL_NEW_FILE}"
    for name in files:
        path = PurePosixPath(name)
        if not name or path.is_absolute() or ".." in path.parts or name != str(path) or "\\" in name:
            return f"file path {name!r} must be relative, normalized and without '..'"
        if name == MODEL_NEW_FILE:
            continue
        if candidate.form is CandidateForm.KERNELBENCH:
            return f"a kernelbench candidate is {MODEL_NEW_FILE} alone; remove {name}"
        if candidate.form is CandidateForm.WORKDIR and name in WORKDIR_PLATFORM_FILES:
            return f"{name} is supplied by the platform, never by the candidate; remove it"
        if not is_kernel_file(name):
            suffixes = "|*".join(KERNEL_SUFFIXES)
            return f"{name}: {candidate.form.value} files are {MODEL_NEW_FILE} and {KERNELS_DIR}/*{suffixes}"
    return None


def read_candidate_dir(root: Path, form: CandidateForm | None = None) -> CandidateSource:
    """The candidate in folder ``root``: model_new.py plus, for the project and workdir forms, every kernel file below
    kernels/. A workdir workspace's binding.cpp, binding_registry.h, model.py and utils/ are not read: the platform
    supplies its own.

    ``form`` None infers it (workdir when the folder holds the workdir binding files or model_new.py imports
    ``cuda_extension``, else project when kernel files exist). Reads go through ``safefs``: the folder may have been
    written from a sandbox, so a link, FIFO or device node is never followed and is not part of the candidate,
    and the sources total at most MAX_CANDIDATE_BYTES. Messages name paths relative to ``root`` only: the agent
    reading them knows its workspace, not where it lies on the host.
    """
    if not safefs.exists(root, MODEL_NEW_FILE):
        raise CandidateFileError(f"{MODEL_NEW_FILE} does not exist (or is not a regular file); write it first")
    names = [MODEL_NEW_FILE]
    if form is not CandidateForm.KERNELBENCH:
        # The glob only lists names and does not descend into linked directories; each name is then checked
        # without following links, so a link, FIFO or device node is left out rather than followed.
        found = (p.relative_to(root).as_posix() for p in (root / KERNELS_DIR).glob("**/*"))
        names += sorted(n for n in found if is_kernel_file(n) and safefs.exists(root, n))
    if len(names) > MAX_CANDIDATE_FILES:
        # Refused, not cut: a candidate silently missing some of its sources would fail to build for no stated reason.
        raise CandidateFileError(
            f"{len(names)} candidate files, more than the limit of {MAX_CANDIDATE_FILES} ({MODEL_NEW_FILE} included)"
        )
    files, size = {}, 0
    for name in names:
        try:
            files[name] = safefs.read_text(root, name, MAX_CANDIDATE_BYTES - size)
        except safefs.UnsafePath as exc:
            reason = str(exc).rsplit(": ", 1)[-1]  # safefs names the host path; keep only the reason
            raise CandidateFileError(
                f"{name}: {reason} (candidate sources total at most {MAX_CANDIDATE_BYTES} bytes)"
            ) from None
        size += len(files[name].encode())
    if form is None:
        if any(safefs.exists(root, name) for name in WORKDIR_PLATFORM_FILES) or imports_extension(
            files[MODEL_NEW_FILE]
        ):
            form = CandidateForm.WORKDIR
        else:
            form = CandidateForm.PROJECT if len(files) > 1 else CandidateForm.KERNELBENCH
    return CandidateSource(form=form, files=files)


def imports_extension(model_new: str) -> bool:
    """Whether model_new.py imports the workdir form's module (``import cuda_extension`` or ``from cuda_extension``)."""
    return re.search(rf"^\s*(import|from)\s+{EXTENSION_MODULE}\b", model_new, re.MULTILINE) is not None


def read_candidate(path: Path) -> CandidateSource:
    """A `.py` file is the KernelBench form; a folder with model_new.py (and kernels/) is read as above."""
    if path.is_dir():
        try:
            return read_candidate_dir(path)
        except CandidateFileError as exc:
            raise CandidateFileError(f"{path}: {exc}") from None
    if not path.is_file():
        raise CandidateFileError(f"{path}: no such file or folder")
    if path.suffix != ".py":
        raise CandidateFileError(f"{path}: a candidate file must be a .py file defining ModelNew")
    try:
        text = safefs.read_text(path.parent, path.name, MAX_CANDIDATE_BYTES)
    except safefs.UnsafePath as exc:
        raise CandidateFileError(str(exc)) from None
    return CandidateSource(form=CandidateForm.KERNELBENCH, files={MODEL_NEW_FILE: text})
