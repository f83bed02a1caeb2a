"""The harness shape and the FLOP count, defined once for every script."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from fa2triton.versions import HEAD_DIMS  # noqa: F401 (the head dimensions every version takes)

# The harness shape (the article's): batch 4, 8 heads, head dimension 64, bf16.
BATCH = 4
HEADS = 8
HEAD_DIM = 64
DTYPE_NAME = "bfloat16"
SEQ_LENS = (512, 1024, 2048, 4096)
MASKS = (False, True)


@dataclass(frozen=True)
class Shape:
    """One benchmark shape. Q, K, V are (B * H, N, D) for the kernels."""

    N: int
    causal: bool
    B: int = BATCH
    H: int = HEADS
    D: int = HEAD_DIM

    @property
    def flops(self) -> float:
        return flops(self.B, self.H, self.N, self.D, self.causal)

    @property
    def label(self) -> str:
        return f"N={self.N} {'causal' if self.causal else 'non-causal'}"


def flops(B: int, H: int, N: int, D: int, causal: bool, N_k: int | None = None) -> float:
    """FLOPs of the forward pass as the harness counts them.

    Two matrix products of 2*N*N_k*D each per head: 4*B*H*N*N_k*D, halved for
    causal attention (the useful half; the diagonal tiles' waste is not counted).
    """
    n_k = N if N_k is None else N_k
    total = 4.0 * B * H * N * n_k * D
    return total / 2 if causal else total


BWD_FLOP_FACTOR = 2.5      # backward: 5 matrix products (S, dV, dP, dQ, dK) against the forward's 2
FWD_BWD_FLOP_FACTOR = 3.5  # forward + backward


def masks_from(choice: str) -> tuple[bool, ...]:
    """The scripts' --causal choice ('both', '0' or '1') as the masks to run."""
    try:
        return {"both": MASKS, "0": (False,), "1": (True,)}[str(choice)]
    except KeyError:
        raise ValueError(f"--causal must be both, 0 or 1, not {choice!r}") from None


def harness_shapes(Ns=SEQ_LENS, masks=MASKS) -> Iterator[Shape]:
    """The harness's shapes in its order: every N non-causal, then every N causal."""
    for causal in masks:
        for N in Ns:
            yield Shape(N=N, causal=causal)


def tflops(flop: float, ms: float) -> float:
    return flop / (ms * 1e-3) / 1e12
