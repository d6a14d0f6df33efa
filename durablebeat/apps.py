from django.apps import AppConfig


class DurablebeatConfig(AppConfig):
    name = "durablebeat"
    verbose_name = "Durable beat"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks

        checks.register()
