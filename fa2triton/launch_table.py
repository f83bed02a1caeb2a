"""v7's launch table: the launch its race chose per bucket of input signatures, measured offline, looked up at run time.

Racing the candidates at the first call of every new signature cost seconds per bucket of lengths; cuDNN and
FlashAttention choose by rules instead. `invoke pick-launch --kernel v7_hopper` (sweeps/pick_launch.py) runs v7's
race once per grid point on a GPU and writes the winners to fa2triton/kernels/v7_hopper/launch_table.json; v7 calls
`lookup`, a pure function of (signature, GPU and Triton, the paths its rules allow, the candidates it has now) ->
Choice (a Launch, or None and why: the caller races). What the table replaced, and what it costs: docs/configs.md.

The file (FORMAT), one section per GPU and Triton (`section_key`: fa2triton.gpu.slug of the device name and Triton's
major.minor, "nvidia-h200/triton-3.9"; the same source compiles to other kernels under another Triton, and the race's
winner can change with them, docs/port-triton39.md):
    {"format", "kernel", "written_by",
     "gpus": {key: {"provenance": {gpu, arch, sm_count, max_sm_clock_mhz, driver, torch, triton, git_commit, date,
                                   ...},
                    "grid": {"D": [...], "causal": [...], "N": [...], "BH": [...]}, "complete": bool,
                    "entries": [{"D", "causal", "N", "BH", "dtype", "launch": {"path", "label"},
                                 "raced": [{"path", "label", "ms"}], ...}]}}}
N and BH (batch times heads) are bucket tops (powers of two, fa2triton.buckets.bucket); `raced` holds every launch the
race timed with its median ms (null where the race had one launch), `launch` its winner.

Invariants: `load` refuses a malformed or foreign-kernel file with one LaunchTableError naming the file and the
field; `lookup` returns only a launch whose path is allowed and whose label is a candidate now, from a section
measured on this GPU's architecture and SM count: its own (under this Triton, else the nearest Triton's), else another
GPU's of the same architecture and SM count, each said in the reason; anything else is None with a one-line reason.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .buckets import bucket, write_atomically

FORMAT = "fa2lab-launch-table/2"   # /1 keyed sections by GPU alone
PATHS = ("gluon", "tma")                       # the paths v7's race chooses between
SIXTEEN_BIT = ("bfloat16", "float16")          # the dtypes the table's launches take (one entry serves both)
INTERPRETER = "interpreter"                    # the GPU key under Triton's interpreter (it times nothing)
PROVENANCE_FIELDS = ("gpu", "arch", "sm_count", "max_sm_clock_mhz", "driver", "torch", "triton", "git_commit", "date")
ENTRY_FIELDS = ("D", "causal", "N", "BH", "launch", "raced")
TASK = "invoke pick-launch --kernel {kernel}"


class LaunchTableError(ValueError):
    """A launch table file that cannot be read as one: not JSON, another format or kernel, a field missing or wrong."""


class LaunchTableWarning(UserWarning):
    """The table gives no launch for a call (no section for this GPU, a foreign or stale one): v7 races instead."""


@dataclass(frozen=True)
class Signature:
    """What the lookup sees of a forward: dtype name, head dimension, mask, the two lengths, batch times heads."""

    dtype: str
    D: int
    causal: bool
    n_q: int
    n_k: int
    bh: int


def signature(Q, K, causal: bool) -> Signature:
    """The signature of a forward on Q (B·H, N_q, D) and K (B·H, N_k, D)."""
    return Signature(str(Q.dtype).removeprefix("torch."), int(Q.shape[2]), bool(causal), int(Q.shape[1]),
                     int(K.shape[1]), int(Q.shape[0]))


@dataclass(frozen=True)
class Gpu:
    """The GPU a call runs on and the Triton it compiles with ("3.9"), as the table keys and checks them."""

    key: str
    arch: str
    sm_count: int
    triton: str


def gpu_identity(device_index: int | None = None) -> Gpu:
    """This process's GPU (fa2triton.gpu.facts), or the interpreter's stand-in, which no table measures; with the
    installed Triton."""
    from .gpu import facts, interpreting
    from .triton_compat import triton_version

    triton = "{}.{}".format(*triton_version())
    if interpreting():
        return Gpu(INTERPRETER, "none", 0, triton)
    f = facts(0 if device_index is None else device_index)
    return Gpu(f.slug, f.arch, f.sm_count, triton)


_SECTION_KEY = re.compile(r"^(?P<gpu>[^/]+)/triton-(?P<triton>\d+\.\d+)$")


def section_key(gpu_key: str, triton: str) -> str:
    """The key of the section raced on GPU `gpu_key` under Triton `triton` (major.minor)."""
    return f"{gpu_key}/triton-{triton}"


def _minor_of(version) -> str | None:
    """ "3.9" of a version string such as "3.9.0" (None where there is none)."""
    m = re.match(r"(\d+)\.(\d+)", str(version))
    return f"{m.group(1)}.{m.group(2)}" if m else None


@dataclass(frozen=True)
class Launch:
    path: str     # "gluon" or "tma"
    label: str    # the Gluon candidate's label, or the tl candidate's config_label ("128,64,4,3/p1")


@dataclass(frozen=True)
class Choice:
    launch: Launch | None        # None: race
    reason: str                  # one line: the rule that chose, or why nothing was chosen
    raced_on: str | None = None  # the GPU key whose race chose the launch (another GPU's: this one has no section)


@dataclass
class Table:
    """A loaded (validated) table: kernel name, GPU key -> section, the file it came from."""

    kernel: str
    gpus: dict
    path: Path | None = None
    warned: set = field(default_factory=set)

    def warn_once(self, message: str) -> None:
        """A LaunchTableWarning, once per message for this table."""
        if message not in self.warned:
            self.warned.add(message)
            warnings.warn(message, LaunchTableWarning, stacklevel=3)


# ------------------------------------------------------------------------------------------------ the file

def new_file(kernel: str) -> dict:
    return {"format": FORMAT, "kernel": kernel, "written_by": TASK.format(kernel=kernel) + " (sweeps/pick_launch.py)",
            "gpus": {}}


def read(path: str | Path, kernel: str) -> dict:
    """The file's JSON, validated (LaunchTableError naming what is wrong); a new empty one where it is missing."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return new_file(kernel)
    except (OSError, ValueError) as e:
        raise LaunchTableError(f"launch table {path}: not readable as JSON ({e})") from None
    validate(data, kernel, str(path))
    return data


def load(path: str | Path, kernel: str) -> Table:
    """The table at `path` for `kernel` (empty where the file is missing)."""
    return Table(kernel, read(path, kernel)["gpus"], Path(path))


def write(path: str | Path, data: dict, kernel: str) -> None:
    """Validate as `kernel`'s table, then write atomically (a reader sees the old file or the new one)."""
    validate(data, kernel, str(path))
    write_atomically(Path(path), data)


def entry_key(entry: dict) -> tuple:
    return (entry["D"], entry["causal"], entry["N"], entry["BH"])


def _fail(where: str, what: str):
    raise LaunchTableError(f"launch table {where}: {what}")


def _positive_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0


def validate(data, kernel: str, where: str = "(in memory)") -> None:
    """Raise LaunchTableError at the first field that is not as the module docstring says."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        _fail(where, f"not a {FORMAT} file (format {data.get('format') if isinstance(data, dict) else None!r})")
    if data.get("kernel") != kernel:
        _fail(where, f"a table for {data.get('kernel')!r}, not {kernel!r}")
    if not isinstance(data.get("gpus"), dict):
        _fail(where, "'gpus' must be an object of GPU key -> section")
    for key, section in data["gpus"].items():
        at = f"gpus[{key!r}]"
        named = _SECTION_KEY.match(key)
        if not named:
            _fail(where, f"{at}: a section's key is GPU/triton-MAJOR.MINOR (\"nvidia-h200/triton-3.9\")")
        if not isinstance(section, dict) or not isinstance(section.get("provenance"), dict):
            _fail(where, f"{at} has no 'provenance' object")
        missing = [f for f in PROVENANCE_FIELDS if f not in section["provenance"]]
        if missing:
            _fail(where, f"{at}.provenance lacks {', '.join(missing)}")
        if _minor_of(section["provenance"]["triton"]) != named["triton"]:
            _fail(where, f"{at} was raced under Triton {section['provenance']['triton']}, not {named['triton']}")
        if not isinstance(section.get("entries"), list):
            _fail(where, f"{at}.entries must be a list")
        seen = set()
        for i, e in enumerate(section["entries"]):
            _validate_entry(e, f"{at}.entries[{i}]", where)
            if entry_key(e) in seen:
                _fail(where, f"{at}.entries[{i}] repeats D, causal, N, BH {entry_key(e)}")
            seen.add(entry_key(e))


def _validate_entry(e, at: str, where: str) -> None:
    if not isinstance(e, dict) or any(f not in e for f in ENTRY_FIELDS):
        _fail(where, f"{at} must have {', '.join(ENTRY_FIELDS)}")
    for f in ("D", "N", "BH"):
        if not _positive_int(e[f]) or (f != "D" and bucket(e[f]) != e[f]):
            _fail(where, f"{at}.{f} must be a positive integer{'' if f == 'D' else ' power of two'}, not {e[f]!r}")
    if e["causal"] not in (0, 1) or isinstance(e["causal"], bool):
        _fail(where, f"{at}.causal must be 0 or 1, not {e['causal']!r}")
    raced = e["raced"]
    if not isinstance(raced, list) or not raced:
        _fail(where, f"{at}.raced must be a non-empty list")
    for j, r in enumerate(raced):
        ok = isinstance(r, dict) and r.get("path") in PATHS and isinstance(r.get("label"), str) and (
            r.get("ms") is None or (isinstance(r.get("ms"), (int, float)) and math.isfinite(r["ms"]) and r["ms"] > 0))
        if not ok:
            _fail(where, f"{at}.raced[{j}] must be {{path: one of {', '.join(PATHS)}, label, ms: positive or null}}")
    won = e["launch"]
    if not isinstance(won, dict) or not any(won.get("path") == r["path"] and won.get("label") == r["label"]
                                            for r in raced):
        _fail(where, f"{at}.launch must be one of its raced launches, not {won!r}")


# ------------------------------------------------------------------------------------------------ the lookup

def _log2_distance(a: int, b: int) -> float:
    return abs(math.log2(a) - math.log2(b))


def _ordinal(triton: str) -> int:
    """3.9 -> 309: Tritons in release order, their distance in minor releases (within a major one)."""
    major, minor = triton.split(".")
    return int(major) * 100 + int(minor)


def section_of(table: Table, gpu: Gpu) -> tuple[str, dict] | None:
    """(key, section) raced on this GPU under its Triton, else under the nearest other Triton (the newer of two
    equally near); where this GPU has none, the same among the sections of other GPUs of its architecture and SM
    count (the first by key among equals: an H100 SXM takes an H200's, both sm_90 with 132 SMs); else None."""
    mine = section_key(gpu.key, gpu.triton)
    if mine in table.gpus:
        return mine, table.gpus[mine]
    here = _ordinal(gpu.triton)

    def nearest(keys) -> str | None:
        ranked = [(abs(_ordinal(m["triton"]) - here), -_ordinal(m["triton"]), k) for k in keys
                  if (m := _SECTION_KEY.match(k))]
        return min(ranked)[2] if ranked else None

    key = nearest(k for k in table.gpus if (m := _SECTION_KEY.match(k)) and m["gpu"] == gpu.key)
    if key is None:
        key = nearest(k for k, s in table.gpus.items()
                      if (s["provenance"]["arch"], s["provenance"]["sm_count"]) == (gpu.arch, gpu.sm_count))
    return None if key is None else (key, table.gpus[key])


def lookup(table: Table, sig: Signature, gpu: Gpu, allowed: tuple, known: dict) -> Choice:
    """The launch for `sig` on `gpu` among the paths `allowed` (v7's route) and the labels `known` (path -> the
    candidates' labels now). Rules, in order, each a one-line reason:
    - this GPU's section under its Triton, else under the nearest Triton (said in the reason: a launch raced under
      another Triton beats a race at run time);
    - no section for this GPU key: another GPU's of the same architecture and SM count, the same way (said in the
      reason and in `raced_on`: a race costs a cold first call seconds, and how often such a GPU's own race agrees
      is in docs/configs.md);
    - none, or one measured on another architecture or SM count: None (race);
    - a dtype other than bf16/fp16: None (the table's launches are 16-bit ones; one entry serves both);
    - entries with the same mask and a usable launch (allowed path, known label): the nearest by head dimension
      first, then by the summed log2 distances of the N_q, N_k and B·H buckets to the entry's, ties to the larger N
      then B·H; none: None (stale);
    - in that entry, the race's winner if usable, else the fastest usable launch it raced (another path's winner)."""
    where = table.path.name if table.path is not None else "the launch table"
    task = TASK.format(kernel=table.kernel)
    found = section_of(table, gpu)
    if found is None:
        return Choice(None, f"{table.kernel}: no launch table for {gpu.key} ({gpu.arch}) in {where}, so each new input "
                            f"signature is raced; `{task}` on this GPU writes one")
    key, section = found
    prov, named = section["provenance"], _SECTION_KEY.match(key)
    if (prov["arch"], prov["sm_count"]) != (gpu.arch, gpu.sm_count):
        return Choice(None, f"{table.kernel}: {where}'s {key} section was measured on {prov['arch']} with "
                            f"{prov['sm_count']} SMs, this GPU is {gpu.arch} with {gpu.sm_count}: racing instead; "
                            f"`{task}` on this GPU rewrites it")
    if sig.dtype not in SIXTEEN_BIT:
        return Choice(None, f"{table.kernel}: {where} holds 16-bit launches, not {sig.dtype}")
    usable = []
    for e in section["entries"]:
        if bool(e["causal"]) != sig.causal:
            continue
        ok = [r for r in e["raced"] if r["path"] in allowed and r["label"] in known.get(r["path"], ())]
        if ok:
            usable.append((e, ok))
    if not usable:
        mask = "causal" if sig.causal else "non-causal"
        return Choice(None, f"{table.kernel}: no {mask} launch in {where} for {named['gpu']} is a candidate of the "
                            f"{'/'.join(allowed)} path now (stale): racing instead; `{task}` rewrites it")
    bq, bk, bbh = bucket(sig.n_q), bucket(sig.n_k), bucket(sig.bh)

    def distance(item):
        e = item[0]
        spread = _log2_distance(e["N"], bq) + _log2_distance(e["N"], bk) + _log2_distance(e["BH"], bbh)
        return (_log2_distance(e["D"], sig.D), spread, -e["N"], -e["BH"])

    e, ok = min(usable, key=distance)
    won = e["launch"]
    pick = next((r for r in ok if (r["path"], r["label"]) == (won["path"], won["label"])), None)
    note = ""
    if pick is None:
        pick = min(ok, key=lambda r: math.inf if r["ms"] is None else r["ms"])
        note = f"; its winner's {won['path']} path is not taken here, so its fastest {pick['path']} launch"
    mask = "causal" if e["causal"] else "non-causal"
    measured = f"D={e['D']} {mask} N<={e['N']} B·H<={e['BH']}"
    if distance((e, ok))[:2] == (0, 0):
        reason = f"raced on {named['gpu']} at {measured}"
    else:
        reason = (f"the nearest bucket raced on {named['gpu']}, {measured}, for D={sig.D} N_q<={bq} N_k<={bk} "
                  f"B·H<={bbh}")
    if sig.dtype != section.get("grid", {}).get("dtype", "bfloat16"):
        reason += f" (its {section.get('grid', {}).get('dtype', 'bfloat16')} race serves {sig.dtype})"
    if named["triton"] != gpu.triton:
        reason += f", under Triton {prov['triton']} (this process runs {gpu.triton}; `{task}` races under it)"
    if named["gpu"] != gpu.key:
        reason += f", a GPU of this one's architecture and SM count ({gpu.key}: `{task}` on it races its own)"
    return Choice(Launch(pick["path"], pick["label"]), reason + note, named["gpu"])
