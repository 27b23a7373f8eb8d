#!/usr/bin/env python3
"""Helpers for run-conformance.sh: timestamp, classify and compare the
results of libiscsi's iscsi-test-cu.

Why parse the verbose console output rather than CUnit's XML (-x): libiscsi
marks a skipped test with CU_PASS("[SKIPPED] ..."), and CUnit's automated
XML report records nothing for a passing assertion, so skips would be
indistinguishable from passes there. The console output carries libiscsi's
"[SKIPPED]" log line between "Test: NAME ..." and CUnit's "passed".

Test names are SUITE.TEST (e.g. "Unmap.Simple"): that is what CUnit prints;
the family prefix (ALL/SCSI/iSCSI/LINUX) is not visible in the run output.

Subcommands:
  stamp LOG TIMED       copy stdin to LOG; also write TIMED, each line prefixed
                        by the seconds elapsed when it was completed
  parse ...             classify one run into PREFIX.{passed,failed,skipped,
                        notrun,times}
  compare ...           compare a candidate run against a baseline run
"""
import argparse
import fnmatch
import re
import sys
import time

RESULTS = ("passed", "failed", "skipped", "notrun")
# Worst result wins when the same SUITE.TEST runs twice (e.g. --tests
# 'SCSI.*,ALL.*' selects each test under two families).
SEVERITY = {"passed": 0, "skipped": 1, "notrun": 2, "failed": 3}


def cmd_stamp(args):
    # Timestamps are taken here, as lines arrive, because iscsi-test-cu itself
    # reports only the total elapsed time; per-test times let us say which
    # suites dominate the run time. The producer must be line buffered
    # (stdbuf -oL) for the times to mean anything.
    start = time.monotonic()
    pending = b""
    with open(args.log, "wb") as log, open(args.timed, "wb") as timed:
        while True:
            chunk = sys.stdin.buffer.read1(65536)
            if not chunk:
                break
            log.write(chunk)
            log.flush()
            pending += chunk
            *lines, pending = pending.split(b"\n")
            now = time.monotonic() - start
            for line in lines:
                timed.write(b"%.3f\t%s\n" % (now, line))
        if pending:
            timed.write(b"%.3f\t%s\n" % (time.monotonic() - start, pending))
    return 0


def expected_tests(listing, pattern):
    """Tests iscsi-test-cu would select for PATTERN, mirroring its rules:
    comma-separated items, each FAMILY[.SUITE[.TEST]] matched with fnmatch
    (a missing part means '*'); an item naming an existing file is a list of
    such items, one a line."""
    entries = []
    for line in listing:
        parts = line.strip().split(".")
        if len(parts) == 3:
            entries.append(parts)

    def items(pat):
        for item in pat.split(","):
            item = item.strip()
            if not item:
                continue
            try:
                with open(item) as fh:
                    for sub in fh:
                        yield from items(sub.strip())
                continue
            except OSError:
                pass
            yield item

    selected = []
    for item in items(pattern):
        fam, _, rest = item.partition(".")
        suite, _, test = rest.partition(".")
        suite = suite or "*"
        test = test or "*"
        for f, s, t in entries:
            if (fnmatch.fnmatchcase(f, fam) and fnmatch.fnmatchcase(s, suite)
                    and fnmatch.fnmatchcase(t, test)):
                selected.append(f"{s}.{t}")
    return selected


TEST_RE = re.compile(r"^  Test: (\S+) \.\.\.(.*)$")
SUITE_RE = re.compile(r"^Suite: (\S+)")
SUITE_INIT_FAIL_RE = re.compile(r"Suite initialization failed for '([^']+)'")


def parse_run(timed_path):
    """Returns (results, times, notes). results maps SUITE.TEST to a result."""
    results, times, notes = {}, {}, []
    suite = None
    current = None          # SUITE.TEST of the test whose result is pending
    skipped = False
    started_at = 0.0

    def finish(result, t):
        nonlocal current
        if skipped and result == "passed":
            result = "skipped"
        old = results.get(current)
        if old is None or SEVERITY[result] > SEVERITY[old]:
            results[current] = result
        times[current] = times.get(current, 0.0) + max(0.0, t - started_at)
        current = None

    last_t = 0.0
    with open(timed_path, "rb") as fh:
        for raw in fh:
            stamp, _, text = raw.decode("utf-8", "replace").rstrip("\n").partition("\t")
            try:
                t = float(stamp)
            except ValueError:
                continue
            m = SUITE_INIT_FAIL_RE.search(text)
            if m:
                notes.append(f"suite {m.group(1)}: initialization failed, its tests did not run")
            m = SUITE_RE.match(text)
            if m and current is None:
                suite = m.group(1)
                last_t = t
                continue
            m = TEST_RE.match(text)
            if m and current is None:
                current = f"{suite}.{m.group(1)}"
                started_at = last_t
                skipped = False
                rest = m.group(2)
                if rest in ("passed", "FAILED"):
                    finish("passed" if rest == "passed" else "failed", t)
                    last_t = t
                elif "[SKIPPED]" in rest:
                    skipped = True
                continue
            if current is None:
                continue
            # CUnit prints the verdict right after the test function returns;
            # anything logged by the test ends with a newline first, so a
            # verdict that is not on the "Test:" line stands alone.
            if text == "passed":
                finish("passed", t)
                last_t = t
            elif text == "FAILED":
                finish("failed", t)
                last_t = t
            elif "[SKIPPED]" in text:
                skipped = True
    if current is not None:
        # The run ended (crash, timeout, lost target) inside this test.
        notes.append(f"{current}: run ended before the test finished (counted as failed)")
        results[current] = "failed"
    return results, times, notes


def cmd_parse(args):
    with open(args.listing) as fh:
        expected = expected_tests(fh, args.pattern)
    results, times, notes = parse_run(args.timed)
    for name in expected:
        results.setdefault(name, "notrun")
    by = {r: sorted(n for n, v in results.items() if v == r) for r in RESULTS}
    for r in RESULTS:
        with open(f"{args.out}.{r}", "w") as fh:
            fh.writelines(n + "\n" for n in by[r])
    with open(f"{args.out}.times", "w") as fh:
        for name, secs in sorted(times.items(), key=lambda kv: -kv[1]):
            fh.write(f"{secs:.3f}\t{name}\n")
    with open(f"{args.out}.notes", "w") as fh:
        fh.writelines(n + "\n" for n in notes)
    for note in notes:
        print(f"  note: {note}")
    # Per-suite time: the CI budget question is which suites dominate.
    per_suite = {}
    for name, secs in times.items():
        s = name.split(".", 1)[0]
        per_suite[s] = per_suite.get(s, 0.0) + secs
    top = sorted(per_suite.items(), key=lambda kv: -kv[1])[: args.top]
    if top:
        print("  slowest suites: " + ", ".join(f"{s} {v:.1f}s" for s, v in top))
    counts = ", ".join(f"{len(by[r])} {r}" for r in RESULTS if r != "notrun" or by[r])
    with open(f"{args.out}.summary", "w") as fh:
        fh.write(counts + "\n")
    return 0


def read_patterns(path):
    """One regex a line (full match against SUITE.TEST); '#' starts a comment.
    Returns [(compiled, comment)]."""
    pats = []
    if not path:
        return pats
    with open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            body, _, comment = line.partition("#")
            body = body.strip()
            if not body:
                continue
            try:
                pats.append((re.compile(body), comment.strip(), body))
            except re.error as e:
                sys.exit(f"{path}:{lineno}: bad regex {body!r}: {e}")
    return pats


def load_run(prefix):
    out = {}
    for r in RESULTS:
        with open(f"{prefix}.{r}") as fh:
            for line in fh:
                if line.strip():
                    out[line.strip()] = r
    return out


def cmd_compare(args):
    base = load_run(args.baseline)
    cand = load_run(args.candidate)
    flaky_pats = read_patterns(args.flaky)
    thin_pats = read_patterns(args.thin)
    universe = sorted(set(base) | set(cand))

    def matches(pats, name):
        for rx, comment, _ in pats:
            if rx.fullmatch(name):
                return comment or "listed"
        return None

    if args.all_names:
        with open(args.all_names) as fh:
            all_names = {".".join(l.strip().split(".")[1:]) for l in fh if l.count(".") == 2}
        for rx, _, body in thin_pats + flaky_pats:
            if not any(rx.fullmatch(n) for n in all_names):
                print(f"warning: pattern {body!r} matches no test iscsi-test-cu knows")

    ok, bad, flaky_seen = [], [], []
    for name in universe:
        b = base.get(name, "notrun")
        c = cand.get(name, "notrun")
        reason = matches(flaky_pats, name)
        if reason:
            flaky_seen.append((name, b, c, reason))
            continue
        if b == "passed":
            (ok if c == "passed" else bad).append(
                (name, f"passed on {args.bname}, {c} on {args.cname}"))
        elif matches(thin_pats, name):
            # Thin-provisioning tests: the baseline (fully provisioned) cannot
            # pass them, so the candidate is held to the absolute standard.
            (ok if c == "passed" else bad).append(
                (name, f"thin-provisioning test: {b} on {args.bname}, {c} on {args.cname}"))

    gained = [n for n in universe if cand.get(n) == "passed" and base.get(n) != "passed"
              and not matches(thin_pats, n) and not matches(flaky_pats, n)]
    if gained:
        print(f"passed on {args.cname} but not on {args.bname} (not a check, for information):")
        for n in gained:
            print(f"  {n} ({base.get(n, 'notrun')} on {args.bname})")
    if flaky_seen:
        print("known flaky, ignored (tests/conformance/known-flaky.txt):")
        for n, b, c, reason in flaky_seen:
            print(f"  {n}: {b} on {args.bname}, {c} on {args.cname} -- {reason}")
    thin_ok = [n for n, why in ok if why.startswith("thin")]
    thin_bad = [n for n, why in bad if why.startswith("thin")]
    print(f"thin-provisioning tests: {len(thin_ok)} passed on {args.cname}, "
          f"{len(thin_bad)} did not")
    if bad:
        print("REGRESSIONS:")
        for n, why in bad:
            print(f"  {n}: {why}")
    with open(args.counts, "w") as fh:
        fh.write(f"{len(ok)} {len(bad)}\n")
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("stamp")
    p.add_argument("log")
    p.add_argument("timed")
    p.set_defaults(fn=cmd_stamp)
    p = sub.add_parser("parse")
    p.add_argument("--timed", required=True)
    p.add_argument("--listing", required=True, help="output of iscsi-test-cu -l")
    p.add_argument("--pattern", required=True)
    p.add_argument("--out", required=True, help="output prefix")
    p.add_argument("--top", type=int, default=5)
    p.set_defaults(fn=cmd_parse)
    p = sub.add_parser("compare")
    p.add_argument("--baseline", required=True, help="result prefix")
    p.add_argument("--candidate", required=True, help="result prefix")
    p.add_argument("--bname", required=True)
    p.add_argument("--cname", required=True)
    p.add_argument("--thin")
    p.add_argument("--flaky")
    p.add_argument("--all-names", help="output of iscsi-test-cu -l, to catch typos")
    p.add_argument("--counts", required=True, help="file receiving 'OK BAD'")
    p.set_defaults(fn=cmd_compare)
    args = ap.parse_args()
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
