#!/usr/bin/env python3
"""Checks that every header opens with at most six lines of comment.

A header's opening says what the file is for in a few lines (STYLE.md, "Comments"); the rest belongs on the
class or function it describes. Counts the `//` lines before the first preprocessor line of each .h under the
library folders and names every header that exceeds the limit.

Usage: check_headers.py <source root>
"""

import pathlib
import sys

FOLDERS = ("core", "rpc", "wire", "collective", "stage_worker", "encoder_worker", "stage_driver", "ui", "coordinator",
           "job_service", "client", "tools")
MAX_OPENING_LINES = 6


def opening_comment_lines(path):
    """Number of `//` lines before the first preprocessor line (#pragma, #include, #ifndef...)."""
    count = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            break
        if stripped.startswith("//"):
            count += 1
    return count


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root = pathlib.Path(argv[1])
    too_long = []
    checked = 0
    for folder in FOLDERS:
        for header in sorted((root / folder).rglob("*.h")):
            checked += 1
            lines = opening_comment_lines(header)
            if lines > MAX_OPENING_LINES:
                too_long.append((header.relative_to(root), lines))
    for header, lines in too_long:
        print(f"{header}: opening comment is {lines} lines (at most {MAX_OPENING_LINES}): say what the file is "
              "for; move the rest onto the class or function it describes, or into docs/")
    if too_long:
        print(f"{len(too_long)} of {checked} headers open with more than {MAX_OPENING_LINES} lines of comment")
        return 1
    if checked == 0:
        print(f"no headers found under {root}", file=sys.stderr)
        return 2
    print(f"{checked} headers open with at most {MAX_OPENING_LINES} lines of comment")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
