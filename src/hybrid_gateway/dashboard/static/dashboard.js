// The dashboard's only script: poll /dashboard/data.json, render tiles, tables and two SVGs.
// No libraries and no network beyond this gateway, so the page works offline.
"use strict";

const COLORS = ["#2e90fa", "#f79009", "#12b76a", "#9e77ed", "#f04438", "#0ba5ec", "#667085"];
const params = new URLSearchParams(location.search);
const EVERY_S = Math.max(1, Number(params.get("refresh")) || 5);
const history = [];  // [{t: seconds, requests}] for the request-rate chart
const laneColors = new Map();

function colorOf(lane) {
  if (!laneColors.has(lane)) laneColors.set(lane, COLORS[laneColors.size % COLORS.length]);
  return laneColors.get(lane);
}

const fmt = {
  count: (n) => String(n),
  percent: (r) => (r === null ? "–" : (r * 100).toFixed(1) + " %"),
  usd: (v) => (v === null ? "–" : "$" + (v >= 1 ? v.toFixed(2) : v.toFixed(6))),
  seconds: (s) => {
    if (s === null) return "–";
    return s < 10 ? Math.round(s * 1000) + " ms" : s.toFixed(1) + " s";
  },
  duration: (s) => {
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
    return h > 0 ? `${h} h ${m} min` : m > 0 ? `${m} min` : `${Math.floor(s)} s`;
  },
};

function setMetric(name, text) {
  for (const el of document.querySelectorAll(`[data-metric="${name}"]`)) el.textContent = text;
}

function cell(text, metric) {
  const td = document.createElement("td");
  td.textContent = text;
  if (metric) td.dataset.metric = metric;
  return td;
}

function fillRows(tbodyId, rows) {
  const tbody = document.getElementById(tbodyId);
  tbody.replaceChildren(...rows);
}

function renderLanes(lanes) {
  fillRows("lanes", lanes.map((lane) => {
    const tr = document.createElement("tr");
    tr.dataset.lane = lane.lane;
    const name = cell("", "lane");
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = colorOf(lane.lane);
    name.append(swatch, lane.lane === "none" ? "not routed" : lane.lane);
    tr.append(
      name,
      cell(fmt.count(lane.requests), "lane-requests"),
      cell(fmt.percent(lane.share), "lane-share"),
      cell(fmt.count(lane.cache_hits), "lane-cache-hits"),
      cell(fmt.count(lane.errors), "lane-errors"),
      cell(fmt.seconds(lane.p50_s), "lane-p50"),
      cell(fmt.seconds(lane.p95_s), "lane-p95"),
    );
    return tr;
  }));
  const svg = document.getElementById("share-bar");
  const ns = "http://www.w3.org/2000/svg";
  let x = 0;
  svg.replaceChildren(...lanes.map((lane) => {
    const rect = document.createElementNS(ns, "rect");
    const width = lane.share * 1000;
    rect.setAttribute("x", String(x));
    rect.setAttribute("width", String(width));
    rect.setAttribute("height", "28");
    rect.setAttribute("fill", colorOf(lane.lane));
    const title = document.createElementNS(ns, "title");
    title.textContent = `${lane.lane}: ${fmt.percent(lane.share)}`;
    rect.append(title);
    x += width;
    return rect;
  }));
}

function renderRules(rules) {
  fillRows("rules", rules.map((rule) => {
    const tr = document.createElement("tr");
    tr.append(cell(rule.rule), cell(rule.lane), cell(fmt.count(rule.decisions)),
              cell(fmt.percent(rule.share)));
    return tr;
  }));
}

function renderBreakers(breakers) {
  fillRows("breakers", breakers.map((b) => {
    const tr = document.createElement("tr");
    const state = cell(b.state.replace("_", "-"));
    state.className = "state-" + b.state;
    tr.append(cell(b.channel), state);
    return tr;
  }));
}

function renderEndpoints(endpoints) {
  document.getElementById("endpoints-section").hidden = !endpoints.length;
  fillRows("endpoints", endpoints.map((e) => {
    const tr = document.createElement("tr");
    const state = cell(e.up ? "up" : "out");
    state.className = e.up ? "state-closed" : "state-open";
    tr.append(cell(e.channel), cell(e.endpoint), state, cell(fmt.count(e.in_flight)));
    return tr;
  }));
}

function renderLearning(learning) {
  const shown = learning !== null && (learning.audits.length > 0 || learning.scopes.length > 0
    || learning.router_model_version !== null);
  document.getElementById("learning-section").hidden = !shown;
  if (!shown) return;
  fillRows("audits", learning.audits.map((a) => {
    const tr = document.createElement("tr");
    tr.append(cell(a.kind), cell(a.outcome), cell(fmt.count(a.audits)));
    return tr;
  }));
  fillRows("scopes", learning.scopes.map((s) => {
    const tr = document.createElement("tr");
    tr.append(cell(s.scope), cell(fmt.count(s.audited_hits)), cell(fmt.count(s.false_hits)),
              cell(fmt.percent(s.bound)));
    return tr;
  }));
  const notes = [`audit spend ${fmt.usd(learning.cost_usd)}`,
                 `${fmt.count(learning.skipped)} skipped under load or caps`];
  if (learning.cache_threshold !== null) notes.push(`cache threshold ${learning.cache_threshold.toFixed(4)}`);
  if (learning.router_model_version !== null) notes.push(`router model v${learning.router_model_version}`);
  document.getElementById("learning-note").textContent = notes.join(" · ");
}

function renderRate(data) {
  history.push({t: performance.now() / 1000, requests: data.requests});
  if (history.length > 120) history.shift();
  const rates = [];
  for (let i = 1; i < history.length; i++) {
    const dt = history[i].t - history[i - 1].t;
    rates.push(dt > 0 ? (history[i].requests - history[i - 1].requests) / dt : 0);
  }
  setMetric("request-rate", rates.length ? rates[rates.length - 1].toFixed(1) : "–");
  const svg = document.getElementById("rate-chart");
  document.getElementById("rate-note").textContent = rates.length
    ? `last ${Math.round(history[history.length - 1].t - history[0].t)} s, peak ${Math.max(...rates).toFixed(1)} req/s`
    : "measuring: the rate appears after the next refresh";
  const top = Math.max(1, ...rates);
  const points = rates.map((r, i) => `${(i / Math.max(1, rates.length - 1)) * 600},${78 - (r / top) * 74}`);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", points.join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", COLORS[0]);
  line.setAttribute("stroke-width", "2");
  line.setAttribute("vector-effect", "non-scaling-stroke");
  svg.replaceChildren(line);
}

function render(data) {
  setMetric("requests", fmt.count(data.requests));
  setMetric("hit-rate", fmt.percent(data.hit_rate));
  setMetric("cache-hits", fmt.count(data.cache_hits));
  setMetric("cost-per-1k", fmt.usd(data.cost_per_1k));
  setMetric("cost", fmt.usd(data.cost_usd));
  setMetric("saved", fmt.usd(data.saved_usd));
  setMetric("errors", fmt.count(data.errors));
  setMetric("feedback-up", fmt.count(data.feedback_up));
  setMetric("feedback-down", fmt.count(data.feedback_down));
  setMetric("uptime", fmt.duration(data.uptime_s));
  renderLanes(data.lanes);
  renderRules(data.rules);
  renderBreakers(data.breakers);
  renderEndpoints(data.endpoints || []);
  renderLearning(data.learning || null);
  renderRate(data);
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const response = await fetch("/dashboard/data.json", {cache: "no-store"});
    if (!response.ok) throw new Error("HTTP " + response.status);
    render(await response.json());
    status.dataset.state = "live";
    status.textContent = "live · " + new Date().toLocaleTimeString();
  } catch (err) {
    status.dataset.state = "error";
    status.textContent = "no data: " + err.message;
  } finally {
    setTimeout(refresh, EVERY_S * 1000);
  }
}

document.getElementById("every").textContent = String(EVERY_S);
refresh();
