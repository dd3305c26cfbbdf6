"""Candidates as files: read one from disk in either form, and record it in the database by content hash."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from cuda_agent.contracts.candidate import CandidateForm, CandidateSource
from cuda_agent.db.models import Candidate, Problem

Row = TypeVar("Row", Candidate, Problem)

# What a PROJECT candidate may contain besides model_new.py; anything else in the folder is not sent.
PROJECT_SUFFIXES = (".cu", ".cuh", ".cpp", ".h", ".hpp")


class CandidateFileError(ValueError):
    """The path does not hold a candidate; the message says what is missing."""


def read_candidate(path: Path) -> CandidateSource:
    """A `.py` file is the KernelBench form; a folder with model_new.py and kernels/ is the project form."""
    if path.is_file():
        if path.suffix != ".py":
            raise CandidateFileError(f"{path}: a candidate file must be a .py file defining ModelNew")
        return CandidateSource(form=CandidateForm.KERNELBENCH, files={"model_new.py": path.read_text()})
    if not path.is_dir():
        raise CandidateFileError(f"{path}: no such file or folder")
    if not (path / "model_new.py").is_file():
        raise CandidateFileError(f"{path}: a project candidate needs model_new.py")
    files = {"model_new.py": (path / "model_new.py").read_text()}
    kernels = path / "kernels"
    if kernels.is_dir():
        for file in sorted(kernels.rglob("*")):
            if file.is_file() and file.suffix in PROJECT_SUFFIXES:
                files[file.relative_to(path).as_posix()] = file.read_text()
    if len(files) == 1:
        return CandidateSource(form=CandidateForm.KERNELBENCH, files=files)
    return CandidateSource(form=CandidateForm.PROJECT, files=files)


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _get_or_create(session: Session, model: type[Row], column: Any, value: str, make: Callable[[], Row]) -> Row:
    row = session.scalars(select(model).where(column == value)).first()
    if row is not None:
        return row
    try:
        # A savepoint: two workers recording the same content at once must not fail the outer transaction.
        with session.begin_nested():
            row = make()
            session.add(row)
    except IntegrityError:
        row = session.scalars(select(model).where(column == value)).one()
    return row


def record_candidate(session: Session, candidate: CandidateSource, problem_id: str | None = None) -> Candidate:
    """The candidate's row, created on first sight; identical code maps to one row."""
    code_hash = content_hash(json.dumps({"form": candidate.form.value, "files": candidate.files}, sort_keys=True))
    return _get_or_create(
        session,
        Candidate,
        Candidate.code_hash,
        code_hash,
        lambda: Candidate(code_hash=code_hash, form=candidate.form.value, files=candidate.files, problem_id=problem_id),
    )


def record_problem(session: Session, source: str, data_source: str = "user") -> Problem:
    """The problem's row, created on first sight; identical sources map to one row."""
    source_hash = content_hash(source)
    return _get_or_create(
        session,
        Problem,
        Problem.source_hash,
        source_hash,
        lambda: Problem(source_hash=source_hash, source=source, data_source=data_source),
    )
