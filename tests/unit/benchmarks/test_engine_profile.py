"""The engine-profile bench's pure parts: the burst timeline, the bursts and the sustained loop on a fake engine."""

from __future__ import annotations

import math

import pytest

from benchmarks.engine_profile import _timeline, main, sustain_points


def test_timeline_counts_from_the_first_arrival():
    rows = [
        {"queued": 10.0, "scheduled": 10.1, "first_token": 11.0, "last_token": 14.0},
        {"queued": 10.5, "scheduled": 12.0, "first_token": 15.0, "last_token": 16.0},
    ]
    t = _timeline(rows, prompt_tokens=1000)
    assert t["last_arrival_s"] == 0.5
    assert t["last_scheduled_s"] == 2.0
    assert t["last_first_token_s"] == 5.0
    assert t["last_token_s"] == 6.0
    assert t["prefill_tokens_per_s"] == 400.0  # 2 clips x 1000 tokens by 5 s
    assert t["decode_tail_s"] == 1.0
    assert t["prefill_s"]["mean"] == pytest.approx((0.9 + 3.0) / 2)  # scheduled -> first token


@pytest.mark.parametrize(("argv", "says"), [
    (["--profile-iters", "0"], "--profile-iters >= 1"),  # the default bursts include `profiled`
    (["--bursts", "cold", "profiled", "--profile-iters", "0"], "--profile-iters >= 1"),
    (["--inflight", "0", "--bursts", "cold"], "--inflight must be >= 1"),
    (["--bursts", "sustained", "--sustain-s", "40", "--sustain-warmup-s", "45"], "--sustain-warmup-s < --sustain-s"),
    (["--bursts", "sustained", "--sustain-warmup-s", "-1"], "0 <= --sustain-warmup-s"),
])
def test_arguments_that_would_waste_a_gpu_run_are_refused_before_the_engine_starts(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert says in capsys.readouterr().err


def test_a_clips_questions_share_its_id_and_salt_and_no_other_clip_does():
    import numpy as np

    from benchmarks.engine_profile import _prompts

    frames = np.zeros((4, 56, 56, 3), np.uint8)
    groups = _prompts([frames, frames], "frames", {}, ("Is anyone in danger?", "How many cars?"))
    assert [len(g) for g in groups] == [2, 2]
    for g in groups:
        salts = {p["cache_salt"] for p in g}
        assert len(salts) == 1
        assert {p["multi_modal_uuids"]["video"][0] for p in g} == salts  # the salt is the clip's multimodal id
        assert "Is anyone in danger?" in g[0]["prompt"] and "How many cars?" in g[1]["prompt"]
    assert groups[0][0]["cache_salt"] != groups[1][0]["cache_salt"]  # the same frames, another clip
    assert _prompts([frames], "frames", {})[0][0]["cache_salt"] != groups[0][0]["cache_salt"]  # nor another burst


class _Out:
    def __init__(self, tokens, prompt_len, metrics=None):
        self.outputs = [type("C", (), {"token_ids": tokens})()]
        self.prompt_token_ids = list(range(prompt_len))
        self.metrics = metrics


class _FakeEngine:
    """AsyncLLM.generate stand-in: logs submissions and first tokens; ``silent`` requests end without one."""

    def __init__(self, silent=()):
        self.log: list[tuple[str, str]] = []
        self.silent = set(silent)

    async def generate(self, prompt, sampling, rid):
        import asyncio

        self.log.append(("submit", rid))
        await asyncio.sleep(0.01)
        m = type("M", (), {"queued_ts": 1.0, "scheduled_ts": 1.1, "first_token_ts": 1.5, "last_token_ts": 2.0})()
        if rid in self.silent:
            yield _Out([], len(prompt["prompt"]), m)
            return
        self.log.append(("first", rid))
        yield _Out([1], len(prompt["prompt"]))
        await asyncio.sleep(0.01)
        yield _Out([2, 3], len(prompt["prompt"]), m)


def _groups(n_clips, n_questions):
    return [[{"prompt": f"q{q}" * (q + 1)} for q in range(n_questions)] for _ in range(n_clips)]


def test_later_questions_are_submitted_at_the_first_ones_first_token():
    import asyncio

    from benchmarks.engine_profile import _burst

    eng = _FakeEngine()
    out = asyncio.run(_burst(eng, _groups(2, 3), None, "b"))
    for clip in ("b-0", "b-1"):
        first_token = eng.log.index(("first", clip))
        later = [eng.log.index(("submit", f"{clip}-q{q}")) for q in (2, 3)]
        assert all(i > first_token for i in later)
    assert out["clips"] == 2 and out["questions_per_clip"] == 3
    assert out["answers_per_s"] == pytest.approx(3 * out["clips_per_s"], rel=1e-3)
    assert out["prompt_tokens"] == [len("q0")]  # the first questions' prompts only
    assert out["engine_timeline"]["last_token_s"] == 1.0  # from the first questions' engine timestamps
    # the later questions' own prefill (scheduled 1.1 s -> first token 1.5 s), from their engine timestamps
    assert out["later_prefill_s"]["p50"] == pytest.approx(0.4)
    assert "later_prefill_s" not in asyncio.run(_burst(_FakeEngine(), _groups(2, 1), None, "c"))


def test_a_first_question_that_ends_without_a_token_still_releases_the_others():
    import asyncio

    from benchmarks.engine_profile import _burst

    eng = _FakeEngine(silent={"b-0"})
    out = asyncio.run(_burst(eng, _groups(1, 2), None, "b"))
    assert ("first", "b-0-q2") in eng.log
    assert math.isnan(out["ttft_s"]["mean"])  # the first question's TTFT: none


def test_more_questions_than_the_set_holds_are_refused(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--questions", "4", "--bursts", "cold"])
    assert e.value.code == 2
    assert "--questions" in capsys.readouterr().err


def test_the_sustained_loop_keeps_the_clips_in_flight_each_time_as_a_new_clip():
    import argparse
    import asyncio
    import itertools

    from benchmarks.engine_profile import _sustained

    made = itertools.count()

    def make_groups(clips):  # as _prompts: one group per clip, a fresh id for every call
        return [[{"prompt": f"q{q}" * (q + 1), "id": (c, next(made))} for q in range(3)] for c in clips]

    class _Recording(_FakeEngine):
        def __init__(self):
            super().__init__()
            self.prompts = []

        async def generate(self, prompt, sampling, rid):
            self.prompts.append(prompt)
            async for out in super().generate(prompt, sampling, rid):
                yield out

    eng = _Recording()
    args = argparse.Namespace(sustain_s=1.0, sustain_warmup_s=0.2, sustain_stagger_s=0.0)
    out = asyncio.run(_sustained(eng, ["clip-a", "clip-b", "clip-c"], make_groups, 3, None, args, 2))
    windows = out["windows_used"]
    assert windows > 2 * 3  # the 3 clips were used again, more than once each (~0.03 s a window, 1 s of sending)
    assert out["questions_per_window"] == 3 and out["concurrency"] == 2
    assert out["counted"] > 0 and out["windows_per_s"] > 0
    heads = [p for p in eng.prompts if p["prompt"] == "q0"]
    assert len(heads) == windows
    assert len({p["id"] for p in heads}) == windows  # every window a new clip identity
    assert {p["id"][0] for p in heads} == {"clip-a", "clip-b", "clip-c"}  # the clips taken in turn
    for i in range(windows):  # each window's later questions went at its first one's first token
        first_token = eng.log.index(("first", f"sustained-{i}"))
        assert all(eng.log.index(("submit", f"sustained-{i}-q{q}")) > first_token for q in (2, 3))
    assert out["later_prefill_s"]["p50"] == pytest.approx(0.4)
    assert out["clips_per_s"] == out["windows_per_s_by_latency"]


def test_sustained_points_are_read_as_questions_by_windows_in_flight():
    assert sustain_points("1x64,3x96, 3x128") == [(1, 64), (3, 96), (3, 128)]


@pytest.mark.parametrize("text", ["64", "4x64", "0x64", "3x0", "3x", "x64", "3*64", "1x64,,3x64", "1.5x64"])
def test_a_point_that_is_not_questions_by_windows_is_refused_with_the_form(text, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--bursts", "sustained", "--sustain-points", text])
    assert e.value.code == 2
    assert "QxN (questions 1-3 x windows in flight >= 1)" in capsys.readouterr().err


def test_sustained_points_run_back_to_back_each_with_its_questions_and_windows_in_flight():
    import argparse
    import asyncio

    from benchmarks.engine_profile import _sustained_points

    class _Counting(_FakeEngine):  # the most requests of each point in the engine at once
        def __init__(self):
            super().__init__()
            self.now: dict[str, int] = {}
            self.most: dict[str, int] = {}
            self.first_submit: dict[str, float] = {}
            self.last_end: dict[str, float] = {}

        async def generate(self, prompt, sampling, rid):
            point = rid.split("-")[0]
            clock = asyncio.get_running_loop().time
            self.first_submit.setdefault(point, clock())
            self.now[point] = self.now.get(point, 0) + 1
            self.most[point] = max(self.most.get(point, 0), self.now[point])
            try:
                if point == "sustained_q1x2":
                    await asyncio.sleep(0.25)  # the first point's windows are slow: its drain takes 0.25 s
                async for out in super().generate(prompt, sampling, rid):
                    yield out
            finally:
                self.now[point] -= 1
                self.last_end[point] = clock()

    def make_groups_for(q):
        return lambda clips: [[{"prompt": f"q{i}" * (i + 1)} for i in range(q)] for _ in clips]

    eng = _Counting()
    args = argparse.Namespace(sustain_points=[(1, 2), (3, 4)], sustain_s=0.6, sustain_warmup_s=0.3,
                              sustain_stagger_s=0.0)
    out = asyncio.run(_sustained_points(eng, ["clip-a"], make_groups_for, None, args))
    assert list(out) == ["sustained_q1x2", "sustained_q3x4"]
    one, three = out["sustained_q1x2"], out["sustained_q3x4"]
    assert (one["questions_per_window"], one["concurrency"]) == (1, 2)
    assert (three["questions_per_window"], three["concurrency"]) == (3, 4)
    assert one["counted"] > 0 and three["counted"] > 0
    assert eng.most["sustained_q1x2"] == 2  # one request per window, 2 windows in flight
    assert eng.most["sustained_q3x4"] == 4 * 3  # 4 windows in flight, each with its 3 questions at once
    # the second point started when the first stopped sending (at 0.6 s), not before, and did not wait for the
    # first one's windows in flight to end
    assert eng.first_submit["sustained_q3x4"] - eng.first_submit["sustained_q1x2"] >= 0.6 - 0.02
    assert eng.first_submit["sustained_q3x4"] < eng.last_end["sustained_q1x2"]
    assert {r.rsplit("-q", 1)[1] for _, r in eng.log if r.startswith("sustained_q3x4") and "-q" in r} == {"2", "3"}
    assert "previous_drain_s" not in one
    assert three["previous_drain_s"] == one["drain_s"] > 0  # the first point's slow windows drained into it


def test_a_point_says_when_the_point_before_drained_into_its_counted_interval(monkeypatch):
    import argparse
    import asyncio

    from benchmarks import engine_profile

    drains = {"sustained_q3x128": 81.0, "sustained_q1x128": 30.0, "sustained_q3x96": 5.0}

    async def fake_sustained(llm, clips, make_groups, n_questions, sampling, args, inflight, tag):
        return {"drain_s": drains[tag]}

    monkeypatch.setattr(engine_profile, "_sustained", fake_sustained)
    args = argparse.Namespace(sustain_points=[(3, 128), (1, 128), (3, 96)], sustain_s=0.01, sustain_warmup_s=40.0)
    out = asyncio.run(engine_profile._sustained_points(None, [], lambda q: None, None, args))
    assert out["sustained_q1x128"]["previous_drain_s"] == 81.0
    assert out["sustained_q1x128"]["previous_drain_counted"] is True  # 81 s of drain > 40 s of warm-up
    assert out["sustained_q3x96"]["previous_drain_counted"] is False  # 30 s < 40 s
