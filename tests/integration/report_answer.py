#!/usr/bin/env python3
"""The page a recording with native CPU samples opens on, and a 10 Hz
recording's heat map, in Debian's headless Chromium at 1400x1000. The
recording is written here in kprof record's segment format: cooperative
samples at --rate's default, 10 ticks a second of three processes, each
tick jittered by up to a tenth of the interval as the agent does; native
CPU samples whose stacks carry a state frame under their thread kind
(beam.smp;THREAD_KIND;STATE;[<pid>;]code, kp/cpu_state.h):

    scheduler  busy_wait 620, emulator 300 (of <0.80.0>), gc 80
    dirty_cpu  gc 200 (of <0.81.0>)

Checked: the first screen (a screenshot, and the elements' boxes within
its 1000 px) holds the CPU-by-state table and the native CPU flame graph;
the table's shares are the segments'; "scheduler: 62% busy_wait"; the top
functions and processes; a click on a state filters the flame graph and
the native CPU heat map on it; the cooperative heat map has 10 rows a
second and none of them empty.

Usage: report_answer.py KPROF WORK_DIR SHOT_DIR"""
import gzip, os, random, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from cdp import Browser  # noqa: E402

kprof, work, shots = sys.argv[1:4]
SECONDS = 8
T0 = 7000000000  # the segments' clock, microseconds
HEADER = "# clock: CLOCK_MONOTONIC microseconds; 7000000000 = 1795000000 seconds since the epoch (UTC)\n"
CPU = [  # (thread kind, state, pid or None, code root first, samples)
    ("scheduler", "busy_wait", None, ["[vm]erts_schedule", "[vm]sched_yield"], 620),
    ("scheduler", "emulator", "<0.80.0>", ["app:loop/1", "app:crunch/2"], 300),
    ("scheduler", "gc", None, ["[vm]erts_garbage_collect_nobump"], 80),
    ("dirty_cpu", "gc", "<0.81.0>", ["[vm]erts_garbage_collect_nobump", "[vm]sweep"], 200),
]
failures = []


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)


def write_recording(rec):
    os.makedirs(rec, exist_ok=True)
    rnd = random.Random(7)
    with gzip.open(os.path.join(rec, "samples-000001.perf.gz"), "wt") as f:
        f.write("# kprof sampling of answer@host\n" + HEADER)
        for tick in range(SECONDS * 10):
            t = T0 + tick * 100000 + 50000 + rnd.randint(-10000, 10000)
            for p in range(3):
                f.write("beam.smp 4242/%d [000] %d.%06d: 1 cpu-clock:\tmetric_reductions: 100, 10\n"
                        % (80 + p, t // 1000000, t % 1000000))
                f.write("\t2 app:loop/1 (app.beam)\n\t1 worker%d (registered)\n\t0 <0.%d.0> (process)\n"
                        "\t0 %s (status)\n\n" % (p, 80 + p, "running" if p == 0 else "waiting"))
    samples = [(kind, st, pid, code) for kind, st, pid, code, n in CPU for _ in range(n)]
    rnd.shuffle(samples)
    step = SECONDS * 1000000 // len(samples)
    with gzip.open(os.path.join(rec, "cpu-000001.perf.gz"), "wt") as f:
        f.write("# kprof native CPU sampling of answer@host: every thread of beam.smp, 997 Hz\n" + HEADER)
        for i, (kind, st, pid, code) in enumerate(samples):
            t = T0 + i * step
            f.write("beam.smp 4242/4250 [000] %d.%06d: 1003009 cpu-clock:\n" % (t // 1000000, t % 1000000))
            for fr in reversed(code):
                f.write("\t1 %s (native)\n" % fr)
            if pid:
                f.write("\t1 %s (process)\n" % pid)
            f.write("\t0 %s (state)\n\t0 %s (thread)\n\n" % (st, kind))


rec = os.path.join(work, "rec-answer")
write_recording(rec)
page_path = os.path.join(work, "answer.html")
subprocess.run([kprof, "report", "-q", rec, "-o", page_path], check=True)

with Browser(width=1400, height=1000) as browser:
    page = browser.page
    page.goto("file://" + os.path.abspath(page_path))
    page.wait_for("document.body.dataset.ready === '1'", timeout=60)
    page.screenshot(os.path.join(shots, "report-answer.png"))
    # the first screen: the elements' boxes, in the page at scroll 0
    boxes = page.eval("""(() => Object.fromEntries(['cpu-states', 'cpu-answer', 'top-functions', 'top-processes',
        'flame-title', 'flame'].map((id) => { const r = document.getElementById(id).getBoundingClientRect();
        return [id, [r.top + scrollY, r.bottom + scrollY, r.width, r.height]]; })))()""")
    off = {k: v for k, v in boxes.items() if not (v[2] > 0 and v[3] > 0 and v[0] >= 0 and v[1] <= 1000)}
    check(not off, f"the state table, the top functions and processes and the native CPU flame graph are on the first screen (1000 px): {off or boxes}")
    heat_top = page.eval("document.getElementById('heatmaps').getBoundingClientRect().top + scrollY")
    check(heat_top > boxes["flame"][1], f"the heat maps follow the flame graph: at {heat_top} px")
    title = page.eval("document.getElementById('flame-title').textContent")
    check("native CPU" in title, f"the flame graph is of the native CPU samples: {title!r}")
    answer = page.eval("document.getElementById('cpu-answer').textContent")
    check("scheduler: 62% busy_wait" in answer and "dirty_cpu: 100% gc" in answer, f"the answer: {answer!r}")
    table = page.eval("[...document.querySelectorAll('#cpu-states tr')].map((r) => [...r.cells].map((c) => c.textContent))")
    want = [["thread kind", "of all", "emulator", "gc", "busy_wait"],
            ["scheduler", "83.33%", "30.00%", "8.00%", "62.00%"],
            ["dirty_cpu", "16.67%", "", "100.00%", ""]]
    check(table == want, f"CPU by state per thread kind: {table}")
    funcs = page.eval("[...document.querySelectorAll('#top-functions tr')].map((r) => r.cells[0].textContent)")
    check(funcs[:2] == ["[vm]sched_yield", "app:crunch/2"], f"top functions: {funcs[:4]}")
    procs = page.eval("[...document.querySelectorAll('#top-processes tr')].map((r) => [...r.cells].map((c) => c.textContent))")
    check(len(procs) == 2 and procs[0][0].startswith("<0.80.0>") and "emulator" in procs[0][2]
          and procs[1][0].startswith("<0.81.0>") and "gc" in procs[1][2], f"top processes: {procs}")

    # a click on a state: the flame graph and the native CPU heat map of it alone
    page.eval("[...document.querySelectorAll('#cpu-states th')].find((c) => c.textContent === 'gc').click()")
    total = float(page.eval("document.getElementById('flame-info').dataset.total"))
    checked = page.eval("[...document.querySelectorAll('#status-filter input')].filter((c) => c.checked).map((c) => c.name)")
    heat = page.eval("""(() => { const m = state.model, src = state.model.recordings[0].sources.find((s) => s.kind === 'cpu');
        return m.heat(src, 0, state.filter).cells.reduce((a, b) => a + b, 0); })()""")
    check(total == 280 and checked == ["gc"] and heat == 280,
          f"filtered on gc: flame root {total}, heat map {heat}, boxes {checked} (want 280)")
    page.eval("document.getElementById('clear').click()")

    # the cooperative heat map: 10 rows a second, none empty
    rows = page.eval("state.model.recordings[0].sources.find((s) => s.kind === 'samples').heatRows")
    empty = page.eval("""(() => { const m = state.model, src = m.recordings[0].sources.find((s) => s.kind === 'samples');
        const c = m.heat(src, 0, {nodes: null, procs: null}).cells; let a = 0, b = c.length;
        while (a < b && !c[a]) a++; while (b > a && !c[b - 1]) b--;
        let n = 0; for (let i = a; i < b; i++) n += c[i] ? 0 : 1; return n; })()""")
    title = page.eval("document.getElementById('heatmap-samples-samples').parentElement.previousSibling.textContent")
    check(rows == 10 and empty == 0 and "10 rows a second" in title,
          f"10 Hz samples: heat map of {rows} rows a second, {empty} empty: {title!r}")
    page.eval("document.getElementById('heatmap-samples-samples').scrollIntoView()")
    page.screenshot(os.path.join(shots, "report-10hz.png"))
    check(not page.errors, f"no script errors: {page.errors}")

if failures:
    sys.exit(f"report_answer: {len(failures)} checks failed")
