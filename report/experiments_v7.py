"""v7's experiments beyond the harness, one page each: the Gluon forward, the cold start, do_bench across processes,
what a work item costs, and v7's tl autotuner across processes."""

from __future__ import annotations


import numpy as np
import pandas as pd

from figures import data
from report.tables import fmt, latest_rows, md_table, numeric, optional, rel, span
from report.experiment_pages import experiment_not_run


def section_gluon(gpu, root) -> str:
    """The Gluon forward's best configuration per run and shape (by graph replay) beside v7's tl path and
    SDPA from the same run (experiments/run.py gluon; figures.data.gluon_best): one row per (run, shape),
    runs in the order they ran; then every configuration each run timed at N = 4096 non-causal."""
    try:
        df, path = data.gluon(gpu, root)
    except data.MissingResults:
        return experiment_not_run("The Gluon forward", "gluon", data.root(root) / gpu / "experiments" / "gluon.csv")

    def cell(commit, variant, N, causal, frame=df):
        r = frame[(frame.git_commit == commit) & (frame.variant == variant) & (frame.N == N)
                  & (frame.causal == causal)].iloc[0]
        return (f"{span(r.ms, r.ms_min, r.ms_max, '.3f')}, graph {fmt(r.graph_ms, '.3f')} "
                f"({fmt(r.graph_pct_of_sdpa, '.1f', '%')})")

    def every_config(g):
        """The variants of one run's rows at one shape: its configurations by graph time, then the references."""
        ours = g[~g.variant.isin(data.GLUON_NOT_CONFIGS)].sort_values("graph_ms").variant
        return [*ours, *[v for v in data.GLUON_NOT_CONFIGS if v in set(g.variant)]]

    rows, headline = [], []
    for b in data.gluon_best(df).itertuples():
        sdpa = df[(df.git_commit == b.git_commit) & (df.variant == data.SDPA) & (df.N == b.N)
                  & (df.causal == b.causal)].iloc[0]
        rows.append([b.git_commit, b.N, "yes" if b.causal else "no", b.configs, b.best,
                     cell(b.git_commit, b.best, b.N, b.causal), cell(b.git_commit, "v7_tl", b.N, b.causal),
                     f"{fmt(sdpa.ms, '.3f')}, graph {fmt(sdpa.graph_ms, '.3f')}"])
        if b.N == 4096 and not b.causal:
            g = df[(df.git_commit == b.git_commit) & (df.N == b.N) & (df.causal == 0)]
            headline += [[b.git_commit, v, cell(b.git_commit, v, b.N, 0)] for v in every_config(g)]
    wide_df, _ = data.gluon(gpu, root, D=128)
    wide_text = []
    for causal, what in ((0, "non-causal"), (1, "causal")):
        wide = []
        for (_, commit, N), g in wide_df[wide_df.causal == causal].groupby(["run_start", "git_commit", "N"],
                                                                           sort=True):
            wide += [[commit, N, v, cell(commit, v, N, causal, wide_df)] for v in every_config(g)]
        wide_text += [] if not wide else [
            "", f"Head dimension 128 (the harness's B and H), {what}: every configuration each run timed, by graph "
            "replay, with v7's tl path, the Gluon path (v7_gluon: from candidates_for(128), in the runs from "
            "the first Gluon candidate that fitted there on; causal inputs take it, raced against the tl path, in "
            "the later runs) and SDPA from the same rounds.", "",
            md_table(["run", "N", "configuration", "do_bench ms, graph ms (% of SDPA)"], wide)]
    return "\n".join([
        "The Gluon forward (`fa2triton/gluon/gluon_forward_hopper.py`; v7's non-causal path by default, whose "
        "harness rows are in the main table): per run and "
        "shape, the configuration with the least graph-replay time among those the run timed, beside v7's tl "
        "path and SDPA timed in the same interleaved rounds; runs in the order they ran. Cells: do_bench ms "
        "(min–max of the rounds), graph ms (% of SDPA's graph time). The Gluon rows' do_bench includes the host's "
        "time wherever its per-call work (before the lean repeat, descriptors built on every call; with "
        "split_tail, two allocations and the combine's launch) outlasts the kernel, so graph replay is the "
        f"comparison. Source: `{rel(path)}`; "
        "figure: `figures/out/<gpu>/gluon_rounds.png`.", "",
        md_table(["run", "N", "causal", "configs", "best Gluon", "its time", "v7 tl path", "SDPA"], rows), "",
        "Every configuration each run timed at N = 4096, non-causal (the shape its levers were aimed at), by "
        "graph replay, with v7's tl path and SDPA from the same rounds. Labels: wsC = C consumer warpgroups of "
        "64 rows, x128 = 128-key tiles, Ns = K/V slots, preg/psmem = P in registers/shared memory, pp = "
        "ping-pong between the consumers, pin = a store of l ahead of the P V wait, split = the last wave's "
        "tiles split along the keys (split2, split3: at least 2, 3 parts per SM), persist = one program per SM "
        "looping over work items, ds = O stored from the wgmma registers, ta = each consumer thread arrives on "
        "the slot and turn barriers, io = the next work item's first Q Kᵀ issued before the epilogue, pf = the "
        "TMA descriptors prefetched at the start, ts = O written by a TMA store from shared memory, vb = each "
        "slot's V on a barrier of its own (Q Kᵀ waits for K alone), tm = each tile's row maxima folded by halves, "
        "ua = the key loop's mbarrier arrives and slot wait without the bar.sync Triton puts before them, px4/px8 = a "
        "quarter/an eighth of the exponentials by a cubic on the FMA pipe instead of the MUFU, mix = whole rounds of "
        "192-row items, then each head's rest in 128-row items (the third consumer idle), rs = the row sums of P by "
        "the tensor cores, st = the next work item's first scores issued beside this item's last P V, er = 240 "
        "registers for each of two consumers, la = the next key tile's scores issued before each softmax "
        "(lookahead), et/et1 = the consumers' turns held around each key tile's exponentials (passed after both / "
        "one of a thread's row sums), ff = each item's first key tile run in the key loop, l2 = the inputs asked "
        "into L2 ahead of the slots, qm = the work items in query-tile order, v0 = a program's first V on a barrier "
        "of its own, q1 = one query-tile buffer, h1/h2 = the second/third key tile held back until the first has "
        "arrived, n4/n8 = a 4-slot loader keeping 3 tiles ahead after a program's first 4/8, l2p256 = TMA "
        "descriptors with 256 bytes of L2 promotion, sc = the consumers calling one non-inlined copy of their code, "
        "sc2 = that copy inlined once into the kernel by a PTX stage, sc3 = sc2 beside a one-warp loader and an idle "
        "default partition.", "",
        md_table(["run", "configuration", "do_bench ms, graph ms (% of SDPA)"], headline), *wide_text])


COLDSTART_COLUMNS = ("variant", "N", "causal", "protocol", "ms")


def section_coldstart(gpu, root) -> str:
    """What do_bench's flush costs v7 and SDPA (experiments/run.py coldstart): each kernel's own GPU duration
    (timer = kernel, the latest run per Triton) per protocol, then every run's per-call event times (rows before the
    timer column are event times), each with the Triton it ran under, so that two Tritons' runs sit side by side."""
    path = data.root(root) / gpu / "experiments" / "coldstart.csv"
    df = optional(path, COLDSTART_COLUMNS)
    if df is None:
        return experiment_not_run("Cold start", "coldstart", path)
    df = numeric(df, path, ("N", "causal", "ms", "ms_min", "ms_max"))
    df["timer"] = df["timer"].fillna("events") if "timer" in df.columns else "events"
    df["triton"] = df["triton"].fillna("?").astype(str) if "triton" in df.columns else "?"
    text = ["What do_bench's 256 MB flush costs each kernel, non-causal, in µs per call. "
            "Protocols: spin (a spin kernel only, nothing evicted), flush (do_bench's), flush_data (the flush, "
            "then Q, K, V read back into L2: code cold, data warm), flush_code (the flush, then the same call on "
            f"other inputs: code warm, data cold), graph (CUDA-graph replay). Source: `{rel(path)}`."]
    # v7's default kernels: a run with an FA2_V7_* switch away from its default is in the events table only
    kernel = latest_rows(data.default_rows(df[df.timer == "kernel"]), ("triton", "variant", "N", "causal", "protocol"))
    if len(kernel):
        protocols = list(dict.fromkeys(kernel.protocol))
        rows = []
        for (N, causal, triton), g in kernel.groupby(["N", "causal", "triton"], sort=True):
            t = g.set_index(["variant", "protocol"]).ms * 1e3
            for v in dict.fromkeys(g.variant):
                rows.append([int(N), "yes" if causal else "no", v]
                            + [fmt(t.get((v, p), float("nan")), ".2f") for p in protocols]
                            + [fmt(t.get((v, p), float("nan")) - t.get((data.SDPA, p), float("nan")), "+.2f")
                               if v != data.SDPA else "–" for p in protocols]
                            + [", ".join(dict.fromkeys(g[g.variant == v].git_commit.astype(str)))
                               if "git_commit" in g else "?", triton])
        text += ["", f"The kernels alone: the sum over a call's kernels of their median GPU duration "
                 f"(torch.profiler), without events or launch latency, v7's default kernels (every FA2_V7_* "
                 "switch at its default; the latest run per shape and Triton, whose commit and Triton are the last "
                 "columns); the columns before them are the difference from SDPA's kernel in the same run.", "",
                 md_table(["N", "causal", "variant", *protocols, *(f"{p} − SDPA" for p in protocols), "commit",
                           "Triton"], rows)]
    events = df[df.timer == "events"].copy()
    if len(events):
        protocols = list(dict.fromkeys(events.protocol))
        # a run is a commit and the kernel switches it was made with (FA2_V7_*: one commit, several runs)
        events["run"] = events.git_commit.astype(str) + (
            events.switches.fillna("").map(lambda s: f" ({s})" if s else "") if "switches" in events else "")
        rows = []
        for (run, triton, N, causal), g in events.groupby(["run", "triton", "N", "causal"], sort=False):
            g = g.set_index(["variant", "protocol"])
            for v in dict.fromkeys(g.index.get_level_values(0)):
                rows.append([run, triton, int(N), "yes" if causal else "no", v]
                            + [span(g.ms[(v, p)] * 1e3, g.ms_min[(v, p)] * 1e3, g.ms_max[(v, p)] * 1e3, ".1f")
                               if (v, p) in g.index else "–" for p in protocols])
        text += ["", "Per call between two CUDA events, after each protocol's preparation (median of the rounds, "
                 "min–max). These include the launch and the events, and the host wherever it fell behind the "
                 "preparation (a spin time far above the kernel's own says so).", "",
                 md_table(["run", "Triton", "N", "causal", "variant", *protocols], rows)]
    return "\n".join(text)


DOBENCH_COLUMNS = ("variant", "N", "causal", "pid", "round", "ms", "host_us", "flush_us")


def section_dobench(gpu, root) -> str:
    """do_bench's spread at small N over fresh processes (experiments/run.py dobench): per process, the flush's GPU
    time, each call's host time and the median of its do_bench rounds, v7 against SDPA."""
    path = data.root(root) / gpu / "experiments" / "dobench.csv"
    df = optional(path, DOBENCH_COLUMNS)
    if df is None:
        return experiment_not_run("do_bench across processes", "dobench", path)
    df = numeric(df, path, ("N", "causal", "round", "ms", "host_us", "flush_us"))
    if "sampler" not in df.columns:
        df["sampler"] = 0
    df["sampler"] = df["sampler"].fillna(0).astype(int)
    rows, pcts = [], []
    for (commit, pid, N, causal), g in df.groupby(["git_commit", "pid", "N", "causal"], sort=False):
        t = {v: g[g.variant == v] for v in ("v7", data.SDPA)}
        if any(len(x) == 0 for x in t.values()):
            continue
        pct = 100 * t[data.SDPA].ms.median() / t["v7"].ms.median()
        pcts.append(pct)
        rows.append([str(commit)[:7], str(pid), int(N), "yes" if causal else "no",
                     "yes" if g.sampler.iloc[0] else "no", fmt(g.flush_us.iloc[0], ".1f")]
                    + [fmt(t[v].host_us.iloc[0], ".1f") for v in t]
                    + [span(t[v].ms.median() * 1e3, t[v].ms.min() * 1e3, t[v].ms.max() * 1e3, ".1f") for v in t]
                    + [fmt(pct, ".1f", "%")])
    summary = (f" Over the {len(pcts)} processes v7 ran at {fmt(min(pcts), '.1f')}–{fmt(max(pcts), '.1f')}% of SDPA "
               f"(median {fmt(float(np.median(pcts)), '.1f')}%)." if pcts else "")
    return "\n".join([
        "do_bench across fresh processes at small N: in each process the GPU time of do_bench's 256 MB flush, each "
        "call's host time per call (back to back), and the median (min–max) of its do_bench rounds, v7 and SDPA "
        "timed in alternating order; `sampler`: the rounds ran inside the harness's NVML clock-sampling thread."
        + summary + f" Source: `{rel(path)}`.", "",
        md_table(["commit", "process", "N", "causal", "sampler", "flush µs", "v7 host µs", "SDPA host µs",
                  "v7 do_bench µs", "SDPA do_bench µs", "% of SDPA"], rows)])


TL_PICK_COLUMNS = ("kind", "pid", "N", "causal", "candidate", "picked")
TL_PICK_TIMES = ("tuner_ms", "race_ms", "graph_ms", "ms", "clock_before_mhz", "clock_after_mhz")


def section_tl_pick(gpu, root) -> str:
    """What v7's tl autotuner and race timed in fresh processes, beside each candidate pinned (experiments/run.py
    tl-pick): per commit, shape and candidate, how many processes picked it, the autotuner's and the race's timings,
    and the pinned candidate's graph replay and do_bench, with the SM clock."""
    path = data.root(root) / gpu / "experiments" / "tl_pick.csv"
    df = optional(path, TL_PICK_COLUMNS)
    if df is None:
        return experiment_not_run("v7's tl autotuner across processes", "tl_pick", path)
    df = numeric(df, path, ("N", "causal"))
    for c in TL_PICK_TIMES:
        df[c] = pd.to_numeric(df[c], errors="coerce") if c in df.columns else np.nan
    df["cand"] = df.candidate.astype(str).str.removeprefix("tma:")
    df["pick"] = df.picked.astype(str).str.removeprefix("tma:")

    def us(x):
        x = x.dropna() * 1e3
        return span(x.median(), x.min(), x.max(), ".1f") if len(x) else "–"

    rows = []
    for (commit, N, causal), g in df.groupby(["git_commit", "N", "causal"], sort=False):
        if not (g.kind == "pinned").any():   # the other harness shapes' timings stay in the file
            continue
        picks = g.drop_duplicates("pid").pick
        for cand in dict.fromkeys(g.cand):
            c = g[g.cand == cand]
            tuner, race, pinned = (c[c.kind == k] for k in ("tuner", "race", "pinned"))
            clocks = (f"{fmt(tuner.clock_before_mhz.median(), '.0f')}→{fmt(tuner.clock_after_mhz.median(), '.0f')}"
                      if len(tuner) else "–")
            after = pinned.clock_after_mhz.dropna()
            rows.append([str(commit)[:7], int(N), "yes" if causal else "no", cand,
                         f"{int((picks == cand).sum())} of {len(picks)}", us(tuner.tuner_ms), clocks,
                         us(race.race_ms), us(pinned.graph_ms), us(pinned.ms),
                         span(after.median(), after.min(), after.max()) if len(after) else "–"])
    return "\n".join([
        "v7's tl autotuner and race across fresh processes: v7 called once at every harness shape in each process, "
        "each timing its tl autotuner made (its kept median, the SM clock before → after, medians over the processes) "
        "and, in the later runs, each timing of the race between the Gluon and tl launches; then each "
        "candidate pinned and timed by graph replay and do_bench (its flush), with the SM clock after, µs as median "
        "(min–max), at the shapes whose candidates were pinned (the others' timings are in the file). picked: the "
        f"processes whose v7 ran that candidate. Source: `{rel(path)}`.", "",
        md_table(["commit", "N", "causal", "candidate", "picked", "autotuner µs", "autotuner MHz", "race µs",
                  "pinned graph µs", "pinned do_bench µs", "pinned MHz after"], rows)])


ITEMS_COLUMNS = ("variant", "heads", "N", "rounds_per_sm", "protocol", "ms")


def section_items(gpu, root) -> str:
    """What a round of work items costs beside its key tiles (experiments/run.py items): per run, variant and protocol
    the kernel's time at each shape (the same work in 1, 2, 4 or 8 rounds of 128-row items per SM) and the least-squares
    line through them: µs per round of items, and at none (the key tiles alone)."""
    path = data.root(root) / gpu / "experiments" / "items.csv"
    df = optional(path, ITEMS_COLUMNS)
    if df is None:
        return experiment_not_run("What a work item costs", "items", path)
    df = numeric(df, path, ("heads", "N", "rounds_per_sm", "ms"))
    shapes_ = list(dict.fromkeys(zip(df.heads.astype(int), df.N.astype(int), df.rounds_per_sm.astype(int))))
    rows = []
    for (commit, variant, protocol), g in df.groupby(["git_commit", "variant", "protocol"], sort=False):
        us = {(int(h), int(n)): t * 1e3 for h, n, t in zip(g.heads, g.N, g.ms)}
        slope, at_none = np.polyfit(g.rounds_per_sm.astype(float), g.ms.astype(float) * 1e3, 1) if len(g) > 1 \
            else (float("nan"), float("nan"))
        rows.append([str(commit)[:7], variant, protocol] + [fmt(us.get((h, n), float("nan")), ".1f")
                                                            for h, n, _ in shapes_]
                    + [fmt(slope, ".2f"), fmt(at_none, ".1f")])
    return "\n".join([
        "What a work item costs beside its key tiles (`invoke experiment items`): the same work (heads × N² = 32 × "
        "2048²) in 1, 2, 4 and 8 rounds of 128-row items per SM, each round 64 key tiles of 128 in all; the kernel's "
        "GPU time (torch.profiler, after a spin, after do_bench's flush (the later runs) or in graph "
        "replay, µs) and the least-squares line through them: µs per round of items, and at none (the key tiles' own "
        f"time). Source: `{rel(path)}`.", "",
        md_table(["commit", "variant", "protocol", *(f"{h}×{n} ({r}/SM)" for h, n, r in shapes_),
                  "µs per round", "µs at none"], rows)])


def section_experiments(gpu, root) -> str:
    """Every experiment's section of this module and experiments.py, one after another (each also has a page)."""
    from report.experiment_pages import (section_exp2_poly, section_grid, section_launch_order, section_pcast,
                                            section_timing)
    parts = (section_pcast, section_launch_order, section_timing, section_exp2_poly, section_grid, section_gluon,
             section_coldstart, section_dobench, section_items, section_tl_pick)
    return "\n\n".join(["### Experiments beyond the harness", *(f(gpu, root) for f in parts)])
