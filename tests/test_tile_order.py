"""fa2triton.tile_order: the backward kernels' grid and each program's (tile, head) on it, run under Triton's
interpreter (natively on a GPU). Causal, the launch order (linear program id, axis 0 fastest) must reach every
head's longest tile before any head's second longest; without the mask the tiles stay on axis 0."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"   # before the kernels' import

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from fa2triton import tile_order  # noqa: E402

DEVICE = "cuda" if ON_GPU else "cpu"


@triton.jit
def _places(out_ptr, TILES, CAUSAL: tl.constexpr, LONGEST_LAST: tl.constexpr):
    """out[linear id] = (tile, head) of each program, the linear id the launch order's (axis 0 fastest)."""
    linear = tl.program_id(0) + tl.program_id(1) * tl.num_programs(0)
    tile, head = tile_order.tile_and_head(TILES, CAUSAL, LONGEST_LAST)
    tl.store(out_ptr + 2 * linear, tile)
    tl.store(out_ptr + 2 * linear + 1, head)


def _launch_order(tiles, heads, causal, longest_last):
    out = torch.full((tiles * heads, 2), -1, dtype=torch.int32, device=DEVICE)
    _places[tile_order.grid(tiles, heads, causal)](out, tiles, CAUSAL=causal, LONGEST_LAST=longest_last)
    return [tuple(p) for p in out.cpu().tolist()]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("longest_last", [False, True])
def test_every_tile_and_head_once(causal, longest_last):
    order = _launch_order(5, 3, causal, longest_last)
    assert sorted(order) == [(t, h) for t in range(5) for h in range(3)]


def test_causal_key_tiles_start_with_every_heads_first():
    order = _launch_order(4, 3, True, False)
    assert [t for t, _ in order] == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3   # the first key tile sees every query


def test_causal_query_tiles_start_with_every_heads_last():
    order = _launch_order(4, 3, True, True)
    assert [t for t, _ in order] == [3] * 3 + [2] * 3 + [1] * 3 + [0] * 3   # the last query tile sees every key


@pytest.mark.parametrize("longest_last", [False, True])
def test_without_the_mask_one_heads_tiles_run_together(longest_last):
    order = _launch_order(4, 3, False, longest_last)
    assert order == [(t, h) for h in range(3) for t in range(4)]


def test_grid():
    assert tile_order.grid(7, 2, False) == (7, 2)
    assert tile_order.grid(7, 2, True) == (14, 1)
