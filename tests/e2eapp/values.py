"""Send-time values for e2e beat schedules (``BeatLazyFunc``): no Django import, so the
settings module can name them before the apps are ready."""

import uuid


def fire_stamp() -> str:
    """A value that differs at every call: each fire's message carries its own (R25)."""
    return uuid.uuid4().hex[:8]
