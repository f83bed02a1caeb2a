"""v7 beside the FA3-class peer under Nsight Compute (`invoke profile --tool ncu --kernel v7_hopper --peer fa4`): the
article's first step before changing anything, at the shapes where flash-attn-4's sm90 forward is ahead.

One table per profiled shape (the last run of each results/<gpu>/ncu/v7_hopper_fa4_*.csv), metric by metric for v7,
flash-attn-4 and cuDNN, then what differs, each line computed from the same rows (a line is printed only where the
rows say it)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fa2lab import shapes
from figures import data, roofline
from report.profile import tensor_ops
from report.tables import NOT_YET, PEER, fmt, md_table, rel

TASK = "invoke profile --tool ncu --kernel v7_hopper --peer fa4 --N 4096 --D 64,128 --masks both"
OURS, THEIRS = "v7_hopper", "fa4-fwd"          # the NVTX ranges profile_driver names them by
WHO = {OURS: "v7", THEIRS: PEER, data.SDPA: "cuDNN"}
STALLS = {"barrier": "barrier", "wait": "wait", "long_scoreboard": "long_scoreboard", "gmma": "gmma",
          "dispatch_stall": "dispatch", "mio_throttle": "mio_throttle"}
METRIC = {"regs": "launch__registers_per_thread", "smem": "launch__shared_mem_per_block_dynamic",
          "block": "launch__block_size", "grid": "launch__grid_size", "sms": "device__attribute_multiprocessor_count",
          "inst": "smsp__inst_executed.sum", "occ": "sm__warps_active.avg.pct_of_peak_sustained_active",
          "tensor_pipe": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
          **{f"st_{k}": f"smsp__average_warps_issue_stalled_{k}_per_issue_active.ratio" for k in STALLS}}


def files(gpu, root) -> list[Path]:
    folder = data.root(root) / gpu / "ncu"
    return sorted(folder.glob(f"{OURS}_fa4_*.csv")) if folder.is_dir() else []


def profiles(gpu, root) -> pd.DataFrame:
    """One row per kernel (v7, the peer, cuDNN) and shape (N, D, causal), from each file's last run."""
    ours, out = files(gpu, root), []
    for df, path in data.ncu(gpu, root, D=None) if ours else ():
        if path not in ours:
            continue
        rows = roofline.label_rows(df.copy(), path)
        pts = roofline.points(rows, path)
        ops, _ = tensor_ops(rows, path)
        vals = {k: data.metric(rows, path, m, required=False) for k, m in METRIC.items()}
        D = pd.to_numeric(rows["D"], errors="coerce") if "D" in rows else pd.Series(shapes.HEAD_DIM, index=rows.index)
        out.append(pts.assign(D=D, ops_counted=ops, source=path,
                              **{k: v for k, v in vals.items() if v is not None}))
    if not out:
        return pd.DataFrame()
    df = pd.concat(out, ignore_index=True)
    df = df[df.who.isin(WHO)].astype({"N": int, "causal": int, "D": int})
    return df.drop_duplicates(["who", "N", "D", "causal"], keep="last")


def _get(g: pd.DataFrame, who: str):
    r = g[g.who == who]
    return r.iloc[0] if len(r) else None


def _rows_per_cta(r) -> str:
    """Query rows per CTA where the grid is one CTA per tile; 'persistent' where the grid is the SM count."""
    if r is None or pd.isna(r.get("grid")):
        return "–"
    if pd.notna(r.get("sms")) and r['grid'] == r['sms']:
        return "persistent"
    return fmt(shapes.BATCH * shapes.HEADS * r.N / r['grid'], ".0f")   # the harness's B and H


LINES = (("µs under ncu", lambda r: fmt(r.seconds * 1e6, ",.1f")),
         ("threads per CTA", lambda r: fmt(r.get("block"), ".0f")),
         ("CTAs (query rows each)", lambda r: f"{fmt(r.get('grid'), ',.0f')} ({_rows_per_cta(r)})"),
         ("registers per thread", lambda r: fmt(r.get("regs"), ".0f")),
         ("dynamic shared memory KB", lambda r: fmt(r.get("smem", float("nan")) / 1e3, ".1f")),
         ("tensor pipe active", lambda r: fmt(r.get("tensor_pipe"), ".1f", "%")),
         ("tensor ops counted / algorithm's", lambda r: fmt(r.ops_counted / r.ops, ".3f", "×")),
         ("instructions M", lambda r: fmt(r.get("inst", float("nan")) / 1e6, ",.1f")),
         ("achieved occupancy", lambda r: fmt(r.get("occ"), ".1f", "%")),
         *((f"stall per issue: {name}", (lambda k: lambda r: fmt(r.get(f"st_{k}"), ".2f"))(k))
           for k, name in STALLS.items()))


def shape_table(g: pd.DataFrame) -> str:
    kernels = [(w, _get(g, w)) for w in WHO]
    kernels = [(w, r) for w, r in kernels if r is not None]
    return md_table(["metric", *(WHO[w] for w, _ in kernels)], [[name, *(f(r) for _, r in kernels)]
                                                                   for name, f in LINES])


def differences(g: pd.DataFrame) -> list[str]:
    """What differs between v7 and the peer at one shape, each line only where the rows show it."""
    a, b = _get(g, OURS), _get(g, THEIRS)
    if a is None or b is None:
        return []
    out = [f"- Time: {PEER} takes {b.seconds / a.seconds:.3f}× v7's ({fmt(b.seconds * 1e6, ',.1f')} µs against "
           f"{fmt(a.seconds * 1e6, ',.1f')})."]
    same = [f"{fmt(a[k], '.0f')} {name}" for k, name in (("block", "threads per CTA"), ("regs", "registers per thread"))
            if pd.notna(a.get(k)) and a.get(k) == b.get(k)]
    if same:
        out.append(f"- The same in both: {' and '.join(same)}.")
    if _rows_per_cta(a) != _rows_per_cta(b):
        out.append(f"- Grid: v7 runs {fmt(a['grid'], ',.0f')} CTAs ({_rows_per_cta(a)}), {PEER} "
                   f"{fmt(b['grid'], ',.0f')} ({_rows_per_cta(b)} query rows each), with {fmt(a['block'], '.0f')} "
                   f"and {fmt(b['block'], '.0f')} threads per CTA.")
    if pd.notna(a.get("tensor_pipe")) and pd.notna(b.get("tensor_pipe")):
        out.append(f"- Tensor pipe: active {a['tensor_pipe']:.1f}% of v7's cycles, {b['tensor_pipe']:.1f}% of "
                   f"{PEER}'s, for {fmt(a.ops_counted / a.ops, '.3f')}× and {fmt(b.ops_counted / b.ops, '.3f')}× the "
                   f"algorithm's tensor operations.")
    for k, name in STALLS.items():
        x, y = a.get(f"st_{k}"), b.get(f"st_{k}")
        if pd.notna(x) and pd.notna(y) and max(x, y) >= 0.3 and max(x, y) >= 2 * min(x, y):
            out.append(f"- Stall '{name}': {x:.2f} cycles per issued instruction in v7, {y:.2f} in {PEER}.")
    if pd.notna(a.get("smem")) and pd.notna(b.get("smem")) and abs(a['smem'] - b['smem']) >= 16e3:
        out.append(f"- Shared memory: {a['smem'] / 1e3:.1f} KB per CTA in v7, {b['smem'] / 1e3:.1f} KB in {PEER}.")
    return out


def section_peer_profile(gpu, root) -> str:
    prof = profiles(gpu, root)
    if not len(prof):
        return f"{NOT_YET}: `{TASK}` writes `results/{gpu}/ncu/{OURS}_fa4_N<N>_<mask>[_D<D>].csv`."
    text = [f"Nsight Compute's full section set, clocks left alone, one call of each kernel on the same inputs "
            f"(B = {shapes.BATCH}, H = {shapes.HEADS}, bf16), the last run in each file. Stalls: cycles per issued "
            f"instruction by reason (smsp__average_warps_issue_stalled_*). CTAs: the launch grid; query rows each: "
            f"B·H·N over the grid (persistent: one CTA per SM, each looping over tiles). Tensor ops: counted "
            f"(sm__ops_path_tensor_src_*) over the algorithm's. Task: `{TASK}`. Sources: "
            + ", ".join(f"`{rel(p)}`" for p in sorted(set(prof.source))) + "."]
    for (N, D, causal), g in prof.groupby(["N", "D", "causal"]):
        text += ["", f"#### N = {N}, D = {D}, {'causal' if causal else 'non-causal'}", "", shape_table(g), ""]
        text += differences(g) or ["- (the peer's row is missing in this run)"]
    return "\n".join(text + ["", NEXT])


NEXT = (f"What to change first, one thing at a time (hypotheses from these rows): where v7's "
        f"Gluon forward and {PEER} launch the same warpgroups with the same registers, v7's warps wait far longer on "
        f"named barriers while the peer's wait on the tensor cores (gmma), so the first step is ncu's source page "
        f"(`--source`) to find which barrier of v7's consumers holds them, then removing or moving that one. The grid "
        f"and the shared memory alone are not it: the peer's layout (one CTA per 128 x 128 tile, two K/V slots) in "
        f"v7's Gluon kernel was slower at D = 128 (the Gluon log's retired options). Where v7 "
        f"runs its one-warpgroup tl path (the race's pick), the peer runs three consumer warpgroups beside a "
        f"producer and keeps more of the tensor pipe busy; v7's own three-consumer Gluon candidate loses the race "
        f"there, so why it loses (its registers, the causal order of its work) is the question to profile.")
