"""Putting claimed slots on the broker: the one place beat publishes (R3, R5, R21, R25).

The loop (``engine.Engine``) claims slots and hands them here; the ``Dispatcher`` sends them
``PUBLISH_GROUP`` per broker round trip and says what happened to each: sent, refused for
its own content (its slot fails, R21), or not sent because the broker is unreachable (kept
and retried, R5). It never touches the ledger for a send: the caller confirms what went out
in one write. Its one write of its own is ``fail_refused``, which records why a slot's
message could not be sent.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .. import signals
from ..enums import RunState
from .claims import mark_unpublishable
from .live import LiveValues
from .loop import Refused
from .messages import Claim
from .publishing import BROKER_UNAVAILABLE

logger = logging.getLogger("durablebeat")

Publisher = Callable[[Claim], None]
#: a context in which publishes are buffered and sent together on a clean exit (kombu's
#: ``Producer.batch``); its exit raises when the buffered messages could not be sent
PublishBatch = Callable[[], contextlib.AbstractContextManager[Any]]
#: revokes task ids (Celery's ``app.control.revoke``), terminating their bodies when asked
Revoker = Callable[[list[str], bool], None]
#: claims published per batch: the first message of a burst waits for this many, the
#: broker sees one round trip for them
PUBLISH_GROUP = 200


@dataclass
class Outcome:
    """What became of the claims handed to ``Dispatcher.dispatch``, each in exactly one
    list, in the order given."""

    sent: list[Claim] = field(default_factory=list)
    #: refused for its own content, with why (R21: its slot fails, nothing is retried)
    refused: list[tuple[Claim, str]] = field(default_factory=list)
    #: not sent: the broker is unreachable (R5: keep them claimed, retry them)
    unsent: list[Claim] = field(default_factory=list)
    #: the broker error that stopped the sending; None when nothing did
    outage: str | None = None


@dataclass
class Dispatcher:
    publish: Publisher
    publish_batch: PublishBatch = contextlib.nullcontext
    #: the exceptions that mean "the broker is unreachable" (``publishing.broker_errors``);
    #: any other exception a publish raises is about the message
    broker_errors: tuple[type[BaseException], ...] = BROKER_UNAVAILABLE
    #: the real args/kwargs of the code schedules whose rows cannot hold them (R25)
    live: dict[str, LiveValues] = field(default_factory=dict)
    #: R34: revokes the runs an ``overlap=replace`` slot replaced (None: nothing to revoke
    #: with, as in tests that drive the engine with a fake publisher)
    revoke: Revoker | None = None

    def dispatch(self, claims: list[Claim], first_alone: bool = False) -> Outcome:
        """Send ``claims`` in groups of ``PUBLISH_GROUP``. After an outage nothing more is
        tried: the rest is unsent. ``first_alone``: the first claim goes out on its own
        before the others are built (a burst's first message waits for one send, not for
        its whole group's)."""
        out = Outcome()
        self._revoke_replaced(claims)
        head = 1 if first_alone and len(claims) > 1 else 0
        groups = [claims[:head]] if head else []
        groups += [claims[i : i + PUBLISH_GROUP] for i in range(head, len(claims), PUBLISH_GROUP)]
        for group in groups:
            if out.outage is not None:
                out.unsent += group
                continue
            sent, refused, out.outage = self._send_group(group)
            out.sent += sent
            out.refused += refused
            settled = {c.task_id for c in sent} | {c.task_id for c, _ in refused}
            out.unsent += [c for c in group if c.task_id not in settled]
        for claim in out.sent:
            log_fire(claim)
        return out

    def _revoke_replaced(self, claims: list[Claim]) -> None:
        """R34: the runs a slot replaced are revoked before it is sent, so that the new one
        never starts beside a body that was to be terminated. A revoke that fails is said
        (the runs are ``replaced`` in the ledger whatever the broker did)."""
        for claim in claims:
            if not claim.replaces or self.revoke is None:
                continue
            try:
                self.revoke(list(claim.replaces), claim.terminate)
            except Exception as exc:  # the broker's errors are many; beat must not die of any
                logger.error(
                    "revoke failed schedule=%s task_ids=%s: %s",
                    claim.schedule,
                    ",".join(claim.replaces),
                    exc,
                    extra={"event": "revoke_failed", "schedule": claim.schedule},
                )

    def send_one(self, claim: Claim) -> Refused | None:
        """Publish one claim on its own; why it did not go out, or None when it went out."""
        refused = self._send(claim)
        if refused is None:
            log_fire(claim)
        return refused

    def _send_group(
        self, group: list[Claim]
    ) -> tuple[list[Claim], list[tuple[Claim, str]], str | None]:
        """Send claims in one batch. Returns those sent, those refused for their own content
        (with why), and the outage error that stopped the rest (None: no outage).

        A batch whose send failed for the broker's sake counts as not sent: it is retried
        (kombu cannot say which of its messages the broker took). One whose send failed
        for any other reason is sent again one by one, to find the message at fault."""
        buffered: list[Claim] = []
        refused: list[tuple[Claim, str]] = []
        try:
            with self.publish_batch():
                outage = self._send_each(group, buffered, refused)
        except Exception as exc:  # the batch's send at its exit
            cause = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
            error = f"{type(exc).__name__}: {exc}{cause}"
            logger.error(
                "publish of a batch of %d failed: %s",
                len(buffered),
                error,
                extra={"event": "publish_failed", "count": len(buffered)},
            )
            if isinstance(exc, self.broker_errors):
                return [], refused, error
            sent: list[Claim] = []
            return sent, refused, self._send_each(buffered, sent, refused)
        return buffered, refused, outage

    def _send_each(
        self, claims: Iterable[Claim], sent: list[Claim], refused: list[tuple[Claim, str]]
    ) -> str | None:
        """Send one by one into ``sent`` and ``refused``; stop at an outage, its error."""
        for claim in claims:
            r = self._send(claim)
            if r is None:
                sent.append(claim)
            elif r.outage:
                return r.error
            else:
                refused.append((claim, r.error))
        return None

    def _send(self, claim: Claim) -> Refused | None:
        try:
            self.publish(self._with_live_values(claim))
        except Exception as exc:  # the broker's errors are many; beat must not die of any
            logger.error(
                "publish failed schedule=%s slot=%s: %s",
                claim.schedule,
                claim.slot.isoformat(),
                exc,
                extra={"event": "publish_failed", "schedule": claim.schedule},
            )
            return Refused(f"{type(exc).__name__}: {exc}", isinstance(exc, self.broker_errors))
        return None

    def _with_live_values(self, claim: Claim) -> Claim:
        """R25: every publish of a code schedule whose row holds the stored form of its
        args/kwargs (a fire, a retry, an in-doubt resend, a fire from memory) sends its
        entry's real values, the send-time ones computed now, as Celery's beat does."""
        live = self.live.get(claim.schedule)
        return claim if live is None else claim.with_arguments(*live.evaluate(), live.callbacks)


def fail_refused(refused: list[tuple[Claim, str]], now: dt.datetime) -> None:
    """R21: claims whose message the broker client refused for its own content: each run
    fails with why (run history, admin, ``check``); the slot is not retried."""
    by_error: dict[str, list[int]] = {}
    for claim, error in refused:
        logger.error(
            "unpublishable schedule=%s slot=%s: %s",
            claim.schedule,
            claim.slot.isoformat(),
            error,
            extra={"event": "unpublishable", "schedule": claim.schedule},
        )
        if claim.run_id is not None:
            by_error.setdefault(error, []).append(claim.run_id)
    for error, run_ids in by_error.items():
        mark_unpublishable(run_ids, error, now)
    for claim, error in refused:  # R30: the run's outcome, to the hook
        signals.send(
            signals.run_finished,
            claim.schedule,
            outcome=RunState.FAILED.value,
            error=error,
            **claim.hook_args(),
        )


def log_fire(claim: Claim) -> None:
    logger.info(
        "fire schedule=%s slot=%s reason=%s boot=%s task_id=%s",
        claim.schedule,
        claim.slot.isoformat(),
        claim.reason,
        claim.boot_id,
        claim.task_id,
        extra={
            "event": "fire",
            "schedule": claim.schedule,
            "slot": claim.slot.isoformat(),
            "reason": claim.reason,
            "boot": str(claim.boot_id),
        },
    )
    if signals.fired.receivers:  # R30: the hook (R28: else no cost)
        signals.send(signals.fired, claim.schedule, spec=claim.spec, **claim.hook_args())
