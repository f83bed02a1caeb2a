"""The figure scripts on small fixture CSVs (no GPU, no real results needed except the transcribed
reference): every figure is written as a valid PNG, the heatmap matrices, the roofline points, the
compile-cost lines and the timeline's attribution are what the fixtures imply, the roofline's roof labels do
not overlap in any panel, round labels are the registry's, and a missing or malformed results file is an
error that names the file."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest

from fa2lab import shapes
from fa2triton import versions
import report
from figures import (ada_vs_hopper, compile_cost, data, make_all, roofline, style, sweep_grids, tile_heatmap,
                     timeline, versions_bench)

REPO = Path(__file__).resolve().parent.parent
GPU = "test-gpu"
PROV = {"gpu": "Test GPU", "arch": "sm_90", "sm_count": 132, "triton": "3.6.0", "torch": "2.11.0",
        "date": "2026-11-29T00:00:00+00:00"}

# (q_tile, k_tile, num_warps, num_stages, status, tflops at N=4096 non-causal)
SWEEP = [
    (64, 32, 4, 3, "ok", 100.0),
    (64, 32, 8, 3, "ok", 150.0),
    (64, 32, 2, 2, "wrong", 999.0),          # fast but wrong: must never count
    (128, 64, 8, 4, "ok", 200.0),            # the winner
    (128, 64, 4, 2, "ok", 50.0),
    (16, 16, 1, 1, "skipped_registers", math.nan),
    (256, 256, 8, 4, "out_of_smem", math.nan),
    (256, 256, 8, 5, "out_of_smem", math.nan),
    (256, 256, 16, 1, "compile_error", math.nan),
]


def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _sweep_rows():
    rows = []
    for causal in (0, 1):
        for N in shapes.SEQ_LENS:
            scale = N / 4096 / (2 if causal else 1)
            for q, k, w, s, status, tf in SWEEP:
                rows.append({"N": N, "causal": causal, "q_tile": q, "k_tile": k, "num_warps": w, "num_stages": s,
                             "status": status, "tflops": tf * scale, **PROV})
    return rows


def _bench_rows(version_index: int, version: str):
    rows = []
    for run in (1, 2, 3):
        for causal in (0, 1):
            for N in shapes.SEQ_LENS:
                flop = shapes.flops(4, 8, N, 64, bool(causal))
                ms = 0.001 * N / 512 * (1 + 0.1 * (6 - version_index)) * (1 + 0.01 * run)
                sdpa_ms = 0.001 * N / 512
                rows.append({"version": version, "run_id": f"20261129T000000-abcdef/{run}", "N": N, "causal": causal,
                             "B": 4, "H": 8, "D": 64, "flops": flop, "ms": ms, "tflops": flop / ms / 1e9,
                             "sdpa_ms": sdpa_ms, "sdpa_flash_ms": 2 * sdpa_ms, "pct_of_sdpa": 100 * sdpa_ms / ms,
                             "pct_of_sdpa_flash": 200 * sdpa_ms / ms, "sm_clock_mhz_median": 1980.0, **PROV})
    return rows


def _older(rows, run_id):
    """The same rows as an older protocol (earlier date, a run id that sorts after the newer one) with
    absurd times: a figure that mixes them in fails the value checks."""
    return [{**r, "run_id": run_id, "date": "2026-11-28T00:00:00+00:00",
             **{c: 1000.0 for c in ("ms", "graph_ms", "host_us")}} for r in rows]


def _hostpath_rows(version: str):
    rows = [{"version": version, "run_id": f"20261129T000000-abcdef/{run}", "N": N, "causal": causal,
             "ms": 0.1 * run, "graph_ms": 0.05, "host_us": 80.0, "sdpa_ms": 0.03, "sdpa_graph_ms": 0.02,
             "sdpa_host_us": 25.0, **PROV}
            for run in (1, 2) for causal in (0, 1) for N in shapes.SEQ_LENS]
    return _older(rows[:8], f"graphs-{version}") + rows


# ---- figures 5-7: Nsight Compute summaries, compile cost, torch.profiler trace ----
# Written through the writers' own code where it can run without a GPU (profiling.ncu_export.summarise_raw,
# fa2lab.results.append_rows), in the formats they write.

NCU_ALL = tuple(n for n in versions.NAMES if n != "v2_autotune")   # run_profile --kernel all
SDPA_KERNEL_TORCH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>(Flash_fwd_params)"


def ncu_values(i: int, causal: int) -> dict:
    """Fixture values of kernel i of a run (SDPA is i = len(NCU_ALL)), in base units."""
    return {"ms": 2.0 + 0.5 * i + causal, "l2": 2.0e9 / (i + 1), "dram_r": 60e6 + 1e6 * i, "dram_w": 16.8e6,
            "clock_hz": 1.98e9 - 1e7 * i}


def _raw_export(kernels: list[str], causal: int, time_unit: str, absurd: bool = False) -> str:
    """An ncu raw-page export (header, units, one row per launch) of the fixture values; ncu's auto units."""
    scale = {"msecond": 1e-3, "usecond": 1e-6}[time_unit]
    head = ["ID", "Process ID", "Kernel Name", "gpu__time_duration.sum", "l1tex__m_xbar2l1tex_read_bytes.sum",
            "dram__bytes_read.sum", "dram__bytes_write.sum", "sm__cycles_elapsed.avg.per_second",
            "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio", "unrelated__metric"]
    units = ["", "", "", time_unit, "Gbyte", "Mbyte", "Mbyte", "cycle/nsecond", "ratio", ""]
    lines = [head, units]
    for i, k in enumerate(kernels):
        v = ncu_values(i, causal)
        t = v["ms"] * 1e-3 / scale * (1000 if absurd else 1)
        lines.append([str(i), "1", k, f"{t:,.4f}", f"{v['l2'] / 1e9:.6f}", f"{v['dram_r'] / 1e6:.3f}",
                      f"{v['dram_w'] / 1e6:.3f}", f"{v['clock_hz'] / 1e9:.4f}", "6.8", "7"])
    return "==PROF== Connected to process 1\n" + "\n".join(",".join(f'"{c}"' for c in r) for r in lines) + "\n"


# The L1 and L2 metrics as `--print-units base` exports them (ncu's own roofline levels), on the causal file
L1_L2_PEAKS = {"derived__lts__lts2xbar_bytes.sum.peak_sustained [byte]": 6000.0,
               "lts__cycles_elapsed.avg.per_second [hz]": 1.7e9,
               "derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.peak_sustained": 16896.0,
               "l1tex__cycles_elapsed.avg.per_second [hz]": 1.8e9,
               "derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.per_second": 5e11}


def write_ncu(root: Path):
    """all_N4096_noncausal.csv: two appended runs (the first absurd, in msecond; the last in usecond), SDPA's
    kernel under ncu's default function name; v5_final_N4096_causal.csv: v5 and SDPA under its full name,
    with the provenance columns and the peak-bandwidth metrics a fixed writer would add."""
    from fa2lab.results import append_rows
    from profiling.ncu_export import summarise_raw

    folder = root / GPU / "ncu"
    folder.mkdir(parents=True, exist_ok=True)
    kernels = ["flash_fwd_kernel"] * (len(NCU_ALL) + 1)
    for unit, absurd in (("msecond", True), ("usecond", False)):
        raw = folder / "all_N4096_noncausal.raw.csv"
        raw.write_text(_raw_export(kernels, 0, unit, absurd))
        append_rows(folder / "all_N4096_noncausal.csv", summarise_raw(raw, N=4096, causal=False))
    raw = folder / "v5_final_N4096_causal.raw.csv"
    raw.write_text(_raw_export(["flash_fwd_kernel", "pytorch_flash::flash_fwd_kernel"], 1, "usecond"))
    rows = summarise_raw(raw, N=4096, causal=True, config="128,64,8,4")
    for r in rows:
        r.update({"dram__bytes.sum.peak_sustained [byte/cycle]": 1024.0,
                  "dram__cycles_elapsed.avg.per_second [cycle/usecond]": 4000.0, **PROV,
                  "max_sm_clock_mhz": 1980, **L1_L2_PEAKS})
    append_rows(folder / "v5_final_N4096_causal.csv", rows)


def compile_cost_values(k: int, cache_results: int, cache: str) -> dict:
    warm = cache == "on_disk"
    first = 0.23 if (warm and cache_results) else (0.2 if warm else 0.5) + (0.1 if warm else 0.3) * k
    new = 0.0 if (warm and cache_results) else 0.1 * k
    return {"import_s": 1.5, "first_4096": first, "new_2048": new, "new_1024": new * 1.2, "new_512": new * 0.9,
            "first_causal_4096": 0.0 if (warm and cache_results) else 0.2 + 0.25 * k}


def write_compile_cost(root: Path):
    from fa2lab.results import append_rows

    for k in (1, 2, 4, 8, 16):
        for cr in (0, 1):
            for cache in ("empty", "on_disk"):
                append_rows(root / GPU / "tuning" / "compile_cost.csv",
                            [{"n_configs": k, "configs": ";".join(["64,64,4,3"] * k), "cache_results": cr,
                              "cache": cache, **compile_cost_values(k, cr, cache), "date": PROV["date"],
                              **PROV, "max_sm_clock_mhz": 1980}])


def trace_events() -> tuple[list[dict], list[str]]:
    """A Kineto chrome trace of 2 rounds of every version (v2 aside) and SDPA, as torch.profiler writes it:
    user_annotation ranges, cuda_driver cuLaunchKernelEx (Triton) / cuda_runtime cudaLaunchKernel (SDPA)
    with args.correlation, kernels on GPU 0 stream 7 with args.correlation/stream/device, ac2g flows.
    One kernel's launch event is left out (found through its flow) and one kernel has neither (unmatched).
    Returns the events and the range each kernel should be attributed to ('' for none)."""
    pid, tid = 4242, 4242
    ev = [{"ph": "M", "name": "process_name", "ts": 0.0, "pid": pid, "tid": 0, "args": {"name": "python"}},
          {"ph": "M", "name": "process_name", "ts": 0.0, "pid": 0, "tid": 0, "args": {"name": "python"}},
          {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": pid, "tid": tid, "ts": 999.0,
           "dur": 1e6, "args": {"External id": 1}}]
    expected, cpu, gpu, corr = [], 1000.0, 1100.0, 100
    for it in range(2):
        for i, who in enumerate(NCU_ALL + ("sdpa",)):
            name = f"{who} N=4096 causal=0"
            ev.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": pid, "tid": tid, "ts": cpu,
                       "dur": 40.0, "args": {"External id": corr, "Record function id": 0}})
            triton = who != "sdpa"
            launch = {"ph": "X", "cat": "cuda_driver" if triton else "cuda_runtime",
                      "name": "cuLaunchKernelEx" if triton else "cudaLaunchKernel", "pid": pid, "tid": tid,
                      "ts": cpu + 20.0, "dur": 6.0, "args": {"cbid": 307 if triton else 211, "correlation": corr}}
            if not (it == 1 and who == "v3_causal_skip"):      # this one is found through its flow only
                ev.append(launch)
            ev.append({"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": cpu + 20.0, "cat": "ac2g",
                       "name": "ac2g"})
            dur = 1000.0 + 200.0 * i
            ev.append({"ph": "X", "cat": "kernel", "name": "flash_fwd_kernel" if triton else SDPA_KERNEL_TORCH,
                       "pid": 0, "tid": 7, "ts": gpu, "dur": dur,
                       "args": {"External id": corr, "queued": 0, "device": 0, "context": 1, "stream": 7,
                                "correlation": corr, "registers per thread": 255, "grid": [32, 32, 1],
                                "block": [128, 1, 1]}})
            ev.append({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": gpu, "cat": "ac2g", "name": "ac2g",
                       "bp": "e"})
            expected.append(who)
            cpu, gpu, corr = cpu + 50.0, gpu + dur + 5.0, corr + 1
    ev.append({"ph": "X", "cat": "kernel", "name": "Memset (Device)", "pid": 0, "tid": 13, "ts": gpu, "dur": 300.0,
               "args": {"device": 0, "stream": 13, "correlation": 9999}})
    expected.append("")
    ev += [{"ph": "X", "cat": "Trace", "ts": 990.0, "dur": 2e5, "pid": "Spans", "tid": "PyTorch Profiler",
            "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
           {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": gpu + 400.0}]
    return ev, expected


def write_trace(root: Path, name: str = "all_N4096_noncausal.trace.json") -> Path:
    path = root / GPU / "torch" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    events, _ = trace_events()
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [], "displayTimeUnit": "ms",
                                "baseTimeNanoseconds": 1790000000000000000, "traceEvents": events,
                                "traceName": str(path)}))
    return path


@pytest.fixture
def results_root(tmp_path) -> Path:
    root = tmp_path / "results"
    _write(root / GPU / "sweep" / "v4_exp2.csv", _sweep_rows())
    for i, v in enumerate(versions.NAMES):
        rows = _bench_rows(i, v)
        _write(root / GPU / "bench" / f"{v}.csv", rows + _older(rows, "zz-older/1"))
    for v in data.HOSTPATH_VERSIONS:
        _write(root / GPU / "hostpath" / f"{v}.csv", _hostpath_rows(v))
    write_ncu(root)
    write_compile_cost(root)
    write_trace(root)
    write_gluon(root)
    shutil.copytree(REPO / "results" / data.REFERENCE, root / data.REFERENCE)
    return root


# experiment gluon: (run, date, variant, N, causal, graph ms); SDPA's graph time is 1.0 ms in every run
GLUON = [("aaa", "2026-11-30T01:00:00+00:00", v, N, c, ms)
         for N in (1024, 4096) for c in (0, 1)
         for v, ms in (("v7_tl", 1.05), ("sdpa", 1.0), ("cfgA", 0.9 if N == 4096 else 1.2), ("cfgB", 1.1))]
GLUON += [("bbb", "2026-11-30T02:00:00+00:00", v, 4096, 0, ms) for v, ms in (("v7_tl", 1.04), ("sdpa", 1.0),
                                                                             ("cfgC", 0.95))]
GLUON += [("000", "2026-11-30T03:00:00+00:00", v, 4096, 0, ms) for v, ms in (("v7_tl", 1.0), ("cfgD", 0.5))]  # no SDPA
# a run whose "v7_tl" was v7's default (Gluon) path: that row is dropped, so the run has no tl reference
GLUON += [("aafdf46", "2026-11-30T04:00:00+00:00", v, 4096, 0, ms) for v, ms in (("v7_tl", 0.9), ("sdpa", 1.0),
                                                                                 ("cfgE", 0.9))]
# a run at head dimension 128 (experiment gluon --D 128): the only rows with a D column
GLUON_WIDE = "ccc"
GLUON += [(GLUON_WIDE, "2026-11-30T05:00:00+00:00", v, 2048, 0, ms) for v, ms in (("v7_tl", 1.3), ("sdpa", 1.0),
                                                                                  ("cfgW", 1.1), ("v7_gluon", 1.15))]
GLUON += [(GLUON_WIDE, "2026-11-30T05:00:01+00:00", v, 2048, 1, ms) for v, ms in (("v7_tl", 0.8), ("sdpa", 1.0),
                                                                                  ("cfgW", 0.9))]


def write_gluon(root: Path) -> Path:
    return _write(root / GPU / "experiments" / "gluon.csv", [
        {"git_commit": run, "date": date, "variant": v, "N": N, "causal": c, "ms": ms, "ms_min": ms, "ms_max": ms,
         "graph_ms": ms, "graph_pct_of_sdpa": 100.0 / ms, "pct_of_sdpa": 100.0 / ms, "rel_err_vs_sdpa": 0.0,
         **({"D": 128} if run == GLUON_WIDE else {}), **{k: v for k, v in PROV.items() if k != "date"}}
        for run, date, v, N, c, ms in GLUON])


def test_gluon_best_per_run_and_shape(results_root):
    df, _ = data.gluon(GPU, results_root)
    best = data.gluon_best(df)
    # run 000 has no SDPA row, run aafdf46 no true tl row: left out; runs in the order they ran, not by name
    assert list(best.git_commit.unique()) == ["aaa", "bbb"]
    assert set(df[df.git_commit == "aafdf46"].variant) == {"sdpa", "cfgE"}
    got = {(r.git_commit, r.N, r.causal): (r.best, r.configs) for r in best.itertuples()}
    assert got[("aaa", 4096, 0)] == ("cfgA", 2) and got[("aaa", 1024, 1)] == ("cfgB", 2)
    assert got[("bbb", 4096, 0)] == ("cfgC", 1) and len(got) == 5
    r = best[(best.git_commit == "bbb")].iloc[0]
    assert r.best_pct == pytest.approx(100 / 0.95) and r.v7_pct == pytest.approx(100 / 1.04)


def test_gluon_reads_one_head_dimension_and_the_report_gives_128_its_own_table(results_root):
    assert GLUON_WIDE not in set(data.gluon(GPU, results_root)[0].git_commit)   # rows without D are the harness's 64
    wide, _ = data.gluon(GPU, results_root, D=128)
    assert set(wide.git_commit) == {GLUON_WIDE} and len(wide) == 7
    text = report.section_gluon(GPU, results_root)
    main, _, rest = text.partition("Head dimension 128")
    assert GLUON_WIDE not in main and rest
    plain, _, masked = rest.partition("Head dimension 128 (the harness's B and H), causal")
    lines = [ln for ln in plain.splitlines() if ln.startswith(f"| {GLUON_WIDE} |")]
    # its configuration by graph time, then the references in GLUON_NOT_CONFIGS' order
    assert [ln.split(" | ")[2] for ln in lines] == ["cfgW", "v7_tl", "sdpa", "v7_gluon"]
    assert "(100.0%)" in lines[2] and "(90.9%)" in lines[0]
    # the causal rows have a table of their own, after the non-causal one
    lines = [ln for ln in masked.splitlines() if ln.startswith(f"| {GLUON_WIDE} |")]
    assert [ln.split(" | ")[2] for ln in lines] == ["cfgW", "v7_tl", "sdpa"] and "(111.1%)" in lines[0]


def _assert_png(path: Path):
    assert path.exists() and path.stat().st_size > 0, path
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    img = matplotlib.image.imread(path)
    assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 200, (path, img.shape)


def test_tile_matrix_is_what_the_fixture_implies(results_root):
    df, _ = data.sweep(GPU, results_root=results_root)
    tflops, why, winner = tile_heatmap.tile_matrix(df, 4096, False)
    assert list(tflops.index) == [16, 32, 64, 128, 256] and list(tflops.columns) == [16, 32, 64, 128, 256]
    assert tflops.loc[64, 32] == 150.0            # best over warps and stages, the wrong 999 ignored
    assert tflops.loc[128, 64] == 200.0
    assert tflops.notna().sum().sum() == 2
    assert (winner.q_tile, winner.k_tile, winner.num_warps, winner.num_stages) == (128, 64, 8, 4)
    assert winner.tflops == 200.0
    assert why.loc[16, 16] == "skipped"
    assert why.loc[256, 256] == "out of smem\ncompile error"   # most frequent reason first
    assert why.loc[32, 32] == "not run"
    assert why.loc[64, 32] == ""
    # another shape: the fixture scales by N/4096 and halves for causal
    tflops, _, winner = tile_heatmap.tile_matrix(df, 1024, True)
    assert tflops.loc[128, 64] == pytest.approx(200.0 / 4 / 2)


def test_sweep_grids_views_are_what_the_fixture_implies(results_root, tmp_path):
    df, path = data.sweep(GPU, results_root=results_root)
    tflops, why, cell, title, *_ = sweep_grids.qtile_warps_grid(df, path, False)
    assert tflops.loc[64, 8] == 150.0 and tflops.loc[64, 4] == 100.0 and tflops.loc[128, 4] == 50.0
    assert tflops.loc[64, 2] != tflops.loc[64, 2]           # only the wrong 999 ran there: NaN, not 999
    assert why.loc[64, 2] == "wrong" and cell == (128, 8) and title == "N = 4096, non-causal"
    tflops, _, cell, title, *_ = sweep_grids.warps_stages_grid(df, path, True)
    assert cell == (8, 4) and tflops.notna().sum().sum() == 2 and "tile 128×64" in title   # the winner's tile only
    assert tflops.loc[8, 4] == pytest.approx(100.0) and tflops.loc[4, 2] == pytest.approx(25.0)
    with pytest.raises(data.ResultsError, match=f"{path} has no ok configuration at N=4096 causal"):
        sweep_grids.warps_stages_grid(df[df["status"] != "ok"], path, True)
    # one module, both views: its main draws both, one file per sweep
    assert sweep_grids.main(["--gpu", GPU, "--results", str(results_root), "--out", str(tmp_path)]) == 0
    for view in sweep_grids.VIEWS:
        _assert_png(tmp_path / GPU / f"{view.NAME}_v4_exp2.png")


def test_round_labels_in_the_figures_are_the_registry_s(results_root, tmp_path):
    for v in versions.VERSIONS:
        text = style.label_with_round(v.name)
        assert text.startswith(v.label) and text.endswith(f"{v.round_label})")
        assert text.endswith(f"(round {v.round_label})") != v.beyond_article   # 'beyond: 6', not 'round beyond: 6'
    # each sweep's round is the round of the version it chose the configurations of
    assert style.sweep_title("v0_baseline", "g") == f"v0_baseline sweep (round {versions.get('v1_tiles').round_label}) on g"
    assert style.sweep_title("v4_exp2", "g") == f"v4_exp2 sweep (round {versions.get('v5_final').round_label}) on g"
    assert style.sweep_title("v7_hopper", "g") == f"v7_hopper sweep ({versions.get('v7_hopper').round_label}) on g"
    # the versions figure's legend carries them
    import matplotlib.pyplot as plt

    saved = plt.close
    figs = []
    try:
        plt.close = figs.append          # keep the figure style.save would close
        versions_bench.draw(GPU, tmp_path, results_root)
    finally:
        plt.close = saved
    legend = [t.get_text() for ax in figs[0].axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert {style.label_with_round(v) for v in versions.NAMES} <= set(legend)
    plt.close(figs[0])


def test_tile_matrix_with_nothing_ok_has_no_winner(results_root):
    df, _ = data.sweep(GPU, results_root=results_root)
    tflops, why, winner = tile_heatmap.tile_matrix(df[df["status"] != "ok"], 4096, False)
    assert winner is None and tflops.isna().all().all()
    assert why.loc[64, 32] == "wrong"


def test_make_all_writes_every_figure_as_a_valid_png(results_root, tmp_path, capsys):
    out = tmp_path / "out"
    assert make_all.main(["--results", str(results_root), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    sweep_figures = {tile_heatmap.NAME, "qtile_warps", "warps_stages"}   # one file per sweep: the fixture has v4's
    names = ({m.NAME for m in make_all.FIGURES} - {ada_vs_hopper.NAME} - sweep_figures
             | {"ada_vs_hopper_sdpa", "ada_vs_hopper_peak"} | {f"{n}_v4_exp2" for n in sweep_figures})
    for name in names:
        png = out / GPU / f"{name}.png"
        _assert_png(png)
        assert (out / GPU / f"{name}.svg").stat().st_size > 0
        assert str(png) in printed
    assert not (out / data.REFERENCE).exists()   # reference is not a GPU to draw


def test_results_root_from_the_environment(results_root, tmp_path, monkeypatch):
    monkeypatch.setenv("FA2_RESULTS", str(results_root))
    assert data.gpu_slugs() == [GPU]
    paths = tile_heatmap.draw(GPU, tmp_path / "env")
    _assert_png(paths[0])


def test_a_script_main_draws_one_gpu(results_root, tmp_path, capsys):
    assert tile_heatmap.main(["--gpu", GPU, "--results", str(results_root), "--out", str(tmp_path)]) == 0
    _assert_png(tmp_path / GPU / "tile_heatmap_v4_exp2.png")


def test_missing_file_is_named_and_skips_only_its_figures(results_root, tmp_path, capsys):
    sweep = results_root / GPU / "sweep" / "v4_exp2.csv"
    sweep.unlink()
    with pytest.raises(data.ResultsError, match=str(sweep)):
        tile_heatmap.draw(GPU, tmp_path, results_root)
    assert make_all.main(["--results", str(results_root), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    for name in ("tile_heatmap", "qtile_warps", "warps_stages"):
        assert f"skipped {name}: results file {sweep} does not exist" in err
    _assert_png(tmp_path / "out" / GPU / "versions_bench.png")
    assert not list((tmp_path / "out" / GPU).glob("tile_heatmap*.png"))


def test_nothing_drawable_exits_non_zero(tmp_path, capsys):
    (tmp_path / "results" / "empty-gpu").mkdir(parents=True)
    assert data.gpu_slugs(tmp_path / "results") == []   # a folder without measurements is not a GPU
    assert make_all.main(["--results", str(tmp_path / "results"), "--out", str(tmp_path / "out"),
                          "--gpu", "empty-gpu"]) == 1
    assert "hostpath/v5_final.csv does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("content", ["", "N,causal\n512,0\n", "a,b\n1,2,3,4\n5\n\"unclosed"])
def test_malformed_file_is_named(results_root, tmp_path, content):
    path = results_root / GPU / "hostpath" / "v5_final.csv"
    path.write_text(content)
    from figures import host_vs_graph

    with pytest.raises(data.ResultsError, match=str(path)):
        host_vs_graph.draw(GPU, tmp_path, results_root)


def test_sweep_without_a_shape_is_named(results_root, tmp_path):
    path = results_root / GPU / "sweep" / "v4_exp2.csv"
    df = pd.read_csv(path)
    df[df["N"] != 2048].to_csv(path, index=False)
    with pytest.raises(data.ResultsError, match=f"{path} has no rows for N=2048"):
        tile_heatmap.draw(GPU, tmp_path, results_root)


def test_versions_bench_series(results_root):
    df, _ = data.bench(GPU, results_root)
    lines = {key: s.set_index(["N", "causal"]) for key, _, _, s in versions_bench.series(df)}
    assert list(lines)[:len(versions.NAMES)] == list(versions.NAMES) and {"sdpa", "sdpa_flash"} <= set(lines)
    flop = shapes.flops(4, 8, 4096, 64, False)
    v0 = lines["v0_baseline"].loc[(4096, 0)]
    ms = [0.008 * 1.6 * (1 + 0.01 * r) for r in (1, 2, 3)]
    assert v0["median"] == pytest.approx(flop / ms[1] / 1e9)
    assert (v0["min"], v0["max"]) == pytest.approx((flop / ms[2] / 1e9, flop / ms[0] / 1e9))
    assert lines["sdpa_flash"].loc[(4096, 0), "median"] == pytest.approx(flop / 0.016 / 1e9)


def test_only_the_latest_protocol_is_drawn(results_root):
    df, _ = data.hostpath(GPU, "v5_final", results_root)
    assert set(df["run_id"]) == {"20261129T000000-abcdef/1", "20261129T000000-abcdef/2"}
    assert df["ms"].max() == pytest.approx(0.2)
    bench, _ = data.bench(GPU, results_root)
    assert len(bench) == len(versions.NAMES) * 3 * 8 and bench["ms"].max() < 1


def test_a_later_protocol_made_with_a_kernel_switch_on_is_not_the_default_kernels(tmp_path):
    """Harness rows of a run with an FA2_V7_* option switched on (a measured experiment) stay in the file; the tables
    of the default kernels keep the latest protocol without one (a switch set to its default counts as without)."""
    path = tmp_path / GPU / "bench" / "v7_hopper.csv"
    rows = _bench_rows(7, "v7_hopper")
    later = [{**r, "run_id": r["run_id"].replace("abcdef", "fedcba"), "date": "2026-11-30T00:00:00+00:00",
              "switches": "FA2_V7_STREAM=1", "ms": 1000.0} for r in rows]
    default = [{**r, "run_id": r["run_id"].replace("abcdef", "aaaaaa"), "date": "2026-11-30T01:00:00+00:00",
                "switches": "FA2_V7_UNSYNCED_ARRIVE=1", "ms": 2 * r["ms"]} for r in rows]
    _write(path, rows + later)
    bench, _ = data.bench(GPU, tmp_path)
    assert set(bench.run_id.str[:22]) == {"20261129T000000-abcdef"}
    _write(path, rows + later + default)
    bench, _ = data.bench(GPU, tmp_path)
    assert set(bench.run_id.str[:22]) == {"20261129T000000-aaaaaa"} and bench["ms"].max() < 1


def test_a_later_forward_protocol_of_one_length_refreshes_that_length_only(tmp_path):
    """The harness tables take each shape's latest protocol (as the backward's do): a later run at N = 1024 alone
    replaces N = 1024's rows and leaves every other length on the full protocol before it."""
    path = tmp_path / GPU / "bench" / "v7_hopper.csv"
    rows = _bench_rows(7, "v7_hopper")
    one = [{**r, "run_id": r["run_id"].replace("abcdef", "cccccc"), "date": "2026-11-30T00:00:00+00:00",
            "ms": 2 * r["ms"]} for r in rows if r["N"] == 1024]
    _write(path, rows + one)
    bench, _ = data.bench(GPU, tmp_path)
    protocols = bench.groupby("N").run_id.agg(lambda r: set(r.str[:22]))
    assert protocols[1024] == {"20261129T000000-cccccc"}
    assert all(protocols[N] == {"20261129T000000-abcdef"} for N in shapes.SEQ_LENS if N != 1024)
    assert len(bench) == len(rows)


def test_ada_figure_names_the_runs_it_pools(results_root):
    df, _ = data.bench(GPU, results_root)
    df = df.assign(git_commit=["bbbbbbb0" if v == "v7_hopper" else "aaaaaaa0" for v in df["version"]])
    assert ada_vs_hopper.pooling(df) == ("v0–v6: 3 runs each at aaaaaaa; v7: 3 runs at bbbbbbb", 3 * len(versions.NAMES))
    df = df.assign(git_commit=["ccccccc0" if v in ("v5_final", "v6_longest_first") else c
                               for v, c in zip(df["version"], df["git_commit"])])
    assert ada_vs_hopper.pooling(df)[0] == ("v0–v4: 3 runs each at aaaaaaa; v5, v6: 3 runs each at ccccccc; "
                                            "v7: 3 runs at bbbbbbb")
    ours = ada_vs_hopper.our_table(GPU, results_root)
    assert ours.attrs["pooled_runs"] == 3 * len(versions.NAMES) and "an unrecorded commit" in ours.attrs["pooling"]


def test_ada_and_ours_tables(results_root):
    ada = ada_vs_hopper.ada_table(results_root).set_index(["version", "N", "causal"])
    # the article: v5 1.954 ms and SDPA 2.010 ms at N = 4096 non-causal; peak 72.2 TFLOP/s
    assert ada.loc[("v5_final", 4096, 0), "pct_of_sdpa"] == pytest.approx(100 * 2.010 / 1.954)
    assert ada.loc[("v5_final", 4096, 0), "pct_of_peak"] == pytest.approx(
        100 * shapes.flops(4, 8, 4096, 64, False) / 1.954e-3 / 1e12 / 72.2)
    ours = ada_vs_hopper.our_table(GPU, results_root).set_index(["version", "N", "causal"])
    peak = 4096 * 132 * 1980e6 / 1e12
    v5 = ours.loc[("v5_final", 4096, 1)]
    assert v5["peak"] == pytest.approx(peak)
    assert v5["pct_of_sdpa"] == pytest.approx(100 / 1.02 / 1.1)
    assert v5["pct_of_peak"] == pytest.approx(100 * shapes.flops(4, 8, 4096, 64, True) / (0.008 * 1.1 * 1.02e-3) / 1e12
                                              / peak)


def test_reference_rows_are_transcribed_and_labelled():
    folder = REPO / "results" / data.REFERENCE / data.ADA
    files = sorted(folder.glob("*.csv"))
    assert {f.stem for f in files} >= {"results", "sweep_winners_round1", "sweep_winners_round5", "profile_round2",
                                      "profile_final", "compile_cost", "budget", "gpu"}
    for f in files:
        df = pd.read_csv(f)
        assert df["provenance"].str.startswith(
            "transcribed by hand from the article (../shared/article.txt), section ").all(), f
    res = pd.read_csv(folder / "results.csv").set_index(["version", "N", "causal"])
    assert len(res) == 7 * 8
    assert res.loc[("v0_baseline", 4096, 0), "ms"] == 6.386 and res.loc[("sdpa", 4096, 1), "ms"] == 1.118
    r5 = pd.read_csv(folder / "sweep_winners_round5.csv").set_index(["N", "causal"])
    assert tuple(r5.loc[(4096, 0), ["q_tile", "k_tile", "num_warps", "num_stages"]]) == (64, 128, 4, 2)


# ---- figures 5-7 ----

def test_unit_scale_and_metric_columns(tmp_path):
    assert data.unit_scale("usecond") == 1e-6 and data.unit_scale("msecond") == 1e-3
    assert data.unit_scale("Gbyte") == 1e9 and data.unit_scale("Mbyte") == 1e6 and data.unit_scale("byte") == 1
    assert data.unit_scale("ns") == 1e-9 and data.unit_scale("byte/block") == 1 and data.unit_scale("register/thread") == 1
    assert data.unit_scale("cycle/nsecond") == pytest.approx(1e9) and data.unit_scale("Mhz") == 1e6
    assert data.unit_scale("Kibyte") == 1024 and data.unit_scale("") == 1 and data.unit_scale("%") == 1
    with pytest.raises(ValueError, match="furlong"):
        data.unit_scale("furlong/fortnight")
    df = pd.DataFrame({"gpu__time_duration.sum [msecond]": [2.0, None], "gpu__time_duration.sum [usecond]": [None, 5.0],
                       "gpu__time_duration.sum.per_second [1/second]": [7.0, 7.0]})
    path = tmp_path / "x.csv"
    assert list(data.metric(df, path, "gpu__time_duration.sum")) == pytest.approx([2e-3, 5e-6])
    with pytest.raises(data.ResultsError, match=f"{path} lacks column dram__bytes_read.sum"):
        data.metric(df, path, "dram__bytes_read.sum")
    assert data.metric(df, path, "dram__bytes_read.sum", required=False) is None


def test_ncu_rows_are_labelled_by_launch_order(tmp_path):
    def who(names, tag):
        return list(roofline.label_rows(pd.DataFrame({"kernel": names}), tmp_path / f"{tag}.csv")["who"])

    triton, torch_sdpa = "flash_fwd_kernel", "pytorch_flash::flash_fwd_kernel"
    # ncu's default (function) name gives SDPA's kernel the Triton kernel's name: order decides
    assert who([triton] * (len(roofline.ALL) + 1), "all_N4096_noncausal") == list(roofline.ALL) + ["sdpa"]
    assert who([triton, triton, triton, torch_sdpa], "v5_final_N512_causal") == ["v5_final", "sdpa"]   # last run
    assert who([triton, "cudnn_generated_fort_native_sdpa_sm90", "other_kernel"], "v1_tiles_N1024_noncausal") == \
        ["v1_tiles", "sdpa", "sdpa"]
    with pytest.raises(data.ResultsError, match="cannot tell which version"):
        who([triton], "mystery_N4096_noncausal")


def test_roofline_points_are_what_the_fixture_implies(results_root):
    pts, paths, rows = roofline.load(GPU, results_root)
    assert [p.name for p in paths] == ["all_N4096_noncausal.csv", "v5_final_N4096_causal.csv"]  # not *.raw.csv
    pts = pts.set_index(["who", "N", "causal"])
    assert set(pts.index) == {(w, 4096, 0) for w in (*roofline.ALL, "sdpa")} | {("v5_final", 4096, 1),
                                                                                 ("sdpa", 4096, 1)}
    for causal, order in ((0, (*roofline.ALL, "sdpa")), (1, ("v5_final", "sdpa"))):
        flop = shapes.flops(4, 8, 4096, 64, bool(causal))
        for i, who in enumerate(order):
            v, p = ncu_values(i, causal), pts.loc[(who, 4096, causal)]
            assert p["ops"] == flop
            assert p["seconds"] == pytest.approx(v["ms"] * 1e-3)          # the last run, not the absurd first
            assert p["tflops"] == pytest.approx(flop / (v["ms"] * 1e-3) / 1e12)
            assert p["intensity_L2"] == pytest.approx(flop / v["l2"], rel=1e-5)
            assert p["intensity_DRAM"] == pytest.approx(flop / (v["dram_r"] + v["dram_w"]), rel=1e-5)


def test_roofline_reads_only_the_harness_head_dimension(results_root):
    """A summary of another head dimension (run_profile --D 128), named to sort first, is not read: its kernels would
    otherwise stand in for the harness's at the same N and mask."""
    folder = results_root / GPU / "ncu"
    src = folder / "all_N4096_noncausal.csv"
    df = pd.read_csv(src)
    labelled = roofline.label_rows(df, src)
    wide = labelled.drop(columns=["who", "run"]).assign(version=labelled["who"], run_id="r128", D=128)
    for c in [c for c in wide.columns if c.startswith("gpu__time_duration.sum")]:   # ncu's auto units
        wide[c] = pd.to_numeric(wide[c], errors="coerce") * 3
    wide.to_csv(folder / "aa_N4096_noncausal_D128.csv", index=False)
    pts, paths, _ = roofline.load(GPU, results_root)
    assert "aa_N4096_noncausal_D128.csv" not in [p.name for p in paths]
    assert pts.set_index(["who", "N", "causal"]).loc[("sdpa", 4096, 0), "seconds"] == pytest.approx(
        ncu_values(len(roofline.ALL), 0)["ms"] * 1e-3)
    wide.assign(D=64).to_csv(folder / "aa_N4096_noncausal_D128.csv", index=False)   # the same file at D = 64 is read
    assert "aa_N4096_noncausal_D128.csv" in [p.name for p in roofline.load(GPU, results_root)[1]]


def test_roofline_roof_and_slopes(results_root, tmp_path):
    pts, paths, rows = roofline.load(GPU, results_root)
    peak, note = roofline.roof(rows, paths[0], GPU, results_root)
    clocks = [ncu_values(i, c)["clock_hz"] for c, n in ((0, len(roofline.ALL) + 1), (1, 2)) for i in range(n)]
    assert peak == pytest.approx(4096 * 132 * float(pd.Series(clocks).median()) / 1e12)
    assert "median SM clock Nsight Compute measured" in note
    assert roofline.bandwidths(rows, paths[0]) == {"DRAM": pytest.approx(1024 * 4000e6),
                                                   "L2": pytest.approx(6000 * 1.7e9), "L1": pytest.approx(16896 * 1.8e9)}
    causal = pts[pts["causal"] == 1]
    assert causal["intensity_L1"].to_numpy() == pytest.approx(causal["ops"] / (5e11 * causal["seconds"]))
    assert pts[pts["causal"] == 0]["intensity_L1"].isna().all()   # that export has no L1 bytes: no triangle
    # without provenance or device columns in the export, architecture and SM count come from the bench rows
    only_all = rows[rows["causal"] == 0].dropna(axis=1, how="all")
    assert "arch" not in only_all.columns
    peak2, note2 = roofline.roof(only_all, paths[0], GPU, results_root)
    assert peak2 == pytest.approx(4096 * 132 * float(only_all["sm__cycles_elapsed.avg.per_second [cycle/nsecond]"]
                                                     .median()) * 1e9 / 1e12)
    assert f"results/{GPU}/bench/v0_baseline.csv" in note2
    # or from Nsight Compute's device attributes, where the export keeps them
    attrs = only_all.assign(**{"device__attribute_compute_capability_major": 9,
                               "device__attribute_compute_capability_minor": 0,
                               "device__attribute_multiprocessor_count": 66})
    assert roofline.roof(attrs, paths[0], GPU, tmp_path / "nowhere")[0] == pytest.approx(peak2 / 2)
    # and with nothing to go on, no roof rather than an invented one
    peak3, note3 = roofline.roof(only_all, paths[0], GPU, tmp_path / "nowhere")
    assert peak3 is None and note3.startswith("No tensor-core roof")


def test_roofline_with_one_shape_no_dram_and_no_roof(results_root, tmp_path):
    (results_root / GPU / "ncu" / "v5_final_N4096_causal.csv").unlink()
    shutil.rmtree(results_root / GPU / "bench")
    path = results_root / GPU / "ncu" / "all_N4096_noncausal.csv"
    df = pd.read_csv(path)
    df.drop(columns=[c for c in df.columns if c.startswith("dram__")]).to_csv(path, index=False)
    pts, _, _ = roofline.load(GPU, results_root)
    assert pts["intensity_L2"].notna().all() and pts["intensity_DRAM"].isna().all()
    paths = roofline.draw(GPU, tmp_path, results_root)
    _assert_png(paths[0])


def _roof_label_boxes(fig) -> list[tuple[object, list]]:
    """(panel, the window extents of its roof labels) for every drawn panel, in the layout it is saved with."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [(ax, [t.get_window_extent(renderer) for t in roofline.roof_labels(ax)])
            for ax in fig.axes if ax.get_visible()]


def _assert_roof_labels_apart(fig, n_labels: int):
    import matplotlib.pyplot as plt

    panels = _roof_label_boxes(fig)
    assert panels
    for ax, boxes in panels:
        assert len(boxes) == n_labels, ax.get_title()        # every roof is labelled
        inside = ax.get_window_extent()
        for i, a in enumerate(boxes):
            assert inside.x0 <= a.x0 and a.x1 <= inside.x1 and inside.y0 <= a.y0 and a.y1 <= inside.y1, ax.get_title()
            for b in boxes[i + 1:]:
                assert not a.overlaps(b), (ax.get_title(), a, b)
    footnote = fig.texts[-1]
    assert footnote.get_text().count("\n") <= 1              # at most two lines
    plt.close(fig)


def test_roofline_roof_labels_do_not_overlap_in_any_panel(results_root, monkeypatch):
    _, paths, rows = roofline.load(GPU, results_root)
    _assert_roof_labels_apart(roofline.build(GPU, results_root), 1 + len(roofline.bandwidths(rows, paths[0])))
    # two bandwidths within a few percent put their slopes' labels on one another until they are moved apart
    monkeypatch.setattr(roofline, "bandwidths", lambda rows, path: {"L1": 10.4e12, "L2": 10.2e12, "DRAM": 10.0e12})
    _assert_roof_labels_apart(roofline.build(GPU, results_root), 4)


def test_roofline_of_the_committed_results_keeps_labels_apart_and_names_each_panel_s_kernels():
    """The committed H200 profile, where the L1 slope's label once lay on the tensor-core roof's at N <= 2048."""
    gpu = "nvidia-h200"
    if not (REPO / "results" / gpu / "ncu").is_dir():
        pytest.skip(f"no committed results/{gpu}/ncu/")
    pts, paths, rows = roofline.load(gpu)
    fig = roofline.build(gpu)
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert len(titles) == len(set(zip(pts["N"], pts["causal"])))
    for title in titles:
        assert "every version but v2" in title or title.split("\n")[1].startswith("only ")
    rows_, cols = fig.axes[0].get_subplotspec().get_gridspec().get_geometry()
    assert cols <= 2 and rows_ * cols >= len(titles)          # a grid, not one long row
    footnote = fig.texts[-1].get_window_extent(fig.canvas.get_renderer())
    assert footnote.width <= fig.bbox.width                  # the footnote does not widen the figure
    _assert_roof_labels_apart(fig, 1 + len(roofline.bandwidths(rows, paths[0])))


def test_roofline_panel_titles_name_the_kernels():
    assert roofline.panel_kernels([*roofline.ALL, "sdpa"]) == "every version but v2 (it runs v1's kernel), and SDPA"
    assert roofline.panel_kernels(["v7_hopper", "sdpa"]) == "only v7 hopper and SDPA profiled at this shape"
    assert roofline.panel_kernels(["v5_final"]) == "only v5 final profiled at this shape"


def test_compile_cost_lines_are_what_the_fixture_implies(results_root):
    df, _ = data.compile_cost(GPU, results_root)
    lines = compile_cost.lines(df)
    assert len(lines) == 2 * 2 * 3
    ks = [1, 2, 4, 8, 16]
    for cache in ("empty", "on_disk"):
        for cr in (0, 1):
            first = lines[(cache, cr, "first_4096")]
            assert list(first.index) == ks
            assert list(first["median"]) == pytest.approx([compile_cost_values(k, cr, cache)["first_4096"] for k in ks])
            new = lines[(cache, cr, "new_N")]
            v = [compile_cost_values(k, cr, cache) for k in ks]
            assert list(new["median"]) == pytest.approx([x["new_2048"] for x in v])
            assert list(new["min"]) == pytest.approx([x["new_512"] for x in v])
            assert list(new["max"]) == pytest.approx([x["new_1024"] for x in v])
            assert list(lines[(cache, cr, "first_causal_4096")]["median"]) == pytest.approx(
                [x["first_causal_4096"] for x in v])
    ref, _ = compile_cost.article(results_root)
    assert ref.loc[4, "first_call_empty_cache_s"] == 1.63 and ref.loc[16, "each_new_N_s"] == 1.81


def test_compile_cost_keeps_the_latest_row_per_process_kind(results_root):
    path = results_root / GPU / "tuning" / "compile_cost.csv"
    df = pd.read_csv(path)
    old = df.assign(date="2026-01-01T00:00:00+00:00", first_4096=99.0)
    pd.concat([df, old]).to_csv(path, index=False)
    df, _ = data.compile_cost(GPU, results_root)
    assert compile_cost.lines(df)[("empty", 0, "first_4096")]["median"].max() < 99


def test_timeline_kernels_are_attributed_to_their_ranges(results_root):
    events, path = data.torch_trace(GPU, results_root)
    kernels, ranges = timeline.parse(events, path)
    _, expected = trace_events()
    assert list(kernels["who"]) == expected
    assert len(ranges) == 2 * (len(roofline.ALL) + 1)          # ProfilerStep#0 is not one of the drivers' ranges
    assert list(kernels["launch"]).count("flow") == 1 and list(kernels["launch"]).count("") == 1
    assert set(zip(kernels["device"], kernels["stream"])) == {(0, 7), (0, 13)}
    assert timeline.short_name(SDPA_KERNEL_TORCH) == "pytorch_flash::flash_fwd_kernel"
    calls = timeline.launches(events, kernels, ranges)
    assert len(calls) == len(expected) - 2 and "" not in set(calls["who"])


def test_timeline_takes_the_newest_trace(results_root, tmp_path):
    import os

    newest = write_trace(results_root, "all_N4096_causal.trace.json")
    older = results_root / GPU / "torch" / "all_N4096_noncausal.trace.json"
    os.utime(older, (1, 1))
    assert data.torch_trace(GPU, results_root)[1] == newest


PENDING = {roofline: "ncu/<tag>.csv", compile_cost: "tuning/compile_cost.csv", timeline: "torch/<tag>.trace.json"}


def test_pending_figures_name_a_missing_file(results_root, tmp_path, monkeypatch):
    for relpath in PENDING.values():
        shutil.rmtree(results_root / GPU / relpath.split("/")[0])
    for figure, relpath in PENDING.items():
        with pytest.raises(data.ResultsError, match=re.escape(f"results file {results_root / GPU / relpath} "
                                                              "does not exist")):
            figure.draw(GPU, tmp_path, results_root)
    monkeypatch.setattr(make_all, "FIGURES", tuple(PENDING))
    written, skipped = make_all.make_all([GPU], tmp_path / "out", results_root)
    assert written == [] and len(skipped) == len(PENDING)
    for message, (figure, relpath) in zip(skipped, PENDING.items()):
        assert message.startswith(f"{GPU}: skipped {figure.NAME}: results file {results_root / GPU / relpath} "
                                  "does not exist"), message


@pytest.mark.parametrize("relpath, content, message", [
    ("ncu/all_N4096_noncausal.csv", "", "is malformed"),
    ("ncu/all_N4096_noncausal.csv", "kernel,N\nflash_fwd_kernel,4096\n", "lacks column"),
    ("ncu/all_N4096_noncausal.csv", "kernel,N,causal,predicted_flops\nflash_fwd_kernel,4096,0,1e9\n",
     "lacks column gpu__time_duration.sum"),
    ("tuning/compile_cost.csv", "n_configs,cache\n1,empty\n", "lacks column"),
    ("tuning/compile_cost.csv", "n_configs,cache_results,cache,first_4096,new_2048,new_1024,new_512,"
     "first_causal_4096\n1,0,warm,1,1,1,1,1\n", "has cache value"),
    ("torch/all_N4096_noncausal.trace.json", '{"traceEvents": [', "is malformed"),
    ("torch/all_N4096_noncausal.trace.json", '{"traceEvents": []}', "has no traceEvents"),
    ("torch/all_N4096_noncausal.trace.json", json.dumps({"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "sdpa N=512 causal=0", "ts": 1.0, "dur": 2.0}]}),
     "has no GPU kernel events"),
])
def test_pending_figures_name_a_malformed_file(results_root, tmp_path, relpath, content, message):
    path = results_root / GPU / relpath
    path.write_text(content)
    figure = {"ncu": roofline, "tuning": compile_cost, "torch": timeline}[relpath.split("/")[0]]
    with pytest.raises(data.ResultsError, match=re.escape(str(path)) + ".*" + message):
        figure.draw(GPU, tmp_path, results_root)


def test_host_vs_graph_draws_the_no_flush_timing_only_where_every_row_has_it():
    import pandas as pd

    from figures.host_vs_graph import MEASURES, NOFLUSH, measures

    old = pd.DataFrame({"ms": [0.1, 0.2], "sdpa_ms": [0.1, 0.2]})
    assert measures(old) == MEASURES
    new = old.assign(noflush_ms=[0.3, 0.4], sdpa_noflush_ms=[0.2, 0.3])
    assert measures(new) == MEASURES + (NOFLUSH,)
    assert measures(new.assign(sdpa_noflush_ms=[0.2, None])) == MEASURES   # a gap: not drawn as if measured


def test_a_later_run_shorter_than_a_protocol_does_not_replace_it(tmp_path):
    """A one-off run (a bare run id, e.g. one harness run for the peer column) appended after a 3-run protocol leaves
    the harness tables on the protocol, and its peer rows still reach the peer column's pool; a file with only short
    runs keeps its latest."""
    path = tmp_path / GPU / "bench" / "v7_hopper.csv"
    rows = _bench_rows(7, "v7_hopper")
    one = [{**r, "run_id": "peer-D64", "date": "2026-11-30T00:00:00+00:00", "ms": 3 * r["ms"],
            "fa4_status": "ok", "pct_of_fa4": 95.0, "git_commit": "1234567"} for r in rows if r["run_id"].endswith("/1")]
    _write(path, rows + one)
    bench, _ = data.bench(GPU, tmp_path)
    assert set(bench.run_id.str[:22]) == {"20261129T000000-abcdef"}
    peer = data.peer_measured_rows(GPU, tmp_path)
    assert set(peer.run_id) == {"peer-D64"} and len(peer) == len(one)
    _write(path, one)
    bench, _ = data.bench(GPU, tmp_path)
    assert set(bench.run_id) == {"peer-D64"}


def test_gluon_splits_a_commit_run_under_two_tritons_into_two_runs(tmp_path):
    rows = [{"git_commit": "ddd", "date": f"2026-12-03T07:0{i}:00+00:00", "variant": v, "N": 4096, "causal": 0,
             "ms": ms, "ms_min": ms, "ms_max": ms, "graph_ms": ms, "graph_pct_of_sdpa": 100.0 / ms,
             "pct_of_sdpa": 100.0 / ms, "rel_err_vs_sdpa": 0.0, **{k: x for k, x in PROV.items() if k != "date"},
             "triton": triton}
            for i, (triton, scale) in enumerate((("3.9.0", 1.05), ("3.6.0", 1.0)))
            for v, ms in (("v7_tl", 1.1 * scale), ("sdpa", 1.0), ("cfgA", 0.9 * scale))]
    _write(tmp_path / GPU / "experiments" / "gluon.csv", rows)
    df, _ = data.gluon(GPU, tmp_path)
    runs = {r.git_commit: r.graph_ms for r in df[df.variant == "cfgA"].itertuples()}
    assert runs == {"ddd (Triton 3.9.0)": pytest.approx(0.945), "ddd (Triton 3.6.0)": pytest.approx(0.9)}
    assert len(data.gluon_best(df)) == 2
