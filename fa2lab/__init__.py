"""Shared machinery of the FlashAttention-2 rounds artifact.

Everything that more than one script needs lives here once: the registry of
kernel versions, the harness shape and FLOP count, GPU facts read from the
device, timing, provenance, result files, configuration tables and the
reference implementation used by the tests and by every version's backward.
"""

__all__ = [
    "budget",
    "checks",
    "configs",
    "gpu",
    "interpret",
    "provenance",
    "reference",
    "results",
    "shapes",
    "timing",
    "versions",
]
