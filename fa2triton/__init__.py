"""FlashAttention-2 in Triton, one version per optimisation round (fa2triton/kernels/<round>/), and the runtime they
share: input checks, launch and lean host path, GPU facts, configuration tables, the Triton backward and the Hopper
Gluon kernels. It imports nothing from the lab (fa2lab) that measures it."""

from .versions import VERSIONS

__all__ = ["VERSIONS"]
