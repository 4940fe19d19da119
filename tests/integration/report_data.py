#!/usr/bin/env python3
"""Compares the data of two kprof report pages, decoded here on its own
(formats/src/report_html.c's layout): every source's heat map cells and
entry sets, with frame, path and process ids replaced by their texts, so
that two pages of the same samples compare equal whatever order their ids
were given in. Exits 1, naming the first difference, when they differ.

Usage: report_data.py PAGE_A PAGE_B"""
import array, base64, gzip, json, re, sys


def load(path):
    text = open(path, encoding="utf-8").read()
    meta = json.loads(re.search(r'id="kprof-meta"[^>]*>(.*?)</script>', text, re.S).group(1))
    raw = gzip.decompress(base64.b64decode(re.search(r'id="kprof-data"[^>]*>(.*?)</script>', text, re.S).group(1)))

    def col(desc):
        kind, offset, n = desc
        a = array.array("I" if kind == "u32" else "d")
        a.frombytes(raw[offset:offset + n * a.itemsize])
        return list(a)

    frames = meta["frames"]
    parent = [p - 1 for p in col(meta["nodeParent"])]
    frame = col(meta["nodeFrame"])
    paths = []
    for i in range(len(parent)):
        paths.append((paths[parent[i]] + ";" if parent[i] >= 0 else "") + frames[frame[i]])
    name = lambda v: frames[v - 1] if v else ""
    procs = [(r, name(p), name(n), name(m)) for r, p, n, m in zip(
        col(meta["procRecording"]), col(meta["procPid"]), col(meta["procNode"]), col(meta["procName"]))]
    out = {}
    for ri, rec in enumerate(meta["recordings"]):
        for src in rec["sources"]:
            key = (ri, src["kind"])
            out[key + ("heat",)] = [col(h) for h in src["heat"]]
            for set_name in ("paths", "processes", "timeline"):
                s = src[set_name]
                sl = col(s["slice"])
                a = col(s["process"]) if "process" in s else None
                b = col(s["node"] if "node" in s else s["status"])
                for i in range(1, len(sl)):  # the delta coding (model.js's kpSet)
                    same_slice = sl[i] == 0
                    sl[i] += sl[i - 1]
                    if not same_slice:
                        continue
                    if a is None:
                        b[i] = (b[i] + b[i - 1]) % 2**32
                        continue
                    same_a = a[i] == 0
                    a[i] = (a[i] + a[i - 1]) % 2**32
                    if same_a:
                        b[i] = (b[i] + b[i - 1]) % 2**32
                weights = [col(w) for w in s["weights"]]
                entries = {}
                for i in range(len(sl)):
                    who = procs[a[i]] if a is not None else None
                    what = paths[b[i]] if "node" in s else (frames[b[i]] if b[i] < len(frames) else None)
                    entries[(sl[i], who, what)] = tuple(w[i] for w in weights)
                out[key + (set_name, s["sliceCells"])] = entries
    return out


a, b = load(sys.argv[1]), load(sys.argv[2])
if not any(v for k, v in a.items() if k[2] == "paths"):
    sys.exit("report_data: no entry in " + sys.argv[1])
for k in sorted(set(a) | set(b), key=str):
    if a.get(k) != b.get(k):
        sys.exit(f"report_data: {k} differs")
