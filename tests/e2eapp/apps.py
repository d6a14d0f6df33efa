from django.apps import AppConfig


class E2EAppConfig(AppConfig):
    name = "tests.e2eapp"
    label = "e2eapp"
    default_auto_field = "django.db.models.BigAutoField"
