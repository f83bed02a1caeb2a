"""The backward sweep's space, pruning and resumable keys (the measurement itself needs a GPU)."""

import pytest

from fa2lab.results import append_rows
from fa2lab.forward_sweep import done_keys, merge_parts
from fa2lab.backward_sweep import KEY_FIELDS, backward_configs, config_columns, skip_reason
from fa2triton import backward_config as bwd


def test_the_space_mirrors_the_two_kernels_and_every_point_is_valid():
    configs = backward_configs()
    assert len(configs) == 3 * 3 * 2 * 3 == len(set(configs))
    for c in configs:
        c.validate()
        assert (c.dkdv_k_tile, c.dkdv_q_tile) == (c.dq_q_tile, c.dq_k_tile)
    assert bwd.SM90_DEFAULT in configs   # the provisional default is one of the points measured


def test_pruning_names_the_accumulators_that_would_not_fit():
    small, big = bwd.BackwardConfig(16, 128, 128, 16, num_warps=4), bwd.BackwardConfig(16, 256, 256, 16, num_warps=4)
    assert skip_reason(small, 64) is None                     # 2 x 128 x 64 / 128 threads = 128 registers
    assert "256 fp32 registers" in skip_reason(big, 64)
    assert skip_reason(big, 32) is None


def test_rows_resume_and_merge_by_configuration_shape_and_dq_mode(tmp_path):
    cfg = bwd.SM90_DEFAULT
    row = {"N": 512, "causal": 1, **config_columns(cfg, "separate"), "status": "ok", "bwd_ms": 0.1}
    assert list(config_columns(cfg, "atomic")) == list(KEY_FIELDS[2:])
    part_a, part_b, merged = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "all.csv"
    append_rows(part_a, [row])
    append_rows(part_b, [{**row, "dq_mode": "atomic"}, row])   # the same key again: merged once
    assert merge_parts([part_a, part_b], merged, KEY_FIELDS) == 2
    key = (512, 1, *config_columns(cfg, "separate").values())
    assert done_keys(merged, KEY_FIELDS) == {key, (*key[:-1], "atomic")}


def test_pick_takes_the_best_geometric_mean_among_configurations_correct_everywhere():
    import pandas as pd

    from fa2lab.backward_sweep import pick_single

    def row(cfg, N, causal, ms, status="ok"):
        return dict(zip(("dkdv_q_tile", "dkdv_k_tile", "dq_q_tile", "dq_k_tile", "num_warps", "num_stages"), cfg),
                    N=N, causal=causal, bwd_ms=ms if status == "ok" else float("nan"), status=status,
                    dq_mode="separate")
    A, B, C = (32, 128, 128, 32, 8, 3), (64, 128, 128, 64, 8, 2), (16, 64, 64, 16, 4, 1)
    df = pd.DataFrame([row(A, 512, 0, 1.0), row(A, 4096, 1, 1.5), row(B, 512, 0, 1.1), row(B, 4096, 1, 1.0),
                       row(C, 512, 0, 0.5), row(C, 4096, 1, 0.0, status="wrong_result")])
    cfg, score, per_shape = pick_single(df, n_configs=3)
    # A: (1.0/1.0, 1.0/1.5) -> 0.816; B: (1.0/1.1, 1.0/1.0) -> 0.953; C is fastest at 512 but wrong at 4096.
    # The best time at 512 counts C's (only rows that ran correctly define a shape's best).
    assert cfg == B
    assert per_shape == {(512, 0): (1.1, 0.5), (4096, 1): (1.0, 1.0)}
    assert abs(score - (0.5 / 1.1) ** 0.5) < 1e-9
    # by total time: A 2.5 ms, B 2.1 ms (C is out: wrong at 4096)
    assert pick_single(df, n_configs=3, criterion="total")[0] == B
    df2 = df.copy()
    df2.loc[(df2.dkdv_q_tile == 32) & (df2.N == 512), "bwd_ms"] = 0.3   # A: 1.8 ms in all, but 0.3/1.5 at 4096
    assert pick_single(df2, n_configs=3, criterion="total")[0] == A
    assert pick_single(df2, n_configs=3, criterion="geomean")[0] == A
    # scoring only N >= 4096: df2's A (0.3 ms at 512) loses to B there (1.0 against 1.5 ms); the per-shape
    # table names the scored shapes only, and a configuration wrong at an unscored shape stays out
    cfg, _, per_shape = pick_single(df2, n_configs=3, criterion="total", min_n=4096)
    assert cfg == B and per_shape == {(4096, 1): (1.0, 1.0)}
    df3 = df2.copy()
    df3.loc[(df3.dkdv_q_tile == 64) & (df3.N == 512), "status"] = "wrong_result"
    assert pick_single(df3, n_configs=3, criterion="total", min_n=4096)[0] == A
    with pytest.raises(ValueError, match="no shape with N >= 8192"):
        pick_single(df, n_configs=3, min_n=8192)
    with pytest.raises(ValueError, match="criterion must be"):
        pick_single(df, criterion="fastest")
    with pytest.raises(ValueError, match="incomplete sweep"):
        pick_single(df, n_configs=4)
    with pytest.raises(ValueError, match="no 'atomic' rows"):
        pick_single(df, "atomic")


@pytest.mark.parametrize("configs, message", [
    (["64,64,128,24,4,3"], "dq_k_tile must be a power of two >= 16, got 24"),
    (["64,64,128,32,4"], "a backward configuration is 'DKDV_Q,DKDV_K,DQ_Q,DQ_K,WARPS,STAGES'"),
])
def test_explicit_configs_are_checked_before_anything_runs(configs, message):
    """--configs (dQ tiles apart from dK/dV's) names a malformed configuration and exits 2, GPU or not."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "sweeps" / "sweep_backward.py"
    p = subprocess.run([sys.executable, str(script), "--configs", *configs], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and message in p.stderr, p.stderr
