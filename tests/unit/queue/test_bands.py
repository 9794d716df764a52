"""Which priority bands a reader looks at (docs/architecture.md §4.16): work of the
default priority alone must cost the read no command more than before bands, and
another band must still be seen within PROBE_SECONDS by a reader that never blocks."""

from __future__ import annotations

import composer_queue as cq
from composer_queue import _redis
from composer_queue._redis import _Bands

SHARD = cq.stream_name("p", "q", 0)
OTHER = cq.stream_name("p", "q", 1)


def test_band_3_is_the_shard_s_stream_and_the_others_share_its_cluster_slot() -> None:
    assert cq.band_stream(SHARD, 3) == SHARD == cq.task_stream("p", "q", "t", 1)
    band1 = cq.band_stream(SHARD, 1)
    assert band1 == "p:q:q:0:p1{p:q:q:0}"
    assert band1.startswith("p:q:")  # listed and dropped with the prefix's streams
    assert band1[band1.index("{") + 1 : band1.index("}")] == SHARD  # the hash tag
    assert cq.band_stream(SHARD, 9) == SHARD  # a band out of 1..5: the default


def test_a_shard_is_looked_at_whole_once_then_band_3_alone() -> None:
    now = [100.0]
    bands = _Bands(clock=lambda: now[0])

    keys, layout = bands.plan([SHARD])
    assert keys == [SHARD, *(cq.band_stream(SHARD, b) for b in (1, 2, 4, 5))]
    assert layout == [5, 3, -1, -2, -4, -5]  # the others only if XLEN finds entries
    bands.seen(keys, [])

    assert bands.plan([SHARD]) == ([SHARD], [1, 3])  # one XREADGROUP, as before bands
    now[0] += _redis.PROBE_SECONDS
    assert len(bands.plan([SHARD])[0]) == 5  # a reader that never blocks looks again


def test_a_band_seen_holding_entries_is_read_until_it_is_empty() -> None:
    bands = _Bands(clock=lambda: 100.0)
    keys, _ = bands.plan([SHARD, OTHER])
    urgent = cq.band_stream(OTHER, 1)
    bands.seen(keys, [urgent])

    assert bands.plan([SHARD, OTHER]) == ([SHARD, OTHER, urgent], [1, 3, 2, 3, 1])
    assert bands.by_band([SHARD, OTHER]) == [OTHER, SHARD]  # a cluster reads it first
    bands.seen([SHARD, OTHER, urgent], [])
    assert bands.plan([SHARD, OTHER]) == ([SHARD, OTHER], [1, 3, 1, 3])


def test_a_blocked_read_counts_as_a_look_at_every_band() -> None:
    now = [100.0]
    bands = _Bands(clock=lambda: now[0])
    now[0] += 50
    low = cq.band_stream(SHARD, 5)
    bands.waited([SHARD], [cq.Entry(low, "1-0", {})])

    assert bands.plan([SHARD]) == ([SHARD, low], [2, 3, 5])
    assert bands.by_band([OTHER, SHARD]) == [OTHER, SHARD]  # never behind for a worse band
