"""Datasets in the database: a ``datasets`` row (options, statistics, per-problem filter records in ``spec``) and
one ``dataset_items`` row per problem, pointing at the ``problems`` row of its code (shared with every other use of
the same problem: rows are keyed by source hash).

Saving is idempotent: saving the same name with the same content again returns the existing dataset; the same
name with other content is refused, so a dataset name always means one set of problems. A new version of a set is
a new name (``ops-6k@2``).
"""

from __future__ import annotations

import collections
import hashlib
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from cuda_agent.contracts.dataset import DatasetDetail, DatasetProblem, DatasetProblemsPage, DatasetSummary
from cuda_agent.db import session_scope
from cuda_agent.db.models import Dataset, DatasetItem, Problem
from cuda_agent.problem import problem_hash

if TYPE_CHECKING:
    # The export and pipeline modules import torch; the queries below serve an API process that must not.
    from cuda_agent.dataset.export import DatasetRecord
    from cuda_agent.dataset.pipeline import SynthesisReport

# Distinct reasons listed per stage in a dataset's detail (reasons name sizes and times, so they vary a lot).
MAX_REASONS_PER_STAGE = 20


class DatasetConflict(ValueError):
    """A dataset of that name exists with other content."""


class UnknownDataset(LookupError):
    """No dataset has that name."""


def content_hash(records: list[DatasetRecord]) -> str:
    return hashlib.sha256("\n".join(sorted(r.source_hash or "" for r in records)).encode()).hexdigest()


def _problem_id(session: Session, record: DatasetRecord) -> str:
    source_hash = record.source_hash
    assert source_hash is not None  # set by _with_hashes
    existing = session.scalar(select(Problem).where(Problem.source_hash == source_hash))
    if existing is not None:
        return existing.id
    problem = Problem(
        source_hash=source_hash,
        source=record.code,
        name=" -> ".join(op.rsplit(".", 1)[-1] for op in record.ops)[:200] or None,
        ops=record.ops,
        data_source=record.data_source,
        tags=["synthesized", f"ops:{len(record.ops)}", *([record.composer] if record.composer else [])],
    )
    session.add(problem)
    session.flush()
    return problem.id


def _with_hashes(records: list[DatasetRecord]) -> list[DatasetRecord]:
    return [r if r.source_hash else r.model_copy(update={"source_hash": problem_hash(r.code)}) for r in records]


def _stored_name(name: str, tenant: str | None) -> str:
    """Names are unique per owner: a tenant's live under its own prefix ('/' is in neither a tenant nor a dataset
    name), so one tenant's name neither collides with nor reveals another's."""
    return name if tenant is None else f"{tenant}/{name}"


def _shown_name(dataset: Dataset) -> str:
    return dataset.name.removeprefix(f"{dataset.tenant}/") if dataset.tenant else dataset.name


def _visible(dataset: Dataset | None, tenant: str | None) -> Dataset | None:
    """The dataset when ``tenant`` owns it (None: the operator's own, made from the CLI), else None: another
    tenant's dataset does not exist for this one."""
    return dataset if dataset is not None and dataset.tenant == tenant else None


def save_dataset(
    name: str,
    records: list[DatasetRecord],
    spec: dict[str, Any] | None = None,
    split: str = "train",
    tenant: str | None = None,
) -> str:
    """The dataset's id; idempotent for the same name and problems, DatasetConflict for other problems."""
    records = _with_hashes(records)
    digest = content_hash(records)
    name = _stored_name(name, tenant)
    with session_scope() as session:
        existing = session.scalar(select(Dataset).where(Dataset.name == name))
        if existing is not None:
            if existing.spec.get("content_hash") == digest:
                return existing.id
            raise DatasetConflict(f"dataset {name!r} exists with other problems; save under a new name")
        dataset = Dataset(
            name=name,
            tenant=tenant,
            spec={
                **(spec or {}),
                "content_hash": digest,
                "items": {
                    r.source_hash: r.model_dump(mode="json", include={"filters", "seed", "index", "composer"})
                    for r in records
                },
            },
        )
        session.add(dataset)
        session.flush()
        seen: set[str] = set()
        for record in records:
            problem_id = _problem_id(session, record)
            if problem_id not in seen:  # the same code twice in one import is one item
                seen.add(problem_id)
                session.add(DatasetItem(dataset_id=dataset.id, problem_id=problem_id, split=split))
        return dataset.id


def load_dataset(name: str) -> tuple[dict[str, Any], list[DatasetRecord]]:
    """(spec, records) of a stored dataset, in the order of their index then hash."""
    from cuda_agent.dataset.export import DatasetRecord

    with session_scope() as session:
        dataset = session.scalar(select(Dataset).where(Dataset.name == name))
        if dataset is None:
            raise UnknownDataset(f"no dataset named {name!r}")
        rows = session.execute(
            select(Problem)
            .join(DatasetItem, DatasetItem.problem_id == Problem.id)
            .where(DatasetItem.dataset_id == dataset.id)
        ).scalars()
        items = dataset.spec.get("items", {})
        records = [
            DatasetRecord(
                code=p.source,
                ops=list(p.ops),
                data_source=p.data_source,
                op_count=len(p.ops),
                source_hash=p.source_hash,
                **items.get(p.source_hash, {}),
            )
            for p in rows
        ]
        spec = {k: v for k, v in dataset.spec.items() if k != "items"}
    records.sort(key=lambda r: (r.index if r.index is not None else 1 << 62, r.source_hash or ""))
    return spec, records


def save_report(name: str, report: SynthesisReport, tenant: str | None = None) -> str:
    """Save a synthesis: its kept problems as items, its options, statistics and rejections in the spec."""
    from cuda_agent.dataset.export import records_from_report

    spec = {
        "seed": report.seed,
        "n": report.n,
        "options": report.options.model_dump(mode="json"),
        "fingerprint": report.options.fingerprint(),
        "stats": report.stats.model_dump(mode="json"),
        "rejections": [r.model_dump(mode="json") for r in report.rejections],
    }
    return save_dataset(name, records_from_report(report), spec, tenant=tenant)


def find_dataset(name: str, tenant: str | None = None) -> tuple[str, dict[str, Any]] | None:
    """(id, spec without its per-problem records) of ``tenant``'s dataset called ``name``, or None."""
    with session_scope() as session:
        dataset = session.scalar(select(Dataset).where(Dataset.name == _stored_name(name, tenant)))
        if dataset is None:
            return None
        return dataset.id, {k: v for k, v in dataset.spec.items() if k not in ("items", "rejections")}


def _item_counts(session: Session, dataset_ids: list[str]) -> dict[str, int]:
    rows = session.execute(
        select(DatasetItem.dataset_id, func.count())
        .where(DatasetItem.dataset_id.in_(dataset_ids))
        .group_by(DatasetItem.dataset_id)
    )
    return {dataset_id: count for dataset_id, count in rows}


def list_datasets(tenant: str | None, offset: int = 0, limit: int = 100) -> list[DatasetSummary]:
    """``tenant``'s datasets, oldest first, with their problem counts and statistics."""
    owned = Dataset.tenant.is_(None) if tenant is None else Dataset.tenant == tenant
    with session_scope() as session:
        query = select(Dataset).where(owned).order_by(Dataset.created_at, Dataset.id).offset(offset).limit(limit)
        datasets = list(session.scalars(query))
        counts = _item_counts(session, [d.id for d in datasets])
        return [
            DatasetSummary(
                id=d.id,
                name=_shown_name(d),
                created_at=d.created_at,
                problems=counts.get(d.id, 0),
                stats=d.spec.get("stats"),
            )
            for d in datasets
        ]


def _removed_by_reason(rejections: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Rejections counted by stage and reason, the most frequent reasons first."""
    by_stage: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for rejection in rejections:
        by_stage[rejection["stage"]][rejection["reason"]] += 1
    return {stage: dict(reasons.most_common(MAX_REASONS_PER_STAGE)) for stage, reasons in sorted(by_stage.items())}


def dataset_detail(dataset_id: str, tenant: str | None) -> DatasetDetail | None:
    """A dataset's statistics, options and removals by stage and reason; None when ``tenant`` has no such dataset."""
    with session_scope() as session:
        dataset = _visible(session.get(Dataset, dataset_id), tenant)
        if dataset is None:
            return None
        spec = dataset.spec
        return DatasetDetail(
            id=dataset.id,
            name=_shown_name(dataset),
            created_at=dataset.created_at,
            problems=_item_counts(session, [dataset.id]).get(dataset.id, 0),
            stats=spec.get("stats"),
            seed=spec.get("seed"),
            options=spec.get("options"),
            removed_by_reason=_removed_by_reason(spec.get("rejections", [])),
        )


def dataset_problems(dataset_id: str, tenant: str | None, offset: int, limit: int) -> DatasetProblemsPage | None:
    """One page of a dataset's problems in a stable order (by source hash); None when ``tenant`` has no such one."""
    with session_scope() as session:
        dataset = _visible(session.get(Dataset, dataset_id), tenant)
        if dataset is None:
            return None
        items = dataset.spec.get("items", {})
        rows = session.execute(
            select(Problem, DatasetItem.split)
            .join(DatasetItem, DatasetItem.problem_id == Problem.id)
            .where(DatasetItem.dataset_id == dataset_id)
            .order_by(Problem.source_hash)
            .offset(offset)
            .limit(limit)
        )
        page = [
            DatasetProblem(
                problem_id=problem.id,
                source_hash=problem.source_hash,
                ops=list(problem.ops),
                op_count=len(problem.ops),
                data_source=problem.data_source,
                split=split,
                code=problem.source,
                filters=items.get(problem.source_hash, {}).get("filters"),
            )
            for problem, split in rows
        ]
        total = _item_counts(session, [dataset_id]).get(dataset_id, 0)
        return DatasetProblemsPage(total=total, offset=offset, limit=limit, items=page)
