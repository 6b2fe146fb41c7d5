#!/usr/bin/env python3
"""Counts the skipped tests in test logs and fails on any skip not allowed (issue 33, item 3).

A test that cannot run what it checks (a backend the host lacks, no S3 test server) reports
one line in one format, `SKIPPED: <what>: <reason>` (guideloom_testkit::skipped; written past
libtest's output capture, so it shows in `cargo test`'s output even when the test passes).
pytest's short summary (`-rs`) reports a skip as `SKIPPED [N] <file>:<line>: <reason>`. This
script reads the logs `.ci/run` tees the test output into, collects both kinds of lines, and
checks each against the allowed list (`.ci/allowed-skips.txt` by default):

    <log name> | <what> | <why this skip is expected there>

`<log name>` is a log's file name without `.log` (`*` for any log), `<what>` a prefix of the
text after the mark (`SKIPPED: ` or `SKIPPED [N] `), `<why>` a non-empty reason. Blank lines
and lines starting with `#` are comments. Every skip found is printed with the entry that
allows it; a skip that no entry allows, or an entry without a reason, makes the script exit 1.

Python 3 standard library only; it reads text, it builds nothing (a few milliseconds).

Usage: .ci/check-skips.py [--allowed FILE] LOG...
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

RUST = re.compile(r"SKIPPED: (.*)$")
PYTEST = re.compile(r"^SKIPPED \[\d+\] (.*)$")


def allowed_entries(path: Path) -> tuple[list[tuple[str, str, str]], list[str]]:
    """The entries of the allowed list and the problems found in it."""
    entries, problems = [], []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [p.strip() for p in line.split(" | ")]
        if len(parts) != 3 or not all(parts):
            problems.append(f"{path}:{number}: expected `<log> | <what> | <why>`, found {line!r}")
            continue
        entries.append((parts[0], parts[1], parts[2]))
    return entries, problems


def skips(log: Path) -> list[str]:
    """The skip texts of one log (the text after the mark), in order."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        line = line.rstrip("\r")
        m = PYTEST.match(line)
        if m is None:
            # A Rust skip line may follow other output on the same line (libtest prints
            # `test name ... ` before the test's result), so it is found anywhere.
            m = RUST.search(line)
        if m is not None:
            out.append(m.group(1))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--allowed", type=Path, default=Path(__file__).with_name("allowed-skips.txt"))
    parser.add_argument("logs", nargs="+", type=Path)
    args = parser.parse_args()
    entries, problems = allowed_entries(args.allowed)
    total = unexplained = 0
    for log in args.logs:
        name = log.name.removesuffix(".log")
        for text in skips(log):
            total += 1
            entry = next((e for e in entries if e[0] in ("*", name) and text.startswith(e[1])), None)
            if entry is None:
                unexplained += 1
                print(f"{log}: unexplained skip: {text}")
            else:
                print(f"{log}: allowed skip: {text}  [{entry[2]}]")
    for p in problems:
        print(p)
    print(
        f"skips: {total} in {len(args.logs)} log(s), {total - unexplained} allowed by {args.allowed}, "
        f"{unexplained} unexplained"
    )
    return 1 if unexplained or problems else 0


if __name__ == "__main__":
    sys.exit(main())
