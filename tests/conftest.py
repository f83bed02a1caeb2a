"""Unit tests run without a GPU: kernels loaded here run under Triton's CPU interpreter.

TRITON_INTERPRET must be set before a kernel module is imported (@triton.jit reads it). A version's
apply() installs the interpreter's workarounds itself (fa2triton.inputs.validate_qkv ->
fa2triton.interpret); they are installed here too for the tests that launch a kernel directly, without
a version's checks (the Round 2 matmul's bf16 variant, for one)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from fa2triton.interpret import patch_interpreter

    patch_interpreter()
