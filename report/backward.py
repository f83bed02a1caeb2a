"""The backward: per version, dQ mode and shape against SDPA's two backends, the dQ modes timed apart, the
warp-specialized Gluon backward against v7's previous one, the configuration sweep, and the Nsight Compute profile."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from fa2lab import shapes
from fa2triton import versions
from fa2triton.flash_backward_triton import DQ_MODES
from fa2lab.backward_sweep import CONFIG_FIELDS, KEY_FIELDS
from figures import data, roofline
from profiling.ncu_export import backward_share
from report.tables import peer_rows, fmt, latest_rows, md_table, not_yet, numeric, optional, rel, span
from report.profile import NCU_EXTRA, row_peaks, tensor_ops
from report.experiment_pages import experiment, experiment_not_run


def section_bwd_modes(gpu, root) -> str:
    """The backward's dQ modes: GPU (graph replay), host and do_bench µs per shape and head dimension
    (experiments/run.py bwd_modes; rows from before its D column have the harness's D)."""
    label = "The backward's dQ modes, timed apart"
    df, path = experiment(gpu, root, "bwd_modes", rows=_head_dim_64_where_unsaid)
    if df is None:
        return experiment_not_run(label, "bwd_modes", path)

    def cells(g):
        def at(who, col):
            return fmt(g.at[who, col], ".0f") if who in g.index else "–"
        picks = g.auto_picks.dropna().astype(str)
        return [picks[picks != ""].iloc[0] if (picks != "").any() else "–",
                *(f"{at(m, 'graph_us')} / {at(m, 'host_us')} / {at(m, 'do_bench_us')}" for m in DQ_MODES),
                *(f"{at(w, 'host_us')} / {at(w, 'do_bench_us')}" for w in ("sdpa_flash", "sdpa"))]

    rows = [[int(N), int(D), "yes" if causal else "no", *cells(g.set_index("who")),
             f"`{str(g.git_commit.iloc[-1])[:7]}`" if "git_commit" in g else "–"]
            for (D, causal, N), g in df.groupby(["D", "causal", "N"], sort=True)]
    return "\n".join([
        "The backward's dQ modes timed apart (v7's forward, the harness's B and H; medians of interleaved rounds, "
        "µs): GPU = CUDA-graph replay of the backward called directly (no host in it); host = the host's time per "
        "autograd backward, GPU queue never drained; do_bench = the harness's number for the autograd backward. "
        "atomic is the warp-specialized Gluon kernel on Hopper (rows from before it have no atomic timings, and "
        "their separate mode's GPU time is the Triton dK/dV kernel's). 'auto' = the mode dq_mode=\"auto\" ran there "
        "at the row's commit. "
        f"Source: `{rel(path)}`.", "",
        md_table(["N", "D", "causal", "auto", *(f"{m} GPU / host / do_bench" for m in DQ_MODES),
                  "FLASH host / do_bench", "SDPA default host / do_bench", "commit"], rows)])


def _head_dim_64_where_unsaid(df):
    """bwd_modes' rows with D filled in: the harness's head dimension in rows written before the column."""
    df = df.copy()
    df["D"] = df["D"].fillna(shapes.HEAD_DIM) if "D" in df.columns else shapes.HEAD_DIM
    return df


def section_bwd_gluon_ws(gpu, root) -> str:
    """The warp-specialized Gluon backward against v7's previous backward and cuDNN's (experiments/bwd_gluon_ws.py):
    per shape, graph replay and do_bench µs with each round's own ratios."""
    df, path = experiment(gpu, root, "bwd_gluon_ws", rows=lambda d: _synced_runs(d, False))
    if df is None:
        return experiment_not_run("The warp-specialized Gluon backward", "bwd_gluon_ws", path)
    rows = []
    for (D, causal, N), g in df.groupby(["D", "causal", "N"], sort=True):
        g = g.set_index("who")
        if "v7" not in g.index or "cudnn" not in g.index:
            continue
        for who in [w for w in g.index if w.startswith("gluon-ws")]:
            r, v = g.loc[who], g.loc["v7"]
            rows.append([int(N), int(D), "yes" if causal else "no", who.split("/", 1)[1],
                         fmt(v.graph_us, ".1f"), fmt(r.graph_us, ".1f"),
                         span(r.v7_over_graph, r.v7_over_graph_min, r.v7_over_graph_max, ".3f", "×"),
                         fmt(r.graph_tflops, ".0f"), fmt(g.at["cudnn", "dobench_us"], ".1f"),
                         span(100 * r.cudnn_over_dobench, 100 * r.cudnn_over_dobench_min,
                              100 * r.cudnn_over_dobench_max, ".1f", "%"),
                         span(100 * v.cudnn_over_dobench, 100 * v.cudnn_over_dobench_min,
                              100 * v.cudnn_over_dobench_max, ".1f", "%"), fmt(r.max_rel_err_vs_fp64, ".1e")])
    return "\n".join([
        "The warp-specialized Gluon backward (fa2triton/gluon/gluon_backward_ws.py, with the backward's preprocess and "
        "dQ's cast: dq_mode \"atomic\", dkdv \"gluon\") against v7's previous backward (dq_mode and dkdv \"auto\" "
        "as they were: fused at N = 1024, else the Gluon dK/dV kernel and the Triton dQ kernel) and cuDNN's, whole "
        "backwards on the same inputs, interleaved rounds in one process: graph = CUDA-graph replay (the kernels "
        "alone; autograd's cuDNN call cannot be captured), do_bench with the host's launches. Ratios: the median "
        "(min–max) of each round's own. TFLOP/s counts 2.5× the forward's FLOPs; error: the largest relative error "
        f"of dQ, dK, dV against float64. Source: `{rel(path)}`.", "",
        md_table(["N", "D", "causal", "config", "v7 previous graph µs", "Gluon graph µs", "v7 ÷ Gluon",
                  "Gluon TFLOP/s", "cuDNN do_bench µs", "Gluon % of cuDNN", "v7 previous % of cuDNN",
                  "error"], rows), "", _unsynced_table(gpu, root), "", _trials_table(gpu, root)])


SYNCED = "/synced"   # the who suffix of the ws kernel built with its slot release and dS wait synced at every D


def _synced_runs(df: pd.DataFrame, synced: bool) -> pd.DataFrame:
    """The rows of the commits whose run timed the synced form (synced) or of the others (round 3's)."""
    commits = set(df.loc[df["who"].astype(str).str.endswith(SYNCED), "git_commit"])
    return df[df["git_commit"].isin(commits) == synced]


def _first_synced_run(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of round 5's run: the first commit (by date) whose run timed the synced form. Later runs time it too,
    beside a kernel that by then keeps the sync at D = 64 (UNSYNCED_HEAD_DIMS)."""
    synced = _synced_runs(df, True)
    if synced.empty:
        return synced
    first = synced.sort_values("date", kind="stable")["git_commit"].iloc[0] if "date" in synced else \
        synced["git_commit"].iloc[0]
    return synced[synced["git_commit"] == first]


def _unsynced_table(gpu, root) -> str:
    """Round 5 of the backward's log: the ws kernel as built by that run against its synced form, by graph replay."""
    df, path = experiment(gpu, root, "bwd_gluon_ws", rows=_first_synced_run)
    if df is None or df.empty or "gluon_over_graph" not in df:
        return ""
    rows = []
    for (D, causal, N), g in df.groupby(["D", "causal", "N"], sort=True):
        g = g.set_index("who")
        for who in [w for w in g.index if w.endswith(SYNCED)]:
            r, shipped = g.loc[who], g.loc[who[:-len(SYNCED)]]
            ratio = [float(r[c]) for c in ("gluon_over_graph", "gluon_over_graph_min", "gluon_over_graph_max")]
            rows.append([int(N), int(D), "yes" if causal else "no", fmt(r.graph_us, ".1f"),
                         fmt(shipped.graph_us, ".1f"), span(*ratio, ".3f", "×"), fmt(r.max_rel_err_vs_fp64, ".1e")])
    return "\n".join([
        "The slot release and the dS wait without the consumers' bar.sync (round 5: the run that also timed the "
        "synced form, where the kernel dropped both at every D): its graph time against the synced form's, built in "
        "the same process, median (min–max) of each round's ratio; below 1 the unsynced form is faster.", "",
        md_table(["N", "D", "causal", "synced graph µs", "unsynced graph µs", "unsynced ÷ synced", "error"], rows)])


TRIAL = re.compile(r"^gluon-ws/s\d+/(?!synced$)[\w-]+$")   # a trial form: the shipped kernel's label and a suffix


def _trials_table(gpu, root) -> str:
    """Every trial form of the ws kernel (the shipped kernel's label and a suffix, /synced aside: its table is
    above), per shape and Triton its latest run, beside the shipped kernel of the same run: graph times and each
    round's own ratio shipped ÷ trial."""
    # (latest per commit too, so that every run's shipped row stays beside its trials)
    keys = ("who", "N", "D", "causal", "triton")
    df, path = experiment(gpu, root, "bwd_gluon_ws", keys=keys + ("git_commit",))
    if df is None or df.empty or "gluon_over_graph" not in df:
        return ""
    trials = latest_rows(df[df["who"].astype(str).str.match(TRIAL)], keys)
    shipped = df.set_index(["who", "git_commit", "D", "causal", "N", "triton"])
    rows = []
    for r in trials.sort_values(["who", "D", "causal", "N", "triton"]).itertuples():
        key = (r.who.rsplit("/", 1)[0], r.git_commit, r.D, r.causal, r.N, r.triton)
        base = shipped.loc[key] if key in shipped.index else None
        ratio = (r.gluon_over_graph, r.gluon_over_graph_min, r.gluon_over_graph_max)
        rows.append([f"`/{r.who.rsplit('/', 1)[1]}`", int(r.N), int(r.D), "yes" if r.causal else "no",
                     r.triton, int(r.rounds),
                     fmt(base.graph_us if base is not None else float("nan"), ".1f"), fmt(r.graph_us, ".1f"),
                     span(*ratio, ".3f", "×"), f"`{str(r.git_commit)[:7]}`", fmt(r.max_rel_err_vs_fp64, ".1e")])
    return "\n".join([
        "The trials (docs/worklogs/backward_hopper.md names each; kept or retired in docs/experiments.md): each form "
        "built beside the kernel its run shipped, in the same process, per shape and Triton the latest run; shipped ÷ "
        "trial is the median (min–max) of each round's ratio of graph times, above 1 the trial is faster.", "",
        md_table(["trial", "N", "D", "causal", "Triton", "rounds", "shipped graph µs", "trial graph µs",
                  "shipped ÷ trial", "commit", "error"], rows)])


# ---------------------------------------------------------------- the backward (issue 7)

BWD_COLUMNS = ("version", "run_id", "N", "causal", "fwd_bwd_ms", "bwd_ms", "sdpa_fwd_bwd_ms", "sdpa_bwd_ms",
               "fwd_bwd_pct_of_sdpa", "bwd_pct_of_sdpa")
BWD_FLASH = ("fwd_bwd_pct_of_sdpa_flash", "bwd_pct_of_sdpa_flash")
BWD_HOST = ("bwd_host_us", "sdpa_bwd_host_us", "sdpa_flash_bwd_host_us")   # since commit f21aba3
# The dQ mode a version's autograd backward runs by default (FlashAttentionTriton.BACKWARD_DQ_MODE of v6 and v7,
# checked by the report's tests): the summaries pool its rows, not those of a --dq-mode experiment.
DEFAULT_DQ_MODE = "auto"


def backward_summary(gpu, root):
    """Per version with a results/<gpu>/bench_bwd/<version>.csv, per dQ mode and shape its latest protocol's medians;
    (None, [], folder) if there is none."""
    folder = data.root(root) / gpu / "bench_bwd"
    frames, paths = [], []
    for v in versions.VERSIONS:
        path = folder / f"{v.name}.csv"
        df = optional(path, BWD_COLUMNS)
        if df is None:
            continue
        flash = [c for c in BWD_FLASH + BWD_HOST if c in df.columns]
        df = numeric(data.at_head_dim(df), path, BWD_COLUMNS[2:] + tuple(flash))
        # each shape's latest protocol of each dQ mode (bench --mode bwd --dq-mode atomic appends its own protocol;
        # a protocol of a few N refreshes those N only)
        modes = df["dq_mode"].fillna("separate").astype(str) if "dq_mode" in df else pd.Series("separate", df.index)
        for mode in sorted(set(modes), key=lambda m: (m != "separate", m)):
            latest = data.latest_protocol_per_shape(df[modes == mode])
            g = latest.groupby(["causal", "N"])
            out = g.agg(runs=("run_id", "nunique"), fwd_bwd_ms=("fwd_bwd_ms", "median"), bwd_ms=("bwd_ms", "median"),
                        sdpa_fwd_bwd_ms=("sdpa_fwd_bwd_ms", "median"), sdpa_bwd_ms=("sdpa_bwd_ms", "median"),
                        fb_pct=("fwd_bwd_pct_of_sdpa", "median"), b_pct=("bwd_pct_of_sdpa", "median"))
            for c, name in zip(BWD_FLASH + BWD_HOST, ("fb_pct_fa", "b_pct_fa", "host_us", "sdpa_host_us",
                                                       "flash_host_us")):
                out[name] = pd.to_numeric(g[c].median(), errors="coerce") if c in latest.columns else float("nan")
            peer = data.latest_commit(peer_rows(df[modes == mode]))   # the peer's own runs, whatever protocol
            out["b_pct_peer"] = (pd.to_numeric(peer["bwd_pct_of_fa4"], errors="coerce").groupby(
                [peer.causal, peer.N]).median() if len(peer) and "bwd_pct_of_fa4" in peer else float("nan"))
            # dq_mode "auto" resolves per shape (the harness's dq_mode_ran column, since commit 3186851)
            out["ran"] = (g["dq_mode_ran"].agg(lambda x: ",".join(sorted(set(x.dropna().astype(str)))))
                          if "dq_mode_ran" in latest.columns else "")
            out["protocol"] = g["run_id"].agg(lambda r: r.astype(str).str.rsplit("/", n=1).str[0].iloc[0])
            impl = ", ".join(sorted(set(latest["backward_impl"].astype(str)))) if "backward_impl" in latest else "?"
            config = ", ".join(sorted(set(latest["bwd_config"].dropna().astype(str)))) if "bwd_config" in latest else ""
            frames.append(out.reset_index().assign(version=v.name, dq_mode=mode, impl=impl,
                                                   config=config or "the default_config of its commit"))
        paths.append(path)
    if not frames:
        return None, [], folder
    return pd.concat(frames, ignore_index=True), paths, folder


def section_backward(gpu, root) -> str:
    """The backward per version, dQ mode and shape, against SDPA's two backends."""
    title = "### The backward"
    summary, paths, folder = backward_summary(gpu, root)
    if summary is None:
        return not_yet(title, "invoke bench --kernel v6_longest_first --mode bwd", folder / "<version>.csv")
    host = summary["host_us"].notna().any()
    rows = [[r.version, r.dq_mode + (f" ({r.ran})" if r.ran and r.ran != r.dq_mode else ""), r.N,
             "yes" if r.causal else "no", r.runs, fmt(r.fwd_bwd_ms, ".3f"),
             fmt(r.fb_pct, ".0f", "%"), fmt(r.fb_pct_fa, ".0f", "%"), fmt(r.bwd_ms, ".3f"), fmt(r.b_pct, ".0f", "%"),
             fmt(r.b_pct_fa, ".0f", "%"), fmt(r.sdpa_fwd_bwd_ms, ".3f"), fmt(r.sdpa_bwd_ms, ".3f")]
            + ([f"{fmt(r.host_us, '.0f')} / {fmt(r.sdpa_host_us, '.0f')} / {fmt(r.flash_host_us, '.0f')}"] if host else [])
            for r in summary.itertuples()]
    protocols = "; ".join(f"{v} ({m} dQ, {c}): {p} ({int(g.runs.max())} run(s))" for (v, m, c, p), g in summary.groupby(
        ["version", "dq_mode", "config", "protocol"], sort=False))
    impls = sorted(set(summary.impl))
    return "\n".join([
        title,
        "Forward + backward (torch.autograd.grad of Q, K, V after the forward) and backward only (a kept graph), ms: "
        "medians over the runs of each file's latest protocol; % of SDPA: the median of each run's own ratio to "
        "SDPA's default backend and to its FLASH_ATTENTION backend, same process. Protocols: " + protocols
        + f". Backward: {', '.join(impls)}. Sources: " + ", ".join(f"`{rel(p)}`" for p in paths) + ".", "",
        md_table(["version", "dQ", "N", "causal", "runs", "fwd+bwd ms", "% of SDPA", "% of FLASH", "bwd ms",
                  "% of SDPA", "% of FLASH", "SDPA fwd+bwd ms", "SDPA bwd ms"]
                 + (["host µs per backward: ours / SDPA / FLASH"] if host else []), rows)]
        + (["", "Host µs per backward: autograd.grad on the kept graph, called back to back with the GPU queue never "
            "drained (the file's bwd_host_us columns; '–' for protocols from before them). Where it "
            "exceeds the GPU's time, do_bench's bwd ms measures the host."] if host else []))


# Kernels that ran outside every NVTX range in a --mode bwd capture: autograd runs a backward on its own
# thread, whose kernels the main thread's ranges do not enclose, so SDPA's backward is told by kernel name.
ATOMIC_CAST = "atomic dQ's zero fill and bf16 cast (by kernel name)"
UNRANGED_BWD = ((re.compile(r"cudnn"), "sdpa-bwd (cuDNN, by kernel name)"),
                (re.compile(r"pytorch_flash::flash_bwd"), "sdpa_flash-bwd (by kernel name)"),
                (re.compile(r"flash_attncuteflash_bwd"), "fa4-bwd (flash-attn-4, by kernel name)"),
                (re.compile(r"FillFunctor|bfloat16_copy"), ATOMIC_CAST))
# A zero fill or cast launched right after the Gluon kernel's range is that backward's dQ cast.
GLUON_CAST = "the Gluon backward's dQ cast (by kernel name)"
TOTALS_BWD = (("Triton backward, separate dQ", ("bwd_preprocess", "bwd_dkdv", "bwd_dq")),
              ("Triton backward, atomic dQ", ("bwd_preprocess", "bwd_atomic_dkdv", "atomic dQ's zero fill")),
              ("Triton backward, fused (one launch)", ("bwd_fused",)),
              ("v7's backward, Gluon (atomic dQ)", ("bwd_preprocess", "bwd_gluon_atomic_dkdv", GLUON_CAST)),
              ("SDPA's backward, cuDNN", ("sdpa-bwd",)), ("SDPA's backward, FLASH_ATTENTION", ("sdpa_flash-bwd",)),
              ("flash-attn-4's backward", ("fa4-bwd",)))


def unranged_names(versions_: list[str], kernels: list[str]) -> list[str]:
    """Each row's group: its NVTX range where it has one, else its UNRANGED_BWD label by kernel name ("other kernels
    (by name)" if none matches); a zero fill or cast right after the Gluon kernel's range is GLUON_CAST."""
    out, last = [], ""
    for v, k in zip(versions_, kernels):
        if v:
            out.append(v)
            last = v
            continue
        label = next((label for pat, label in UNRANGED_BWD if pat.search(k)), "other kernels (by name)")
        if label == ATOMIC_CAST and last.endswith(":bwd_gluon_atomic_dkdv"):
            label = GLUON_CAST
        out.append(label)
        last = ""
    return out


def _member(who: str, part: str) -> bool:
    """Whether a profile row's group (a range '<version>:bwd_<kernel>' or an UNRANGED_BWD label) is a TOTALS_BWD part."""
    return who.split(":")[-1].startswith(part) or who.startswith(part)


def backward_profile(gpu, root):
    """The backward's Nsight Compute profile (results/<gpu>/ncu_bwd/, `invoke profile --mode bwd`), one row
    per range of each file's last run: the Triton backward's kernels ('<version>:bwd_<kernel>', both dQ
    modes; a range holds one launch, so a name seen twice, the preprocessing of both modes, is averaged),
    SDPA's backward kernels (outside the ranges: told by name, summed per backend), then per mask the
    totals of each backward. (None, folder) if not profiled."""
    folder = data.root(root) / gpu / "ncu_bwd"
    if not folder.is_dir() or not any(p for p in folder.glob("*.csv") if not p.name.endswith(".raw.csv")):
        return None, folder
    out = []
    for df, path in data.ncu(gpu, root, "ncu_bwd"):
        if "run_id" not in df.columns:
            raise data.ResultsError(f"results file {path} lacks column run_id")
        rows = df[df["run_id"] == df["run_id"].iloc[-1]].copy()
        rows = rows.sort_values("ncu_id", key=lambda c: c.astype(int), kind="stable")
        who = unranged_names(list(rows["version"].fillna("").astype(str)), list(rows["kernel"].astype(str)))
        seconds = data.metric(rows, path, roofline.TIME)
        ops, _ = tensor_ops(rows, path)
        clock, peak = row_peaks(rows, path, gpu, root)
        extra = {k: data.metric(rows, path, m, required=False) for k, m in NCU_EXTRA.items()}
        rows = rows.assign(who=who, seconds=seconds, ops_counted=ops, peak=peak, **{
            k: (v if v is not None else np.nan) for k, v in extra.items()})
        fwd = shapes.flops(shapes.BATCH, shapes.HEADS, int(rows.N.iloc[0]), shapes.HEAD_DIM, bool(rows.causal.iloc[0]))
        for name, g in rows.groupby("who", sort=False):
            one_launch = ":bwd_" in name   # a Triton range: each launch is the whole kernel
            sec = g.seconds.mean() if one_launch else g.seconds.sum()
            main = g.loc[g.seconds.idxmax()]
            # a Triton range: its kernel's products (the preprocessing has none); SDPA's: a whole backward
            share = backward_share(name) if one_launch else (shapes.BWD_FLOP_FACTOR if name.startswith(("sdpa", "fa4"))
                                                             else None)
            predicted = fwd * share if share else np.nan
            counted = g.ops_counted.mean() if one_launch else g.ops_counted.sum()
            out.append({"who": name, "N": int(g.N.iloc[0]), "causal": int(g.causal.iloc[0]), "kernels": len(g),
                        "us": sec * 1e6, "tflops": predicted / sec / 1e12, "pct_peak": 100 * predicted / sec / 1e12
                        / main.peak, "ops_ratio": counted / predicted, "regs": main.regs,
                        "smem": (main.smem_dynamic if pd.notna(main.smem_dynamic) else 0)
                        + (main.smem_static if pd.notna(main.smem_static) else 0),
                        "occ": main.occ_theoretical, "pipe": main.pipe_tensor,
                        "stalls": ", ".join(str(main[c]) for c in ("stall_1", "stall_2") if c in g and pd.notna(main[c])),
                        "source": path, "total": False})
        parts = out[-len(set(who)):]
        for label, members in TOTALS_BWD:
            chosen = [r for r in parts if any(_member(r["who"], m) for m in members)]
            if not all(any(_member(r["who"], m) for r in chosen) for m in members):
                continue   # (a backward this run did not profile)
            us = sum(r["us"] for r in chosen)
            predicted = fwd * shapes.BWD_FLOP_FACTOR
            out.append({"who": f"**{label}**", "N": chosen[0]["N"], "causal": chosen[0]["causal"],
                        "kernels": sum(1 if ":bwd_" in r["who"] else r["kernels"] for r in chosen), "us": us,
                        "tflops": predicted / us / 1e6, "pct_peak": np.nan, "ops_ratio": np.nan, "regs": np.nan,
                        "smem": np.nan, "occ": np.nan, "pipe": np.nan, "stalls": "", "source": path, "total": True})
    return pd.DataFrame(out), folder


def section_backward_profile(gpu, root) -> str:
    title = "### The backward under Nsight Compute (issue 7)"
    prof, folder = backward_profile(gpu, root)
    if prof is None:
        return not_yet(title, "invoke profile --kernel v7_hopper --mode bwd [--causal]", folder / "<tag>.csv")
    rows = [[r.who, r.N, "yes" if r.causal else "no", r.kernels, fmt(r.us, ".1f"), fmt(r.tflops, ".1f"),
             fmt(r.pct_peak, ".1f", "%"), fmt(r.ops_ratio, ".3f", "×"), fmt(r.regs, ".0f"), fmt(r.smem, ",.0f"),
             fmt(r.occ, ".1f", "%"), fmt(r.pipe, ".1f", "%"), r.stalls] for r in prof.itertuples()]
    return "\n".join([
        title,
        "The last run of each file. One row per NVTX range of the Triton backward (one launch each; the "
        "preprocessing runs once per dQ mode, averaged), then the kernels outside every range: autograd runs a "
        "backward on its own thread, which the driver's ranges do not enclose, so SDPA's backward kernels are told "
        "by name (cuDNN's `cudnn…`, the FLASH backend's `pytorch_flash::flash_bwd…`, flash-attn-4's "
        "`…flash_attncuteflash_bwd…`; the zero fill or cast after the Gluon kernel's range is that backward's; "
        "PyTorch's layout copies stay 'other') and summed per backend; in bold, each backward's total. µs: ncu's "
        "durations (each kernel replayed alone, so no overlap). TFLOP/s and % of peak: the algorithmic FLOPs (dK/dV "
        "4 products of N×N×D, with atomics 5, dQ 3, a whole backward 5; halved causal) over that time, against the "
        "tensor-core peak at the clock ncu measured. Tensor ops: counted over predicted. Registers, shared bytes, "
        "theoretical occupancy, tensor pipe and stalls: the longest kernel of the row. Sources: "
        + ", ".join(f"`{rel(p)}`" for p in sorted(set(prof.source))) + ".", "",
        md_table(["range", "N", "causal", "kernels", "µs", "TFLOP/s", "% of peak", "tensor ops counted/predicted",
                  "regs", "smem B", "occupancy", "tensor pipe", "top stalls"], rows)])


BWD_SWEEP_CONFIG, BWD_SWEEP_KEYS = CONFIG_FIELDS, KEY_FIELDS   # fa2lab.backward_sweep's
BWD_SWEEP_MEASURED = ("bwd_ms", "tflops", "pct_of_sdpa", "sdpa_bwd_ms")
BWD_DEFAULTS = ("SM90_DEFAULT", "SM90_FP32_D128", "SM80_DEFAULT", "FALLBACK")   # fa2triton.backward_config's names


def bwd_config_text(r) -> str:
    return (f"dkdv {int(r.dkdv_q_tile)}×{int(r.dkdv_k_tile)}, dq {int(r.dq_q_tile)}×{int(r.dq_k_tile)}, "
            f"{int(r.num_warps)}w, {int(r.num_stages)}s")


def backward_default(df: pd.DataFrame):
    """(the configuration the Triton backward uses when none is given, for the sweep's GPU, head dimension and
    bf16; its name in fa2triton/backward_config.py): default_config of that module, for the architecture the sweep
    rows name (sm_90 if none is named)."""
    import torch

    from fa2triton import backward_config as bwd

    arch = next((a for a in df.get("arch", pd.Series(dtype=object)).dropna().astype(str)[::-1]
                 if re.fullmatch(r"sm_\d+a?", a)), "sm_90")
    D = int(pd.to_numeric(df["D"], errors="coerce").dropna().iloc[-1]) if "D" in df and df["D"].notna().any() else 64
    cfg = bwd.default_config(D, torch.bfloat16, arch)
    picked = getattr(bwd, "PICKED", {}).get("sm_" + arch.removeprefix("sm_").rstrip("a"))
    name = "the sweep's pick, backward_configs.json" if picked is not None and picked == cfg else next(
        (n for n in BWD_DEFAULTS if getattr(bwd, n, None) == cfg), "default_config")
    return cfg, name, arch


def backward_sweep(gpu, root):
    """(every row, the best ok row per (N, causal, dq_mode), the file) of results/<gpu>/sweep_bwd/
    flash_backward_triton.csv (fa2lab.backward_sweep; the latest row per configuration); (None, None, path)
    if it has not run. A malformed file, or one without a single ok configuration, is a ResultsError naming it."""
    path = data.root(root) / gpu / "sweep_bwd" / "flash_backward_triton.csv"
    df = optional(path, (*BWD_SWEEP_KEYS, "status"))
    if df is None:
        return None, None, path
    df = numeric(df, path, ("N", "causal", *BWD_SWEEP_CONFIG))
    df = numeric(df.assign(**{c: df[c] if c in df else np.nan for c in BWD_SWEEP_MEASURED}), path, BWD_SWEEP_MEASURED)
    df = latest_rows(df.assign(status=df["status"].astype(str), dq_mode=df["dq_mode"].astype(str)), BWD_SWEEP_KEYS)
    ok = df[(df.status == "ok") & df.bwd_ms.notna()]
    if ok.empty:
        raise data.ResultsError(f"results file {path} has no ok configuration")
    best = ok.loc[ok.groupby(["N", "causal", "dq_mode"])["bwd_ms"].idxmin()]
    return df, best, path


def section_backward_sweep(gpu, root) -> str:
    title = "### The backward's configuration sweep (issue 7)"
    df, best, path = backward_sweep(gpu, root)
    if df is None:
        return not_yet(title, "invoke sweep-backward [--dq-mode atomic]", path)
    cfg, name, arch = backward_default(df)
    is_default = np.logical_and.reduce([df[c] == getattr(cfg, c) for c in BWD_SWEEP_CONFIG])
    default = df[is_default]
    rows = []
    mode_order = {"separate": 0, "atomic": 1}   # sweep_backward.py's default first
    best = best.sort_values(["dq_mode", "causal", "N"], key=lambda c: c.map(lambda m: mode_order.get(m, 2))
                            if c.name == "dq_mode" else c, kind="stable")
    for r in best.itertuples():
        d = default[(default.N == r.N) & (default.causal == r.causal) & (default.dq_mode == r.dq_mode)]
        d = d.iloc[-1] if len(d) else None
        d_ok = d is not None and d.status == "ok" and pd.notna(d.bwd_ms)
        rows.append([int(r.N), "yes" if r.causal else "no", r.dq_mode, bwd_config_text(r), fmt(r.bwd_ms, ".3f"),
                     fmt(r.tflops, ".1f"), fmt(r.pct_of_sdpa, ".0f", "%"),
                     fmt(d.bwd_ms, ".3f") if d_ok else ("not swept" if d is None else d.status),
                     fmt(d.pct_of_sdpa, ".0f", "%") if d_ok else "–",
                     fmt(100 * r.bwd_ms / d.bwd_ms, ".0f", "%") if d_ok else "–"])
    shapes_per_mode = df.groupby("dq_mode")[["N", "causal"]].apply(lambda g: len(g.drop_duplicates()))
    counts = "; ".join(f"{mode} dQ ({shapes_per_mode[mode]} shape(s), {len(g)} rows): "
                       + ", ".join(f"{n} {s}" for s, n in g.status.value_counts().items())
                       for mode, g in sorted(df.groupby("dq_mode"), key=lambda kv: mode_order.get(kv[0], 2)))
    text = [title,
            "The Triton backward of fa2triton/flash_backward_triton.py with each configuration launched as given (dK/dV's query × key "
            "tile, dQ's query × key tile, warps, stages), checked against SDPA's gradients and timed with do_bench "
            f"against SDPA's backward in the same process (% of SDPA: SDPA's ms over ours); the latest row per "
            f"configuration. Rows per status: {counts}. The default: `{name}` ({cfg}; default_config for {arch}, "
            f"read from the module); its share of the best: the best's ms over the default's. Source: `{rel(path)}`.",
            "", md_table(["N", "causal", "dQ", "best", "bwd ms", "TFLOP/s", "% of SDPA", "default: bwd ms",
                          "default: % of SDPA", "default's share of the best"], rows)]
    modes = sorted(set(best.dq_mode))
    if len(modes) >= 2:
        lines = []
        for causal in (0, 1):
            at = best[(best.N == 4096) & (best.causal == causal)].sort_values("bwd_ms")
            if len(at) < 2:
                lines.append(f"{data.mask_name(causal)}: not every dQ mode has an ok configuration at N = 4096")
                continue
            a, b = at.iloc[0], at.iloc[1]
            lines.append(f"{data.mask_name(causal)}: {a.dq_mode} ({a.bwd_ms:.3f} ms against {b.dq_mode}'s "
                         f"{b.bwd_ms:.3f} ms, {b.bwd_ms / a.bwd_ms:.2f}×)")
        text += ["", "The faster dQ mode at N = 4096, best against best: " + "; ".join(lines) + "."]
    else:
        text += ["", f"Only the {modes[0]} dQ mode has been swept (`invoke sweep-backward --dq-mode "
                 f"{'atomic' if modes[0] == 'separate' else 'separate'}` adds the other)."]
    return "\n".join(text)
