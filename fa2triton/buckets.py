"""Tuning per N bucket, and a pick cache that outlives the process (issue 40).

An autotuner keyed on the exact lengths (v5: N_QUERIES, N_KEYS, D, is_causal) times every candidate again
for each new N: seconds per new length in a variable-length workload (the article's Round 3 measured about
0.11 s per candidate and key, on top of compiling, and names bucketing N, or `cache_results`, as the remedy).
Here the first N of a bucket is tuned as before, and every later N of that bucket launches the pick that
tuning made (the autotuner pinned to it for that call), so it pays at most a compile.

The bucket: the smallest power of two >= N, for the queries and for the keys separately. A bucket's top is tuned
at itself (`PickCache.lookup` does not reuse another N's pick there), so the harness lengths (powers of two) take
what tuning them gives. Why powers of two, and what a reused pick compiles: docs/configs.md, "Tuning per bucket".

The pick cache: in memory, and one small JSON file per environment under a cache directory, keyed by the GPU
(name, architecture), torch's and triton's versions and the content hash of the files that decide the kernel
and its candidates (the kernel file, its configs.json); inside it, by dtype, D, mask and the two buckets. The
directory, read at call time (never at import): `PickCache.cache_dir` if set (a path, or "off"), else the
environment variable FA2_PICK_CACHE (a path, or "off"), else $XDG_CACHE_HOME/fa2lab (~/.cache/fa2lab). Under
Triton's interpreter (fake timings, nothing compiled) only an explicit `cache_dir` is used. A file is written
atomically (a temporary file in the same directory, then os.replace); a corrupt file, or one whose environment
is not this one, is ignored with a one-line warning (PickCacheWarning) and replaced on the next write.

Use: an autotuned kernel calls `picks.autotuned(autotuner, bucket_key(Q, K, causal), launch, device_index)`
around its launch (v5); a host path that picks some other way (a race between paths) calls
`picks.choose(key, tune, reuse)`: tune() -> (result, a JSON-able pick, or None to keep nothing), and
reuse(pick) -> result, raising StalePick when the pick cannot serve this call. Not thread-safe: pinning swaps the
autotuner's candidate list for the duration of one call (as fa2triton.interpret.only_config does).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ENV_VAR = "FA2_PICK_CACHE"
FORMAT = "fa2lab-picks/1"
OFF = "off"


class PickCacheWarning(UserWarning):
    """A pick-cache file was ignored (corrupt, foreign) or could not be written."""


class StalePick(Exception):
    """Raised by a `reuse` callable (PickCache.choose) when the kept pick does not apply to this call."""


def bucket(n: int) -> int:
    """The smallest power of two >= n: 257..512 -> 512, 512 -> 512, 513 -> 1024."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"a sequence length must be a positive integer, not {n!r}")
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class BucketKey:
    """What a pick is shared by: dtype, head dimension, mask, the query and key buckets, and whatever else
    selects the kernel (`extra`, hashable and printable). `lengths` (the call's N_q, N_k) is not part of it."""

    dtype: str
    D: int
    causal: bool
    q_bucket: int
    k_bucket: int
    extra: tuple = ()
    lengths: tuple[int, int] = field(default=(0, 0), compare=False)

    @property
    def text(self) -> str:
        """The key as the JSON file spells it."""
        more = "".join(f",{x}" for x in self.extra)
        return f"{self.dtype},D={self.D},causal={int(self.causal)},Nq<={self.q_bucket},Nk<={self.k_bucket}{more}"

    @property
    def at_top(self) -> bool:
        """The call's lengths are the bucket's top (both powers of two): the bucket's own shape."""
        return tuple(self.lengths) == (self.q_bucket, self.k_bucket)


def bucket_key(Q, K, causal: bool, extra: tuple = ()) -> BucketKey:
    """The key of a forward on Q (B, N_q, D) and K (B, N_k, D)."""
    n_q, n_k = int(Q.shape[1]), int(K.shape[1])
    return BucketKey(str(Q.dtype).removeprefix("torch."), int(Q.shape[2]), bool(causal), bucket(n_q), bucket(n_k),
                     tuple(extra), (n_q, n_k))


# ---------------------------------------------------------------------------------------- triton.Config <-> JSON

def config_to_json(cfg) -> dict:
    """A triton.Config as a JSON object (its pre_hook, if any, is not kept)."""
    return {"kwargs": dict(cfg.kwargs), "num_warps": cfg.num_warps, "num_stages": cfg.num_stages,
            "num_ctas": cfg.num_ctas, "maxnreg": cfg.maxnreg}


def config_from_json(d: dict):
    """The triton.Config that config_to_json wrote. ValueError for anything else."""
    import triton

    try:
        return triton.Config(dict(d["kwargs"]), num_warps=int(d["num_warps"]), num_stages=int(d["num_stages"]),
                             num_ctas=int(d.get("num_ctas", 1)), maxnreg=d.get("maxnreg"))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"not a configuration: {d!r} ({e})") from None


@contextlib.contextmanager
def pinned(autotuner, config):
    """For the calls inside: `autotuner` has `config` as its only candidate, which it launches without timing
    or pruning (Autotuner.run tunes only with more than one); its own cache of picks is left alone."""
    saved = autotuner.configs
    autotuner.configs = [config]
    try:
        yield
    finally:
        autotuner.configs = saved


# ---------------------------------------------------------------------------------------- the cache

def file_hash(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def default_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fa2lab"


def device_identity(device_index: int | None = None) -> dict:
    """The GPU a pick was timed on: name and architecture, or the interpreter / no GPU."""
    from .gpu import has_gpu, interpreting

    if interpreting():
        return {"gpu": "interpreter", "arch": "none"}
    if not has_gpu():
        return {"gpu": "none", "arch": "none"}
    from .gpu import facts

    f = facts(0 if device_index is None else device_index)
    return {"gpu": f.name, "arch": f.arch}


class PickCache:
    """bucket key -> pick (any JSON value), in memory and on disk (see the module docstring).

    `name` names the kernel version; `files` are hashed into the environment (the kernel file, its
    configs.json, any file whose change changes what a pick means). `stats` counts 'tuned', 'reused' and
    'reused_disk' calls; `last` says which of those the latest `choose` was."""

    def __init__(self, name: str, files=(), cache_dir: str | Path | None = None):
        self.name = name
        self.files = tuple(Path(f) for f in files)
        self.cache_dir = cache_dir
        self.entries: dict[str, dict] = {}     # environment hash + key text -> {"value", "tuned_at", "disk"}
        self.stats: Counter = Counter()
        self.last: str = ""
        self._envs: dict[int | None, tuple[dict, str]] = {}
        self._loaded: set[Path] = set()
        self._warned: set[tuple[Path, str]] = set()

    # --- where and for what
    def environment(self, device_index: int | None = None) -> tuple[dict, str]:
        """(the environment's fields, their hash), computed once per device on first use."""
        got = self._envs.get(device_index)
        if got is None:
            import torch
            import triton

            env = {"version": self.name, **device_identity(device_index), "torch": torch.__version__,
                   "triton": triton.__version__, "files": {f.name: file_hash(f) for f in self.files}}
            got = self._envs[device_index] = (env, hashlib.sha256(json.dumps(env, sort_keys=True).encode())
                                              .hexdigest()[:16])
        return got

    def directory(self) -> Path | None:
        """The cache directory for this call (None: no disk), read now: cache_dir, FA2_PICK_CACHE, the default."""
        from .gpu import interpreting

        chosen = self.cache_dir
        if chosen is None:
            if interpreting():
                return None
            chosen = os.environ.get(ENV_VAR) or default_dir()
        if str(chosen).strip().lower() == OFF:
            return None
        return Path(chosen).expanduser()

    def path(self, device_index: int | None = None) -> Path | None:
        d = self.directory()
        return None if d is None else d / f"picks-{self.name}-{self.environment(device_index)[1]}.json"

    # --- lookups
    def lookup(self, key: BucketKey, device_index: int | None = None) -> dict | None:
        """The entry for key's bucket ({"value": the pick, "tuned_at": [N_q, N_k], "disk": read from the file}),
        or None: none yet, or the call is at the bucket's top and the pick was tuned at another length (the top
        is tuned at itself, and its pick then serves the bucket)."""
        env, h = self.environment(device_index)
        path = self.path(device_index)
        if path is not None and path not in self._loaded:
            self._loaded.add(path)
            for text, entry in self._read(path, env).items():
                self.entries.setdefault(h + text, dict(entry, disk=True))
        entry = self.entries.get(h + key.text)
        if entry is None or (key.at_top and tuple(entry["tuned_at"]) != tuple(key.lengths)):
            return None
        return entry

    def store(self, key: BucketKey, value, device_index: int | None = None) -> None:
        """Keep `value` as key's bucket's pick, tuned at key.lengths: in memory, and on disk (merged with what the
        file holds now, written atomically)."""
        env, h = self.environment(device_index)
        entry = {"value": value, "tuned_at": list(key.lengths)}
        self.entries[h + key.text] = dict(entry, disk=False)
        path = self.path(device_index)
        if path is None:
            return
        picks = self._read(path, env, quiet=True)
        picks[key.text] = entry
        try:
            write_atomically(path, {"format": FORMAT, "environment": env, "picks": picks})
        except OSError as e:
            self._warn(path, f"cannot write the pick cache {path}: {e}")

    def choose(self, key: BucketKey, tune: Callable[[], tuple], reuse: Callable[[Any], Any],
               device_index: int | None = None):
        """The generic step: `reuse(pick)` when key's bucket has a pick (StalePick from it: the pick does not
        apply, tune instead); otherwise `tune()`, which returns (result, pick or None: nothing to keep)."""
        entry = self.lookup(key, device_index)
        if entry is not None:
            try:
                out = reuse(entry["value"])
            except StalePick as e:
                self._warn(Path(key.text), f"not reusing the pick for {key.text}: {e}")
            else:
                self.last = "reused_disk" if entry.get("disk") else "reused"
                self.stats[self.last] += 1
                return out
        out, pick = tune()
        if pick is not None:
            self.store(key, pick, device_index)
        self.last = "tuned"
        self.stats["tuned"] += 1
        return out

    def autotuned(self, autotuner, key: BucketKey, launch: Callable[[], Any], device_index: int | None = None):
        """`launch()` (a call of the @triton.autotune kernel) with the autotuner pinned to key's bucket's pick,
        or, for a new bucket, tuning as before, its pick (autotuner.best_config) kept. An autotuner already left
        one candidate (fa2triton.launch.pin_config, fa2triton.interpret.only_config) is launched as it is: it times
        nothing, so there is nothing to bucket, and its one candidate is not a pick."""
        if len(autotuner.configs) <= 1:
            self.last = "pinned"
            return launch()

        def reuse(value):
            try:
                config = config_from_json(value)
            except ValueError as e:
                raise StalePick(e) from None
            with pinned(autotuner, config):
                return launch()

        def tune():
            out = launch()
            return out, config_to_json(autotuner.best_config)

        return self.choose(key, tune, reuse, device_index)

    # --- the file
    def _read(self, path: Path, env: dict, quiet: bool = False) -> dict:
        """key text -> {"value", "tuned_at"} from the file; {} (with a one-line warning, once per file and
        reason, unless quiet) when it is missing, corrupt or another environment's."""
        try:
            raw = path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as e:
            if not quiet:
                self._warn(path, f"ignoring the pick cache {path}: {e}")
            return {}
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                raise ValueError(f"not a {FORMAT} file")
            picks = data["picks"]
            if not isinstance(picks, dict) or not all(
                    isinstance(e, dict) and "value" in e and isinstance(e.get("tuned_at"), list)
                    and len(e["tuned_at"]) == 2 for e in picks.values()):
                raise ValueError("its picks are malformed")
        except (ValueError, KeyError, TypeError) as e:
            if not quiet:
                self._warn(path, f"ignoring the corrupt pick cache {path}: {e}")
            return {}
        if data.get("environment") != env:
            if not quiet:
                self._warn(path, f"ignoring the pick cache {path}: made for another environment "
                                 f"({_differences(data.get('environment'), env)})")
            return {}
        return {k: {"value": e["value"], "tuned_at": e["tuned_at"]} for k, e in picks.items()}

    def _warn(self, path: Path, message: str) -> None:
        if (path, message) not in self._warned:
            self._warned.add((path, message))
            warnings.warn(message, PickCacheWarning, stacklevel=3)


def _differences(theirs, ours: dict) -> str:
    if not isinstance(theirs, dict):
        return "no environment recorded"
    diff = [k for k in ours if theirs.get(k) != ours[k]] + [k for k in theirs if k not in ours]
    return "differs in " + ", ".join(diff) if diff else "differs"


def write_atomically(path: Path, data) -> None:
    """JSON to `path` by a temporary file in the same directory and os.replace: a reader sees the old file or
    the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)   # key order kept: a Config compares its kwargs in order
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
