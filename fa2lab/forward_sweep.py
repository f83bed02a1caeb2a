"""The configuration sweep (Rounds 1 and 5), as a reusable, resumable tool.

Phase 1 compiles every configuration in worker processes with `kernel.warmup(...)`
(or, for a version with a signature of its own, v6 and v7, fa2lab.compile_offline for this
GPU's architecture) into Triton's on-disk cache, without launching, and reads registers,
spills and shared memory from the loaded binary (OutOfResources there means out_of_smem).
Phase 2 benchmarks one configuration at a time in this process, exactly as the
harness does: FlashAttentionTriton.apply under do_bench (median), same inputs,
SDPA timed in the same run, each configuration checked against SDPA first. The
configuration is pinned with fa2triton.launch.pin_config: class attributes for a fixed body
(v0-v4), a one-candidate autotuner for the autotuned ones (v5-v7).

Every result is appended to the CSV as soon as it is measured; a rerun skips what
the CSV already holds, so an interrupted sweep loses nothing.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from fa2triton import budget
from fa2triton.budget import Config
from fa2triton.offline import DTYPES, forward_args

from . import shapes

TILES = (16, 32, 64, 128, 256)
WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5)
ALL_CONFIGS = tuple(Config(*c) for c in itertools.product(TILES, TILES, WARPS, STAGES))
CHECK_ATOL = CHECK_RTOL = 2e-2

# Statuses a row can have.
OK, WRONG, OUT_OF_SMEM, SKIPPED, COMPILE_ERROR, RUN_ERROR = (
    "ok", "wrong", "out_of_smem", "skipped_registers", "compile_error", "run_error")


@dataclass(frozen=True)
class CompileInfo:
    status: str
    n_regs: int | None = None
    n_spills: int | None = None
    shared: int | None = None
    error: str = ""


def short_dtype(torch_name: str) -> str:
    """'bfloat16' -> 'bf16': the short names of fa2triton.offline.DTYPES, which the kernels' offline helpers take."""
    return {t: s for s, t in DTYPES.items()}[torch_name]


def compile_own_signature(module, cfg: Config, causal: bool, N: int, D: int, dtype: str, arch: int):
    """Compile one configuration of a version whose kernel has a signature of its own (v6's window
    and launch order, v7's tensor descriptors: the module's `offline_compile_args`) for sm_<arch>,
    without launching, with the constexprs a pinned launch would pass (fa2triton.launch.pin_config)."""
    from .compile_offline import compile_for_target

    args, extra = module.offline_compile_args(N, D, short_dtype(dtype), shapes.BATCH * shapes.HEADS, cfg, causal)
    if hasattr(module, "config_kwargs"):
        extra = {**extra, **module.config_kwargs(cfg, D)}
    return compile_for_target(module.flash_fwd_kernel, args, arch=arch, num_warps=cfg.num_warps,
                              num_stages=cfg.num_stages, D=D, Q_TILE_SIZE=cfg.q_tile, K_TILE_SIZE=cfg.k_tile,
                              is_causal=causal, **extra)


def compile_one(version: str, cfg: Config, causal: bool, N: int, D: int = shapes.HEAD_DIM,
                dtype: str = "bfloat16") -> CompileInfo:
    """Compile one configuration without launching it (runs in a worker process)."""
    import triton

    from fa2triton.gpu import facts
    from .switches import load

    module = load(version)
    kernel = module.flash_fwd_kernel
    try:
        if hasattr(module, "offline_compile_args"):   # v6, v7: their own signature
            major, minor = facts().capability
            compiled = compile_own_signature(module, cfg, causal, N, D, dtype, 10 * major + minor)
        else:
            compiled = kernel.warmup(*forward_args(N, D, short_dtype(dtype), shapes.BATCH * shapes.HEADS),
                                     grid=(triton.cdiv(N, cfg.q_tile), shapes.BATCH * shapes.HEADS),
                                     D=D, Q_TILE_SIZE=cfg.q_tile, K_TILE_SIZE=cfg.k_tile, is_causal=causal,
                                     num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        shared = int(compiled.metadata.shared)
        compiled._init_handles()  # loads the binary: fills n_regs and n_spills, checks shared memory
        return CompileInfo(OK, int(compiled.n_regs), int(compiled.n_spills), shared)
    except triton.runtime.errors.OutOfResources as e:
        return CompileInfo(OUT_OF_SMEM, shared=locals().get("shared"), error=str(e)[:200])
    except Exception as e:  # noqa: BLE001 - a configuration that fails to compile is recorded, not fatal
        return CompileInfo(COMPILE_ERROR, error=f"{type(e).__name__}: {str(e)[:200]}")


def _init_worker():
    os.environ.setdefault("PYTHONUNBUFFERED", "1")


def compile_all(version: str, jobs: list[tuple[Config, bool]], N: int, workers: int,
                progress=None) -> dict[tuple[Config, bool], CompileInfo]:
    """Phase 1: compile every (config, causal) in parallel worker processes."""
    import multiprocessing as mp

    out: dict[tuple[Config, bool], CompileInfo] = {}
    pending = list(jobs)
    while pending:
        ctx = mp.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker) as pool:
            futures = {pool.submit(compile_one, version, cfg, causal, N): (cfg, causal) for cfg, causal in pending}
            try:
                for fut in as_completed(futures):
                    key = futures[fut]
                    try:
                        out[key] = fut.result()
                    except Exception as e:  # noqa: BLE001 - a crashed worker (BrokenProcessPool)
                        out[key] = CompileInfo(COMPILE_ERROR, error=f"worker died: {type(e).__name__}")
                    if progress:
                        progress(key, out[key])
            except KeyboardInterrupt:
                pool.shutdown(cancel_futures=True)
                raise
        pending = [j for j in pending if j not in out]
    return out


KEY_FIELDS = ("N", "causal", "q_tile", "k_tile", "num_warps", "num_stages")   # one row of the forward sweep


def done_keys(csv_path: Path, fields: tuple[str, ...] = KEY_FIELDS) -> set[tuple]:
    """The keys (N, causal, q_tile, k_tile, warps, stages by default) already in the CSV."""
    if not csv_path.exists():
        return set()
    import csv

    with csv_path.open(newline="") as f:
        return {row_key(r, fields) for r in csv.DictReader(f)}


def row_key(row: dict, fields: tuple[str, ...] = KEY_FIELDS) -> tuple:
    """A CSV row's key: integer fields as ints, the rest (e.g. the backward's dq_mode) as text."""
    return tuple(int(row[k]) if str(row[k]).lstrip("-").isdigit() else row[k] for k in fields)


def merge_parts(parts: list[Path], out_csv: Path, fields: tuple[str, ...] = KEY_FIELDS) -> int:
    """Append to out_csv the rows of part CSVs (written by sweeps run side by side, one per GPU)
    whose key it does not hold yet, then remove the parts. Returns rows added."""
    import csv

    from .results import append_rows

    have = done_keys(out_csv, fields)
    added = 0
    for part in parts:
        with part.open(newline="") as f:
            rows = [r for r in csv.DictReader(f)
                    if row_key(r, fields) not in have]
        append_rows(out_csv, rows)
        have |= done_keys(part, fields)
        added += len(rows)
        part.unlink()
    return added


def part_path(merged_csv: Path, part: str) -> Path:
    """Where one GPU's share of a sweep run side by side goes: parts/<name>.<part>.csv beside the merged CSV."""
    return merged_csv.parent / "parts" / f"{merged_csv.stem}.{part}.csv"


def merge_into(merged_csv: Path, fields: tuple[str, ...] = KEY_FIELDS) -> str:
    """Fold every part of merged_csv (part_path) into it; returns a line saying what was merged."""
    parts = sorted((merged_csv.parent / "parts").glob(f"{merged_csv.stem}.*.csv"))
    added = merge_parts(parts, merged_csv, fields)
    return f"merged {len(parts)} part(s): {added} new rows in {merged_csv}"


def occupancy_columns(cfg: Config, info: CompileInfo, D: int, elem_bytes: int = 2) -> dict:
    from fa2triton.gpu import facts

    f = facts()
    row = {"shared_formula": budget.formula_shared_bytes(cfg, D, elem_bytes), "n_regs": info.n_regs,
           "n_spills": info.n_spills, "shared_compiled": info.shared}
    if info.shared is not None:
        row["progs_per_sm_smem"] = f.programs_per_sm_by_smem(info.shared)
    if info.n_regs is not None:
        row["progs_per_sm_regs"] = f.programs_per_sm_by_regs(info.n_regs, cfg.num_warps)
    return row


def run_sweep(version: str, Ns, masks, out_csv: Path, *, workers: int, limit_minutes: float | None,
              configs=ALL_CONFIGS, log=print, graph_max_n: int = 0, also_done: tuple[Path, ...] = ()) -> dict:
    """Compile, then measure, every configuration not yet in out_csv (nor in also_done's CSVs,
    e.g. the merged sweep when out_csv is one GPU's part of it). Returns counts.

    With graph_max_n, shapes with N <= graph_max_n also get `graph_ms` (CUDA-graph replay): there
    the harness's do_bench can time the host's per-call cost more than the kernel."""
    import torch
    import torch.nn.functional as F
    from tqdm import tqdm

    from . import timers
    from fa2triton.launch import is_autotuned, pin_config, unpin_config
    from .provenance import ClockSampler, environment, now
    from .results import append_rows
    from .switches import load

    t_start = time.monotonic()
    deadline = t_start + limit_minutes * 60 if limit_minutes else None
    module = load(version)
    cls = module.FlashAttentionTriton
    if not hasattr(cls, "Q_TILE_SIZE") and not is_autotuned(module.flash_fwd_kernel):
        raise ValueError(f"{version}: neither class attributes (Q_TILE_SIZE, ...) nor an autotuner to pin")
    D = shapes.HEAD_DIM
    env = environment()
    done = set().union(done_keys(out_csv), *(done_keys(p) for p in also_done))
    todo = [(N, c, cfg) for c in masks for N in Ns for cfg in configs
            if (N, int(c), cfg.q_tile, cfg.k_tile, cfg.num_warps, cfg.num_stages) not in done]
    counts = {"done_before": len(done), "todo": len(todo)}
    if not todo:
        log(f"nothing to do: {out_csv} already holds every requested configuration")
        return counts

    # Phase 1: compile what is left (one compile per config and mask: every harness N is a
    # multiple of 16, so Triton specialises them identically).
    jobs = sorted({(cfg, c) for N, c, cfg in todo if budget.skip_reason(cfg, D) is None})
    t0 = time.monotonic()
    bar = tqdm(total=len(jobs), desc="compile", unit="cfg", file=sys.stdout, mininterval=2)
    fails = {"n": 0}

    def tick(key, info):
        fails["n"] += info.status != OK
        bar.update(1)
        bar.set_postfix(failed=fails["n"], refresh=False)

    infos = compile_all(version, jobs, max(Ns), workers, tick) if jobs else {}
    bar.close()
    counts["compile_s"] = round(time.monotonic() - t0, 1)
    log(f"compiled {len(jobs)} (config, mask) pairs in {counts['compile_s']} s with {workers} workers")

    # Phase 2: measure one at a time, exactly as the harness times.
    bar = tqdm(total=len(todo), desc="measure", unit="cfg", file=sys.stdout, mininterval=2)
    status_counts: dict[str, int] = {}
    interrupted = False
    try:
        for (N, causal), group in itertools.groupby(todo, key=lambda t: (t[0], t[1])):
            group = list(group)
            B, H = shapes.BATCH, shapes.HEADS
            q, k, v = (torch.randn(B * H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            q4, k4, v4 = (t.view(B, H, N, D) for t in (q, k, v))
            ref = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal).view(B * H, N, D)
            sdpa_ms = timers.bench_ms(lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal))
            flop = shapes.flops(B, H, N, D, causal)
            for _, _, cfg in group:
                if deadline and time.monotonic() > deadline:
                    interrupted = True
                    break
                row = {"version": version, "date": now(), "N": N, "causal": int(causal), "B": B, "H": H, "D": D,
                       "dtype": shapes.DTYPE_NAME, "q_tile": cfg.q_tile, "k_tile": cfg.k_tile,
                       "num_warps": cfg.num_warps, "num_stages": cfg.num_stages, "sdpa_ms": sdpa_ms,
                       "shared_formula": budget.formula_shared_bytes(cfg, D)}
                reason = budget.skip_reason(cfg, D)
                info = infos.get((cfg, causal))
                if reason:
                    row.update(status=SKIPPED, error=reason)
                elif info is None or info.status != OK:
                    info = info or CompileInfo(COMPILE_ERROR, error="not compiled")
                    row.update(status=info.status, error=info.error, **occupancy_columns(cfg, info, D))
                else:
                    row.update(occupancy_columns(cfg, info, D))
                    if hasattr(module, "config_kwargs"):   # v7's PIPELINE_QK: recorded beside the tiles
                        row.update(module.config_kwargs(cfg, D))
                    # exactly this configuration: never a fallback with fewer stages, nor a cached launch
                    pin_config(module, cfg, D)
                    try:
                        o = cls.apply(q, k, v, causal)
                        if not torch.allclose(o.float(), ref.float(), atol=CHECK_ATOL, rtol=CHECK_RTOL):
                            row.update(status=WRONG, error=f"max abs err {(o.float() - ref.float()).abs().max():.3g}")
                        else:
                            with ClockSampler() as clocks:
                                ms = timers.bench_ms(lambda: cls.apply(q, k, v, causal))
                            row.update(status=OK, ms=ms, tflops=shapes.tflops(flop, ms),
                                       pct_of_sdpa=100.0 * sdpa_ms / ms, **clocks.summary())
                            if N <= graph_max_n:
                                row["graph_ms"] = timers.bench_graph_ms(lambda: cls.apply(q, k, v, causal))
                    except Exception as e:  # noqa: BLE001 - recorded, not fatal
                        status = OUT_OF_SMEM if "OutOfResources" in type(e).__name__ else RUN_ERROR
                        row.update(status=status, error=f"{type(e).__name__}: {str(e)[:200]}")
                row.update(env)
                append_rows(out_csv, [row])
                status_counts[row["status"]] = status_counts.get(row["status"], 0) + 1
                bar.update(1)
                bar.set_postfix(failed=sum(v for s, v in status_counts.items() if s != OK), N=N, causal=int(causal), refresh=False)
            if interrupted:
                break
    finally:
        bar.close()
        unpin_config(module)
    counts.update(status_counts)
    counts["interrupted_by_limit"] = interrupted
    counts["elapsed_s"] = round(time.monotonic() - t_start, 1)
    return counts
