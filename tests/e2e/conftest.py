from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis
from django.db import connection

from .harness import Cluster

# Redis database 14 by default; a parallel run sets DURABLEBEAT_TEST_REDIS_DB to its own.
BROKER = f"redis://127.0.0.1:6379/{os.environ.get('DURABLEBEAT_TEST_REDIS_DB', '14')}"


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
