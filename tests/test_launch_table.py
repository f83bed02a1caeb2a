"""v7's launch table (issue 49): the lookup as a pure function (exact hit, bucket rules, paths, stale and foreign
sections, a GPU without a table), the file's schema and provenance checks, and v7 with a table: it launches the
table's choice untimed (the race is never called), races with one warning where the table has nothing for its GPU,
and races when asked to (LAUNCH_FROM "race")."""

import copy
import json
import warnings
from pathlib import Path

import pytest
import torch

from fa2triton import launch_table, versions
from fa2triton.buckets import bucket
from fa2triton.gpu import interpreting
from fa2triton.interpret import autotuner_of, only_config
from fa2triton.launch_table import (PROVENANCE_FIELDS, Gpu, Launch, LaunchTableError, LaunchTableWarning, Signature,
                                 Table, lookup)
from fa2triton.reference import attention, relative_error
from fake_gluon import install, label_of

v7 = versions.load("v7_hopper")
FA = v7.FlashAttentionTriton
TUNER = autotuner_of(v7)
H200 = Gpu("nvidia-h200", "sm_90", 132, "3.6")
KEY = "nvidia-h200/triton-3.6"
HERE = launch_table.gpu_identity() if interpreting() else None   # the interpreter's stand-in GPU
KNOWN = {"gluon": {"ws2", "ws3"}, "tma": {"128,64,4,3/p1", "64,64,4,3/p0"}}
BOTH = ("gluon", "tma")
pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered in log2:RuntimeWarning")
interpreted = pytest.mark.skipif(not interpreting(), reason="v7 with a table for the interpreter's stand-in GPU")


def entry(D=64, causal=0, N=1024, BH=32, won=("gluon", "ws2"),
          raced=(("gluon", "ws2", 0.10), ("tma", "128,64,4,3/p1", 0.12), ("gluon", "ws3", 0.13))):
    return {"D": D, "causal": causal, "N": N, "BH": BH, "dtype": "bfloat16",
            "launch": dict(zip(("path", "label"), won)),
            "raced": [{"path": p, "label": lab, "ms": ms} for p, lab, ms in raced]}


def file_with(*entries, gpu=H200, kernel="v7_hopper", triton=None) -> dict:
    """A file of one section, on `gpu` under its Triton (or `triton`, "3.9")."""
    data = launch_table.new_file(kernel)
    triton = triton or gpu.triton
    prov = {**{f: "x" for f in PROVENANCE_FIELDS}, "arch": gpu.arch, "sm_count": gpu.sm_count, "triton": f"{triton}.0"}
    data["gpus"][launch_table.section_key(gpu.key, triton)] = {
        "provenance": prov, "grid": {"dtype": "bfloat16"}, "complete": True, "entries": list(entries)}
    return data


def table(*entries, gpu=H200, triton=None) -> Table:
    data = file_with(*entries, gpu=gpu, triton=triton)
    launch_table.validate(data, "v7_hopper")
    return Table("v7_hopper", data["gpus"], Path("launch_table.json"))


def sig(N=1024, D=64, causal=False, bh=32, dtype="bfloat16", n_k=None) -> Signature:
    return Signature(dtype, D, causal, N, N if n_k is None else n_k, bh)


# ------------------------------------------------------------------------------------------------ the lookup

def test_an_exact_hit_is_the_races_winner_and_says_where_it_was_raced():
    t = table(entry(), entry(N=2048, won=("tma", "128,64,4,3/p1"), raced=(("tma", "128,64,4,3/p1", 0.2),)))
    before = copy.deepcopy(t.gpus)
    choice = lookup(t, sig(1024), H200, BOTH, KNOWN)
    assert choice.launch == Launch("gluon", "ws2")
    assert choice.reason == "raced on nvidia-h200 at D=64 non-causal N<=1024 B·H<=32"
    assert lookup(t, sig(2048), H200, BOTH, KNOWN).launch == Launch("tma", "128,64,4,3/p1")
    assert lookup(t, sig(1024), H200, BOTH, KNOWN) == choice and t.gpus == before   # pure: same answer, no change


@pytest.mark.parametrize("N, bh, n_k, expected_N", [
    (600, 32, None, 1024),     # N's bucket (1024) is an entry: an exact hit
    (300, 32, None, 512),      # bucket 512, an entry too
    (100, 32, None, 512),      # below the grid: its smallest N
    (20000, 32, None, 4096),   # above it: its largest
    (1024, 5, None, 1024),     # B·H 5 (bucket 8): the nearest, the B·H 32 entry
    (2048, 32, None, 4096),    # between 1024 and 4096, equally far: the larger N
    (512, 32, 4096, 4096),     # N_q 512, N_k 4096: summed distances 3 to every entry, the larger N
])
def test_other_lengths_take_the_nearest_raced_bucket(N, bh, n_k, expected_N):
    t = table(entry(N=512, won=("gluon", "ws3"), raced=(("gluon", "ws3", 1.0),)),
              entry(N=1024), entry(N=4096, won=("tma", "64,64,4,3/p0"), raced=(("tma", "64,64,4,3/p0", 1.0),)))
    choice = lookup(t, sig(N, bh=bh, n_k=n_k), H200, BOTH, KNOWN)
    want = {512: Launch("gluon", "ws3"), 1024: Launch("gluon", "ws2"), 4096: Launch("tma", "64,64,4,3/p0")}
    assert choice.launch == want[expected_N]
    exact = bucket(N) == expected_N and bh == 32 and n_k is None
    assert choice.reason.startswith("raced on" if exact else "the nearest bucket raced on nvidia-h200")
    assert f"N<={expected_N}" in choice.reason


def test_a_head_dimension_outside_the_grid_takes_the_nearest_one_before_any_length():
    t = table(entry(D=64, N=8192), entry(D=128, N=1024, won=("gluon", "ws3")))
    assert lookup(t, sig(1024, D=32), H200, ("tma",), KNOWN).launch == Launch("tma", "128,64,4,3/p1")
    assert "D=64" in lookup(t, sig(1024, D=32), H200, ("tma",), KNOWN).reason
    assert lookup(t, sig(1024, D=128), H200, BOTH, KNOWN).launch == Launch("gluon", "ws3")


def test_a_path_the_route_does_not_take_gives_that_races_fastest_launch_of_one_it_takes():
    """Gluon off, a window, or a forced path leave only the tl path: the entry's fastest tl launch, said so."""
    choice = lookup(table(entry()), sig(), H200, ("tma",), KNOWN)
    assert choice.launch == Launch("tma", "128,64,4,3/p1") and "not taken here" in choice.reason
    assert lookup(table(entry()), sig(), H200, ("gluon",), KNOWN).launch == Launch("gluon", "ws2")


def test_fp16_takes_the_bf16_race_and_fp32_none():
    choice = lookup(table(entry()), sig(dtype="float16"), H200, BOTH, KNOWN)
    assert choice.launch == Launch("gluon", "ws2") and "bfloat16 race serves float16" in choice.reason
    choice = lookup(table(entry()), sig(dtype="float32"), H200, BOTH, KNOWN)
    assert choice.launch is None and "not float32" in choice.reason


def test_a_label_that_is_no_candidate_now_is_never_launched():
    known = {"gluon": {"ws3"}, "tma": set()}          # ws2 retired, the tl list changed
    assert lookup(table(entry()), sig(), H200, BOTH, known).launch == Launch("gluon", "ws3")
    choice = lookup(table(entry()), sig(), H200, BOTH, {"gluon": set(), "tma": set()})
    assert choice.launch is None and "stale" in choice.reason
    assert "invoke pick-launch --kernel v7_hopper" in choice.reason


def test_a_mask_the_table_never_raced_gives_no_launch():
    choice = lookup(table(entry(causal=1)), sig(causal=False), H200, BOTH, KNOWN)
    assert choice.launch is None and "non-causal" in choice.reason


@pytest.mark.parametrize("gpu, why", [
    (Gpu("nvidia-h100-pcie", "sm_90", 114, "3.6"), "no launch table for nvidia-h100-pcie (sm_90)"),
    (Gpu("nvidia-b200", "sm_100", 132, "3.6"), "no launch table for nvidia-b200 (sm_100)"),
    (Gpu("nvidia-h200", "sm_100", 132, "3.6"), "measured on sm_90 with 132 SMs, this GPU is sm_100 with 132"),
    (Gpu("nvidia-h200", "sm_90", 114, "3.9"), "this GPU is sm_90 with 114"),
])
def test_a_gpu_without_its_own_section_gets_no_launch_and_the_task_that_writes_one(gpu, why):
    choice = lookup(table(entry()), sig(), gpu, BOTH, KNOWN)
    assert choice.launch is None and why in choice.reason and "`invoke pick-launch --kernel v7_hopper`" in choice.reason
    assert "\n" not in choice.reason


def test_a_gpu_without_a_section_takes_one_of_its_architecture_and_sm_count_and_says_whose():
    """An H100 SXM (sm_90, 132 SMs) has no section: it launches the H200's race (nearest Triton first), says so in
    the reason, and names the H200 in raced_on; its own section, once written, comes first."""
    h100 = Gpu("nvidia-h100-80gb-hbm3", "sm_90", 132, "3.9")
    data = file_with(entry(won=("gluon", "ws3")), triton="3.9")
    data["gpus"].update(file_with(entry())["gpus"])                         # the H200's 3.6 race chose ws2
    t = Table("v7_hopper", data["gpus"], Path("launch_table.json"))
    choice = lookup(t, sig(), h100, BOTH, KNOWN)
    assert choice.launch == Launch("gluon", "ws3") and choice.raced_on == "nvidia-h200"
    assert choice.reason.startswith("raced on nvidia-h200 at D=64")
    assert "a GPU of this one's architecture and SM count (nvidia-h100-80gb-hbm3: `invoke pick-launch" in choice.reason
    assert "under Triton" not in choice.reason   # the same Triton: only the GPU differs
    older = lookup(t, sig(), Gpu(h100.key, "sm_90", 132, "3.6"), BOTH, KNOWN)
    assert older.launch == Launch("gluon", "ws2") and "under Triton" not in older.reason
    mine = entry(won=("tma", "64,64,4,3/p0"), raced=(("tma", "64,64,4,3/p0", 0.09), ("gluon", "ws2", 0.10)))
    data["gpus"].update(file_with(mine, gpu=h100)["gpus"])   # its own, under 3.9
    own = lookup(Table("v7_hopper", data["gpus"], None), sig(), h100, BOTH, KNOWN)
    assert own.launch == Launch("tma", "64,64,4,3/p0") and own.raced_on == h100.key
    assert "architecture and SM count" not in own.reason


def test_each_triton_reads_its_own_section_and_one_without_its_own_the_nearest_tritons():
    """The same source compiles to other kernels under each Triton, so each has its race; a Triton never raced takes
    the nearest one's (the newer of two as near), and says so."""
    data = file_with(entry(won=("gluon", "ws3")), triton="3.9")
    data["gpus"].update(file_with(entry())["gpus"])                         # 3.6's race chose ws2
    t = Table("v7_hopper", data["gpus"], Path("launch_table.json"))
    launch_table.validate({**launch_table.new_file("v7_hopper"), "gpus": data["gpus"]}, "v7_hopper")
    for triton, won in (("3.6", "ws2"), ("3.9", "ws3"), ("3.7", "ws2"), ("3.8", "ws3"), ("3.10", "ws3")):
        choice = lookup(t, sig(), Gpu("nvidia-h200", "sm_90", 132, triton), BOTH, KNOWN)
        assert choice.launch == Launch("gluon", won), triton
        under = "3.6" if won == "ws2" else "3.9"
        assert (f"under Triton {under}.0 (this process runs {triton};" in choice.reason) == (under != triton)
    assert lookup(table(entry()), sig(), Gpu("nvidia-h200", "sm_90", 132, "4.0"), BOTH, KNOWN).launch is not None


# ------------------------------------------------------------------------------------------------ the file

def test_a_missing_file_is_an_empty_table_and_a_written_one_reads_back(tmp_path):
    path = tmp_path / "launch_table.json"
    assert launch_table.load(path, "v7_hopper").gpus == {}
    data = file_with(entry(), entry(N=2048))
    launch_table.write(path, data, "v7_hopper")
    back = launch_table.load(path, "v7_hopper")
    assert back.gpus == data["gpus"] and back.path == path
    assert lookup(back, sig(), H200, BOTH, KNOWN).launch == Launch("gluon", "ws2")


def _broken(change):
    data = file_with(entry(), entry(N=2048))
    change(data)
    return data


MALFORMED = [
    (lambda d: d.update(format="fa2lab-launch-table/1"), "not a fa2lab-launch-table/2 file"),
    (lambda d: d.update(kernel="v5_final"), "a table for 'v5_final', not 'v7_hopper'"),
    (lambda d: d.update(gpus=[]), "'gpus' must be an object"),
    (lambda d: d["gpus"][KEY].pop("provenance"), "has no 'provenance'"),
    (lambda d: d["gpus"][KEY]["provenance"].pop("git_commit"), "provenance lacks git_commit"),
    (lambda d: d["gpus"][KEY]["provenance"].pop("triton"), "provenance lacks triton"),
    (lambda d: d["gpus"][KEY]["entries"][0].pop("raced"), "entries[0] must have"),
    (lambda d: d["gpus"][KEY]["entries"][1].update(N=1000), "entries[1].N must be a positive integer power"),
    (lambda d: d["gpus"][KEY]["entries"][0].update(BH=0), "entries[0].BH"),
    (lambda d: d["gpus"][KEY]["entries"][0].update(causal=True), "causal must be 0 or 1"),
    (lambda d: d["gpus"][KEY]["entries"][0]["raced"][0].update(path="v6"), "raced[0] must be"),
    (lambda d: d["gpus"][KEY]["entries"][0]["raced"][1].update(ms=-1.0), "raced[1] must be"),
    (lambda d: d["gpus"][KEY]["entries"][0]["launch"].update(label="ws9"), "launch must be one of its raced"),
    (lambda d: d["gpus"][KEY]["entries"][1].update(N=1024), "entries[1] repeats D, causal, N, BH"),
    (lambda d: d["gpus"].update({"nvidia-h200": d["gpus"].pop(KEY)}), "a section's key is GPU/triton-MAJOR.MINOR"),
    (lambda d: d["gpus"][KEY]["provenance"].update(triton="3.9.0"), "was raced under Triton 3.9.0, not 3.6"),
]


@pytest.mark.parametrize("change, why", MALFORMED)
def test_a_malformed_or_foreign_file_is_one_clear_error_naming_the_file_and_field(tmp_path, change, why):
    path = tmp_path / "launch_table.json"
    path.write_text(json.dumps(_broken(change)))
    with pytest.raises(LaunchTableError, match="launch table .*launch_table.json: ") as err:
        launch_table.load(path, "v7_hopper")
    assert why in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(LaunchTableError):   # and nothing malformed is ever written
        launch_table.write(tmp_path / "other.json", _broken(change), "v7_hopper")
    assert not (tmp_path / "other.json").exists()


@pytest.mark.parametrize("text", ["{not json", "", "[1, 2]"])
def test_a_file_that_is_not_a_table_at_all_is_one_clear_error(tmp_path, text):
    path = tmp_path / "launch_table.json"
    path.write_text(text)
    with pytest.raises(LaunchTableError, match=r"launch table .*launch_table.json: "):
        launch_table.load(path, "v7_hopper")


def test_v7s_own_table_file_if_committed_is_valid_and_measured_on_a_gpu():
    """The committed table (written on a GPU by invoke pick-launch; absent until then) loads, and every section names
    a GPU, not the interpreter."""
    path = Path(v7.__file__).with_name("launch_table.json")
    t = launch_table.load(path, "v7_hopper")
    assert FA.LAUNCH_TABLE.gpus == t.gpus
    assert all(not key.startswith(launch_table.INTERPRETER) and s["provenance"]["arch"].startswith("sm_")
               for key, s in t.gpus.items())


# ------------------------------------------------------------------------------------------------ v7 with a table

def forbid_the_race(monkeypatch):
    """Every timing step of the race raises: v7 with a table must call none of them."""
    def never(*args, **kwargs):
        raise AssertionError("the race was called")

    monkeypatch.setattr("fa2triton.queued_timing.queued_ms", never)
    monkeypatch.setattr(v7, "_faster_of", never)
    monkeypatch.setattr(v7.GLUON, "best_launch", never)


def qkv(N, D=64, B=1, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed + N)
    return [torch.randn(B, N, D, generator=g).to(dtype) for _ in range(3)]


@interpreted
def test_v7_launches_the_tables_gluon_choice_untimed(fresh_v7, monkeypatch):
    fake = install(monkeypatch, v7)
    forbid_the_race(monkeypatch)
    monkeypatch.setattr(FA, "LAUNCH_TABLE", table(entry(N=512, BH=1, won=("gluon", "b"),
                                                        raced=(("gluon", "b", 0.5), ("gluon", "a", 1.0))), gpu=HERE))
    O = FA.apply(*qkv(300), False)
    assert label_of(O) == "b" and fake.forwarded == ["b"] and fake.raced == []
    assert (v7.LAST_PATH, v7.LAST_CONFIG, v7.LAST_CHOICE) == ("gluon", "b", "table")


@interpreted
def test_v7_launches_the_tables_tl_choice_pinned_and_matches_float64(fresh_v7, monkeypatch):
    first = TUNER.configs[0].kwargs
    chosen = next(c for c in TUNER.configs if (c.kwargs["Q_TILE_SIZE"], c.kwargs["K_TILE_SIZE"])
                  != (first["Q_TILE_SIZE"], first["K_TILE_SIZE"]))
    label = v7.config_label(chosen)
    forbid_the_race(monkeypatch)
    seen, real = [], v7._tma_launch
    monkeypatch.setattr(v7, "_tma_launch", lambda *args: (seen.append(list(TUNER.configs)), real(*args))[1])
    monkeypatch.setattr(FA, "LAUNCH_TABLE", table(entry(D=16, causal=1, N=128, BH=1, won=("tma", label),
                                                        raced=(("tma", label, 0.1),)), gpu=HERE))
    Q, K, V = qkv(100, D=16)
    O = FA.apply(Q, K, V, True)
    assert seen == [[chosen]] and v7.LAST_CHOICE == "table" and v7.LAST_PATH == "tma"
    assert len(TUNER.configs) > 1 and TUNER.configs[0] is not chosen   # the candidate list given back
    assert relative_error(O, attention(Q, K, V, True)[0]) < 1.5e-2


@interpreted
def test_a_tl_launch_the_race_timed_with_fewer_stages_is_launched_as_timed(fresh_v7, monkeypatch):
    """The autotuner times each candidate as fitted to the shared memory (prune_tma_configs drops stages where one
    does not fit, at D = 128 say): that form's label, which the race recorded, is a candidate too."""
    import triton

    base = TUNER.configs[0]
    fitted = triton.Config(dict(base.kwargs), num_warps=base.num_warps, num_stages=base.num_stages - 1)
    label = v7.config_label(fitted)
    assert label not in {v7.config_label(c) for c in TUNER.configs}
    monkeypatch.setattr(v7, "prune_tma_configs", lambda configs, named, **kw: [fitted])
    forbid_the_race(monkeypatch)
    seen, real = [], v7._tma_launch
    monkeypatch.setattr(v7, "_tma_launch", lambda *args: (seen.append(list(TUNER.configs)), real(*args))[1])
    monkeypatch.setattr(FA, "LAUNCH_TABLE", table(entry(D=16, causal=1, N=128, BH=1, won=("tma", label),
                                                        raced=(("tma", label, 0.1),)), gpu=HERE))
    FA.apply(*qkv(100, D=16), True)
    assert [[v7.config_label(c) for c in configs] for configs in seen] == [[label]] and v7.LAST_CHOICE == "table"


@interpreted
def test_a_pinned_tl_configuration_runs_as_it_is_not_the_tables(fresh_v7, monkeypatch):
    other = v7.config_label(TUNER.configs[-1])
    monkeypatch.setattr(FA, "LAUNCH_TABLE", table(entry(D=16, causal=1, N=128, BH=1, won=("tma", other),
                                                        raced=(("tma", other, 0.1),)), gpu=HERE))
    mine, seen, real = TUNER.configs[0], [], v7._tma_launch
    monkeypatch.setattr(v7, "_tma_launch", lambda *args: (seen.append(list(TUNER.configs)), real(*args))[1])
    with only_config(TUNER, mine):
        FA.apply(*qkv(100, D=16), True)
    assert seen == [[mine]] and v7.LAST_CHOICE == "pinned"


@interpreted
def test_a_gpu_without_a_table_races_and_says_so_once(fresh_v7, monkeypatch):
    fake = install(monkeypatch, v7)
    monkeypatch.setattr(launch_table, "gpu_identity", lambda device=None: Gpu("nvidia-h100", "sm_90", 114, "3.6"))
    monkeypatch.setattr(FA, "LAUNCH_TABLE", table(entry()))   # the H200's only
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [FA.apply(*qkv(n), False) for n in (300, 700, 1500)]
    said = [w for w in caught if issubclass(w.category, LaunchTableWarning)]
    assert len(said) == 1, [str(w.message) for w in said]
    assert "nvidia-h100" in str(said[0].message) and "invoke pick-launch --kernel v7_hopper" in str(said[0].message)
    assert fake.raced == [300, 700, 1500] and [label_of(O) for O in outs] == ["b"] * 3 and v7.LAST_CHOICE == "tuned"


@interpreted
def test_a_stale_table_races_with_one_warning_not_a_wrong_launch(fresh_v7, monkeypatch):
    fake = install(monkeypatch, v7, labels=("a", "c"))      # "b" is no candidate any more
    monkeypatch.setattr(launch_table, "gpu_identity", lambda device=None: H200)   # the interpreter is never warned
    monkeypatch.setattr(FA, "LAUNCH_TABLE", table(entry(N=512, BH=1, won=("gluon", "b"),
                                                        raced=(("gluon", "b", 0.5),))))
    with pytest.warns(LaunchTableWarning, match="stale"):
        O = FA.apply(*qkv(300), False)
    assert fake.forwarded == [] and fake.raced == [300] and label_of(O) == "c"


@interpreted
def test_launch_from_race_races_though_the_table_has_an_entry(fresh_v7, monkeypatch):
    fake = install(monkeypatch, v7)
    monkeypatch.setattr(FA, "LAUNCH_FROM", "race")
    monkeypatch.setattr(FA, "LAUNCH_TABLE", table(entry(N=512, BH=1, won=("gluon", "a"),
                                                        raced=(("gluon", "a", 0.5),)), gpu=HERE))
    with warnings.catch_warnings():
        warnings.simplefilter("error", LaunchTableWarning)
        O = FA.apply(*qkv(300), False)
    assert fake.raced == [300] and fake.forwarded == [] and label_of(O) == "b" and v7.LAST_CHOICE == "tuned"


def test_an_unknown_launch_choice_is_refused_by_name(fresh_v7, monkeypatch):
    monkeypatch.setattr(FA, "LAUNCH_FROM", "bucket")
    with pytest.raises(ValueError, match="LAUNCH_FROM must be 'table' or 'race', got 'bucket'"):
        FA.apply(*qkv(64, D=16), False)


@interpreted
def test_a_gpu_like_the_tables_launches_its_choice_untimed_and_says_whose_once(fresh_v7, monkeypatch):
    fake = install(monkeypatch, v7)
    monkeypatch.setattr(launch_table, "gpu_identity", lambda device=None: Gpu("nvidia-h100", "sm_90", 132, "3.6"))
    monkeypatch.setattr(FA, "LAUNCH_TABLE", table(entry(N=512, BH=1, won=("gluon", "b"),
                                                        raced=(("gluon", "b", 0.5), ("gluon", "a", 0.6)))))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [FA.apply(*qkv(n), False) for n in (300, 700, 1500)]
    said = [str(w.message) for w in caught if issubclass(w.category, LaunchTableWarning)]
    assert said == ["v7_hopper: no launch table for nvidia-h100: its launches come from nvidia-h200's (sm_90, 132 SMs "
                    "as here); `invoke pick-launch --kernel v7_hopper` on this GPU races its own"]
    assert fake.raced == [] and [label_of(O) for O in outs] == ["b"] * 3 and v7.LAST_CHOICE == "table"
