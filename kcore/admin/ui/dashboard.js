// kcore dashboard: polls the /v1 API of the node that served it and draws what it answers.
// Plain JavaScript, no build step, nothing loaded from elsewhere (the page's CSP forbids it).
// Every value from the API goes into the page as text (textContent), never as HTML.
"use strict";

const POLL_MS = 3000;
const CHART_MS = 5 * 60 * 1000; // the lag chart shows the last five minutes of polls
const THROUGHPUT_MS = 30 * 1000;
const TOKEN_KEY = "kcore.admin.token";
const STATE_ORDER = [
  "MIRRORING", "LOG_TRUNCATION", "EPOCH_FENCING", "PAUSING", "PAUSED",
  "STOPPING", "STOPPED", "FAILED", "UNKNOWN",
];

// mirror name -> [{t, lag, leo}]: the polls this page has seen (lag and log end offsets summed
// over the mirror's partitions whose numbers this node knows).
const history = new Map();
let pollTimer = null;
let polling = false;

class AuthNeeded extends Error {}
class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

// -- the API ---------------------------------------------------------------------------------

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  let doc = null;
  if (response.status !== 204) {
    try { doc = await response.json(); } catch (e) { doc = null; }
  }
  if (response.status === 401) {
    askForToken(Boolean(token));
    throw new AuthNeeded("a token is needed");
  }
  if (!response.ok) throw new ApiError(response.status, doc);
  return { status: response.status, doc, location: response.headers.get("Location") };
}

// -- small DOM helpers -------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const svgEl = (tag, attrs) => {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
};

const known = (n) => typeof n === "number" && n >= 0;
const number = (n) => (known(n) ? n.toLocaleString("en-US") : "–");

function age(ms) {
  if (!known(ms)) return "never";
  if (ms < 1000) return "just now";
  const s = ms / 1000;
  if (s < 90) return `${s.toFixed(s < 10 ? 1 : 0)} s ago`;
  return `${Math.round(s / 60)} min ago`;
}

function rate(perSecond) {
  if (perSecond === null) return "–";
  if (perSecond >= 1e6) return `${(perSecond / 1e6).toFixed(1)}M rec/s`;
  if (perSecond >= 1e4) return `${(perSecond / 1e3).toFixed(1)}k rec/s`;
  return `${perSecond.toFixed(perSecond < 10 ? 1 : 0)} rec/s`;
}

function setStatus(ok, text) {
  document.getElementById("status-dot").className = `dot ${ok ? "ok" : "bad"}`;
  document.getElementById("status-text").textContent = text;
}

function notice(text, isError) {
  const box = document.getElementById("notice");
  box.textContent = text;
  box.className = `notice${isError ? " error" : ""}`;
  box.hidden = !text;
}

// -- the token prompt --------------------------------------------------------------------------

function askForToken(refused) {
  const dialog = document.getElementById("token");
  document.getElementById("token-error").hidden = !refused;
  if (refused) sessionStorage.removeItem(TOKEN_KEY);
  setStatus(false, "token needed");
  if (!dialog.open) {
    dialog.showModal();
    document.getElementById("token-input").focus();
  }
}

function setUpTokenDialog() {
  const form = document.getElementById("token-form");
  form.addEventListener("submit", (event) => {
    const input = document.getElementById("token-input");
    const token = input.value.trim();
    if (!token) { event.preventDefault(); return; }
    sessionStorage.setItem(TOKEN_KEY, token);
    input.value = "";
    setTimeout(refresh, 0);
  });
  document.getElementById("token").addEventListener("cancel", (e) => e.preventDefault());
  const forget = document.getElementById("forget-token");
  forget.addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    forget.hidden = true;
    refresh();
  });
}

// -- the confirmation dialog -----------------------------------------------------------------

function confirmAction(title, text, okLabel) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = okLabel;
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
    document.getElementById("confirm-cancel").focus();
  });
}

const ACTIONS = {
  pause: {
    label: "Pause",
    title: (m) => `Pause mirror ${m}?`,
    text: (m) => `Every mirroring topic of ${m} stops fetching from the source. The topics stay read-only; Resume carries on where they stopped.`,
    enabled: (counts) => counts.MIRRORING > 0,
  },
  resume: {
    label: "Resume",
    title: (m) => `Resume mirror ${m}?`,
    text: (m) => `Every paused topic of ${m} fetches from the source again.`,
    enabled: (counts) => counts.PAUSED > 0 || counts.PAUSING > 0,
  },
  stop: {
    label: "Stop",
    title: (m) => `Stop mirror ${m}? (failover)`,
    text: (m) => `Every topic of ${m} stops mirroring and becomes writable on this cluster. Open source transactions are aborted. This cannot be undone by Resume: mirroring again copies the topics from scratch.`,
    enabled: (counts, total) => total > (counts.STOPPED || 0),
  },
};

async function runAction(mirror, action) {
  const spec = ACTIONS[action];
  if (!(await confirmAction(spec.title(mirror), spec.text(mirror), spec.label))) return;
  notice(`${spec.label} of ${mirror}: sent…`);
  try {
    let answer = await api("POST", `/v1/mirrors/${encodeURIComponent(mirror)}/${action}`, { include: [".*"] });
    let op = answer.doc;
    while (answer.status === 202 && op.status === "running") {
      notice(`${spec.label} of ${mirror}: ${op.phase || "running"}…`);
      await new Promise((r) => setTimeout(r, 1000));
      answer = await api("GET", answer.location || `/v1/mirrors/${encodeURIComponent(mirror)}/operations/${op.id}`);
      op = answer.doc;
    }
    const refused = (op.topics || []).filter((t) => t.error);
    if (op.status === "failed") {
      notice(`${spec.label} of ${mirror} failed: ${op.error.message}`, true);
    } else if (refused.length) {
      notice(`${spec.label} of ${mirror}: ${refused.map((t) => `${t.topic}: ${t.message}`).join("; ")}`, true);
    } else {
      notice(`${spec.label} of ${mirror}: done for ${(op.topics || []).map((t) => t.topic).join(", ") || "no topic"}.`);
    }
  } catch (e) {
    if (e instanceof AuthNeeded) notice(`${spec.label} of ${mirror}: enter the token, then try again.`, true);
    else notice(`${spec.label} of ${mirror} refused: ${e.message}`, true);
  }
  refresh();
}

// -- the cluster panel ---------------------------------------------------------------------------

function pick(obj, ...keys) {
  for (const key of keys) if (obj && obj[key] !== undefined && obj[key] !== null) return obj[key];
  return undefined;
}

async function optional(path) {
  try { return (await api("GET", path)).doc; } catch (e) {
    if (e instanceof AuthNeeded) throw e;
    return undefined; // not served by this node (yet), or failing: the tile says unavailable
  }
}

async function renderCluster() {
  // /v1/cluster and /v1/topics (kcore/admin/api): the controller shown is the metadata
  // quorum's leader (null when the caller may not describe the cluster).
  const [cluster, topicList] = await Promise.all([optional("/v1/cluster"), optional("/v1/topics")]);
  const topics = pick(topicList, "topics");
  const values = {
    cluster_id: pick(cluster, "cluster_id"),
    brokers: pick(cluster, "broker_count"),
    controller: pick(cluster, "active_controller_id"),
    topics: Array.isArray(topics) ? topics.filter((t) => !t.internal).length : undefined,
  };
  for (const node of document.querySelectorAll("#cluster [data-field]")) {
    const value = values[node.dataset.field];
    node.textContent = value === undefined ? "unavailable" : String(value);
    node.classList.toggle("unavailable", value === undefined);
  }
}

// -- the mirrors -------------------------------------------------------------------------------

function record(name, partitions) {
  const points = history.get(name) || [];
  let lag = 0;
  let leo = 0;
  for (const p of partitions) {
    if (known(p.lag)) lag += p.lag;
    if (known(p.destination_log_end_offset)) leo += p.destination_log_end_offset;
  }
  const now = Date.now();
  points.push({ t: now, lag, leo });
  while (points.length > 2 && points[0].t < now - CHART_MS) points.shift();
  history.set(name, points);
  return points;
}

// Records per second copied into the destination: log end offsets over the last half minute.
function throughput(points) {
  if (points.length < 2) return null;
  const b = points[points.length - 1];
  let a = points.find((p) => p.t >= b.t - THROUGHPUT_MS);
  if (a === b) a = points[points.length - 2];
  const seconds = (b.t - a.t) / 1000;
  return seconds > 0 ? Math.max(b.leo - a.leo, 0) / seconds : null;
}

function span(ms) {
  return ms >= 60000 ? `${Math.round(ms / 60000)} min` : `${Math.max(1, Math.round(ms / 1000))} s`;
}

// The lag over the polls this page kept: the last five minutes, or since the page opened.
function chart(points) {
  const width = 600;
  const height = 100;
  const now = Date.now();
  const window = Math.min(CHART_MS, Math.max(now - points[0].t, POLL_MS));
  const highest = Math.max(...points.map((p) => p.lag));
  const scale = Math.max(1, highest);
  const x = (t) => (width * (t - (now - window))) / window;
  const y = (v) => height - 4 - ((height - 8) * v) / scale;
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", role: "img", "aria-label": `lag over the last ${span(window)}` });
  for (const f of [0.25, 0.5, 0.75]) svg.append(svgEl("line", { class: "grid", x1: 0, x2: width, y1: height * f, y2: height * f }));
  const coords = points.map((p) => `${x(p.t).toFixed(1)},${y(p.lag).toFixed(1)}`);
  const first = x(points[0].t).toFixed(1);
  const last = x(points[points.length - 1].t).toFixed(1);
  svg.append(svgEl("polygon", { class: "area", points: `${first},${height} ${coords.join(" ")} ${last},${height}` }));
  svg.append(svgEl("polyline", { class: "line", points: coords.join(" ") }));
  return el("div", { class: "chart" },
    el("div", { class: "chart-head" }, el("span", {}, `Lag (records), last ${span(window)}`), el("span", {}, `max ${number(highest)}`)),
    svg,
    el("div", { class: "chart-foot" }, el("span", {}, `${span(window)} ago`), el("span", {}, "now")));
}

function stat(label, value, field) {
  return el("div", { class: "stat" }, el("div", { class: "label" }, label), el("div", { class: "value", "data-stat": field }, value));
}

function renderMirror(summary, described) {
  const name = summary.mirror;
  const partitions = described.topics.flatMap((t) => t.partitions.map((p) => ({ topic: t.topic, ...p })));
  const counts = {};
  for (const p of partitions) counts[p.state] = (counts[p.state] || 0) + 1;
  const points = record(name, partitions);
  const lag = points[points.length - 1].lag;
  const sync = described.metadata_sync;
  const failed = partitions.filter((p) => p.state === "FAILED");
  // Partitions whose leader did not answer the node this page asks: their numbers are unknown.
  const unknown = [...new Set(partitions.filter((p) => p.note).map((p) => p.note))];

  const buttons = Object.entries(ACTIONS).map(([action, spec]) =>
    el("button", {
      type: "button",
      class: action === "stop" ? "danger" : "secondary",
      "data-action": action,
      disabled: !spec.enabled(counts, partitions.length),
      onclick: () => runAction(name, action),
    }, spec.label));

  const rows = partitions.map((p) =>
    el("tr", { class: p.state === "FAILED" ? "failed" : null, "data-partition": `${p.topic}-${p.partition}` },
      el("td", {}, p.topic),
      el("td", { class: "num" }, p.partition),
      el("td", {}, el("span", { class: `badge state s-${p.state}` }, p.state)),
      el("td", { class: "num mid" }, number(p.source_high_watermark)),
      el("td", { class: "num wide" }, number(p.source_last_stable_offset)),
      el("td", { class: "num mid leo" }, number(p.destination_log_end_offset)),
      el("td", { class: "num", title: p.note || null }, number(p.lag)),
      el("td", { class: "wide" }, known(p.last_fetch_age_ms) ? age(p.last_fetch_age_ms) : "–")));

  return el("article", { class: "mirror", "data-mirror": name },
    el("div", { class: "mirror-head" },
      el("div", {},
        el("h3", { class: "mirror-name" }, name),
        el("div", { class: "mirror-source" }, "from ", el("span", { class: "mono" }, summary.source_bootstrap_servers),
          summary.source_cluster_id ? ` · cluster ${summary.source_cluster_id}` : "")),
      el("div", { class: "buttons" }, buttons)),
    el("div", { class: "badges" },
      partitions.length ? STATE_ORDER.filter((s) => counts[s]).map((s) => el("span", { class: `badge s-${s}` }, `${counts[s]} ${s}`))
        : el("span", { class: "badge" }, "no topic yet")),
    el("div", { class: "stats" },
      stat("Lag", number(lag), "lag"),
      stat("Throughput", rate(throughput(points)), "throughput"),
      stat("Partitions", String(partitions.length), "partitions"),
      stat("Metadata sync", age(sync.last_sync_age_ms), "sync")),
    chart(points),
    failed.length ? el("div", { class: "alert failed" }, el("strong", {}, `${failed.length} FAILED partition(s)`),
      el("ul", {}, failed.map((p) => el("li", {}, `${p.topic}-${p.partition}: ${p.failed_reason || "no reason recorded"}`))))
      : null,
    unknown.length ? el("div", { class: "alert unknown" }, el("strong", {}, "Numbers unknown"),
      el("ul", {}, unknown.map((n) => el("li", {}, n)))) : null,
    sync.errors.length ? el("div", { class: "alert sync" }, el("strong", {}, "Metadata sync"),
      el("ul", {}, sync.errors.map((e) => el("li", {}, e)))) : null,
    partitions.length ? el("div", { class: "table-wrap" },
      el("table", {},
        el("thead", {}, el("tr", {},
          el("th", {}, "Topic"), el("th", { class: "num" }, "Part."), el("th", {}, "State"),
          el("th", { class: "num mid" }, "Source HW"), el("th", { class: "num wide" }, "Source LSO"),
          el("th", { class: "num mid" }, "Dest. LEO"), el("th", { class: "num" }, "Lag"), el("th", { class: "wide" }, "Last fetch"))),
        el("tbody", {}, rows))) : null);
}

async function renderMirrors() {
  const listed = (await api("GET", "/v1/mirrors")).doc.mirrors;
  const described = await Promise.all(listed.map(async (summary) => {
    try {
      return [summary, (await api("GET", `/v1/mirrors/${encodeURIComponent(summary.mirror)}`)).doc];
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) return null; // deleted meanwhile
      throw e;
    }
  }));
  const cards = described.filter(Boolean).map(([summary, doc]) => renderMirror(summary, doc));
  for (const name of [...history.keys()]) {
    if (!listed.some((m) => m.mirror === name)) history.delete(name);
  }
  document.getElementById("mirrors").replaceChildren(...cards);
  document.getElementById("no-mirrors").hidden = cards.length > 0;
  document.getElementById("mirror-count").textContent = cards.length ? `${cards.length} mirror(s)` : "";
}

// -- the poll loop -----------------------------------------------------------------------------

async function refresh() {
  if (polling) return;
  polling = true;
  clearTimeout(pollTimer);
  try {
    await Promise.all([renderCluster(), renderMirrors()]);
    setStatus(true, `updated ${new Date().toLocaleTimeString()}`);
    document.getElementById("forget-token").hidden = !sessionStorage.getItem(TOKEN_KEY);
    const tokenDialog = document.getElementById("token");
    if (tokenDialog.open) tokenDialog.close();
  } catch (e) {
    if (!(e instanceof AuthNeeded)) setStatus(false, `not answering: ${e.message}`);
  } finally {
    polling = false;
    pollTimer = setTimeout(refresh, POLL_MS);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  setUpTokenDialog();
  refresh();
});
