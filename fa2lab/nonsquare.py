"""The article's non-square causal check, for every version (issue 6, `invoke check-nonsquare`).

Causal masking follows SDPA's is_causal=True convention (top-left: query i sees keys j <= i)
for any N_q and N_k. The check runs queries longer and shorter than the keys, ragged
lengths, head dimensions 16 to 128, bf16 and fp32, square and non-causal cases for
comparison, through `apply` (the version's own configuration) and through explicit tile
configurations with key tiles smaller than, equal to and larger than the query tile,
against a float64 reference with an explicit top-left mask. A configuration that does not
fit in shared memory is counted as skipped, not failed.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass

import torch

from fa2triton.budget import Config
from fa2triton.reference import attention, relative_error

REL_TOL = {torch.float32: 3e-3, torch.bfloat16: 1.5e-2}


@dataclass(frozen=True)
class Case:
    n_q: int
    n_k: int
    D: int
    dtype: torch.dtype
    causal: bool

    @property
    def label(self) -> str:
        return f"{self.n_q}x{self.n_k} D={self.D} {str(self.dtype).removeprefix('torch.')} " \
               f"{'causal' if self.causal else 'full'}"


def cases(quick: bool) -> list[Case]:
    if quick:
        return [Case(200, 96, 64, torch.bfloat16, True), Case(96, 200, 32, torch.float32, True),
                Case(130, 77, 16, torch.float32, True), Case(64, 160, 128, torch.bfloat16, True)]
    lengths = [(200, 96), (96, 200), (257, 129), (129, 257), (64, 320), (320, 64), (130, 130)]
    out = [Case(q, k, D, dt, causal) for (q, k), D, dt, causal in
           itertools.product(lengths, (16, 32, 64, 128), (torch.bfloat16, torch.float32), (True, False))]
    return out


def explicit_configs(two_loops: bool, quick: bool) -> list[Config]:
    """Key tiles smaller than, equal to and larger than the query tile (4 warps, 2 stages)."""
    tiles = [(64, 16), (32, 32), (16, 64)] if quick or not two_loops else \
        [(64, 16), (64, 32), (64, 64), (64, 128), (32, 32), (16, 64), (32, 128), (128, 64), (128, 32), (16, 16)]
    return [Config(q, k, 4, 2) for q, k in tiles]


def _run(module, cfg: Config | None, Q, K, V, causal, on_gpu: bool):
    """One call: the version's own choice (cfg None), or one explicit configuration."""
    from fa2triton.interpret import autotuner_of, only_config
    from fa2triton.launch import strict_configs

    tuner = autotuner_of(module)
    cls = module.FlashAttentionTriton
    if tuner is not None:
        if cfg is None and on_gpu:
            return cls.apply(Q, K, V, causal)
        import triton

        c = cfg or Config(tuner.configs[0].kwargs["Q_TILE_SIZE"], tuner.configs[0].kwargs["K_TILE_SIZE"],
                          tuner.configs[0].num_warps, tuner.configs[0].num_stages)
        one = triton.Config({"Q_TILE_SIZE": c.q_tile, "K_TILE_SIZE": c.k_tile}, num_warps=c.num_warps,
                            num_stages=c.num_stages)
        with only_config(tuner, one):
            return cls.apply(Q, K, V, causal)
    if cfg is None:
        return cls.apply(Q, K, V, causal)
    saved = (cls.Q_TILE_SIZE, cls.K_TILE_SIZE, cls.NUM_WARPS, cls.NUM_STAGES)
    cls.Q_TILE_SIZE, cls.K_TILE_SIZE, cls.NUM_WARPS, cls.NUM_STAGES = cfg.q_tile, cfg.k_tile, cfg.num_warps, \
        cfg.num_stages
    strict_configs(True)
    try:
        return cls.apply(Q, K, V, causal)
    finally:
        strict_configs(False)
        cls.Q_TILE_SIZE, cls.K_TILE_SIZE, cls.NUM_WARPS, cls.NUM_STAGES = saved


@contextlib.contextmanager
def brief_autotuning(tuner):
    """While checking, an autotuned version's `apply` times its candidates for about a millisecond each
    instead of do_bench's 25 + 100: every new shape of the check autotunes, which made v2 take 3 to 5 s
    a case on the H200 (98 of 448 cases in 5 minutes). The check is about what the
    chosen configuration computes (every candidate is also checked explicitly), not which one wins."""
    if tuner is None:
        yield
        return
    import triton.testing

    # Triton 3.6's Autotuner.do_bench is a functools.cached_property: the instance's __dict__ entry is
    # what it calls (set after its first autotuning), so that entry is what is swapped and put back.
    missing = object()
    saved = tuner.__dict__.get("do_bench", missing)
    tuner.__dict__["do_bench"] = lambda kernel_call, quantiles: triton.testing.do_bench(
        kernel_call, warmup=1, rep=1, quantiles=quantiles)
    try:
        yield
    finally:
        if saved is missing:
            tuner.__dict__.pop("do_bench", None)
        else:
            tuner.__dict__["do_bench"] = saved


def case_key(row: dict) -> tuple:
    """What identifies one checked case in the rows (for resuming): configuration and case."""
    return (str(row["config"]), int(row["n_q"]), int(row["n_k"]), int(row["D"]), str(row["dtype"]), int(row["causal"]))


def check_version(name: str, quick: bool, progress=None, shard: tuple[int, int] = (0, 1),
                  skip: frozenset = frozenset()) -> tuple[dict, list[dict]]:
    """Run every case through apply and the explicit configurations. Returns counts and rows.
    shard = (i, k): only the cases whose index is i modulo k (processes side by side); skip: case
    keys (case_key) already checked."""
    from fa2triton.interpret import autotuner_of
    from .switches import load
    from fa2triton.versions import get

    version = get(name)
    module = load(name)
    with brief_autotuning(autotuner_of(module)):
        return _check_cases(name, module, version.round >= 4, quick, progress, shard, skip)


def _check_cases(name: str, module, two_loops: bool, quick: bool, progress, shard=(0, 1),
                 skip=frozenset()) -> tuple[dict, list[dict]]:
    import triton

    on_gpu = torch.cuda.is_available()
    device = "cuda" if on_gpu else "cpu"
    configs = [None] + explicit_configs(two_loops, quick)
    counts = {"passed": 0, "failed": 0, "skipped_smem": 0}
    rows = []
    for index, (cfg, case) in enumerate(itertools.product(configs, cases(quick))):
        row = {"version": name, "config": "apply" if cfg is None else cfg.key, "n_q": case.n_q, "n_k": case.n_k,
               "D": case.D, "dtype": str(case.dtype).removeprefix("torch."), "causal": int(case.causal)}
        if index % shard[1] != shard[0] or case_key(row) in skip:
            continue
        g = torch.Generator().manual_seed(case.n_q * 31 + case.n_k + case.D)
        Q, K, V = (torch.randn(1, n, case.D, generator=g).to(device, case.dtype)
                   for n in (case.n_q, case.n_k, case.n_k))
        try:
            O = _run(module, cfg, Q, K, V, case.causal, on_gpu)
            ref, _ = attention(Q.cpu(), K.cpu(), V.cpu(), case.causal)
            err = relative_error(O.cpu(), ref)
            row.update(status="passed" if err < REL_TOL[case.dtype] else "failed", rel_err=err)
        except triton.runtime.errors.OutOfResources as e:
            row.update(status="skipped_smem", error=str(e)[:120])
        except Exception as e:  # noqa: BLE001 - a crash is a failure of that case, recorded
            row.update(status="failed", error=f"{type(e).__name__}: {str(e)[:160]}")
        counts[row["status"]] += 1
        rows.append(row)
        if progress:
            progress(row)
    return counts, rows
