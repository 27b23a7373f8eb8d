#!/usr/bin/python3
"""Reads tgtd's metrics file with Prometheus' own parser (Debian's
python3-prometheus-client, hence /usr/bin/python3), for target-metrics.sh.

  metrics_query.py FILE check
      the whole file parses; every family is rbio_*, a counter or a gauge,
      with help; a counter's samples end in _total; no sample twice.
      Prints the number of samples.
  metrics_query.py FILE value NAME [LABEL=VALUE]...
      prints the value of the one sample NAME whose labels include these;
      none or several: exit 1, saying so.
  metrics_query.py FILE count NAME [LABEL=VALUE]...
      prints how many samples NAME have these labels.
  metrics_query.py FILE labels NAME [LABEL=VALUE]...
      prints every label of the one such sample, LABEL=VALUE per line.

FILE "-" is stdin. Exit 2: the file does not parse (or breaks a rule).
"""
import sys

from prometheus_client.parser import text_string_to_metric_families


def fail(why):
    print(f"metrics_query: {why}", file=sys.stderr)
    sys.exit(2)


def families(text):
    try:
        return list(text_string_to_metric_families(text))
    except Exception as e:  # the parser raises ValueError and others
        fail(f"the metrics do not parse: {e!r}")


def check(fams):
    seen = set()
    n = 0
    for f in fams:
        if not f.name.startswith("rbio_"):
            fail(f"{f.name}: not an rbio_ metric")
        if f.type not in ("counter", "gauge"):
            fail(f"{f.name}: type {f.type}")
        if not f.documentation:
            fail(f"{f.name}: no help")
        if not f.samples:
            fail(f"{f.name}: no samples")
        for s in f.samples:
            if f.type == "counter" and not s.name.endswith("_total"):
                fail(f"{s.name}: a counter's sample without _total")
            if s.timestamp is not None:
                fail(f"{s.name}: a timestamp (the textfile collector refuses them)")
            key = (s.name, tuple(sorted(s.labels.items())))
            if key in seen:
                fail(f"{s.name} {s.labels}: twice")
            seen.add(key)
            n += 1
    print(n)


def matching(fams, name, wanted):
    return [s for f in fams for s in f.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in wanted.items())]


def main():
    if len(sys.argv) < 3:
        fail(__doc__)
    path, what = sys.argv[1], sys.argv[2]
    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    fams = families(text)
    if what == "check":
        return check(fams)
    if what not in ("value", "count", "labels") or len(sys.argv) < 4:
        fail(__doc__)
    wanted = {}
    for arg in sys.argv[4:]:
        key, sep, value = arg.partition("=")
        if not sep:
            fail(f"not LABEL=VALUE: {arg}")
        wanted[key] = value
    found = matching(fams, sys.argv[3], wanted)
    if what == "count":
        print(len(found))
        return
    if len(found) != 1:
        print(f"{sys.argv[3]} {wanted}: {len(found)} samples", file=sys.stderr)
        sys.exit(1)
    if what == "labels":
        for k, v in sorted(found[0].labels.items()):
            print(f"{k}={v}")
        return
    v = found[0].value
    print(int(v) if float(v).is_integer() else v)


if __name__ == "__main__":
    main()
