"""Submitting jobs: idempotency keys of any length, scoped by tenant and kind; the per-tenant limit holds under
concurrent submissions (Postgres and the embedded SQLite); an unreachable broker does not lose a submission."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from cuda_agent.contracts.common import JobKind, JobStatus
from cuda_agent.jobs import TenantLimitExceeded, create_job, get_job, submit_job


def submit_concurrently(count: int, limit: int) -> Counter[str]:
    barrier = threading.Barrier(count)
    outcomes: Counter[str] = Counter()

    def submit() -> None:
        barrier.wait()
        try:
            create_job(JobKind.OPTIMIZE, {"n": 1}, tenant="tenant-a", limit=limit)
            outcomes["accepted"] += 1
        except TenantLimitExceeded:
            outcomes["refused"] += 1

    threads = [threading.Thread(target=submit) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


@pytest.mark.integration
def test_limit_is_exact_under_concurrent_submissions_on_postgres(pg_url: str) -> None:
    assert submit_concurrently(10, limit=4) == Counter(accepted=4, refused=6)
    # Another tenant and another kind have their own counts.
    create_job(JobKind.OPTIMIZE, {}, tenant="tenant-b", limit=4)
    create_job(JobKind.PROBE, {}, tenant="tenant-a", limit=4)


def test_limit_is_exact_under_concurrent_submissions_embedded(embedded_db: None) -> None:
    assert submit_concurrently(10, limit=4) == Counter(accepted=4, refused=6)


def test_limit_refusal_names_the_tenant_and_the_limit(embedded_db: None) -> None:
    create_job(JobKind.OPTIMIZE, {}, tenant="tenant-a", limit=1)
    with pytest.raises(TenantLimitExceeded, match=r"tenant tenant-a already has 1 optimize jobs .* \(limit 1\)"):
        create_job(JobKind.OPTIMIZE, {}, tenant="tenant-a", limit=1)


def test_a_retry_at_the_limit_gets_its_job_back_not_a_refusal(embedded_db: None) -> None:
    first, created = create_job(JobKind.OPTIMIZE, {}, tenant="tenant-a", idempotency_key="retry", limit=1)
    again, created_again = create_job(JobKind.OPTIMIZE, {}, tenant="tenant-a", idempotency_key="retry", limit=1)
    assert created and not created_again and again.id == first.id


def test_idempotency_key_is_scoped_by_tenant_and_kind(embedded_db: None) -> None:
    probe = submit_job(JobKind.PROBE, {"echo": "1"}, tenant="a", idempotency_key="k")
    assert submit_job(JobKind.PROBE, {"echo": "2"}, tenant="a", idempotency_key="k").id == probe.id
    other_tenant = submit_job(JobKind.PROBE, {"echo": "3"}, tenant="b", idempotency_key="k")
    other_kind, _ = create_job(JobKind.COMPILE, {"files": {}}, tenant="a", idempotency_key="k")
    assert len({probe.id, other_tenant.id, other_kind.id}) == 3
    # The stored parts cannot run into each other: tenant "a:b" with key "c" is not tenant "a" with key "b:c".
    joined = submit_job(JobKind.PROBE, {}, tenant="a:b", idempotency_key="c")
    assert joined.id != submit_job(JobKind.PROBE, {}, tenant="a", idempotency_key="b:c").id


@pytest.mark.integration
def test_keys_of_any_length_are_stored_on_postgres(pg_url: str) -> None:
    tenant = "t" * 64
    for key in ("k" * 128, "k" * 129, "é" * 10_000):
        first = submit_job(JobKind.PROBE, {"echo": key[:3]}, tenant=tenant, idempotency_key=key)
        assert first.status is JobStatus.SUCCEEDED
        assert submit_job(JobKind.PROBE, {}, tenant=tenant, idempotency_key=key).id == first.id


@pytest.mark.integration
def test_submission_with_the_broker_down_is_kept_for_the_sweep(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from cuda_agent.queue.app import make_celery
    from cuda_agent.settings import get_settings
    from tests.integration.conftest import free_port

    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    get_settings.cache_clear()
    app = make_celery()
    app.conf.broker_transport_options = {**app.conf.broker_transport_options, "max_retries": 1}
    monkeypatch.setattr("cuda_agent.queue.celery_app", app)
    job = submit_job(JobKind.PROBE, {"echo": "later"})
    stored = get_job(job.id)
    assert stored.status is JobStatus.QUEUED and stored.dispatched_at is None
