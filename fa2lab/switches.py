"""The lab's FA2_V7_* switches: environment variables that change what v7 runs for one process, recorded beside every
row (provenance's `switches` column). The runtime reads none of them: v7's choices are its class attributes
(FlashAttentionTriton.GLUON, RACE_TL, LAUNCH_FROM), and the lab sets those from the switches when it loads a version
(`load`, or `apply` on the module the harness imports from PYTHONPATH). Every other FA2_V7_* is retired:
docs/experiments.md, "The FA2_V7_* switches", lists each with its last commit."""

from __future__ import annotations

import os
import warnings
from types import ModuleType

SWITCH_PREFIX = "FA2_V7_"

# The live switches, each v7's class attribute of that name, on when unset: v7's Gluon path and its race against the
# tl path.
SWITCHES_ON_BY_DEFAULT = frozenset({"GLUON", "RACE_TL"})
# The live switches with named values, each v7's class attribute of that name: its values, the first the class's
# default (what unset means). LAUNCH_FROM: "race" times and races every new signature instead of v7's launch table.
SWITCH_VALUES = {"LAUNCH_FROM": ("table", "race")}
LIVE_SWITCHES = SWITCHES_ON_BY_DEFAULT | frozenset(SWITCH_VALUES)

# Retired switches whose unset meaning was not "off", so that older rows' `switches` still say whether they ran the
# default kernels: "1" on when unset, None a switch with levels, any value of which departed from the default kernels.
RETIRED_NOT_OFF = {"UNSYNCED_ARRIVE": "1", "LOOKAHEAD": "1", "EXP_TURN": "1", "SHARED_CODE": None}


def switch_on(name: str) -> bool:
    """Whether the switch SWITCH_PREFIX + name is on for this process: set, any value but "0" turns it on; unset,
    its default (SWITCHES_ON_BY_DEFAULT). What kernel_switches records is what these read."""
    value = os.environ.get(SWITCH_PREFIX + name)
    if value is None:
        return name in SWITCHES_ON_BY_DEFAULT
    return value != "0"


def switch_value(name: str) -> str:
    """The value of the valued switch SWITCH_PREFIX + name (SWITCH_VALUES) for this process: unset, its default; a
    value it does not know is a ValueError naming the switch and its values."""
    values = SWITCH_VALUES[name]
    value = os.environ.get(SWITCH_PREFIX + name)
    if value is None:
        return values[0]
    if value not in values:
        raise ValueError(f"{SWITCH_PREFIX}{name}={value!r}: want one of {', '.join(values)}")
    return value


def warn_unread_switches() -> list[str]:
    """Warn once per FA2_V7_* variable set in this process that is no live switch (a retired one), rather than let
    it be ignored silently; the names warned about."""
    names = sorted(k for k in os.environ if k.startswith(SWITCH_PREFIX)
                   and k[len(SWITCH_PREFIX):] not in LIVE_SWITCHES)
    for name in names:
        warnings.warn(f"{name} is set but no kernel reads it: a retired switch (docs/experiments.md, "
                      "'The FA2_V7_* switches', names its last commit)", stacklevel=2)
    return names


def apply(module: ModuleType) -> ModuleType:
    """Set a loaded version's FlashAttentionTriton attributes from this process's switches (only the attributes it
    has: v7's), warning about retired ones; returns the module. Called once, when the lab loads a version."""
    cls = getattr(module, "FlashAttentionTriton", None)
    for name in sorted(SWITCHES_ON_BY_DEFAULT):
        if cls is not None and hasattr(cls, name):
            setattr(cls, name, switch_on(name))
    for name in sorted(SWITCH_VALUES):
        if cls is not None and hasattr(cls, name):
            setattr(cls, name, switch_value(name))
    warn_unread_switches()
    return module


def load(name: str) -> ModuleType:
    """A version as the lab runs it: fa2triton.versions.load, then `apply` (the first time it is loaded here)."""
    import sys

    from fa2triton import versions

    fresh = f"fa2_kernels_{versions.get(name).name}" not in sys.modules
    module = versions.load(name)
    return apply(module) if fresh else module


def default_kernels(switches) -> bool:
    """Whether a row's `switches` (kernel_switches' "NAME=value ..."; empty or missing: none set) leave every kernel
    switch as it is when unset: rows of the default kernels, which the report's profile tables show. A retired switch
    counts by what it was (RETIRED_NOT_OFF; any other was off when unset); a valued one, by whether it is its
    default."""
    for item in (switches if isinstance(switches, str) else "").split():
        name, _, value = item.partition("=")
        if not name.startswith(SWITCH_PREFIX):
            continue
        key = name[len(SWITCH_PREFIX):]
        if key in RETIRED_NOT_OFF:
            was = RETIRED_NOT_OFF[key]
            switched = was is None or (value != "0") != (was == "1")
        elif key in SWITCH_VALUES:
            switched = value != SWITCH_VALUES[key][0]
        else:
            switched = (value != "0") != (key in SWITCHES_ON_BY_DEFAULT)
        if switched:
            return False
    return True


def kernel_switches() -> str:
    """The FA2_V7_* variables set in this process, as "NAME=value" joined by spaces."""
    return " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(SWITCH_PREFIX))
