"""The tests that belong in ``tests/slow_tests.txt``: from the output of a run with
``--durations=0`` (setup, call and teardown added per test), those that took at least a
threshold (1 s unless told) and are not listed yet.

    .venv/bin/python -m pytest -q -n auto --maxprocesses 4 --durations=0 > durations.log
    .venv/bin/python tools/slow_tests.py durations.log [SECONDS]
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

LISTED = Path(__file__).resolve().parents[1] / "tests" / "slow_tests.txt"
LINE = re.compile(r"([\d.]+)s (?:call|setup|teardown)\s+tests/(\S+)")


def main() -> None:
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    threshold = float(sys.argv[2]) if len(sys.argv) == 3 else 1.0
    spent: Counter[str] = Counter()
    for line in Path(sys.argv[1]).read_text(encoding="utf-8").splitlines():
        if found := LINE.match(line):
            spent[found.group(2)] += float(found.group(1))
    listed = tuple(
        line.strip()
        for line in LISTED.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    )
    for node, seconds in spent.most_common():
        if seconds >= threshold and not node.startswith(listed):
            print(f"{seconds:6.2f} s  {node}")


if __name__ == "__main__":
    main()
