"""The host path: do_bench against CUDA-graph replay, and a call's host time step by step."""

from __future__ import annotations


import pandas as pd

from fa2triton import versions
from figures import data
from profiling.host_steps import STEPS as HOST_STEPS
from report.tables import NOT_YET, fmt, latest_rows, md_table, not_yet, numeric, optional, rel, span


def hostpath_table(gpu, root):
    """The host-path rows of each version that has them; [] when none has (a malformed file is an error)."""
    try:
        return data.hostpath_tables(gpu, root)
    except data.MissingResults:
        return []


def section_hostpath(gpu, root) -> str:
    frames = hostpath_table(gpu, root)
    if not frames:
        return f"### Host path\n{NOT_YET}: `invoke bench` with graphs writes results/{gpu}/hostpath/."
    # do_bench without its flush (harness column noflush_ms, added after the first H200 protocol)
    noflush = any("noflush_ms" in df.columns and df["noflush_ms"].notna().any() for _, df, _ in frames)
    rows = []
    for v, df, _ in frames:
        for (causal, N), g in df.groupby(["causal", "N"]):
            row = [v, N, "yes" if causal else "no", g.ms.median() * 1e3]
            if noflush:
                row.append(g.noflush_ms.median() * 1e3 if "noflush_ms" in g else float("nan"))
            row += [g.graph_ms.median() * 1e3, g.host_us.median(), g.sdpa_ms.median() * 1e3]
            if noflush:
                row.append(g.sdpa_noflush_ms.median() * 1e3 if "sdpa_noflush_ms" in g else float("nan"))
            rows.append(row + [g.sdpa_graph_ms.median() * 1e3, g.sdpa_host_us.median()])
    header = ["version", "N", "causal", "do_bench", *(["no flush"] if noflush else []), "graph", "host/call",
              "SDPA do_bench", *(["SDPA no flush"] if noflush else []), "SDPA graph", "SDPA host/call"]
    return "\n".join([
        "### do_bench against CUDA-graph replay, and the host's time per call (issue 8)",
        "µs, medians of the latest protocol; sources: " + ", ".join(f"`{rel(p)}`" for _, _, p in frames) + "."
        + (" 'no flush': per-call CUDA events like do_bench's, without its 256 MB cache flush between calls "
           "(fa2lab.timers.bench_noflush_ms): do_bench − no flush is what the flush costs the next call, "
           "no flush − graph what a graph saves per call." if noflush else ""), "",
        md_table(header, rows)])


# ---------------------------------------------------------------- the host path step by step (issue 8)

HOST_STEPS_COLUMNS = ("version", "N", "causal", "step", "us_median", "us_min", "us_max")
# (column, minuend, subtrahend): the differences profiling/host_steps.py's docstring reads ("apply - cache_hit is
# what the autograd.Function and the lookup add; cache_hit - allocate is the launch"), and ours against SDPA's
HOST_STEP_DIFFS = (("apply's own (apply − cache_hit)", "apply", "cache_hit"),
                   ("launch (cache_hit − allocate)", "cache_hit", "allocate"),
                   ("ours − SDPA (apply − sdpa)", "apply", "sdpa"),
                   ("backward − SDPA's (backward − sdpa_backward)", "backward", "sdpa_backward"))


def host_steps(gpu, root):
    """(the latest row per version, shape and step of results/<gpu>/hostpath/steps.csv, the file);
    (None, path) if `invoke host-steps` has not run; a malformed file is a ResultsError naming it."""
    path = data.root(root) / gpu / "hostpath" / "steps.csv"
    df = optional(path, HOST_STEPS_COLUMNS)
    if df is None:
        return None, path
    df = numeric(df, path, ("N", "causal", "us_median", "us_min", "us_max"))
    df = df.assign(version=df["version"].astype(str), step=df["step"].astype(str))
    return latest_rows(df, ("version", "N", "causal", "step")), path


def host_step_table(df: pd.DataFrame) -> tuple[list[str], list[dict]]:
    """(the steps that have data, in profiling/host_steps.py's order then any other; per (version, N, causal)
    in registry order a dict: version, N, causal, step -> (median, min, max) µs, and each difference's µs)."""
    steps = [s for s in HOST_STEPS if s in set(df.step)] + [s for s in dict.fromkeys(df.step) if s not in HOST_STEPS]
    order = {v: i for i, v in enumerate(versions.NAMES)}
    out = []
    for (v, N, causal), g in df.groupby(["version", "N", "causal"]):
        by = g.set_index("step")
        times = {s: (float(by.us_median[s]), float(by.us_min[s]), float(by.us_max[s])) for s in by.index}
        diffs = {name: times[a][0] - times[b][0] if a in times and b in times else float("nan")
                 for name, a, b in HOST_STEP_DIFFS}
        out.append({"version": v, "N": int(N), "causal": int(causal), "times": times, "diffs": diffs})
    out.sort(key=lambda r: (order.get(r["version"], len(order)), r["version"], r["causal"], r["N"]))
    return steps, out


def section_host_steps(gpu, root) -> str:
    title = "### Where a call's host time goes, step by step (issue 8)"
    df, path = host_steps(gpu, root)
    if df is None:
        return not_yet(title, "invoke host-steps", path)
    steps, table = host_step_table(df)
    rows = []
    for r in table:
        t = r["times"]
        rows.append([r["version"], r["N"], "yes" if r["causal"] else "no"]
                    + [span(*t[s], ".1f") if s in t else "–" for s in steps]
                    + [fmt(r["diffs"][name], "+.1f") for name, _, _ in HOST_STEP_DIFFS])
    return "\n".join([
        title,
        "µs per call, each step timed alone as the harness times host_us (calls back to back, the GPU queue never "
        "drained): the median over the repeats (min–max), the latest row per step. The steps are "
        "profiling/host_steps.py's (sdpa: SDPA's forward; apply: FlashAttentionTriton.apply, as the harness calls it: "
        "through autograd's Function machinery in rows from before "
        "fa2triton.lean_path.LeanApply, and without it from then on, since no input needs a gradient; apply_grad: the "
        "same with Q requiring one; function_nop: an "
        "empty autograd.Function; cache_hit: the cached launch called directly; signature: the lookup; allocate: "
        "O and L; descriptors: v7's TMA descriptors; launch: Triton's launcher alone; sdpa_backward, backward: "
        "autograd.grad through SDPA and ours on a kept graph; backward_direct: the Triton backward called "
        "directly). The last four columns are differences of the medians. Source: " + f"`{rel(path)}`.", "",
        md_table(["version", "N", "causal", *steps, *(name for name, _, _ in HOST_STEP_DIFFS)], rows)])
