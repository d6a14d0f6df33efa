"""What the tools beside beat see, in the e2e processes (R30): Celery's beat and publish
signals, and OpenTelemetry's Celery spans, each written as one JSON line to a file.

``tests/settings.py`` calls ``install`` when ``E2E_OBSERVE`` names the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from celery import signals
from opentelemetry import trace
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

_path = ""


def _write(line: dict[str, Any]) -> None:
    with open(_path, "a") as f:  # one write per line, in append mode
        f.write(json.dumps({**line, "pid": os.getpid()}) + "\n")


class FileExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            kind = span.kind.name
            _write({"span": span.name, "kind": kind, "trace": f"{span.context.trace_id:032x}"})
        return SpanExportResult.SUCCESS


def _signal(name: str) -> Any:
    def receiver(sender: Any = None, headers: Any = None, **_: Any) -> None:
        schedule = (headers or {}).get("durablebeat_schedule")
        _write({"signal": name, "schedule": schedule})

    return receiver


_receivers = {
    name: _signal(name)
    for name in ("beat_init", "beat_embedded_init", "before_task_publish", "after_task_publish")
}


def install(path: str) -> None:
    global _path
    _path = path
    for name, receiver in _receivers.items():
        getattr(signals, name).connect(receiver, weak=False)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
    trace.set_tracer_provider(provider)
    CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]


def read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
