// QuotaFlow dashboard: plain JavaScript and SVG, no dependencies. Reads the projections' JSON API
// (/queues, /jobs, /usage?points=1, /nodes, /preemptions, /rejections, /health, /jobs/ID) and
// redraws every REFRESH_MS while "live" is ticked. Text from the API only ever goes through
// textContent, never innerHTML.
"use strict";

const REFRESH_MS = 2000;
const COLOURS = ["#2563eb", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#06b6d4", "#84cc16", "#ec4899", "#64748b", "#f97316"];
const SVGNS = "http://www.w3.org/2000/svg";
const UNITS = { gpu: "gpu", cpu: "cpu (m)", memory: "memory (MB)" };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

// With a token configured, every request but /health needs it: the page is opened as
// /?token=... and sends it on as a bearer token (docs/operations.md).
const TOKEN = new URLSearchParams(location.search).get("token");

async function get(path) {
  const headers = TOKEN ? { Authorization: `Bearer ${TOKEN}` } : {};
  const response = await fetch(path, { cache: "no-store", headers });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

function fmtNum(v) {
  if (v === null || v === undefined) return "—";
  if (v === "unlimited") return "∞";
  if (typeof v === "number") return Number.isInteger(v) ? v.toLocaleString("en-US") : v.toFixed(2);
  return String(v);
}

function fmtTime(ms) {
  if (ms === null || ms === undefined) return "—";
  const d = new Date(ms);
  return d.toLocaleTimeString([], { hour12: false });
}

function fmtWait(ms) {
  if (!ms && ms !== 0) return "";
  const s = Math.round(ms / 1000);
  return s < 120 ? `${s}s` : `${Math.round(s / 60)}m`;
}

function jobLink(id) {
  return el("a", { href: `#/job/${encodeURIComponent(id)}` }, id);
}

function fill(tableId, rows, emptyText, columns) {
  const body = document.querySelector(`#${tableId} tbody`);
  body.replaceChildren();
  if (!rows.length) {
    body.append(el("tr", {}, el("td", { colspan: String(columns), class: "empty" }, emptyText)));
    return;
  }
  for (const row of rows) body.append(row);
}

// -- the queue tree ----------------------------------------------------------------------------

function bar(res) {
  // A bar scaled to the largest of deserved, fair share, allocated and limit: allocated filled,
  // deserved and fair share as ticks.
  const deserved = typeof res.deserved === "number" ? res.deserved : null;
  const values = [deserved, res.fair_share, res.allocated, res.limit].filter((v) => typeof v === "number");
  const max = Math.max(1e-9, ...values);
  const x = (v) => (240 * v) / max;
  const parts = [svg("rect", { x: 0, y: 4, width: 240, height: 10, fill: "#eef0f4", rx: 2 })];
  parts.push(svg("rect", { x: 0, y: 4, width: x(res.allocated || 0), height: 10, fill: "var(--alloc)", rx: 2, class: "alloc" }));
  if (deserved !== null) parts.push(svg("rect", { x: Math.min(238, x(deserved)), y: 0, width: 2, height: 18, fill: "var(--deserved)" }, svg("title", {}, `deserved ${fmtNum(deserved)}`)));
  parts.push(svg("rect", { x: Math.min(238, x(res.fair_share || 0)), y: 0, width: 2, height: 18, fill: "var(--fair)" }, svg("title", {}, `fair share ${fmtNum(res.fair_share)}`)));
  return svg("svg", { width: 244, height: 18, class: "qbar" }, ...parts);
}

function depthOf(queues) {
  const byId = Object.fromEntries(queues.map((q) => [q.queue, q]));
  const depth = {};
  for (const q of queues) {
    let d = 0, p = q.parent;
    while (p && byId[p] && d < 20) { d += 1; p = byId[p].parent; }
    depth[q.queue] = d;
  }
  return depth;
}

function drawQueues(data) {
  const depth = depthOf(data.queues);
  const rows = [];
  for (const q of data.queues) {
    // GPU always; CPU and memory only where the queue manages them (a quota or a limit).
    const resources = Object.entries(q.resources).filter(([name, r]) => name === "gpu" || r.deserved !== 0 || r.limit !== null);
    resources.forEach(([name, r], i) => {
      const first = i === 0;
      rows.push(el("tr", { class: first ? "queue-first" : null, "data-queue": q.queue },
        el("td", { style: `padding-left:${8 + 16 * depth[q.queue]}px` }, first ? el("b", {}, q.queue) : ""),
        el("td", {}, first ? q.policy : ""),
        el("td", {}, UNITS[name] || name),
        el("td", { class: "num" }, fmtNum(r.deserved)),
        el("td", { class: "num" }, fmtNum(r.fair_share)),
        el("td", { class: "num" }, fmtNum(r.allocated)),
        el("td", { class: "num" }, r.limit === null ? "none" : fmtNum(r.limit)),
        el("td", {}, bar(r)),
        el("td", { class: "num" }, first ? String(q.pending.length) : ""),
        el("td", { class: "num" }, first ? String(q.running.length) : ""),
      ));
    });
  }
  fill("queues", rows, "no queues configured yet", 10);
}

// -- pending and running -----------------------------------------------------------------------

function drawPending(data) {
  const rows = [];
  for (const q of data.queues) {
    for (const p of q.pending) {
      rows.push(el("tr", {},
        el("td", {}, q.queue), el("td", { class: "num" }, p.position), el("td", {}, jobLink(p.job)),
        el("td", { class: "num" }, p.effective_priority ?? p.priority), el("td", { class: "num" }, fmtWait(p.waiting_ms)),
        el("td", { class: "reason" }, el("span", { class: "pill" }, p.kind), " ", p.reason)));
    }
  }
  fill("pending", rows, "nothing is waiting", 6);
  const running = [];
  for (const q of data.queues) {
    for (const r of q.running) {
      const nodes = Object.entries(r.nodes).map(([n, t]) => `${n}×${t}`).join(", ");
      running.push(el("tr", {}, el("td", {}, q.queue), el("td", {}, jobLink(r.job)),
        el("td", { class: "num" }, r.priority), el("td", { class: "num" }, r.attempt), el("td", {}, nodes)));
    }
  }
  fill("running", running, "nothing is running", 5);
}

// -- usage over time -----------------------------------------------------------------------------

function drawUsage(usage, queues) {
  const plot = document.getElementById("usage");
  const legend = document.getElementById("usage-legend");
  const W = 1000, H = 260, L = 44, R = 10, T = 10, B = 24;
  const leaves = queues.filter((q) => q.children.length === 0).map((q) => q.queue);
  const series = leaves.map((id) => ({ id, points: ((usage.queues[id] || {}).points || []) })).filter((s) => s.points.length);
  const cluster = (usage.cluster.points || []);
  const now = usage.as_of.ts;
  const starts = series.map((s) => s.points[0].ts).concat(cluster.length ? [cluster[0].ts] : []);
  plot.replaceChildren();
  legend.replaceChildren();
  if (!starts.length || !now) {
    plot.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", fill: "#6b7280" }, "no usage yet"));
    return;
  }
  // From the first moment the cluster had GPUs: the empty start-up is not worth the width.
  const firstCapacity = cluster.find((p) => p.capacity.gpu > 0);
  const t0 = firstCapacity ? firstCapacity.ts : Math.min(...starts), t1 = Math.max(now, t0 + 1000);
  const capMax = Math.max(1, ...cluster.map((p) => p.capacity.gpu));
  const x = (t) => L + ((W - L - R) * (t - t0)) / (t1 - t0);
  const y = (v) => H - B - ((H - T - B) * v) / capMax;
  const valueAt = (points, t) => { let v = 0; for (const p of points) { if (p.ts > t) break; v = p.allocated.gpu; } return v; };
  const clampT = (t) => Math.max(t0, t);
  // Change points of every series: the stacked areas step at each of them.
  const times = [...new Set([t0, t1, ...series.flatMap((s) => s.points.map((p) => clampT(p.ts)))])].sort((a, b) => a - b);
  for (let g = 0; g <= 4; g++) {
    const v = (capMax * g) / 4;
    plot.append(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#e5e7eb" }));
    plot.append(svg("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", "font-size": 11, fill: "#6b7280" }, fmtNum(v)));
  }
  for (let g = 0; g <= 5; g++) {
    const t = t0 + ((t1 - t0) * g) / 5;
    plot.append(svg("text", { x: x(t), y: H - 6, "text-anchor": g === 0 ? "start" : g === 5 ? "end" : "middle", "font-size": 11, fill: "#6b7280" }, fmtTime(t)));
  }
  let below = times.map(() => 0);
  series.forEach((s, i) => {
    const colour = COLOURS[i % COLOURS.length];
    const top = times.map((t, k) => below[k] + valueAt(s.points, t));
    let d = `M${x(times[0])},${y(below[0])}`;
    const upper = [], lower = [];
    for (let k = 0; k < times.length; k++) {
      const tNext = k + 1 < times.length ? times[k + 1] : t1;
      upper.push(`L${x(times[k])},${y(top[k])}`, `L${x(tNext)},${y(top[k])}`);
      lower.unshift(`L${x(tNext)},${y(below[k])}`, `L${x(times[k])},${y(below[k])}`);
    }
    d += upper.join("") + lower.join("") + "Z";
    plot.append(svg("path", { d, fill: colour, "fill-opacity": 0.55, stroke: colour, "stroke-width": 1, class: "series", "data-queue": s.id }, svg("title", {}, s.id)));
    below = top;
    legend.append(el("span", {}, el("i", { style: `background:${colour}` }), `${s.id} (${fmtNum(valueAt(s.points, now))} now)`));
  });
  if (cluster.length) {
    let d = "";
    cluster.forEach((p, k) => {
      const tNext = k + 1 < cluster.length ? cluster[k + 1].ts : t1;
      if (tNext < t0) return;
      d += `${d ? "L" : "M"}${x(clampT(p.ts))},${y(p.capacity.gpu)}L${x(tNext)},${y(p.capacity.gpu)}`;
    });
    plot.append(svg("path", { d, fill: "none", stroke: "#111827", "stroke-dasharray": "5 4", "stroke-width": 1.5 }, svg("title", {}, "cluster capacity")));
    legend.append(el("span", {}, el("i", { style: "background:#111827" }), `capacity (${fmtNum(cluster[cluster.length - 1].capacity.gpu)})`));
  }
}

// -- what just happened, and the nodes ----------------------------------------------------------

function drawRecent(preemptions, rejections) {
  fill("preemptions", preemptions.preemptions.slice(0, 15).map((p) =>
    el("tr", {}, el("td", {}, fmtTime(p.ts)), el("td", {}, jobLink(p.job)), el("td", {}, p.node),
      el("td", {}, el("span", { class: "pill" }, p.reason)), el("td", {}, p.by ? jobLink(p.by) : ""))), "no preemptions", 5);
  fill("rejections", rejections.rejections.slice(0, 15).map((r) =>
    el("tr", {}, el("td", {}, fmtTime(r.ts)), el("td", {}, (r.topic || "").replace(/^.*quotaflow\./, "")),
      el("td", { class: "reason" }, r.reason), el("td", { class: "input" }, r.input))), "no rejections", 4);
}

function drawNodes(nodes) {
  fill("nodes", nodes.nodes.map((n) => {
    const use = n.capacity.gpu ? n.allocated.gpu / n.capacity.gpu : 0;
    return el("tr", {}, el("td", {}, n.node), el("td", {}, el("span", { class: `pill ${n.lost ? "lost" : "live"}` }, n.lost ? "lost" : "live")),
      el("td", { class: "num" }, `${fmtNum(n.allocated.gpu)} / ${fmtNum(n.capacity.gpu)}`),
      el("td", {}, svg("svg", { width: 244, height: 12 }, svg("rect", { x: 0, y: 1, width: 240, height: 10, fill: "#eef0f4", rx: 2 }),
        svg("rect", { x: 0, y: 1, width: 240 * Math.min(1, use), height: 10, fill: "var(--alloc)", rx: 2 }))),
      el("td", {}, Object.entries(n.jobs).map(([j, t]) => `${j}×${t}`).join(", ")),
      el("td", {}, fmtTime(n.last_heartbeat_ts)));
  }), "no nodes have reported", 6);
}

function drawHealth(health) {
  const status = document.getElementById("status");
  const live = health.liveness || {};
  const lag = live.lag;
  const stale = live.last_record_s && live.now_s - live.last_record_s > 30;
  status.textContent = `journal seq ${health.seq}` + (lag === null || lag === undefined ? "" : ` · lag ${lag}`) + (stale ? " · no records for " + Math.round(live.now_s - live.last_record_s) + "s" : "");
  status.className = "status " + (stale || (lag || 0) > 1000 ? "bad" : "ok");
}

// -- the job page -------------------------------------------------------------------------------

async function drawJob(id) {
  document.getElementById("job-title").textContent = `Job ${id}`;
  let job;
  try { job = await get(`/jobs/${encodeURIComponent(id)}`); } catch (e) {
    document.getElementById("job-summary").textContent = `job ${id} is not in the journal`;
    fill("timeline", [], "no timeline", 7);
    return;
  }
  const x = job.explanation || {};
  document.getElementById("job-title").replaceChildren(`Job ${id} `, el("span", { class: `pill ${job.status}` }, job.status || "?"), el("span", { class: "muted" }, ` queue ${job.queue || "?"}`));
  document.getElementById("job-summary").textContent = x.summary || "";
  const list = document.getElementById("job-explain");
  list.replaceChildren();
  if (x.requeued_after) list.append(el("li", {}, "last preemption: " + x.requeued_after));
  for (const p of x.preemptions || []) if (p !== x.requeued_after) list.append(el("li", {}, "history: " + p));
  for (const m of x.made_room_by || []) list.append(el("li", {}, "made room: " + m));
  fill("timeline", job.timeline.map((e) => el("tr", {}, el("td", {}, fmtTime(e.ts)), el("td", { class: "num" }, e.seq), el("td", {}, e.event),
    el("td", {}, e.node || ""), el("td", { class: "num" }, e.attempt ?? ""), el("td", { class: "reason" }, e.reason || e.outcome || ""),
    el("td", {}, e.by ? jobLink(e.by) : e.victim ? jobLink(e.victim) : ""))), "no timeline", 7);
}

// -- refresh ------------------------------------------------------------------------------------

let busy = false;
async function refresh() {
  if (busy) return;
  busy = true;
  try {
    const route = location.hash.match(/^#\/job\/(.+)$/);
    document.getElementById("overview").hidden = !!route;
    document.getElementById("jobpage").hidden = !route;
    const health = await get("/health");
    drawHealth(health);
    if (route) {
      await drawJob(decodeURIComponent(route[1]));
    } else {
      const [queues, usage, nodes, preemptions, rejections] = await Promise.all([
        get("/queues"), get("/usage?points=1"), get("/nodes"), get("/preemptions"), get("/rejections"),
      ]);
      drawQueues(queues);
      drawPending(queues);
      drawUsage(usage, queues.queues);
      drawRecent(preemptions, rejections);
      drawNodes(nodes);
    }
    document.getElementById("asof").textContent = `as of ${fmtTime(health.ts)} · refreshed ${new Date().toLocaleTimeString([], { hour12: false })}`;
    document.body.dataset.refreshed = String(Date.now());
  } catch (e) {
    const status = document.getElementById("status");
    status.textContent = `projections unreachable: ${e.message}`;
    status.className = "status bad";
  } finally {
    busy = false;
  }
}

window.addEventListener("hashchange", refresh);
setInterval(() => { if (document.getElementById("live").checked) refresh(); }, REFRESH_MS);
refresh();
