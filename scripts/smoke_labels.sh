#!/usr/bin/env bash
# Print the Gluon configuration labels among "$@" that pass scripts/gluon_smoke.py (at head dimension SMOKE_D, default
# 64) within SMOKE_S seconds each (default 90); a label that fails or hangs is named on stderr and left out. So one
# configuration whose barriers deadlock costs its own smoke run, not a whole step: once, a hang at
# experiment gluon's first check cut every later step of that batch at its deadline. Used by scripts/device_batch.sh's
# gluon-v7 and items steps when SMOKE=1.
for label in "$@"; do
  if timeout --signal=KILL "${SMOKE_S:-90}" python3 scripts/gluon_smoke.py "$label" "${SMOKE_D:-64}" >/dev/null 2>&1; then
    printf '%s ' "$label"
  else
    echo "[smoke] $label failed or hung within ${SMOKE_S:-90} s: left out" >&2
  fi
done
