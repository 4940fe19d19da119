#!/usr/bin/env python3
"""Sets the kernel functions kprof names beside Linux perf's, on samples of
the same node over overlapping seconds: the share of all samples whose leaf
is each kernel function, kprof's from cpu.folded ([kernel]NAME and
[kernel:MODULE]NAME leaves) and perf's from `perf script` text of
`perf record -g` (leaf frames of module [kernel.kallsyms] or a module's).

Usage: kernel_compare.py CPU_FOLDED PERF_SCRIPT [TOP] [MAX_POINTS]
Prints perf's TOP (10) kernel functions with both shares; exits 1 when one
differs by more than MAX_POINTS (2) or a tenth of perf's share, whichever
is more; 2 on unusable input.

Why a tenth: in a virtual machine half of all samples end in
pvm_irq_enable, where a timer interrupt held back while interrupts were
off is taken; two samplers' timers (kprof's and perf's) meet such
windows a little differently, and with the other core busy their shares
of it parted by up to 5.4 points (50.8% and 56.2%) in runs where every
other function agreed within 1."""
import re
import sys
from collections import Counter


def kprof_leaves(path):
    leaves, total = Counter(), 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not n.isdigit():
                continue
            total += int(n)
            m = re.match(r"\[kernel(?::[^\]]*)?\](.+)$", stack.rsplit(";", 1)[-1])
            if m:
                leaves[m.group(1)] += int(n)
    return leaves, total


def perf_leaves(path):
    leaves, total, leaf_next = Counter(), 0, False
    frame = re.compile(r"^\s+[0-9a-f]+ (\S+?)(?:\+0x[0-9a-f]+)? \((\S+)\)$")
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                leaf_next = False
            elif not line[0].isspace():
                total += 1
                leaf_next = True
            elif leaf_next:
                leaf_next = False
                m = frame.match(line.rstrip("\n"))
                module = m.group(2) if m else ""
                # the kernel's, or a kernel module's ([nf_tables]); not the
                # user-space pseudo files perf brackets too
                if module == "[kernel.kallsyms]" or (
                        module.startswith("[") and
                        module not in ("[vdso]", "[vsyscall]", "[unknown]", "[heap]", "[stack]")):
                    leaves[m.group(1)] += 1
    return leaves, total


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    limit = float(sys.argv[4]) if len(sys.argv) > 4 else 2.0
    ours, our_total = kprof_leaves(sys.argv[1])
    theirs, their_total = perf_leaves(sys.argv[2])
    if not our_total or not their_total or not theirs:
        print("no samples, or no kernel leaf in perf's", file=sys.stderr)
        return 2
    rc, worst = 0, 0.0
    for name, n in theirs.most_common(top):
        a, b = 100.0 * ours.get(name, 0) / our_total, 100.0 * n / their_total
        worst = max(worst, abs(a - b))
        mark = ""
        if abs(a - b) > max(limit, b / 10):
            mark, rc = "  <-- differs", 1
        print(f"{name:40} kprof {a:5.2f}%  perf {b:5.2f}%{mark}")
    print(f"kernel leaves: kprof {100.0 * sum(ours.values()) / our_total:.1f}% of its samples, "
          f"perf {100.0 * sum(theirs.values()) / their_total:.1f}%; worst difference {worst:.2f} points")
    return rc


if __name__ == "__main__":
    sys.exit(main())
