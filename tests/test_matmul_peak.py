"""The Round 2 matmul's variants compute a matrix product (interpreter on the CPU)."""

import pytest
import torch

from profiling.matmul_peak import VARIANTS, matmul, operands

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variant_is_a_matmul(variant):
    a, b = operands(variant, 48, 40, 72, device=DEVICE)
    c = matmul(a, b, variant, block=(16, 16, 32), num_warps=4, num_stages=2)
    ref = a.double().cpu() @ b.double().cpu()
    tol = {"fp16->fp16": 2e-2, "tf32->fp32": 5e-3}.get(variant, 1e-3)
    assert c.dtype == getattr(torch, VARIANTS[variant][2])
    assert ((c.double().cpu() - ref).norm() / ref.norm()) < tol
