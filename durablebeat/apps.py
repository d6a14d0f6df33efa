"""The Django app config: once the app registry is ready, it registers the system checks
(``durablebeat.E001``...) and connects the workers' run tracking to Celery's task signals,
and, where Sentry is loaded, a pause's report to it (R36)."""

import sys

from django.apps import AppConfig


class DurablebeatConfig(AppConfig):
    name = "durablebeat"
    verbose_name = "Durable beat"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported once the app registry is ready: both import the models.
        from . import checks, wakeup
        from .beat import boots
        from .worker import tracking

        checks.register()
        # Completion tracking in every worker that loads Django, with no code in user tasks.
        tracking.connect()
        # R31: a saver asks whether a live beat's LISTEN is deaf (below the models, wakeup
        # cannot import them)
        wakeup.deaf_beat_alive = boots.listen_deaf_alive
        if "sentry_sdk" in sys.modules:  # R36: a pause is a Sentry issue, where Sentry is loaded
            from . import sentry

            sentry.connect_pauses()
