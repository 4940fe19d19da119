#!/usr/bin/env python3
"""perf_jit_leaves.py MAP IPS: names the leaves of Linux perf's samples of a
node whose JIT code perf cannot name (a node started without +JPperf: no
perf map, and its JIT code is in a memfd mapping, which perf takes for a
file), for tests/integration/native_cpu. MAP holds perf map lines ("START
SIZE NAME", hex) of the JIT's code (tests/support/kpt_jit_map); IPS is
`perf script -F time,ip` of a `perf record -k mono` without -g: each
sample's time and address, one a line. Prints "COUNT NAME" for each JIT
name that samples fell in (a function's CodeInfoPrologue counted as the
function, as kprof counts it), then "COUNT TOTAL" for every sample, in JIT
code or not, and "FIRST LAST WINDOW": the first and last sample's times
(seconds of CLOCK_MONOTONIC, as kprof's segments give theirs)."""
import bisect
import sys


def main():
    ranges = []
    with open(sys.argv[1]) as f:
        for line in f:
            start, size, name = line.rstrip('\n').split(' ', 2)
            ranges.append((int(start, 16), int(start, 16) + int(size, 16), name))
    ranges.sort()
    starts = [r[0] for r in ranges]
    counts, total, times = {}, 0, []
    with open(sys.argv[2]) as f:
        for line in f:
            if not line.strip():
                continue
            total += 1
            time, ip = line.split()
            times.append(float(time.rstrip(':')))
            ip = int(ip, 16)
            i = bisect.bisect_right(starts, ip) - 1
            if i >= 0 and ranges[i][0] <= ip < ranges[i][1]:
                name = ranges[i][2].removesuffix("-CodeInfoPrologue")  # counted as the function
                counts[name] = counts.get(name, 0) + 1
    for name, count in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(count, name)
    print(total, 'TOTAL')
    print(min(times), max(times), 'WINDOW')


main()
