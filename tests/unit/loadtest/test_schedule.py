"""Arrival schedules: real-time windows, phases, open-loop intervals, Poisson, request caps."""

import itertools
import random
import statistics

import pytest

from loadtest.schedule import camera_times, phases, plan


def test_realtime_camera_sends_one_request_per_window_end():
    assert camera_times("realtime", 0.0, 10.0, 35.0) == [0.0, 10.0, 20.0, 30.0]
    assert camera_times("realtime", 2.5, 10.0, 35.0) == [2.5, 12.5, 22.5, 32.5]
    assert camera_times("realtime", 0.0, 10.0, 30.0) == [0.0, 10.0, 20.0]  # nothing at or after the duration


def test_uniform_phases_spread_a_fleet_over_one_window():
    assert phases(4, [10.0] * 4, "uniform") == [0.0, 2.5, 5.0, 7.5]
    assert phases(3, [6.0] * 3, "none") == [0.0, 0.0, 0.0]
    rnd = phases(50, [10.0] * 50, "random", random.Random(1))
    assert all(0 <= p <= 10 for p in rnd) and len(set(rnd)) == 50
    with pytest.raises(ValueError, match="unknown stagger"):
        phases(2, [1.0, 1.0], "zigzag")
    with pytest.raises(ValueError, match="need 3 intervals"):
        phases(3, [1.0], "uniform")


def test_plan_orders_arrivals_and_sets_deadlines_to_the_next_window():
    arrivals = plan("realtime", [10.0, 10.0], 30.0)
    assert [(a.camera, a.k, a.at_s) for a in arrivals] == [
        (0, 0, 0.0), (1, 0, 5.0), (0, 1, 10.0), (1, 1, 15.0), (0, 2, 20.0), (1, 2, 25.0)]
    assert all(a.deadline_s == 10.0 for a in arrivals)
    capped = plan("realtime", [10.0, 10.0], 30.0, max_requests=3)
    assert [a.at_s for a in capped] == [0.0, 5.0, 10.0]


def test_per_camera_windows_give_per_camera_rates():
    arrivals = plan("realtime", [2.0, 5.0], 10.0, stagger="none")
    assert sum(a.camera == 0 for a in arrivals) == 5 and sum(a.camera == 1 for a in arrivals) == 2


def test_poisson_gaps_average_the_interval_and_deadlines_are_the_actual_gaps():
    arrivals = plan("poisson", [2.0], 4000.0, seed=3)
    times = [a.at_s for a in arrivals]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert statistics.mean(gaps) == pytest.approx(2.0, rel=0.08)
    assert statistics.stdev(gaps) == pytest.approx(2.0, rel=0.1)  # exponential: sd = mean
    assert [a.deadline_s for a in arrivals[:-1]] == pytest.approx(gaps)
    assert plan("poisson", [2.0], 100.0, seed=3) == plan("poisson", [2.0], 100.0, seed=3)


def test_bad_schedules_are_refused():
    with pytest.raises(ValueError, match="interval must be > 0"):
        camera_times("interval", 0.0, 0.0, 10.0)
    with pytest.raises(ValueError, match="no planned times"):
        camera_times("closed", 0.0, 1.0, 10.0)
