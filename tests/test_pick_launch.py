"""invoke pick-launch (sweeps/pick_launch.py) without a GPU: its grid, writing each entry as it is measured, resuming a
cut run (same commit and GPU) and starting afresh otherwise, its time bound, --dry-run, and v7's own race run under
the interpreter with a stand-in Gluon module and timings, whose table v7 then launches from without racing. Also
harness/bench_varlen.py with v7: its first-call choice and --compare-tuned's table against race."""

import json
from pathlib import Path

import pytest
import torch

from fa2triton import launch_table, versions
from fa2triton.gpu import interpreting
from fa2triton.launch_table import Gpu, LaunchTableError
from fake_gluon import install, label_of

REPO = Path(__file__).resolve().parent.parent
pl = versions.load_file("fa2_pick_launch", REPO / "sweeps" / "pick_launch.py")
bench = versions.load_file("fa2_bench_varlen_pl", REPO / "harness" / "bench_varlen.py")
v7 = versions.load("v7_hopper")
FA = v7.FlashAttentionTriton
H200 = Gpu("nvidia-h200", "sm_90", 132, "3.6")
KEY = launch_table.section_key("nvidia-h200", "3.6")   # the section prov()'s Triton writes
interpreted = pytest.mark.skipif(not interpreting(), reason="v7's race under the interpreter with a stand-in Gluon")


def prov(commit="abc123", **over):
    env = {"gpu": "NVIDIA H200", "max_sm_clock_mhz": 1980, "driver": "570", "cuda": "12.8", "torch": "2.11",
           "triton": "3.6.0", "python": "3.12", "git_commit": commit}
    return pl.provenance({**env, **over}, H200, "2026-12-01T00:00:00+00:00")


def fake_race(calls, path=None, seen_on_disk=None):
    """race(point) -> an entry whose winner names the point; records the calls and, with `path`, how many entries the
    file held when each race began (each earlier one must be there already)."""
    def race(p):
        calls.append(p.key)
        if path is not None:
            held = json.loads(path.read_text())["gpus"][KEY]["entries"] if path.exists() else []
            seen_on_disk.append(len(held))
        label = f"{p.N // 64},64,4,3/p0"
        return {"D": p.D, "causal": p.causal, "N": p.N, "BH": p.BH, "dtype": "bfloat16",
                "launch": {"path": "tma", "label": label}, "raced": [{"path": "tma", "label": label, "ms": 0.1}]}
    return race


# ------------------------------------------------------------------------------------------------ the grid

def test_the_default_grid_is_both_head_dimensions_and_masks_over_the_varlen_buckets_at_the_harness_heads():
    points = pl.grid()
    assert len(points) == 20 and {p.BH for p in points} == {32} and {p.D for p in points} == {64, 128}
    assert sorted({p.N for p in points}) == [512, 1024, 2048, 4096, 8192]
    assert [p.key for p in points[:6]] == [(64, 0, n, 32) for n in (512, 1024, 2048, 4096, 8192)] + [(64, 1, 512, 32)]


@pytest.mark.parametrize("args, why", [
    ({"Ns": [300]}, "--N takes powers of two"), ({"BHs": [0]}, "--bh takes powers of two"),
    ({"BHs": [24]}, "not [24]"), ({"Ds": [48]}, "--D takes head dimensions 16, 32, 64, 128, not [48]"),
])
def test_a_grid_the_table_cannot_key_is_refused_by_name(args, why):
    with pytest.raises(ValueError, match=why.replace("[", r"\[").replace("]", r"\]")):
        pl.grid(**args)


def test_the_command_line_refuses_bad_values_with_status_2(capsys, tmp_path):
    assert pl.main(["--N", "1000", "--out", str(tmp_path / "t.json")]) == 2
    assert pl.main(["--max-seconds", "0", "--dry-run", "--out", str(tmp_path / "t.json")]) == 2
    (tmp_path / "bad.json").write_text("{not json")
    assert pl.main(["--dry-run", "--out", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert "--N takes powers of two" in err and "--max-seconds must be positive" in err and "not readable" in err


# ------------------------------------------------------------------------------------------------ write and resume

def run(path, points, race, commit="abc123", fresh=False, triton="3.6.0", **kw):
    data = launch_table.read(path, "v7_hopper")
    key = launch_table.section_key("nvidia-h200", triton[:3])
    section, note = pl.section_for(data, key, prov(commit, triton=triton), points, fresh)
    return pl.run_grid(path, data, section, points, race, log=lambda line: None, **kw), note


def test_each_entry_is_written_as_it_is_measured_and_the_finished_table_loads(tmp_path):
    path, calls, on_disk = tmp_path / "launch_table.json", [], []
    points = pl.grid(Ns=[512, 1024], BHs=[32], Ds=[64], masks=[0, 1])
    counts, note = run(path, points, fake_race(calls, path, on_disk))
    assert f"a new section for {KEY}" in note and on_disk == [0, 1, 2, 3]
    assert counts == {"points": 4, "done_before": 0, "measured": 4, "stopped": False}
    data = json.loads(path.read_text())
    section = data["gpus"][KEY]
    assert section["complete"] and section["grid"]["N"] == [512, 1024] and "updated" in section["provenance"]
    assert section["provenance"]["git_commit"] == "abc123" and section["provenance"]["sm_count"] == 132
    t = launch_table.load(path, "v7_hopper")
    choice = launch_table.lookup(t, launch_table.Signature("bfloat16", 64, True, 700, 700, 32), H200, ("tma",),
                                 {"tma": {"16,64,4,3/p0"}})
    assert choice.launch == launch_table.Launch("tma", "16,64,4,3/p0")


def test_a_cut_run_resumes_at_the_same_commit_and_gpu_and_keeps_other_gpus(tmp_path):
    path, calls = tmp_path / "launch_table.json", []
    data = launch_table.new_file("v7_hopper")
    other = {"provenance": {**prov("zzz"), "gpu": "NVIDIA H100"}, "grid": {}, "complete": False, "entries": []}
    data["gpus"]["nvidia-h100/triton-3.6"] = other
    launch_table.write(path, data, "v7_hopper")
    points = pl.grid(Ns=[512, 1024, 2048], Ds=[64], masks=[0])
    ticks = iter(range(100))
    counts, _ = run(path, points, fake_race(calls), max_seconds=1.5, clock=lambda: next(ticks))
    assert counts["stopped"] and counts["measured"] == 1 and calls == [(64, 0, 512, 32)]
    assert not json.loads(path.read_text())["gpus"][KEY]["complete"]
    counts, note = run(path, points, fake_race(calls), commit="abc123-dirty")   # the table itself dirties the tree
    assert note.startswith(f"resuming {KEY}'s section: 1 entries") and counts["done_before"] == 1
    assert calls == [(64, 0, 512, 32), (64, 0, 1024, 32), (64, 0, 2048, 32)]
    saved = json.loads(path.read_text())["gpus"]
    assert saved["nvidia-h100/triton-3.6"] == other and saved[KEY]["complete"]
    counts, _ = run(path, points, fake_race(calls))
    assert counts["measured"] == 0 and len(calls) == 3                             # nothing left


@pytest.mark.parametrize("change, why", [({"commit": "def456"}, "it was measured with git_commit abc123"),
                                         ({"torch": "2.12"}, "it was measured with torch 2.11"),
                                         ({"fresh": True}, "--fresh")])
def test_another_commit_or_torch_or_fresh_starts_this_gpus_section_again(tmp_path, change, why):
    path, calls = tmp_path / "launch_table.json", []
    points = pl.grid(Ns=[512], Ds=[64], masks=[0])
    run(path, points, fake_race(calls))
    data = launch_table.read(path, "v7_hopper")
    p = prov(change.get("commit", "abc123"), **({"torch": change["torch"]} if "torch" in change else {}))
    section, note = pl.section_for(data, KEY, p, points, fresh=change.get("fresh", False))
    assert section["entries"] == [] and "starts again" in note and why in note
    assert data["gpus"][KEY] is section and section["provenance"] == p


def test_a_race_under_another_triton_writes_its_own_section_beside_the_first(tmp_path):
    """The same source compiles to other kernels under another Triton: its race keeps the first Triton's section,
    and each Triton's lookup then reads its own."""
    path, points = tmp_path / "launch_table.json", pl.grid(Ns=[512], Ds=[64], masks=[0])
    run(path, points, fake_race([]))
    counts, note = run(path, points, fake_race([]), triton="3.9.0")
    assert counts["measured"] == 1 and "a new section for nvidia-h200/triton-3.9" in note
    saved = launch_table.load(path, "v7_hopper")
    assert sorted(saved.gpus) == [KEY, "nvidia-h200/triton-3.9"]
    assert saved.gpus["nvidia-h200/triton-3.9"]["provenance"]["triton"] == "3.9.0"


def test_dry_run_lists_the_grid_and_what_each_gpu_holds(tmp_path, capsys):
    path, calls = tmp_path / "launch_table.json", []
    run(path, pl.grid(Ns=[512], Ds=[64], masks=[0]), fake_race(calls))
    assert pl.main(["--dry-run", "--D", "64", "--causal", "0", "--N", "512", "1024", "--out", str(path)]) == 0
    out = capsys.readouterr().out
    assert "2 points" in out and f"D=64 non-causal N=512 B·H=32   [held for {KEY}]" in out
    assert "D=64 non-causal N=1024 B·H=32\n" in out and f"{KEY}: 1 of these 2 points, measured at abc123" in out
    assert len(calls) == 1


def test_race_entry_takes_each_launchs_median_and_refuses_a_path_the_table_cannot_hold():
    p = pl.Point(64, 0, 1024, 32)
    rows = [{"candidate": c, "race_ms": ms, "clock_before_mhz": 1980.0, "clock_after_mhz": float("nan")}
            for c, ms in (("gluon:ws2", 0.3), ("tma:128,64,4,3/p1", 0.2), ("gluon:ws2", 0.1), ("gluon:ws2", 0.2),
                          ("tma:128,64,4,3/p1", 0.4))]
    e = pl.race_entry(p, rows, ("gluon", "ws2"), 1.234)
    assert e["raced"] == [{"path": "gluon", "label": "ws2", "ms": 0.2}, {"path": "tma", "label": "128,64,4,3/p1",
                                                                        "ms": 0.3}]
    assert e["launch"] == {"path": "gluon", "label": "ws2"} and e["sm_clock_mhz"] == 1980.0 and e["seconds"] == 1.23
    single = pl.race_entry(p, [], ("tma", "64,64,4,3/p0"), 1.0)   # one launch: nothing raced
    assert single["raced"] == [{"path": "tma", "label": "64,64,4,3/p0", "ms": None}]
    with pytest.raises(RuntimeError, match="v7 ran its 'v6' path"):
        pl.race_entry(p, [], ("v6", "64,64,4,3"), 1.0)


def test_the_task_needs_a_gpu_except_for_dry_run(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert pl.main(["--out", str(tmp_path / "t.json")]) == 2
    assert "--dry-run lists the grid without one" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


# ------------------------------------------------------------------------------------------------ v7's own race


@interpreted
def test_v7s_race_fills_the_table_and_v7_then_launches_from_it_untimed(tmp_path, fresh_v7, monkeypatch):
    """make_race runs v7's own race (the stand-in Gluon module, timings replaced): the winner and every raced
    launch's median go to the file; v7 reading that file launches the winner at other lengths without racing."""
    fake = install(monkeypatch, v7)
    monkeypatch.setattr(launch_table, "gpu_identity", lambda device=None: H200)
    path, points = tmp_path / "launch_table.json", pl.grid(Ns=[256, 512], BHs=[2], Ds=[64], masks=[0])
    data = launch_table.read(path, "v7_hopper")
    section, _ = pl.section_for(data, KEY, prov(), points)
    race = pl.make_race(v7, device="cpu", clock=lambda: 1980.0)
    monkeypatch.setattr(FA, "LAUNCH_FROM", "race")   # make_race set it on the class; the fixture puts it back
    counts = pl.run_grid(path, data, section, points, race, log=lambda line: None)
    assert counts["measured"] == 2 and fake.raced == [256, 512]
    saved = json.loads(path.read_text())["gpus"][KEY]["entries"]
    assert [e["launch"] for e in saved] == [{"path": "gluon", "label": "b"}] * 2
    assert saved[0]["raced"] == [{"path": "gluon", "label": "b", "ms": 0.5}, {"path": "gluon", "label": "a", "ms": 1.0}]
    assert saved[0]["sm_clock_mhz"] == 1980.0

    monkeypatch.setattr(FA, "LAUNCH_FROM", "table")
    monkeypatch.setattr(FA, "LAUNCH_TABLE", launch_table.load(path, "v7_hopper"))
    monkeypatch.setattr("fa2triton.queued_timing.queued_ms", lambda *a, **kw: 1 / 0)   # a timing now would be a race
    g = torch.Generator().manual_seed(0)
    O = FA.apply(*[torch.randn(3, 400, 64, generator=g).to(torch.bfloat16) for _ in range(3)], False)
    assert label_of(O) == "b" and fake.raced == [256, 512] and fake.forwarded == ["b"] and v7.LAST_CHOICE == "table"


# ------------------------------------------------------------------------------------------------ bench_varlen

@interpreted
def test_bench_varlen_records_v7s_choice_and_compares_its_table_against_its_race(tmp_path, fresh_v7, monkeypatch):
    """harness/bench_varlen.py with v7 (no pick cache): a measured call records how its first call chose ("table"),
    and --compare-tuned times the table's launch ("bucketed") against the race's ("tuned"), LAUNCH_FROM put back."""
    fake = install(monkeypatch, v7)
    monkeypatch.setattr(launch_table, "gpu_identity", lambda device=None: H200)
    entry = {"D": 64, "causal": 0, "N": 512, "BH": 2, "dtype": "bfloat16", "launch": {"path": "gluon", "label": "a"},
             "raced": [{"path": "gluon", "label": "a", "ms": 0.4}]}
    data = launch_table.new_file("v7_hopper")
    data["gpus"][KEY] = {"provenance": prov(), "grid": {}, "complete": True, "entries": [entry]}
    launch_table.write(tmp_path / "t.json", data, "v7_hopper")
    monkeypatch.setattr(FA, "LAUNCH_TABLE", launch_table.load(tmp_path / "t.json", "v7_hopper"))

    def inputs(self, call):
        g = torch.Generator().manual_seed(call.N)
        q, k, v = (torch.randn(self.B * self.H, call.N, call.D, generator=g).to(torch.bfloat16) for _ in range(3))
        return q, k, v, tuple(t.view(self.B, self.H, call.N, call.D) for t in (q, k, v))

    monkeypatch.setattr(bench.GpuMeasure, "inputs", inputs)
    monkeypatch.setattr(bench, "_seconds", lambda fn: (fn(), 1.5)[1])
    monkeypatch.setattr("fa2lab.timers.bench_ms", lambda fn: 1.0)
    measure = bench.GpuMeasure(v7, 1, 2)
    row = measure(bench.Call(0, 300, 64, False))
    assert (row["pick"], row["config"], row["path"]) == ("table", "a", "gluon") and fake.raced == []
    monkeypatch.setattr("fa2lab.timers.bench_ms", lambda fn: float("abc".index(label_of(fn())) + 1))
    pair = measure.pair(bench.Call(1, 400, 64, False))
    assert (pair["bucketed_config"], pair["tuned_config"]) == ("a", "b") and fake.raced[0] == 400
    assert fake.raced == [400] * 4   # on the CPU no launch is recorded: each of the 3 rounds' "tuned" calls races
    assert (pair["bucketed_ms"], pair["tuned_ms"]) == (1.0, 2.0) and FA.LAUNCH_FROM == "table"
    assert bench.first_call_switch(FA) == ("LAUNCH_FROM", "table", "race")


def test_a_table_for_another_kernel_is_refused_by_the_task(tmp_path, capsys):
    data = launch_table.new_file("v5_final")
    (tmp_path / "t.json").write_text(json.dumps(data))
    assert pl.main(["--dry-run", "--out", str(tmp_path / "t.json")]) == 2
    assert "a table for 'v5_final', not 'v7_hopper'" in capsys.readouterr().err
    with pytest.raises(LaunchTableError):
        launch_table.read(tmp_path / "t.json", "v7_hopper")
