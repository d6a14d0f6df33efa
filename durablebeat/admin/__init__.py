"""The Django admin (R19): schedules with their next fire in words, enable / disable / run
now / reset, read-only run history, the timeline, and a health summary when ``check`` would
fail.

Permissions are Django's model permissions: the actions need "change schedule"; the run
history, boots, missed slots and incidents are view-only for everyone. Importing this
package registers every model (Django's admin autodiscovery imports ``durablebeat.admin``).
"""

from .base import local
from .ledger import BootAdmin, IncidentAdmin, MissedSlotsAdmin, RunAdmin, WorkerHeartbeatAdmin
from .schedules import ScheduleAdmin, health_context

__all__ = [
    "BootAdmin",
    "IncidentAdmin",
    "MissedSlotsAdmin",
    "RunAdmin",
    "ScheduleAdmin",
    "WorkerHeartbeatAdmin",
    "health_context",
    "local",
]
