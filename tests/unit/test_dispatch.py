"""The dispatcher against a fake broker: what it reports as sent, refused (R21) and kept for
retry (R5) is what the broker took. The engine's ledger side is in the integration tests."""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery.beat import BeatLazyFunc

from durablebeat.beat.dispatch import PUBLISH_GROUP, Dispatcher
from durablebeat.beat.live import LiveValues
from durablebeat.beat.messages import Claim, Message

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
BOOT = uuid.uuid4()


class BrokerDown(ConnectionError):
    pass


class FakeBroker:
    """A broker with kombu's batch semantics: inside ``batch()`` messages are buffered and
    all go out at a clean exit, or none when the exit raises ``exit_error``."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.buffer: list[str] | None = None
        self.batches: list[int] = []
        #: schedule names whose message the client refuses at publish (its content)
        self.refuse: set[str] = set()
        #: schedule names whose publish finds the broker unreachable
        self.down_at: set[str] = set()
        #: raised at a batch's exit (once)
        self.exit_error: Exception | None = None
        #: a batch's exit raises when it holds one of these (a message the broker rejects)
        self.exit_refuses: set[str] = set()

    def publish(self, claim: Claim) -> None:
        if claim.schedule in self.down_at:
            raise BrokerDown("broker unreachable (fake)")
        if claim.schedule in self.refuse:
            raise TypeError(f"cannot serialize {claim.schedule}")
        if self.buffer is not None:
            self.buffer.append(claim.schedule)
        else:
            self.received.append(claim.schedule)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        self.buffer = []
        try:
            yield
            buffered, self.buffer = self.buffer, None
            if self.exit_error is not None:
                error, self.exit_error = self.exit_error, None
                raise error
            if self.exit_refuses & set(buffered):
                raise ValueError("the broker rejected a message of the batch")
            self.batches.append(len(buffered))
            self.received += buffered
        finally:
            self.buffer = None


def _claims(n: int, prefix: str = "s") -> list[Claim]:
    return [
        Claim(
            run_id=i,
            task_id=str(uuid.uuid4()),
            schedule_id=i,
            schedule=f"{prefix}{i}",
            slot=T0,
            reason="on_time",
            boot_id=BOOT,
            message=Message("tests.task", [i]),
        )
        for i in range(n)
    ]


def _dispatcher(broker: FakeBroker, **kwargs: Any) -> Dispatcher:
    return Dispatcher(broker.publish, broker.batch, (BrokerDown,), **kwargs)


def _names(claims: list[Claim]) -> list[str]:
    return [c.schedule for c in claims]


def test_everything_goes_out_in_groups_one_round_trip_each() -> None:
    broker = FakeBroker()
    claims = _claims(2 * PUBLISH_GROUP + 3)
    out = _dispatcher(broker).dispatch(claims)
    assert _names(out.sent) == _names(claims) == broker.received
    assert broker.batches == [PUBLISH_GROUP, PUBLISH_GROUP, 3]
    assert (out.refused, out.unsent, out.outage) == ([], [], None)


@pytest.mark.parametrize(("n", "batches"), [(1, [1]), (2, [1, 1]), (205, [1, 200, 4])])
def test_first_alone_sends_the_first_message_before_the_rest_is_built(
    n: int, batches: list[int]
) -> None:
    """A burst's first message waits for one send, not for its group's (issue 22)."""
    broker = FakeBroker()
    claims = _claims(n)
    out = _dispatcher(broker).dispatch(claims, first_alone=True)
    assert broker.batches == batches
    assert _names(out.sent) == _names(claims)


def test_a_batch_whose_send_fails_for_the_broker_sends_nothing_and_keeps_all_for_retry() -> None:
    """R5: kombu cannot say which messages of a failed batch the broker took: none counts
    as sent, every claim is kept for retry, and the groups after it are not tried."""
    broker = FakeBroker()
    broker.exit_error = BrokerDown("connection reset at flush")
    claims = _claims(PUBLISH_GROUP + 5)
    out = _dispatcher(broker).dispatch(claims)
    assert out.sent == [] and out.refused == []
    assert _names(out.unsent) == _names(claims)
    assert out.outage is not None and "connection reset at flush" in out.outage
    assert broker.received == []


def test_one_refused_message_fails_only_its_slot() -> None:
    """R21: a message refused for its own content fails its slot; the rest goes out."""
    broker = FakeBroker()
    broker.refuse = {"s3"}
    claims = _claims(6)
    out = _dispatcher(broker).dispatch(claims)
    assert [(c.schedule, why.split(":")[0]) for c, why in out.refused] == [("s3", "TypeError")]
    assert _names(out.sent) == ["s0", "s1", "s2", "s4", "s5"] == broker.received
    assert out.unsent == [] and out.outage is None


def test_an_outage_part_way_stops_the_rest_and_keeps_it_for_retry() -> None:
    """R5: the first publish that finds the broker down stops the sending; what was buffered
    before it still goes out, everything after it (later groups too) is kept."""
    broker = FakeBroker()
    broker.down_at = {"s4"}
    claims = _claims(PUBLISH_GROUP + 10)
    out = _dispatcher(broker).dispatch(claims)
    assert _names(out.sent) == ["s0", "s1", "s2", "s3"] == broker.received
    assert _names(out.unsent) == _names(claims[4:])
    assert out.refused == []
    assert out.outage is not None and out.outage.startswith("BrokerDown")


def test_a_batch_refused_for_its_content_is_sent_one_by_one_to_find_the_message_at_fault() -> None:
    """A batch whose exit fails for a reason that is not the broker's is sent again message
    by message: only the message at fault fails (R21)."""
    broker = FakeBroker()
    broker.exit_refuses = {"s2"}
    claims = _claims(5)
    dispatcher = _dispatcher(broker)
    real_publish = broker.publish

    def publish(claim: Claim) -> None:
        if broker.buffer is None and claim.schedule == "s2":
            raise ValueError("rejected on its own")
        real_publish(claim)

    dispatcher.publish = publish
    out = dispatcher.dispatch(claims)
    assert _names(out.sent) == ["s0", "s1", "s3", "s4"] == broker.received
    assert [c.schedule for c, _ in out.refused] == ["s2"]
    assert out.unsent == [] and out.outage is None


def test_an_outage_during_the_one_by_one_resend_keeps_the_rest() -> None:
    broker = FakeBroker()
    broker.exit_error = ValueError("not the broker's fault")
    claims = _claims(4)
    dispatcher = _dispatcher(broker)
    real_publish = broker.publish

    def publish(claim: Claim) -> None:
        if broker.buffer is None and claim.schedule == "s2":
            raise BrokerDown("gone during the resend")
        real_publish(claim)

    dispatcher.publish = publish
    out = dispatcher.dispatch(claims)
    assert _names(out.sent) == ["s0", "s1"]
    assert _names(out.unsent) == ["s2", "s3"]
    assert out.outage is not None and "gone during the resend" in out.outage


def test_every_send_carries_the_code_entrys_live_values() -> None:
    """R25: the row's stored form is replaced by the entry's values at each publish."""
    sent: list[Claim] = []
    calls = iter(range(100))
    live = LiveValues((BeatLazyFunc(lambda: next(calls)),), {"k": "v"})
    dispatcher = Dispatcher(sent.append, live={"s0": live})
    claims = _claims(2)
    dispatcher.dispatch(claims)
    assert dispatcher.send_one(claims[0]) is None
    assert [(c.schedule, c.message.args) for c in sent] == [("s0", [0]), ("s1", [1]), ("s0", [1])]


def test_send_one_says_why_a_publish_did_not_go_out() -> None:
    broker = FakeBroker()
    dispatcher = _dispatcher(broker)
    broker.down_at = {"s0"}
    broker.refuse = {"s1"}
    down, refused = (dispatcher.send_one(c) for c in _claims(2))
    assert down is not None and down.outage
    assert refused is not None and not refused.outage and refused.error.startswith("TypeError")


@pytest.mark.parametrize("n", [0, 1])
def test_nothing_to_send_sends_nothing(n: int) -> None:
    broker = FakeBroker()
    out = _dispatcher(broker).dispatch(_claims(n))
    assert len(out.sent) == n and out.unsent == [] and out.refused == []
