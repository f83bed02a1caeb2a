"""The experiments beyond the harness (one page each under docs/report/): the registry of their files, keys and
tasks, and the sections of v6's experiments (P_CAST, launch order, small-N timing) and of v7's exp2 polynomial and grid."""

from __future__ import annotations



from figures import data
from report.tables import NOT_YET, fmt, latest_rows, md_table, numeric, optional, rel, span


# ---------------------------------------------------------------- experiments beyond the harness

EXPERIMENTS = {"pcast": ("variant", "p_cast", "N", "causal", "ms", "ms_min", "ms_max", "tflops", "mae_vs_float64"),
               "launch_order": ("order", "config", "N", "causal", "ms", "speedup_vs_forward"),
               "timing": ("version", "N", "causal", "ms", "graph_ms", "host_us", "sdpa_ms", "sdpa_graph_ms",
                          "sdpa_host_us", "pct_of_sdpa")}
EXPERIMENTS["other_shapes"] = ("who", "B", "H", "N", "D", "causal", "ms", "ms_min", "ms_max", "tflops", "pct_of_sdpa",
                               "v7_over_v6", "v7_path", "max_abs_err_vs_sdpa")
EXPERIMENTS["exp2_poly"] = ("variant", "exp2_poly", "config", "autotuner_pick", "N", "causal", "ms", "ms_min",
                            "ms_max", "tflops", "speedup_vs_exp2_poly0", "rel_err_vs_sdpa")
EXPERIMENTS["grid"] = ("variant", "N", "causal", "ms", "ms_min", "ms_max", "tflops", "pct_of_sdpa",
                       "speedup_vs_per_tile", "rel_err_vs_sdpa")
EXPERIMENTS["bwd_modes"] = ("who", "N", "causal", "auto_picks", *(f"{w}_us{s}" for w in ("do_bench", "host", "graph")
                                                                  for s in ("", "_min", "_max")))
EXPERIMENTS["bwd_gluon_ws"] = ("who", "N", "D", "causal", "rounds", "max_rel_err_vs_fp64",
                               *(f"{m}{s}" for m in ("graph_us", "dobench_us", "v7_over_graph", "cudnn_over_dobench")
                                 for s in ("", "_min", "_max")), "graph_tflops")
EXPERIMENT_KEYS = {"pcast": ("p_cast", "N", "causal"), "launch_order": ("order", "config", "N", "causal"),
                   "timing": ("version", "N", "causal"), "other_shapes": ("who", "B", "H", "N", "D", "causal"),
                   "exp2_poly": ("variant", "config", "N", "causal"), "grid": ("variant", "N", "causal"),
                   "bwd_modes": ("who", "N", "D", "causal"), "bwd_gluon_ws": ("who", "N", "D", "causal")}
EXPERIMENT_TASK = {"pcast": "invoke experiment pcast", "launch_order": "invoke experiment launch-order",
                   "timing": "invoke experiment timing", "other_shapes": "invoke experiment other-shapes",
                   "bwd_modes": "invoke experiment bwd-modes", "gluon": "invoke experiment gluon",
                   "coldstart": "invoke experiment coldstart", "dobench": "invoke experiment dobench",
                   "items": "invoke experiment items", "tl_pick": "invoke experiment tl-pick",
                   "bwd_gluon_ws": "invoke experiment bwd-gluon-ws"}
EXPERIMENT_TEXT = ("variant", "order", "config", "version", "who", "v7_path", "auto_picks")   # not numbers


def experiment(gpu, root, name: str, rows=None, keys=None):
    """(the latest rows per key of results/<gpu>/experiments/<name>.csv, the file); (None, path) if not run. rows:
    a function that picks the rows to take the latest of (a form of the experiment, where a file holds two); keys:
    the columns a row is latest for (default the experiment's EXPERIMENT_KEYS)."""
    path = data.root(root) / gpu / "experiments" / f"{name}.csv"
    df = optional(path, EXPERIMENTS[name])
    if df is None:
        return None, path
    numbers = [c for c in EXPERIMENTS[name] if c not in EXPERIMENT_TEXT]
    df = numeric(df, path, numbers)
    return latest_rows(df if rows is None else rows(df), EXPERIMENT_KEYS[name] if keys is None else keys), path


def experiment_not_run(label: str, name: str, path) -> str:
    """The line for an experiment without rows: the task that writes them, or for a retired one (its option left the
    kernels: experiments.RETIRED) that it can only be rerun at its last commit (docs/experiments.md)."""
    if name not in EXPERIMENT_TASK:
        return (f"{label}: {NOT_YET}; the experiment is retired (its option left the kernels), so it runs only at the "
                f"last commit that had it (docs/experiments.md) and writes `{rel(path)}`.")
    return f"{label}: {NOT_YET} (`{EXPERIMENT_TASK[name]}` writes `{rel(path)}`)."


def by_shape(df, who: str):
    """(N, causal, that shape's rows indexed by the column `who`) per shape, non-causal first, N ascending."""
    for (causal, N), g in df.groupby(["causal", "N"], sort=True):
        yield int(N), "yes" if causal else "no", g.set_index(who)


def section_pcast(gpu, root) -> str:
    """Where v6 rounds P (experiments/run.py pcast): time, TFLOP/s and error of each P_CAST variant."""
    df, path = experiment(gpu, root, "pcast")
    if df is None:
        return experiment_not_run("Where P is rounded", "pcast", path)
    base = df[df.p_cast == df.p_cast.min()].ms
    rows = [[r.variant, r.N, "yes" if r.causal else "no", span(r.ms, r.ms_min, r.ms_max, ".3f"),
             fmt(r.tflops, ".1f"), fmt(r.ms / base.iloc[0], ".2f", "×") if len(base) else "–",
             fmt(r.mae_vs_float64, ".3e"), fmt(getattr(r, "bf16_rounding_floor", float("nan")), ".3e")]
            for r in df.sort_values("p_cast").itertuples()]
    return "\n".join([f"Where P is rounded (v6's P_CAST; ms: median of the interleaved rounds' do_bench medians, "
             f"min–max; error: mean absolute error against float64; floor: the exact output rounded to bf16). "
             f"Source: `{rel(path)}`.", "",
             md_table(["variant", "N", "causal", "ms", "TFLOP/s", "time vs first", "MAE vs float64",
                       "bf16 floor"], rows)])


def section_launch_order(gpu, root) -> str:
    """v6's launch orders with the configuration pinned (experiments/run.py launch_order)."""
    df, path = experiment(gpu, root, "launch_order")
    if df is None:
        return experiment_not_run("Launch order", "launch_order", path)
    orders = list(dict.fromkeys(df.order))
    rows = []
    for (N, causal, cfg), g in df.groupby(["N", "causal", "config"], sort=True):
        g = g.set_index("order")
        rows.append([int(N), "yes" if causal else "no", f"`{cfg}`"]
                    + [f"{g.ms[o]:.3f} ({g.speedup_vs_forward[o]:.3f}×)" if o in g.index else "–"
                       for o in orders])
    return "\n".join([f"v6's launch orders with the configuration pinned: ms (speed-up against 'forward', v5's "
                      f"order). Source: `{rel(path)}`.", "", md_table(["N", "causal", "config", *orders], rows)])


def section_timing(gpu, root) -> str:
    """Small N: the harness's do_bench against CUDA-graph replay and the host's time per call (experiments/run.py
    timing)."""
    df, path = experiment(gpu, root, "timing")
    if df is None:
        return experiment_not_run("Small-N timing", "timing", path)
    nf = "noflush_ms" in df.columns and df["noflush_ms"].notna().any()   # harness column since e0fa889

    def us(r, col):
        return fmt(getattr(r, col, float("nan")) * 1e3, ".1f")
    rows = [[r.version, int(r.N), "yes" if r.causal else "no", us(r, "ms"), *([us(r, "noflush_ms")] if nf else []),
             us(r, "graph_ms"), fmt(r.host_us, ".1f"), us(r, "sdpa_ms"), *([us(r, "sdpa_noflush_ms")] if nf else []),
             us(r, "sdpa_graph_ms"), fmt(r.sdpa_host_us, ".1f"), fmt(r.pct_of_sdpa, ".0f", "%"),
             fmt(r.sdpa_graph_ms / r.graph_ms * 100, ".0f", "%"),
             f"{fmt(getattr(r, 'sm_clock_mhz_median', float('nan')), '.0f')} "
             f"(min {fmt(getattr(r, 'sm_clock_mhz_min', float('nan')), '.0f')})"]
            for r in df.sort_values(["version", "causal", "N"]).itertuples()]
    return "\n".join(["Small N: the harness's do_bench against CUDA-graph replay, in µs, and the host's time per call "
             "(one harness run per version)"
             + ("; 'no flush': do_bench's per-call events without its cache flush" if nf else "")
             + f". Source: `{rel(path)}`.", "",
             md_table(["version", "N", "causal", "do_bench", *(["no flush"] if nf else []), "graph", "host/call",
                       "SDPA do_bench", *(["SDPA no flush"] if nf else []), "SDPA graph", "SDPA host/call",
                       "% of SDPA (do_bench)", "% of SDPA (graph)", "SM MHz median"], rows)])


def section_exp2_poly(gpu, root) -> str:
    """v7 with EXP2_POLY = 0, 2, 4 against SDPA, per shape and configuration (experiments/run.py exp2_poly)."""
    df, path = experiment(gpu, root, "exp2_poly")
    if df is None:
        return experiment_not_run("Part of the exp2 on the FMA pipe", "exp2_poly", path)
    rows = []
    for (N, causal, cfg), g in df.groupby(["N", "causal", "config"], sort=True):
        g = g.set_index("variant")
        sdpa = g.ms.get("sdpa", float("nan"))

        def cell(e):
            v = f"exp2_poly={e}"
            if v not in g.index:
                return "–"
            r = g.loc[v]
            return (f"{span(r.ms, r.ms_min, r.ms_max, '.3f')} ({fmt(r.speedup_vs_exp2_poly0, '.3f', '×')}, "
                    f"{fmt(sdpa / r.ms * 100, '.0f', '%')} of SDPA)")
        pick = "yes" if g.autotuner_pick.max() == 1 else "no"
        errs = ", ".join(fmt(g.rel_err_vs_sdpa.get(f"exp2_poly={e}", float("nan")), ".1e") for e in (0, 2, 4))
        rows.append([int(N), "yes" if causal else "no", f"`{cfg}`", pick, cell(0), cell(2), cell(4),
                     fmt(sdpa, ".3f"), errs])
    return "\n".join([
        "Part of the softmax's exp2 on the FMA pipe (v7's EXP2_POLY: 1 column in 2 or 4 of the unmasked tiles by a "
        "degree-3 polynomial instead of the MUFU), each configuration pinned, SDPA in the same interleaved rounds: "
        "ms (min–max), speed-up against EXP2_POLY = 0 (v7 as measured), % of SDPA. 'picked': the configuration "
        f"v7's autotuner chose for the shape. Errors: relative to SDPA's output. Source: `{rel(path)}`.", "",
        md_table(["N", "causal", "config", "picked", "EXP2_POLY 0", "EXP2_POLY 2", "EXP2_POLY 4", "SDPA ms",
                  "rel. error 0, 2, 4"], rows)])


GRID_VARIANTS = ("per_tile", "persistent_2", "persistent_1")


def shape_table(gpu, root, name: str, label: str, who: str, row, caption: str, headers: list) -> str:
    """Experiment `name` as a table, one row `row(N, causal, g)` per shape (g: its rows indexed by the column
    `who`) under `caption` (its {source} filled in); or the line saying it has not run."""
    df, path = experiment(gpu, root, name)
    if df is None:
        return experiment_not_run(label, name, path)
    rows = [row(*shape) for shape in by_shape(df, who)]
    return "\n".join([caption.format(source=f"`{rel(path)}`"), "", md_table(headers, rows)])


def section_grid(gpu, root) -> str:
    """v7's persistent grid against one program per tile, SDPA in the same rounds (experiments/run.py grid)."""
    def row(N, causal, g):
        def cell(v):
            if v not in g.index:
                return "–"
            r = g.loc[v]
            return (f"{span(r.ms, r.ms_min, r.ms_max, '.3f')} ({fmt(r.speedup_vs_per_tile, '.3f', '×')}, "
                    f"{fmt(r.pct_of_sdpa, '.0f', '%')} of SDPA)")
        return [N, causal, *(cell(v) for v in GRID_VARIANTS), fmt(g.ms.get(data.SDPA, float("nan")), ".3f")]

    return shape_table(
        gpu, root, "grid", "v7's persistent grid", "variant", row,
        "v7's grid: one program per (head, query tile) (its default) against a persistent grid of 2 or 1 programs "
        "per SM looping over the work items, each autotuned on its own, SDPA in the same interleaved rounds: ms "
        "(min–max), speed-up against one program per tile, % of SDPA. Source: {source}.",
        ["N", "causal", "per tile", "persistent, 2 per SM", "persistent, 1 per SM", "SDPA ms"])
