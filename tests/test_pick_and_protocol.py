"""pick-configs' rules, the sweep's resume bookkeeping, and the protocol summary, on small fixtures."""

import pandas as pd
import pytest

from fa2lab import pick
from fa2triton.budget import Config
from fa2lab.protocol import format_summary, summarise
from fa2lab.results import append_rows
from fa2lab.forward_sweep import done_keys, merge_parts

SHAPES = [(512, 0), (4096, 0), (512, 1), (4096, 1)]
# config -> ms per shape (lower is better)
MS = {
    (64, 32, 4, 3): [1.00, 1.00, 1.00, 1.00],    # decent everywhere
    (128, 64, 8, 4): [1.30, 0.90, 1.20, 0.95],   # best at N=4096
    (32, 64, 2, 3): [0.95, 1.40, 0.97, 1.50],    # best at N=512
    (16, 16, 1, 1): [3.00, 3.00, 3.00, 3.00],    # slow
}


def sweep_df(extra=()):
    rows = [{"N": N, "causal": c, "q_tile": cfg[0], "k_tile": cfg[1], "num_warps": cfg[2], "num_stages": cfg[3],
             "status": "ok", "ms": ms[i], "tflops": 1.0 / ms[i]}
            for cfg, ms in MS.items() for i, (N, c) in enumerate(SHAPES)]
    return pd.DataFrame(rows + list(extra))


def test_single_winner_is_the_best_geometric_mean():
    cfg, geo = pick.single_winner(sweep_df())
    assert cfg == Config(64, 32, 4, 3)
    # its ratios to each shape's best: .95, .90, .97, .95
    assert geo == pytest.approx((0.95 * 0.90 * 0.97 * 0.95) ** 0.25)


def test_per_shape_winners_and_wrong_rows_never_win():
    wrong = [{"N": 512, "causal": 0, "q_tile": 16, "k_tile": 16, "num_warps": 4, "num_stages": 2,
              "status": "wrong", "ms": 0.01, "tflops": 100.0}]
    winners = {shape: cfg for shape, cfg, _ in pick.per_shape_winners(sweep_df(wrong))}
    assert winners[(512, 0)] == Config(32, 64, 2, 3)
    assert winners[(4096, 1)] == Config(128, 64, 8, 4)


def test_greedy_shortlist_covers_every_shape_within_one_percent():
    chosen, worst = pick.greedy_shortlist(sweep_df(), within=0.01)
    # Greedy on the worst shape: the all-rounder first (worst 0.90), then the long-sequence
    # specialist (0.95), then the short-sequence one (1.0), which every shape's best is in.
    assert chosen == [Config(64, 32, 4, 3), Config(128, 64, 8, 4), Config(32, 64, 2, 3)]
    assert worst == pytest.approx(1.0)
    # a looser bound needs fewer configurations: the all-rounder alone is within 10%
    chosen, worst = pick.greedy_shortlist(sweep_df(), within=0.10)
    assert chosen == [Config(64, 32, 4, 3)] and worst == pytest.approx(0.90)


def test_a_config_missing_a_shape_cannot_be_the_single_winner():
    df = sweep_df([{"N": 512, "causal": 0, "q_tile": 256, "k_tile": 16, "num_warps": 16, "num_stages": 2,
                    "status": "ok", "ms": 0.5, "tflops": 2.0}])
    assert pick.single_winner(df)[0] != Config(256, 16, 16, 2)


def test_sweep_resume_reads_what_is_done(tmp_path):
    path = tmp_path / "sweep.csv"
    assert done_keys(path) == set()
    append_rows(path, [{"N": 512, "causal": 1, "q_tile": 64, "k_tile": 32, "num_warps": 4, "num_stages": 3,
                        "status": "ok", "ms": 0.1}])
    append_rows(path, [{"N": 512, "causal": 0, "q_tile": 16, "k_tile": 16, "num_warps": 1, "num_stages": 1,
                        "status": "skipped_registers", "error": "x"}])   # a new column rewrites the header once
    assert done_keys(path) == {(512, 1, 64, 32, 4, 3), (512, 0, 16, 16, 1, 1)}
    assert list(pd.read_csv(path).columns)[-1] == "error"


def test_parts_from_side_by_side_sweeps_merge_once_and_are_removed(tmp_path):
    def row(causal, q, ms):
        return {"N": 512, "causal": causal, "q_tile": q, "k_tile": 32, "num_warps": 4, "num_stages": 3,
                "status": "ok", "ms": ms}

    merged, a, b = tmp_path / "v0.csv", tmp_path / "v0.gpu0.csv", tmp_path / "v0.gpu1.csv"
    append_rows(merged, [row(0, 64, 0.1)])
    append_rows(a, [row(0, 64, 9.9), row(0, 128, 0.2)])          # the first is already merged: kept as it was
    append_rows(b, [row(1, 64, 0.3)])
    assert merge_parts([a, b], merged) == 2
    assert not a.exists() and not b.exists()
    df = pd.read_csv(merged)
    assert len(df) == 3 and df.loc[(df.q_tile == 64) & (df.causal == 0), "ms"].tolist() == [0.1]
    assert done_keys(merged) == {(512, 0, 64, 32, 4, 3), (512, 0, 128, 32, 4, 3), (512, 1, 64, 32, 4, 3)}


def test_protocol_summary_takes_medians_of_per_run_ratios():
    rows = [{"version": "v5_final", "N": 4096, "causal": 0, "run_id": f"p1/{r}", "ms": ms, "tflops": 1,
             "sdpa_ms": 0.3, "pct_of_sdpa": pct, "pct_of_sdpa_flash": 130}
            for r, (ms, pct) in enumerate([(0.35, 86.0), (0.34, 88.0), (0.33, 91.0)])]
    rows.append({**rows[0], "run_id": "other/1", "pct_of_sdpa": 1.0})       # another protocol: left out
    (s,) = summarise(rows, "p1")
    assert (s["runs"], s["ms"], s["pct_of_sdpa"], s["pct_min"], s["pct_max"]) == (3, 0.34, 88.0, 86.0, 91.0)
    assert "86-91%" in format_summary([s])


def test_graph_time_ranks_where_the_sweep_recorded_it():
    df = sweep_df()
    df["graph_ms"] = float("nan")
    # At N = 512 non-causal, do_bench favoured 32x64 (host noise); graph replay says 64x32 is faster.
    small = (df.N == 512) & (df.causal == 0)
    df.loc[small, "graph_ms"] = df.loc[small].apply(lambda r: 0.5 if r.q_tile == 64 else 0.8, axis=1)
    winners = {shape: cfg for shape, cfg, _ in pick.per_shape_winners(df)}
    assert winners[(512, 0)] == Config(64, 32, 4, 3)
    assert winners[(4096, 0)] == Config(128, 64, 8, 4)   # no graph time there: do_bench decides


def test_missing_rows_counts_what_an_interrupted_sweep_still_lacks():
    from fa2lab import shapes
    from fa2lab.forward_sweep import ALL_CONFIGS

    rows = [{"N": sh.N, "causal": int(sh.causal), "q_tile": c.q_tile, "k_tile": c.k_tile, "num_warps": c.num_warps,
             "num_stages": c.num_stages} for sh in shapes.harness_shapes() for c in ALL_CONFIGS]
    full = pd.DataFrame(rows)
    assert pick.missing_rows(full) == 0
    assert pick.missing_rows(full.iloc[:-7]) == 7
    assert pick.missing_rows(full[full.causal == 0]) == len(full) // 2


def test_parts_live_beside_the_merged_csv_and_merge_into_folds_them(tmp_path):
    from fa2lab.forward_sweep import merge_into, part_path

    merged = tmp_path / "sweep" / "v0_baseline.csv"
    assert part_path(merged, "nc") == tmp_path / "sweep" / "parts" / "v0_baseline.nc.csv"
    row = {"N": 512, "causal": 0, "q_tile": 64, "k_tile": 32, "num_warps": 4, "num_stages": 3, "status": "ok"}
    append_rows(part_path(merged, "nc"), [row])
    append_rows(part_path(merged, "c"), [{**row, "causal": 1}])
    assert merge_into(merged) == f"merged 2 part(s): 2 new rows in {merged}"
    assert done_keys(merged) == {(512, 0, 64, 32, 4, 3), (512, 1, 64, 32, 4, 3)}
    assert not list((merged.parent / "parts").glob("*.csv"))


def _experiments():
    """experiments/tl_pick.py, the experiment whose recorders these tests check."""
    import importlib
    import sys

    from fa2lab.paths import REPO

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module("experiments.tl_pick")


def test_tuning_recorder_keeps_every_timing_in_order_and_gives_the_bench_back():
    """experiment tl-pick's TuningRecorder: one row per timing the autotuner makes (candidate, the median it kept,
    its place in that shape's order, the clock before and after), tagged with the shape set before the call; the
    tuner's own _bench is back afterwards, also when the tuning raises."""
    run = _experiments()

    class Tuner:   # what the recorder relies on in triton.autotune: run() calls self._bench(..., config=c)
        def _bench(self, *args, config, **meta):
            if config < 0:
                raise RuntimeError("compile failed")
            return [config / 10, config / 20, config / 5]

        def tune(self, configs):
            return {c: self._bench(config=c) for c in configs}

    tuner = Tuner()
    clocks = iter([1500.0, 1980.0, 1755.0, 1980.0, 1980.0, 1980.0])
    with run.TuningRecorder(tuner, lambda c: f"cfg{c}", lambda: next(clocks)) as rec:
        rec.shape = {"N": 4096, "causal": 1}
        assert tuner.tune([1, 2]) == {1: [0.1, 0.05, 0.2], 2: [0.2, 0.1, 0.4]}
        rec.shape = {"N": 512, "causal": 0}
        tuner.tune([3])
    assert "_bench" not in tuner.__dict__ and tuner._bench(config=4)[0] == 0.4
    assert [(r["shape"]["N"], r["candidate"], r["order"], r["tuner_ms"]) for r in rec.rows] == [
        (4096, "cfg1", 0, 0.1), (4096, "cfg2", 1, 0.2), (512, "cfg3", 0, 0.3)]
    assert [(r["clock_before_mhz"], r["clock_after_mhz"]) for r in rec.rows[:2]] == [(1500.0, 1980.0),
                                                                                      (1755.0, 1980.0)]
    assert rec.configs == {"cfg1": 1, "cfg2": 2, "cfg3": 3}
    with pytest.raises(RuntimeError, match="compile failed"):
        with run.TuningRecorder(tuner, str, lambda: 0.0):
            tuner.tune([-1])
    assert "_bench" not in tuner.__dict__


def test_race_recorder_names_each_raced_launch_and_puts_queued_ms_back(monkeypatch):
    """experiment tl-pick's RaceRecorder: v7's race (_faster_of, queued_ms looked up per call) run with launches
    that record nothing: one row per timing, named by the launch's path and label, with its ms and place in the
    shape's order; fa2triton.queued_timing.queued_ms is the original again afterwards, also when the race raises."""
    import torch

    import fa2triton.queued_timing
    from fa2triton import race as race_policy
    from fa2triton import versions

    run = _experiments()
    v7 = versions.load("v7_hopper")
    ms = {"gluon": 2.0, "tma": 1.0}

    class FakeLaunch:
        def __init__(self, path, label):
            self.path, self.label = path, label

        def __call__(self, Q, K, V, need_l=True):
            return torch.zeros(1), torch.zeros(1)

    original = fa2triton.queued_timing.queued_ms
    monkeypatch.setattr(fa2triton.queued_timing, "queued_ms", lambda fn, *a, **kw: ms[fn.__defaults__[0].path])
    fake = fa2triton.queued_timing.queued_ms
    gluon, tl = FakeLaunch("gluon", "ws2"), FakeLaunch("tma", "128,128,4,3/p0")
    x = torch.zeros(1)
    with run.RaceRecorder(lambda: 1980.0) as race:
        race.shape = {"N": 4096, "causal": 1}
        assert v7._faster_of(x, x, x, gluon, tl)[2] is tl
    assert fa2triton.queued_timing.queued_ms is fake and fake is not original
    assert len(race.rows) == 2 * race_policy.RACE_ROUNDS
    assert [(r["candidate"], r["race_ms"], r["order"]) for r in race.rows[:4]] == [
        ("gluon:ws2", 2.0, 0), ("tma:128,128,4,3/p0", 1.0, 1), ("tma:128,128,4,3/p0", 1.0, 2), ("gluon:ws2", 2.0, 3)]
    assert all(r["shape"] == {"N": 4096, "causal": 1} and r["clock_before_mhz"] == 1980.0 for r in race.rows)
    with pytest.raises(ZeroDivisionError):
        with run.RaceRecorder(lambda: 0.0):
            v7._faster_of(x, x, x, FakeLaunch("gluon", "broken"), None) and 1 / 0
    assert fa2triton.queued_timing.queued_ms is fake


def test_interleaved_takes_its_timer_in_rounds_and_spreads_each_call():
    """experiments.common.interleaved: each round times every call once, in order, with the timer given (experiment
    gluon's queued_ms column), and returns each call's (median, min, max)."""
    from experiments.common import interleaved

    order, ms = [], {"a": iter([3.0, 1.0, 2.0]), "b": iter([5.0, 4.0, 6.0])}

    def timer(fn):
        order.append(fn())
        return next(ms[order[-1]])

    out = interleaved({"a": lambda: "a", "b": lambda: "b"}, 3, timer)
    assert order == ["a", "b"] * 3
    assert out == {"a": (2.0, 1.0, 3.0), "b": (5.0, 4.0, 6.0)}
