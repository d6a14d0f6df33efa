"""The task every benchmark schedule names. Registered in the benchmark's Celery app (its
settings import this module), as a project's tasks are: beat never sends a task nobody
registered (R29). No worker runs it; the benchmarks count messages on the broker."""

from celery import shared_task


@shared_task(name="bench.noop")
def noop(*args: object, **kwargs: object) -> None:
    """Does nothing."""
