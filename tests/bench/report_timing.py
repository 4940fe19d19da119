#!/usr/bin/env python3
"""Times a kprof report page in headless Chromium: seconds from navigation
until it is drawn (heat maps and flame graph), then the flame graph of a
range over the middle tenth of the heat map, then the whole recording's
again (filters applied). Prints the three on one line, then the number
of tree nodes, of entries per source, and the rows a second.

Usage: report_timing.py REPORT_HTML"""
import os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from cdp import Browser  # noqa: E402

with Browser(width=1400, height=1000, timeout=120) as b:
    p = b.page
    t0 = time.monotonic()
    p.goto("file://" + os.path.abspath(sys.argv[1]), timeout=600)
    p.wait_for("document.body.dataset.ready === '1'", timeout=600, interval=0.02)
    load = time.monotonic() - t0
    rng = p.eval("""(() => { const s = source(), n = s.columns * s.rows, t = performance.now();
        state.ranges = [[Math.floor(n * 0.45), Math.floor(n * 0.55)]]; drawFlame();
        return (performance.now() - t) / 1000; })()""", timeout=600)
    whole = p.eval("""(() => { const t = performance.now(); state.ranges = []; refresh();
        return (performance.now() - t) / 1000; })()""", timeout=600)
    if p.errors:
        sys.exit("report_timing: script errors: %s" % p.errors)
    shape = p.eval("[state.model.nNodes, state.model.recordings[0].sources.map((s) => s.node.length).join('+'), source().rows]")
    print("%.1f %.2f %.2f %d %s %d" % (load, rng, whole, *shape))
