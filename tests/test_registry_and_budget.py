"""Unit tests of the shared machinery that need no GPU."""

import json

import pytest

from fa2lab import shapes
from fa2triton import budget, versions
from fa2triton.budget import Config
from fa2lab.pick import write_entry
from fa2triton.configs import load_table, select
from fa2lab.forward_sweep import ALL_CONFIGS


def test_registry_matches_the_kernel_folders():
    folders = sorted(p.name for p in versions.KERNELS.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    assert folders == sorted(versions.NAMES)
    for v in versions.VERSIONS:
        assert v.path.exists(), v.path
        assert versions.get(v.kernel_of)


def test_resolve_rejects_unknown_versions():
    assert [v.name for v in versions.resolve("v0_baseline,v5_final")] == ["v0_baseline", "v5_final"]
    assert len(versions.resolve("all")) == len(versions.VERSIONS)
    with pytest.raises(ValueError, match="unknown kernel version 'v9'"):
        versions.resolve("v9")


def test_flops_is_the_harness_count():
    assert shapes.flops(4, 8, 4096, 64, False) == 4 * 32 * 4096**2 * 64 == 137438953472
    assert shapes.flops(4, 8, 4096, 64, True) == 137438953472 / 2
    assert len(list(shapes.harness_shapes())) == 8


def test_budget_formula_matches_the_article():
    # The article's table: 64x32 with 3 stages is 24,576 bytes, 128x128 with 4 stages 114,688.
    assert budget.formula_shared_bytes(Config(64, 32, 4, 3)) == 24576
    assert budget.formula_shared_bytes(Config(64, 32, 4, 5)) == 40960
    assert budget.formula_shared_bytes(Config(128, 128, 8, 4)) == 114688
    assert budget.formula_shared_bytes(Config(256, 64, 16, 5)) == 98304


def test_register_skip_rule_skips_60_of_625():
    assert len(ALL_CONFIGS) == 625
    assert sum(budget.skip_reason(c) is not None for c in ALL_CONFIGS) == 60
    # 128x64 with 1 warp sits exactly at 512 registers: kept, as in the article.
    assert budget.skip_reason(Config(128, 64, 1, 3)) is None


def test_fit_stages_drops_stages_until_it_fits():
    # fp32 at D = 128 on Ada (101,376 bytes): the article's 3-stage 64x32 needed 107,520.
    fitted = budget.fit_stages(Config(64, 32, 4, 3), 101376, D=128, elem_bytes=4)
    assert fitted == Config(64, 32, 4, 2)
    assert budget.fit_stages(Config(256, 256, 8, 3), 1000, D=128, elem_bytes=4) is None


def test_config_parse():
    assert Config.parse("64,128,4,2") == Config(64, 128, 4, 2)
    with pytest.raises(ValueError, match="Q_TILE,K_TILE,WARPS,STAGES"):
        Config.parse("64,128")


def test_every_table_has_ada_and_hopper_entries():
    for v in versions.VERSIONS:
        path = v.folder / "configs.json"
        if not path.exists():
            continue
        table = load_table(path)
        assert {"sm_89", "sm_90"} <= set(table["arches"]), path
        for arch, entry in table["arches"].items():
            assert entry["configs"] and entry["source"], (path, arch)


def test_select_uses_own_entry_or_nearest_within_budget(tmp_path):
    path = versions.get("v5_final").folder / "configs.json"
    table = load_table(path)
    arch, cfgs = select(table, "sm_89")
    assert arch == "sm_89" and Config(64, 128, 4, 2) in cfgs
    with pytest.warns(UserWarning, match="sweep on this GPU"):
        arch, cfgs = select(table, "sm_86", smem_limit=101376, D=128, elem_bytes=4)
    assert arch == "sm_89"
    assert all(budget.formula_shared_bytes(c, 128, 4) <= 101376 for c in cfgs)


def test_write_entry_keeps_other_arches(tmp_path):
    path = tmp_path / "configs.json"
    path.write_text(json.dumps({"version": "x", "arches": {"sm_89": {"configs": [[64, 32, 4, 3]], "source": "a"}}}))
    write_entry(path, "sm_90", [Config(128, 64, 8, 3)], gpu="NVIDIA H200", source="s.csv")
    table = load_table(path)
    assert table["arches"]["sm_89"]["configs"] == [[64, 32, 4, 3]]
    assert table["arches"]["sm_90"]["configs"] == [[128, 64, 8, 3]]


def test_write_entry_replaces_the_configs_but_keeps_an_entrys_own_keys(tmp_path):
    path = tmp_path / "configs.json"
    path.write_text(json.dumps({"version": "x", "arches": {"sm_90": {"configs": [[64, 64, 4, 3]], "source": "old",
                                                                     "provisional": True, "pipeline_qk": [1, 0]}}}))
    write_entry(path, "sm_90", [Config(128, 64, 8, 4)], gpu="NVIDIA H200", source="sweep.csv")
    entry = load_table(path)["arches"]["sm_90"]
    assert entry["configs"] == [[128, 64, 8, 4]] and entry["source"] == "sweep.csv" and entry["provisional"] is False
    assert entry["pipeline_qk"] == [1, 0]


def test_bad_table_is_a_clear_error(tmp_path):
    bad = tmp_path / "configs.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_table(bad)
    with pytest.raises(FileNotFoundError, match="missing"):
        load_table(tmp_path / "nope.json")


def test_prediction_matches_every_compiled_size_of_the_h200_sweep():
    """The H200 sweep's compiled shared bytes (stages >= 2) against predicted_shared_bytes."""
    from fa2lab.results import RESULTS, read_csv

    path = RESULTS / "nvidia-h200" / "sweep" / "v4_exp2.csv"
    df = read_csv(path, required=("shared_compiled", "q_tile", "k_tile", "num_warps", "num_stages", "D", "arch"))
    df = df[df["shared_compiled"].notna() & (df["num_stages"] >= 2)].drop_duplicates(
        ["q_tile", "k_tile", "num_warps", "num_stages"])
    assert len(df) > 400
    wrong = [(r.q_tile, r.k_tile, r.num_warps, r.num_stages, r.shared_compiled)
             for r in df.itertuples()
             if budget.predicted_shared_bytes(Config(r.q_tile, r.k_tile, r.num_warps, r.num_stages), int(r.D), 2,
                                              r.arch) != int(r.shared_compiled)]
    assert wrong == []
    # The formula alone (Ada's) matches exactly the mma.sync rows whose warps own whole rows:
    # one warp, or two warps on a tile at least as tall as the head dimension.
    formula_ok = sum(budget.formula_shared_bytes(Config(r.q_tile, r.k_tile, r.num_warps, r.num_stages)) ==
                     int(r.shared_compiled) for r in df.itertuples())
    owns_rows = (df["num_warps"] == 1) | ((df["num_warps"] == 2) & (df["q_tile"] >= 64))
    assert formula_ok == int(owns_rows.sum()) > 100


def test_explain_names_the_hopper_extra_stage_and_the_p_buffer():
    assert budget.explain(Config(64, 32, 4, 3), 24576) == "matches"
    assert "one more of each" in budget.explain(Config(64, 32, 4, 3), 32768, arch="sm_90")
    assert "P buffer" in budget.explain(Config(16, 16, 4, 3), 10752, arch="sm_90")
    # fp32 at D = 128 on the H200 (budget table): 131,072 compiled, explained by the extra stage alone.
    assert budget.predicted_shared_bytes(Config(64, 32, 4, 3), 128, 4, "sm_90") == 131072


def test_a_triton_config_reads_back_as_the_config_it_was_built_from():
    """Config.of_triton inverts fa2triton.launch.autotune_configs: rows name autotuner candidates by it."""
    from fa2triton.launch import autotune_configs

    cfgs = [Config(128, 64, 8, 3), Config(64, 32, 4, 2)]
    assert [Config.of_triton(c) for c in autotune_configs(cfgs)] == cfgs
    assert Config.of_triton(autotune_configs(cfgs)[0]).key == "128,64,8,3"
