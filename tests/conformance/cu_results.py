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
  stamp LOG TIMED       append stdin to LOG; also append it to TIMED, each line
                        prefixed by the seconds elapsed when it was completed
  plan ...              split a selection into one iscsi-test-cu run a suite
  parse ...             classify one run into PREFIX.{passed,failed,skipped,
                        notrun,times}
  compare ...           compare a candidate run against a baseline run
  compare-tools ...     compare libiscsi tool runs (run-conformance.sh's
                        run_tools) through two transports
"""
import argparse
import difflib
import fnmatch
import os
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
    with open(args.log, "ab") as log, open(args.timed, "ab") as timed:
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
            # A run cut off mid-line must not run into the next one's output.
            log.write(b"\n")
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
        for entry in entries:
            f, s, t = entry
            if (fnmatch.fnmatchcase(f, fam) and fnmatch.fnmatchcase(s, suite)
                    and fnmatch.fnmatchcase(t, test) and entry not in selected):
                selected.append(entry)
    # iscsi-test-cu's own order (that of its listing), not the pattern's.
    order = {tuple(e): i for i, e in enumerate(entries)}
    return sorted(selected, key=lambda e: order[tuple(e)]), entries


def cmd_plan(args):
    """One line per iscsi-test-cu process: FAMILY.SUITE, tab, --test value.

    Why one process per suite: tests share process-wide state in the test
    tool. In libiscsi 1.19, CompareAndWrite.InvalidDataOutSize installs a
    PDU-mangling hook that rewrites byte 13 of every later CDB, and it only
    removes the hook if COMPARE AND WRITE is implemented; on a thin
    provisioned tgt LUN (tgt has no COMPARE AND WRITE) every 16-byte command
    of every later suite is then corrupted. Separate processes also keep a
    crash or hang in one suite from costing the others, and give exact
    per-suite times."""
    with open(args.listing) as fh:
        selected, entries = expected_tests(fh, args.pattern)
    groups = {}
    for f, s, t in selected:
        groups.setdefault((f, s), []).append(t)
    for (f, s), tests in groups.items():
        everything = [t for ff, ss, t in entries if (ff, ss) == (f, s)]
        if tests == everything:
            arg = f"{f}.{s}"
        else:
            # iscsi-test-cu registers comma-separated items right to left.
            arg = ",".join(f"{f}.{s}.{t}" for t in reversed(tests))
        print(f"{f}.{s}\t{arg}")
    return 0


TEST_RE = re.compile(r"^  Test: (\S+) \.\.\.(.*)$")
SUITE_RE = re.compile(r"^Suite: (\S+)")
SUITE_INIT_FAIL_RE = re.compile(r"Suite initialization failed for '([^']+)'")


def parse_run(timed_path):
    """Returns (results, times, notes, skip reasons); results maps SUITE.TEST
    to passed/failed/skipped."""
    results, times, notes, reasons = {}, {}, [], {}
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

    def verdict(text, t):
        # CUnit prints "passed" or "FAILED" as soon as the test function
        # returns, but its newline only when the next test starts, so the
        # suite's teardown logging can follow the verdict on the same line.
        # Everything libiscsi logs is indented and newline-terminated, so the
        # verdict is either right after "Test: NAME ..." or at column 0.
        nonlocal skipped, last_t
        if text.startswith("passed"):
            finish("passed", t)
            last_t = t
        elif text.startswith("FAILED"):
            finish("failed", t)
            last_t = t
        elif "[SKIPPED]" in text:
            skipped = True
            reasons.setdefault(current, text.split("[SKIPPED]", 1)[1].strip())

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
            if m:
                if current is not None:
                    # A new process started after one that died mid-test.
                    notes.append(f"{current}: run ended before the test finished (counted as failed)")
                    results[current] = "failed"
                    current = None
                suite = m.group(1)
                last_t = t
                continue
            m = TEST_RE.match(text)
            if m and current is None:
                current = f"{suite}.{m.group(1)}"
                started_at = last_t
                skipped = False
                verdict(m.group(2), t)
                continue
            if current is not None:
                verdict(text, t)
    if current is not None:
        # The run ended (crash, timeout, lost target) inside this test.
        notes.append(f"{current}: run ended before the test finished (counted as failed)")
        results[current] = "failed"
    return results, times, notes, reasons


def cmd_parse(args):
    with open(args.listing) as fh:
        selected, _ = expected_tests(fh, args.pattern)
    results, times, notes, reasons = parse_run(args.timed)
    for _, s, t in selected:
        results.setdefault(f"{s}.{t}", "notrun")
    by = {r: sorted(n for n, v in results.items() if v == r) for r in RESULTS}
    for r in RESULTS:
        with open(f"{args.out}.{r}", "w") as fh:
            fh.writelines(n + "\n" for n in by[r])
    with open(f"{args.out}.times", "w") as fh:
        for name, secs in sorted(times.items(), key=lambda kv: -kv[1]):
            fh.write(f"{secs:.3f}\t{name}\n")
    with open(f"{args.out}.skip-reasons", "w") as fh:
        fh.writelines(f"{n}\t{reasons.get(n, '')}\n" for n in by["skipped"])
    with open(f"{args.out}.notes", "w") as fh:
        fh.writelines(n + "\n" for n in notes)
    for note in notes:
        print(f"   note: {note}")
    # Per-suite time: the CI budget question is which suites dominate.
    per_suite = []
    if args.suite_times:
        with open(args.suite_times) as fh:
            for line in fh:
                secs, suite, _rc = line.rstrip("\n").split("\t")
                per_suite.append((suite, float(secs)))
    top = sorted(per_suite, key=lambda kv: -kv[1])[: args.top]
    if top:
        print("   slowest suites: " + ", ".join(f"{s} {v:.1f}s" for s, v in top))
    counts = ", ".join(f"{len(by[r])} {r}" for r in RESULTS if r != "notrun" or by[r])
    with open(f"{args.out}.summary", "w") as fh:
        fh.write(counts + "\n")
    return 0


def read_patterns(path, optional=None):
    """One regex a line (full match against SUITE.TEST); '#' starts a comment.
    A leading '?' marks a pattern as optional: it goes to the list OPTIONAL
    (if given) instead. Returns [(compiled, comment, text)]."""
    pats = []
    if not path:
        return pats
    with open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            body, _, comment = line.partition("#")
            body = body.strip()
            if not body:
                continue
            target = pats
            if body.startswith("?") and optional is not None:
                body, target = body[1:].strip(), optional
            try:
                target.append((re.compile(body), comment.strip(), body))
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
    optional_pats = []
    thin_pats = read_patterns(args.thin, optional_pats)
    universe = sorted(set(base) | set(cand))

    def matches(pats, name):
        for rx, comment, _ in pats:
            if rx.fullmatch(name):
                return comment or "listed"
        return None

    if args.all_names:
        with open(args.all_names) as fh:
            all_names = {".".join(l.strip().split(".")[1:]) for l in fh if l.count(".") == 2}
        for rx, _, body in thin_pats + optional_pats + flaky_pats:
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
            # Required tests (thin provisioning, COMPARE AND WRITE): the
            # baseline cannot pass them, so the candidate is held to the
            # absolute standard.
            (ok if c == "passed" else bad).append(
                (name, f"required test: {b} on {args.bname}, {c} on {args.cname}"))

    optional = [(n, base.get(n, "notrun"), cand.get(n, "notrun")) for n in universe
                if base.get(n) != "passed" and matches(optional_pats, n)
                and not matches(thin_pats, n) and not matches(flaky_pats, n)]
    gained = [n for n in universe if cand.get(n) == "passed" and base.get(n) != "passed"
              and not matches(thin_pats, n) and not matches(optional_pats, n)
              and not matches(flaky_pats, n)]
    if gained:
        print(f"passed on {args.cname} but not on {args.bname} (not a check, for information):")
        for n in gained:
            print(f"  {n} ({base.get(n, 'notrun')} on {args.bname})")
    if flaky_seen:
        print("known flaky, ignored (tests/conformance/known-flaky.txt):")
        for n, b, c, reason in flaky_seen:
            print(f"  {n}: {b} on {args.bname}, {c} on {args.cname} -- {reason}")
    if optional:
        print("optional thin-provisioning tests (not checks; stock rdwr fails them too):")
        for n, b, c in optional:
            print(f"  {n}: {c} on {args.cname} ({b} on {args.bname})")
    if args.thin:
        thin_ok = [n for n, why in ok if why.startswith("required")]
        thin_bad = [n for n, why in bad if why.startswith("required")]
        print(f"required tests (thin provisioning, COMPARE AND WRITE): {len(thin_ok)} passed on {args.cname}, "
              f"{len(thin_bad)} did not")
    same = [n for n, why in ok if not why.startswith("required")]
    lost = [n for n, why in bad if not why.startswith("required")]
    print(f"iscsi-test-cu: {len(same)} of the tests that pass on {args.bname} "
          f"pass on {args.cname} too" + (f", {len(lost)} do not" if lost else ""))
    if bad:
        print("REGRESSIONS:")
        for n, why in bad:
            print(f"  {n}: {why}")
    with open(args.counts, "w") as fh:
        fh.write(f"{len(ok)} {len(bad)}\n")
    return 0


def load_tools(folder):
    """{ID: (kind, command, exit status, output)} of one run_tools folder,
    with the portal the tools used (folder/portal, ADDR:PORT) written as
    PORTAL in the output: tgt answers SendTargets with the portal the
    request came in on."""
    out = {}
    if not os.path.isfile(f"{folder}/index"):
        return out      # the run never got to its tools (tgtd gone)
    with open(f"{folder}/portal") as fh:
        portal = fh.read().strip()
    with open(f"{folder}/index") as fh:
        for line in fh:
            tool_id, kind, command = line.rstrip("\n").split("\t", 2)
            try:
                with open(f"{folder}/{tool_id}.rc") as rc_fh:
                    rc = int(rc_fh.read().strip())
            except (OSError, ValueError):
                rc = None
            try:
                with open(f"{folder}/{tool_id}.out", errors="replace") as out_fh:
                    text = out_fh.read().replace(portal, "PORTAL")
            except OSError:
                text = ""
            out[tool_id] = (kind, command, rc, text)
    return out


def cmd_compare_tools(args):
    """Every tool that exits 0 in the baseline must exit 0 in the candidate
    and, for kind "output", print the same. The tools run against the same
    LUN of the same target in both, so apart from the portal itself nothing
    in their output (names, serial numbers, sizes) depends on it."""
    base = load_tools(args.baseline)
    cand = load_tools(args.candidate)
    ok, bad, base_failed = [], [], []
    for tool_id, (kind, command, rc, text) in base.items():
        if rc != 0:
            base_failed.append(f"{tool_id} (exit {rc})")
            continue
        c = cand.get(tool_id)
        if c is None:
            bad.append((tool_id, f"not run on {args.cname}", []))
        elif c[2] != 0:
            status = "no exit status" if c[2] is None else f"exit {c[2]}"
            bad.append((tool_id, f"exit 0 on {args.bname}, {status} on {args.cname}: {c[1]}",
                        c[3].splitlines()[-5:]))
        elif kind == "output" and c[3] != text:
            diff = difflib.unified_diff(text.splitlines(), c[3].splitlines(),
                                        args.bname, args.cname, lineterm="", n=1)
            bad.append((tool_id, f"output differs: {c[1]}", list(diff)[:20]))
        else:
            ok.append(tool_id)
    if base_failed:
        print(f"libiscsi tools that fail on {args.bname} (not checks): " + ", ".join(base_failed))
    print(f"libiscsi tools: {len(ok)} of the tools that work on {args.bname} work the same "
          f"on {args.cname}" + (f", {len(bad)} do not" if bad else ""))
    if bad:
        print("TOOL REGRESSIONS:")
        for tool_id, why, detail in bad:
            print(f"  {tool_id}: {why}")
            for line in detail:
                print(f"      {line}")
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
    p.add_argument("--suite-times", help="lines: seconds, FAMILY.SUITE, exit status")
    p.add_argument("--top", type=int, default=5)
    p.set_defaults(fn=cmd_parse)
    p = sub.add_parser("plan")
    p.add_argument("--listing", required=True, help="output of iscsi-test-cu -l")
    p.add_argument("--pattern", required=True)
    p.set_defaults(fn=cmd_plan)
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
    p = sub.add_parser("compare-tools")
    p.add_argument("--baseline", required=True, help="folder of run_tools results")
    p.add_argument("--candidate", required=True, help="folder of run_tools results")
    p.add_argument("--bname", required=True)
    p.add_argument("--cname", required=True)
    p.add_argument("--counts", required=True, help="file receiving 'OK BAD'")
    p.set_defaults(fn=cmd_compare_tools)
    args = ap.parse_args()
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
