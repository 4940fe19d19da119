#!/usr/bin/env python3
"""The report of a recording of several nodes, in headless Chromium: the
status check boxes are the processes' statuses (not the node frames above
them), and the process filter takes a node's name, leaving exactly that
node's samples.

Usage: report_nodes.py REPORT_HTML NODE WANT_SAMPLES"""
import os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from cdp import Browser  # noqa: E402

report, node, want = sys.argv[1], sys.argv[2], float(sys.argv[3])
with Browser(width=1400, height=1000) as b:
    page = b.page
    page.goto("file://" + os.path.abspath(report))
    page.wait_for("document.body.dataset.ready === '1'", timeout=60)
    statuses = page.eval("[...document.querySelectorAll('#status-filter input')].map((c) => c.name)")
    if not statuses or any("@" in s for s in statuses) or not {"running", "waiting"} & set(statuses):
        sys.exit(f"report_nodes: status check boxes {statuses}")
    r = page.rect("#process-filter")
    page.click(r["x"] + 5, r["y"] + r["height"] / 2)
    page.type_text("^" + node.replace(".", "\\.") + "$")
    got = float(page.eval("document.getElementById('flame-info').dataset.total"))
    if got != want:
        sys.exit(f"report_nodes: filtered on {node}: {got} samples, samples.folded has {want}")
    if page.errors:
        sys.exit(f"report_nodes: script errors {page.errors}")
print(f"report_nodes: ok: statuses {statuses}; {node}: {got:.0f} samples")
