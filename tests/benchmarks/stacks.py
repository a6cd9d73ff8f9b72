"""Summarise py-spy's collapsed stacks (``--profile``): where a worker spends its CPU.

Usage::

    python -m tests.benchmarks.stacks DIR/keel-1234.txt [--top 40] [--match TEXT]

Prints the frames with the most samples, inclusive (the frame is anywhere on the stack) and
self (the frame is on top), as a share of all samples. ``--match`` keeps only the frames
whose text contains TEXT (e.g. a file name); ``--under TEXT`` counts only what runs below
the first frame whose text contains TEXT (e.g. ``InSandbox.activate`` for workflow code).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path


def read(path: Path) -> list[tuple[list[str], int]]:
    """The stacks of a collapsed-stack file, root first, with their sample counts."""
    stacks = []
    for line in path.read_text().splitlines():
        frames, _, count = line.rpartition(" ")
        if frames and count.isdigit():
            stacks.append((frames.split(";"), int(count)))
    return stacks


def below(stacks: list[tuple[list[str], int]], text: str) -> list[tuple[list[str], int]]:
    """The part of each stack below its first frame containing ``text``; others dropped."""
    kept = []
    for frames, count in stacks:
        for i, frame in enumerate(frames):
            if text in frame:
                kept.append((frames[i:], count))
                break
    return kept


def summarise(stacks: list[tuple[list[str], int]]) -> tuple[int, Counter[str], Counter[str]]:
    """Total samples, inclusive samples per frame and self samples per frame."""
    total = 0
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for frames, count in stacks:
        total += count
        for frame in set(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
    return total, inclusive, own


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path", type=Path)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--match", default="")
    parser.add_argument("--under", default="")
    args = parser.parse_args()
    stacks = read(args.path)
    everything = sum(count for _, count in stacks)
    if args.under:
        stacks = below(stacks, args.under)
    total, inclusive, own = summarise(stacks)
    print(f"{total} samples of {everything}")
    for title, counter in (("inclusive", inclusive), ("self", own)):
        print(f"\n{title}:")
        rows = [(f, n) for f, n in counter.most_common() if args.match in f][: args.top]
        for frame, count in rows:
            print(f"{100 * count / total:6.1f}%  {frame}")


if __name__ == "__main__":
    main()
