"use strict";
/* kprof report, the view: heat maps (FlameScope's layout: a column per
 * second, a row per offset within it, the colour by weight), ranges picked by
 * dragging on them, the flame graph of a range or the difference of two, the
 * filters, the search (the frames and the heat map cells that hold them)
 * and the processes of the range. With native CPU samples the page opens
 * on them: the answer (answer.js), their flame graph, then the heat maps. */

const $ = (id) => document.getElementById(id);
const fmt = (v) => (Math.round(v * 100) / 100).toLocaleString("en-US");
const pct = (a, b) => (b > 0 ? (100 * a / b).toFixed(2) + "%" : "-");

const state = {
  model: null,
  recording: 0,     /* shown recording; -1: B compared with A (two recordings) */
  source: 0,        /* index into the recording's sources */
  weight: 0,
  statuses: null,   /* Set of status frame ids, null = all */
  process: null,    /* RegExp, null = all */
  search: null,     /* RegExp, null = none */
  ranges: [],       /* up to two [fromCell, toCell) of the heat map's grid */
  zoom: -1,         /* node the flame graph is zoomed on, -1 = the root */
  group: "",        /* the flame graph's towers: "" all together, "process" or "name" */
  reverse: false,   /* the leaf frames on top, their callers under them */
  filter: { nodes: null, procs: null }, /* the filters as masks (KpModel.filter) */
  boxes: [],        /* drawn flame boxes, for the mouse */
};

function recording() { return state.model.recordings[state.recording < 0 ? 1 : state.recording]; }
function source() { return recording().sources[state.source]; }
function weightName(src, k) { return src.weightNames[k] + (src.weightUnits[k] !== src.weightNames[k] ? " (" + src.weightUnits[k] + ")" : ""); }

/* The entry set the flame graph draws from now (KpModel.setOf). */
function viewSet(src) { return state.model.setOf(src, state.filter, state.group !== ""); }
/* A range of the heat map's own rows, widened to whole slices, in seconds. */
function rangeText(src, range) {
  const [a, b] = state.model.snap(src, viewSet(src), range), t = (cell) => (cell / src.heatRows).toFixed(2);
  return t(a) + " s to " + t(b) + " s";
}

/* ---- controls ---- */
function fillControls() {
  const m = state.model;
  if (m.recordings.length > 1) {
    $("recording-box").hidden = false;
    const names = m.recordings.map((r) => r.name);
    $("recording").innerHTML = "";
    [["A: " + names[0], 0], ["B: " + names[1], 1], ["B compared with A", -1]].forEach(([t, v]) =>
      $("recording").add(new Option(t, v)));
    $("recording").value = String(state.recording);
  }
  const sel = $("source");
  sel.innerHTML = "";
  recording().sources.forEach((s, i) =>
    sel.add(new Option(s.kind === "cpu" ? "native CPU samples" : "cooperative samples", i)));
  sel.value = String(state.source);
  fillWeights();
  fillStatuses();
}
function fillWeights() {
  const src = source(), sel = $("weight");
  sel.innerHTML = "";
  src.weightNames.forEach((_, k) => {
    const o = new Option(weightName(src, k), k);
    o.title = src.weightTitles[k];
    sel.add(o);
  });
  state.weight = Math.min(state.weight, src.weightNames.length - 1);
  sel.value = String(state.weight);
}
function fillStatuses() {
  const box = $("status-filter"), m = state.model, sts = m.statuses(source());
  const states = new Set((m.meta.cpuStates || []).map((s) => s[0]));
  box.innerHTML = source().kind !== "cpu" ? "Status: " : sts.some((s) => states.has(s.name)) ? "State: " : "Threads: ";
  for (const st of sts) {
    const l = document.createElement("label"), c = document.createElement("input");
    c.type = "checkbox"; c.checked = !state.statuses || state.statuses.has(st.frame);
    c.dataset.frame = st.frame; c.name = st.name;
    c.addEventListener("change", onStatusChange);
    l.append(c, " " + st.name);
    box.append(l);
  }
}
function onStatusChange() {
  const boxes = [...document.querySelectorAll("#status-filter input")];
  state.statuses = boxes.every((b) => b.checked) ? null : new Set(boxes.filter((b) => b.checked).map((b) => +b.dataset.frame));
  refresh();
}
function regexOf(text) {
  if (!text) return null;
  try { return new RegExp(text); } catch (e) { return new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")); }
}

/* ---- heat maps ---- */
function heatColour(v, max) {
  if (v <= 0 || max <= 0) return "#ffffff";
  const x = Math.min(1, v / max);                  /* light yellow to dark red */
  const r = 255 - Math.round(75 * x), g = Math.round(235 - 215 * x), b = Math.round(200 - 190 * Math.sqrt(x));
  return "rgb(" + r + "," + g + "," + b + ")";
}
function drawHeatmaps() {
  const box = $("heatmaps");
  box.innerHTML = "";
  const rec = recording();
  /* the other sources' filter (their statuses are other frames), and the
   * paths the search lights up: once for every heat map */
  const other = state.model.filter(null, state.process);
  const lit = state.search ? state.model.searchMask(state.search) : null;
  /* one heat map per weight of every source: the metrics and the native
   * CPU (first when the page opens on it) */
  const order = rec.sources.map((src, si) => [src, si]);
  if (firstSource(rec) !== 0) order.reverse();
  order.forEach(([src, si]) => src.weightNames.forEach((_, k) => {
    const div = document.createElement("div");
    div.className = "heatmap";
    const h = document.createElement("h3");
    h.title = src.weightTitles[k];
    const scroll = document.createElement("div"); scroll.className = "scroll";
    const cv = document.createElement("canvas");
    cv.id = "heatmap-" + src.kind + "-" + src.weightNames[k].replace(/\W+/g, "_");
    scroll.append(cv);
    div.append(h, scroll);
    box.append(div);
    const drawn = drawHeat(cv, src, si, k, other, lit);
    scroll.append(secondsAxis(src.columns, cv.width / src.columns));
    h.textContent = (src.kind === "cpu" ? "native CPU samples" : weightName(src, k)) +
      " \u00b7 " + src.columns + " s, " + (drawn.every ? "a row per " + drawn.every + " s" : drawn.rows + " rows a second") +
      (drawn.max === 0 ? " \u00b7 all zero" : "");
  }));
}
/* The seconds under a heat map, a label every 1, 2, 5, 10, ... s, at
 * least 40 px apart. */
function secondsAxis(columns, cw) {
  const axis = document.createElement("div");
  axis.className = "axis";
  axis.style.width = columns * cw + "px";
  const every = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600].find((n) => n * cw >= 40) || 3600;
  for (let c = 0; c < columns; c += every) {
    const t = document.createElement("span");
    t.textContent = c >= 60 && every >= 60 ? Math.floor(c / 60) + " min" : c + " s";
    t.style.left = c * cw + "px";
    axis.append(t);
  }
  return axis;
}
/* Draws one heat map on `cv`: unfiltered at its own rows (50 a second, 10
 * or 1 in long recordings), filtered at the slices' rows; `other` is the
 * filter of the sources not drawn in the flame graph, `lit` the search's
 * mask over the paths (or null). Ranges are kept in the map's own rows
 * (src.heatRows a second). Returns the rows drawn (or the seconds a row
 * covers, `every`) and the largest cell. */
function drawHeat(cv, src, si, k, other, lit) {
  const f = si === state.source ? state.filter : other;
  const { rows, cells, sliceCells } = state.model.heat(src, k, f);
  const every = rows === 1 && sliceCells > src.heatRows ? sliceCells / src.heatRows : 0;
  const H = src.heatRows, step = H / rows; /* the map's own rows per cell drawn */
  /* two heat maps side by side, each scrolling on its own when long */
  const width = Math.max(200, (document.documentElement.clientWidth - 80) / 2);
  const cw = Math.max(3, Math.min(60, Math.floor(width / src.columns)));
  const ch = Math.max(2, Math.min(12, Math.floor(150 / rows)));
  cv.width = src.columns * cw; cv.height = rows * ch;
  const g = cv.getContext("2d");
  let max = 0;
  for (const v of cells) max = Math.max(max, v);
  for (let c = 0; c < src.columns; c++)
    for (let r = 0; r < rows; r++) {
      g.fillStyle = heatColour(cells[c * rows + r], max);
      g.fillRect(c * cw, r * ch, cw - 1, ch - 1);
    }
  /* the search lights up the cells that hold matching frames: a magenta
   * frame, at the slices' rows */
  cv.dataset.searchCells = "0";
  if (lit && si === state.source) {
    const on = state.model.heat(src, k, f, lit);
    const lh = (rows * ch) / on.rows;
    let n = 0;
    g.strokeStyle = "rgb(230,0,230)"; g.lineWidth = 1;
    for (let c = 0; c < src.columns; c++)
      for (let r = 0; r < on.rows; r++)
        if (on.cells[c * on.rows + r] > 0) {
          g.strokeRect(c * cw + 0.5, r * lh + 0.5, cw - 2, lh - 2);
          n++;
        }
    cv.dataset.searchCells = String(n);
  }
  if (si === state.source)
    state.ranges.forEach((range, i) => {
      const [a, b] = state.model.snap(src, viewSet(src), range);
      g.fillStyle = i === 0 ? "rgba(40,90,255,0.35)" : "rgba(0,170,60,0.35)";
      for (let cell = a; cell < b; cell += step)
        g.fillRect(Math.floor(cell / H) * cw, Math.floor((cell % H) / step) * ch, cw - 1, ch - 1);
    });
  /* the cell drawn under the mouse, and the first of the map's own rows it covers */
  const at = (e) => {
    const rect = cv.getBoundingClientRect();
    const c = Math.max(0, Math.min(src.columns - 1, Math.floor((e.clientX - rect.left) / cw)));
    const r = Math.max(0, Math.min(rows - 1, Math.floor((e.clientY - rect.top) / ch)));
    return { cell: c * rows + r, fine: c * H + r * step, c, r };
  };
  cv.onmousemove = (e) => {
    const p = at(e);
    tip(e, "second " + p.c + ", +" + Math.round(1000 * p.r / rows) + " ms: " + fmt(cells[p.cell]) + " " + src.weightUnits[k]);
    if (drag) { drag.to = p.fine; showDrag(); }
  };
  cv.onmouseleave = () => { $("tooltip").hidden = true; };
  cv.onmousedown = (e) => {
    e.preventDefault();
    if (si !== state.source) {
      /* another source: its statuses (or thread kinds) are other frames */
      state.source = si; state.ranges = []; state.statuses = null;
      state.filter = state.model.filter(null, state.process);
      fillControls();
    }
    const p = at(e);
    drag = { from: p.fine, to: p.fine, step, second: e.shiftKey && state.ranges.length > 0 };
  };
  return { rows, max, every };
}
let drag = null;
function dragRange() { return [Math.min(drag.from, drag.to), Math.max(drag.from, drag.to) + drag.step]; }
function showDrag() { $("flame-info").textContent = "Range " + rangeText(source(), dragRange()) + "..."; }
window.addEventListener("mouseup", () => {
  if (!drag) return;
  const r = dragRange();
  state.ranges = drag.second ? [state.ranges[0], r] : [r];
  drag = null; state.zoom = -1;
  refresh();
  /* the flame graph is above the heat maps when the page opens on the
   * native CPU samples: brought into view, under the controls */
  const top = $("flame-section").getBoundingClientRect().top;
  if (document.querySelector("main.answer-first") && top < $("controls").offsetHeight)
    window.scrollBy(0, top - $("controls").offsetHeight - 8);
});

function tip(e, text) {
  const t = $("tooltip");
  t.textContent = text; t.hidden = false;
  t.style.left = Math.min(e.clientX + 12, window.innerWidth - 300) + "px";
  t.style.top = (e.clientY + 14) + "px";
}

/* ---- the flame graph ---- */
function hash(s) { let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0; return h >>> 0; }
function frameColour(name) {
  const h = hash(name);
  return "rgb(" + (205 + (h % 50)) + "," + (80 + ((h >> 8) % 130)) + "," + (40 + ((h >> 16) % 50)) + ")";
}
function diffColour(d, max) {
  const x = max > 0 ? Math.min(1, Math.abs(d) / max) : 0, v = Math.round(235 - 175 * x);
  return d > 0 ? "rgb(255," + v + "," + v + ")" : d < 0 ? "rgb(" + v + "," + v + ",255)" : "rgb(235,235,235)";
}

/* What the flame graph shows: a selection [source, from cell, to cell]
 * drawn, and another (`base`, scaled) to compare it with. */
function flameData() {
  if (state.recording < 0) {
    /* B's heat maps are drawn: a range dragged there is compared with the
     * same seconds of A, from each recording's first second */
    const a = state.model.recordings[0].sources.find((s) => s.kind === source().kind), b = source();
    const r = state.ranges[0];
    if (!r) {
      const full = (src) => [src, 0, src.columns * src.heatRows];
      return { sel: full(b), base: a ? full(a) : null, label: "B compared with A, whole recordings" };
    }
    /* the same seconds in A's rows (coarser in the longer recording) */
    const inA = a && [Math.floor((r[0] * a.heatRows) / b.heatRows), Math.ceil((r[1] * a.heatRows) / b.heatRows)];
    return { sel: [b, ...r], base: a ? [a, ...inA] : null,
             label: "B, range " + rangeText(b, r) + ", compared with the same seconds of A" };
  }
  const src = source();
  const r0 = state.ranges[0] || [0, src.columns * src.heatRows];
  if (state.ranges.length < 2)
    return { sel: [src, ...r0], base: null, label: state.ranges.length ? "Range " + rangeText(src, r0) : "Whole recording" };
  const r1 = state.ranges[1];
  return { sel: [src, ...r1], base: [src, ...r0],
           label: "Range " + rangeText(src, r1) + " compared with " + rangeText(src, r0) };
}

/* The tree drawn and the self weights of the selections on it: the call
 * paths, or a tower per process or per name. */
function flameTree(d) {
  const m = state.model, k = state.weight, f = state.filter;
  let t;
  if (state.group) {
    const g = m.grouped(k, f, state.group, d.base ? [d.sel, d.base] : [d.sel]);
    t = { T: g.tree, self: g.selfs[0], base: d.base ? g.selfs[1] : null };
  } else {
    const self = (sel) => m.selfWeights(sel[0], k, f, sel[1], sel[2]);
    t = { T: m, self: self(d.sel), base: d.base ? self(d.base) : null };
  }
  if (!state.reverse) return t;
  const r = m.reversed(t.T, t.base ? [t.self, t.base] : [t.self]);
  return { T: r.tree, self: r.selfs[0], base: t.base ? r.selfs[1] : null };
}

function drawFlame() {
  const m = state.model, cv = $("flame"), src = source(), d = flameData();
  const { T, self, base } = flameTree(d);
  const total = m.totals(T, self), rootTotal = m.rootTotal(T, total);
  const baseT = base ? m.totals(T, base) : null, baseTotal = base ? m.rootTotal(T, baseT) : 0;
  /* the base scaled to the drawn total: shares are compared, not counts */
  const scale = base && baseTotal > 0 ? rootTotal / baseTotal : 0;
  const delta = (n) => (base ? total[n] - baseT[n] * scale : 0);
  let maxDelta = 0;
  if (base) for (let n = 0; n < T.nNodes; n++) maxDelta = Math.max(maxDelta, Math.abs(delta(n)));
  $("flame-title").textContent = "Flame graph of the " + (src.kind === "cpu" ? "native CPU samples" : "cooperative samples");
  const info = $("flame-info");
  info.textContent = d.label + ": " + fmt(rootTotal) + " " + src.weightUnits[state.weight] +
    (base ? " (compared with " + fmt(baseTotal) + ")" : "");
  info.dataset.total = String(rootTotal);
  info.dataset.baseTotal = String(baseTotal);

  const W = cv.clientWidth || 1200, H = 16;
  const zoomed = state.zoom >= 0 && total[state.zoom] > 0 ? state.zoom : -1;
  const width = zoomed >= 0 ? total[zoomed] : rootTotal;
  let maxDepth = 0;
  for (let n = 0; n < T.nNodes; n++) if (total[n] > 0 && T.depth[n] > maxDepth) maxDepth = T.depth[n];
  const rows = maxDepth + 2;
  cv.width = W * devicePixelRatio; cv.height = rows * H * devicePixelRatio;
  cv.style.height = rows * H + "px";
  const g = cv.getContext("2d");
  g.scale(devicePixelRatio, devicePixelRatio);
  g.font = "11px sans-serif"; g.textBaseline = "middle";
  state.boxes = [];
  let matched = 0;
  const box = (n, x, w, depth, name) => {
    const y = depth * H; /* the root on top: the page reads downwards */
    const hit = state.search && n >= 0 && state.search.test(name);
    g.fillStyle = hit ? "rgb(230,0,230)" : base && n >= 0 ? diffColour(delta(n), maxDelta) : frameColour(name);
    g.fillRect(x, y, Math.max(w - 0.5, 0.5), H - 1);
    if (w > 30) {
      g.fillStyle = "#000";
      g.save(); g.beginPath(); g.rect(x, y, w - 2, H); g.clip();
      g.fillText(name, x + 3, y + H / 2); g.restore();
    }
    state.boxes.push({ n, x, y, w, name });
  };
  /* the root, then the zoomed node's ancestors as full-width bars */
  box(-1, 0, W, 0, "all");
  let baseDepth = 1;
  if (zoomed >= 0) {
    const chain = [];
    for (let n = zoomed; n >= 0; n = T.parent[n]) chain.unshift(n);
    chain.forEach((n, i) => box(n, 0, W, i + 1, T.label(n)));
    baseDepth = chain.length;
  }
  const walk = (nodes, x0, depth) => {
    let x = x0;
    for (const n of nodes) {
      if (total[n] <= 0) continue;
      const w = (total[n] / width) * W;
      if (w >= 0.1) {
        const name = T.label(n);
        box(n, x, w, depth, name);
        if (state.search && state.search.test(name) && !(T.parent[n] >= 0 && searchHit(T.parent[n]))) matched += total[n];
        walk(T.kids[n], x, depth + 1);
      }
      x += w;
    }
  };
  const searchHit = (n) => { for (; n >= 0; n = T.parent[n]) if (state.search.test(T.label(n))) return true; return false; };
  walk(zoomed >= 0 ? T.kids[zoomed] : T.rootKids, 0, baseDepth);
  $("search-result").textContent = state.search ? "matched " + pct(matched, width) : "";
  cv.onmousemove = (e) => {
    const b = boxAt(e);
    if (!b) { $("tooltip").hidden = true; return; }
    const v = b.n < 0 ? rootTotal : total[b.n];
    let text = b.name + ": " + fmt(v) + " " + src.weightUnits[state.weight] + " (" + pct(v, rootTotal) + ")";
    if (base && b.n >= 0) text += "; compared: " + fmt(baseT[b.n]) + " (" + pct(baseT[b.n], baseTotal) + ")";
    tip(e, text);
  };
  cv.onmouseleave = () => { $("tooltip").hidden = true; };
  cv.onclick = (e) => { const b = boxAt(e); if (b) { state.zoom = b.n; drawFlame(); } };
  drawProcesses(d.sel);
}
function boxAt(e) {
  const r = $("flame").getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
  for (let i = state.boxes.length - 1; i >= 0; i--) {
    const b = state.boxes[i];
    if (x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + 16) return b;
  }
  return null;
}

/* The processes of the range, by weight, each split by status (over the
 * slices of the timeline); a click filters on one. */
function drawProcesses([src, from, to]) {
  const m = state.model, k = state.weight;
  const rows = m.processWeights(src, k, state.filter, from, to).sort((a, b) => b.v - a.v);
  let all = 0;
  for (const r of rows) all += r.v;
  $("processes").tHead.rows[0].cells[4].textContent = src.kind === "cpu" ? "by state" : "by status";
  const tbody = $("processes").tBodies[0];
  tbody.innerHTML = "";
  rows.slice(0, 30).forEach((r) => {
    const tr = tbody.insertRow(), pid = m.pidText(r.process);
    const split = [...r.byStatus.entries()].sort((a, b) => b[1] - a[1])
      .map(([st, v]) => (st >= 0 ? m.frames[st] : "?") + " " + pct(v, r.v)).join(" \u00b7 ");
    [pid, m.processName(r.process), fmt(r.v), pct(r.v, all), split].forEach((t, i) => {
      const td = tr.insertCell(); td.textContent = t; if (i === 2 || i === 3) td.className = "num";
    });
    tr.onclick = () => { $("process-filter").value = "^" + pid.replace(/\./g, "\\.") + "$"; onProcess(); };
  });
  const [a, b] = m.snap(src, src.timeline, [from, to]);
  $("process-range").textContent = rows.length + " processes, " + (a / src.heatRows).toFixed(2) + " s to " +
    (b / src.heatRows).toFixed(2) + " s";
}

/* ---- wiring ---- */
function refresh() {
  state.filter = state.model.filter(state.statuses, state.process);
  drawAnswer();
  drawHeatmaps();
  drawFlame();
}
/* The source the page opens on: the native CPU samples when there are. */
function firstSource(rec) { return Math.max(0, rec.sources.findIndex((s) => s.kind === "cpu")); }
function onProcess() { state.process = regexOf($("process-filter").value); refresh(); }

async function main() {
  try {
    const model = await KpModel.load($("kprof-meta").textContent, $("kprof-data").textContent);
    state.model = model;
    $("title").textContent = model.meta.title;
    $("subtitle").textContent = model.meta.subtitle;
    $("summary").textContent = model.recordings.map((r, i) =>
      (model.recordings.length > 1 ? "ABCD"[i] + ": " + r.name + ": " : "") +
      r.sources.map((s) => s.samples.toLocaleString("en-US") + (s.kind === "cpu" ? " native CPU samples" : " samples") +
        " over " + s.columns + " s").join(", ")).join(" \u00b7 ");
    state.source = firstSource(recording());
    fillControls();
    $("recording").onchange = () => { state.recording = +$("recording").value; state.source = firstSource(recording()); state.ranges = []; state.statuses = null; fillControls(); refresh(); };
    $("source").onchange = () => { state.source = +$("source").value; state.ranges = []; state.statuses = null; fillWeights(); fillStatuses(); refresh(); };
    $("weight").onchange = () => { state.weight = +$("weight").value; state.zoom = -1; drawFlame(); };
    $("process-filter").oninput = onProcess;
    $("search").oninput = () => { state.search = regexOf($("search").value); refresh(); };
    $("group").onchange = () => { state.group = $("group").value; state.zoom = -1; refresh(); };
    $("reverse").onchange = () => { state.reverse = $("reverse").checked; state.zoom = -1; drawFlame(); };
    $("clear").onclick = () => { state.ranges = []; state.zoom = -1; refresh(); };
    window.addEventListener("keydown", (e) => {
      if (e.key === "Escape") { state.zoom = -1; drawFlame(); }
      if ((e.ctrlKey || e.metaKey) && e.key === "f") { e.preventDefault(); $("search").focus(); }
    });
    window.addEventListener("resize", () => refresh());
    refresh();
    $("loading").remove();
    document.body.dataset.ready = "1";
  } catch (e) {
    $("loading").textContent = "This report could not be read: " + e;
    $("loading").className = "error";
    throw e;
  }
}
main();
