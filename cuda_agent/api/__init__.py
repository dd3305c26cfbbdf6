"""What every service's FastAPI app shares: health, readiness, metrics, errors, dependencies."""

from cuda_agent.api.app import create_app

__all__ = ["create_app"]
