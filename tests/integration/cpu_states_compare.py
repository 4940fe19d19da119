#!/usr/bin/env python3
"""Sets kprof's native CPU samples per state (cpu.folded, whose stacks are
rooted beam.smp;KIND;STATE;...) beside the VM's microstate accounting over
the same seconds (kpt_states:msacc/1's "TYPE/STATE/US;" items), per thread
type, each on its non-sleep time, in msacc's default states (kprof's bif
and nif count as emulator, busy_wait as other: kp/cpu_state.h).

Usage: cpu_states_compare.py CPU_FOLDED MSACC_TEXT [MAX_POINTS [WAITS]]
Prints one line per thread type and state; exits 1 when a state over 1% of
the node's non-sleep CPU differs by more than MAX_POINTS (default 5)
between the two, 2 on unusable input.

WAITS, where given, holds a line "COMM CPU_NS WAIT_NS" per thread of the
node over msacc's seconds (/proc/PID/task/TID/schedstat): its CPU time and
its time runnable but waiting for a CPU. msacc counts wall time, so a
thread's wait for a CPU lands in the state it was in, and where waits
follow the work (a thread that wakes a peer is preempted by it) they
shift msacc's shares away from the CPU's. If a type's threads ran C and
waited W, and all of W landed in one state or none of it did, a state's
share of CPU and its share of wall time part by at most W/(C+W): each
type's bound is MAX_POINTS plus that share, in points."""
import re
import sys
from collections import defaultdict

# kprof's thread kinds and the msacc thread types they hold
TYPES = {
    "scheduler": ["scheduler"],
    "dirty_cpu": ["dirty_cpu_scheduler"],
    "dirty_io": ["dirty_io_scheduler"],
    "other": ["aux", "poll", "async"],
}
AS_MSACC = {"bif": "emulator", "nif": "emulator", "busy_wait": "other"}


def kprof_shares(path):
    counts = defaultdict(lambda: defaultdict(int))
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            frames = stack.split(";")
            if len(frames) < 3 or not n.isdigit():
                continue
            state = AS_MSACC.get(frames[2], frames[2])
            counts[frames[1]][state] += int(n)
    return counts


def msacc_shares(path):
    by_type = defaultdict(lambda: defaultdict(int))
    with open(path, encoding="utf-8") as f:
        text = f.read().strip().strip('"')
        for item in text.split(";"):
            parts = item.split("/")
            if len(parts) != 3:
                continue
            for kind, types in TYPES.items():
                if parts[0] in types:
                    by_type[kind][parts[1]] += int(parts[2])
    return by_type


# a thread's kind from its name (its comm, cut to 15 characters): OTP 25
# and 26 name them 1_scheduler, 1_dirty_cpu_sch, 0_poller, ...; OTP 27 and
# later erts_sched_1, erts_dcpus_1, erts_poll_0, ...
COMMS = [
    (re.compile(r"^(\d+_scheduler|erts_sched_\d+)$"), "scheduler"),
    (re.compile(r"^(\d+_dirty_cpu|erts_dcpus_\d+)"), "dirty_cpu"),
    (re.compile(r"^(\d+_dirty_io|erts_dios_\d+)"), "dirty_io"),
    (re.compile(r"^(\d+_poller|\d+_aux|async_\d+|erts_(poll|aux|async)_\d+)$"), "other"),
]


def wait_shares(path):
    """Each kind's share of its threads' time spent waiting for a CPU, in
    points of (CPU + wait)."""
    ran, waited = defaultdict(int), defaultdict(int)
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) != 3:
                continue
            for pattern, kind in COMMS:
                if pattern.match(parts[0]):
                    ran[kind] += int(parts[1])
                    waited[kind] += int(parts[2])
    return {k: 100.0 * waited[k] / (ran[k] + waited[k]) for k in ran if ran[k] + waited[k]}


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    base = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    waits = wait_shares(sys.argv[4]) if len(sys.argv) > 4 else {}
    if len(sys.argv) > 4 and "scheduler" not in waits:
        # a bound left unwidened would fail for the wrong reason
        print(f"no scheduler thread named in {sys.argv[4]}", file=sys.stderr)
        return 2
    ours, theirs = kprof_shares(sys.argv[1]), msacc_shares(sys.argv[2])
    total = sum(n for k in ours.values() for s, n in k.items() if s != "sleep")
    if not total or not theirs:
        print("no samples or no msacc figures", file=sys.stderr)
        return 2
    worst, rc = 0.0, 0
    for kind in TYPES:
        o, t = ours.get(kind, {}), theirs.get(kind, {})
        o_awake = sum(n for s, n in o.items() if s != "sleep")
        t_awake = sum(n for s, n in t.items() if s != "sleep")
        if not o_awake or not t_awake:
            continue
        limit = base + waits.get(kind, 0.0)
        if kind in waits:
            print(f"bound: {kind} {limit:.1f} points, its threads waiting for a CPU"
                  f" {waits[kind]:.1f}% of their time")
        for state in sorted(set(o) | set(t)):
            if state == "sleep":
                continue
            a = 100.0 * o.get(state, 0) / o_awake
            b = 100.0 * t.get(state, 0) / t_awake
            node_share = 100.0 * o.get(state, 0) / total
            checked = node_share > 1.0 or b * o_awake / total > 1.0
            diff = abs(a - b)
            mark = ""
            if checked:
                worst = max(worst, diff)
                if diff > limit:
                    mark, rc = "  <-- differs", 1
            print(f"{kind:10} {state:9} kprof {a:5.1f}%  msacc {b:5.1f}%"
                  f"  ({node_share:4.1f}% of the node){mark}")
    print(f"worst difference: {worst:.1f} points")
    return rc


if __name__ == "__main__":
    sys.exit(main())
