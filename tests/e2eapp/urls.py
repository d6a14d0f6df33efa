"""No URLs: the URL conf of a worker whose Django has no durablebeat (tests.settings with
E2E_WITHOUT_DURABLEBEAT=1), which cannot import ``durablebeat.urls``."""

from typing import Any

urlpatterns: list[Any] = []
