"""harness/bench_varlen.py's bookkeeping with a stand-in for the kernel, and v5 under the interpreter with
bucketing on: a second length of a bucket reuses the first's pick without tuning."""

import csv
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fa2triton import versions
from fa2triton.buckets import PickCache, bucket
from fa2triton.gpu import interpreting
from fa2triton.lean_path import LaunchCache
from fa2triton.reference import attention
from fa2lab.results import append_rows

REPO = Path(__file__).resolve().parent.parent
bench = versions.load_file("fa2_bench_varlen", REPO / "harness" / "bench_varlen.py")
DEVICE = "cpu" if interpreting() else "cuda"


# ------------------------------------------------------------------------------------------------ the plan

def test_the_lengths_are_seeded_distinct_and_in_range():
    ns = bench.lengths(7)
    assert len(ns) == 32 and len(set(ns)) == 32 and all(257 <= n <= 8192 for n in ns)
    assert bench.lengths(7) == ns and bench.lengths(8) != ns
    assert sorted(bench.lengths(0, count=4, lo=10, hi=13)) == [10, 11, 12, 13]


@pytest.mark.parametrize("count, lo, hi, what", [(5, 10, 13, "--count"), (0, 257, 8192, "--count"),
                                                 (3, 0, 10, "--min-n"), (3, 20, 10, "--min-n")])
def test_an_impossible_plan_is_refused_by_name(count, lo, hi, what):
    with pytest.raises(ValueError, match=what):
        bench.lengths(0, count, lo, hi)


def test_the_plan_runs_every_length_at_each_D_and_mask_in_the_drawn_order():
    calls = bench.plan([700, 300], [64, 128], [False, True])
    assert [(c.index, c.N, c.D, c.causal) for c in calls] == [
        (0, 700, 64, False), (1, 300, 64, False), (2, 700, 64, True), (3, 300, 64, True),
        (4, 700, 128, False), (5, 300, 128, False), (6, 700, 128, True), (7, 300, 128, True)]


# ------------------------------------------------------------------------------------------------ bookkeeping

def fake_measure(first_s: dict):
    """A stand-in for the kernel: first-call seconds by (N, D, causal), later calls N/1000 ms, SDPA 0.9 of that."""
    def measure(call):
        ms = call.N / 1000
        return {"first_call_s": first_s[(call.N, call.D, call.causal)], "ms": ms, "sdpa_ms": 0.9 * ms,
                "pct_of_sdpa": 100 * 0.9, "pick": "tuned" if call.N == 300 else "reused"}
    return measure


FIRST = {(300, 64, False): 4.0, (400, 64, False): 0.5, (5000, 64, False): 3.0,
         (300, 64, True): 2.0, (400, 64, True): 0.25, (5000, 64, True): 9.0}


def test_totals_per_group_and_over_all_calls():
    calls = bench.plan([300, 400, 5000], [64], [False, True])
    rows = bench.run_calls(calls, fake_measure(FIRST), lambda row: None, bar=False)
    assert [r["q_bucket"] for r in rows] == [512, 512, 8192] * 2
    nc, c, everything = bench.totals(rows)
    assert (nc["group"], nc["D"], nc["causal"], nc["calls"]) == ("D=64 causal=0", 64, 0, 3)
    assert nc["total_first_call_s"] == pytest.approx(7.5) and nc["median_first_call_s"] == 3.0
    assert (nc["max_first_call_s"], nc["max_first_call_N"], nc["tuned_calls"]) == (4.0, 300, 1)
    assert c["total_first_call_s"] == pytest.approx(11.25) and c["median_first_call_s"] == 2.0
    assert (c["max_first_call_s"], c["max_first_call_N"]) == (9.0, 5000)
    assert everything["group"] == "all" and everything["calls"] == 6
    assert everything["total_first_call_s"] == pytest.approx(sum(FIRST.values()))
    assert everything["median_first_call_s"] == pytest.approx(statistics.median(FIRST.values()))
    assert (everything["max_first_call_s"], everything["max_first_call_N"]) == (9.0, 5000)
    assert everything["median_pct_of_sdpa"] == pytest.approx(90.0) and everything["tuned_calls"] == 2


def test_rows_are_written_as_they_are_measured_so_an_interrupted_run_keeps_them(tmp_path):
    out = tmp_path / "varlen" / "v5_final.csv"
    calls = bench.plan([300, 400, 5000], [64], [False, True])
    seen = []
    measure = fake_measure(FIRST)

    def interrupted(call):
        seen.append(call.index)
        if call.index == 4:
            raise KeyboardInterrupt
        return measure(call)

    with pytest.raises(KeyboardInterrupt):
        bench.run_calls(calls, interrupted, lambda row: append_rows(out, [{"version": "v5_final", **row}]),
                        bar=False)
    with out.open() as f:
        written = list(csv.DictReader(f))
    assert seen == [0, 1, 2, 3, 4]
    assert [(int(r["N"]), int(r["causal"]), float(r["first_call_s"])) for r in written] == [
        (300, 0, 4.0), (400, 0, 0.5), (5000, 0, 3.0), (300, 1, 2.0)]


def test_compare_rows_give_the_bucketed_speed_as_a_percentage_of_tuning_alone():
    calls = bench.plan([300, 400], [64], [False])
    written = []
    rows = bench.compare_rows(calls, lambda call: {"bucketed_ms": 2.0, "tuned_ms": 1.9 if call.N == 400 else 2.0},
                              written.append)
    assert [r["pct_of_tuned"] for r in rows] == pytest.approx([100.0, 95.0]) and written == rows
    assert all(r["row"] == "compare" for r in rows)


def test_the_compare_sample_is_seeded_and_in_plan_order():
    calls = bench.plan(bench.lengths(0), [64, 128], [False, True])
    s = bench.sample(calls, 8, 0)
    assert len(s) == 8 and s == bench.sample(calls, 8, 0) and [c.index for c in s] == sorted(c.index for c in s)
    assert bench.sample(calls[:3], 8, 0) == calls[:3]


def test_cold_runs_get_empty_caches_and_the_warm_run_after_them_gets_the_same(tmp_path):
    env, picks, t, p = bench.child_settings("cold", "same", tmp_path)
    assert env == {"TRITON_CACHE_DIR": str(tmp_path / "triton")} and picks == str(tmp_path / "picks")
    assert (t, p) == ("cold", "cold")
    env, picks, t, p = bench.child_settings("warm", "same", tmp_path)
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton") and picks == str(tmp_path / "picks")
    assert (t, p) == ("warm", "warm")
    assert bench.child_settings("warm", "same", None) == ({}, "", "warm", "default")
    assert bench.child_settings("cold", "off", tmp_path)[1:] == ("off", "cold", "off")
    assert bench.child_settings(str(tmp_path / "mine"), "default", None)[0] == {
        "TRITON_CACHE_DIR": str(tmp_path / "mine")}


def test_the_parent_decides_kernel_run_id_and_caches_for_each_child():
    assert bench._forwarded(["--kernel", "v7_hopper", "--count", "4", "--cache-dir=cold", "--pick-cache", "off",
                             "--compare-tuned", "--run-id", "x"]) == ["--count", "4", "--compare-tuned"]


def test_help_and_a_clear_error_for_an_unknown_version():
    res = subprocess.run([sys.executable, str(REPO / "harness" / "bench_varlen.py"), "--help"],
                         capture_output=True, text=True)
    assert res.returncode == 0 and "--compare-tuned" in res.stdout and "--cache-dir" in res.stdout
    assert bench.main(["--kernel", "v99_nothing"]) == 2


# ------------------------------------------------------------------------------------------------ v5, interpreted

@pytest.fixture
def v5(monkeypatch, tmp_path):
    """v5 with a pick cache of its own (on disk in tmp_path) and an autotuner whose 'timings' favour one
    candidate that is not the first: every candidate is 'timed' (none pruned), and each timing is counted."""
    module = versions.load("v5_final")
    cls, tuner = module.FlashAttentionTriton, module.flash_fwd_kernel
    favoured = tuner.configs[2]
    assert (favoured.kwargs["Q_TILE_SIZE"], favoured.kwargs["K_TILE_SIZE"]) != (
        tuner.configs[0].kwargs["Q_TILE_SIZE"], tuner.configs[0].kwargs["K_TILE_SIZE"])
    timed = []

    def fake_bench(*args, config, **meta):
        timed.append(config)
        return [0.5 if config is favoured else 1.0] * 3

    monkeypatch.setitem(tuner.__dict__, "_bench", fake_bench)
    monkeypatch.setattr(tuner, "early_config_prune", None)
    monkeypatch.setattr(tuner, "cache", {})
    monkeypatch.setattr(cls, "picks", PickCache("v5_final", files=(Path(module.__file__),),
                                                cache_dir=tmp_path / "picks"))
    monkeypatch.setattr(cls, "BUCKETS", True)
    monkeypatch.setattr(cls, "launches", LaunchCache())   # on a GPU: no launch recorded by another test
    return module, timed, favoured


def run(module, N, causal=False, D=16, seed=0):
    """One float32 call, checked against float64 (on a GPU tl.dot rounds float32 inputs to tf32)."""
    g = torch.Generator().manual_seed(seed + N)
    q, k, v = (torch.randn(1, N, D, generator=g).to(DEVICE) for _ in range(3))
    out = module.FlashAttentionTriton.apply(q, k, v, causal)
    ref, _ = attention(q, k, v, causal)
    atol = 2e-5 if interpreting() else 1e-2
    assert torch.allclose(out.double(), ref, atol=atol, rtol=1e-3), f"wrong output at N = {N}"
    return out


def test_v5_tunes_the_first_length_of_a_bucket_and_pins_its_pick_for_the_next(v5):
    module, timed, favoured = v5
    tuner, picks = module.flash_fwd_kernel, module.FlashAttentionTriton.picks
    run(module, 300, causal=True)
    assert len(timed) == len(tuner.configs) and tuner.best_config is favoured and picks.last == "tuned"
    keys = set(tuner.cache)
    run(module, 400, causal=True)                        # bucket 512 too
    assert len(timed) == len(tuner.configs), "the autotuner timed its candidates again"
    assert set(tuner.cache) == keys and picks.last == "reused"
    assert tuner.best_config == favoured and len(tuner.configs) > 1   # launched the pick, list given back
    assert picks.path().exists() and bucket(400) == 512


def test_v5_without_buckets_tunes_every_length(v5, monkeypatch):
    module, timed, _ = v5
    monkeypatch.setattr(module.FlashAttentionTriton, "BUCKETS", False)
    run(module, 300)
    run(module, 400)
    assert len(timed) == 2 * len(module.flash_fwd_kernel.configs)
    assert module.FlashAttentionTriton.picks.entries == {}


def test_v5_tunes_a_harness_length_at_itself_even_after_a_pick_from_its_bucket(v5):
    module, timed, _ = v5
    run(module, 300)
    run(module, 512)                                     # the top of 300's bucket: a harness shape
    assert len(timed) == 2 * len(module.flash_fwd_kernel.configs)
    assert module.FlashAttentionTriton.picks.lookup(_key(512))["tuned_at"] == [512, 512]


def _key(n):
    from fa2triton.buckets import bucket_key

    t = torch.empty(1, n, 16, device=DEVICE)
    return bucket_key(t, t, False)


def test_a_second_process_reuses_v5s_pick_from_disk(v5, monkeypatch):
    module, timed, favoured = v5
    cls = module.FlashAttentionTriton
    run(module, 700)
    monkeypatch.setattr(cls, "picks", PickCache("v5_final", files=cls.picks.files, cache_dir=cls.picks.cache_dir))
    monkeypatch.setattr(module.flash_fwd_kernel, "cache", {})   # a new process: the autotuner knows nothing
    run(module, 900)
    assert len(timed) == len(module.flash_fwd_kernel.configs) and cls.picks.last == "reused_disk"
    assert module.flash_fwd_kernel.best_config == favoured


# ------------------------------------------------------------------------------------------------ GpuMeasure, faked

def fake_version(picks_last="reused"):
    """A version whose apply records one launch per 'signature' in its LaunchCache, launching 'bucketed' or
    'tuned' by its BUCKETS switch at the time the launch was recorded."""
    from types import SimpleNamespace

    from fa2triton.lean_path import LaunchCache

    class FlashAttentionTriton:
        BUCKETS = True
        launches = LaunchCache()
        picks = SimpleNamespace(last="")

        @classmethod
        def apply(cls, q, k, v, causal):
            launch = cls.launches.entries.get("sig")
            if launch is None:
                which = "bucketed" if cls.BUCKETS else "tuned"
                launch = cls.launches.entries["sig"] = lambda: torch.zeros_like(q)
                launch.which = which
                module.flash_fwd_kernel.best_config = SimpleNamespace(
                    kwargs={"Q_TILE_SIZE": 64 if which == "bucketed" else 128, "K_TILE_SIZE": 64},
                    num_warps=4, num_stages=3)
                cls.picks.last = picks_last
            module.launched.append(launch.which)
            return launch()

    module = SimpleNamespace(FlashAttentionTriton=FlashAttentionTriton, flash_fwd_kernel=SimpleNamespace(),
                             launched=[])
    return module


@pytest.fixture
def on_cpu(monkeypatch):
    def inputs(self, call):
        q, k, v = (torch.zeros(self.B * self.H, call.N, call.D) for _ in range(3))
        return q, k, v, tuple(t.view(self.B, self.H, call.N, call.D) for t in (q, k, v))

    monkeypatch.setattr(bench.GpuMeasure, "inputs", inputs)
    monkeypatch.setattr(bench, "_seconds", lambda fn: (fn(), 1.5)[1])


def test_a_measured_call_records_its_pick_configuration_and_speed(on_cpu, monkeypatch):
    module = fake_version()
    monkeypatch.setattr("fa2lab.timers.bench_ms", lambda fn: 2.0 if fn().dim() == 3 else 1.0)   # ours, SDPA
    row = bench.GpuMeasure(module, 1, 2)(bench.Call(0, 300, 16, False))
    assert (row["first_call_s"], row["sdpa_first_call_s"], row["pick"], row["config"]) == (1.5, 1.5, "reused",
                                                                                         "64,64,4,3")
    assert (row["ms"], row["sdpa_ms"], row["pct_of_sdpa"], row["max_abs_err_vs_sdpa"]) == (2.0, 1.0, 50.0, 0.0)


def test_the_pair_times_the_bucketed_and_the_tuned_launch_alternately_and_puts_everything_back(on_cpu,
                                                                                              monkeypatch):
    module = fake_version()
    cls = module.FlashAttentionTriton
    cls.launches.entries["other"] = "kept"
    timed = []

    def fake_bench_ms(fn):
        fn()
        timed.append(module.launched[-1])
        return {"bucketed": 2.0, "tuned": 1.9}[module.launched[-1]]

    monkeypatch.setattr("fa2lab.timers.bench_ms", fake_bench_ms)
    m = bench.GpuMeasure(module, 1, 1).pair(bench.Call(3, 300, 16, True), rounds=4)
    assert (m["bucketed_ms"], m["tuned_ms"]) == (2.0, 1.9)
    assert (m["bucketed_config"], m["tuned_config"], m["same_config"]) == ("64,64,4,3", "128,64,4,3", 0)
    assert timed == ["bucketed", "tuned", "tuned", "bucketed"] * 2
    assert cls.launches.entries == {"other": "kept"} and cls.BUCKETS is True
