"""v7's launch race (the first call of a new input signature with LAUNCH_FROM = "race", and `invoke pick-launch`):
which candidates are raced, for how many rounds, and each one's median. Host code only: the caller gives the timer
(v7: fa2triton.queued_timing.queued_ms)."""

from __future__ import annotations

import math
import statistics

# Rounds of the race, the launches' order reversed every other round: an even count gives each launch each position
# equally often, so a drift between the first and the second timing (the GPU warming) cancels.
RACE_ROUNDS = 4
# A race whose two fastest medians lie within NEAR_TIE goes on, RACE_ROUNDS more at a time, up to MAX_RACE_ROUNDS:
# in 4 rounds the H200 table's race put /la 0.4% ahead of q1 at D = 128 non-causal N = 4096, where 5 rounds in one
# process put q1 2.3% ahead by the same timing (docs/worklogs/gluon_forward_hopper.md, "The race's near-ties").
NEAR_TIE = 0.02
MAX_RACE_ROUNDS = 16
# A path's candidates timed one after another drift with the clock (experiment tl-pick), so every candidate whose own
# first timing came within this fraction of its path's fastest is timed again in the race (shortlist). The numbers
# behind both: docs/worklogs/v7_hopper.md, "Module notes moved out of the code".
SHORTLIST_MARGIN = 0.10


def shortlist(timed, margin: float = SHORTLIST_MARGIN) -> list:
    """Of (ms, candidate) pairs from one path's sequential timing, the candidates within `margin` of the fastest,
    fastest first."""
    ranked = sorted(timed, key=lambda t: t[0])
    return [c for ms, c in ranked if ms <= ranked[0][0] * (1 + margin)] if ranked else []


def near_tie(medians, margin: float = NEAR_TIE) -> bool:
    """Whether the two least of a race's medians (inf: a path that made no launch) lie within `margin` of each other."""
    finite = sorted(m for m in medians if math.isfinite(m))
    return len(finite) >= 2 and finite[1] <= finite[0] * (1 + margin)


def medians(launches, time) -> list[float]:
    """Each launch's median of time(launch) (ms) over RACE_ROUNDS rounds in alternating order, and RACE_ROUNDS more
    at a time while the two fastest are a near_tie, up to MAX_RACE_ROUNDS; inf for None (a path that made none)."""
    ms = [[] for _ in launches]
    rounds, out = 0, []
    while rounds == 0 or (rounds < MAX_RACE_ROUNDS and near_tie(out)):
        for r in range(rounds, rounds + RACE_ROUNDS):
            for i in (range(len(launches)) if r % 2 == 0 else reversed(range(len(launches)))):
                if launches[i] is not None:
                    ms[i].append(time(launches[i]))
        rounds += RACE_ROUNDS
        out = [statistics.median(m) if m else math.inf for m in ms]
    return out
