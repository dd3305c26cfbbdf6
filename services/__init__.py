"""The five services: thin FastAPI + Celery adapters over the cuda_agent library."""
