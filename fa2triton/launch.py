"""Launch helpers shared by the versions' host wrappers."""

from __future__ import annotations

import torch
import triton

from .budget import Config, fit_stages
from .gpu import facts, has_gpu, interpreting
from .lean_path import empty_output

# (kernel, element size, D, config) -> the config that actually launched
_fitted: dict[tuple, Config] = {}
_strict = False


def strict_configs(on: bool) -> None:
    """In strict mode a fixed configuration is launched exactly as given, and one that does
    not fit raises OutOfResources: the sweep measures what it asks for, never a fallback."""
    global _strict
    _strict = bool(on)


def allocate_outputs(Q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """O in Q's dtype and L (B, N_q) in float32, natural-log units."""
    O = empty_output(Q)   # the same O as a recorded launch's repeats allocate
    L = torch.empty(Q.shape[:2], device=Q.device, dtype=torch.float32)
    return O, L


def strides(*tensors: torch.Tensor) -> list[int]:
    return [s for t in tensors for s in t.stride()]


def smem_limit() -> int | None:
    return facts().smem_per_block if has_gpu() and not interpreting() else None


def device_arch() -> str | None:
    return facts().arch if has_gpu() and not interpreting() else None


def launch_with_fallback(kernel, grid_of, args: tuple, cfg: Config, **meta):
    """Launch `kernel` with a fixed configuration; if it cannot fit this GPU's shared memory,
    fall back to fewer stages (as the article's v1 did for fp32 at D = 128) instead of raising.

    `grid_of(cfg)` returns the grid for a configuration; args[0] is Q and meta holds D.
    """
    D, elem_bytes = meta["D"], args[0].element_size()
    if _strict:
        kernel[grid_of(cfg)](*args, Q_TILE_SIZE=cfg.q_tile, K_TILE_SIZE=cfg.k_tile,
                             num_warps=cfg.num_warps, num_stages=cfg.num_stages, **meta)
        return cfg
    key = (id(kernel), elem_bytes, D, cfg)   # every version's kernel is named flash_fwd_kernel
    use = _fitted.get(key)
    if use is None:
        limit = smem_limit()
        use = (fit_stages(cfg, limit, D, elem_bytes, device_arch()) or cfg) if limit else cfg
    while True:
        try:
            kernel[grid_of(use)](*args, Q_TILE_SIZE=use.q_tile, K_TILE_SIZE=use.k_tile,
                                 num_warps=use.num_warps, num_stages=use.num_stages, **meta)
        except triton.runtime.errors.OutOfResources:
            if use.num_stages <= 1:
                raise
            use = use.with_stages(use.num_stages - 1)
            continue
        _fitted[key] = use
        return use


def autotune_configs(configs: list[Config]) -> list[triton.Config]:
    return [triton.Config({"Q_TILE_SIZE": c.q_tile, "K_TILE_SIZE": c.k_tile},
                          num_warps=c.num_warps, num_stages=c.num_stages) for c in configs]


def prune_to_fit(configs, named_args, **kwargs):
    """early_config_prune for @triton.autotune: fit each candidate to this GPU's shared memory
    by dropping stages (duplicates removed), so no candidate fails with OutOfResources.

    Under the interpreter (no shared-memory limit): the first candidate only, as it cannot time them
    (fa2triton.interpret makes the autotuner's timing of that one a no-op)."""
    limit = smem_limit()
    if limit is None:
        return configs[:1] if interpreting() else configs
    q = named_args.get("Q_ptr")
    elem_bytes = q.element_size() if q is not None else 2
    D = kwargs.get("D", named_args.get("D", 64))
    out, seen = [], set()
    for c in configs:
        cfg = Config(c.kwargs["Q_TILE_SIZE"], c.kwargs["K_TILE_SIZE"], c.num_warps, c.num_stages)
        fitted = fit_stages(cfg, limit, D, elem_bytes, device_arch())
        if fitted is None or fitted in seen:
            continue
        seen.add(fitted)
        out.append(triton.Config(dict(c.kwargs), num_warps=fitted.num_warps, num_stages=fitted.num_stages))
    return out or configs


def is_autotuned(kernel) -> bool:
    """A @triton.autotune wrapper (its candidates in .configs, the kernel in .fn), not a bare @triton.jit."""
    return hasattr(kernel, "configs") and hasattr(kernel, "fn")


def _forget_launches(cls) -> None:
    """Drop a version's cached launches (fa2triton.lean_path), so its next call takes the normal path."""
    launches = getattr(cls, "launches", None)
    if launches is not None and hasattr(launches, "entries"):
        launches.entries.clear()


def pin_config(module, cfg: Config, D: int = 64) -> str:
    """Make a loaded version launch exactly `cfg` (the profile drivers' --config, the sweep). Returns how.

    Autotuned (flash_fwd_kernel is a triton Autotuner): its candidate list becomes [cfg], with the
    constexprs beyond the tiles that the version's `config_kwargs(cfg, D)` adds (v7's PIPELINE_QK), so
    nothing is benchmarked or pruned (Autotuner.run times and prunes only with > 1 config). Fixed: the
    class attributes the forward reads, plus strict mode, so a configuration that does not fit raises
    instead of silently dropping stages. Either way the version's cached launches (fa2triton.lean_path)
    are forgotten, so the next call compiles and launches `cfg`. unpin_config undoes it.
    """
    kernel = module.flash_fwd_kernel
    cls = module.FlashAttentionTriton
    _forget_launches(cls)
    if is_autotuned(kernel):
        if not hasattr(kernel, "_fa2_saved"):
            kernel._fa2_saved = (kernel.configs, kernel.cache)
        extra = module.config_kwargs(cfg, D) if hasattr(module, "config_kwargs") else {}
        kernel.configs = [triton.Config({"Q_TILE_SIZE": cfg.q_tile, "K_TILE_SIZE": cfg.k_tile, **extra},
                                        num_warps=cfg.num_warps, num_stages=cfg.num_stages)]
        kernel.cache = {}
        return f"autotuner configs = [{cfg}{''.join(f', {k}={v}' for k, v in extra.items())}]"
    if not hasattr(cls, "_fa2_saved"):
        cls._fa2_saved = (cls.Q_TILE_SIZE, cls.K_TILE_SIZE, cls.NUM_WARPS, cls.NUM_STAGES)
    cls.Q_TILE_SIZE, cls.K_TILE_SIZE, cls.NUM_WARPS, cls.NUM_STAGES = (
        cfg.q_tile, cfg.k_tile, cfg.num_warps, cfg.num_stages)
    strict_configs(True)
    return f"class attributes = {cfg} (strict: no stage fallback)"


def unpin_config(module) -> None:
    """Give a version back its own configuration(s) after pin_config."""
    kernel, cls = module.flash_fwd_kernel, module.FlashAttentionTriton
    _forget_launches(cls)
    if is_autotuned(kernel) and hasattr(kernel, "_fa2_saved"):
        kernel.configs, kernel.cache = kernel._fa2_saved
        del kernel._fa2_saved
    if hasattr(cls, "_fa2_saved"):
        cls.Q_TILE_SIZE, cls.K_TILE_SIZE, cls.NUM_WARPS, cls.NUM_STAGES = cls._fa2_saved
        del cls._fa2_saved
    strict_configs(False)
