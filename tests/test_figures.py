"""The figure scripts on small fixture CSVs (no GPU, no real results needed except the transcribed
reference): every figure is written as a valid PNG, the heatmap matrix is what the fixture implies,
and a missing or malformed results file is an error that names the file."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest

from fa2lab import shapes, versions
from figures import ada_vs_hopper, data, make_all, tile_heatmap, versions_bench

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


@pytest.fixture
def results_root(tmp_path) -> Path:
    root = tmp_path / "results"
    _write(root / GPU / "sweep" / "v4_exp2.csv", _sweep_rows())
    for i, v in enumerate(versions.NAMES):
        rows = _bench_rows(i, v)
        _write(root / GPU / "bench" / f"{v}.csv", rows + _older(rows, "zz-older/1"))
    for v in ("v4_exp2", "v5_final"):
        _write(root / GPU / "hostpath" / f"{v}.csv", _hostpath_rows(v))
    shutil.copytree(REPO / "results" / data.REFERENCE, root / data.REFERENCE)
    return root


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


def test_tile_matrix_with_nothing_ok_has_no_winner(results_root):
    df, _ = data.sweep(GPU, results_root=results_root)
    tflops, why, winner = tile_heatmap.tile_matrix(df[df["status"] != "ok"], 4096, False)
    assert winner is None and tflops.isna().all().all()
    assert why.loc[64, 32] == "wrong"


def test_make_all_writes_every_figure_as_a_valid_png(results_root, tmp_path, capsys):
    out = tmp_path / "out"
    assert make_all.main(["--results", str(results_root), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    names = {m.NAME for m in make_all.FIGURES} - {ada_vs_hopper.NAME} | {"ada_vs_hopper_sdpa", "ada_vs_hopper_peak"}
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
    _assert_png(tmp_path / GPU / "tile_heatmap.png")


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
    assert not (tmp_path / "out" / GPU / "tile_heatmap.png").exists()


def test_nothing_drawable_exits_non_zero(tmp_path, capsys):
    (tmp_path / "results" / "empty-gpu").mkdir(parents=True)
    assert data.gpu_slugs(tmp_path / "results") == []   # a folder without measurements is not a GPU
    assert make_all.main(["--results", str(tmp_path / "results"), "--out", str(tmp_path / "out"),
                          "--gpu", "empty-gpu"]) == 1
    assert "hostpath/v4_exp2.csv does not exist" in capsys.readouterr().err


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
