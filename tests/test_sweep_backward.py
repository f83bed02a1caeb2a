"""The backward sweep's space, pruning and resumable keys (the measurement itself needs a GPU)."""

from fa2lab.results import append_rows
from fa2lab.sweep import done_keys, merge_parts
from fa2lab.sweep_backward import KEY_FIELDS, backward_configs, config_columns, skip_reason
from fa2lab.versions import load_shared

bwd = load_shared("flash_backward_triton")


def test_the_space_mirrors_the_two_kernels_and_every_point_is_valid():
    configs = backward_configs(bwd)
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
