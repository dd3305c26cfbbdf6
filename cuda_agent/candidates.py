"""Record candidates and problems in the database, one row per content (the contract's key, the problem hash)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from cuda_agent.contracts.candidate import CandidateSource
from cuda_agent.db.models import Candidate, Problem
from cuda_agent.problem import problem_hash

Row = TypeVar("Row", Candidate, Problem)


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
    code_hash = candidate.key
    return _get_or_create(
        session,
        Candidate,
        Candidate.code_hash,
        code_hash,
        lambda: Candidate(code_hash=code_hash, form=candidate.form.value, files=candidate.files, problem_id=problem_id),
    )


def record_problem(session: Session, source: str, data_source: str = "user") -> Problem:
    """The problem's row, created on first sight; sources that differ only in line endings or trailing blanks map to
    one row (the hash the evaluation's baseline cache uses too)."""
    source_hash = problem_hash(source)
    return _get_or_create(
        session,
        Problem,
        Problem.source_hash,
        source_hash,
        lambda: Problem(source_hash=source_hash, source=source, data_source=data_source),
    )
