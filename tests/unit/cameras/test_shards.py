"""Which stream worker owns a stream, the workers' event ids and the merged event cursor (Ray-free)."""

from __future__ import annotations

import collections
import re

import pytest

from serve_app.cameras.protocol import StateEvent
from serve_app.cameras.shards import Cursor, first_event_id, new_stream_id, shard_of
from serve_app.cameras.windows import EventLog
from serve_app.errors import InvalidRequestError


@pytest.mark.parametrize("workers", [1, 2, 3, 5])
def test_a_new_id_belongs_to_the_worker_that_drew_it(workers):
    for shard in range(workers):
        for _ in range(20):
            sid = new_stream_id(shard, workers)
            assert re.fullmatch(r"str_[0-9a-f]{16}", sid) and shard_of(sid, workers) == shard


def test_ids_spread_over_the_workers_and_a_bad_worker_index_is_refused():
    counts = collections.Counter(shard_of(new_stream_id(0, 1), 4) for _ in range(2000))
    assert set(counts) == {0, 1, 2, 3} and min(counts.values()) > 350  # 500 each on average
    with pytest.raises(ValueError, match="worker 2 of 2"):
        new_stream_id(2, 2)


def state(i: int) -> StateEvent:
    return StateEvent(id=i, stream_id="s", time=0.0, state="running", previous=None)


def test_workers_hand_out_disjoint_increasing_event_ids():
    clock_id = 1_733_150_000_000_123
    logs = [EventLog(100, first_id=first_event_id(clock_id, k, 3), step=3) for k in range(3)]
    ids = [[log.next_id() for _ in range(50)] for log in logs]
    for k, own in enumerate(ids):
        assert own == sorted(own) and all(i % 3 == k for i in own) and own[0] >= clock_id
    assert len(set().union(*map(set, ids))) == 150


def test_an_event_log_with_a_step_reports_only_real_gaps_as_missed():
    log = EventLog(3, first_id=first_event_id(1000, 1, 2), step=2)  # ids 1001, 1003, …
    for _ in range(3):
        i = log.next_id()
        log.append(state(i))
    assert log.last_id == 1005
    assert not log.since(1001).missed and [e.id for e in log.since(1001).events] == [1003, 1005]
    for _ in range(2):  # 1007, 1009: 1001 and 1003 fall out of the history of 3
        i = log.next_id()
        log.append(state(i))
    assert log.since(1001).missed and not log.since(1003).missed


@pytest.mark.parametrize(
    "raw, workers, after",
    [
        (None, 3, (None, None, None)),
        ("", 2, (None, None)),
        ("17", 3, (17, 17, 17)),  # one id (a one-worker service's, or one worker's): for every worker
        ("11-20-32", 3, (11, 20, 32)),
        ("42", 1, (42,)),
        ("11-20", 3, (20, 20, 20)),  # from before streams.workers changed: the newest position for all
        ("11-20-32", 1, (32,)),
    ],
)
def test_a_cursor_is_read_from_last_event_id(raw, workers, after):
    assert Cursor.parse(raw, workers).after == after


@pytest.mark.parametrize(
    "raw, workers",
    [("x", 1), ("1-x", 3), ("-5", 2), ("1--2", 2), ("1.5", 2), ("+3", 1), (" 7", 1), ("²", 1), ("9" * 5000, 1),
     ("-".join(["1"] * 65), 2)],
)  # fmt: skip
def test_a_malformed_last_event_id_is_400_naming_the_form(raw, workers):
    with pytest.raises(InvalidRequestError) as e:
        Cursor.parse(raw, workers)
    assert e.value.status == 400 and e.value.param == "Last-Event-ID"
    assert ("integers joined by '-'" in e.value.message) == (workers > 1)


def test_a_cursor_moves_forward_only_and_reads_back_from_its_text():
    c = Cursor((10, 21, None)).moved(2, 32).moved(0, 12).moved(1, 3)
    assert c.after == (12, 21, 32) and c.text() == "12-21-32"
    assert Cursor.parse(c.text(), 3) == c
    assert Cursor((7,)).text() == "7"  # one worker: the plain event id, as before several workers
