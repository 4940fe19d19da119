"use strict";
/* kprof report, the model: decodes the data kprof wrote into the page
 * (formats/src/report_html.c) and answers the view's questions: the heat map
 * cells of a source, the weight of every call path over a range of time for
 * the samples the filters let through, the processes of a range, and the
 * tree with a tower per process or per name. Nothing here touches the DOM.
 *
 * The process is not a frame: the tree holds the call paths, and each
 * source two entry sets, (slice, path) and (slice, process, path), the
 * second in slices as long or longer. A view of all processes draws from
 * the first; a view of some, or of the processes themselves, from the
 * second. */

/* Inflates the base64 gzip data with the browser's own DecompressionStream. */
async function kpInflate(text) {
  const bin = atob(text.replace(/\s+/g, ""));
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Response(stream).arrayBuffer();
}

/* A column described as ["u32"|"f64", byte offset, length]. */
function kpColumn(buf, desc) {
  const [type, offset, n] = desc;
  return type === "u32" ? new Uint32Array(buf, offset, n) : new Float64Array(buf, offset, n);
}

/* An entry set: undoes the delta coding of its key columns: slice, then
 * process (the sets of processes), then node (a path) or status (a frame;
 * 2^32 - 1 for none). */
function kpSet(buf, meta) {
  const slice = Uint32Array.from(kpColumn(buf, meta.slice));
  const node = Uint32Array.from(kpColumn(buf, meta.node || meta.status));
  const process = meta.process ? Uint32Array.from(kpColumn(buf, meta.process)) : null;
  const n = slice.length;
  for (let i = 1; i < n; i++) {
    const sameSlice = slice[i] === 0;
    slice[i] += slice[i - 1];
    if (!sameSlice) continue;
    if (!process) { node[i] += node[i - 1]; continue; }
    const sameProcess = process[i] === 0;
    process[i] += process[i - 1];
    if (sameProcess) node[i] += node[i - 1];
  }
  const nSlices = n ? slice[n - 1] + 1 : 0;
  /* entries of slice s: sliceStart[s] .. sliceStart[s + 1] */
  const sliceStart = new Uint32Array(nSlices + 1);
  for (let i = 0; i < n; i++) sliceStart[slice[i] + 1]++;
  for (let s = 0; s < nSlices; s++) sliceStart[s + 1] += sliceStart[s];
  const count = kpColumn(buf, meta.count);
  const weights = meta.weights.map((d, k) => (k === 0 ? count : kpColumn(buf, d)));
  return meta.status ? { sliceCells: meta.sliceCells, nSlices, sliceStart, status: node, process, weights }
    : { sliceCells: meta.sliceCells, nSlices, sliceStart, node, process, weights };
}

function kpSource(buf, meta, recording) {
  return {
    kind: meta.kind, recording, originS: meta.originS,
    firstUs: meta.firstUs, lastUs: meta.lastUs, samples: meta.samples,
    weightNames: meta.weightNames, weightUnits: meta.weightUnits, weightTitles: meta.weightTitles,
    paths: kpSet(buf, meta.paths), processes: kpSet(buf, meta.processes), timeline: kpSet(buf, meta.timeline),
    /* the heat maps' own cells, heatRows a second, whatever the slices */
    heatRows: meta.heatRows, heatCells: meta.heat.map((d) => kpColumn(buf, d)),
    /* the first and last second shown (columns of the heat map) */
    firstSecond: Math.floor(meta.firstUs / 1e6) - meta.originS,
    columns: Math.floor(meta.lastUs / 1e6) - Math.floor(meta.firstUs / 1e6) + 1,
  };
}

class KpModel {
  static async load(metaText, dataText) {
    const meta = JSON.parse(metaText);
    const buf = await kpInflate(dataText);
    return new KpModel(meta, buf);
  }

  constructor(meta, buf) {
    this.meta = meta;
    this.frames = meta.frames.map(kpDecodeFrame);
    const parentPlus1 = kpColumn(buf, meta.nodeParent);
    this.nNodes = parentPlus1.length;
    this.parent = new Int32Array(this.nNodes);
    for (let i = 0; i < this.nNodes; i++) this.parent[i] = parentPlus1[i] - 1;
    this.frame = Uint32Array.from(kpColumn(buf, meta.nodeFrame));
    /* processes: recording, and frame + 1 (0: none) of pid, node and name */
    this.procRecording = kpColumn(buf, meta.procRecording);
    this.procPid = kpColumn(buf, meta.procPid);
    this.procNode = kpColumn(buf, meta.procNode);
    this.procName = kpColumn(buf, meta.procName);
    this.nProcesses = this.procPid.length;
    this.recordings = meta.recordings.map((r, i) => ({
      name: r.name, sources: r.sources.map((s) => kpSource(buf, s, i)),
    }));
    this.describeNodes();
    this.label = (n) => this.frames[this.frame[n]];
    this.childLists(this);
  }

  /* For every node: its depth, the status frame under COMM (under the
   * node's frame when several nodes were recorded) and the node of that
   * status on its path (-1 for the nodes above it). A native CPU path's
   * status is its state, the frame under its thread kind when that is a
   * state's name (kprof's stacks before states: the thread kind); its
   * kind's and its state's nodes are kindNode and stateNode (-1: none), as
   * report.c tells them. Parents always come before their children. */
  describeNodes() {
    const n = this.nNodes, P = this.parent;
    this.depth = new Uint16Array(n);
    this.status = new Int32Array(n).fill(-1);
    this.statusNode = new Int32Array(n).fill(-1);
    this.kindNode = new Int32Array(n).fill(-1);
    this.stateNode = new Int32Array(n).fill(-1);
    this.nodeName = new Int32Array(n).fill(-1); /* the node's frame, several nodes recorded */
    const isNode = this.frames.map((f) => f.indexOf("@") > 0);
    const kinds = new Set(this.meta.threadKinds || []), states = new Set((this.meta.cpuStates || []).map((s) => s[0]));
    for (let i = 0; i < n; i++) {
      const p = P[i];
      if (p < 0) continue;
      this.depth[i] = this.depth[p] + 1;
      const d = this.depth[i], f = this.frame[i];
      this.nodeName[i] = d === 1 && isNode[f] ? f : this.nodeName[p];
      const isStatus = (d === 1 && !isNode[f]) || (d === 2 && this.nodeName[p] >= 0);
      const isState = !isStatus && this.kindNode[p] === p && states.has(this.frames[f]);
      this.status[i] = isStatus || isState ? f : this.status[p];
      this.statusNode[i] = isStatus || isState ? i : this.statusNode[p];
      this.kindNode[i] = isStatus && kinds.has(this.frames[f]) ? i : this.kindNode[p];
      this.stateNode[i] = isState ? i : this.stateNode[p];
    }
  }

  /* A process's pid, name (registered name or initial call) and node. */
  pidText(p) { return this.procPid[p] ? this.frames[this.procPid[p] - 1] : ""; }
  processName(p) { return this.procName[p] ? this.frames[this.procName[p] - 1] : ""; }
  processNode(p) { return this.procNode[p] ? this.frames[this.procNode[p] - 1] : ""; }

  /* Statuses (or states, or thread kinds) seen in a source, with their
   * sample counts. */
  statuses(src) {
    const seen = new Map(), set = src.paths;
    for (let e = 0; e < set.node.length; e++) {
      const st = this.status[set.node[e]];
      if (st >= 0) seen.set(st, (seen.get(st) || 0) + set.weights[0][e]);
    }
    return [...seen.entries()].sort((a, b) => b[1] - a[1]).map(([f, c]) => ({ frame: f, name: this.frames[f], count: c }));
  }

  /* The filters as masks: `nodes` over the tree (1 where a path's status
   * is in `statuses`, a Set of status frame ids; null for all), `procs`
   * over the processes (1 where `process`, a RegExp, matches the pid, the
   * name or the node; null for all). */
  filter(statuses, process) {
    let nodes = null, procs = null;
    /* over the frames: 1 for the statuses let through (the timeline's key) */
    const frames = statuses ? Uint8Array.from(this.frames, (_, f) => (statuses.has(f) ? 1 : 0)) : null;
    if (statuses) {
      nodes = new Uint8Array(this.nNodes);
      for (let i = 0; i < this.nNodes; i++) nodes[i] = statuses.has(this.status[i]) ? 1 : 0;
    }
    if (process) {
      procs = new Uint8Array(this.nProcesses);
      for (let p = 0; p < this.nProcesses; p++)
        procs[p] = this.procPid[p] && (process.test(this.pidText(p)) || process.test(this.processName(p)) ||
                                       process.test(this.processNode(p))) ? 1 : 0;
    }
    return { nodes, procs, frames };
  }

  /* The entry set a view draws from: the processes' when it picks
   * processes (or shows them), else the paths'. */
  setOf(src, f, byProcess) { return f.procs || byProcess ? src.processes : src.paths; }

  /* Whether entry e of `set` passes filter `f`. */
  passes(set, e, f) {
    return (set.node ? !f.nodes || f.nodes[set.node[e]] : !f.frames || f.frames[set.status[e]] === 1) &&
      (!f.procs || f.procs[set.process[e]]);
  }

  /* The heat map of weight `k` as {rows, cells, perRow}: cells a
   * Float64Array of columns x rows, column major, cell (c, r) = second
   * firstSecond + c, offset r / rows. Unfiltered at the heat map's own
   * rows (src.heatRows a second); filtered, from the entries, at the
   * slices' rows (a slice of several seconds spread evenly over its
   * columns): of the paths for statuses, of the timeline for processes.
   * With `only` (a mask over the nodes, as searchMask's), the weight of
   * those paths alone. */
  heat(src, k, f, only) {
    if (!f.nodes && !f.procs && !only) {
      const rows = src.heatRows, cells = new Float64Array(src.columns * rows), h = src.heatCells[k];
      const base = src.firstSecond * rows;
      for (let i = 0; i < cells.length && base + i < h.length; i++) cells[i] = h[base + i];
      return { rows, cells, sliceCells: 1 };
    }
    const set = only ? this.setOf(src, f, false) : f.procs ? src.timeline : src.paths;
    const sc = set.sliceCells, H = src.heatRows;
    const rows = sc <= H ? H / sc : 1, span = sc <= H ? 1 : sc / H; /* columns a slice covers */
    const cells = new Float64Array(src.columns * rows), w = set.weights[k];
    const first = src.firstSecond * H; /* the first cell shown, in heat map rows */
    for (let s = 0; s < set.nSlices; s++) {
      let v = 0;
      for (let e = set.sliceStart[s]; e < set.sliceStart[s + 1]; e++)
        if (this.passes(set, e, f) && (!only || only[set.node[e]])) v += w[e];
      if (!v) continue;
      const cell0 = s * sc - first; /* in heat map rows from the first shown */
      for (let c = 0; c < span; c++) {
        const cell = sc <= H ? Math.floor(cell0 / sc) : Math.floor(cell0 / H) + c;
        if (cell >= 0 && cell < cells.length) cells[cell] += v / span;
      }
    }
    return { rows, cells, sliceCells: sc };
  }

  /* A mask over the nodes: 1 where the path holds a frame `re` matches. */
  searchMask(re) {
    const mask = new Uint8Array(this.nNodes);
    for (let i = 0; i < this.nNodes; i++)
      mask[i] = re.test(this.label(i)) || (this.parent[i] >= 0 && mask[this.parent[i]]) ? 1 : 0;
    return mask;
  }

  /* A range of heat map cells [from, to) of `src` (from its first second
   * shown) widened to whole slices of `set` (slices count from the
   * source's origin). */
  snap(src, set, [from, to]) {
    const sc = set.sliceCells, base = src.firstSecond * src.heatRows;
    return [Math.floor((from + base) / sc) * sc - base, Math.ceil((to + base) / sc) * sc - base];
  }

  /* The entries of `set` in the slices of cells [from, to) of `src`. */
  entryRange(src, set, from, to) {
    const base = src.firstSecond * src.heatRows, sc = set.sliceCells;
    const s0 = Math.max(0, Math.floor((from + base) / sc));
    const s1 = Math.min(set.nSlices, Math.ceil((to + base) / sc));
    return [set.sliceStart[s0] || 0, set.sliceStart[Math.max(s0, s1)] || 0];
  }

  /* Self weight per node over the cells [from, to) of `src` (widened to
   * whole slices), for the samples filter `f` lets through. */
  selfWeights(src, k, f, from, to) {
    const self = new Float64Array(this.nNodes), set = this.setOf(src, f, false);
    const w = set.weights[k], node = set.node, [e0, e1] = this.entryRange(src, set, from, to);
    for (let e = e0; e < e1; e++) if (this.passes(set, e, f)) self[node[e]] += w[e];
    return self;
  }

  /* The processes of a range (over the slices of the timeline): per
   * process its weight and its weight per status frame (-1: none), for the
   * samples filter `f` lets through. */
  processWeights(src, k, f, from, to) {
    const set = src.timeline, w = set.weights[k], [e0, e1] = this.entryRange(src, set, from, to);
    const out = new Map();
    for (let e = e0; e < e1; e++) {
      if (!w[e] || !this.passes(set, e, f) || !this.procPid[set.process[e]]) continue;
      const p = set.process[e], st = set.status[e] < this.frames.length ? set.status[e] : -1;
      let row = out.get(p);
      if (!row) out.set(p, (row = { process: p, v: 0, byStatus: new Map() }));
      row.v += w[e];
      row.byStatus.set(st, (row.byStatus.get(st) || 0) + w[e]);
    }
    return [...out.values()];
  }

  /* The tree with a tower per process (`by` "process") or per name ("name")
   * under each status, from the selections `sels` ([src, from, to] each):
   * {tree, selfs} with the self weights of each selection on its nodes. A
   * node of the tree is a (group, path node) pair; the group's own node,
   * under the status, is labelled with the pid and the name. */
  grouped(k, f, by, sels) {
    const b = this.treeBuilder(sels.length), add = b.add;
    const G = this.nProcesses + this.frames.length + 2;
    const groupOf = (p) => (by === "name" ? (this.procName[p] ? this.procName[p] : G - 1) : p);
    const groupLabel = (p) => (by === "name" ? this.processName(p) || "(no name)"
      : this.procPid[p] ? this.pidText(p) + " " + this.processName(p) : "(no process)");
    /* the node of path node n in group g (p: a process of the group) */
    const nodeOf = (n, g, p) => {
      const st = this.statusNode[n];
      if (st < 0 || st === n) { /* COMM, the node's name, the status: shared */
        const par = this.parent[n] >= 0 ? nodeOf(this.parent[n], g, p) : -1;
        return add(-1 - n, par, this.label(n));
      }
      const up = this.parent[n] === st
        ? add(-1 - this.nNodes - (st * G + g), nodeOf(st, g, p), groupLabel(p))
        : nodeOf(this.parent[n], g, p);
      return add(n * G + g, up, this.label(n));
    };
    sels.forEach(([src, from, to], i) => {
      const set = src.processes, w = set.weights[k], [e0, e1] = this.entryRange(src, set, from, to);
      for (let e = e0; e < e1; e++) {
        if (!w[e] || !this.passes(set, e, f)) continue;
        const p = set.process[e];
        b.weigh(i, nodeOf(set.node[e], groupOf(p), p), w[e]);
      }
    });
    return b.finish();
  }

  /* Tree `t` reversed, as async-profiler's reversed view: the leaf frames
   * (where the weight is spent) at the root and their callers under them,
   * from the self weights `selfs` (one array per selection) of t's nodes:
   * {tree, selfs} on the reversed tree's nodes. */
  reversed(t, selfs) {
    const b = this.treeBuilder(selfs.length);
    for (let n = 0; n < t.nNodes; n++) {
      if (!selfs.some((s) => s[n])) continue;
      let v = -1;
      for (let a = n; a >= 0; a = t.parent[a]) v = b.add(v + "\u0000" + t.label(a), v, t.label(a));
      selfs.forEach((s, i) => b.weigh(i, v, s[n]));
    }
    return b.finish();
  }

  /* A tree built node by node, for views other than the call paths':
   * add(key, parent, label) gives the node of `key` (new under `parent`,
   * -1 for the root, parents first), weigh(i, node, w) adds to selection
   * i's self weight there, finish() gives {tree, selfs}. */
  treeBuilder(nSelections) {
    const parent = [], label = [], depth = [], keys = new Map(), selfs = Array.from({ length: nSelections }, () => []);
    return {
      add: (key, par, text) => {
        let v = keys.get(key);
        if (v === undefined) {
          v = parent.length; keys.set(key, v);
          parent.push(par); label.push(text); depth.push(par >= 0 ? depth[par] + 1 : 0);
        }
        return v;
      },
      weigh: (i, v, w) => { if (w) selfs[i][v] = (selfs[i][v] || 0) + w; },
      finish: () => {
        const tree = { nNodes: parent.length, parent: Int32Array.from(parent), depth: Uint16Array.from(depth),
                       label: (n) => label[n] };
        this.childLists(tree);
        return { tree, selfs: selfs.map((s) => Float64Array.from({ length: tree.nNodes }, (_, i) => s[i] || 0)) };
      },
    };
  }

  /* `kids` (children of each node) and `rootKids`, in alphabetical order. */
  childLists(t) {
    const kids = Array.from({ length: t.nNodes + 1 }, () => []);
    for (let i = 0; i < t.nNodes; i++) kids[t.parent[i] + 1].push(i);
    for (const k of kids) k.sort((a, b) => (t.label(a) < t.label(b) ? -1 : 1));
    t.rootKids = kids[0];
    t.kids = kids.slice(1);
  }

  /* Inclusive weights on tree `t` from the self weights of its nodes
   * (children after parents). */
  totals(t, self) {
    const total = Float64Array.from(self);
    for (let i = t.nNodes - 1; i >= 0; i--) if (t.parent[i] >= 0) total[t.parent[i]] += total[i];
    return total;
  }

  /* The sum over the root's children. */
  rootTotal(t, total) {
    let sum = 0;
    for (const k of t.rootKids) sum += total[k];
    return sum;
  }
}

/* Frames are percent-encoded in kprof's files (FORMATS.md); shown decoded. */
function kpDecodeFrame(f) {
  if (f.indexOf("%") < 0) return f;
  try { return decodeURIComponent(f); } catch (e) { return f; }
}
