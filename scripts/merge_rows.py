"""Fold a results tree that came back from a GPU machine into this checkout's results/.

The lent machine may start from an empty results/ (only the rows it measured come back). Every CSV under SOURCE is
appended to the file of the same relative path under results/ (fa2lab.results.append_rows: a new column rewrites
the file once with the union of the columns); any other file (logs, raw exports) is copied where none exists yet.
Rows are kept as written, never re-typed.

    python scripts/merge_rows.py /path/to/unpacked/results [--dry-run]
"""

from __future__ import annotations

import argparse
import csv
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fa2lab.results import RESULTS, append_rows  # noqa: E402


def merge(source: Path, dest: Path = RESULTS, dry_run: bool = False) -> list[str]:
    done = []
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        target = dest / path.relative_to(source)
        if path.suffix == ".csv":
            with path.open(newline="") as f:
                rows = list(csv.DictReader(f))
            done.append(f"{target}: +{len(rows)} rows")
            if not dry_run:
                append_rows(target, rows)
        elif target.exists():
            done.append(f"{target}: exists, not replaced")
        else:
            done.append(f"{target}: new file")
            if not dry_run:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
    return done


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path, help="the results/ folder that came back (unpacked)")
    ap.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    args = ap.parse_args(argv)
    if not args.source.is_dir():
        print(f"no such folder: {args.source}", file=sys.stderr)
        return 2
    for line in merge(args.source, dry_run=args.dry_run):
        print(line)
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
