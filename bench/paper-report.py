#!/usr/bin/python3
"""paper-report.py DIR: summary.csv, the plots and report.md of a
bench/paper.sh run, from DIR/points.csv and DIR/run.conf (and DIR/iser/ when
the run had --iser). Rerunnable: it only reads what paper.sh measured.

Medians are over rounds; a technique's gain is the median of the per-round
ratios to `unopt` of the same workload, measured back to back.
"""
import csv
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CONFIGS = ["stock", "unopt", "batching", "coalescing", "async-send", "store-batch", "all"]
TECHNIQUES = ["batching", "coalescing", "async-send", "store-batch", "all"]
LABEL = {
    "stock": "stock tgt (rdwr)",
    "unopt": "rbio, every technique off",
    "batching": "request batching alone",
    "coalescing": "message coalescing alone",
    "async-send": "async send path alone",
    "store-batch": "store batched submission alone",
    "all": "rbio, all on",
    "wire": "wire (iperf3, loopback)",
}
STYLE = {
    "stock": dict(color="tab:gray", ls="--", marker="s"),
    "unopt": dict(color="tab:red", marker="v"),
    "batching": dict(color="tab:orange", marker="o"),
    "coalescing": dict(color="tab:olive", marker="^"),
    "async-send": dict(color="tab:purple", marker="D"),
    "store-batch": dict(color="tab:cyan", marker="P"),
    "all": dict(color="tab:green", marker="*", lw=2.2, ms=9),
    "wire": dict(color="black", ls=":", lw=1.8),
}
METRICS = [
    "iops", "MBps", "tgtd_user_us_per_io", "tgtd_sys_us_per_io", "client_user_us_per_io",
    "client_sys_us_per_io", "tgtd_syscalls_per_io", "tgtd_wakeups_per_io", "tgtd_ctxsw_per_io",
    "tgtd_uring_enters_per_io", "uring_ios_per_enter", "client_syscalls_per_io",
    "client_ctxsw_per_io", "pdus_per_recv", "pdus_per_send", "xport_syscalls_per_io", "load1",
    "other_pct", "steal_pct",
]


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def fmt(v, p=1):
    if v is None:
        return "-"
    if abs(v) >= 1000 and p <= 1:
        return f"{v:,.0f}"
    return f"{v:.{p}f}"


def pct(ratio):
    return "-" if ratio is None else f"{(ratio - 1) * 100:+.0f}%"


def size_label(b):
    b = int(b)
    return f"{b // 1048576} MiB" if b >= 1048576 else f"{b // 1024} KiB"


def size_tick(b):
    b = int(b)
    return f"{b // 1048576}M" if b >= 1048576 else f"{b // 1024}K"


class Run:
    def __init__(self, d):
        self.dir = d
        self.conf = {}
        with open(os.path.join(d, "run.conf")) as f:
            for line in f:
                k, sep, v = line.rstrip("\n").partition("=")
                if sep:
                    self.conf[k] = v  # a resumed run appends: the last value wins
        with open(os.path.join(d, "points.csv")) as f:
            self.rows = list(csv.DictReader(f))
        self.ok = [r for r in self.rows if r["ok"] == "1"]
        self.groups = {}
        for r in self.ok:
            key = (r["section"], r["config"], r["op"], int(r["bytes"]), int(r["depth"]), r["param"])
            self.groups.setdefault(key, []).append(r)
        self.wire = {}
        for (sec, _c, _op, b, _d, _p), rs in self.groups.items():
            if sec == "wire":
                self.wire[b] = med([num(r["MBps"]) for r in rs])
        self.sizes = sorted({k[3] for k in self.groups if k[0] == "sweep"})
        self.depths = sorted({k[4] for k in self.groups if k[0] == "sweep"})
        self.ops = [o for o in ("read", "write") if any(k[0] == "sweep" and k[2] == o for k in self.groups)]

    def m(self, sec, c, op, b, d, p="-", metric="MBps"):
        rs = self.groups.get((sec, c, op, b, d, p))
        return med([num(r[metric]) for r in rs]) if rs else None

    def spread(self, sec, c, op, b, d, p="-", metric="MBps"):
        rs = self.groups.get((sec, c, op, b, d, p), [])
        v = [num(r[metric]) for r in rs if num(r[metric]) is not None]
        return (min(v), max(v)) if v else (None, None)

    def ratios(self, sec, c, base, op, b, d, p="-"):
        """Per-round MB/s ratios c/base of one workload (paired by round)."""
        a = {r["round"]: num(r["MBps"]) for r in self.groups.get((sec, c, op, b, d, p), [])}
        z = {r["round"]: num(r["MBps"]) for r in self.groups.get((sec, base, op, b, d, p), [])}
        return [a[k] / z[k] for k in a if k in z and a[k] is not None and z[k]]

    def ratio(self, *args):
        v = self.ratios(*args)
        return (statistics.median(v), min(v), max(v)) if v else (None, None, None)


def write_summary(run):
    path = os.path.join(run.dir, "summary.csv")
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["section", "config", "op", "bytes", "depth", "param", "rounds", "MBps_min", "MBps_max",
                    "pct_of_wire", "over_unopt", "over_unopt_min", "over_unopt_max", "over_stock"]
                   + [m + "_median" for m in METRICS])
        for key in sorted(run.groups, key=lambda k: (k[0], k[5], k[2], k[4], k[3],
                                                       CONFIGS.index(k[1]) if k[1] in CONFIGS else 99)):
            sec, c, op, b, d, p = key
            lo, hi = run.spread(*key)
            mb = run.m(*key)
            wire = run.wire.get(b)
            frac = f"{mb / wire * 100:.1f}" if mb is not None and wire and sec != "wire" else ""
            ru = run.ratio(sec, c, "unopt", op, b, d, p) if sec == "sweep" else (None, None, None)
            rs = run.ratio(sec, c, "stock", op, b, d, p) if sec != "wire" else (None, None, None)
            w.writerow([sec, c, op, b, d, p, len(run.groups[key]), fmt(lo, 2), fmt(hi, 2), frac]
                       + [fmt(x, 3) if x is not None else "" for x in (*ru, rs[0])]
                       + [fmt(run.m(*key, metric=m), 3) if run.m(*key, metric=m) is not None else ""
                          for m in METRICS])


def xaxis(ax, sizes, title, ylabel):
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([size_tick(b) for b in sizes])
    ax.set_xlabel("request size")
    ax.grid(True, which="major", alpha=0.3)


def finish(fig, ax, ncol, title, rect, path, dpi):
    """The figure's legend (from AX) below the plots, its title, and the PNG."""
    h, lab = ax.get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=ncol, fontsize=9)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, rect[0], 1, rect[1]))
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def categories(ax, labels, nseries, width, title, ylabel=None):
    """X axis of grouped bars: one group per label, NSERIES bars of WIDTH each."""
    ax.set_xticks([x + width * (nseries - 1) / 2 for x in range(len(labels))])
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
    ax.set_title(title, fontsize=10)
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)


def size_grid(run):
    """A figure of one plot per (op, depth) over request sizes: the figure,
    its axes and (axis, op, depth) per plot."""
    fig, axes = plt.subplots(len(run.ops), len(run.depths),
                             figsize=(max(10, 5 * len(run.depths)), 4.2 * len(run.ops) + 0.8), squeeze=False)
    return fig, axes, [(axes[i][j], op, d) for i, op in enumerate(run.ops) for j, d in enumerate(run.depths)]


def plot_throughput(run, path):
    fig, axes, cells = size_grid(run)
    for ax, op, d in cells:
        for c in CONFIGS:
            pts = [(b, run.m("sweep", c, op, b, d), run.spread("sweep", c, op, b, d)) for b in run.sizes]
            pts = [p for p in pts if p[1] is not None]
            if not pts:
                continue
            xs = [p[0] for p in pts]
            ys = [p[1] for p in pts]
            err = [[y - p[2][0] for y, p in zip(ys, pts)], [p[2][1] - y for y, p in zip(ys, pts)]]
            ax.errorbar(xs, ys, yerr=err, label=LABEL[c], capsize=2, **STYLE[c])
        wx = [b for b in run.sizes if run.wire.get(b)]
        if wx:
            ax.plot(wx, [run.wire[b] for b in wx], label=LABEL["wire"], **STYLE["wire"])
        xaxis(ax, run.sizes, f"{op}s, {d} in flight", "MB/s (10^6 B/s)")
        ax.set_yscale("log")
    finish(fig, axes[0][0], 4, "Throughput vs request size (median of rounds, bars: lowest-highest round)",
           (0.08, 0.96), path, 90)


def plot_improvement(run, path):
    fig, axes, cells = size_grid(run)
    for ax, op, d in cells:
        for c in ["stock"] + TECHNIQUES:
            pts = [(b, run.ratio("sweep", c, "unopt", op, b, d)) for b in run.sizes]
            pts = [(b, r) for b, r in pts if r[0] is not None]
            if not pts:
                continue
            ax.plot([b for b, _ in pts], [(r[0] - 1) * 100 for _, r in pts], label=LABEL[c], **STYLE[c])
        ax.axhline(0, color="black", lw=0.8)
        ax.axhline(100, color="tab:red", lw=0.8, ls=":")
        ax.annotate("paper: up to +100%", (run.sizes[0], 100), fontsize=8, color="tab:red",
                    xytext=(2, 3), textcoords="offset points")
        xaxis(ax, run.sizes, f"{op}s, {d} in flight", "% over every technique off")
    finish(fig, axes[0][0], 3, "What each technique buys: throughput over the unoptimized configuration "
           "(median per-round ratio)", (0.08, 0.96), path, 90)


def reference_workloads(run):
    """The workloads the events/CPU figures and tables show: 4 KiB at the
    deepest queue (read, write), the smallest size at 1 in flight, and the
    largest size at the deepest queue."""
    if not run.sizes:
        return []
    dmax, bmin, bmax = max(run.depths), min(run.sizes), max(run.sizes)
    want = [(op, bmin, dmax) for op in run.ops] + [("read", bmin, min(run.depths))] + [
        (op, bmax, dmax) for op in run.ops]
    out = []
    for w in want:
        if w not in out and any(run.m("sweep", c, *w) is not None for c in CONFIGS):
            out.append(w)
    return out


def wl_label(op, b, d):
    return f"{size_label(b)} {op}, {d} in flight"


EVENT_PLOTS = [
    ("tgtd_wakeups_per_io", "tgtd event-loop wake-ups / I/O"),
    ("tgtd_syscalls_per_io", "tgtd system calls / I/O"),
    ("tgtd_ctxsw_per_io", "tgtd context switches / I/O"),
    ("client_syscalls_per_io", "client system calls / I/O"),
    ("pdus_per_recv", "PDUs per receive call"),
    ("pdus_per_send", "PDUs per send call"),
    ("uring_ios_per_enter", "io_uring I/Os per io_uring_enter"),
    ("client_ctxsw_per_io", "client context switches / I/O"),
]


def plot_events(run, refs, path):
    fig, axes = plt.subplots(2, 4, figsize=(20, 8.5))
    width = 0.8 / max(1, len(refs))
    for ax, (metric, title) in zip(axes.flat, EVENT_PLOTS):
        for k, w in enumerate(refs):
            ys = [run.m("sweep", c, *w, metric=metric) for c in CONFIGS]
            ax.bar([x + k * width for x in range(len(CONFIGS))], [y if y is not None else 0 for y in ys],
                   width, label=wl_label(*w))
        categories(ax, CONFIGS, len(refs), width, title)
        # Counts per I/O span 0.05 (4 KiB at depth) to 400 (1 MiB writes of
        # 8 KiB PDUs): only a log scale shows both.
        ax.set_yscale("log")
    finish(fig, axes[0][0], len(refs), "The interrupt analog: events per I/O per configuration "
           "(medians, log scale; no bar: none or not applicable)", (0.06, 0.96), path, 80)


def plot_cpu(run, refs, path):
    fig, axes = plt.subplots(1, max(1, len(refs)), figsize=(4.6 * max(1, len(refs)), 4.6), squeeze=False)
    parts = [("tgtd_user_us_per_io", "tgtd user", "tab:blue"), ("tgtd_sys_us_per_io", "tgtd system", "lightsteelblue"),
             ("client_user_us_per_io", "client user", "tab:orange"), ("client_sys_us_per_io", "client system", "navajowhite")]
    for ax, w in zip(axes[0], refs):
        bottom = [0.0] * len(CONFIGS)
        for metric, lab, col in parts:
            ys = [run.m("sweep", c, *w, metric=metric) or 0 for c in CONFIGS]
            ax.bar(range(len(CONFIGS)), ys, 0.7, bottom=bottom, label=lab, color=col)
            bottom = [a + b for a, b in zip(bottom, ys)]
        categories(ax, CONFIGS, 1, 0.7, wl_label(*w), "CPU us per I/O")
    finish(fig, axes[0][0], 4, "CPU per I/O, target (tgtd) and client, user and system (medians)", (0.08, 0.93), path, 85)


def msg_keys(run):
    ks = sorted({(k[2], k[3], k[4]) for k in run.groups if k[0] == "msgsize"}, key=lambda x: (-x[1], x[0]))
    params = []
    for k in run.groups:
        if k[0] == "msgsize" and k[5] not in params:
            params.append(k[5])
    order = ["tgt-default", "mrdsl-256k", "burst-1m", "no-immediate", "large"]
    params.sort(key=lambda p: order.index(p) if p in order else 99)
    cfgs = [c for c in CONFIGS if any(k[0] == "msgsize" and k[1] == c for k in run.groups)]
    return ks, params, cfgs


def plot_msgsize(run, path):
    ks, params, cfgs = msg_keys(run)
    fig, axes = plt.subplots(1, max(1, len(ks)), figsize=(4.6 * max(1, len(ks)), 4.4), squeeze=False)
    width = 0.8 / max(1, len(cfgs))
    for ax, (op, b, d) in zip(axes[0], ks):
        for k, c in enumerate(cfgs):
            ys = [run.m("msgsize", c, op, b, d, p) for p in params]
            sp = [run.spread("msgsize", c, op, b, d, p) for p in params]
            err = [[(y - s[0]) if y is not None else 0 for y, s in zip(ys, sp)],
                   [(s[1] - y) if y is not None else 0 for y, s in zip(ys, sp)]]
            ax.bar([x + k * width for x in range(len(params))], [y or 0 for y in ys], width, yerr=err, capsize=2,
                   label=LABEL[c], color=STYLE[c]["color"])
        if run.wire.get(b):
            ax.axhline(run.wire[b], **STYLE["wire"], label=LABEL["wire"])
        categories(ax, params, len(cfgs), width, wl_label(op, b, d), "MB/s")
    finish(fig, axes[0][0], 3, "Protocol message size: login parameters set on the target (tgtadm)", (0.1, 0.93), path, 85)


ISER_WL = re.compile(r"^(\d+)([km])-(rand)?(read|write)-qd(\d+)$")


def iser_workload(name):
    """(op, bytes, depth, random|sequential) of an iser-compare.sh workload name such as
    4k-randread-qd32 (None for a name of another form)."""
    m = ISER_WL.match(name)
    if not m:
        return None
    return (m.group(4), int(m.group(1)) * (1024 if m.group(2) == "k" else 1048576), int(m.group(5)),
            "random" if m.group(3) else "sequential")


def iser_order(k):
    """Initiator, then as the sweep's tables: deepest queue, op, size."""
    w = iser_workload(k[1]) or ("", 0, 0, "")
    return (k[0], -w[2], w[0], w[1], k[1])


def read_iser(d):
    """bench/iser-compare.sh's raw.tsv, rows per (initiator, workload, config)."""
    p = os.path.join(d, "iser", "raw.tsv")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    g = {}
    for r in rows:
        g.setdefault((r["initiator"], r["workload"], r["config"]), []).append(r)
    with open(os.path.join(d, "iser.csv"), "w", newline="") as f:
        w = csv.writer(f)
        cols = ["iops", "mbps", "tgtd_cpu_us_per_io", "tgtd_user_us_per_io", "tgtd_rw_syscalls_per_io",
                "wrs_per_post", "signaled_per_io", "completions_per_poll", "wakeups_per_io", "rdma_reads_per_io",
                "guest_cpu_us_per_io"]
        w.writerow(["initiator", "workload", "config", "rounds"] + cols)
        for k in sorted(g, key=iser_order):
            w.writerow(list(k) + [len(g[k])] + [fmt(med([num(r.get(c)) for r in g[k]]), 3) for c in cols])
    return g


def plot_iser(g, path):
    """As throughput.png: MB/s vs request size, stock against rbio, one plot
    per initiator and op, a line per queue depth."""
    inits = sorted({k[0] for k in g})
    wls = sorted({(k[1],) + iser_workload(k[1])[:3] for k in g if iser_workload(k[1])}, key=lambda w: (-w[3], w[1], w[2]))
    ops = [o for o in ("read", "write") if any(w[1] == o for w in wls)]
    sizes = sorted({w[2] for w in wls})
    depths = sorted({w[3] for w in wls}, reverse=True)
    fig, axes = plt.subplots(len(inits), max(1, len(ops)), figsize=(5.5 * max(1, len(ops)), 4.0 * len(inits) + 0.8),
                             squeeze=False)
    for i, ini in enumerate(inits):
        for j, op in enumerate(ops):
            ax = axes[i][j]
            for c in ("stock", "rbio"):
                for n, d in enumerate(depths):
                    pts = [(w[2], med([num(r["mbps"]) for r in g.get((ini, w[0], c), [])])) for w in wls
                           if w[1] == op and w[3] == d]
                    pts = [p for p in pts if p[1] is not None]
                    if not pts:
                        continue
                    st = dict(STYLE["stock" if c == "stock" else "all"])
                    if n:
                        st.update(ls=":", mfc="none")
                    ax.plot([p[0] for p in pts], [p[1] for p in pts],
                            label=f"{'stock tgt (rdwr, its iSER)' if c == 'stock' else 'rbio (its iSER, bs_rbio)'}, "
                                  f"{d} in flight", **st)
            xaxis(ax, sizes, f"{ini} initiator, {op}s", "MB/s (10^6 B/s)")
            ax.set_yscale("log")
    finish(fig, axes[0][0], 2, "iSER in the guest (soft-RoCE, TCG): throughput vs request size (1 round)",
           (0.1, 0.95), path, 85)


def best(run, c, base, sec="sweep"):
    """(median ratio, workload) of the largest median per-round ratio c/base."""
    out = (None, None)
    for (s, cc, op, b, d, p) in run.groups:
        if s != sec or cc != c:
            continue
        r = run.ratio(sec, c, base, op, b, d, p)[0]
        if r is not None and (out[0] is None or r > out[0]):
            out = (r, (op, b, d))
    return out


def median_gain(run, c, base):
    v = [run.ratio("sweep", c, base, op, b, d)[0] for (s, cc, op, b, d, _p) in run.groups if s == "sweep" and cc == c]
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def best_wire_fraction(run, c):
    out = (None, None)
    for (s, cc, op, b, d, _p) in run.groups:
        if s == "sweep" and cc == c and run.wire.get(b):
            f = run.m(s, c, op, b, d) / run.wire[b]
            if out[0] is None or f > out[0]:
                out = (f, (op, b, d))
    return out


def report(run, refs, pngs, iser):
    L = []
    c = run.conf
    rounds = max([int(r["round"]) for r in run.rows] or [0])
    L.append("# The seed paper's analysis, reproduced: `bench/paper.sh`\n")
    L.append(f"- Run: {c.get('started', '?')} to {c.get('finished', '(not finished)')}; "
             f"`{c.get('command', 'bench/paper.sh')}` ({c.get('options', '')})"
             + (f"; resumed {c['resumed']}" if "resumed" in c else ""))
    L.append(f"- Machine: {c.get('nproc', '?')} cores ({c.get('cpu', '?')}), kernel {c.get('kernel', '?')}, "
             f"tgt {c.get('tgt', '?')}, libiscsi {c.get('libiscsi', '?')}, rbio {c.get('rbio', '?')}; client "
             "(build/bench/iscsi-rwperf) and target on loopback, sharing those cores")
    loads = [num(r["load1"]) for r in run.ok if num(r["load1"]) is not None]
    others = [num(r["other_pct"]) for r in run.ok if num(r["other_pct"]) is not None]
    steals = [num(r["steal_pct"]) for r in run.ok if num(r["steal_pct"]) is not None]
    L.append(f"- Load average: {c.get('load_start', '?')} at the start, {c.get('load_end', '?')} at the end; "
             f"1-min load during the points: median {fmt(med(loads), 2)}, range {fmt(min(loads) if loads else None, 2)}"
             f"-{fmt(max(loads) if loads else None, 2)}; CPU used by other processes during a point: median "
             f"{fmt(med(others), 0)}% (of {int(c.get('nproc', '2')) * 100}%), stolen {fmt(med(steals), 0)}%")
    nfail = len(run.rows) - len(run.ok)
    L.append(f"- Points: {len(run.rows)} measured ({nfail} failed), {rounds} round(s); MB/s = 10^6 bytes/s; "
             "medians over rounds, [lowest-highest] where there is more than one round")
    if nfail or c.get("failed_points", "0") != "0":
        L.append("- WARNING: some points failed (ok=0 in points.csv); `--resume` measures them again")
    if med(others) is not None and med(others) > 25:
        L.append("- WARNING: other load took a large share of the cores during this run; trust ratios of "
                 "back-to-back pairs more than absolute figures")
    L.append("")

    # ---- the papers' figures beside ours
    g_all, w_all = best(run, "all", "unopt")
    m_all = median_gain(run, "all", "unopt")
    f_all, fw_all = best_wire_fraction(run, "all")
    f_stock, _ = best_wire_fraction(run, "stock")
    L.append("## The papers' figures beside ours\n")
    L.append("The seed files (`../shared/seeds/001_*.txt`, the paper; `000_*.txt`, the follow-up among other "
             "abstracts) hold the abstracts only, so the figures are the numbers their text states; there is no "
             "plot data to overlay. Their testbed: an RDMA-capable NIC, ~500 MB/s network, kernel-level protocol. "
             "Ours: iSCSI over loopback TCP, client and target on the same cores.\n")
    L.append("| | paper / follow-up | here |")
    L.append("|---|---|---|")
    L.append("| what limits remote block I/O | (a) interrupt cost, (b) request size, (c) protocol message size | "
             "see \"Which of the three limits still binds\" below |")
    L.append(f"| all techniques over the unoptimized configuration | up to +100% | up to {pct(g_all)}"
             + (f" ({wl_label(*w_all)})" if w_all else "") + f"; median over the sweep {pct(m_all)} |")
    for t in ("batching", "async-send"):
        g, w = best(run, t, "unopt")
        paper = {"batching": "follow-up: batching small requests at the network level + inline async send-path "
                             "processing together: +45% (200 -> 290 MB/s, 8-disk RAID0), +48% (320 -> 474 MB/s, ramdisk)",
                 "async-send": "(the follow-up's second technique; only their sum is stated)"}[t]
        L.append(f"| {LABEL[t]} over unoptimized | {paper} | up to {pct(g)}"
                 + (f" ({wl_label(*w)})" if w else "") + f"; median {pct(median_gain(run, t, 'unopt'))} |")
    g_st, w_st = best(run, "all", "stock")
    L.append(f"| rbio (all on) over stock tgt | - | median over the sweep {pct(median_gain(run, 'all', 'stock'))}, "
             f"up to {pct(g_st)}" + (f" ({wl_label(*w_st)})" if w_st else "") + " |")
    if f_all is not None:
        L.append(f"| best throughput vs the network | ~200 of ~500 MB/s (40%); follow-up 474 MB/s = 72% of the "
                 f"maximum | {run.m('sweep', 'all', *fw_all):.0f} MB/s = {f_all * 100:.0f}% of iperf3 at the same "
                 f"write size ({wl_label(*fw_all)}); stock tgt at best {f_stock * 100 if f_stock else 0:.0f}% |")
    L.append("")

    # ---- throughput table
    if run.sizes:
        L.append("## Throughput vs request size\n")
        L.append("![throughput vs request size](throughput.png)\n")
        L.append("MB/s per configuration (median [lowest-highest round]); wire = one loopback iperf3 stream "
                 "writing the same size; `all/wire` = rbio with everything on as a share of it.\n")
        for d in run.depths:
            L.append(f"### {d} in flight\n")
            L.append("| workload | " + " | ".join(CONFIGS) + " | wire | all/wire |")
            L.append("|---|" + "--:|" * (len(CONFIGS) + 2))
            for op in run.ops:
                for b in run.sizes:
                    cells = []
                    for cc in CONFIGS:
                        v = run.m("sweep", cc, op, b, d)
                        lo, hi = run.spread("sweep", cc, op, b, d)
                        cells.append("-" if v is None else (fmt(v) + (f" [{fmt(lo)}-{fmt(hi)}]" if rounds > 1 else "")))
                    a, wv = run.m("sweep", "all", op, b, d), run.wire.get(b)
                    fr = f"{a / wv * 100:.0f}%" if a is not None and wv else "-"
                    L.append(f"| {size_label(b)} {op} | " + " | ".join(cells) + f" | {fmt(wv)} | {fr} |")
            L.append("")

        # ---- improvement table
        L.append("## What each technique buys\n")
        L.append("![improvement over unoptimized](improvement.png)\n")
        L.append("Throughput over the unoptimized configuration (every technique off): median of the per-round "
                 "ratios of back-to-back pairs" + (", [lowest-highest round]" if rounds > 1 else "") + ".\n")
        L.append("| workload | " + " | ".join(["stock"] + TECHNIQUES) + " |")
        L.append("|---|" + "--:|" * (len(TECHNIQUES) + 1))
        for d in run.depths:
            for op in run.ops:
                for b in run.sizes:
                    cells = []
                    for cc in ["stock"] + TECHNIQUES:
                        r, lo, hi = run.ratio("sweep", cc, "unopt", op, b, d)
                        cells.append(pct(r) + (f" [{pct(lo)}, {pct(hi)}]" if r is not None and rounds > 1 else ""))
                    L.append(f"| {wl_label(op, b, d)} | " + " | ".join(cells) + " |")
        L.append("")
        L.append("| technique | best gain | at | median gain over the sweep |")
        L.append("|---|--:|---|--:|")
        for t in TECHNIQUES + ["stock"]:
            g, w = best(run, t, "unopt")
            L.append(f"| {LABEL[t]} | {pct(g)} | {wl_label(*w) if w else '-'} | {pct(median_gain(run, t, 'unopt'))} |")
        L.append("")

    # ---- events and CPU
    if refs:
        L.append("## Events and CPU per I/O\n")
        L.append("![events per I/O](events.png)\n\n![CPU per I/O](cpu.png)\n")
        L.append("Counted by `perf stat` on all of tgtd's threads and on the client during each point: system "
                 "calls, event-loop wake-ups (`epoll_wait` returns), context switches, `io_uring_enter` calls and "
                 "the io_uring I/Os they submitted; PDUs per receive/send call and the transport's own system calls "
                 "from rbio's statistics file (`-` for stock tgt, which has none). CPU in us per I/O, user + system.\n")
        for w in refs:
            L.append(f"### {wl_label(*w)}\n")
            L.append("| config | MB/s | tgtd CPU us/IO (user+sys) | client CPU us/IO (user+sys) | tgtd wake-ups/IO | "
                     "tgtd syscalls/IO | tgtd ctx sw/IO | client syscalls/IO | PDUs/recv | PDUs/send | "
                     "uring I/Os per enter | uring enters/IO |")
            L.append("|---|" + "--:|" * 11)
            for cc in CONFIGS:
                g = lambda mm: run.m("sweep", cc, *w, metric=mm)  # noqa: E731
                if g("MBps") is None:
                    continue
                L.append(f"| {cc} | {fmt(g('MBps'))} | {fmt(g('tgtd_user_us_per_io'))}+{fmt(g('tgtd_sys_us_per_io'))} | "
                         f"{fmt(g('client_user_us_per_io'))}+{fmt(g('client_sys_us_per_io'))} | "
                         f"{fmt(g('tgtd_wakeups_per_io'), 3)} | {fmt(g('tgtd_syscalls_per_io'), 2)} | "
                         f"{fmt(g('tgtd_ctxsw_per_io'), 3)} | {fmt(g('client_syscalls_per_io'), 2)} | "
                         f"{fmt(g('pdus_per_recv'), 2)} | {fmt(g('pdus_per_send'), 2)} | "
                         f"{fmt(g('uring_ios_per_enter'), 2)} | {fmt(g('tgtd_uring_enters_per_io'), 3)} |")
            L.append("")
        lu = os.path.join(run.dir, "lu-counters.txt")
        if os.path.exists(lu) and os.path.getsize(lu):
            L.append("Each rbio LU's own counters over the whole run (logged by bs_rbio when it is removed; "
                     "`lu-counters.txt`):\n")
            L.append("```")
            with open(lu) as f:
                L.extend(line.rstrip() for line in f)
            L.append("```\n")

    # ---- message size
    ks, params, cfgs = msg_keys(run)
    if ks:
        L.append("## Protocol message size\n")
        L.append("![message size](msgsize.png)\n")
        L.append("One target per parameter set (`tgtadm --op update --mode target --name N --value V`): tgt-default "
                 "= MaxRecvDataSegmentLength 8192, FirstBurstLength 65536, MaxBurstLength 262144, ImmediateData Yes, "
                 "InitialR2T Yes; mrdsl-256k = MaxRecvDataSegmentLength 262144; burst-1m = First/MaxBurstLength "
                 "1 MiB; no-immediate = ImmediateData No; large = MaxRecvDataSegmentLength 1 MiB, bursts 1 MiB, "
                 "InitialR2T No. libiscsi offers MaxRecvDataSegmentLength 262144 for Data-In. MB/s, and the ratio "
                 "to tgt-default of the same configuration.\n")
        L.append("| workload | config | " + " | ".join(params) + " |")
        L.append("|---|---|" + "--:|" * len(params))
        for (op, b, d) in ks:
            for cc in cfgs:
                cells = []
                for p in params:
                    v = run.m("msgsize", cc, op, b, d, p)
                    base = run.m("msgsize", cc, op, b, d, "tgt-default")
                    r = v / base if v is not None and base else None
                    cells.append("-" if v is None else f"{fmt(v)} ({r:.2f}x)" if r is not None else fmt(v))
                L.append(f"| {wl_label(op, b, d)} | {cc} | " + " | ".join(cells) + " |")
        L.append("")

    # ---- verdicts
    L.append("## Which of the paper's three limits still binds here\n")
    L.extend(verdicts(run, refs))
    L.append("")

    if iser:
        L.extend(iser_section(run, iser))

    L.append("## Files\n")
    L.append("`points.csv` (every point, every round, as measured; `ok=0` marks a failed one), `summary.csv` (medians, "
             "spread, ratios), " + ", ".join(f"`{p}`" for p in pngs) + ", `run.conf`, `lu-counters.txt`, "
             "`tgtd-*.log`" + (", `iser/`, `iser.csv`" if iser else "") + ". Rebuild this report with "
             "`bench/paper-report.py DIR`.")
    with open(os.path.join(run.dir, "report.md"), "w") as f:
        f.write("\n".join(L) + "\n")


def iser_section(run, iser):
    """report.md's iSER part: the guest run's facts, the table per initiator
    and workload, the instructions per command."""
    d = os.path.join(run.dir, "iser")
    L = ["## iSER in the guest (soft-RoCE, TCG)\n", "![iSER](iser.png)\n"]
    facts = []
    hdr = os.path.join(d, "header.md")
    if os.path.exists(hdr):
        facts = ["G" + x.strip().rstrip(";")[1:] + "." for x in open(hdr) if x.startswith("guest:")]
    loads = []
    log = os.path.join(d, "compare.log")
    if os.path.exists(log):
        loads = [x.rsplit(": ", 1)[1].strip() for x in open(log) if x.startswith("iser-compare: host load average")]
    L.append("`bench/iser-compare.sh --rounds 1 --bstype rdwr,rbio` (stock tgt as it ships, its own iSER driver on "
             "rdwr, against rbio's iSER transport on bs_rbio: the whole stacks; `iser/results.md` has its own "
             "tables, `iser.csv` the medians) with the kernel initiator (ib_iser, fio) and rbio's (`rbio bench "
             "--transport iser`). " + (" ".join(facts) + " " if facts else "")
             + (f"Host load average at its start and end: {loads[0]} / {loads[-1]}. " if loads else "")
             + "Under TCG every instruction is emulated, rxe's RDMA included: IOPS and CPU measure the cost per "
             "I/O of an emulated machine, not a wire; read the ratios, and only the counts as figures.\n")
    L.append("Counts marked **(hw-indep.)** do not depend on the hardware: signalled completions per I/O and RDMA "
             "READs per I/O are set by the protocol and the design (a signalled send every Nth work request, a "
             "write's data pulled in RDMA READs of a fixed size), instructions per command by the code. Work "
             "requests per post and wake-ups per I/O depend on timing (how many requests arrive together), "
             "here that of an emulated CPU and NIC. The counters are rbio's tgtd's own (its statistics file); "
             "tgt's iSER driver has none.\n")
    L.append("| initiator | workload | stock IOPS | rbio IOPS | stock MB/s | rbio MB/s | rbio/stock | "
             "tgtd CPU us/IO stock / rbio | WRs per post | signalled/IO (hw-indep.) | RDMA READs/IO (hw-indep.) | "
             "wake-ups/IO |")
    L.append("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    keys = []
    for k in sorted(iser, key=iser_order):
        if (k[0], k[1]) not in keys:
            keys.append((k[0], k[1]))
    for ini, wl in keys:
        def gi(cfg, col):
            return med([num(r.get(col)) for r in iser.get((ini, wl, cfg), [])])
        s, r = gi("stock", "iops"), gi("rbio", "iops")
        w = iser_workload(wl)
        name = f"{size_label(w[1])} {w[3]} {w[0]}, {w[2]} in flight" if w else wl
        L.append(f"| {ini} | {name} | {fmt(s, 0)} | {fmt(r, 0)} | {fmt(gi('stock', 'mbps'), 1)} | "
                 f"{fmt(gi('rbio', 'mbps'), 1)} | {fmt(r / s if r and s else None, 2)} | "
                 f"{fmt(gi('stock', 'tgtd_cpu_us_per_io'), 0)} / {fmt(gi('rbio', 'tgtd_cpu_us_per_io'), 0)} | "
                 f"{fmt(gi('rbio', 'wrs_per_post'), 2)} | {fmt(gi('rbio', 'signaled_per_io'), 3)} | "
                 f"{fmt(gi('rbio', 'rdma_reads_per_io'), 3)} | {fmt(gi('rbio', 'wakeups_per_io'), 3)} |")
    L.append("")
    ins = os.path.join(d, "instructions", "results.md")
    if os.path.exists(ins):
        # Its first table only (the per-object split); the top functions follow in results.md.
        first = []
        for x in open(ins):
            if x.startswith("|"):
                first.append(x.rstrip())
            elif first:
                break
        if first:
            L.append("tgtd's user-space instructions per SCSI command (callgrind, `bench/iser-instructions.sh`, "
                     "rbio initiator, 32 in flight; **hw-indep.**: the code's, not the machine's; "
                     "`iser/instructions/results.md` has the functions that cost most):\n")
            L.extend(first)
            L.append("")
    else:
        L.append("No instructions per command: `bench/iser-instructions.sh` did not finish "
                 "(`iser/instructions.log`).\n")
    return L


def verdicts(run, refs):
    L = []
    if not run.sizes:
        return ["Not enough points measured for a verdict."]
    dmax, dmin, bmin = max(run.depths), min(run.depths), min(run.sizes)
    g = lambda c, op, b, d, mm="MBps": run.m("sweep", c, op, b, d, metric=mm)  # noqa: E731

    # (a) interrupt cost: wake-ups and system calls per I/O, and where the CPU goes.
    op = "read" if "read" in run.ops else run.ops[0]
    wu, wa, ws = (g(c, op, bmin, dmax, "tgtd_wakeups_per_io") for c in ("unopt", "all", "stock"))
    su, sa, ss = (g(c, op, bmin, dmax, "tgtd_syscalls_per_io") for c in ("unopt", "all", "stock"))
    tcpu = [(g("all", op, bmin, dmax, m) or 0) for m in ("tgtd_user_us_per_io", "tgtd_sys_us_per_io")]
    ccpu = [(g("all", op, bmin, dmax, m) or 0) for m in ("client_user_us_per_io", "client_sys_us_per_io")]
    iops = g("all", op, bmin, dmax, "iops")
    busy = (sum(tcpu) + sum(ccpu)) * (iops or 0) / 1e4  # % of one core
    w1 = g("all", op, bmin, dmin, "tgtd_wakeups_per_io")
    text = (f"**(a) Interrupt cost** (here: event-loop wake-ups and system calls per I/O). At {wl_label(op, bmin, dmax)} "
            f"tgtd wakes {fmt(ws, 2)} times per I/O with stock tgt, {fmt(wu, 2)} with every technique off and "
            f"{fmt(wa, 3)} with all on, and makes {fmt(ss, 1)} / {fmt(su, 1)} / {fmt(sa, 2)} system calls per I/O. ")
    if wa is not None and wa < 0.5:
        text += (f"With all on one wake-up serves {1 / wa:.1f} I/Os (stock tgt: {fmt(1 / ws if ws else None, 2)}): "
                 "at depth the interrupt analog is amortised and **no longer the bound** on the target. ")
    else:
        text += "Wake-ups are still of the order of one per I/O at depth: **still binds**. "
    text += (f"What remains per I/O is CPU: tgtd {fmt(sum(tcpu))} us, the client {fmt(sum(ccpu))} us "
             f"({fmt(busy, 0)}% of one core at {fmt(iops, 0)} IOPS, on {run.conf.get('nproc', '2')} shared cores); "
             + ("the client costs more than the target, so the client binds first. " if sum(ccpu) > sum(tcpu) else
                "the target costs more than the client. "))
    if w1 is not None and dmin != dmax:
        text += (f"At {dmin} in flight every I/O still costs {fmt(w1, 2)} wake-ups on the target (one request, "
                 "one wake-up: nothing to batch), so there the interrupt analog **still binds** (latency).")
    L.append(text + "\n")

    # (b) request size: how far below the best size small requests stay.
    rw = "read" if "read" in run.ops else run.ops[0]
    curve = [(b, g("all", rw, b, dmax), g("all", rw, b, dmax, "iops")) for b in run.sizes]
    curve = [x for x in curve if x[1] is not None]
    if len(curve) > 1:
        peak = max(x[1] for x in curve)
        (b0, m0, i0), (b1, _, i1) = curve[0], curve[1]
        near = next(b for b, m, _ in curve if m >= 0.9 * peak)
        text = (f"**(b) Request size.** rbio with all on, {rw}s at {dmax} in flight: "
                + ", ".join(f"{size_label(b)} {fmt(m)} MB/s" for b, m, _ in curve)
                + " (one loopback iperf3 stream: " + ", ".join(f"{size_label(b)} {fmt(run.wire.get(b))}"
                                                               for b, _, _ in curve if run.wire.get(b)) + "). "
                f"{size_label(b0)} requests get {m0 / peak * 100:.0f}% of the best size's throughput; from "
                f"{size_label(b0)} to {size_label(b1)} IOPS go from {fmt(i0, 0)} to {fmt(i1, 0)} "
                f"({i1 / i0:.2f}x for {b1 // b0}x the bytes)"
                + (": a fixed cost per request, not the bytes, sets the pace of small requests. "
                   if i1 / i0 > 2 * b0 / b1 else ": the bytes, more than a cost per request, set the pace. ")
                + f"Throughput comes within 10% of its peak only from {size_label(near)} on: "
                + ("**still binds** below that." if near > b0 else "**does not bind** at these sizes."))
        L.append(text + "\n")

    # (c) protocol message size: the login-parameter sets against tgt's defaults.
    ks, params, cfgs = msg_keys(run)
    if not ks:
        L.append("**(c) Protocol message size:** not measured in this run.")
        return L
    parts = []
    binds = False
    for (op, b, d) in ks:
        for cc in cfgs:
            base = run.m("msgsize", cc, op, b, d, "tgt-default")
            if not base:
                continue
            bestp, bestr = None, None
            for p in params:
                v = run.m("msgsize", cc, op, b, d, p)
                if p != "tgt-default" and v is not None and (bestr is None or v / base > bestr):
                    bestp, bestr = p, v / base
            if bestr is None:
                continue
            spreads = [run.spread("msgsize", cc, op, b, d, p) for p in ("tgt-default", bestp)]
            noise = max(((hi - lo) / base for lo, hi in spreads if lo is not None), default=0)
            big = bestr > 1.1 and bestr - 1 > noise
            binds |= big and cc == "all"
            parts.append(f"{cc}, {wl_label(op, b, d)}: {bestp} {bestr:.2f}x"
                         + (" (beyond the rounds' spread)" if big else " (within noise)" if noise else ""))
    if parts:
        L.append("**(c) Protocol message size** (best parameter set against tgt's defaults, login parameters set on "
                 "the target): " + "; ".join(parts) + ". "
                 + ("With tgt's defaults (MaxRecvDataSegmentLength 8 KiB) a large write is cut into many Data-Out "
                    "PDUs and R2T round trips: **still binds** for rbio too, unless the admin raises the target's "
                    "parameters (tgtadm or targets.conf); rbio does not change what tgt negotiates." if binds else
                    "For rbio, raising the message-size parameters changes little: **does not bind** at these sizes "
                    "(stock tgt's gain, where larger, is its per-PDU cost)."))
    return L


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: paper-report.py DIR")
    run = Run(sys.argv[1])
    write_summary(run)
    pngs = []
    refs = reference_workloads(run)
    if run.sizes:
        plot_throughput(run, os.path.join(run.dir, "throughput.png"))
        plot_improvement(run, os.path.join(run.dir, "improvement.png"))
        pngs += ["throughput.png", "improvement.png"]
    if refs:
        plot_events(run, refs, os.path.join(run.dir, "events.png"))
        plot_cpu(run, refs, os.path.join(run.dir, "cpu.png"))
        pngs += ["events.png", "cpu.png"]
    if msg_keys(run)[0]:
        plot_msgsize(run, os.path.join(run.dir, "msgsize.png"))
        pngs.append("msgsize.png")
    iser = read_iser(run.dir)
    if iser:
        plot_iser(iser, os.path.join(run.dir, "iser.png"))
        pngs.append("iser.png")
    report(run, refs, pngs, iser)


if __name__ == "__main__":
    main()
