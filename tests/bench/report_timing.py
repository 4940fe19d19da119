#!/usr/bin/env python3
"""Times a kprof report page in headless Chromium: seconds from navigation
until it is drawn (heat maps and flame graph), then the flame graph of a
range over the middle tenth of the heat map, then the whole recording's
again (filters applied), then the whole recording filtered on one process,
then with a tower per process. Prints the five on one line, then the
number of tree nodes and processes, the entries of the first source's two
sets (paths+processes) and their slices in ms (paths/processes).

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
    rng = p.eval("""(() => { const s = source(), n = s.columns * s.heatRows, t = performance.now();
        state.ranges = [[Math.floor(n * 0.45), Math.floor(n * 0.55)]]; drawFlame();
        return (performance.now() - t) / 1000; })()""", timeout=600)
    whole = p.eval("""(() => { const t = performance.now(); state.ranges = []; refresh();
        return (performance.now() - t) / 1000; })()""", timeout=600)
    one = p.eval("""(() => { const t = performance.now(); state.process = new RegExp('^' + state.model.pidText(0)
        .replace(/[.]/g, '[.]') + '$'); refresh(); return (performance.now() - t) / 1000; })()""", timeout=600)
    towers = p.eval("""(() => { const t = performance.now(); state.process = null; state.group = 'process';
        refresh(); return (performance.now() - t) / 1000; })()""", timeout=600)
    if p.errors:
        sys.exit("report_timing: script errors: %s" % p.errors)
    shape = p.eval("""[state.model.nNodes, state.model.nProcesses, (() => { const s = source();
        return s.paths.node.length + '+' + s.processes.node.length + ' ' + s.paths.sliceCells * 1000 / s.heatRows + '/'
          + s.processes.sliceCells * 1000 / s.heatRows; })()]""")
    print("%.1f %.2f %.2f %.2f %.2f %d %d %s" % (load, rng, whole, one, towers, *shape))
