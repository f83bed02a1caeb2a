"""The one registry of kernel versions, and their loader: the API, the lab's tasks, harness, sweeps and figures read it.

Each version is a folder under fa2triton/kernels/ holding flashattention_autograd_function_triton.py (and its
configs.json): every round has the same file name, so that the harness picks one by PYTHONPATH and `diff` between two
folders shows a round. In one process several versions are loaded by path, each under a module name of its own."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

KERNELS = Path(__file__).resolve().parent / "kernels"   # inside the package: installed with it
KERNEL_FILE = "flashattention_autograd_function_triton.py"
HEAD_DIMS = (16, 32, 64, 128)   # the head dimensions every version takes (fa2triton.inputs refuses others)
MODULE_NAME = "flashattention_autograd_function_triton"


@dataclass(frozen=True)
class Version:
    name: str          # folder name under fa2triton/kernels/
    label: str         # short label for tables and figures
    changed: str       # what changed against the previous version, one line
    round: int         # the round number that produced it (the article's 0-5; 6 and 7 are beyond the article)
    autotuned: bool    # wraps its kernel in @triton.autotune
    kernel_of: str     # the version whose kernel body it runs (v2 runs v1's)
    round_label: str   # the round as README, REPORT.md and the figures print it: one of ROUND_LABELS

    def __post_init__(self):
        if self.round_label not in ROUND_LABELS:
            raise ValueError(f"{self.name}: round_label {self.round_label!r} is not one of {', '.join(ROUND_LABELS)}")

    @property
    def folder(self) -> Path:
        return KERNELS / self.name

    @property
    def path(self) -> Path:
        return self.folder / KERNEL_FILE

    @property
    def beyond_article(self) -> bool:
        """True for the versions the article does not have (v6, v7)."""
        return self.round_label.startswith("beyond")


# The article's rounds ("How to profile and optimise kernels"), in its order, and the label every table and
# figure prints for them. Round 2 profiles the tuned kernel and makes no version; Round 4 makes two kernel changes
# (4a, 4b). "beyond: 6" and "beyond: 7" are this artifact's own rounds after the article's last.
ROUNDS: tuple[tuple[str, str], ...] = (
    ("0", "profile the baseline"),
    ("1", "tile sizes, warps and stages (the sweep)"),
    ("2", "profile the tuned kernel"),
    ("3", "autotune, and what it costs"),
    ("4a", "inside the inner loop: causal tile skipping"),
    ("4b", "inside the inner loop: exp2"),
    ("5", "re-tune, and the final profile"),
    ("beyond: 6", "beyond the article: longest causal tiles first, the Triton backward"),
    ("beyond: 7", "beyond the article: Hopper (TMA, a pipelined Q K^T, the Gluon path)"),
)
ROUND_LABELS = tuple(label for label, _ in ROUNDS)


VERSIONS: tuple[Version, ...] = (
    Version("v0_baseline", "v0 baseline", "the previous article's kernel: 16x16 tiles, 4 warps, 3 stages, "
            "one loop that masks every tile, tl.exp", 0, False, "v0_baseline", "0"),
    Version("v1_tiles", "v1 tiles", "the same body with the Round 1 sweep winner (tiles, warps, stages) "
            "as class attributes, read from the per-architecture table", 1, False, "v1_tiles", "1"),
    Version("v2_autotune", "v2 autotune", "v1 wrapped in @triton.autotune over the sweep's per-shape winners; "
            "the grid depends on the chosen query tile", 3, True, "v1_tiles", "3"),
    Version("v3_causal_skip", "v3 causal skip", "the key loop split into unmasked tiles, diagonal (masked) tiles "
            "and nothing above the diagonal", 4, False, "v3_causal_skip", "4a"),
    Version("v4_exp2", "v4 exp2", "softmax scale and log2(e) folded into one multiply-add, exp2, "
            "L converted back to natural log", 4, False, "v4_exp2", "4b"),
    Version("v5_final", "v5 final", "v4 wrapped in @triton.autotune over the second sweep's short list; a lean host "
            "path after the first call per input signature", 5, True, "v4_exp2", "5"),
    Version("v6_longest_first", "v6 longest first", "v5 with the head on the grid's first axis and the query "
            "tiles reversed (longest causal tiles first); optional sliding window; the Triton backward",
            6, True, "v6_longest_first", "beyond: 6"),
    Version("v7_hopper", "v7 hopper", "v6 with Q, K, V, O as TMA descriptors and the next Q K^T issued before "
            "each softmax, beside a warp-specialized Gluon path, each launch from a table raced per GPU; bf16/fp16 on "
            "sm_90, "
            "v6's own path otherwise; the backward by warp-specialized Gluon kernels on sm_90", 7, True, "v7_hopper",
            "beyond: 7"),
)
BY_NAME = {v.name: v for v in VERSIONS}
NAMES = tuple(BY_NAME)


def get(name: str) -> Version:
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown kernel version {name!r}; known: {', '.join(NAMES)}") from None


def resolve(selection: str) -> list[Version]:
    """'all', one name, or a comma-separated list of names."""
    if selection == "all":
        return list(VERSIONS)
    return [get(s.strip()) for s in selection.split(",") if s.strip()]


def module_name(name: str) -> str:
    """The unique module name `load` imports version `name` under (its key in sys.modules)."""
    return f"fa2_kernels_{get(name).name}"


def load(name: str) -> ModuleType:
    """Import one version's kernel file under a unique module name.

    The harness and the test file import the module by its plain name from
    PYTHONPATH; scripts that need several versions in one process use this.
    """
    return load_file(module_name(name), get(name).path)


def function(name: str) -> type:
    """Version `name`'s FlashAttentionTriton (its kernel file loaded once, by load)."""
    return load(get(name).name).FlashAttentionTriton


_WINDOWED: set = set()   # the versions require_window found a window in (asked once each)


def require_window(name: str) -> None:
    """ValueError unless version `name`'s FlashAttentionTriton.forward takes a sliding window (v6 and v7 do)."""
    if name in _WINDOWED:
        return
    import inspect

    if "window_size" not in inspect.signature(function(name).forward).parameters:
        raise ValueError(f"{get(name).name} has no sliding window; v6_longest_first and v7_hopper do")
    _WINDOWED.add(name)


def load_file(mod_name: str, path: Path) -> ModuleType:
    """Import the Python file at `path` as module `mod_name`, once per process (kept in sys.modules): a kernel
    file, or a script that is not part of a package (experiments/run.py, for its tests)."""
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[mod_name]   # a failed import leaves no half-made module behind for the next caller
        raise
    return module


def of_module(module: ModuleType) -> Version:
    """The version a loaded kernel module belongs to, from the folder it lives in."""
    return get(Path(module.__file__).resolve().parent.name)
