"""``path("durablebeat/", include("durablebeat.urls"))`` serves ``/durablebeat/metrics``."""

from django.urls import path

from .ops.metrics import metrics_view

app_name = "durablebeat"
urlpatterns = [path("metrics", metrics_view, name="metrics")]
