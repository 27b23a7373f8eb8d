#!/usr/bin/env python3
"""Fails when ctest skipped a test that tests/allowed-skips.txt does not list.

    check-skips.py JUNIT_XML ALLOW_LIST

JUNIT_XML is ctest's --output-junit file. A test counts as skipped when its
<testcase> has a <skipped> element (SKIP_RETURN_CODE 77, gtest's SKIPPED) or
its status is notrun or disabled. ALLOW_LIST has one test a line: its ctest
name (a Python regex matched against the whole name), whitespace, and why it
may skip; '#' starts a comment. An entry without a reason is an error. Prints
every skipped test with its reason or, if it is not listed, as unlisted; exits
1 if any is unlisted (or the files are bad), else 0.
"""
import re
import sys
import xml.etree.ElementTree as ET


def load_allowed(path):
    allowed, bad = [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split(None, 1)
            if len(parts) < 2:
                bad.append(f"{path}:{n}: '{parts[0]}' has no reason")
                continue
            try:
                allowed.append((re.compile(parts[0]), parts[1]))
            except re.error as e:
                bad.append(f"{path}:{n}: bad pattern '{parts[0]}': {e}")
    return allowed, bad


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    allowed, bad = load_allowed(sys.argv[2])
    for b in bad:
        print(f"check-skips: {b}")
    skipped = []
    for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
        el = case.find("skipped")
        status = case.get("status", "")
        if el is not None or status in ("notrun", "disabled"):
            why = el.get("message", "") if el is not None else status
            skipped.append((case.get("name", "?"), why))
    unlisted = 0
    for name, why in skipped:
        reason = next((r for p, r in allowed if p.fullmatch(name)), None)
        if reason is None:
            unlisted += 1
            print(f"check-skips: UNLISTED SKIP: {name} ({why}); fix its prerequisite, "
                  f"or list it with its reason in {sys.argv[2]}")
        else:
            print(f"check-skips: allowed skip: {name} ({why}): {reason}")
    print(f"check-skips: {len(skipped)} skipped, {unlisted} not allowed")
    return 1 if unlisted or bad else 0


if __name__ == "__main__":
    sys.exit(main())
