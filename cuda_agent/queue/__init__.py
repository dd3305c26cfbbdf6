"""The Celery app, the one queue map, and the task routes."""

from cuda_agent.queue.app import celery_app, make_celery

__all__ = ["celery_app", "make_celery"]
