"""Queue depth over the last hour: the per-replica series the queue statistics feed
(bounded in queues and minutes, fake times), and its sparkline."""

from __future__ import annotations

from coordinator.app.depths import MINUTE_MS, MINUTES, DepthHistory
from coordinator.dashboard.render import sparkline

T0 = 1_767_225_600_000  # a minute's start


def test_the_newest_read_of_each_minute_is_kept_for_an_hour() -> None:
    history = DepthHistory()
    history.note({("billing", "available"): 4, ("billing", "scheduled"): 1, ("billing", "running"): 9}, T0)
    history.note({("billing", "available"): 7}, T0 + 5_000)  # the same minute: replaces
    history.note({}, T0 + MINUTE_MS)  # read, and nothing waits: 0
    series = history.series("billing", T0 + MINUTE_MS)
    assert len(series) == MINUTES and series[-2:] == (7, 0) and set(series[:-2]) == {None}

    later = T0 + MINUTES * MINUTE_MS  # an hour on: the first minute has gone
    history.note({("billing", "waiting"): 2}, later)
    assert history.series("billing", later)[0] == 0 and history.series("billing", later)[-1] == 2
    assert 7 not in history.series("billing", later)
    unknown = history.series("unknown", later)  # in no read: nothing waited in it
    assert unknown[0] == 0 and unknown[-1] == 0 and unknown[1:-1] == (None,) * (MINUTES - 2)


def test_at_most_max_queues_are_followed() -> None:
    history = DepthHistory(max_queues=2)
    history.note({("a", "available"): 1, ("b", "available"): 1, ("c", "available"): 1}, T0)
    assert [history.series(q, T0)[-1] for q in "abc"] == [1, 1, None]


def test_a_sparkline_breaks_at_minutes_without_a_read_and_scales_to_its_peak() -> None:
    spark = sparkline((None, 0, 10, None, 5))
    assert spark["lines"] == ["1,19.0 2,1.0", "4,10.0 4.8,10.0"]
    assert (spark["peak"], spark["newest"], spark["reads"]) == (10, 5, 3)
    assert sparkline((None, None))["lines"] == [] and sparkline((0,))["lines"] == ["0,19.0 0.8,19.0"]
