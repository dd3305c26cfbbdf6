"""The five services: thin FastAPI adapters over the cuda_agent library (their Celery tasks: cuda_agent.queue)."""
