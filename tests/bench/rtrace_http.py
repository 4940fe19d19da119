#!/usr/bin/env python3
"""The HTTP case of tests/bench/rtrace_overhead: what a request trace asked
for by its header costs, as the HTTP client sees it.

One keep-alive connection to inets httpd (kprof_httpd first in its modules,
an ESI function that makes a key-value GET). Pairs of requests, GAP seconds
apart: one untraced, then one with `HEADER: true` (default
x-trace-request; x-null-trace: the bench's null case), so that the
machine's drift falls on both alike. Prints one line:
"untraced_us,traced_us,extra_us,traced,pairs": medians of the pairs'
latencies and of their differences, and how many traced requests a trace
id came back for; the ids, a line each, into IDS_FILE.

Usage: rtrace_http.py PORT PAIRS GAP_S IDS_FILE [HEADER]
"""
import http.client
import statistics
import sys
import time

PATH = "/b/kprof_bench_rtrace:esi"


def main():
    port, pairs, gap = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    header = sys.argv[5] if len(sys.argv) > 5 else "x-trace-request"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)

    def get(traced):
        headers = {header: "true"} if traced else {}
        t0 = time.perf_counter_ns()
        conn.request("GET", PATH, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        took = (time.perf_counter_ns() - t0) / 1000
        if body != b"ok\n":
            sys.exit(f"rtrace_http: {PATH} answered {resp.status}: {body[:80]!r}")
        return took, resp.getheader("x-kprof-trace-id")

    for _ in range(20):  # the connection, the code, the caches
        get(False)
    untraced, traced, extra, ids = [], [], [], []
    for _ in range(pairs):
        time.sleep(gap)
        u, _ = get(False)
        time.sleep(gap)
        t, trace_id = get(True)
        if trace_id:
            ids.append(trace_id)
        untraced.append(u)
        traced.append(t)
        extra.append(t - u)
    with open(sys.argv[4], "w") as out:
        out.write("".join(i + "\n" for i in ids))
    med = statistics.median
    print(f"{med(untraced):.0f},{med(traced):.0f},{med(extra):.0f},{len(ids)},{pairs}")


main()
