"""Issue 6, v7 feasibility: which Hopper features Triton 3.6 compiles for a FlashAttention forward.

    python experiments/v7_feasibility.py [--check] [--only NAME,...] [--configs Q,K,W,S;...] [--causal 0,1]
                                         [--out results/offline-sm_90/v7_feasibility]

The variants: one FlashAttention-2 forward with compile-time switches (experiments/feasibility_tl.py), each differing
from the pointer reference by one feature, beside v6's own kernel (v6_reference), v7_hopper's (v7_hopper_pipelined,
v7_hopper_plain), and a minimal Gluon forward whose wgmma waits are placed by hand (gluon_*,
experiments/feasibility_gluon.py).

Each row is compiled OFFLINE for sm_90 (GPUTarget("cuda", 90, 32); no GPU) in a child process, so the compiler's
own error text is captured, and read from its TTGIR and SASS: TMA loads, HGMMA, LDGSTS, BAR.SYNC, SYNCS and wgmma
waits per iteration of the first key loop, MUFU.EX2 issued while a wgmma is in flight, registers, spills, shared and
scratch bytes, ptxas's notes. --check also runs each tl variant under the interpreter on ragged shapes against a
float64 reference. Nothing here measures speed. Findings: feasibility.md beside the CSV.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import triton  # noqa: E402

from experiments.feasibility_gluon import GLUON_VARIANTS, compile_gluon_variant  # noqa: E402
from experiments.feasibility_tl import VARIANTS, compile_variant  # noqa: E402


# --------------------------------------------------------------------------- summaries

def ex2_while_wgmma_pending(sass: str, loop: dict) -> int:
    """MUFU.EX2 of one loop iteration issued while a warpgroup MMA is in flight: after an HGMMA and
    before the `WARPGROUP.DEPBAR.LE gsb0, 0x0` that retires it (a wait for N >= 1 groups leaves it in
    flight). The loop is walked twice, so an MMA left running across the back edge counts too. This is
    the softmax work that can overlap a matrix product, whoever scheduled it there (Triton or ptxas)."""
    from profiling import ir

    start, end = int(loop["start"], 16), int(loop["end"], 16)
    body = [i for i in ir.sass_instructions(sass) if start <= i["addr"] <= end]
    inflight, n = False, 0
    for lap in (0, 1):
        for i in body:
            if i["op"].startswith("HGMMA"):
                inflight = True
            elif i["op"].startswith("WARPGROUP.DEPBAR") and i["args"].replace(" ", "").endswith(",0x0"):
                inflight = False
            elif lap and inflight and i["op"] == "MUFU.EX2":
                n += 1
    return n


def wgmma_waits(ttgir: str) -> list[int]:
    """The `pendings` of every ttng.warp_group_dot_wait in the TTGIR."""
    return [int(m) for m in re.findall(r"ttng\.warp_group_dot_wait[^\n]*?pendings\s*=\s*(\d+)", ttgir)]


def ptxas_warnings(ptx: str) -> str:
    """ptxas's 'Potential Performance Loss' notes (C7515: wgmma serialized, and the like), run with
    the flags Triton uses for sm_90a."""
    import subprocess
    import tempfile

    from fa2lab.compile_offline import tool_path

    exe = tool_path("ptxas", 90)
    if not exe:
        return "ptxas unavailable"
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        p = subprocess.run([exe, "-lineinfo", "-v", "--gpu-name=sm_90a", str(src), "-o", str(Path(d) / "k.cubin")],
                           capture_output=True, text=True, timeout=120)
    notes = [ln.split("ptxas info    :")[-1].strip() for ln in (p.stdout + p.stderr).splitlines()
             if "Performance Loss" in ln]
    return " | ".join(notes)


def summarise(compiled) -> dict:
    from profiling import ir
    from profiling.inspect_kernel import disassemble, ptxas_verbose, resource_usage

    ttgir, ptx, cubin = compiled.asm["ttgir"], compiled.asm["ptx"], compiled.asm["cubin"]
    sass, _ = disassemble(cubin)
    res = resource_usage(cubin)
    ptxas = ptxas_verbose(ptx, 90, bool(compiled.metadata.enable_fp_fusion), cubin)
    loops = ir.sass_loops(sass) if sass else []
    inner = [lp for lp in loops if lp["innermost"]]
    tg = ir.summarize_ttgir(ttgir)
    kernel_counts = ir.sass_opcode_counts(sass) if sass else {}
    ops = ir.op_counts(ir.strip_locations(ttgir).splitlines())
    # the key loop that runs most at N = 4096: the first innermost SASS loop (address order) with HGMMA
    # (HMMA for mma.sync configurations), i.e. the unmasked loop (the spin loops of mbarrier try-waits are
    # innermost too, but hold neither)
    hot = next((lp for lp in inner if lp["counts"].get("HGMMA", 0)), None) or \
        next((lp for lp in inner if lp["counts"].get("HMMA", 0)), None)   # fewer than 4 warps: mma.sync
    hc = hot["counts"] if hot else {}
    overlap = ex2_while_wgmma_pending(sass, hot) if (hot and sass) else None
    return {
        "registers": res.get("REG"), "spill_bytes": res.get("LOCAL", 0),
        "ptxas_registers": ptxas.get("registers"), "ptxas_spill_stores": ptxas.get("spill_stores"),
        "ptxas_spill_loads": ptxas.get("spill_loads"), "stack_bytes": res.get("STACK"),
        "shared_bytes": int(compiled.metadata.shared),
        "ptxas_perf_warnings": ptxas_warnings(ptx),
        "global_scratch_bytes": int(getattr(compiled.metadata, "global_scratch_size", 0) or 0),
        "num_warps_total": int(compiled.metadata.num_warps),
        "mma": ",".join(m["instruction"].split(" ")[0] for m in tg["mma_layouts"]),
        "warp_specialize_ops": ops.get("ttg.warp_specialize", 0),
        "ttgir_tma_loads": ops.get("ttng.async_tma_copy_global_to_local", 0),
        "ttgir_cp_async": ops.get("ttg.async_copy_global_to_local", 0),
        "wgmma_wait_pendings": "/".join(map(str, wgmma_waits(ttgir))),
        "sass_loops": len(loops), "sass_inner_loops": len(inner),
        "loop_instructions": hot["instructions"] if hot else None,
        "loop_ex2_while_wgmma_inflight": overlap,
        **{f"loop_{k}": hc.get(k, 0) for k in ("HGMMA", "HMMA", "UTMALDG", "UBLKCP", "LDGSTS", "BAR.SYNC", "SYNCS",
                                               "WARPGROUP.DEPBAR", "WARPGROUP.ARRIVE", "MUFU.EX2")},
        **{f"kernel_{k}": kernel_counts.get(k, 0) for k in ("HGMMA", "UTMALDG", "UBLKCP", "LDGSTS", "BAR.SYNC",
                                                            "SYNCS", "LDL", "STL")},
        "all_loops": loops,
    }


CSV_FIELDS = ["variant", "feature", "config", "causal", "compiles", "error", "interpreter_check",
              "registers", "spill_bytes", "ptxas_spill_stores", "ptxas_spill_loads", "stack_bytes",
              "ptxas_perf_warnings", "shared_bytes", "global_scratch_bytes",
              "num_warps_total", "mma", "warp_specialize_ops", "ttgir_tma_loads", "ttgir_cp_async",
              "wgmma_wait_pendings", "sass_loops", "sass_inner_loops", "loop_instructions",
              "loop_ex2_while_wgmma_inflight", "loop_HGMMA", "loop_HMMA", "loop_UTMALDG", "loop_UBLKCP", "loop_LDGSTS",
              "loop_BAR.SYNC", "loop_SYNCS", "loop_WARPGROUP.DEPBAR", "loop_WARPGROUP.ARRIVE", "loop_MUFU.EX2",
              "kernel_HGMMA", "kernel_UTMALDG", "kernel_UBLKCP", "kernel_LDGSTS", "kernel_BAR.SYNC", "kernel_SYNCS",
              "kernel_LDL", "kernel_STL", "triton", "ptxas", "git_commit", "date"]


# --------------------------------------------------------------------------- interpreter check

def interpreter_check(name: str) -> str:
    """Run the variant under the interpreter (a child process: TRITON_INTERPRET must precede the import)
    on ragged shapes, against the float64 reference. Returns 'ok', 'wrong: ...' or 'error: ...'."""
    import subprocess

    code = f"""
import os, sys, torch, math
os.environ['TRITON_INTERPRET'] = '1'
sys.path.insert(0, {str(REPO)!r})
from fa2triton.interpret import patch_interpreter
patch_interpreter()
from experiments import feasibility_tl as f
from fa2triton.reference import attention, relative_error
sw, _ = f.VARIANTS[{name!r}]
worst = 0.0
for (B, nq, nk, causal) in [(2, 96, 80, False), (2, 80, 80, True), (1, 130, 130, True)]:
    g = torch.Generator().manual_seed(nq + nk)
    Q, K, V = (torch.randn(B, n, 32, generator=g).to(torch.bfloat16) for n in (nq, nk, nk))
    O = torch.empty_like(Q); L = torch.empty(B, nq)
    args = f.tensors_to_args(sw, Q, K, V, O, L, 32, 16)
    grid = (3,) if sw['PERSISTENT'] else (B, math.ceil(nq / 32))
    f.fa_fwd_variant[grid](*args, D=32, Q_TILE=32, K_TILE=16, CAUSAL=causal, NUM_PROGRAMS=3, **sw)
    ref_O, ref_L = attention(Q, K, V, causal)
    worst = max(worst, relative_error(O, ref_O), (L.double() - ref_L).abs().max().item())
print('RESULT', worst)
"""
    env = {k: v for k, v in os.environ.items()}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    m = re.search(r"RESULT (\S+)", p.stdout)
    if not m:
        return "error: " + (p.stderr.strip().splitlines() or ["?"])[-1][:200]
    worst = float(m.group(1))
    return "ok" if worst < 2e-2 else f"wrong: max error {worst:.3g}"


# --------------------------------------------------------------------------- main

def compile_v6_reference(q_tile, k_tile, num_warps, num_stages, causal, N=4096, D=64, BH=32):
    """v6_longest_first's own kernel, compiled the same way: the reference the variants differ from."""
    import torch

    from fa2lab.compile_offline import compile_for_target
    from fa2lab.switches import load

    st3 = (N * D, D, 1)
    args = (torch.bfloat16,) * 4 + (torch.float32,) + st3 * 4 + (N, 1, N, N, 0, 1.0 / math.sqrt(D))
    return compile_for_target(load("v6_longest_first").flash_fwd_kernel, args, arch=90, num_warps=num_warps,
                              num_stages=num_stages, D=D, Q_TILE_SIZE=q_tile, K_TILE_SIZE=k_tile,
                              is_causal=causal, HAS_WINDOW=False, HEAD_MAJOR=True, REVERSE=True, P_CAST=0)


def compile_v7(q_tile, k_tile, num_warps, num_stages, causal, pipeline_qk, N=4096, D=64, BH=32):
    """v7_hopper's own TMA kernel, through the arguments it gives profiling/inspect_kernel.py."""
    from fa2triton.budget import Config
    from fa2lab.compile_offline import compile_for_target
    from fa2lab.switches import load

    module = load("v7_hopper")
    args, extra = module.offline_compile_args(N, D, "bf16", BH, Config(q_tile, k_tile, num_warps, num_stages), causal,
                                              pipeline_qk=pipeline_qk)
    return compile_for_target(module.flash_fwd_kernel, args, arch=90, num_warps=num_warps, num_stages=num_stages,
                              D=D, Q_TILE_SIZE=q_tile, K_TILE_SIZE=k_tile, is_causal=causal, **extra)


V7_ROWS = {"v7_hopper_pipelined": 1, "v7_hopper_plain": 0}


def child(name: str, config: str, causal: int) -> int:
    """Compile one (variant, configuration, mask) and print its summary as JSON (run in a child process,
    so that a compiler abort or an MLIR error written to stderr is captured by the parent)."""
    q, k, w, st = (int(x) for x in config.split(","))
    if name == "v6_reference":
        compiled = compile_v6_reference(q, k, w, st, bool(causal))
    elif name in GLUON_VARIANTS:
        compiled = compile_gluon_variant(name, q, k, w, st, bool(causal))
    elif name in V7_ROWS:
        compiled = compile_v7(q, k, w, st, bool(causal), V7_ROWS[name])
    else:
        compiled = compile_variant(name, q, k, w, st, bool(causal))
    print("JSON" + json.dumps(summarise(compiled), default=str))
    return 0


ERROR_MARKERS = ("error", "unreachable", "assertion", "unsupported", "failed", "not supported")


def compile_in_child(name: str, config: str, causal: int) -> tuple[dict | None, str]:
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, __file__, "--child", name, config, str(causal)], capture_output=True,
                       text=True, env=env, timeout=600, cwd=REPO)
    for ln in p.stdout.splitlines():
        if ln.startswith("JSON"):
            return json.loads(ln[4:]), ""
    # the compiler's own words: MLIR diagnostics, LLVM UNREACHABLE/assertion lines, the Python exception
    lines = [ln.strip() for ln in p.stderr.splitlines()
             if any(m in ln.lower() for m in ERROR_MARKERS) and not ln.startswith(("  ", "\t"))]
    lines = [ln.replace(str(REPO) + "/", "") for ln in lines]
    if p.returncode < 0:
        lines.append(f"(child killed by signal {-p.returncode})")
    return None, " | ".join(dict.fromkeys(lines))[:1500] or p.stderr[-800:]


DEFAULT_PLAN = [
    # (variant, configurations)
    ("v6_reference", "128,64,8,3;128,64,8,4;64,64,4,3;128,128,4,3"),
    ("pointers", "128,64,8,3;128,64,8,4;64,64,4,3"),
    ("host_desc_2d", "128,64,8,3"),
    ("host_desc_3d", "128,64,8,3;128,64,8,4;64,64,4,3;128,128,8,2;128,128,4,3"),
    ("device_desc", "128,64,8,3"),
    ("desc3d_loop_stages", "128,64,8,3"),
    ("desc3d_warp_spec", "128,64,8,3;128,64,4,3;64,64,4,3"),
    ("pointers_warp_spec", "128,64,8,3;128,64,4,3;64,64,4,3"),
    ("desc3d_persistent", "128,64,8,3;64,64,4,3"),
    ("desc3d_persistent_warp_spec", "128,64,8,3;64,64,4,3"),
    ("desc3d_pipeline_qk", "128,64,8,3;128,64,8,4;64,64,4,3;64,64,4,2;128,128,8,2"),
    ("pointers_pipeline_qk", "128,64,8,3;64,64,4,3"),
    ("v7_hopper_pipelined", "128,64,8,4;64,64,4,3"),
    ("v7_hopper_plain", "128,64,8,4;64,64,4,3"),
    ("gluon_serial", "128,64,8,1"),
    ("gluon_overlap_p_regs", "128,64,8,1"),
    ("gluon_overlap_p_smem", "128,64,8,1"),
]
GLUON_NOT_INTERPRETED = ("n/a: Gluon kernels are not interpreted (under TRITON_INTERPRET=1 the launch still asks "
                         "for the CUDA driver: RuntimeError: 0 active drivers ([]). There should only be one.)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated variant names (default: the plan, all)")
    ap.add_argument("--configs", default="",
                    help="semicolon-separated Q,K,WARPS,STAGES (default: each variant's configurations in the plan)")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--check", action="store_true", help="also run each variant under the interpreter")
    ap.add_argument("--out", default=str(REPO / "results" / "offline-sm_90" / "v7_feasibility"))
    ap.add_argument("--v7-candidates", action="store_true",
                    help="instead of the plan: v7_hopper's own kernel for every sm_90 candidate of its configs.json "
                         "(both PIPELINE_QK values, both masks), into v7_candidates.csv")
    ap.add_argument("--child", nargs=3, metavar=("VARIANT", "CONFIG", "CAUSAL"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    os.environ.pop("TRITON_INTERPRET", None)
    if args.child:
        return child(args.child[0], args.child[1], int(args.child[2]))

    from fa2lab.provenance import environment, now
    from profiling.inspect_kernel import _tool_version

    only = [n for n in args.only.split(",") if n]
    plan = [(n, args.configs or c) for n, c in DEFAULT_PLAN if not only or n in only]
    csv_name = "feasibility.csv"
    if args.v7_candidates:
        from fa2triton.configs import load_table
        from fa2triton.versions import get

        table = load_table(get("v7_hopper").folder / "configs.json")
        configs = ";".join(",".join(map(str, c)) for c in table["arches"]["sm_90"]["configs"])
        plan, csv_name = [(n, configs) for n in V7_ROWS], "v7_candidates.csv"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment()
    rows, details = [], {}
    for name, configs in plan:
        if name == "v6_reference":
            feature, check = "reference: v6_longest_first's own kernel", ""
        elif name in V7_ROWS:
            feature = (f"v7_hopper's own kernel, PIPELINE_QK={V7_ROWS[name]} "
                       "(interpreter: tests/test_v7.py and the harness)")
            check = ""
        elif name in GLUON_VARIANTS:
            feature, check = GLUON_VARIANTS[name][1], GLUON_NOT_INTERPRETED if args.check else ""
        else:
            feature, check = VARIANTS[name][1], interpreter_check(name) if args.check else ""
        masks = [int(c) for c in args.causal.split(",")]
        if name in GLUON_VARIANTS:
            masks = [m for m in masks if m == 0]   # written non-causal only
        for config in (c for c in configs.split(";") if c):
            for causal in masks:
                row = {"variant": name, "feature": feature, "config": config, "causal": causal,
                       "interpreter_check": check, "triton": triton.__version__, "ptxas": _tool_version("ptxas", 90),
                       "git_commit": env.get("git_commit"), "date": now()}
                summ, error = compile_in_child(name, config, causal)
                if summ is not None:
                    details[f"{name} {config} causal={causal}"] = summ.pop("all_loops")
                    row.update(compiles="yes", error="", **summ)
                else:
                    row.update(compiles="no", error=error)
                rows.append(row)
                print(f"{name:28s} {config:12s} c={causal} {row['compiles']:3s} "
                      f"loop HGMMA/UTMALDG/LDGSTS/BAR/SYNCS/DEPBAR = {row.get('loop_HGMMA')}/"
                      f"{row.get('loop_UTMALDG')}/{row.get('loop_LDGSTS')}/{row.get('loop_BAR.SYNC')}/"
                      f"{row.get('loop_SYNCS')}/{row.get('loop_WARPGROUP.DEPBAR')} "
                      f"waits={row.get('wgmma_wait_pendings')} "
                      f"ex2-overlap={row.get('loop_ex2_while_wgmma_inflight')} "
                      f"ws={row.get('warp_specialize_ops')} regs={row.get('registers')} smem={row.get('shared_bytes')} "
                      f"{row.get('ptxas_perf_warnings', '')[:40]} {check} {row['error'][:300]}", flush=True)
    path = out / csv_name
    with path.open("w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        wr.writeheader()
        wr.writerows(rows)
    loops_path = out / csv_name.replace(".csv", "_sass_loops.json").replace("feasibility_", "")
    loops_path.write_text(json.dumps(details, indent=1, default=str) + "\n")
    print(f"wrote {path} and {loops_path.name}")
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
