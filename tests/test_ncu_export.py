"""The ncu raw-CSV summariser, on a small export written in ncu's raw format."""

import pytest

from profiling.ncu_export import read_raw, summarise_raw

RAW = '''"ID","Process ID","Kernel Name","gpu__time_duration.sum","launch__registers_per_thread","l1tex__m_xbar2l1tex_read_bytes.sum","smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio","smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio","smsp__average_warps_issue_stalled_wait_per_issue_active.ratio","unrelated__metric"
"","","","usecond","register/thread","byte","ratio","ratio","ratio",""
"0","1","v5_final N=4096 causal=0","2,060.5","255","2159017984","9.1","0.3","1.2","7"
"1","1","sdpa N=4096 causal=0","2,130","255","1350000000","6.8","0.6","0.9","7"
'''


def test_summary_picks_the_article_numbers_and_predictions(tmp_path):
    path = tmp_path / "r.raw.csv"
    path.write_text("==PROF== Connected to process\n" + RAW)
    rows = summarise_raw(path, N=4096, causal=False, config="64,128,4,2")
    assert [r["kernel"] for r in rows] == ["v5_final N=4096 causal=0", "sdpa N=4096 causal=0"]
    assert [r["version"] for r in rows] == ["v5_final", "sdpa"] and rows[1]["ncu_id"] == "1"
    ours = rows[0]
    assert ours["gpu__time_duration.sum [usecond]"] == 2060.5
    assert ours["launch__registers_per_thread [register/thread]"] == 255
    assert ours["stall_1"] == "math_pipe_throttle (9.10)" and ours["stall_3"] == "barrier (0.30)"
    assert ours["predicted_flops"] == 4 * 32 * 4096**2 * 64
    # 32 heads x 64 query tiles, each reading K and V (4096 x 64 x 2 bytes each) and its Q tile.
    assert ours["predicted_l2_to_sm_bytes"] == 32 * 64 * (2 * 4096 * 64 + 64 * 64) * 2
    assert not any("unrelated" in k for k in ours)


def test_summary_predictions_follow_the_head_dimension(tmp_path):
    """--D 128 (invoke profile --D): the rows say which head dimension ran, and the predictions count it."""
    path = tmp_path / "r.raw.csv"
    path.write_text(RAW)
    wide = summarise_raw(path, N=4096, causal=False, config="64,128,4,2", D=128)[0]
    assert wide["D"] == 128 and wide["predicted_flops"] == 4 * 32 * 4096**2 * 128
    assert wide["predicted_l2_to_sm_bytes"] == 32 * 64 * (2 * 4096 * 128 + 64 * 128) * 2
    assert summarise_raw(path, N=4096, causal=False)[0]["D"] == 64


def test_malformed_export_names_the_file(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="bad.csv"):
        read_raw(bad)


def test_roofline_uses_the_nvtx_version_and_the_last_run(tmp_path):
    import pandas as pd

    from figures.roofline import label_rows

    df = pd.DataFrame({"kernel": ["v5_final N=4096 causal=0", "sdpa N=4096 causal=0"] * 2,
                       "version": ["v5_final", "sdpa"] * 2, "run_id": ["a", "a", "b", "b"]})
    out = label_rows(df, tmp_path / "v5_final_N4096_noncausal.csv")
    assert list(out["who"]) == ["v5_final", "sdpa"] and set(out["run_id"]) == {"b"}


def test_matmul_rows_are_named_by_variant_and_count_two_s_cubed(tmp_path):
    from profiling.matmul_peak import range_name

    path = tmp_path / "m.raw.csv"
    path.write_text(RAW.replace("v5_final N=4096 causal=0", range_name("bf16->fp32", 8192))
                    .replace("sdpa N=4096 causal=0", range_name("int8->int32", 8192)))
    rows = summarise_raw(path, N=0, causal=False, predicted_flops=2 * 8192**3)
    assert [r["version"] for r in rows] == ["bf16->fp32", "int8->int32"]
    assert all(r["predicted_flops"] == 2 * 8192**3 for r in rows)



def test_backward_rows_are_named_by_kernel_and_predict_their_own_products(tmp_path):
    """--mode bwd: each Triton backward kernel in its own range (the Gluon dK/dV kernels of v7's default too), SDPA's
    backward as one range."""
    lines = RAW.splitlines()
    row = lines[2]
    names = ["v7_hopper:bwd_preprocess N=4096 causal=1", "v7_hopper:bwd_dkdv N=4096 causal=1",
             "v7_hopper:bwd_dq N=4096 causal=1", "v7_hopper:bwd_atomic_dkdv N=4096 causal=1",
             "v7_hopper:bwd_gluon_dkdv N=4096 causal=1", "v7_hopper:bwd_gluon_atomic_dkdv N=4096 causal=1",
             "sdpa-bwd N=4096 causal=1"]
    path = tmp_path / "b.raw.csv"
    path.write_text("\n".join(lines[:2] + [row.replace("v5_final N=4096 causal=0", n) for n in names]) + "\n")
    rows = summarise_raw(path, N=4096, causal=True)
    fwd = 4 * 32 * 4096**2 * 64 / 2   # the causal forward's two products
    assert [r["version"] for r in rows] == [n.split(" ")[0] for n in names]
    assert [r["predicted_flops"] / fwd for r in rows] == [0.0, 2.0, 1.5, 2.5, 2.0, 2.5, 2.5]

def test_resummarise_rederives_metrics_from_the_raw_export_and_keeps_each_rows_provenance(tmp_path):
    import pandas as pd

    from profiling.ncu_export import resummarise

    raw = tmp_path / "raw.csv"
    raw.write_text(RAW)
    rows = [{**r, "run_id": "run-1", "raw_export": str(raw), "date": "2026-11-29", "gpu": "NVIDIA H200"}
            for r in summarise_raw(raw, N=4096, causal=False)]
    summary = tmp_path / "all_N4096_noncausal.csv"
    older = pd.DataFrame(rows).drop(columns=["launch__registers_per_thread [register/thread]"])  # an older writer
    older.to_csv(summary, index=False)
    assert resummarise(summary) == 2
    df = pd.read_csv(summary)
    assert df["launch__registers_per_thread [register/thread]"].tolist() == [255, 255]
    assert df["gpu"].tolist() == ["NVIDIA H200"] * 2 and df["run_id"].tolist() == ["run-1"] * 2
    assert df["gpu__time_duration.sum [usecond]"].tolist() == [2060.5, 2130.0]
    wide = tmp_path / "v7_hopper_N4096_noncausal_D128.csv"   # a --D 128 summary keeps its head dimension
    pd.DataFrame([{**r, "run_id": "run-2", "raw_export": str(raw)} for r in summarise_raw(raw, N=4096, causal=False,
                                                                                           D=128)]).to_csv(wide)
    assert resummarise(wide) == 2
    assert pd.read_csv(wide)["predicted_flops"].tolist() == [4 * 32 * 4096**2 * 128] * 2
    raw.write_text(RAW.split('"1","1","sdpa')[0])   # the raw export lost a kernel: an error, not a silent drop
    with pytest.raises(ValueError, match="kernel 1 is not in"):
        resummarise(summary)
