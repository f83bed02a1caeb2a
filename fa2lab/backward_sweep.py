"""The backward's configuration sweep (issue 7): the tile, warp and stage space of the Triton
FlashAttention-2 backward in fa2triton/flash_backward_triton.py, at the harness shapes.

The dK/dV kernel owns a key tile and streams query tiles; the dQ kernel owns a query tile and
streams key tiles. The space keeps the two kernels mirrored (dK/dV's owned key tile is dQ's owned
query tile, and the same for the streamed tile), so one configuration is (owned, streamed, warps,
stages) and both kernels change together: 3 x 3 x 2 x 3 = 54 configurations per shape and dQ mode.
Configurations whose dK and dV fp32 accumulators alone would need more than ACC_REGISTER_LIMIT
registers per thread are skipped before compiling, with the reason recorded.

Each configuration is launched exactly as given (strict: no stage fallback; OutOfResources is
recorded as out_of_smem), checked against SDPA's gradients once per shape (a wrong one is recorded
and can never win), then timed with do_bench like the harness: flash_attention_backward called
directly on a forward's O and L, against SDPA's backward (autograd.grad on a kept graph) in the same
process. Rows are appended as they are measured; a rerun resumes.
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

from . import shapes
from .forward_sweep import COMPILE_ERROR, OK, OUT_OF_SMEM, RUN_ERROR, SKIPPED, WRONG, done_keys

OWNED = (32, 64, 128)     # dK/dV's key tile = dQ's query tile
STREAMED = (16, 32, 64)   # dK/dV's query tile = dQ's key tile
WARPS = (4, 8)
STAGES = (1, 2, 3)
ACC_REGISTER_LIMIT = 128  # fp32 registers per thread for the dK and dV accumulators alone
CONFIG_FIELDS = ("dkdv_q_tile", "dkdv_k_tile", "dq_q_tile", "dq_k_tile", "num_warps", "num_stages")   # BackwardConfig's
KEY_FIELDS = ("N", "causal", *CONFIG_FIELDS, "dq_mode")
GRAD_TOLERANCE = 3e-2     # relative Frobenius error of each gradient against SDPA's, bf16


def backward_configs(stages=STAGES) -> list:
    """Every configuration of the space (with `stages` as its stage counts), each a
    fa2triton.backward_config.BackwardConfig."""
    from fa2triton.backward_config import BackwardConfig

    return [BackwardConfig(s, o, o, s, num_warps=w, num_stages=st)
            for o, s, w, st in itertools.product(OWNED, STREAMED, WARPS, stages)]


def skip_reason(cfg, D: int) -> str | None:
    acc = 2 * cfg.dkdv_k_tile * D / (32 * cfg.num_warps)
    if acc > ACC_REGISTER_LIMIT:
        return (f"dK and dV accumulators alone need {acc:.0f} fp32 registers per thread "
                f"(> {ACC_REGISTER_LIMIT}): {cfg.dkdv_k_tile} keys x D = {D} x 2 over {32 * cfg.num_warps} threads")
    return None


def config_columns(cfg, dq_mode: str) -> dict:
    return {**{f: getattr(cfg, f) for f in CONFIG_FIELDS}, "dq_mode": dq_mode}


def run_backward_sweep(Ns, masks, out_csv: Path, *, limit_minutes: float | None, dq_mode: str = "separate",
                       configs=None, also_done: tuple[Path, ...] = (), log=print) -> dict:
    """Measure every configuration not yet in out_csv (nor in also_done). Returns counts."""
    import torch
    import torch.nn.functional as F
    import triton
    from tqdm import tqdm

    from fa2triton import flash_backward_triton as bwd
    from fa2triton.reference import relative_error, saved_lse
    from .switches import load

    from . import timers
    from .provenance import ClockSampler, environment, now
    from .results import append_rows

    forward = load("v6_longest_first").FlashAttentionTriton   # the forward whose O and L the backward takes
    configs = configs if configs is not None else backward_configs()
    deadline = time.monotonic() + limit_minutes * 60 if limit_minutes else None
    done = set().union(done_keys(out_csv, KEY_FIELDS), *(done_keys(p, KEY_FIELDS) for p in also_done))
    todo = [(N, c, cfg) for c in masks for N in Ns for cfg in configs
            if (N, int(c), *config_columns(cfg, dq_mode).values()) not in done]
    counts = {"done_before": len(done), "todo": len(todo)}
    if not todo:
        log(f"nothing to do: {out_csv} already holds every requested configuration")
        return counts
    env, B, H, D = environment(), shapes.BATCH, shapes.HEADS, shapes.HEAD_DIM
    bar = tqdm(total=len(todo), desc="backward", unit="cfg", file=sys.stdout, mininterval=2)
    status_counts: dict[str, int] = {}
    interrupted = False
    try:
        for (N, causal), group in itertools.groupby(todo, key=lambda t: (t[0], t[1])):
            q, k, v = (torch.randn(B * H, N, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                       for _ in range(3))
            dO = torch.randn(B * H, N, D, device="cuda", dtype=torch.bfloat16)
            O = forward.apply(q, k, v, causal)
            L = saved_lse(O)
            Q, K, V, O = (t.detach() for t in (q, k, v, O))
            q4, k4, v4 = (t.detach().view(B, H, N, D).requires_grad_() for t in (q, k, v))
            O_sdpa = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)

            def sdpa_bwd():
                return torch.autograd.grad(O_sdpa, (q4, k4, v4), dO.view(B, H, N, D), retain_graph=True)

            ref = sdpa_bwd()
            sdpa_ms = timers.bench_ms(sdpa_bwd)
            flop = shapes.BWD_FLOP_FACTOR * shapes.flops(B, H, N, D, causal)
            for _, _, cfg in group:
                if deadline and time.monotonic() > deadline:
                    interrupted = True
                    break
                row = {"date": now(), "N": N, "causal": int(causal), "B": B, "H": H, "D": D,
                       "dtype": shapes.DTYPE_NAME, **config_columns(cfg, dq_mode), "sdpa_bwd_ms": sdpa_ms}
                reason = skip_reason(cfg, D)
                if reason:
                    row.update(status=SKIPPED, error=reason)
                else:
                    def ours():
                        return bwd.flash_attention_backward(Q, K, V, O, L, dO, causal, config=cfg, dq_mode=dq_mode,
                                                            strict=True)
                    try:
                        grads = ours()
                        errs = {f"rel_err_d{n}": relative_error(g.view(B, H, N, D), r)
                                for n, g, r in zip("qkv", grads, ref)}
                        row.update(errs)
                        if max(errs.values()) > GRAD_TOLERANCE:
                            row.update(status=WRONG, error=f"relative error {max(errs.values()):.3g} > {GRAD_TOLERANCE}")
                        else:
                            with ClockSampler() as clocks:
                                ms = timers.bench_ms(ours)
                            row.update(status=OK, bwd_ms=ms, tflops=shapes.tflops(flop, ms),
                                       pct_of_sdpa=100.0 * sdpa_ms / ms, **clocks.summary())
                    except triton.runtime.errors.OutOfResources as e:
                        row.update(status=OUT_OF_SMEM, error=str(e)[:200])
                    except triton.CompilationError as e:
                        row.update(status=COMPILE_ERROR, error=f"{type(e).__name__}: {str(e)[:200]}")
                    except Exception as e:  # noqa: BLE001 - recorded, not fatal
                        row.update(status=RUN_ERROR, error=f"{type(e).__name__}: {str(e)[:200]}")
                row.update(env)
                append_rows(out_csv, [row])
                status_counts[row["status"]] = status_counts.get(row["status"], 0) + 1
                bar.update(1)
                bar.set_postfix(failed=sum(n for s, n in status_counts.items() if s != OK), N=N,
                                causal=int(causal), refresh=False)
            if interrupted:
                break
    finally:
        bar.close()
    counts.update(status_counts)
    counts["interrupted_by_limit"] = interrupted
    return counts


# --- picking the default (sweeps/sweep_backward.py --pick) -----------------------------------

CRITERIA = ("total", "geomean")


def pick_single(df, dq_mode: str = "separate", n_configs: int | None = None, criterion: str = "geomean",
                min_n: int = 0):
    """The configuration that ran correctly at every shape with, by `criterion`, the best geometric mean
    over the sweep's shapes of (that shape's best time / its time) ("geomean": every shape weighs the
    same), or the least total time over the shapes ("total": a pass over the harness shapes, so the
    longest shapes weigh most and a noisy millisecond-scale shape cannot decide); `df` is the sweep CSV.

    min_n: only shapes with N >= min_n are scored (the configuration must still run correctly at every
    shape): below it the sweep's do_bench of a direct call measures the host, not the kernels, so a noisy
    sub-0.1 ms row could outweigh a real difference at the long shapes.

    Returns (config as a tuple of CONFIG_FIELDS, its geometric mean, {(N, causal): (its ms, best ms)}),
    over the scored shapes.
    A sweep that lacks rows (n_configs configurations at each shape it names) raises ValueError: a pick
    from part of the space would not say what it claims."""
    import numpy as np

    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {', '.join(CRITERIA)}, got {criterion!r}")
    rows = df[df["dq_mode"] == dq_mode]
    if rows.empty:
        raise ValueError(f"the sweep has no {dq_mode!r} rows")
    shapes_seen = sorted({(int(n), int(c)) for n, c in zip(rows["N"], rows["causal"])})
    if n_configs is not None:
        per_shape = rows.groupby(["N", "causal"]).size()
        short = {k: int(v) for k, v in per_shape.items() if v < n_configs}
        if short:
            raise ValueError(f"incomplete sweep: rows per (N, causal) {short}, expected {n_configs} each")
    ok = rows[(rows["status"] == "ok") & rows["bwd_ms"].notna()]
    best = ok.groupby(["N", "causal"])["bwd_ms"].min()
    scored = []
    for cfg, g in ok.groupby(list(CONFIG_FIELDS)):
        if len(g) != len(shapes_seen):
            continue   # failed, skipped or wrong somewhere: never the default
        g = g[g["N"] >= min_n]
        if g.empty:
            raise ValueError(f"no shape with N >= {min_n} to score")
        ratios = [best[(n, c)] / ms for n, c, ms in zip(g["N"], g["causal"], g["bwd_ms"])]
        scored.append((float(np.exp(np.mean(np.log(ratios)))), tuple(int(x) for x in cfg), g))
    if not scored:
        raise ValueError("no configuration ran correctly at every shape")
    key = (lambda t: t[0]) if criterion == "geomean" else (lambda t: -float(t[2]["bwd_ms"].sum()))
    score, cfg, g = max(scored, key=key)
    return cfg, score, {(int(n), int(c)): (float(ms), float(best[(n, c)]))
                        for n, c, ms in zip(g["N"], g["causal"], g["bwd_ms"])}
