"""Unit tests run without a GPU: kernels loaded here run under Triton's CPU interpreter.

TRITON_INTERPRET must be set before a kernel module is imported (@triton.jit reads it), and
the interpreter's bf16 tl.dot gap is patched (fa2lab.interpret)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from fa2lab.interpret import patch_interpreter

    patch_interpreter()
