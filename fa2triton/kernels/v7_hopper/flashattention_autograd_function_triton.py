"""v7_hopper: v6_longest_first with Q, K, V and O as Hopper TMA tensor descriptors and a key loop that issues the next
Q K^T before each softmax (the "tl path"), beside a warp-specialized Gluon path
(fa2triton/gluon/gluon_forward_hopper.py), each signature's launch looked up in a per-GPU table of raced launches;
v6 itself wherever neither applies. Why: on the H200 v6 waited for every wgmma before its softmax; every round, with
its numbers and result paths, is in docs/worklogs/v7_hopper.md.

Which path runs (last_path() says which one the last call took):
- "gluon": FlashAttentionTriton.GLUON on, not interpreting, the Gluon module's rules (bf16/fp16 on Hopper, no window,
  D = 64 or 128) and a candidate that fits the shared memory (gluon_applies); causal D = 64 only with RACE_TL. The
  race: its candidates are timed once, those within fa2triton.race.SHORTLIST_MARGIN of the fastest raced (_kept),
  with the tl path's where RACE_TL; the race's fastest launch is kept.
- "tma": bf16/fp16 on compute capability 9.x, every base pointer and non-unit stride a multiple of 16 bytes. Also
  under the interpreter (descriptor loads and stores, zero padding, clipped stores), so the tests check its indexing
  and masking on the CPU. Each configuration is a candidate with PIPELINE_QK = 1 (where pipelining_applies: wgmma,
  and the second score tile fits) and 0; the autotuner decides, a pinned one takes it from config_kwargs.
- "v6": everything else (fp32, other GPUs, misaligned inputs): v6's module as committed, with its own autotuner.
FORCE_PATH ("tma", "v6", "gluon") overrides the choice (forcing "gluon" where it cannot run is an error naming why);
GLUON = False and RACE_TL = False turn the Gluon path and the tl race off (the lab's switches, fa2lab.switches).
The launch (LAUNCH_FROM "table"): a signature's first call launches, untimed, what launch_table.json beside this file
holds for this GPU (fa2triton.launch_table.lookup; `invoke pick-launch` runs the race above offline to write it);
LAUNCH_FROM "race", or a GPU the table lacks (one warning), times and races instead.

Invariants, v6's algorithm: exp2 with the scale folded into one multiply-add; the key loop split into a masked
window band, unmasked tiles and masked diagonal tiles, nothing outside visited; head on the grid's first axis, query
tiles longest first; rows that see no key get O = 0 and L = -inf; L saved (B, N_q) float32 in natural log. The
backward (BACKWARD_DQ_MODE, BACKWARD_DKDV "auto") is fa2triton's: on Hopper from N = 1024 (D = 64 causal: 2048)
the warp-specialized Gluon kernel (gluon_backward_ws.py; dQ by TMA reduce-add, not bitwise reproducible:
"deterministic" for that, which torch.use_deterministic_algorithms(True) selects), else dK/dV by
gluon_backward_hopper.py beside the Triton dQ, elsewhere (and with a sliding window) the Triton backward.
"""

import contextlib
import math
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from fa2triton import flash_backward_triton as backward_kernels
from fa2triton import launch_table, ptx_marks
from fa2triton import queued_timing
from fa2triton.budget import Config, accumulator_registers
from fa2triton.configs import load_table, select
from fa2triton.gluon import gluon_forward_hopper as GLUON   # the Gluon path (FlashAttentionTriton.GLUON, on by default)
from fa2triton.gpu import interpreting
from fa2triton.inputs import unit_stride, validate_qkv
from fa2triton.interpret import only_config
from fa2triton.launch import allocate_outputs, autotune_configs, prune_to_fit, smem_limit, strides
from fa2triton.lean_path import (LeanApply, Launch, LaunchCache, compiled_or_none, empty_output, run_compiled,
                                 templates)
from fa2triton.race import medians as race_medians, shortlist
from fa2triton.reference import autograd_backward
from fa2triton.versions import load

V6 = load("v6_longest_first")          # the fallback path, v6's module as committed

PATHS = ("tma", "v6", "gluon")
LAST_PATH = None                       # the path the last forward call took: "tma", "v6" or "gluon"
LAST_CONFIG = None                     # and the configuration it ran (config_label)
LAST_CHOICE = None                     # and how its first call chose it: "table", "tuned" or "pinned"
TMA_DTYPES = (torch.bfloat16, torch.float16)


def last_path():
    """The path the last FlashAttentionTriton.apply took in this process: "tma", "v6", "gluon" or None."""
    return LAST_PATH


def last_config():
    """The configuration the last FlashAttentionTriton.apply ran: "Q,K,warps,stages/pPIPELINE_QK" on the tl path
    ("128,64,4,3/p1") and v6's, the GluonConfig label on the Gluon path; the harness records it beside the path."""
    return LAST_CONFIG


def config_label(cfg: triton.Config) -> str:
    """An autotuned triton.Config as last_config() reports it."""
    pipe = cfg.kwargs.get("PIPELINE_QK")
    return Config.of_triton(cfg).key + ("" if pipe is None else f"/p{pipe}")


@triton.jit
def _online_softmax_step(O_acc, l_acc, m_acc, S_ij, V_j, q_pos, k_start, N_KEYS, WINDOW, qk_scale,
                         K_TILE_SIZE: tl.constexpr, MASKED: tl.constexpr, is_causal: tl.constexpr,
                         HAS_WINDOW: tl.constexpr):
    """Fold one tile of raw scores S_ij (and its V tile) into the running (O, l, m) state: v6's update.

    The unmasked copy (MASKED=False) has no compare or select; the masked copy sets invisible scores
    to -inf and keeps rows that have seen no key finite.
    """
    if MASKED:
        k_pos = (k_start + tl.arange(0, K_TILE_SIZE))[None, :]
        keep = k_pos < N_KEYS
        if is_causal:
            keep = keep & (k_pos <= q_pos)
        if HAS_WINDOW:
            keep = keep & (k_pos > q_pos - WINDOW)
        S_ij = tl.where(keep, S_ij, float("-inf"))

    # m is in log2 units of the scaled scores (v4). A row with no visible key so far has
    # m_new = -inf; subtracting 0 instead keeps exp2 at 0 for it rather than NaN.
    m_new = tl.maximum(m_acc, tl.max(S_ij, axis=1, keep_dims=True) * qk_scale)
    if MASKED:
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_sub = m_new
    P_ij = tl.math.exp2(S_ij * qk_scale - m_sub)
    alpha = tl.math.exp2(m_acc - m_sub)
    l_acc = alpha * l_acc + tl.sum(P_ij, axis=1, keep_dims=True)   # sum the fp32 P,
    O_acc = alpha * O_acc
    O_acc = tl.dot(P_ij.to(V_j.dtype), V_j, acc=O_acc)             # round it for the multiply
    return O_acc, l_acc, m_new


@triton.jit
def _attend_key_tiles(O_acc, l_acc, m_acc, Q_i, q_pos, K_desc, V_desc, head,
                      start, stop, N_KEYS, WINDOW, qk_scale,
                      D: tl.constexpr, K_TILE_SIZE: tl.constexpr, MASKED: tl.constexpr, is_causal: tl.constexpr,
                      HAS_WINDOW: tl.constexpr, PIPELINE_QK: tl.constexpr):
    """Fold the key tiles in [start, stop) into the running (O, l, m) state.

    K and V arrive by TMA: one descriptor load per tile, bounded by this head's N_KEYS (the
    hardware pads past it with zeros).

    PIPELINE_QK: the loop is software-pipelined by hand, Q K^T of tile j+1 issued before the softmax
    of tile j (the last tile peeled off). Triton still waits for every warpgroup MMA right after that
    issue, but the softmax's exp2s do not depend on it, and ptxas moves them in between: 22 to 25 of
    the 36 MUFU.EX2 of a 128x64 iteration run while the next Q K^T is in flight (offline sm_90 SASS,
    results/offline-sm_90/v7_feasibility/), against 0 to 1 without. It costs 30 to 50 registers.
    """
    if PIPELINE_QK:
        if start < stop:
            last = start + ((stop - start - 1) // K_TILE_SIZE) * K_TILE_SIZE
            K_j = K_desc.load([head, start, 0]).reshape(K_TILE_SIZE, D)
            S_ij = tl.dot(Q_i, tl.trans(K_j))                          # raw scores, (Q_TILE, K_TILE) fp32
            for k_start in range(start, last, K_TILE_SIZE):
                V_j = V_desc.load([head, k_start, 0]).reshape(K_TILE_SIZE, D)
                K_n = K_desc.load([head, k_start + K_TILE_SIZE, 0]).reshape(K_TILE_SIZE, D)
                S_next = tl.dot(Q_i, tl.trans(K_n))                    # the next tile's scores, issued first
                O_acc, l_acc, m_acc = _online_softmax_step(O_acc, l_acc, m_acc, S_ij, V_j, q_pos, k_start, N_KEYS,
                                                           WINDOW, qk_scale, K_TILE_SIZE, MASKED, is_causal,
                                                           HAS_WINDOW)
                S_ij = S_next
            V_j = V_desc.load([head, last, 0]).reshape(K_TILE_SIZE, D)
            O_acc, l_acc, m_acc = _online_softmax_step(O_acc, l_acc, m_acc, S_ij, V_j, q_pos, last, N_KEYS,
                                                       WINDOW, qk_scale, K_TILE_SIZE, MASKED, is_causal, HAS_WINDOW)
    else:
        for k_start in range(start, stop, K_TILE_SIZE):
            K_j = K_desc.load([head, k_start, 0]).reshape(K_TILE_SIZE, D)
            V_j = V_desc.load([head, k_start, 0]).reshape(K_TILE_SIZE, D)
            S_ij = tl.dot(Q_i, tl.trans(K_j))                          # raw scores, (Q_TILE, K_TILE) fp32
            O_acc, l_acc, m_acc = _online_softmax_step(O_acc, l_acc, m_acc, S_ij, V_j, q_pos, k_start, N_KEYS,
                                                       WINDOW, qk_scale, K_TILE_SIZE, MASKED, is_causal,
                                                       HAS_WINDOW)
    return O_acc, l_acc, m_acc


@triton.jit
def _attend_query_tile(Q_desc, K_desc, V_desc, O_desc, L_ptr, head, query_tile_index,
                       stride_lb, stride_lq, N_QUERIES, N_KEYS, WINDOW, qk_scale,
                       D: tl.constexpr, Q_TILE_SIZE: tl.constexpr, K_TILE_SIZE: tl.constexpr,
                       is_causal: tl.constexpr, HAS_WINDOW: tl.constexpr, PIPELINE_QK: tl.constexpr):
    """One (head, query tile) work item: v6's program body, with descriptor loads and stores."""
    q_start = query_tile_index * Q_TILE_SIZE
    Q_i = Q_desc.load([head, q_start, 0]).reshape(Q_TILE_SIZE, D)   # rows past N_QUERIES read as 0
    q_pos = (q_start + tl.arange(0, Q_TILE_SIZE))[:, None]

    O_acc = tl.zeros((Q_TILE_SIZE, D), dtype=tl.float32)
    l_acc = tl.zeros((Q_TILE_SIZE, 1), dtype=tl.float32)
    m_acc = tl.full((Q_TILE_SIZE, 1), float("-inf"), dtype=tl.float32)

    # v6's three ranges of key tiles: [band_start, full_start) masked (the lower edge of a sliding
    # window), [full_start, diag_start) visible to every row (no mask), [diag_start, stop) masked
    # (the diagonal, or a ragged last tile). Nothing outside them is visited.
    full_stop = (N_KEYS // K_TILE_SIZE) * K_TILE_SIZE
    if is_causal:
        diag_start = tl.minimum((q_start // K_TILE_SIZE) * K_TILE_SIZE, full_stop)
        stop = tl.minimum(q_start + Q_TILE_SIZE, N_KEYS)
    else:
        diag_start = full_stop
        stop = N_KEYS
    if HAS_WINDOW:
        band_start = tl.minimum((tl.maximum(q_start - WINDOW + 1, 0) // K_TILE_SIZE) * K_TILE_SIZE, diag_start)
        full_start = tl.maximum(q_start + Q_TILE_SIZE - WINDOW, 0)
        full_start = tl.minimum(tl.maximum(tl.cdiv(full_start, K_TILE_SIZE) * K_TILE_SIZE, band_start), diag_start)
    else:
        band_start = 0
        full_start = 0

    O_acc, l_acc, m_acc = _attend_key_tiles(O_acc, l_acc, m_acc, Q_i, q_pos, K_desc, V_desc, head,
                                            band_start, full_start, N_KEYS, WINDOW, qk_scale,
                                            D=D, K_TILE_SIZE=K_TILE_SIZE, MASKED=True, is_causal=is_causal,
                                            HAS_WINDOW=HAS_WINDOW, PIPELINE_QK=PIPELINE_QK)
    O_acc, l_acc, m_acc = _attend_key_tiles(O_acc, l_acc, m_acc, Q_i, q_pos, K_desc, V_desc, head,
                                            full_start, diag_start, N_KEYS, WINDOW, qk_scale,
                                            D=D, K_TILE_SIZE=K_TILE_SIZE, MASKED=False, is_causal=is_causal,
                                            HAS_WINDOW=HAS_WINDOW, PIPELINE_QK=PIPELINE_QK)
    O_acc, l_acc, m_acc = _attend_key_tiles(O_acc, l_acc, m_acc, Q_i, q_pos, K_desc, V_desc, head,
                                            diag_start, stop, N_KEYS, WINDOW, qk_scale,
                                            D=D, K_TILE_SIZE=K_TILE_SIZE, MASKED=True, is_causal=is_causal,
                                            HAS_WINDOW=HAS_WINDOW, PIPELINE_QK=PIPELINE_QK)

    # A row that saw no key has l = 0: its output is 0 and its L is -inf (m = -inf, log2 0 = -inf).
    O_i = O_acc / tl.where(l_acc == 0.0, 1.0, l_acc)
    L_i = tl.reshape((m_acc + tl.math.log2(l_acc)) * 0.6931471805599453, (Q_TILE_SIZE,))
    O_desc.store([head, q_start, 0], O_i.to(O_desc.dtype).reshape(1, Q_TILE_SIZE, D))  # clipped at N_QUERIES
    q_rows = q_start + tl.arange(0, Q_TILE_SIZE)
    tl.store(L_ptr + head.to(tl.int64) * stride_lb + q_rows * stride_lq, L_i, mask=q_rows < N_QUERIES)


class _FitDescriptors:
    """Between the autotuner and the JIT function: give the host descriptors the block shapes of
    the configuration being launched ((1, Q_TILE_SIZE, D) for Q and O, (1, K_TILE_SIZE, D) for K
    and V). Triton's tutorial does this with a pre_hook on every triton.Config; doing it here also
    covers configurations made elsewhere (the tests pin their own)."""

    def __init__(self, fn):
        self.fn = fn
        self.arg_names = fn.arg_names

    def run(self, *args, **kwargs):
        fit_descriptor_blocks({**dict(zip(self.arg_names, args)), **kwargs})
        return self.fn.run(*args, **kwargs)

    def warmup(self, *args, **kwargs):
        fit_descriptor_blocks({**dict(zip(self.arg_names, args)), **kwargs})
        return self.fn.warmup(*args, **kwargs)


def fit_descriptor_blocks(named: dict) -> None:
    D, q, k = named["D"], named["Q_TILE_SIZE"], named["K_TILE_SIZE"]
    for name, tile in (("Q_desc", q), ("O_desc", q), ("K_desc", k), ("V_desc", k)):
        if isinstance(desc := named.get(name), TensorDescriptor):
            desc.block_shape = [1, tile, D]


# The Hopper short list (configs.json, from v7's own sweep), each wgmma configuration
# with and without the hand-pipelined key loop: the registers it costs (30 to 50 more per thread,
# one 8-warp program per SM instead of two) against the softmax it hides is for the autotuner, and
# the measurements on the GPU, to weigh. The pipelined form comes first, so the interpreter's tests, which check
# the first candidate of each tile pair, check it; tests/test_v7.py checks the other.
CONFIG_TABLE = load_table(Path(__file__).with_name("configs.json"))
ARCH, CANDIDATES = select(CONFIG_TABLE, smem_limit=smem_limit())
PIPELINE_CHOICES = tuple(CONFIG_TABLE["arches"][ARCH].get("pipeline_qk", [1, 0]))


# The pipelined loop holds two score tiles at once. Past this many fp32 registers per thread for
# the score tiles and the O accumulator together it spills: 128x128 with 4 warps at D = 64 holds 320
# and spills 2820 B (results/offline-sm_90/v7_feasibility/v7_candidates.csv), where every other
# wgmma candidate of the list holds 96.
PIPELINE_REGISTER_LIMIT = 160


def pipelining_applies(cfg: Config, D: int = 64) -> bool:
    """PIPELINE_QK = 1 is a candidate only on the wgmma path (4 warps or more: mma.sync has no
    in-flight product for the softmax to hide under) and where the second score tile fits."""
    second_tile = cfg.q_tile * cfg.k_tile / (32 * cfg.num_warps)
    return cfg.num_warps >= 4 and accumulator_registers(cfg, D) + second_tile <= PIPELINE_REGISTER_LIMIT


def tma_autotune_configs(configs, pipeline_choices=PIPELINE_CHOICES) -> list:
    """Each configuration with PIPELINE_QK 1 (where pipelining applies at D = 64) and 0, in that order."""
    return [triton.Config({**c.kwargs, "PIPELINE_QK": p}, num_warps=c.num_warps, num_stages=c.num_stages)
            for cfg, c in zip(configs, autotune_configs(configs)) for p in pipeline_choices
            if p == 0 or pipelining_applies(cfg)]


def prune_tma_configs(configs, named_args, **kwargs):
    """On a GPU: drop the pipelined candidates whose second score tile does not fit at this head
    dimension, then fa2triton.launch.prune_to_fit for each PIPELINE_QK choice apart (it would take the
    second of two configurations with the same tiles, warps and stages for a duplicate)."""
    D = kwargs.get("D", named_args.get("D", 64))
    configs = [c for c in configs if not c.kwargs.get("PIPELINE_QK", 1) or pipelining_applies(
        Config(c.kwargs["Q_TILE_SIZE"], c.kwargs["K_TILE_SIZE"], c.num_warps, c.num_stages), D)] or configs
    out = []
    for p in sorted({c.kwargs.get("PIPELINE_QK", 1) for c in configs}, reverse=True):
        group = [c for c in configs if c.kwargs.get("PIPELINE_QK", 1) == p]
        out += prune_to_fit(group, named_args, **kwargs)
    return out or configs


# bf16 and fp16 share a tuning entry: the descriptors carry no .dtype for the autotuner's key, and
# the two types have the same size and tile behaviour (each still compiles its own binary).
# Candidates are timed with the host queued ahead, after SETTLE_MS of calls back to back so that each runs at the
# clock its own power draw allows (fa2triton.queued_timing.queued_quantiles), not by Triton's do_bench.
@triton.autotune(configs=tma_autotune_configs(CANDIDATES),
                 key=["N_QUERIES", "N_KEYS", "WINDOW", "D", "is_causal", "HAS_WINDOW"],
                 prune_configs_by={"early_config_prune": prune_tma_configs}, do_bench=queued_timing.queued_quantiles)
@_FitDescriptors
@triton.jit
def flash_fwd_kernel(
    # TMA descriptors over (batch*heads, N, D), block (1, tile, D); L is a plain pointer
    Q_desc, K_desc, V_desc, O_desc, L_ptr,
    # strides of L (batch, sequence)
    stride_lb, stride_lq,
    # sizes
    N_QUERIES, N_KEYS, WINDOW,
    scale,
    # compile-time meta-parameters
    D: tl.constexpr,
    Q_TILE_SIZE: tl.constexpr,
    K_TILE_SIZE: tl.constexpr,
    is_causal: tl.constexpr,
    HAS_WINDOW: tl.constexpr,   # WINDOW is used (causal band)
    PIPELINE_QK: tl.constexpr = 1,  # key loops issue the next Q K^T before this tile's softmax (a config choice)
):
    ptx_marks.plant(FENCES=False, DESCRIPTORS=True, REDUCTIONS=True)   # Triton 3.9: 3.6's descriptors and row order
    qk_scale = scale * 1.4426950408889634
    n_tiles = tl.cdiv(N_QUERIES, Q_TILE_SIZE)
    # v6's longest-first order: the head on axis 0, query tiles reversed on axis 1. (A persistent grid of SM
    # slots looping over the same work items measured 0.62-0.98x of this: experiments/grid.csv.)
    _attend_query_tile(Q_desc, K_desc, V_desc, O_desc, L_ptr, tl.program_id(0), n_tiles - 1 - tl.program_id(1),
                       stride_lb, stride_lq, N_QUERIES, N_KEYS, WINDOW, qk_scale,
                       D=D, Q_TILE_SIZE=Q_TILE_SIZE, K_TILE_SIZE=K_TILE_SIZE, is_causal=is_causal,
                       HAS_WINDOW=HAS_WINDOW, PIPELINE_QK=PIPELINE_QK)


# --------------------------------------------------------------------------- path selection

def _device_capability(device: torch.device):
    """(major, minor) of a CUDA device, None for any other device."""
    return torch.cuda.get_device_capability(device) if device.type == "cuda" else None


def tma_ok(t: torch.Tensor) -> bool:
    """TMA's rules for a (B, N, D) tensor: 16-byte aligned base, unit last stride, every other
    stride a multiple of 16 bytes."""
    e = t.element_size()
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all((s * e) % 16 == 0 for s in t.stride()[:-1])


def select_path(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, force: str | None = None) -> str:
    """ "tma" or "v6" for inputs that passed validate_qkv (module docstring)."""
    if force is not None:
        if force not in PATHS:
            raise ValueError(f"FORCE_PATH must be None or one of {', '.join(PATHS)}, got {force!r}")
        if force != "gluon":   # the Gluon path is chosen before this (gluon_applies)
            return force
    if Q.dtype not in TMA_DTYPES:
        return "v6"
    if not interpreting():
        capability = _device_capability(Q.device)
        if capability is None or capability[0] != 9:
            return "v6"
    return "tma" if all(tma_ok(t) for t in (Q, K, V)) else "v6"


# --------------------------------------------------------------------------- launches

def _descriptors(Q, K, V, O):
    """Host descriptors over the 3-D tensors; the block shapes are fitted per configuration."""
    D = Q.shape[2]
    return [TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, D]) for t in (Q, K, V, O)]


class TmaLaunch(Launch):
    """fa2triton.lean_path's lean repeat of a launch. The four descriptors are built on the first repeat, as
    templates without a base (lean_path.templates), and each launch gives their bases: the cache key fixes every
    shape and stride. Why: building four TensorDescriptors per call doubled v7's host time
    (docs/worklogs/v7_hopper.md)."""

    blocks: tuple = ()
    descs: list | None = None
    label: str | None = None
    path = "tma"
    config: triton.Config | None = None   # the configuration it runs
    tuner_key: tuple | None = None        # the autotuner's key it was timed for (the race updates the key's pick)

    def __call__(self, Q, K, V, need_l=True):   # the per-call hot path: no imports here
        global LAST_PATH, LAST_CONFIG
        O = empty_output(Q)   # as the recorded call allocated it (allocate_outputs)
        L = torch.empty(self.l_shape, dtype=torch.float32, device=Q.device) if need_l else self.scratch_l(Q)
        descs = self.descs
        if descs is None:   # over 3-D views: a repeat may get fa2triton.api's (B, H, N, D) tensors
            descs = _descriptors(*(t.view(-1, *t.shape[-2:]) for t in (Q, K, V, O)))
            for d, block in zip(descs, self.blocks):
                d.block_shape = list(block)
            descs = self.descs = templates(descs)
        run_compiled(self.kernel, self.grid, (*descs, L, *self.tail), Q.device.index, None, (Q, K, V, O))
        LAST_PATH, LAST_CONFIG = "tma", self.label
        return O, L


class _MarkedLaunch:
    """Another path's recorded launch (v6's, the Gluon module's GluonLaunch), marking its path and configuration."""

    def __init__(self, launch, path: str, label: str):
        self.launch, self.path, self.label = launch, path, label

    def __call__(self, Q, K, V, need_l=True):
        global LAST_PATH, LAST_CONFIG
        out = self.launch(Q, K, V, need_l)
        LAST_PATH, LAST_CONFIG = self.path, self.label
        return out


def _tma_launch(Q, K, V, is_causal, window):
    """The tl path: O and L of its autotuner's pick, and a list of recorded launches for the race (_kept): the
    pick's TmaLaunch, then, where the autotuner timed its candidates in this call, those of the others it timed
    within SHORTLIST_MARGIN of the pick (compiled already: each launched once, pinned). Under the interpreter
    the list is empty."""
    B, N_q, D = Q.shape
    N_k = K.shape[1]
    O, L = allocate_outputs(Q)
    descs = _descriptors(Q, K, V, O)

    def grid(meta):
        return (B, triton.cdiv(N_q, meta["Q_TILE_SIZE"]))

    tail = (*L.stride(), N_q, N_k, window, 1.0 / math.sqrt(D))
    flags = dict(is_causal=is_causal, HAS_WINDOW=window > 0)
    keys_before = set(flash_fwd_kernel.cache)
    first = interpreting() and len(flash_fwd_kernel.configs) > 1   # it cannot time: the first (the tests pin theirs)
    with only_config(flash_fwd_kernel, flash_fwd_kernel.configs[0]) if first else contextlib.nullcontext():
        compiled = flash_fwd_kernel[grid](*descs, L, *tail, D=D, **flags)
    if compiled_or_none(compiled) is None:  # the interpreter launches no binary
        return O, L, []
    pick = flash_fwd_kernel.best_config
    launches = [_recorded_tma_launch(compiled, pick, grid, tail, D, flags, descs, L)]
    tuned = set(flash_fwd_kernel.cache) - keys_before   # the autotuner's key, where it timed its candidates just now
    if tuned:
        timings = flash_fwd_kernel.configs_timings
        for cfg in shortlist((t[0], c) for c, t in timings.items() if math.isfinite(t[0])):
            if cfg is pick:
                continue
            O2, L2 = allocate_outputs(Q)
            descs2 = _descriptors(Q, K, V, O2)
            with only_config(flash_fwd_kernel, cfg):
                compiled = flash_fwd_kernel[grid](*descs2, L2, *tail, D=D, **flags)
            launches.append(_recorded_tma_launch(compiled, cfg, grid, tail, D, flags, descs2, L2))
        flash_fwd_kernel.best_config = pick   # as the autotuner left it (only_config's runs set their own)
        for launch in launches:
            launch.tuner_key = next(iter(tuned))
    return O, L, launches


def _recorded_tma_launch(compiled, cfg, grid, tail, D, flags, descs, L) -> "TmaLaunch":
    """The TmaLaunch that repeats `compiled` (configuration cfg, launched on descs, O's among them, and L) on other
    tensors of the same signature."""
    g = grid(cfg.kwargs)
    launch = TmaLaunch(compiled, (*g, 1), launch_tail(tail, D, cfg.kwargs, flags), L.shape)
    launch.blocks = tuple(tuple(d.block_shape) for d in descs)
    launch.label, launch.config = config_label(cfg), cfg
    return launch


def launch_tail(tail: tuple, D: int, meta: dict, flags: dict) -> tuple:
    """Every argument of flash_fwd_kernel after the five tensors, constexprs included, in signature
    order: what the compiled kernel's launcher takes on the lean path."""
    return (*tail, D, meta["Q_TILE_SIZE"], meta["K_TILE_SIZE"], flags["is_causal"], flags["HAS_WINDOW"],
            meta.get("PIPELINE_QK", 1))


def _v6_launch(Q, K, V, is_causal, window):
    """v6's path. On a GPU: v6's own normal path (its autotuner, its configurations). Under the
    interpreter, which cannot time candidates: v6's kernel with the tiles of v7's first candidate
    (the one the tests pin)."""
    mode = (is_causal, window, "longest_first", 0)
    if not interpreting():
        O, L, launch = V6._checked_launch(Q, K, V, mode)
        label = config_label(V6.flash_fwd_kernel.best_config)
        return O, L, (_MarkedLaunch(launch, "v6", label) if launch is not None else None)
    cfg = flash_fwd_kernel.configs[0]
    q_tile, k_tile = cfg.kwargs["Q_TILE_SIZE"], cfg.kwargs["K_TILE_SIZE"]
    B, N_q, D = Q.shape
    O, L = allocate_outputs(Q)
    V6.flash_fwd_kernel.fn[(B, triton.cdiv(N_q, q_tile))](
        Q, K, V, O, L, *strides(Q, K, V, O, L), N_q, K.shape[1], window, 1.0 / math.sqrt(D),
        D=D, Q_TILE_SIZE=q_tile, K_TILE_SIZE=k_tile, is_causal=is_causal, HAS_WINDOW=window > 0,
        HEAD_MAJOR=True, REVERSE=True, P_CAST=0, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return O, L, None


def _candidates(path: str, Q) -> dict:
    """A path's candidates now, by label, at Q's head dimension: the Gluon ones that fit, or the tl ones and their forms
    fitted to the shared memory (prune_tma_configs: the forms the autotuner times and the race races)."""
    D = Q.shape[2]
    if path == "gluon":
        return {c.label: c for c in GLUON.fitting(GLUON.candidates_for(D), D, Q.device.index)}
    tl = (*flash_fwd_kernel.configs, *prune_tma_configs(flash_fwd_kernel.configs, {}, D=D))
    return {config_label(c): c for c in tl}


def gluon_applies(Q, K, V, is_causal: bool, window: int, force: str | None) -> str | None:
    """None when the Gluon path takes these inputs, else why not: it is asked for (FORCE_PATH = "gluon",
    or FlashAttentionTriton.GLUON with no FORCE_PATH), a causal mask at D = 64 only when raced against the tl path
    (RACE_TL) or forced (FORCE_PATH = "gluon"), not interpreting (Gluon is not interpreted), the Gluon module's own
    rules (gluon_forward_hopper.applies), and one of its candidates fits the GPU's shared memory at this head
    dimension (D = 64 on the H200). Causal inputs take the race (at D = 64 the Gluon path wins at small N, the tl path
    from N = 1024; at D = 128 the Gluon path): docs/worklogs/v7_hopper.md, "Module notes moved out of the code"."""
    if force not in (None, "gluon") or (force is None and not FlashAttentionTriton.GLUON):
        return "not asked for"
    if is_causal and force is None and Q.shape[2] < 128 and not FlashAttentionTriton.RACE_TL:
        return ("causal mask without the race against the tl path (which is faster there from N = 1024: experiment "
                "gluon; FORCE_PATH='gluon' runs it)")
    if interpreting():
        return "the interpreter cannot run Gluon"
    why = GLUON.applies(Q, K, V, window)
    if why is None and not _candidates("gluon", Q):
        why = f"no candidate fits the shared memory at head dimension {Q.shape[2]}"
    return why


def _faster_of(Q, K, V, *launches):
    """Of launches made on these inputs (None: a path that made none), the one with the least median of its
    fa2triton.queued_timing.queued_ms timings (fa2triton.race.medians: rounds in alternating order, more of them for a
    near tie), with the O and L of a call of it.
    The fastest of the tl path's launches here also becomes its autotuner's pick for their key (tuner_key), so
    a later signature with that key starts from it."""
    # queued_timing.queued_ms is looked up per call: tests replace it
    medians = race_medians(launches, lambda launch: queued_timing.queued_ms(lambda launch=launch: launch(Q, K, V)))
    tl = [(m, launch) for m, launch in zip(medians, launches) if getattr(launch, "tuner_key", None) is not None]
    if tl:
        fastest = min(tl, key=lambda t: t[0])[1]
        flash_fwd_kernel.cache[fastest.tuner_key] = flash_fwd_kernel.best_config = fastest.config
    launch = launches[medians.index(min(medians))]
    O, L = launch(Q, K, V)   # after the timing's calls, this one records the path and configuration that won
    return O, L, launch


def _kept(Q, K, V, O, L, launches: list):
    """O, L and the launch a signature keeps: the race's winner among `launches` (its own O and L), or the only
    launch (O and L as they are), or None (the interpreter: nothing to repeat)."""
    global LAST_PATH, LAST_CONFIG
    if len(launches) > 1:
        return _faster_of(Q, K, V, *launches)
    if launches:
        LAST_PATH, LAST_CONFIG = launches[0].path, launches[0].label
    return O, L, (launches[0] if launches else None)


def _checked_launch(Q, K, V, mode):
    """The normal path: check, choose the path, allocate, launch the table's choice or autotune and race (module
    docstring). Returns O, L and the launch that repeats it (fa2triton.lean_path); LAST_CHOICE says which it did."""
    global LAST_CHOICE
    is_causal, window, force, _, race_tl, launch_from = mode
    if launch_from not in ("table", "race"):
        raise ValueError(f"LAUNCH_FROM must be 'table' or 'race', got {launch_from!r}")
    validate_qkv(Q, K, V)
    Q, K, V = (unit_stride(t) for t in (Q, K, V))
    route = _route(Q, K, V, is_causal, window, force, race_tl)
    # a pinned tl or v6 configuration (fa2triton.launch.pin_config, the tests' only_config) runs as it is
    pinned = route != "gluon" and len((V6.flash_fwd_kernel if route == "v6" else flash_fwd_kernel).configs) <= 1
    from_table = not (pinned or route == "v6" or launch_from == "race")
    choice, known = table_choice(Q, K, is_causal, route) if from_table else (None, {})
    if choice is not None and choice.launch is not None:
        LAST_CHOICE = "table"
        return _table_launch(Q, K, V, is_causal, window, choice.launch, known[choice.launch.path][choice.launch.label])
    LAST_CHOICE = "pinned" if pinned else "tuned"
    return _tune(Q, K, V, is_causal, window, route)


def _route(Q, K, V, is_causal, window, force, race_tl) -> str:
    """Which paths a first call of these inputs tries: "gluon" (the Gluon candidates raced), "gluon+tma" (raced
    against the tl path too: RACE_TL), "tma" or "v6"."""
    why_not_gluon = gluon_applies(Q, K, V, is_causal, window, force)
    if why_not_gluon is None:
        return "gluon+tma" if race_tl and force is None and select_path(Q, K, V, None) == "tma" else "gluon"
    if force == "gluon":
        raise ValueError(f"FORCE_PATH='gluon' cannot run these inputs: {why_not_gluon}")
    return select_path(Q, K, V, force)


def _tune(Q, K, V, is_causal, window, route):
    """A first call on `route`, timed: the Gluon candidates once each, the shortlist raced (_kept), with the tl path's
    on "gluon+tma"; the tl autotuner and race; v6's autotuner. Returns O, L, the launch kept (None: the interpreter)."""
    global LAST_PATH, LAST_CONFIG
    if route.startswith("gluon"):   # each candidate timed once per first call, the shortlist raced (_kept)
        O, L, _, timed = GLUON.best_launch(Q, K, V, is_causal)
        launches = [_MarkedLaunch(launch, "gluon", launch.label) for launch in shortlist(timed.values())]
        if route == "gluon+tma":
            launches += _tma_launch(Q, K, V, is_causal, window)[2]
        return _kept(Q, K, V, O, L, launches)
    if route == "tma":
        LAST_PATH, LAST_CONFIG = "tma", None   # the configuration stays None under the interpreter
        return _kept(Q, K, V, *_tma_launch(Q, K, V, is_causal, window))
    out = _v6_launch(Q, K, V, is_causal, window)
    LAST_PATH, LAST_CONFIG = "v6", getattr(out[2], "label", None)
    return out


def table_choice(Q, K, is_causal, route):
    """The launch table's Choice for these inputs among the route's paths and today's candidates, and those
    candidates (path -> label -> configuration); where it has none, its reason is warned once (not under the
    interpreter, which times nothing) and the caller races; a launch from another GPU's section is warned once too."""
    table, gpu = FlashAttentionTriton.LAUNCH_TABLE, launch_table.gpu_identity(Q.device.index)
    allowed = tuple(route.split("+"))   # "gluon+tma", "gluon" or "tma"
    known = {path: _candidates(path, Q) for path in allowed}
    choice = launch_table.lookup(table, launch_table.signature(Q, K, is_causal), gpu, allowed, known)
    if choice.launch is None and gpu.key != launch_table.INTERPRETER:
        table.warn_once(choice.reason)
    elif choice.raced_on not in (None, gpu.key):   # once per GPU pair: the same message for every signature
        table.warn_once(f"{table.kernel}: no launch table for {gpu.key}: its launches come from {choice.raced_on}'s "
                        f"({gpu.arch}, {gpu.sm_count} SMs as here); `{launch_table.TASK.format(kernel=table.kernel)}` "
                        f"on this GPU races its own")
    return choice, known


def _table_launch(Q, K, V, is_causal, window, launch, cfg):
    """The table's launch, untimed: the Gluon candidate `cfg` of that label, or the tl autotuner left that one
    candidate (nothing timed). table_choice's lookup checked that the label is a candidate."""
    global LAST_PATH, LAST_CONFIG
    if launch.path == "gluon":
        O, L, recorded = GLUON.forward(Q, K, V, is_causal, cfg)
        LAST_PATH, LAST_CONFIG = "gluon", launch.label
        return O, L, _MarkedLaunch(recorded, "gluon", launch.label)
    with only_config(flash_fwd_kernel, cfg):
        return _tune(Q, K, V, is_causal, window, "tma")


class FlashAttentionTriton(LeanApply, torch.autograd.Function):
    FORCE_PATH = None                # None (the rules above), "tma", "v6" or "gluon"
    # The Gluon path for non-causal inputs (fa2triton/gluon/gluon_forward_hopper.py, V7_CANDIDATES), on
    # where it applies; False: the tl path's numbers before it (the lab's FA2_V7_GLUON=0, fa2lab.switches).
    GLUON = True
    # Where the Gluon path applies, also autotune the tl path and keep whichever launch is faster (_faster_of):
    # neither path wins everywhere (docs/experiments.md, FA2_V7_RACE_TL). False: no race (the lab's FA2_V7_RACE_TL=0).
    RACE_TL = True
    BACKWARD_DQ_MODE = "auto"        # flash_backward_triton.DQ_CHOICES: "auto" fuses the small problems
    BACKWARD_CONFIG = None           # a fa2triton.backward_config.BackwardConfig, or None: its per-GPU default
    BACKWARD_DKDV = "auto"           # flash_backward_triton.DKDV_CHOICES: "auto", the Gluon kernels on Hopper
    # A first call's launch: "table", launch_table.json's for this GPU (fa2triton.launch_table), else the race; "race",
    # time and race every new signature as `invoke pick-launch` does (the table's lab: sweeps/pick_launch.py; the
    # lab's FA2_V7_LAUNCH_FROM=race, fa2lab.switches).
    LAUNCH_FROM = "table"
    LAUNCH_TABLE = launch_table.load(Path(__file__).with_name("launch_table.json"), "v7_hopper")
    launches = LaunchCache()         # input signature -> the launch the normal path made for it (fa2triton.lean_path)

    @staticmethod
    def forward(ctx, Q, K, V, is_causal=False, window_size=None):
        window = 0 if window_size is None else int(window_size)
        if window_size is not None and (window < 1 or not is_causal):
            raise ValueError(f"window_size={window_size!r}: a sliding window is a causal band of at least one "
                             "key (query i sees keys i - window < j <= i); pass is_causal=True and window_size >= 1")
        mode = (bool(is_causal), window, FlashAttentionTriton.FORCE_PATH, FlashAttentionTriton.GLUON,
                FlashAttentionTriton.RACE_TL, FlashAttentionTriton.LAUNCH_FROM)
        O, L = FlashAttentionTriton.launches(Q, K, V, mode, _checked_launch, ctx)
        ctx.save_for_backward(Q, K, V, O, L)
        ctx.is_causal = bool(is_causal)
        ctx.window = window
        return O

    @staticmethod
    def backward(ctx, dO):
        if torch.is_grad_enabled():   # create_graph: the kernels make no graph; the recompute does
            return autograd_backward(ctx, dO)
        Q, K, V, O, L = ctx.saved_tensors
        dQ, dK, dV = backward_kernels.backward_after_forward(
            ctx.forward_launch, Q, K, V, O, L, dO, ctx.is_causal, FlashAttentionTriton.BACKWARD_CONFIG,
            FlashAttentionTriton.BACKWARD_DQ_MODE, all(ctx.needs_input_grad[:3]), FlashAttentionTriton.BACKWARD_DKDV,
            ctx.window)
        return dQ, dK, dV, None, None


# --------------------------------------------------------------------------- offline compiles

def offline_compile_args(N: int, D: int, dtype: str, batch: int, cfg, causal: bool, pipeline_qk: int | None = None):
    """For profiling/inspect_kernel.py: flash_fwd_kernel's positional arguments for contiguous
    (batch, N, D) tensors, as descriptors over 'meta' tensors (no memory, no GPU) with the
    configuration's block shapes, and the constexprs beyond D, tiles and is_causal: no window, and
    config_kwargs's PIPELINE_QK (pipeline_qk, else the rule; inspect_kernel's --config has no field for it)."""
    from fa2triton.offline import torch_dtype

    tdt = torch_dtype(dtype)
    Q, K, V, O = (torch.empty(batch, N, D, dtype=tdt, device="meta") for _ in range(4))
    L = torch.empty(batch, N, dtype=torch.float32, device="meta")
    descs = _descriptors(Q, K, V, O)
    fit_descriptor_blocks({"Q_desc": descs[0], "K_desc": descs[1], "V_desc": descs[2], "O_desc": descs[3],
                           "D": D, "Q_TILE_SIZE": cfg.q_tile, "K_TILE_SIZE": cfg.k_tile})
    args = (*descs, L, *L.stride(), N, N, 0, 1.0 / math.sqrt(D))
    return args, {"HAS_WINDOW": False, **config_kwargs(cfg, D, pipeline_qk)}


def config_kwargs(cfg, D: int = 64, pipeline_qk: int | None = None) -> dict:
    """The constexprs beyond the tiles that one pinned configuration needs (fa2triton.launch.pin_config:
    the profile drivers' --config and the sweep): PIPELINE_QK = pipeline_qk if given (0 or 1), else 1 where
    pipelining_applies and 0 elsewhere, the rule by which the autotuner's candidates are made."""
    if pipeline_qk is None:
        pipeline_qk = int(pipelining_applies(cfg, D))
    if pipeline_qk not in (0, 1):
        raise ValueError(f"pipeline_qk must be None, 0 or 1, got {pipeline_qk!r}")
    return {"PIPELINE_QK": int(pipeline_qk)}
