"""The worker side: run tracking from Celery signals, completion, the worker's liveness."""
