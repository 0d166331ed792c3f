"""Write a synthetic fleet recombined from real sessions (:mod:`dp_compact.fleet.resample`).

Usage: ``python bench/resample.py SRC_DIR -o OUT_DIR --sessions N [--seed S] [--max-blocks B]``

A benchmark tool, not a ``dp-compact`` command: synthetic transcripts measure scale (throughput,
memory); their costs and recall are recombinations and must not calibrate or judge a policy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dp_compact.fleet.resample import resample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--sessions", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-blocks", type=int, default=None)
    args = parser.parse_args()
    written = resample(args.source, args.output, sessions=args.sessions, seed=args.seed, max_blocks=args.max_blocks)
    print(f"wrote {len(written)} sessions and manifest.json under {args.output}")


if __name__ == "__main__":
    main()
