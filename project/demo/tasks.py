"""Example tasks of the demo: one of each kind the docs talk about."""

import logging

from celery import shared_task
from django.contrib.sessions.models import Session
from django.utils import timezone

logger = logging.getLogger("durablebeat.demo")


@shared_task
def cleanup_expired_sessions() -> int:
    """Housekeeping, daily: delete expired sessions."""
    deleted, _ = Session.objects.filter(expire_date__lt=timezone.now()).delete()
    logger.info("demo: deleted %d expired sessions", deleted)
    return deleted


@shared_task
def refresh_exchange_rates() -> str:
    """Housekeeping, frequent: stands for a re-fetch of outside data."""
    logger.info("demo: exchange rates refreshed")
    return "ok"


@shared_task(bind=True)
def send_digest(self) -> str:  # type: ignore[no-untyped-def]
    """Delivery: a user-facing digest. Knows which slot it serves from its headers."""
    slot = (self.request.headers or {}).get("durablebeat_slot") or getattr(
        self.request, "durablebeat_slot", None
    )
    logger.info("demo: digest for slot %s sent", slot)
    return f"digest {slot}"
