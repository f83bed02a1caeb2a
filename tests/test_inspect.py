"""profiling/inspect_kernel.py, profiling/ir.py and the profile drivers, without a GPU.

The kernels are compiled for real, offline, for sm_90 (Triton's compiler and the ptxas,
nvdisasm and cuobjdump bundled in its wheel; about a second each), in a subprocess
without TRITON_INTERPRET (`invoke test` sets it for the kernels' own tests). The
assertions are the article's readings of that output, as they come out for the H200.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fa2triton.triton_compat import triton_version
from profiling import ir

REPO = Path(__file__).resolve().parent.parent

# (folder, inspect_kernel arguments)
COMPILES = {
    "v0": ["--kernel", "v0_baseline", "--config", "16,16,4,3"],
    "v3": ["--kernel", "v3_causal_skip", "--config", "128,64,8,3"],
    "v4": ["--kernel", "v4_exp2", "--config", "128,64,8,3"],
    "v6": ["--kernel", "v6_longest_first", "--config", "128,64,8,3"],   # its own signature (WINDOW, launch order)
}


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def inspected(tmp_path_factory):
    """Compile the three configurations offline for sm_90 in one subprocess; {name: (folder, summary)}."""
    root = tmp_path_factory.mktemp("inspect")
    calls = [args + ["--offline", "--arch", "sm_90", "--quiet", "--out", str(root / name)]
             for name, args in COMPILES.items()]
    code = ("import sys\nfrom profiling.inspect_kernel import main\n"
            f"sys.exit(max(main(a) for a in {calls!r}))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env=_env(TRITON_CACHE_DIR=str(root / "triton-cache")))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return {name: (root / name, json.loads((root / name / "summary.json").read_text())) for name in COMPILES}


# --------------------------------------------------------------------------- offline compile: what the article reads

def test_offline_compile_is_labelled(inspected):
    import triton

    for name, (folder, s) in inspected.items():
        assert s["compiled_offline"] is True and s["kind"].startswith("offline compile")
        assert s["target"] == "sm_90" and s["ptxas_gpu_name"] == "sm_90a"
        assert s["triton"] == triton.__version__
        assert s["status"] == "ok"
        text = (folder / "summary.txt").read_text()
        assert "OFFLINE compile for sm_90" in text
        assert {"kernel.ttgir", "kernel.ptx"} <= {p.name for p in folder.iterdir()}


def test_v0_baseline_layout_is_the_articles(inspected):
    """Round 0 Step 6: 16x16 tiles with 4 warps put the warps side by side along the key axis,
    mma.sync, and P makes a trip through shared memory inside the loop."""
    _, s = inspected["v0"]
    (mma,) = s["ttgir"]["mma_layouts"]
    assert mma["versionMajor"] == 2 and mma["warpsPerCTA"] == [1, 4] and mma["instrShape"] == [16, 8]
    assert s["ttgir"]["local_alloc_in_loop"] is True
    (loop,) = s["ttgir"]["loops"]
    assert len(loop["local_alloc"]) == 1 and "tensor<16x16xbf16, #mma>" in loop["local_alloc"][0]
    assert [b["shape"] for b in s["shared"]["pipeline_buffers"]] == [[2, 16, 64], [2, 16, 64]]
    # the article's "extra 512 bytes": formula + P's 16x16 bf16 buffer
    assert s["shared"]["formula"] == 10240
    assert s["shared"]["compiled"] == 10240 + 512 == s["shared"]["ttgir_accounted"]["bytes"]


def test_hopper_configs_use_wgmma_without_shared_memory_for_p(inspected):
    for name in ("v3", "v4", "v6"):
        _, s = inspected[name]
        (mma,) = s["ttgir"]["mma_layouts"]
        assert mma["versionMajor"] == 3 and mma["warpsPerCTA"] == [8, 1], name
        assert s["ttgir"]["dots"]["ttng.warp_group_dot"] == 4 and s["ttgir"]["dots"]["tt.dot"] == 0
        assert s["ttgir"]["local_alloc_in_loop"] is False
        # P's layout change mma -> dot operand stays in registers: a convert_layout, no local_alloc
        assert s["ttgir"]["convert_layout_in_loop"] is True
        assert all(len(lp["convert_layout"]) == 1 and "dot_op<{opIdx = 0" in lp["convert_layout"][0]["to"]
                   for lp in s["ttgir"]["loops"])
        # wgmma's pipeline keeps num_stages (3) buffers of each of K and V, not num_stages - 1
        assert {tuple(b["shape"]) for b in s["shared"]["pipeline_buffers"]} == {(3, 64, 64)}
        assert s["shared"]["compiled"] == 16384 + 2 * 3 * 8192 == s["shared"]["ttgir_accounted"]["bytes"]
        assert s["shared"]["compiled"] == s["shared"]["predicted"]


def test_exp_and_exp2_compile_to_different_ex2(inspected):
    """v3's tl.exp becomes ex2.approx.f32 (with a range check), v4's exp2 ex2.approx.ftz.f32."""
    ptx3 = (inspected["v3"][0] / "kernel.ptx").read_text()
    ptx4 = (inspected["v4"][0] / "kernel.ptx").read_text()
    assert re.search(r"\bex2\.approx\.f32\b", ptx3) and "ex2.approx.ftz.f32" not in ptx3
    assert "ex2.approx.ftz.f32" in ptx4 and not re.search(r"\bex2\.approx\.f32\b", ptx4)
    assert inspected["v3"][1]["ptx"]["ex2.approx.f32"] > 0 == inspected["v3"][1]["ptx"]["ex2.approx.ftz.f32"]
    assert inspected["v4"][1]["ptx"]["ex2.approx.ftz.f32"] > 0 == inspected["v4"][1]["ptx"]["ex2.approx.f32"]


def test_registers_from_the_cubin_and_ptxas_agree(inspected):
    """ptxas -v runs (and the summary names) the ptxas Triton's own compile ran: same_cubin_as_triton says so."""
    from fa2triton.triton_compat import get_ptxas

    for name, (_, s) in inspected.items():
        r = s["registers"]
        assert r["ptxas_v"]["ptxas"] == get_ptxas(90).path and s["ptxas_version"] == get_ptxas(90).version, name
        assert isinstance(r["n_regs"], int) and 0 < r["n_regs"] <= 255, name
        assert r["n_spills"] == 0
        assert r["ptxas_v"]["registers"] == r["n_regs"]
        assert r["ptxas_v"]["spill_stores"] == r["ptxas_v"]["spill_loads"] == 0
        assert r["ptxas_v"]["same_cubin_as_triton"] is True


def test_sass_counts(inspected):
    if not inspected["v0"][1]["sass"]["available"]:
        pytest.skip("SASS unavailable: no nvdisasm or cuobjdump")
    s0, s3, s4 = (inspected[n][1]["sass"] for n in ("v0", "v3", "v4"))
    assert s0["counts"]["HMMA"] > 0 and s0["counts"]["HGMMA"] == 0
    (loop0,) = [lp for lp in s0["loops"] if lp["innermost"]]
    # per warp and iteration: 4 HMMA for Q K^T (duplicated across warps) + 2 for P V; nine barriers (Triton 3.9: seven)
    assert loop0["counts"]["HMMA"] == 6 and loop0["counts"]["BAR.SYNC"] == (7 if triton_version() >= (3, 9) else 9)
    for s in (s3, s4):
        assert s["counts"]["HGMMA"] > 0 and s["counts"]["HMMA"] == 0 and s["counts"]["MUFU.EX2"] > 0
        # two barriers per iteration (Triton 3.9: three)
        bars = 3 if triton_version() >= (3, 9) else 2
        assert len(s["loops"]) == 2 and all(lp["counts"]["BAR.SYNC"] == bars for lp in s["loops"])
    # exp's range check (FSETP.GEU before each ex2) is gone from v4's loops
    assert all(lp["counts"].get("FSETP.GEU", 0) > 0 for lp in s3["loops"])
    assert all(lp["counts"].get("FSETP.GEU", 0) == 0 for lp in s4["loops"])


# --------------------------------------------------------------------------- pure parsers on small real excerpts

TTGIR_EXCERPT = """\
#mma = #ttg.nvidia_mma<{versionMajor = 2, versionMinor = 0, warpsPerCTA = [1, 4], instrShape = [16, 8]}>
#shared = #ttg.swizzled_shared<{vec = 8, perPhase = 1, maxPhase = 8, order = [1, 0]}>
#loc = loc("/k.py":58:0)
module attributes {"ttg.num-warps" = 4 : i32} {
  tt.func public @flash_fwd_kernel() attributes {noinline = false} {
    %Q_i_52 = ttg.local_alloc %Q_i_51 : (tensor<16x64xbf16, #blocked>) -> !ttg.memdesc<16x64xbf16, #shared, #smem> loc(#loc92)
    %K_j_56 = ttg.local_alloc : () -> !ttg.memdesc<2x16x64xbf16, #shared, #smem, mutable> loc(#loc120)
    %V_block_ptr_105:10 = scf.for %V_block_ptr_110 = %c0_i32 to %N_KEYS step %c16_i32 iter_args(%O_acc = %cst_1) -> (tensor<16x64xf32, #mma>)  : i32 {
      %m_new = "tt.reduce"(%S_ij_134) <{axis = 1 : i32}> ({
      ^bb0(%m_new_178: f32 loc(callsite(#loc1 at #loc145)), %m_new_179: f32 loc(callsite(#loc1 at #loc145))):
        %m_new_180 = arith.maxnumf %m_new_178, %m_new_179 : f32 loc(#loc167)
        tt.reduce.return %m_new_180 : f32 loc(#loc158)
      }) : (tensor<16x16xf32, #mma>) -> tensor<16xf32, #ttg.slice<{dim = 1, parent = #mma}>> loc(#loc144)
      %P_ij_146 = ttg.local_alloc %P_ij_145 : (tensor<16x16xbf16, #mma>) -> !ttg.memdesc<16x16xbf16, #shared1, #smem> loc(#loc140)
      scf.yield %O_acc_149 : tensor<16x64xf32, #mma> loc(#loc154)
    } loc(#loc154)
    %7 = ttg.convert_layout %0 : tensor<16x64xbf16, #mma> -> tensor<16x64xbf16, #blocked> loc(#loc55)
    tt.return loc(#loc57)
  } loc(#loc)
} loc(#loc)
"""

SASS_EXCERPT = """\
        /*0cb0*/                   MOV R2, R3 ;
.L_x_1:
        /*0cc0*/                   DEPBAR.LE SB0, 0x2 ;
        /*0cd0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0d70*/                   HMMA.16816.F32.BF16 R24, R24, R8, RZ ;
        /*0f00*/                   SHFL.BFLY PT, R23, R20, 0x2, 0x1f ;
        /*1140*/                   MUFU.EX2 R24, R9 ;
        /*1150*/                   MUFU.RCP R24, R9 ;
        /*18b0*/              @!P6 BRA `(.L_x_1) ;
        /*2360*/                   EXIT ;
.L_x_2:
        /*2370*/                   BRA `(.L_x_2);
"""


def test_ttgir_parsers_on_an_excerpt():
    (mma,) = ir.mma_layouts(TTGIR_EXCERPT)
    assert mma == {"versionMajor": 2, "versionMinor": 0, "warpsPerCTA": [1, 4], "instrShape": [16, 8],
                   "alias": "#mma", "instruction": ir.MMA_INSTRUCTION[2]}
    (loop,) = ir.for_loops(TTGIR_EXCERPT)
    assert loop["depth"] == 0 and loop["body"][-1].strip().startswith("scf.yield")
    allocs = ir.local_allocs(TTGIR_EXCERPT)
    assert [(a["shape"], a["mutable"], a["in_loop"], a["bytes"]) for a in allocs] == [
        ([16, 64], False, False, 2048), ([2, 16, 64], True, False, 4096), ([16, 16], False, True, 512)]
    s = ir.summarize_ttgir(TTGIR_EXCERPT)
    assert s["local_alloc_in_loop"] and not s["convert_layout_in_loop"]  # the convert_layout is after the loop
    assert ir.shared_accounted(TTGIR_EXCERPT)["bytes"] == 2048 + 4096 + 512


def test_sass_parsers_on_an_excerpt():
    counts = ir.sass_opcode_counts(SASS_EXCERPT)
    assert counts["total"] == 10 and counts["MUFU.EX2"] == 1 and counts["BAR.SYNC"] == 1 and counts["HMMA"] == 1
    (loop,) = ir.sass_loops(SASS_EXCERPT)  # BRA to itself after EXIT is not a loop
    assert (loop["start"], loop["end"], loop["instructions"]) == ("0x0cc0", "0x18b0", 7)
    assert loop["counts"] == {"HMMA": 1, "MUFU.EX2": 1, "BAR.SYNC": 1, "SHFL": 1}


def test_tool_log_parsers():
    log = ("ptxas info    : Compiling entry function 'flash_fwd_kernel' for 'sm_90a'\n"
           "ptxas info    : Function properties for flash_fwd_kernel\n"
           "    0 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
           "ptxas info    : Used 56 registers, used 1 barriers\n")
    assert ir.ptxas_usage(log) == {"registers": 56, "barriers": 1, "stack_frame": 0, "spill_stores": 8,
                                   "spill_loads": 12}
    res = ("Resource usage:\n Common:\n  GLOBAL:11 CONSTANT[4]:8\n Function flash_fwd_kernel:\n"
           "  REG:56 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:632 TEXTURE:0 SURFACE:0 SAMPLER:0\n")
    assert ir.cuobjdump_resource_usage(res) == {"REG": 56, "STACK": 0, "SHARED": 1024, "LOCAL": 0}
    ptx = "\tex2.approx.ftz.f32 \t%r1, %r2;\n\tex2.approx.f32 %r3, %r4;\n\t@%p1 ex2.approx.f32 %r5, %r6;\n"
    c = ir.ptx_counts(ptx)
    assert c["ex2.approx.ftz.f32"] == 1 and c["ex2.approx.f32"] == 2


def test_folder_names():
    from fa2triton.budget import Config
    from profiling.inspect_kernel import folder_name

    assert folder_name("v1_tiles", Config(64, 32, 4, 3), False, 64, "bf16") == "v1_tiles_64x32_w4_s3"
    assert folder_name("v4_exp2", Config(128, 64, 8, 3), True, 128, "fp32") == "v4_exp2_128x64_w8_s3_causal_fp32_D128"


# --------------------------------------------------------------------------- drivers: --dry-run without CUDA

def _driver(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, f"profiling/{script}", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=_env(CUDA_VISIBLE_DEVICES=""))


def test_profile_driver_dry_run():
    p = _driver("profile_driver.py", "fa2triton/kernels/v5_final", "--config", "64,64,4,3", "--causal", "1", "--dry-run")
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "v5_final: autotuner configs = [64x64, 4w, 3s]" in out
    assert "3 x [v5_final N=4096 causal=1, sdpa N=4096 causal=1]" in out
    assert "--capture-range=cudaProfilerApi" in out and "--profile-from-start off" in out
    assert "--config 64,64,4,3" in out and out.rstrip().endswith("dry run: nothing launched")


def test_compare_driver_dry_run():
    p = _driver("compare_driver.py", "--kernels", "v0_baseline,v4_exp2", "--iters", "2", "--sdpa", "0",
                "--N", "1024", "--dry-run")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 x [v0_baseline N=1024 causal=0, v4_exp2 N=1024 causal=0]" in p.stdout
    assert "v0_baseline: its own configuration; launches 16x16, 4w, 3s" in p.stdout
    assert "sdpa N=" not in p.stdout.split("profile it with")[0]


def test_profile_driver_gluon_ranges():
    """--gluon adds one NVTX range per Gluon configuration, between the versions and SDPA, and names an
    unknown label with the known ones."""
    p = _driver("profile_driver.py", "--kernel", "v7_hopper", "--gluon", "ws3x64x128/4s/preg/pp/split/persist/ua", "--dry-run")
    assert p.returncode == 0, p.stdout + p.stderr
    assert ("[v7_hopper N=4096 causal=0, gluon:ws3x64x128/4s/preg/pp/split/persist/ua N=4096 causal=0, sdpa N=4096 causal=0]"
            in p.stdout)
    assert "--gluon ws3x64x128/4s/preg/pp/split/persist/ua" in p.stdout
    bad = _driver("profile_driver.py", "--kernel", "v7_hopper", "--gluon", "ws9x64", "--dry-run")
    assert bad.returncode != 0 and "unknown configuration(s) ws9x64" in bad.stderr + bad.stdout


def test_driver_refuses_without_a_gpu():
    p = _driver("profile_driver.py", "--kernel", "v1_tiles", "--warmup-s", "0")
    assert p.returncode == 2 and "no CUDA GPU visible" in p.stdout


def test_profile_at_another_head_dimension_dry_run():
    """--D 128 reaches the driver (its inputs and plan) and the results' file name; the harness's 64 changes neither."""
    wide = _driver("run_profile.py", "--tool", "ncu", "--kernel", "v7_hopper", "--N", "2048", "--D", "128", "--dry-run")
    plain = _driver("run_profile.py", "--tool", "ncu", "--kernel", "v7_hopper", "--N", "2048", "--dry-run")
    assert wide.returncode == 0 and plain.returncode == 0, wide.stderr + plain.stderr
    assert "v7_hopper_N2048_noncausal_D128.ncu-rep" in wide.stdout and "--D 128" in wide.stdout
    assert "v7_hopper_N2048_noncausal.ncu-rep" in plain.stdout and "--D" not in plain.stdout
    p = _driver("profile_driver.py", "--kernel", "v7_hopper", "--N", "2048", "--D", "128", "--dry-run")
    assert p.returncode == 0 and "N=2048 D=128 bf16" in p.stdout and "--D 128" in p.stdout, p.stdout + p.stderr
    bad = _driver("run_profile.py", "--tool", "ncu", "--kernel", "v7_hopper", "--D", "48", "--dry-run")
    assert bad.returncode != 0 and "invalid choice: 48" in bad.stderr


def test_run_profile_source_dry_run():
    """--source adds the source-page export (per-instruction SASS counters) after the raw one; without it there is
    none."""
    args = ("--tool", "ncu", "--kernel", "v7_hopper", "--N", "2048", "--dry-run")
    plain, source = _driver("run_profile.py", *args), _driver("run_profile.py", *args, "--source")
    assert plain.returncode == 0 and source.returncode == 0, plain.stderr + source.stderr
    assert "--page source" not in plain.stdout and "--page raw" in plain.stdout
    assert "--page source --print-source sass" in source.stdout and source.stdout.rstrip().endswith("> SOURCE.csv")


def test_version_sass_counts_mufu_issued_right_after_a_mufu():
    """The "MUFU pairs" count: a MUFU directly after a MUFU in address order (three in a row are two pairs)."""
    from profiling.version_sass import _opcode_counts

    ops = ["MUFU.EX2", "MUFU.EX2", "FADD", "MUFU.EX2", "FFMA", "MUFU.RCP", "MUFU.EX2", "MUFU.EX2", "HGMMA.64x64x16"]
    assert _opcode_counts([{"op": op} for op in ops])["MUFU pairs"] == 3
    assert _opcode_counts([{"op": op} for op in ("FADD", "MUFU.EX2", "FADD")])["MUFU pairs"] == 0
