#!/usr/bin/env python3
"""The README's screenshots, taken by scripts/demo from the recording it just
made, in Debian's headless Chromium (tests/support/cdp.py):
- report.png: report.html's first screen: with native CPU samples as it
  opens (the CPU by state, the top functions and processes, their flame
  graph), without them a range dragged over the samples heat map and its
  flame graph;
- report-cpu.png: the same page on the native CPU samples, with a range;
- report-compare.png: a second range (Shift+drag) compared with the first;
- flamegraph-svg.png: cpu.svg (or samples.svg), the flame graph kprof drew;
- pprof.png: `go tool pprof -http`'s flame graph of samples-000001.pb.gz,
  when the recording has it and Go is installed.

Usage: screenshots.py RECORDING_DIR OUT_DIR"""
import os, shutil, socket, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "support"))
from cdp import Browser  # noqa: E402
from report_page import drag_cells, heat_geometry  # noqa: E402

rec, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)


def drag_on(page, canvas, a, b, modifiers=0):
    """Drags over the heat map `canvas` from fraction a to fraction b of its cells."""
    g = heat_geometry(page, canvas)
    n = g["columns"] * g["rows"]
    drag_cells(page, g, int(n * a), int(n * b), modifiers)


def shot_at(page, selector, name):
    # below the sticky controls bar
    page.eval(f"window.scrollTo(0, document.querySelector('{selector}').getBoundingClientRect().top + scrollY"
              f" - (('{selector}' === 'header') ? 0 : document.getElementById('controls').offsetHeight + 8))")
    page.screenshot(os.path.join(out, name))
    print("  " + os.path.join(out, name))


with Browser(width=1400, height=1000) as b:
    page = b.page
    page.goto("file://" + os.path.abspath(os.path.join(rec, "report.html")), timeout=60)
    page.wait_for("document.body.dataset.ready === '1'", timeout=60)
    cpu = page.eval("!!document.getElementById('heatmap-cpu-cpu_samples')")
    if cpu:
        shot_at(page, "header", "report.png")
    drag_on(page, "heatmap-samples-samples", 0.3, 0.6)
    if not cpu:
        shot_at(page, "header", "report.png")
    drag_on(page, "heatmap-samples-samples", 0.65, 0.95, modifiers=8)
    shot_at(page, "#flame-section", "report-compare.png")
    if cpu:
        drag_on(page, "heatmap-cpu-cpu_samples", 0.3, 0.6)
        shot_at(page, "#flame-section", "report-cpu.png")
    svg = os.path.join(rec, "cpu.svg" if os.path.exists(os.path.join(rec, "cpu.svg")) else "samples.svg")
    page.goto("file://" + os.path.abspath(svg), timeout=60)
    page.screenshot(os.path.join(out, "flamegraph-svg.png"))
    print("  " + os.path.join(out, "flamegraph-svg.png"))

    profile = os.path.join(rec, "samples-000001.pb.gz")
    if os.path.exists(profile) and shutil.which("go"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        home = tempfile.mkdtemp()
        env = dict(os.environ, HOME=home, GOCACHE=os.path.join(home, "go-cache"), BROWSER="none")
        server = subprocess.Popen(["go", "tool", "pprof", f"-http=127.0.0.1:{port}", "-no_browser", profile],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}/ui/flamegraph"
            for _ in range(150):
                try:
                    urllib.request.urlopen(url, timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.2)
            page.goto(url, timeout=60)
            time.sleep(1)
            page.screenshot(os.path.join(out, "pprof.png"))
            print("  " + os.path.join(out, "pprof.png"))
        finally:
            server.terminate()
            server.wait()
            shutil.rmtree(home, ignore_errors=True)
