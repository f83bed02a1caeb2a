"""fa2triton.scratch: the scratch recorded launches keep stays within one process-wide budget, the longest-kept
dropped first; an owner that is gone no longer counts; the backward's and the forward's kept buffers go through it."""

from __future__ import annotations

import gc

import pytest
import torch

from fa2triton import flash_backward_triton as fb
from fa2triton import scratch
from fa2triton.lean_path import KeptL


class Owner:
    def __init__(self):
        self.kept = {}

    def drop_scratch(self, key):
        del self.kept[key]


def keep(pool, owner, key, nbytes):
    if pool.keep(owner, key, nbytes):
        owner.kept[key] = nbytes
        return True
    return False


def test_past_the_budget_the_longest_kept_go_first():
    pool = scratch.Kept(budget=100)
    a, b = Owner(), Owner()
    assert keep(pool, a, "s1", 40) and keep(pool, b, "s1", 40) and keep(pool, a, "s2", 20)
    assert pool.used == 100 and a.kept == {"s1": 40, "s2": 20} and b.kept == {"s1": 40}
    assert keep(pool, b, "s2", 50)   # the two oldest (a's s1, then b's s1) make room for 50
    assert a.kept == {"s2": 20} and b.kept == {"s2": 50} and pool.used == 70
    assert not keep(pool, a, "big", 101) and pool.used == 70 and "big" not in a.kept
    pool.release()
    assert pool.used == 0 and a.kept == {} == b.kept and not pool.entries


def test_an_owner_that_is_gone_no_longer_counts():
    pool = scratch.Kept(budget=100)
    a, b = Owner(), Owner()
    keep(pool, a, 0, 60)
    keep(pool, b, 0, 30)
    del a
    gc.collect()
    assert pool.used == 30
    assert keep(pool, b, 1, 70) and b.kept == {0: 30, 1: 70}   # nothing of b's dropped for a's gone 60


def test_the_forward_s_unread_l_is_kept_within_the_budget(monkeypatch):
    monkeypatch.setattr(scratch, "KEPT", scratch.Kept(budget=2 * 8 * 4))

    class Launch(KeptL):
        l_shape = torch.Size((2, 8))   # 64 bytes of fp32: one fits

    Q = torch.empty(2, 8, 16)
    first, second = Launch(), Launch()
    L = first.scratch_l(Q)
    assert first.scratch_l(Q) is L and scratch.KEPT.used == 64
    assert second.scratch_l(Q) is second.l_scratch and first.l_scratch is None   # first's dropped for second's
    monkeypatch.setattr(Launch, "l_shape", torch.Size((4, 8)))   # past the budget alone: allocated, not kept
    third = Launch()
    assert third.scratch_l(Q).shape == (4, 8) and third.l_scratch is None


@pytest.mark.parametrize("dq_mode", ["atomic", "separate"])
def test_backward_launches_share_the_budget_and_repeat_the_same_gradients(monkeypatch, dq_mode):
    """Two signatures' launches where the budget holds one launch's scratch: the second keeping its own drops the
    first's, whose next repeat allocates again and gives the checked call's gradients."""
    from test_backward import BF16, make_inputs

    small, large = make_inputs(2, 64, 80, 32, BF16, True), make_inputs(2, 48, 80, 32, BF16, True, seed=3)
    launches = [fb._checked_backward(*x, True, None, dq_mode, False, True)[-1] for x in (small, large)]
    need = [fb.scratch_buffers(x[0], launches[0].acc_apart)[1].untyped_storage().nbytes() for x in (small, large)]
    monkeypatch.setattr(scratch, "KEPT", scratch.Kept(budget=max(need)))
    for launch in launches:
        launch.scratch.clear()
    launches[0](*small)
    assert len(launches[0].scratch) == 1 and scratch.KEPT.used == need[0]
    launches[1](*large)
    assert not launches[0].scratch and len(launches[1].scratch) == 1 and scratch.KEPT.used == need[1]
    want = fb._checked_backward(*small, True, None, dq_mode, False, True)[:3]
    for a, b in zip(want, launches[0](*small)):
        assert torch.equal(a, b) or (dq_mode == "atomic" and torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-2))
    assert len(launches[0].scratch) == 1 and not launches[1].scratch
