"""v7_hopper's tuning per bucket of lengths (issue 40): the Gluon race with a stand-in for the Gluon module (Gluon is
not interpreted; on a GPU too) and the tl path's pinned pick under the interpreter. The first length of a bucket tunes
and races, a second one reuses the pick; a stale pick falls back to tuning; picks round-trip through the disk cache;
the protocol's processes keep no pick on disk."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fa2lab import protocol
from fa2triton import versions
from fa2triton.buckets import ENV_VAR, PickCache, PickCacheWarning, StalePick, config_to_json
from fa2triton.gpu import interpreting
from fa2triton.lean_path import LaunchCache
from fa2triton.interpret import autotuner_of, only_config
from fa2triton.reference import attention, relative_error

REPO = Path(__file__).resolve().parent.parent
v7 = versions.load("v7_hopper")
FA = v7.FlashAttentionTriton
TUNER = autotuner_of(v7)
bench = versions.load_file("fa2_bench_varlen", REPO / "harness" / "bench_varlen.py")
DEVICE = "cpu" if interpreting() else "cuda"
pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered in log2:RuntimeWarning")
# the tl path's tests run its kernel under the interpreter, where it makes no launch to keep (a GPU times and keeps)
interpreted = pytest.mark.skipif(not interpreting(), reason="the interpreter's tl path: a stand-in pick is kept")


@pytest.fixture
def picks(tmp_path, monkeypatch):
    """A fresh pick cache on disk under tmp_path (an explicit directory: the interpreter uses no other), bucketing on,
    no launch recorded, the Gluon path on and not raced against the tl path, nothing forced."""
    cache = PickCache("v7_hopper", files=FA.picks.files, cache_dir=tmp_path / "picks")
    monkeypatch.setattr(FA, "picks", cache)
    monkeypatch.setattr(FA, "BUCKETS", True)
    monkeypatch.setattr(FA, "launches", LaunchCache())
    monkeypatch.setattr(FA, "GLUON", True)
    monkeypatch.setattr(FA, "RACE_TL", False)
    monkeypatch.setattr(FA, "FORCE_PATH", None)
    return cache


class FakeGluon:
    """Stands in for the Gluon module's best_launch, candidates_for, fitting and forward: candidates by label, each
    launch's O filled with its candidate's number; best_launch times "a" fastest, the race (queued_ms) finds "b"
    faster. Counts the calls: `raced` (best_launch: each candidate timed) and `forwarded` (labels launched untimed)."""

    RACE_MS = {"a": 1.0, "b": 0.5, "c": 0.7}

    def __init__(self, labels=("a", "b")):
        self.labels, self.raced, self.forwarded = list(labels), [], []

    def launch(self, label):
        def run(Q, K, V, need_l=True):
            return torch.full_like(Q, float("abc".index(label) + 1)), torch.zeros(Q.shape[:2], device=Q.device)
        run.label = label
        return run

    def candidates_for(self, D):
        return [SimpleNamespace(label=label) for label in self.labels]

    def fitting(self, candidates, D, device=None):
        return list(candidates)

    def best_launch(self, Q, K, V, is_causal):
        self.raced.append(Q.shape[1])
        timed = {label: (1.0 + 0.01 * i, self.launch(label)) for i, label in enumerate(self.labels)}
        first = timed[self.labels[0]][1]
        return (*first(Q, K, V), first, timed)

    def forward(self, Q, K, V, is_causal, cfg):
        self.forwarded.append(cfg.label)
        launch = self.launch(cfg.label)
        return (*launch(Q, K, V), launch)


@pytest.fixture
def gluon(monkeypatch):
    fake = FakeGluon()
    for name in ("best_launch", "candidates_for", "fitting", "forward"):
        monkeypatch.setattr(v7.GLUON, name, getattr(fake, name))
    monkeypatch.setattr(v7, "gluon_applies", lambda *args: None)   # as on a Hopper GPU
    monkeypatch.setattr("fa2triton.queued_timing.queued_ms", lambda fn, *a, **kw: FakeGluon.RACE_MS[fn.__defaults__[0].label])
    return fake


def spy(monkeypatch, name):
    """Count the calls of v7's module function `name` (still calling it)."""
    real, calls = getattr(v7, name), []

    def wrapper(*args):
        calls.append(args[0].shape[1])
        return real(*args)

    monkeypatch.setattr(v7, name, wrapper)
    return calls


def qkv(N, D=64, B=1, seed=0, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed + N)
    return [torch.randn(B, N, D, generator=g).to(DEVICE, dtype) for _ in range(3)]


def label_of(O):
    return "abc"[int(O.flatten()[0].item()) - 1]


# ------------------------------------------------------------------------------------------------ the Gluon race

def test_the_second_length_of_a_bucket_reuses_the_race_winner_without_racing(picks, gluon, monkeypatch):
    tuned, reused = spy(monkeypatch, "_tune"), spy(monkeypatch, "_reuse")
    O = FA.apply(*qkv(300), False)
    assert gluon.raced == [300] and tuned == [300] and reused == [] and picks.last == "tuned"
    assert label_of(O) == "b" and (v7.LAST_PATH, v7.LAST_CONFIG) == ("gluon", "b")   # the race's winner, not "a"
    O = FA.apply(*qkv(400), False)                     # bucket 512 too
    assert gluon.raced == [300] and tuned == [300] and reused == [400], "the second length was raced again"
    assert gluon.forwarded == ["b"] and picks.last == "reused" and label_of(O) == "b"
    assert (v7.LAST_PATH, v7.LAST_CONFIG) == ("gluon", "b")


def test_a_bucket_top_and_other_buckets_are_raced_at_themselves(picks, gluon):
    FA.apply(*qkv(300), False)
    FA.apply(*qkv(512), False)                         # the top of 300's bucket: a harness length
    FA.apply(*qkv(600), False)                         # bucket 1024
    FA.apply(*qkv(400), True)                          # the other mask
    FA.apply(*qkv(400, B=3), False)                    # batch x heads 3: bucket 4, not 1
    FA.apply(*qkv(400, D=128), False)
    assert gluon.raced == [300, 512, 600, 400, 400, 400] and gluon.forwarded == []
    assert picks.lookup(_key(512))["tuned_at"] == [512, 512]
    FA.apply(*qkv(500), False)                         # the bucket's pick is now the top's
    assert gluon.raced[-1] == 400 and gluon.forwarded == ["b"] and picks.last == "reused"


def _key(n, D=64, B=1, causal=False):
    """The key v7 builds for a non-causal bf16 call on the Gluon route (the fixture's switches)."""
    from fa2triton.buckets import bucket, bucket_key

    t = torch.empty(B, n, D, dtype=torch.bfloat16)
    return bucket_key(t, t, causal, extra=("gluon", f"BH<={bucket(B)}", 0, None, True, False))


def test_without_buckets_every_length_is_raced_and_nothing_kept(picks, gluon, monkeypatch):
    monkeypatch.setattr(FA, "BUCKETS", False)
    FA.apply(*qkv(300), False)
    FA.apply(*qkv(400), False)
    assert gluon.raced == [300, 400] and gluon.forwarded == [] and picks.entries == {}
    assert not (picks.path() and picks.path().exists())


def test_a_stale_gluon_label_falls_back_to_the_race_with_one_warning(picks, gluon):
    FA.apply(*qkv(300), False)
    gluon.labels = ["a", "c"]                          # "b" is gone (a candidate retired, say)
    with pytest.warns(PickCacheWarning, match="not reusing the pick.*no Gluon candidate 'b'"):
        O = FA.apply(*qkv(400), False)
    assert gluon.raced == [300, 400] and gluon.forwarded == [] and picks.last == "tuned" and label_of(O) == "c"
    FA.apply(*qkv(450), False)                         # the race's new pick replaced the stale one
    assert gluon.raced == [300, 400] and gluon.forwarded == ["c"] and picks.last == "reused"


@pytest.mark.parametrize("pick, route, why", [
    ({"path": "gluon", "label": "gone", "config": None}, "gluon", "no Gluon candidate 'gone'"),
    ({"path": "tma", "label": "x", "config": {"kwargs": {}}}, "gluon", "'tma' path .* 'gluon' route"),
    ({"path": "gluon", "label": "a", "config": None}, "tma", "'gluon' path .* 'tma' route"),
    ({"path": "v6", "label": "x", "config": None}, "tma", "'v6' path .* 'tma' route"),
    ({"path": "tma", "label": "x", "config": {"kwargs": {}}}, "tma", "not a configuration"),
    ("not a pick", "tma", "None"),
])
def test_reuse_refuses_a_pick_that_cannot_serve_the_route(gluon, pick, route, why):
    Q, K, V = qkv(300)
    with pytest.raises(StalePick, match=why):
        v7._reuse(Q, K, V, False, 0, route, pick)


def test_a_second_process_reuses_the_race_winner_from_disk(picks, gluon, monkeypatch):
    FA.apply(*qkv(300), False)
    saved = json.loads(picks.path().read_text())
    (text, entry), = saved["picks"].items()
    assert entry == {"value": {"path": "gluon", "label": "b", "config": None}, "tuned_at": [300, 300]}
    assert ",gluon,BH<=1," in text and saved["environment"]["version"] == "v7_hopper"
    assert set(saved["environment"]["files"]) >= {"flashattention_autograd_function_triton.py", "configs.json",
                                                  "gluon_forward_hopper.py", "gluon_kernel.py", "gluon_configs.py",
                                                  "gluon_ptx.py"}
    # a new process: a fresh cache object on the same directory, no launch recorded
    monkeypatch.setattr(FA, "picks", PickCache("v7_hopper", files=picks.files, cache_dir=picks.cache_dir))
    monkeypatch.setattr(FA, "launches", LaunchCache())
    O = FA.apply(*qkv(350), False)
    assert gluon.raced == [300] and gluon.forwarded == ["b"] and FA.picks.last == "reused_disk"
    assert label_of(O) == "b"


# ------------------------------------------------------------------------------------------------ the tl path

def other_candidate():
    """A tl candidate whose tiles differ from the first one's (which the interpreter runs when it 'tunes')."""
    first = TUNER.configs[0].kwargs
    return next(c for c in TUNER.configs
                if (c.kwargs["Q_TILE_SIZE"], c.kwargs["K_TILE_SIZE"]) != (first["Q_TILE_SIZE"], first["K_TILE_SIZE"]))


@pytest.fixture
def tl_picks(picks, monkeypatch):
    """The tl path (the interpreter: Gluon cannot run) with a stand-in pick: under the interpreter _tune times nothing
    and keeps nothing, so this makes it keep other_candidate(). Returns the configurations each _tma_launch saw."""
    chosen, real, seen = other_candidate(), v7._tune, []

    def tune(Q, K, V, is_causal, window, route):
        out, pick = real(Q, K, V, is_causal, window, route)
        assert pick is None, "under the interpreter no launch is made, so nothing is kept"
        return out, {"path": "tma", "label": v7.config_label(chosen), "config": config_to_json(chosen)}

    real_tma = v7._tma_launch

    def tma_launch(*args):
        seen.append(list(TUNER.configs))
        return real_tma(*args)

    monkeypatch.setattr(v7, "_tune", tune)
    monkeypatch.setattr(v7, "_tma_launch", tma_launch)
    return chosen, seen


@interpreted
def test_under_the_interpreter_nothing_is_raced_or_kept(picks):
    FA.apply(*qkv(100, D=16), True)
    FA.apply(*qkv(120, D=16, dtype=torch.float32), True)   # the v6 path
    assert picks.entries == {} and picks.last == "tuned" and not picks.path().exists()


@interpreted
def test_the_tl_paths_pick_is_launched_pinned_for_the_next_length_and_matches_float64(tl_picks, picks):
    chosen, seen = tl_picks
    FA.apply(*qkv(100, D=16), True)
    assert len(seen[0]) == len(TUNER.configs) > 1 and picks.last == "tuned" and v7.LAST_PATH == "tma"
    Q, K, V = qkv(120, D=16)                            # bucket 128 too
    O = FA.apply(Q, K, V, True)
    assert picks.last == "reused" and seen[1] == [chosen], "the pick was not pinned"
    assert len(TUNER.configs) > 1 and TUNER.configs[0] is not chosen   # the candidate list given back
    assert relative_error(O, attention(Q, K, V, True)[0]) < 1.5e-2


@interpreted
def test_a_pinned_tl_configuration_is_launched_as_it_is_not_the_buckets_pick(tl_picks, picks):
    chosen, seen = tl_picks
    FA.apply(*qkv(100, D=16), True)
    mine = TUNER.configs[0]
    with only_config(TUNER, mine):
        FA.apply(*qkv(120, D=16), True)
    assert seen[1] == [mine] and picks.last == "pinned"


# ------------------------------------------------------------------------------------------------ the protocol

def test_the_protocols_processes_get_the_disk_cache_off(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "/somewhere/the/caller/keeps/picks")
    v = versions.get("v7_hopper")
    assert protocol.version_env(v)[ENV_VAR] == "off"
    assert protocol.version_env(v, FA2_RUN_ID="x")[ENV_VAR] == "off"
    seen = []
    monkeypatch.setattr(protocol.subprocess, "run", lambda cmd, env, cwd: seen.append(env) or SimpleNamespace(
        returncode=0))
    protocol.run_protocol([v, versions.get("v5_final")], runs=2, pause_s=0, harness_args=[])
    assert len(seen) == 4 and all(env[ENV_VAR] == "off" for env in seen)


def test_the_disk_cache_is_read_at_call_time_and_off_in_the_protocols_environment(tmp_path, monkeypatch):
    """In a process on a GPU (the interpreter, which uses only an explicit directory, is switched off here), v7's
    pick cache writes under the default directory, and writes nothing once the environment is the protocol's: the
    variable is read at each call, not at import."""
    import fa2triton.gpu

    monkeypatch.setattr(fa2triton.gpu, "interpreting", lambda: False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(ENV_VAR, raising=False)
    cache = PickCache("v7_hopper", files=FA.picks.files)      # as the class makes it: no directory of its own
    assert cache.directory() == tmp_path / "fa2lab"
    cache.store(_key(300), {"path": "gluon", "label": "b", "config": None})
    assert cache.path().exists()
    cache.path().unlink()
    monkeypatch.setenv(ENV_VAR, protocol.version_env(versions.get("v7_hopper"))[ENV_VAR])
    assert cache.directory() is None and cache.path() is None
    cache.store(_key(400), {"path": "gluon", "label": "b", "config": None})
    assert list((tmp_path / "fa2lab").iterdir()) == []


def test_a_fresh_process_in_the_protocols_environment_has_no_pick_directory(tmp_path):
    code = "from fa2triton.buckets import PickCache; print(PickCache('v7_hopper').directory())"
    env = protocol.version_env(versions.get("v7_hopper"), TRITON_INTERPRET="0", XDG_CACHE_HOME=str(tmp_path))
    out = [subprocess.run([sys.executable, "-c", code], env=e, cwd=REPO, capture_output=True, text=True, check=True)
           .stdout.strip() for e in (env, {k: v for k, v in env.items() if k != ENV_VAR})]
    assert out == ["None", str(tmp_path / "fa2lab")]


# ------------------------------------------------------------------------------------------------ bench_varlen

def test_bench_varlen_measures_v7_and_records_its_picks(picks, gluon, monkeypatch):
    """harness/bench_varlen.py takes v7 (it has BUCKETS and picks): a measured call records whether it tuned or
    reused and the configuration and path it ran (with stand-ins for the GPU's timings)."""
    assert isinstance(FA.BUCKETS, bool) and FA.picks is picks

    def inputs(self, call):
        q, k, v = qkv(call.N, call.D, self.B * self.H)
        return q, k, v, tuple(t.view(self.B, self.H, call.N, call.D) for t in (q, k, v))

    monkeypatch.setattr(bench.GpuMeasure, "inputs", inputs)
    monkeypatch.setattr(bench, "_seconds", lambda fn: (fn(), 1.5)[1])
    monkeypatch.setattr("fa2lab.timers.bench_ms", lambda fn: 1.0)
    measure = bench.GpuMeasure(v7, 1, 2)
    rows = [measure(bench.Call(i, n, 64, False)) for i, n in enumerate((300, 400))]
    assert [(r["pick"], r["config"], r["path"]) for r in rows] == [("tuned", "b", "gluon"), ("reused", "b", "gluon")]
