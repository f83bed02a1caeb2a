"""Where the lab works: the repository checkout (its harness/, results/ and docs/), which the installed library
(fa2triton) knows nothing of."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
