#!/usr/bin/env python3
"""Holds framework/ to the line budget docs/design.md states in its ```budget block
("framework: 20000"): counts the lines of every file below framework/ (as
`git ls-files framework | xargs cat | wc -l` does: code, comments and blank lines alike)
and exits 1 with one line when they are more, naming the largest folders; otherwise says
how many there are. As tinygrad's CI does: the library stays small enough to be read.
  tools/check_size.py [ROOT]        # ROOT: the repository (default: this script's ../)
"""
import os
import sys

from check_layers import read_block


def read_budget(design):
    """{top folder: its budget in lines} from the ```budget block of design.md."""
    budget = {}
    for top, number in read_block(design, "budget", "check_size"):
        if not number.strip().isdigit():
            sys.exit(f"check_size: {design}: budget line '{top}:{number}': expected 'folder: lines'")
        budget[top] = int(number)
    return budget


def count_lines(base):
    """{first-level folder (or '.' for files at the top): lines} below `base`."""
    lines = {}
    for directory, _, files in os.walk(base):
        rel = os.path.relpath(directory, base)
        folder = rel.split(os.sep)[0]
        for name in files:
            with open(os.path.join(directory, name), "rb") as f:
                lines[folder] = lines.get(folder, 0) + f.read().count(b"\n")
    return lines


def check(root):
    """(problems, summaries): a line per top folder over its budget, or within it."""
    problems, summaries = [], []
    for top, budget in read_budget(os.path.join(root, "docs", "design.md")).items():
        lines = count_lines(os.path.join(root, top))
        total = sum(lines.values())
        if total > budget:
            largest = sorted(lines.items(), key=lambda item: -item[1])[:4]
            where = ", ".join(f"{folder} {n:,}" for folder, n in largest)
            problems.append(f"{top}/: {total:,} lines, {total - budget:,} over the budget of {budget:,} "
                            f"in docs/design.md (largest folders: {where})")
        else:
            summaries.append(f"{top}/: {total:,} lines of {budget:,}")
    return problems, summaries


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems, summaries = check(root)
    for p in problems:
        print(p)
    if problems:
        return 1
    print("check_size: " + "; ".join(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
