"use strict";
/* kprof report, the model: decodes the data kprof wrote into the page
 * (formats/src/report_html.c) and answers the view's questions: the heat map
 * cells of a source, and the weight of every node of the frame tree over a
 * range of slices, for the samples a filter lets through. Nothing here
 * touches the DOM. */

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

/* Undoes the delta coding of a source's slice and node columns. */
function kpSource(buf, meta, recording) {
  const slice = Uint32Array.from(kpColumn(buf, meta.slice));
  const node = Uint32Array.from(kpColumn(buf, meta.node));
  for (let i = 1; i < slice.length; i++) {
    const same = slice[i] === 0;
    slice[i] += slice[i - 1];
    if (same) node[i] += node[i - 1];
  }
  const n = slice.length;
  const nSlices = n ? slice[n - 1] + 1 : 0;
  /* entries of slice s: sliceStart[s] .. sliceStart[s + 1] */
  const sliceStart = new Uint32Array(nSlices + 1);
  for (let i = 0; i < n; i++) sliceStart[slice[i] + 1]++;
  for (let s = 0; s < nSlices; s++) sliceStart[s + 1] += sliceStart[s];
  const count = kpColumn(buf, meta.count);
  const weights = meta.weights.map((d, k) => (k === 0 ? count : kpColumn(buf, d)));
  return {
    kind: meta.kind, recording, rows: meta.rowsPerSecond, originS: meta.originS,
    firstUs: meta.firstUs, lastUs: meta.lastUs, samples: meta.samples,
    weightNames: meta.weightNames, weightUnits: meta.weightUnits, weightTitles: meta.weightTitles,
    nSlices, sliceStart, node, weights,
    /* the heat maps' own cells, heatRows a second, whatever the slices */
    heatRows: meta.heatRows, heatCells: meta.heat.map((d) => kpColumn(buf, d)),
    fine: meta.heatRows / meta.rowsPerSecond, /* heat map cells per slice */
    /* the first and last second shown (columns of the heat map) */
    firstSecond: Math.floor(meta.firstUs / 1e6) - meta.originS,
    columns: Math.floor(meta.lastUs / 1e6) - Math.floor(meta.firstUs / 1e6) + 1,
  };
}

const KP_PID = /^<\d+\.\d+\.\d+>$/;

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
    this.recordings = meta.recordings.map((r, i) => ({
      name: r.name, sources: r.sources.map((s) => kpSource(buf, s, i)),
    }));
    /* nodes on the paths of native CPU samples: no name frame follows their pid */
    this.cpuNode = new Uint8Array(this.nNodes);
    for (const r of this.recordings)
      for (const src of r.sources)
        if (src.kind === "cpu") for (const leaf of src.node) this.cpuNode[leaf] = 1;
    for (let i = this.nNodes - 1; i >= 0; i--)
      if (this.cpuNode[i] && this.parent[i] >= 0) this.cpuNode[this.parent[i]] = 1;
    this.describeNodes();
  }

  /* For every node: its depth, the status (or thread kind) frame under COMM
   * (under the node's frame when several nodes were recorded), the process (pid frame) on its path and the frame after the pid (the
   * registered name or initial call in cooperative samples); children in
   * alphabetical order. Parents always come before their children. */
  describeNodes() {
    const n = this.nNodes, P = this.parent;
    this.depth = new Uint16Array(n);
    this.status = new Int32Array(n).fill(-1);
    this.pid = new Int32Array(n).fill(-1);
    this.pname = new Int32Array(n).fill(-1);
    this.nodeName = new Int32Array(n).fill(-1); /* the node's frame, several nodes recorded */
    const isPid = this.frames.map((f) => KP_PID.test(f));
    const isNode = this.frames.map((f) => f.indexOf("@") > 0);
    for (let i = 0; i < n; i++) {
      const p = P[i];
      if (p < 0) continue;
      this.depth[i] = this.depth[p] + 1;
      /* the frame under COMM, or under the node's when several were recorded */
      const d = this.depth[i], f = this.frame[i];
      this.nodeName[i] = d === 1 && isNode[f] ? f : this.nodeName[p];
      this.status[i] = (d === 1 && !isNode[f]) || (d === 2 && this.nodeName[p] >= 0) ? f : this.status[p];
      this.pid[i] = this.pid[p];
      this.pname[i] = this.pname[p];
      if (this.pid[i] < 0 && isPid[this.frame[i]]) this.pid[i] = this.frame[i];
      else if (this.pid[p] >= 0 && this.pid[i] === this.pid[p] && P[p] >= 0 &&
               this.frame[p] === this.pid[p] && this.pname[p] < 0 && !this.cpuNode[i])
        this.pname[i] = this.frame[i];
    }
    /* a process's name from the cooperative samples names it in CPU samples too */
    this.nameOfPid = new Map();
    for (let i = 0; i < n; i++)
      if (this.pname[i] >= 0 && !this.nameOfPid.has(this.pid[i])) this.nameOfPid.set(this.pid[i], this.pname[i]);
    this.childLists(this);
  }

  /* The name shown for a process: its registered name or initial call. */
  processName(node) {
    const pid = this.pid[node];
    if (pid < 0) return "";
    const nm = this.pname[node] >= 0 ? this.pname[node] : this.nameOfPid.get(pid);
    return nm === undefined ? "" : this.frames[nm];
  }

  /* Statuses (or thread kinds) seen in a source, with their sample counts. */
  statuses(src) {
    const seen = new Map();
    for (let e = 0; e < src.node.length; e++) {
      const st = this.status[src.node[e]];
      if (st >= 0) seen.set(st, (seen.get(st) || 0) + src.weights[0][e]);
    }
    return [...seen.entries()].sort((a, b) => b[1] - a[1]).map(([f, c]) => ({ frame: f, name: this.frames[f], count: c }));
  }

  /* A mask over nodes: 1 where a sample with this leaf passes the filter
   * (`statuses`: a Set of status frame ids, null for all; `process`: a
   * RegExp matched against the pid, the name and the node, null for all). */
  filterMask(statuses, process) {
    const mask = new Uint8Array(this.nNodes);
    for (let i = 0; i < this.nNodes; i++) {
      if (statuses && !statuses.has(this.status[i])) continue;
      if (process) {
        const pid = this.pid[i];
        if (pid < 0) continue;
        const node = this.nodeName[i] >= 0 ? this.frames[this.nodeName[i]] : "";
        if (!process.test(this.frames[pid]) && !process.test(this.processName(i)) && !process.test(node)) continue;
      }
      mask[i] = 1;
    }
    return mask;
  }

  /* The heat map of weight `k` as {rows, cells}: cells a Float64Array of
   * columns x rows, column major, cell (c, r) = second firstSecond + c,
   * offset r / rows. Unfiltered (`mask` null) at the heat map's own 50 rows
   * a second; filtered, from the entries, at the slices' rows. */
  heat(src, k, mask) {
    if (!mask) {
      const rows = src.heatRows, cells = new Float64Array(src.columns * rows), h = src.heatCells[k];
      const base = src.firstSecond * rows;
      for (let i = 0; i < cells.length && base + i < h.length; i++) cells[i] = h[base + i];
      return { rows, cells };
    }
    const rows = src.rows, cells = new Float64Array(src.columns * rows);
    const base = src.firstSecond * rows, w = src.weights[k];
    for (let s = 0; s < src.nSlices; s++) {
      const cell = s - base;
      if (cell < 0 || cell >= cells.length) continue;
      for (let e = src.sliceStart[s]; e < src.sliceStart[s + 1]; e++)
        if (mask[src.node[e]]) cells[cell] += w[e];
    }
    return { rows, cells };
  }

  /* A range of heat map cells [from, to) widened to whole slices. */
  snap(src, [from, to]) {
    return [Math.floor(from / src.fine) * src.fine, Math.ceil(to / src.fine) * src.fine];
  }

  /* Self weight per node over the slices of heat map cells [from, to) of
   * `src` (widened to whole slices), for the samples `mask` lets through
   * (null: all). */
  selfWeights(src, k, mask, from, to) {
    const self = new Float64Array(this.nNodes);
    const base = src.firstSecond * src.rows, w = src.weights[k], node = src.node;
    const s0 = Math.max(0, Math.floor(from / src.fine) + base);
    const s1 = Math.min(src.nSlices, Math.ceil(to / src.fine) + base);
    const e0 = src.sliceStart[s0], e1 = src.sliceStart[Math.max(s0, s1)];
    if (mask) { for (let e = e0; e < e1; e++) if (mask[node[e]]) self[node[e]] += w[e]; }
    else for (let e = e0; e < e1; e++) self[node[e]] += w[e];
    return self;
  }

  /* The tree with the processes merged: the pid frames left out, so that
   * processes of the same name or initial call share one tower, within a
   * recording and across two (whose pids differ). `map` takes a node of the
   * full tree to its node here. Built once, on first use. */
  merged() {
    if (this.mergedTree) return this.mergedTree;
    const n = this.nNodes, map = new Int32Array(n), parent = [], frame = [], depth = [], keys = new Map();
    for (let i = 0; i < n; i++) {
      const p = this.parent[i] >= 0 ? map[this.parent[i]] : -1;
      if (this.pid[i] === this.frame[i] && (this.parent[i] < 0 || this.pid[this.parent[i]] < 0)) {
        map[i] = p; /* the pid frame itself */
        continue;
      }
      const key = p + "," + this.frame[i];
      let m = keys.get(key);
      if (m === undefined) {
        m = parent.length; keys.set(key, m);
        parent.push(p); frame.push(this.frame[i]); depth.push(p >= 0 ? depth[p] + 1 : 0);
      }
      map[i] = m;
    }
    const t = { nNodes: parent.length, parent: Int32Array.from(parent), frame: Uint32Array.from(frame),
                depth: Uint16Array.from(depth), map };
    this.childLists(t);
    this.mergedTree = t;
    return t;
  }

  /* `kids` (children of each node) and `rootKids`, in alphabetical order. */
  childLists(t) {
    const kids = Array.from({ length: t.nNodes + 1 }, () => []);
    for (let i = 0; i < t.nNodes; i++) kids[t.parent[i] + 1].push(i);
    for (const k of kids) k.sort((a, b) => (this.frames[t.frame[a]] < this.frames[t.frame[b]] ? -1 : 1));
    t.rootKids = kids[0];
    t.kids = kids.slice(1);
  }

  /* Inclusive weights on tree `t` (this model, or merged()) from the self
   * weights of the full tree's nodes (children after parents). */
  totals(t, self) {
    let total = self;
    if (t !== this) {
      total = new Float64Array(t.nNodes);
      for (let i = 0; i < this.nNodes; i++) if (self[i] && t.map[i] >= 0) total[t.map[i]] += self[i];
    } else total = Float64Array.from(self);
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
