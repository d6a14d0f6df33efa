from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from django.db import connection

from .harness import Cluster

BROKER = "redis://127.0.0.1:6379/14"


def _database_url() -> str:
    s = connection.settings_dict
    if connection.vendor != "postgresql":
        pytest.skip("e2e tests run on PostgreSQL")
    user = s.get("USER") or "postgres"
    return f"postgres://{user}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


@pytest.fixture
def cluster(request: pytest.FixtureRequest, transactional_db: None) -> Iterator[Cluster]:
    redis.Redis.from_url(BROKER).flushdb()
    c = Cluster(_database_url(), BROKER, request.node.name.replace("[", "-").rstrip("]"))
    try:
        yield c
    finally:
        c.stop_all()
        connection.close()
