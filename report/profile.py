"""The profiles: Nsight Compute's rows per kernel (the final profile, the matmul peak, ncu's source page) and what
the compiler made (the first inner loop's SASS). Rows are read through figures.roofline and data.metric, so the
report and the figures read each file the same way."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from fa2lab.provenance import file_stamp
from fa2triton import versions
from figures import data, roofline
from profiling.ncu_export import read_source, stall_profile
from profiling.run_profile import MATMUL_SIZE
from report.tables import NOT_YET, ada, fmt, md_table, not_yet, numeric, optional, rel


# ---------------------------------------------------------------- Round 5: the final profile (Nsight Compute)

NCU_EXTRA = {"regs": "launch__registers_per_thread", "smem_static": "launch__shared_mem_per_block_static",
             "smem_dynamic": "launch__shared_mem_per_block_dynamic",
             "occ_theoretical": "sm__maximum_warps_per_active_cycle_pct",
             "occ_achieved": "sm__warps_active.avg.pct_of_peak_sustained_active",
             "inst": "smsp__inst_executed.sum",
             "pipe_tensor": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"}
TENSOR_OPS = re.compile(r"^(sm__ops_path_tensor_src_[a-z0-9_]+\.sum)(?: \[[^\]]*\])?$")
TENSOR_OP_KIND = re.compile(r"^(sm__ops_path_tensor_op_(hgmma|hmma)_[a-z0-9_]+\.sum)(?: \[[^\]]*\])?$")


def tensor_ops(rows: pd.DataFrame, path: Path) -> tuple[pd.Series, pd.Series]:
    """(tensor-core operations counted, per row: the sum of the sm__ops_path_tensor_src_<type>.sum metrics;
    NaN where the export has none) and the instruction family that did them ('wgmma' for hgmma, 'mma' for hmma)."""
    nan = pd.Series(np.nan, index=rows.index)
    names = sorted({m[1] for c in rows.columns if (m := TENSOR_OPS.fullmatch(str(c)))})
    total = nan
    if names:
        total = sum(data.metric(rows, path, n).fillna(0) for n in names)
        total = total.where(sum(data.metric(rows, path, n).notna() for n in names) > 0)
    kinds = {}
    for c in rows.columns:
        m = TENSOR_OP_KIND.fullmatch(str(c))
        if m:
            kinds.setdefault(m[2], set()).add(m[1])
    fam = pd.Series("", index=rows.index, dtype=object)
    for kind, label in (("hmma", "mma"), ("hgmma", "wgmma")):
        if kind in kinds:
            ops = sum(data.metric(rows, path, n).fillna(0) for n in sorted(kinds[kind]))
            fam = fam.where(ops <= 0, label)
    return total, fam


def row_peaks(rows: pd.DataFrame, path: Path, gpu, root) -> tuple[pd.Series, pd.Series]:
    """(the SM clock ncu measured during each kernel, Hz; the tensor-core peak at that clock, TFLOP/s),
    per row: NaN where the export has no clock for the row."""
    clock = data.metric(rows, path, roofline.CLOCK, required=False)
    clock = pd.Series(np.nan, index=rows.index) if clock is None else clock
    peak = pd.Series([roofline.roof(rows.loc[[i]], path, gpu, root)[0] if pd.notna(clock[i]) else None
                      for i in rows.index], index=rows.index, dtype=float)
    return clock, peak


def ncu_profile(gpu, root):
    """Per profiled version and shape, from the last run of each results/<gpu>/ncu/ summary (the matmul
    profile lives in ceilings/): duration, TFLOP/s, % of the tensor-core peak at the SM clock ncu measured during that
    kernel, operations counted against predicted, registers, shared memory, occupancy, bytes, top stalls.
    (None, folder) if nothing has been profiled; a malformed summary is a ResultsError naming it."""
    folder = data.root(root) / gpu / "ncu"
    summaries = [p for p in folder.glob("*.csv") if not p.name.endswith(".raw.csv")] if folder.is_dir() else []
    if not summaries:
        return None, folder, ""
    frames, note = [], ""
    for df, path in data.ncu(gpu, root):
        rows = roofline.label_rows(df.copy(), path)   # the copy: a wide read_csv frame is fragmented
        pts = roofline.points(rows, path)
        clock, peak = row_peaks(rows, path, gpu, root)
        note = note or roofline.roof(rows, path, gpu, root)[1]
        ops, fam = tensor_ops(rows, path)
        extra = {k: data.metric(rows, path, m, required=False) for k, m in NCU_EXTRA.items()}
        extra = {k: (v if v is not None else pd.Series(np.nan, index=rows.index)) for k, v in extra.items()}
        smem = extra["smem_dynamic"] + extra["smem_static"].fillna(0)
        stall = rows[[c for c in ("stall_1", "stall_2") if c in rows.columns]].astype(str)
        frames.append(pts.assign(
            source=path, clock_mhz=clock / 1e6, peak=peak, pct_peak=100 * pts.tflops / peak, ops_counted=ops,
            ops_ratio=ops / pts.ops, mma=fam, regs=extra["regs"], smem=smem, occ_theoretical=extra["occ_theoretical"],
            occ_achieved=extra["occ_achieved"], inst=extra["inst"], pipe_tensor=extra["pipe_tensor"],
            stall_1=stall["stall_1"] if "stall_1" in stall else "", stall_2=stall["stall_2"] if "stall_2" in stall
            else ""))
    if not frames:   # only summaries at another head dimension (the peer profile's D = 128, say)
        return None, folder, ""
    out = pd.concat(frames, ignore_index=True)
    out["causal"] = out["causal"].astype(int)
    out["N"] = out["N"].astype(int)
    return out.drop_duplicates(["who", "N", "causal"], keep="first"), folder, note


def ncu_get(prof: pd.DataFrame, who: str, N: int, causal: int):
    r = prof[(prof.who == who) & (prof.N == N) & (prof.causal == causal)]
    return r.iloc[0] if len(r) else None


def section_ncu(gpu, root, ref_root) -> str:
    title = "### The final profile (Nsight Compute)"
    prof, folder, note = ncu_profile(gpu, root)
    if prof is None:
        return not_yet(title, "invoke profile --tool ncu --kernel all --N 4096 [--causal]",
                       folder / "all_N<N>_<mask>.csv")
    order = {w: i for i, w in enumerate((*versions.NAMES, data.SDPA))}
    prof = prof.sort_values(["N", "causal", "who"], key=lambda c: c.map(order) if c.name == "who" else c)
    rows = []
    for r in prof.itertuples():
        stall = r.stall_1 if r.stall_1 not in ("", "nan") else "–"
        if stall.startswith("selected") and r.stall_2 not in ("", "nan"):
            stall += f"; {r.stall_2}"
        rows.append([r.who, r.N, "yes" if r.causal else "no", fmt(r.seconds * 1e6, ",.1f"), fmt(r.tflops, ".1f"),
                     fmt(r.pct_peak, ".1f", "%"), fmt(r.clock_mhz, ".0f"),
                     f"{fmt(r.ops_counted / 1e9, '.1f')} / {r.ops / 1e9:.1f} ({fmt(r.ops_ratio, '.3f', '×')})",
                     r.mma or "–", fmt(r.regs, ".0f"), fmt(r.smem, ",.0f"),
                     f"{fmt(r.occ_theoretical, '.1f')} / {fmt(r.occ_achieved, '.1f')}",
                     fmt(r.l2_bytes / 1e9, ".2f"), fmt(r.dram_bytes / 1e6, ",.1f"), fmt(r.inst / 1e6, ",.0f"),
                     fmt(r.pipe_tensor, ".1f", "%"), stall])
    sources = sorted({rel(p) for p in prof.source})
    text = [title,
            "The last run in each file. TFLOP/s: the algorithm's FLOPs (predicted_flops) over the duration; % of "
            "peak: that over the bf16-in, fp32-accumulate tensor-core peak at the SM clock Nsight Compute measured "
            "during the kernel (sm__cycles_elapsed.avg.per_second; the article's % of peak is the roofline's, "
            "counted operations per cycle). Tensor ops: counted (sum of sm__ops_path_tensor_src_*) / predicted, in G; "
            "MMA: the instructions that did them. Shared memory: static + dynamic bytes per block. Occupancy: "
            "theoretical / achieved % of the SM's warps. L2 → SM: l1tex__m_xbar2l1tex_read_bytes; DRAM: reads + "
            "writes. Tensor pipe: sm__pipe_tensor_cycles_active. Top stall: cycles per issued instruction "
            "(after 'selected', which is the issue itself, the next one). Sources: "
            + ", ".join(f"`{s}`" for s in sources) + (f". {note}." if note else "."), "",
            md_table(["version", "N", "causal", "µs", "TFLOP/s", "% of peak", "SM MHz", "tensor ops G (counted / "
                      "predicted)", "MMA", "regs", "smem B", "occupancy %", "L2 → SM GB", "DRAM MB", "inst M",
                      "tensor pipe", "top stall"], rows)]
    ref, ref_path = ada("profile_final", ref_root)
    if ref is not None:
        metrics = (("Duration under Nsight Compute", "µs", lambda r: fmt(r.seconds * 1e6, ",.0f"),
                    lambda v: fmt(float(v) * 1e3, ",.0f")),
                   ("Tensor-core operations", "G", lambda r: fmt(r.ops_counted / 1e9, ".1f"), str),
                   ("Tensor-core % of peak", "", lambda r: fmt(r.pct_peak, ".1f"), str),
                   ("Instructions executed", "M", lambda r: fmt(r.inst / 1e6, ",.0f"), str),
                   ("Registers per thread", "", lambda r: fmt(r.regs, ".0f"), str),
                   ("Shared memory per program", "KB", lambda r: fmt(r.smem / 1e3, ".1f"), str),
                   ("Longest stall", "", lambda r: r.stall_1 if r.stall_1 not in ("", "nan") else "–", str))
        arows = []
        for causal in (0, 1):
            for name, unit, ours, theirs in metrics:
                row = [name + (f" ({unit})" if unit else ""), "yes" if causal else "no"]
                for who in ("v5_final", data.SDPA):
                    r = ncu_get(prof, who, 4096, causal)
                    a = ref[(ref.kernel == who) & (ref.metric == name) & (ref.N == 4096) & (ref.causal == causal)]
                    row += [ours(r) if r is not None else "–", theirs(a.value.iloc[0]) if len(a) else "–"]
                arows.append(row)
        text += ["", f"v5_final and SDPA at N = 4096 beside the article's final profile (`{rel(ref_path)}`; "
                 "Ada's duration is under Nsight Compute's locked 2.52 GHz clock):", "",
                 md_table(["metric", "causal", "v5_final (ours)", "v5_final (Ada)", "SDPA (ours)", "SDPA (Ada)"],
                          arows)]
    return "\n".join(text)


# ---------------------------------------------------------------- Round 2: the matmul peak table under Nsight Compute

MATMUL_FILE = f"matmul_S{MATMUL_SIZE}.csv"   # profiling/run_profile.py --tool ncu --kernel matmul, in ceilings/
MATMUL_VARIANTS = ("bf16->fp32", "fp16->fp32", "tf32->fp32", "fp16->fp16", "int8->int32")   # matmul_peak.VARIANTS
HALF, WHOLE = (0.45, 0.55), (0.9, 1.1)   # counted / predicted for bf16->fp32: Ada's artefact, or the true count


def matmul_profile(gpu, root):
    """(per variant of the file's last run, in profiling/matmul_peak.py's order: duration (s), predicted and
    achieved TFLOP/s, the SM clock ncu measured (MHz), the bf16->fp32 tensor-core peak at that clock, the tensor
    operations counted (the sum of sm__ops_path_tensor_src_*, as the final profile sums them) and their ratio to
    predicted_flops, tensor pipe active %; the file; the peak's note), or (None, path, "") if not profiled.
    A malformed file, or one whose rows name no variant, is a ResultsError naming it."""
    path = data.root(root) / gpu / "ceilings" / MATMUL_FILE
    df = optional(path, ("kernel", "version", "predicted_flops"))
    if df is None:
        return None, path, ""
    df = df.assign(version=df["version"].astype(object).where(df["version"].notna(), "").astype(str).str.strip())
    df = df[df.version != ""]   # kernels outside the variants' NVTX ranges (summarise_raw leaves them unnamed)
    if df.empty:
        raise data.ResultsError(f"results file {path} has no row named by a matmul variant (its version column)")
    if "run_id" in df.columns:
        df = df[df["run_id"] == df["run_id"].iloc[-1]]
    rows = numeric(df.drop_duplicates("version", keep="last").copy(), path, ("predicted_flops",))
    seconds = data.metric(rows, path, roofline.TIME)
    if not (np.isfinite(seconds) & (seconds > 0)).all() or rows.predicted_flops.isna().any():
        raise data.ResultsError(f"results file {path} has rows without a usable {roofline.TIME} or predicted_flops")
    clock, peak = row_peaks(rows, path, gpu, root)
    ops, _ = tensor_ops(rows, path)
    pipe = data.metric(rows, path, NCU_EXTRA["pipe_tensor"], required=False)
    tflops = rows.predicted_flops / seconds / 1e12
    out = pd.DataFrame({"variant": rows.version, "seconds": seconds, "predicted": rows.predicted_flops,
                        "tflops": tflops, "clock_mhz": clock / 1e6, "peak": peak, "pct_peak": 100 * tflops / peak,
                        "ops_counted": ops, "ops_ratio": ops / rows.predicted_flops,
                        "pipe_tensor": pipe if pipe is not None else np.nan})
    order = {v: i for i, v in enumerate(MATMUL_VARIANTS)}
    out = out.sort_values("variant", key=lambda c: c.map(lambda v: order.get(v, len(order))), kind="stable")
    return out.reset_index(drop=True), path, roofline.roof(rows, path, gpu, root)[1]


def section_matmul_ncu(gpu, root) -> str:
    title = "### The matmul peak table under Nsight Compute (Round 2, issue 4)"
    prof, path, note = matmul_profile(gpu, root)
    if prof is None:
        return not_yet(title, "invoke profile --tool ncu --kernel matmul", path)
    rows = [[r.variant, fmt(r.seconds * 1e6, ",.1f"), fmt(r.tflops, ".1f"), fmt(r.pct_peak, ".1f", "%"),
             fmt(r.clock_mhz, ".0f"), f"{fmt(r.ops_counted / 1e12, '.3f')} / {r.predicted / 1e12:.3f} "
             f"({fmt(r.ops_ratio, '.3f', '×')})", fmt(r.pipe_tensor, ".1f", "%")] for r in prof.itertuples()]
    return "\n".join([
        title,
        f"One Triton matmul, M = N = K = {MATMUL_SIZE}, per input → accumulator type; the file's last run. "
        "TFLOP/s (TOP/s for int8): predicted_flops (2·S³) over the duration ncu measured; % of peak: that over the "
        "bf16-in, fp32-accumulate tensor-core peak at the SM clock ncu measured during the kernel (as in the final "
        "profile; the same peak for every variant); tensor ops: counted (the sum of sm__ops_path_tensor_src_*) / "
        "predicted, in T, and their ratio (the article's Ada reads 0.5 for fp32 accumulation); tensor pipe: "
        f"sm__pipe_tensor_cycles_active. Source: `{rel(path)}`" + (f". {note}." if note else "."), "",
        md_table(["variant", "µs", "TFLOP/s", "% of peak", "SM MHz", "tensor ops T (counted / predicted)",
                  "tensor pipe"], rows)])


def section_ncu_source(gpu, root) -> str:
    """Where the warps wait, instruction by instruction (run_profile.py --source): for the latest source page of each
    profile of the default kernels (not of a run with a kernel switch away from its default), per kernel, the sampled
    warp states by stall reason, by opcode and by phase."""
    folder = data.root(root) / gpu / "ncu" / "source"
    latest: dict[str, Path] = {}
    switched: dict[str, set[str]] = {}   # per tag, its summary's runs made with a switch away from its default
    for path in sorted(folder.glob("*.csv")):   # <tag>_<run id>.csv: the run id sorts by time
        tag, run = path.stem.rsplit("_", 1)
        run = file_stamp(run)   # (older pages' names keep the run id's '+')
        if tag not in switched:
            switched[tag] = data.switched_runs(folder.parent / f"{tag}.csv")
        if run not in switched[tag]:   # the default kernels' pages only
            latest[tag] = path
    if not latest:
        return ("Where the warps wait, by instruction: " + NOT_YET
                + f" (`invoke profile --tool ncu --source ...` writes `{rel(folder)}/<tag>_<run>.csv`).")
    def top(shares: dict, n: int) -> str:
        return ", ".join(f"{k} {v * 100:.0f}%" for k, v in list(shares.items())[:n])

    rows = []
    for path in latest.values():
        for kernel, instructions in read_source(path).items():
            p = stall_profile(instructions)
            rows.append([f"`{rel(path)}`", kernel if len(kernel) <= 40 else kernel[:37] + "...", p["instructions"],
                         fmt(p["executed"] / 1e6, ".1f"), int(p["samples"]), top(p["reasons"], 4),
                         top(p["opcodes"], 6), top(p["phases"], 9)])
    return "\n".join([
        "Where the warps wait, instruction by instruction (ncu's source page, `invoke profile --source`): per kernel, "
        "its SASS instructions, the instructions it executed (millions), the warp states ncu sampled, and their "
        "share by stall reason, by opcode and by phase (profiling.ncu_export.PHASES: what the opcode does in an "
        "attention kernel; selected = issuing). NOP samples at a barrier are warps with no work in the "
        "warp-specialized kernel, waiting for its end; its branch samples are mostly mbarrier retry loops (the "
        "loader's among them).", "",
        md_table(["source page", "kernel", "SASS instructions", "executed (M)", "samples", "by reason",
                  "by opcode", "by phase"], rows)])


def inspections(root) -> list[tuple[Path, dict]]:
    base = data.root(root)
    return [(p, json.loads(p.read_text())) for p in sorted(base.glob("*/inspect/*/summary.json"))]


def section_inspect(root) -> str:
    found = inspections(root)
    if not found:
        return f"### What the compiler made\n{NOT_YET}: `invoke inspect` writes results/<gpu>/inspect/."
    rows = []
    for path, s in found:
        lay = (s.get("ttgir", {}).get("mma_layouts") or [{}])[0]
        loop = (s.get("sass", {}).get("loops") or [{}])[0].get("counts", {})
        rows.append([s["version"], s["config"]["key"], "causal" if s.get("causal") else "full", s.get("target"),
                     f"v{lay.get('versionMajor', '?')} {lay.get('warpsPerCTA', '?')}",
                     s["registers"].get("n_regs"), s["shared"].get("compiled"), s["shared"].get("formula"),
                     loop.get("HGMMA", 0), loop.get("HMMA", 0), loop.get("MUFU.EX2", 0), loop.get("FSETP.GEU", 0),
                     loop.get("BAR.SYNC", 0)])
    kinds = sorted({s.get("kind", "") for _, s in found})
    return "\n".join(["### What the compiler made (first inner loop's SASS, per iteration)",
                      f"{'; '.join(kinds)}. Sources: `{rel(data.root(root))}/*/inspect/*/summary.json`.", "",
                      md_table(["version", "config", "mask", "target", "MMA, warpsPerCTA", "regs", "shared B",
                                "formula B", "HGMMA", "HMMA", "MUFU.EX2", "FSETP.GEU", "BAR.SYNC"], rows)])
