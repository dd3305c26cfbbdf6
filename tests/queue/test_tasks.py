"""The Celery tasks come from the job registry: one per kind, under the names queued messages already carry, routed
to the kind's queue; a worker needs nothing from services/."""

from __future__ import annotations

from kombu import Queue

from cuda_agent.contracts.common import JobKind, QueueName
from cuda_agent.jobs import JOB_SPECS
from cuda_agent.queue import celery_app
from cuda_agent.queue.app import make_celery

# The names of the tasks as they were when messages were first queued: renaming one strands its waiting messages.
TASK_NAMES = {
    JobKind.PROBE: "jobs.probe",
    JobKind.COMPILE: "compile.build",
    JobKind.EVALUATE: "eval.evaluate",
    JobKind.PROFILE: "eval.profile",
    JobKind.OPTIMIZE: "agent.optimize",
    JobKind.SYNTHESIZE_DATASET: "dataset.synthesize",
    JobKind.MEASURE_PROBLEM: "dataset.measure_problem",
    JobKind.START_TRAINING: "train.start",
}


def test_every_job_kind_has_its_task_under_its_old_name() -> None:
    celery_app.loader.import_default_modules()  # what a worker does at start: import the app's task modules
    assert {kind: spec.task_name for kind, spec in JOB_SPECS.items()} == TASK_NAMES
    assert set(JobKind) == set(JOB_SPECS)
    for name in TASK_NAMES.values():
        assert name in celery_app.tasks, name
        assert celery_app.tasks[name].__module__ == "cuda_agent.queue.tasks"


def test_each_task_is_routed_to_its_kinds_queue() -> None:
    app = make_celery()
    routes = {name: app.amqp.router.route({}, name)["queue"].name for name in TASK_NAMES.values()}
    assert routes == {
        "jobs.probe": QueueName.COMPILE.value,
        "compile.build": QueueName.COMPILE.value,
        "eval.evaluate": QueueName.EVAL.value,
        "eval.profile": QueueName.PROFILE.value,
        "agent.optimize": QueueName.ROLLOUT.value,
        "dataset.synthesize": QueueName.DATASET.value,
        "dataset.measure_problem": QueueName.EVAL.value,
        "train.start": QueueName.TRAIN.value,
    }
    assert {q.name for q in app.conf.task_queues if isinstance(q, Queue)} == {q.value for q in QueueName}


def test_the_worker_imports_no_service_module() -> None:
    app = make_celery()
    assert not [module for module in app.conf.include if not module.startswith("cuda_agent.")]
