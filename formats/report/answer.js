"use strict";
/* kprof report, the answer: what the first screen says when the recording
 * has native CPU samples, before any heat map: the CPU by state per thread
 * kind (microstate accounting's terms, kp/cpu_state.h), the functions and
 * the processes the CPU went to. Over the whole recording, or over the
 * range dragged on the native CPU heat map, of the processes the process
 * filter lets through (not the state filter: the table is what it picks
 * from). The first three functions compute, the last draws. */

/* CPU weight per (thread kind, state) of the paths' self weights `self`:
 * {kinds: [{name, total, byState: Map(state name or "" -> weight)}],
 * states: the state names present, in kp/cpu_state.h's order, total,
 * stateless: the weight of stacks without a state frame}. */
function kpCpuStates(m, self) {
  const kinds = new Map(), seen = new Set();
  let total = 0, stateless = 0;
  for (let n = 0; n < m.nNodes; n++) {
    const w = self[n];
    if (!w) continue;
    const kn = m.kindNode[n], sn = m.stateNode[n];
    const kind = kn >= 0 ? m.label(kn) : "(no thread kind)", st = sn >= 0 ? m.label(sn) : "";
    let row = kinds.get(kind);
    if (!row) kinds.set(kind, (row = { name: kind, total: 0, byState: new Map() }));
    row.total += w;
    row.byState.set(st, (row.byState.get(st) || 0) + w);
    total += w;
    if (st) seen.add(st); else stateless += w;
  }
  const order = (m.meta.cpuStates || []).map((s) => s[0]);
  return { kinds: [...kinds.values()].sort((a, b) => b.total - a.total),
           states: order.filter((s) => seen.has(s)), total, stateless };
}

/* The `n` functions with the most self weight in `self` (the frames where
 * the CPU was spent, below the thread kind and state), with their total
 * weight (each path counted once however often the function recurs in it):
 * [{name, self, total}]. */
function kpTopFunctions(m, self, n) {
  const own = new Map();
  for (let i = 0; i < m.nNodes; i++)
    if (self[i] && m.statusNode[i] >= 0 && m.statusNode[i] !== i) {
      const f = m.frame[i];
      own.set(f, (own.get(f) || 0) + self[i]);
    }
  const top = [...own.entries()].sort((a, b) => b[1] - a[1]).slice(0, n);
  const total = new Map(top.map(([f]) => [f, 0]));
  for (let i = 0; i < m.nNodes; i++) {
    if (!self[i]) continue;
    const on = new Set();
    for (let a = i; a >= 0 && m.statusNode[a] !== a; a = m.parent[a]) if (total.has(m.frame[a])) on.add(m.frame[a]);
    for (const f of on) total.set(f, total.get(f) + self[i]);
  }
  return top.map(([f, v]) => ({ name: m.frames[f], self: v, total: total.get(f) }));
}

/* The native CPU source of the shown recording and the selection the
 * answer covers: [src, from, to, label], or null without native samples. */
function answerSelection() {
  const rec = recording(), src = rec.sources.find((s) => s.kind === "cpu");
  if (!src) return null;
  const r = source() === src && state.recording >= 0 && state.ranges.length === 1 ? state.ranges[0] : null;
  return r ? [src, r[0], r[1], "range " + rangeText(src, r)] : [src, 0, src.columns * src.heatRows, "whole recording"];
}

function drawAnswer() {
  const box = $("answer"), sel = answerSelection();
  document.querySelector("main").classList.toggle("answer-first", !!sel);
  box.hidden = !sel;
  if (!sel) return;
  const m = state.model, [src, from, to, label] = sel, f = m.filter(null, state.process);
  const self = m.selfWeights(src, 0, f, from, to), cs = kpCpuStates(m, self);
  $("answer-range").textContent = label + (state.process ? ", processes " + state.process.source : "") +
    ": " + fmt(cs.total) + " native CPU samples";
  /* the sentence: each kind's largest state */
  const whole = (v, all) => pct(v, all).replace(/\.\d\d%/, "%");
  $("cpu-answer").textContent = cs.kinds.map((k) => {
    const [st, v] = [...k.byState.entries()].sort((a, b) => b[1] - a[1])[0];
    return st ? k.name + ": " + whole(v, k.total) + " " + st : k.name + ": " + whole(k.total, cs.total) + " of the CPU";
  }).join(" \u00b7 ");
  $("busy-wait").textContent = busyWaitNote(cs, m.meta.busyFlags);
  const table = $("cpu-states"), help = new Map((m.meta.cpuStates || []).map((s) => [s[0], s]));
  table.innerHTML = "";
  const head = table.createTHead().insertRow();
  const th = (text, title) => { const c = document.createElement("th"); c.textContent = text; if (title) c.title = title; head.append(c); return c; };
  th("thread kind"); th("of all", "share of all native CPU samples").className = "num";
  for (const st of cs.states) {
    const h = help.get(st), c = th(st, h[2] + " (msacc: " + h[1] + "); a click filters the flame graph and the heat map on it");
    c.className = "num state";
    c.onclick = () => filterOnState(src, st);
  }
  if (cs.stateless) th("(no state)", "stacks without a state frame (recorded by a kprof before states)").className = "num";
  const body = table.createTBody();
  for (const k of cs.kinds) {
    const tr = body.insertRow(), td = (text, title) => { const c = tr.insertCell(); c.textContent = text; c.title = title || ""; return c; };
    td(k.name);
    td(pct(k.total, cs.total), fmt(k.total) + " samples").className = "num";
    for (const st of [...cs.states, ...(cs.stateless ? [""] : [])]) {
      const v = k.byState.get(st) || 0;
      td(v ? pct(v, k.total) : "", v ? fmt(v) + " samples, " + pct(v, cs.total) + " of all" : "").className = "num";
    }
  }
  $("cpu-states-note").textContent = cs.states.length ? "each state's share of its kind's samples (the mouse: of all)"
    : "these samples carry no state frame (recorded by a kprof before states): by thread kind only";
  const fill = (id, rows, cells) => {
    const tb = $(id).tBodies[0];
    tb.innerHTML = "";
    rows.forEach((r) => cells(r).forEach(([t, num], i) => {
      const tr = i ? tb.rows[tb.rows.length - 1] : tb.insertRow(), c = tr.insertCell();
      c.textContent = t; if (num) c.className = "num"; else c.title = t;
    }));
  };
  fill("top-functions", kpTopFunctions(m, self, 10), (r) => [[r.name], [pct(r.self, cs.total), 1], [pct(r.total, cs.total), 1]]);
  const procs = m.processWeights(src, 0, f, from, to).sort((a, b) => b.v - a.v).slice(0, 10);
  fill("top-processes", procs, (r) => [[m.pidText(r.process) + " " + m.processName(r.process)], [pct(r.v, cs.total), 1],
    [[...r.byStatus.entries()].sort((a, b) => b[1] - a[1]).slice(0, 2)
      .map(([st, v]) => (st >= 0 ? m.frames[st] : "?") + " " + whole(v, r.v)).join(", ")]]);
}

/* Where busy waiting is more than a tenth of the CPU, what it is and what
 * decides it (the node's settings when kprof record knew them); else "". */
function busyWaitNote(cs, flags) {
  const busy = cs.kinds.reduce((a, k) => a + (k.byState.get("busy_wait") || 0), 0);
  if (!cs.total || busy * 10 <= cs.total) return "";
  const per = cs.kinds.filter((k) => k.byState.get("busy_wait"))
    .map((k) => k.name + " " + pct(k.byState.get("busy_wait"), k.total)).join(", ");
  return "Busy waiting is " + pct(busy, cs.total) + " of the node's CPU (" + per + "): schedulers " +
    "without work spin before they sleep. " + (flags ? "The node runs with " + flags + "; " : "") +
    "+sbwt none +sbwtdcpu none +sbwtdio none stop the spinning, at some latency when work arrives.";
}

/* The flame graph and the heat maps of the native CPU samples, of state
 * `name` alone (the state filter's check boxes show it). */
function filterOnState(src, name) {
  const si = recording().sources.indexOf(src);
  if (si !== state.source) { state.source = si; state.ranges = []; fillControls(); }
  const st = state.model.statuses(src).find((s) => s.name === name);
  state.statuses = st ? new Set([st.frame]) : null;
  fillStatuses();
  refresh();
}
