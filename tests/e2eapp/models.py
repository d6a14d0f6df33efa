from django.db import models


class Execution(models.Model):
    """One execution of a task body, written by the body itself: the tests' independent
    count of what really ran, next to durablebeat's own ledger."""

    schedule = models.CharField(max_length=200)
    slot = models.CharField(max_length=64)
    task_id = models.CharField(max_length=255)
    reason = models.CharField(max_length=32, blank=True)
    pid = models.IntegerField()
    at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.schedule} @ {self.slot}"
