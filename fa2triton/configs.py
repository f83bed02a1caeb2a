"""Per-architecture configuration tables of the tuned versions (v1, v2, v5).

Each tuned version keeps a `configs.json` beside its kernel file:

    {"version": "v5_final", "role": "shortlist",
     "arches": {"sm_89": {"gpu": ..., "source": ..., "provisional": false, "configs": [[64, 32, 4, 3], ...]},
                "sm_90": {...}}}

`invoke pick-configs` writes the entries from a sweep CSV (fa2lab.pick.write_entry); the article's Ada
entries are transcribed from its text and say so in their `source`.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from .budget import Config, fit_stages
from .gpu import arch_name

_warned: set[tuple[str, str]] = set()


def load_table(path: str | Path) -> dict:
    path = Path(path)
    try:
        table = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"configuration table {path} is missing") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"configuration table {path} is not valid JSON: {e}") from None
    if not table.get("arches"):
        raise ValueError(f"configuration table {path} has no 'arches' entries")
    return table


def arch_number(arch: str) -> int:
    """'sm_90' -> 90: the order of a table's architectures."""
    return int(arch.removeprefix("sm_"))


def current_arch() -> str | None:
    """The architecture of CUDA device 0, None when there is no GPU (select's `arch` names another)."""
    import torch

    if torch.cuda.is_available():
        return arch_name(torch.cuda.get_device_capability(0))
    return None


def select(table: dict, arch: str | None = None, smem_limit: int | None = None,
           D: int = 64, elem_bytes: int = 2) -> tuple[str, list[Config]]:
    """The configurations to use on `arch`: its own entry, or the nearest one.

    Without an entry of its own, the nearest architecture's configurations are
    used, each fitted to this GPU's shared memory by dropping stages, and a
    warning says once that a sweep on this GPU would do better. Without a GPU
    (the interpreter) the newest entry is used.
    """
    arches = table["arches"]
    if arch is None:
        arch = current_arch()
    if arch is None:
        chosen = max(arches, key=arch_number)
        return chosen, [Config(*c) for c in arches[chosen]["configs"]]
    if arch in arches:
        return arch, [Config(*c) for c in arches[arch]["configs"]]
    nearest = min(arches, key=lambda a: (abs(arch_number(a) - arch_number(arch)), -arch_number(a)))
    configs = [Config(*c) for c in arches[nearest]["configs"]]
    if smem_limit is not None:
        fitted = [fit_stages(c, smem_limit, D, elem_bytes, arch) for c in configs]
        configs = list(dict.fromkeys(c for c in fitted if c is not None)) or configs
    key = (table.get("version", "?"), arch)
    if key not in _warned:
        _warned.add(key)
        warnings.warn(
            f"{table.get('version', 'this version')}: no configuration entry for {arch}; using {nearest}'s "
            f"within this GPU's shared memory. A sweep on this GPU (invoke sweep, then invoke pick-configs) "
            f"would do better.", stacklevel=2)
    return nearest, configs
