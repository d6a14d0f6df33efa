"""Sentry in the e2e processes (R30): sentry-sdk with its Celery integration, each envelope
item written as one JSON line to a file instead of the network.

``tests/settings.py`` calls ``init`` when ``E2E_SENTRY_ENVELOPES`` names the file; the test
reads the check-ins and transactions of every process (beat, worker, pool children) there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.integrations.celery import CeleryIntegration
from sentry_sdk.transport import Transport


class FileTransport(Transport):
    """Appends each item of an envelope as one line: its type, the process, its payload."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def capture_envelope(self, envelope: Envelope) -> None:
        lines = []
        for item in envelope.items:
            payload: Any = item.payload.json
            if payload is None:
                continue
            lines.append(json.dumps({"type": item.type, "pid": os.getpid(), "payload": payload}))
        if lines:
            # One write in append mode: lines of processes writing at once never interleave.
            with open(self.path, "a") as f:
                f.write("\n".join(lines) + "\n")


def init(path: str) -> None:
    sentry_sdk.init(
        dsn="https://public@sentry.invalid/1",
        transport=FileTransport(path),
        integrations=[CeleryIntegration(monitor_beat_tasks=True)],
        traces_sample_rate=1.0,
    )


def read(path: Path) -> list[dict[str, Any]]:
    """Every item written so far."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
