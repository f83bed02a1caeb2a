"""fa2triton/gluon/hopper.py: the helpers the Gluon forward and both Gluon backwards share."""

import math

import pytest

from fa2triton.gluon import gluon_backward_hopper, gluon_backward_ws
from fa2triton.gluon import gluon_forward_hopper as G

pytestmark = pytest.mark.skipif(not G.HAVE_GLUON, reason="this Triton has no Gluon")


def test_the_constants_are_defined_once_and_shared():
    from fa2triton.gluon import hopper as H

    assert H.LOG2E == pytest.approx(1 / math.log(2), abs=0) and H.LN2 == pytest.approx(math.log(2), abs=0)
    assert H.LOG2E_C.value == H.LOG2E and H.LN2_C.value == H.LN2
    B, W = gluon_backward_hopper, gluon_backward_ws
    assert G.LOG2E is B.LOG2E is W.LOG2E is H.LOG2E and G.LN2 is H.LN2
    from fa2triton.gluon import gluon_ptx

    assert gluon_ptx.PARTITION_BARRIER_BASE == H.BarrierId.PARTITION_BASE == 8


@pytest.mark.parametrize("slots", [1, 2, 3, 4])
def test_slot_and_phases_of_a_ring(slots):
    """Use i sits in slot i % SLOTS; its ready phase flips once per round of the ring, and its producer waits for the
    phase before (the release of use i - SLOTS)."""
    from fa2triton.gluon import hopper as H

    slot, ready, empty = H.slot_of.fn, H.ready_phase.fn, H.empty_phase.fn
    for i in range(4 * slots):
        assert slot(i, slots) == i % slots
        assert ready(i, slots) == (i // slots) % 2
        assert empty(i, slots) == 1 - ready(i, slots)
        if i >= slots:   # the producer of use i waits for the phase use i - SLOTS's consumers completed
            assert empty(i, slots) == ready(i - slots, slots)
