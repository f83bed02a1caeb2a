"""Unit tests run without a GPU: kernels loaded here run under Triton's CPU interpreter.

TRITON_INTERPRET must be set before a kernel module is imported (@triton.jit reads it). A version's
apply() installs the interpreter's workarounds itself (fa2triton.inputs.validate_qkv ->
fa2triton.interpret); they are installed here too for the tests that launch a kernel directly, without
a version's checks (the Round 2 matmul's bf16 variant, for one)."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from fa2triton.interpret import patch_interpreter

    patch_interpreter()


@pytest.fixture
def fresh_v7(monkeypatch):
    """v7 with no launch recorded, its launch table choosing (the default), nothing forced; yields its class."""
    from fa2triton import versions
    from fa2triton.lean_path import LaunchCache

    FA = versions.load("v7_hopper").FlashAttentionTriton
    monkeypatch.setattr(FA, "launches", LaunchCache())
    monkeypatch.setattr(FA, "LAUNCH_FROM", "table")
    monkeypatch.setattr(FA, "FORCE_PATH", None)
    monkeypatch.setattr(FA, "GLUON", True)
    return FA
