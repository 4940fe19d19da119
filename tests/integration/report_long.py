#!/usr/bin/env python3
"""A recording longer than the heat map's budget (2^17 rows of 20 ms: 43.7
minutes), written here in kprof record's segment format, reported by kprof
and driven in Debian's headless Chromium: its heat map has 10 rows a second
(100 ms), each cell holds the samples of its 100 ms, and a range dragged on
one cell gives the flame graph of just those samples, also when compared
with the same seconds of a short recording (rows of 100 ms from its
10 Hz; report_check.py compares rows of different lengths).

Every second of 46 minutes holds ticks of one process at 10 Hz, as kprof
record samples by default (a row of 100 ms is also what the data asks
for): at 50, 150, ... 950 ms in cold:idle/0 but at 350 ms, where it is
in hot:busy/0, with one more sample at 360 ms.

Usage: report_long.py KPROF WORK_DIR"""
import gzip, os, re, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from cdp import Browser  # noqa: E402
from report_page import cell_point, drag_cells, heat_geometry  # noqa: E402

kprof, work = sys.argv[1:3]
SECONDS = 46 * 60
T0 = 5000000000  # the segments' clock, microseconds
SAMPLES = sorted([(k * 100000 + 50000, "cold:idle/0") for k in range(10) if k != 3]
                 + [(350000, "hot:busy/0"), (360000, "hot:busy/0")])
failures = []


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)


def write_recording(rec, seconds):
    os.makedirs(rec, exist_ok=True)
    for minute in range(seconds // 60):
        write_minute(rec, minute)


def write_minute(rec, minute):
    with gzip.open(os.path.join(rec, "samples-%06d.perf.gz" % (minute + 1)), "wt") as f:
        f.write("# kprof sampling of long@host\n# clock: CLOCK_MONOTONIC microseconds; "
                "5000000000 = 1795000000 seconds since the epoch (UTC)\n")
        for s in range(minute * 60, minute * 60 + 60):
            for off, fn in SAMPLES:
                t = T0 + s * 1000000 + off
                f.write("beam.smp 4242/80 [000] %d.%06d: 1 cpu-clock:\tmetric_reductions: %d, 10\t"
                        "metric_message_queue_len: 0, 0\tmetric_memory: 3000, 0\t"
                        "metric_bin_vheap_size: 0, 0\n" % (t // 1000000, t % 1000000, s * 40))
                f.write("\t2 %s (app.beam)\n\t1 worker (registered)\n\t0 <0.80.0> (process)\n"
                        "\t0 %s (status)\n\n" % (fn, "running" if fn.startswith("hot") else "waiting"))
rec, short = os.path.join(work, "rec-long"), os.path.join(work, "rec-short")
write_recording(rec, SECONDS)
write_recording(short, 120)
page_path, compared = os.path.join(work, "long.html"), os.path.join(work, "long-compared.html")
subprocess.run([kprof, "report", "-q", rec, "-o", page_path], check=True)
subprocess.run([kprof, "report", "-q", short, rec, "-o", compared], check=True)

with Browser(width=1400, height=1000) as browser:
    page = browser.page
    page.goto("file://" + os.path.abspath(page_path))
    page.wait_for("document.body.dataset.ready === '1'", timeout=60)
    rows = page.eval("state.model.recordings[0].sources[0].heatRows")
    cols = page.eval("state.model.recordings[0].sources[0].columns")
    check(rows == 10 and cols == SECONDS, f"46 minutes: heat map of {cols} columns of {rows} rows (100 ms)")

    def at_column(col):
        """The map's geometry with second `col` scrolled into its view."""
        g = heat_geometry(page, "heatmap-samples-samples")
        page.eval("(() => { const c = document.getElementById('heatmap-samples-samples');"
                  f" c.parentElement.scrollLeft = Math.max(0, {col} * {g['cw']} - 100); }})()")
        g["x"] = page.eval("document.getElementById('heatmap-samples-samples').getBoundingClientRect().left")
        return g

    want = {0: 1, 3: 2, 5: 1, 9: 1}  # samples per row of any second
    bad = []
    for col in (0, 7, 1500, SECONDS - 1):
        g = at_column(col)
        for row, n in want.items():
            x, y = cell_point(g, col * rows + row)
            page.mouse_move(x, y)
            text = page.eval("document.getElementById('tooltip').textContent")
            m = re.search(r": ([\d,.]+) ", text)
            if not m or float(m.group(1)) != n:
                bad.append(f"second {col} row {row}: {text!r}, want {n}")
    check(not bad, f"heat map cells hold their 100 ms of samples {bad[:3]}")

    cell = 1200 * rows + 3  # second 1200, 300-400 ms
    g = at_column(1200)
    drag_cells(page, g, cell, cell)
    total = float(page.eval("document.getElementById('flame-info').dataset.total"))
    names = page.eval("state.boxes.map((b) => b.name)")
    check(total == 2 and any("hot:busy/0" in n for n in names) and not any("cold:idle" in n for n in names),
          f"a range of one cell: flame root {total}, the hot function alone: {names[:6]}")
    check(not page.errors, f"no script errors: {page.errors}")

    # the long recording (B) compared with a short one (A): a
    # cell dragged on B is compared with the same 100 ms of A
    page.goto("file://" + os.path.abspath(compared))
    page.wait_for("document.body.dataset.ready === '1'", timeout=60)
    page.eval("const s = document.getElementById('recording'); s.value = '-1'; s.dispatchEvent(new Event('change'))")
    g = at_column(30)
    drag_cells(page, g, 30 * rows + 3, 30 * rows + 3)
    total = float(page.eval("document.getElementById('flame-info').dataset.total"))
    base = float(page.eval("document.getElementById('flame-info').dataset.baseTotal"))
    check(total == 2 and base == 2, f"B's cell (100 ms) against A's same seconds: {total} against {base}")
    check(not page.errors, f"no script errors: {page.errors}")

if failures:
    sys.exit(f"report_long: {len(failures)} checks failed")
