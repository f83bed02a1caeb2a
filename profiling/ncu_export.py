"""From Nsight Compute's raw CSV export (`ncu --import R --csv --page raw`) to the numbers the
article reads, one row per profiled kernel, beside the algorithm's predictions.

The raw page has one header row of metric names, one row of units, then one row per kernel
launch. Metric names differ between architectures and Nsight Compute versions, so columns are
picked by pattern and every match is kept under its own name; the derived columns say what
they were computed from.
"""

from __future__ import annotations

import csv
import math
import re
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fa2lab import shapes  # noqa: E402

# Patterns of the metrics the article reads (duration, tensor work and peak, instructions,
# registers, shared memory, occupancy, L2 -> SM bytes, DRAM bytes, stalls).
PATTERNS = [
    r"^gpu__time_duration\.sum$",
    r"^launch__registers_per_thread$",
    r"^launch__shared_mem_per_block_(static|dynamic)$",
    r"^launch__grid_size$",
    r"^launch__block_size$",
    r"^sm__maximum_warps_per_active_cycle_pct$",          # theoretical occupancy
    r"^sm__warps_active\.avg\.pct_of_peak_sustained_active$",  # achieved occupancy
    r"^smsp__inst_executed\.sum$",
    r"^sm__inst_executed_pipe_tensor.*\.sum$",
    r"^sm__pipe_tensor.*pct_of_peak_sustained_active$",
    r"^sm__ops_path_tensor.*\.sum$",
    r"^sm__.*tensor.*op.*\.sum(\.per_second)?$",
    r"^l1tex__m_xbar2l1tex_read_bytes\.sum$",             # bytes from L2 into the SMs
    r"^lts__t_bytes\.sum$",
    r"^dram__bytes_read\.sum$",
    r"^dram__bytes_write\.sum$",
    r"^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$",
    r"^sm__cycles_elapsed\.avg\.per_second$",             # the SM clock during the kernel
    # the roofline's ceilings, where the export has them
    r"^(dram|lts)__bytes\.sum\.peak_sustained$",
    r"^lts__t_bytes\.sum\.peak_sustained$",
    r"^(dram|lts)__cycles_elapsed\.avg\.per_second$",
    r"^derived__lts__lts2xbar_bytes\.sum\.peak_sustained$",   # L2's peak, as ncu's own roofline draws it
    r"^derived__l1tex__lsu_writeback_bytes_mem_lgds\.sum(\.peak_sustained|\.per_second)?$",   # L1's, and achieved
    r"^l1tex__cycles_elapsed\.avg\.per_second$",
    r"^device__attribute_(multiprocessor_count|compute_capability_major|compute_capability_minor)$",
]


def read_raw(path: str | Path) -> tuple[list[str], dict[str, str], list[dict[str, str]]]:
    """Header, units and kernel rows of a raw export. Raises ValueError naming the file if malformed."""
    path = Path(path)
    with path.open(newline="") as f:
        lines = [line for line in f if not line.startswith("==")]   # ncu's own log lines
    rows = list(csv.reader(lines))
    if len(rows) < 3 or "Kernel Name" not in rows[0]:
        raise ValueError(f"{path} is not an ncu raw CSV export (no 'Kernel Name' header, or no kernel rows)")
    header, units = rows[0], dict(zip(rows[0], rows[1]))
    return header, units, [dict(zip(header, r)) for r in rows[2:] if len(r) == len(header)]


SAMPLES = "Warp Stall Sampling (All Samples)"   # the source page's sampled warp states per instruction


def read_source(path: str | Path) -> dict[str, list[dict[str, str]]]:
    """The source page (`ncu --import R --csv --page source --print-source sass`, run_profile.py --source): for each
    profiled kernel, in the order ncu wrote them, one row per SASS instruction (Address, Source, executions, the
    sampled stalls by reason). Each kernel's block opens with a "Kernel Name" line and a header line. Raises
    ValueError naming the file if there is no such block."""
    path = Path(path)
    kernels: dict[str, list[dict[str, str]]] = {}
    name = header = None
    with path.open(newline="") as f:
        for row in csv.reader(line for line in f if not line.startswith("==")):
            if not row:
                continue
            if row[0] == "Kernel Name":
                name, header = row[1], None
                kernels[name] = []
            elif name is not None and header is None:
                header = row
            elif name is not None:
                kernels[name].append(dict(zip(header, row)))
    if not kernels or not all(kernels.values()) or SAMPLES not in next(iter(kernels.values()))[0]:
        raise ValueError(f"{path} is not an ncu source-page CSV export with stall samples")
    return kernels


def opcode(sass: str) -> str:
    """An instruction's opcode with its modifiers, without its predicate: '@!P6 BRA 0x7f..' -> 'BRA'."""
    return re.sub(r"^@!?U?P\w+\s+", "", sass.strip()).split(" ")[0]


# What an opcode is doing in an attention kernel, for the source page's samples by phase (first match wins)
PHASES = (("exp2 (MUFU)", r"^MUFU\.EX2"), ("softmax arithmetic", r"^(FMNMX|FADD|FFMA|FMUL|F2FP|FSEL|SHFL)"),
          ("wgmma wait", r"^WARPGROUP\.DEPBAR"), ("wgmma issue", r"^(HGMMA|WARPGROUP\.ARRIVE)"),
          ("mbarrier", r"^SYNCS"), ("branch (mbarrier retries)", r"^BRA"), ("bar.sync", r"^BAR"),
          ("idle (NOP)", r"^NOP"))


def phase(op: str) -> str:
    """The PHASES group of an opcode, or 'other'."""
    return next((name for name, pattern in PHASES if re.match(pattern, op)), "other")


def stall_profile(rows: list[dict[str, str]]) -> dict:
    """One kernel's source rows summed: instructions, executed instructions, sampled warp states, and the share of
    those samples by stall reason (stall_* columns, issued or not), by opcode and by phase (PHASES), largest first."""
    total = sum(_num(r.get(SAMPLES, "")) or 0.0 for r in rows)
    reasons: dict[str, float] = {}
    opcodes: dict[str, float] = {}
    phases: dict[str, float] = {}
    for r in rows:
        for k, v in r.items():
            if k.startswith("stall_") and "Not Issued" not in k:
                reasons[k[len("stall_"):]] = reasons.get(k[len("stall_"):], 0.0) + (_num(v) or 0.0)
        op, samples = opcode(r.get("Source", "")), _num(r.get(SAMPLES, "")) or 0.0
        group = phase(op)
        opcodes[op] = opcodes.get(op, 0.0) + samples
        phases[group] = phases.get(group, 0.0) + samples
    share = (lambda d: dict(sorted(((k, v / total) for k, v in d.items() if v), key=lambda kv: -kv[1]))
             if total else {})
    return {"instructions": len(rows), "executed": sum(_num(r.get("Instructions Executed", "")) or 0.0 for r in rows),
            "samples": total, "reasons": share(reasons), "opcodes": share(opcodes), "phases": share(phases)}


def _num(text: str) -> float | None:
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return None


# The backward's kernels (profiling --mode bwd names each '<version>:bwd_<kernel>'): matrix products of
# size N x N x D each does, over the forward's two (so the forward's count times this / 2). dK/dV
# recomputes S^T and does dV, dP^T and dK (4); with atomics also dQ (5), as do the Gluon dK/dV kernels (v7's
# default on Hopper); the dQ pass recomputes S and dP and does dQ (3); the preprocessing does none; the fused
# kernel does both passes (7). SDPA's backward
# ranges ('sdpa-bwd') hold several kernels: each row carries the whole backward's 5
# (fa2lab.shapes.BWD_FLOP_FACTOR = 2.5), to be summed per range.
BACKWARD_PRODUCTS = {"bwd_preprocess": 0, "bwd_dkdv": 4, "bwd_atomic_dkdv": 5, "bwd_dq": 3, "bwd_fused": 7,
                     "bwd_gluon_dkdv": 4, "bwd_gluon_atomic_dkdv": 5}


def backward_share(version: str) -> float:
    """predicted_flops multiplier for a kernel row: 1 for the forward, the products / 2 for a backward kernel."""
    part = version.rsplit(":", 1)[-1] if ":" in version else ""
    if part in BACKWARD_PRODUCTS:
        return BACKWARD_PRODUCTS[part] / 2
    return shapes.BWD_FLOP_FACTOR if version.endswith("-bwd") else 1.0


def summarise_raw(path, N: int, causal: bool, config: str = "", predicted_flops: float | None = None,
                  D: int = shapes.HEAD_DIM) -> list[dict]:
    """One row per kernel. predicted_flops defaults to the attention harness shape's count at N (head dimension D); the
    matmul peak table passes 2·S³. With `--print-nvtx-rename kernel` each kernel is named by the NVTX
    range it ran in ("v4_exp2 N=4096 causal=0", "matmul bf16->fp32 S=8192"): its first word after any
    'matmul' is the version (or the matmul variant)."""
    header, units, kernels = read_raw(path)
    picked = [c for c in header if any(re.search(p, c) for p in PATTERNS)]
    if predicted_flops is None:
        predicted_flops = shapes.flops(shapes.BATCH, shapes.HEADS, N, D, causal)
    out = []
    for k in kernels:
        name = k["Kernel Name"]
        words = name.split(" ")
        version = (words[1] if words[0] == "matmul" and len(words) > 2 else words[0]) if (" N=" in name or " S=" in name) else ""
        row = {"kernel": name[:120], "version": version, "ncu_id": k.get("ID", ""), "N": N, "causal": int(causal),
               "config": config, "D": D, "predicted_flops": predicted_flops * backward_share(version)}
        for c in picked:
            row[f"{c} [{units.get(c, '')}]".replace(" []", "")] = _num(k[c]) if _num(k[c]) is not None else k[c]
        stalls = {c: _num(k[c]) for c in picked if "issue_stalled" in c and _num(k[c]) is not None}
        for i, (c, v) in enumerate(sorted(stalls.items(), key=lambda kv: -kv[1])[:3]):
            reason = re.sub(r"^smsp__average_warps_issue_stalled_|_per_issue_active\.ratio$", "", c)
            row[f"stall_{i + 1}"] = f"{reason} ({v:.2f})"
        if config and "l1tex__m_xbar2l1tex_read_bytes.sum" in picked:
            q_tile = int(config.split(",")[0])
            programs = shapes.BATCH * shapes.HEADS * math.ceil(N / q_tile)
            per_program = (2 * N * D + q_tile * D) * 2   # K, V and the Q tile, bf16
            row["predicted_l2_to_sm_bytes"] = programs * per_program
        out.append(row)
    return out


def resummarise(summary_csv: str | Path) -> int:
    """Rewrite a summary CSV from the raw exports its rows name (after PATTERNS gained metrics), keeping
    every row's own provenance (run, date, environment): the numbers come from the same recorded run,
    nothing is measured. Returns the number of rows rewritten."""
    import pandas as pd

    from fa2lab.paths import REPO

    summary_csv = Path(summary_csv)
    old = pd.read_csv(summary_csv, dtype={"ncu_id": str, "config": str}, keep_default_na=False)
    own = ["run_id", "raw_export", "date", *[c for c in old.columns if not (c in _SUMMARY_KEYS or "[" in c
                                                                           or c.startswith(("stall_", "predicted_"))
                                                                           or "__" in c)]]
    own = list(dict.fromkeys(c for c in own if c in old.columns))
    rows = []
    for raw, group in old.groupby("raw_export", sort=False):
        first = group.iloc[0]
        fresh = summarise_raw(REPO / raw, N=int(first["N"]), causal=bool(int(first["causal"])),
                              config=str(first.get("config", "")),
                              D=int(first["D"]) if pd.notna(first.get("D")) else shapes.HEAD_DIM)
        by_id = {str(r["ncu_id"]): r for r in fresh}
        for _, r in group.iterrows():
            if str(r["ncu_id"]) not in by_id:
                raise ValueError(f"{summary_csv}: kernel {r['ncu_id']} is not in {raw}")
            rows.append({**by_id[str(r["ncu_id"])], **{c: r[c] for c in own}})
    tmp = summary_csv.with_suffix(".csv.tmp")
    pd.DataFrame(rows).to_csv(tmp, index=False)
    tmp.replace(summary_csv)
    return len(rows)


_SUMMARY_KEYS = ("kernel", "version", "ncu_id", "N", "causal", "config", "D")


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Re-derive ncu summary CSVs from the raw exports they name.")
    ap.add_argument("--resummarise", nargs="+", required=True, metavar="SUMMARY_CSV")
    args = ap.parse_args(argv)
    for path in args.resummarise:
        print(f"{path}: {resummarise(path)} rows re-derived from their raw exports")
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
