#!/usr/bin/env python3
"""Drives kprof's HTML report in Debian's headless Chromium, as a user would,
and checks what it shows against the recording's segments, parsed here on
their own (not with kprof's reader):
- the heat map cells (hovered: their tooltips) hold the samples of their
  20 ms of the segments;
- a range dragged on the heat map gives a flame graph whose root weighs the
  samples of that range, the same with a tower per process or per name,
  and reversed (callers under the functions where the weight is spent);
- the status filter and the process filter leave exactly their samples;
- the search gives the share of the range's samples under the function,
  and lights up the heat map cells that hold it;
- a second range (Shift+drag) is compared with the first;
- the page opens on the native CPU samples: the CPU-by-state table and
  their flame graph on the first screen (1400x1000, the elements' boxes
  within its 1000 px, and a screenshot);
- the native CPU heat map holds the cpu segments' samples;
- the comparison of two recordings draws the hot function red when B spends
  a larger share in it, and compares a range dragged on B with the same
  seconds of A;
- no script error, and screenshots as artifacts.

Usage: report_check.py REPORT_A_HTML DIR_A COMPARED_HTML DIR_B HOT_PID HOT_FUNCTION SHOT_DIR
"""
import glob, gzip, json, os, re, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from cdp import Browser  # noqa: E402
from report_page import cell_point, drag_cells, heat_geometry  # noqa: E402

report_a, dir_a, compared, dir_b, hot_pid, hot_fn, shots = sys.argv[1:8]
failures = []


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)


def segments(directory, prefix):
    """Samples of the segments PREFIX-*.perf.gz: (time_us, frames root first)."""
    out = []
    for path in sorted(glob.glob(os.path.join(directory, prefix + "-*.perf*"))):
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
            t, frames = None, []
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("#"):
                    continue
                if not line:
                    if t is not None:
                        out.append((t, list(reversed(frames))))
                    t, frames = None, []
                elif line[0] in " \t":
                    frames.append(line.split(None, 1)[1].rsplit(" (", 1)[0])
                else:
                    m = re.search(r"\s(\d+)\.(\d{6}):\s", line)
                    t = int(m.group(1)) * 1000000 + int(m.group(2))
    return out


def cells(samples, rows):
    """Column-major cell index of each sample: (second - first second) * rows + row."""
    first = min(t for t, _ in samples) // 1000000
    return [((t // 1000000 - first) * rows + (t % 1000000) * rows // 1000000, fr) for t, fr in samples]


def hover_value(page, g, cell):
    x, y = cell_point(g, cell)
    page.mouse_move(x, y)
    text = page.eval("document.getElementById('tooltip').textContent")
    m = re.search(r": ([\d,.]+) ", text)
    return float(m.group(1).replace(",", "")) if m else None, text


def total(page):
    return float(page.eval("document.getElementById('flame-info').dataset.total"))


coop = segments(dir_a, "samples")
cpu = segments(dir_a, "cpu")
with Browser(width=1400, height=1000) as browser:
    page = browser.page
    page.goto("file://" + os.path.abspath(report_a))
    page.wait_for("document.body.dataset.ready === '1'", timeout=60)
    # 0. the first screen: the answer and the native CPU flame graph (its
    # top rows: a real node's stacks may run deeper than the screen)
    page.screenshot(os.path.join(shots, "report-first-screen.png"))
    boxes = page.eval("""(() => Object.fromEntries(['cpu-states', 'flame-title', 'flame'].map((id) => {
        const r = document.getElementById(id).getBoundingClientRect(); return [id, [r.top + scrollY, r.bottom + scrollY, r.height]]; })))()""")
    check(boxes["cpu-states"][2] > 0 and boxes["cpu-states"][1] <= 1000 and boxes["flame-title"][1] <= 1000
          and boxes["flame"][0] + 160 <= 1000,
          f"the first screen (1000 px) holds the CPU-by-state table and the native CPU flame graph's top ten rows: {boxes}")
    title = page.eval("document.getElementById('flame-title').textContent")
    check("native CPU" in title, f"the page opens on the native CPU samples' flame graph: {title!r}")
    rows = page.eval("state.model.recordings[0].sources[0].heatRows")
    placed = cells(coop, rows)
    per_cell = {}
    for cell, _ in placed:
        per_cell[cell] = per_cell.get(cell, 0) + 1

    # 1. heat map cells: the fullest, an empty one, and a spread of others
    g = heat_geometry(page, "heatmap-samples-samples")
    n_cells = g["columns"] * rows
    probe = sorted(per_cell, key=lambda c: -per_cell[c])[:1] + list(range(0, n_cells, max(1, n_cells // 12)))
    bad = []
    for cell in probe:
        got, text = hover_value(page, g, cell)
        if got != per_cell.get(cell, 0):
            bad.append(f"cell {cell}: page {text!r}, segments {per_cell.get(cell, 0)}")
    check(not bad, f"{len(probe)} heat map cells hold the segments' samples {bad[:3]}")

    # 2. a range dragged over the heat map: the flame graph's root weighs it
    a, b = n_cells // 5, n_cells // 2
    drag_cells(page, g, a, b)
    want = sum(1 for c, _ in placed if a <= c <= b)
    check(total(page) == want, f"range of cells {a}-{b}: flame root {total(page)}, segments {want}")
    info = page.eval("document.getElementById('flame-info').textContent")
    check(f"{want:,}" in info, f"the range's weight is shown: {info!r}")
    page.screenshot(os.path.join(shots, "report-range.png"))

    # 2b. the same range with a tower per process, then per name: the same
    # weight, the hot process's tower under its pid and name; the process
    # table's rows split by status
    for group in ("process", "name"):
        page.eval(f"(() => {{ const g = document.getElementById('group'); g.value = '{group}'; g.dispatchEvent(new Event('change')); }})()")
        towers = page.eval("state.boxes.filter((b) => b.y === 48).map((b) => b.name)")
        hot = any(t.startswith(hot_pid) for t in towers) if group == "process" else len(towers) > 0
        check(total(page) == want and hot, f"towers by {group}: flame root {total(page)}, segments {want}; {towers[:4]}")
    page.eval("(() => { const g = document.getElementById('group'); g.value = ''; g.dispatchEvent(new Event('change')); })()")
    # the reversed view: the same weight, the functions where it is spent
    # on top (the hot function among them), their callers under them
    page.eval("(() => { const r = document.getElementById('reverse'); r.checked = true; r.dispatchEvent(new Event('change')); })()")
    leaves = page.eval("state.boxes.filter((b) => b.y === 16).map((b) => b.name)")
    check(total(page) == want and any(hot_fn in x for x in leaves), f"reversed: flame root {total(page)}, segments {want}; on top {leaves[:4]}")
    page.eval("(() => { const r = document.getElementById('reverse'); r.checked = false; r.dispatchEvent(new Event('change')); })()")
    split = page.eval("[...document.querySelectorAll('#processes tbody tr')].map((r) => r.cells[4].textContent)")
    check(split and all(re.search(r"(running|waiting|runnable|garbage_collecting|exiting|suspended)[^\d]*[\d.]+%", t) for t in split),
          f"the process table splits each process by status: {split[:3]}")

    # 3. status filter: without the waiting samples
    page.eval("[...document.querySelectorAll('#status-filter input')].find((c) => c.name === 'waiting').scrollIntoView()")
    r = page.rect("#status-filter input[name=waiting]")
    page.click(r["x"] + r["width"] / 2, r["y"] + r["height"] / 2)
    want = sum(1 for c, fr in placed if a <= c <= b and fr[0] != "waiting")
    check(total(page) == want, f"without waiting: flame root {total(page)}, segments {want}")

    # 4. process filter: the hot process alone (still without waiting)
    r = page.rect("#process-filter")
    page.click(r["x"] + 5, r["y"] + r["height"] / 2)
    page.type_text(hot_pid)
    want = sum(1 for c, fr in placed if a <= c <= b and fr[0] != "waiting" and hot_pid in fr)
    check(want > 0 and total(page) == want, f"process {hot_pid}: flame root {total(page)}, segments {want}")
    page.screenshot(os.path.join(shots, "report-filtered.png"))

    # 5. search: the share of the range's samples under the hot function
    page.eval("document.getElementById('process-filter').value = ''; document.getElementById('process-filter').dispatchEvent(new Event('input'))")
    r = page.rect("#status-filter input[name=waiting]")
    page.click(r["x"] + r["width"] / 2, r["y"] + r["height"] / 2)
    r = page.rect("#search")
    page.click(r["x"] + 5, r["y"] + r["height"] / 2)
    page.type_text(hot_fn)
    in_range = [fr for c, fr in placed if a <= c <= b]
    share = 100 * sum(1 for fr in in_range if any(hot_fn in f for f in fr)) / len(in_range)
    shown = page.eval("document.getElementById('search-result').textContent")
    m = re.search(r"([\d.]+)%", shown)
    check(m and abs(float(m.group(1)) - share) < 0.01, f"search {hot_fn}: page {shown!r}, segments {share:.2f}%")
    # ... and lights up the heat map cells holding it: those of its samples
    # (in their paths: the frames but the pid and the process's name)
    lit = int(page.eval("document.getElementById('heatmap-samples-samples').dataset.searchCells"))
    want = len({c for c, fr in placed if any(hot_fn in f for f in fr[:1] + fr[3:])})
    check(lit == want > 0, f"search {hot_fn}: {lit} heat map cells lit, {want} hold it in the segments")

    # 6. a second range, compared with the first
    g = heat_geometry(page, "heatmap-samples-samples")
    c2a, c2b = n_cells * 3 // 5, n_cells - 1
    drag_cells(page, g, c2a, c2b, modifiers=8)
    first = sum(1 for c, _ in placed if a <= c <= b)
    second = sum(1 for c, _ in placed if c2a <= c <= c2b)
    base = float(page.eval("document.getElementById('flame-info').dataset.baseTotal"))
    info = page.eval("document.getElementById('flame-info').textContent")
    check(total(page) == second and base == first and "compared with" in info,
          f"second range: {total(page)} vs {second}, compared with {base} vs {first}: {info!r}")
    page.screenshot(os.path.join(shots, "report-diff-ranges.png"))

    # 7. the native CPU heat map holds the cpu segments' samples
    if cpu:
        page.eval("document.getElementById('clear').click()")
        crows = page.eval("state.model.recordings[0].sources[1].heatRows")
        cpu_cells = {}
        for cell, _ in cells(cpu, crows):
            cpu_cells[cell] = cpu_cells.get(cell, 0) + 1
        g = heat_geometry(page, "heatmap-cpu-cpu_samples")
        busiest = sorted(cpu_cells, key=lambda c: -cpu_cells[c])[:3]
        bad = []
        for cell in busiest + [1, g["columns"] * crows // 2]:
            got, text = hover_value(page, g, cell)
            if got != cpu_cells.get(cell, 0):
                bad.append(f"cell {cell}: page {text!r}, segments {cpu_cells.get(cell, 0)}")
        check(not bad, f"native CPU heat map cells hold the cpu segments' samples {bad[:3]}")
        # a range dragged on the CPU heat map while a status filter is set on
        # the cooperative samples: the flame graph switches to the CPU samples,
        # unfiltered (thread kinds are other frames)
        page.eval("document.getElementById('status-filter').scrollIntoView()")
        r = page.rect("#status-filter input[name=waiting]")
        page.click(r["x"] + r["width"] / 2, r["y"] + r["height"] / 2)
        g = heat_geometry(page, "heatmap-cpu-cpu_samples")
        n = g["columns"] * crows
        drag_cells(page, g, n // 4, n * 3 // 4)
        want = sum(1 for c, _ in cells(cpu, crows) if n // 4 <= c <= n * 3 // 4)
        check(want > 0 and total(page) == want,
              f"a CPU range after a status filter: flame root {total(page)}, cpu segments {want}")
    else:
        check(False, "the recording has native CPU samples")
    check(not page.errors, f"no script errors: {page.errors}")

    # 8. two recordings: B (more hot processes) compared with A
    page.goto("file://" + os.path.abspath(compared))
    page.wait_for("document.body.dataset.ready === '1'", timeout=60)
    page.eval("const s = document.getElementById('recording'); s.value = '-1'; s.dispatchEvent(new Event('change'))")
    # it opens on the native CPU samples; the cooperative ones compared here
    page.eval("const c = document.getElementById('source'); c.value = '0'; c.dispatchEvent(new Event('change'))")
    coop_b = segments(dir_b, "samples")
    # B was recorded at 10 Hz: its heat map's rows are a tick's (or two)
    rows_b = page.eval("state.model.recordings[1].sources[0].heatRows")
    per_cell_b = {}
    for cell, _ in cells(coop_b, rows_b):
        per_cell_b[cell] = per_cell_b.get(cell, 0) + 1
    span = range(min(per_cell_b), max(per_cell_b) + 1)
    empty_b = sum(1 for c in span if c not in per_cell_b)
    check(rows_b in (10, 5) and empty_b <= len(span) // 100,
          f"B at --rate 10: {rows_b} heat map rows a second, {empty_b} of {len(span)} empty")
    base, shown = float(page.eval("document.getElementById('flame-info').dataset.baseTotal")), total(page)
    check(base == len(coop) and shown == len(coop_b),
          f"B compared with A: {shown} (B: {len(coop_b)}) against {base} (A: {len(coop)})")
    share_a = sum(1 for _, fr in coop if any(hot_fn in f for f in fr)) / len(coop)
    share_b = sum(1 for _, fr in coop_b if any(hot_fn in f for f in fr)) / len(coop_b)
    page.eval("document.getElementById('flame').scrollIntoView()")
    colour = page.eval(f"""(() => {{ const b = state.boxes.find((x) => x.name.includes('{hot_fn}') && x.w > 2);
        if (!b) return null; const cv = document.getElementById('flame');
        const d = cv.getContext('2d').getImageData((b.x + 1) * devicePixelRatio, (b.y + 8) * devicePixelRatio, 1, 1).data;
        return [d[0], d[1], d[2]]; }})()""")
    redder = colour is not None and colour[0] > colour[2] + 40
    check(share_b > share_a and redder,
          f"{hot_fn}: share {share_a:.1%} in A, {share_b:.1%} in B, drawn {colour} (red: larger in B)")
    page.screenshot(os.path.join(shots, "report-compared.png"))
    # a range dragged on B's heat map: compared with the same seconds of A
    g = heat_geometry(page, "heatmap-samples-samples")
    n_b = g["columns"] * g["rows"]
    ra, rb = n_b // 4, n_b // 2
    drag_cells(page, g, ra, rb)
    in_b = sum(1 for c, _ in cells(coop_b, g["rows"]) if ra <= c <= rb)
    # A's same seconds: the cells of A's rows that overlap the range (A's
    # rows a second depend on how regularly it was sampled: 50, or fewer on
    # a loaded host), widened to whole slices of A's paths (several rows
    # when the recording outgrows its budget), as the page says
    rows_a, sc_a, first_a = page.eval("(() => { const s = state.model.recordings[0].sources[0]; "
                                      "return [s.heatRows, s.paths.sliceCells, s.firstSecond]; })()")
    base_a = first_a * rows_a
    lo = (ra * rows_a // g["rows"] + base_a) // sc_a * sc_a - base_a
    hi = -(-(-(-(rb + 1) * rows_a // g["rows"]) + base_a) // sc_a) * sc_a - base_a
    in_a = sum(1 for c, _ in cells(coop, rows_a) if lo <= c < hi)
    base, shown = float(page.eval("document.getElementById('flame-info').dataset.baseTotal")), total(page)
    check(shown == in_b and base == in_a and in_a > 0,
          f"B's range {ra}-{rb}: {shown} (B: {in_b}) against {base} (A's same seconds, its cells "
          f"{lo}-{hi - 1} of {rows_a} a second in slices of {sc_a}: {in_a})")
    check(not page.errors, f"no script errors: {page.errors}")

if failures:
    print(f"report_check: {len(failures)} failed", file=sys.stderr)
    sys.exit(1)
print("report_check: ok")
