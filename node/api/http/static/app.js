// gnomon dashboard: plain JavaScript over the node's HTTP API (/v1/...), live from /v1/events.
// Every element is built with textContent (no innerHTML of data). No dependencies.
"use strict";

const main = document.getElementById("main");
const STATE_NAMES = (s) => (s || "").replace(/^(RUN|TASK)_STATE_/, "").toLowerCase();

// -- helpers ---------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = tag === "svg" || attrs?.svg ? document.createElementNS("http://www.w3.org/2000/svg", tag)
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "svg" || v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    // Through the CSSOM: the page's Content-Security-Policy refuses style attributes.
    else if (k === "style") for (const d of v.split(";")) {
      const [prop, ...rest] = d.split(":");
      if (prop.trim()) el.style.setProperty(prop.trim(), rest.join(":").trim());
    }
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
const s = (tag, attrs, ...children) => h(tag, { ...attrs, svg: true }, ...children);

// A limit in the units a person reads (12h, not 43200000), the raw value in its title.
const DURATION_UNITS = [["d", 86400000], ["h", 3600000], ["m", 60000], ["s", 1000], ["ms", 1]];
function humanMs(ms) {
  if (!ms) return "0";
  const parts = [];
  for (const [unit, size] of DURATION_UNITS) {
    if (ms >= size && parts.length < 2) { parts.push(`${Math.floor(ms / size)}${unit}`); ms %= size; }
    else if (parts.length) break;  // 1d 0h 5m reads wrong: at most two adjacent units
  }
  return parts.join(" ") + (ms ? " …" : "");  // the rest is in the title
}
function humanBytes(n) {
  for (const [unit, size] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 1024]]) {
    if (n >= size && n % (size / 1024) === 0) return `${(n / size).toFixed(n % size ? 1 : 0)} ${unit}`;
  }
  return `${n} B`;
}
function limitText(key, value) {
  const n = Number(value);
  if (/Ms$/.test(key) && Number.isFinite(n)) return [humanMs(n), `${value} ms`];
  if (/Bytes$/.test(key) && Number.isFinite(n)) return [humanBytes(n), `${value} bytes`];
  return [String(value), ""];
}

// A bearer token for clusters that authenticate (`gnomon dev` prints the URL with #token=...):
// kept for this tab only, and taken out of the address bar.
const TOKEN = (() => {
  const m = location.hash.match(/(?:^#|&)token=([^&]+)/);
  if (m) {
    sessionStorage.setItem("gnomon-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem("gnomon-token") || "";
})();

function randomKey() {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

class ApiError extends Error {
  constructor(problem, status) {
    super(problem.detail || `HTTP ${status}`);
    this.problem = problem;
    this.status = status;
  }
}

// Writes go to the leader's origin directly, its HTTP address from GET /v1/cluster: a node
// without authentication answers CORS only to the cluster's own origins, and a write that a
// node of another origin redirects arrives with `Origin: null`, which no node allows. When
// the leader moved meanwhile (a network error: that redirect was refused; or a 503) the page
// asks /v1/cluster again and retries with the same Idempotency-Key.
let leaderAt = null; // { id, base } as last learned; base "" is this page's own node
async function leaderBase(fresh) {
  const known = leaderBadge.dataset.leader; // the event stream's view
  if (!fresh && leaderAt && (!known || known === leaderAt.id)) return leaderAt.base;
  leaderAt = null;
  try {
    const st = await api("GET", "/v1/cluster");
    const leader = st.nodes.find((n) => n.nodeId === st.leaderNodeId);
    const base = leader?.httpAddress ? `${location.protocol}//${leader.httpAddress}` : "";
    leaderAt = { id: st.leaderNodeId, base: base === location.origin ? "" : base };
  } catch {
    return ""; // this node then answers (a 503 without a leader, retried)
  }
  return leaderAt.base;
}

// Writes carry an Idempotency-Key, reused when a 503 (no leader yet) is retried: one effect.
// `write` false: a POST that is a read (a preview), which has no request id to key; it and
// GETs are asked of this page's node (a linearizable read on a follower is redirected from
// this origin to the leader, which keeps the page's Origin).
async function api(method, path, body, write = method !== "GET") {
  const opts = { method, headers: { Accept: "application/json" } };
  if (method !== "GET") {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body || {});
  }
  if (write) opts.headers["Idempotency-Key"] = randomKey();
  if (TOKEN) opts.headers.Authorization = `Bearer ${TOKEN}`;
  for (let attempt = 1; ; attempt++) {
    let r;
    const base = write ? await leaderBase(attempt > 1) : "";
    try {
      r = await fetch(base + path, opts);
      // A follower redirects writes to the leader, another origin: browsers drop the
      // Authorization header on such a redirect, so ask the leader again, with it.
      if (r.redirected && r.status === 401 && TOKEN) r = await fetch(r.url, opts);
    } catch (e) {
      if (attempt < 4) { await delay(500 * attempt); continue; }
      const hint = base ? ` (writes go to the leader, ${base}: a page opened at an address other than a member's HTTP address needs its origin in http_cors_origins)` : "";
      throw new ApiError({ detail: `network: ${e.message}${hint}` }, 0);
    }
    const data = await r.json().catch(() => ({}));
    if (r.ok) return data;
    if (r.status === 401) {
      data.detail = `${data.detail || "unauthenticated"} (enter an API token at the top)`;
    }
    if (r.status === 503 && attempt < 4) {
      await delay(1000 * Number(r.headers.get("Retry-After") || 1));
      continue;
    }
    throw new ApiError(data, r.status);
  }
}
const delay = (ms) => new Promise((res) => setTimeout(res, ms));
const num = (x) => Number(x || 0);
function fmtTime(ms) {
  ms = num(ms);
  if (!ms) return "—";
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}
function fmtAgo(ms) {
  ms = num(ms);
  if (!ms) return "";
  const d = Math.round((ms - Date.now()) / 1000);
  const a = Math.abs(d);
  const t = a < 90 ? `${a}s` : a < 5400 ? `${Math.round(a / 60)}m` : a < 172800 ? `${Math.round(a / 3600)}h` : `${Math.round(a / 86400)}d`;
  return d >= 0 ? `in ${t}` : `${t} ago`;
}
// How long ago an instant of the leader's clock was ("just now" for one a little ahead of
// this browser's clock).
function sinceText(ms) { const t = fmtAgo(ms); return t.startsWith("in ") ? "just now" : t; }
function fmtDur(ms) {
  ms = num(ms);
  return ms < 1000 ? `${ms} ms` : ms < 120000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 60000)} min`;
}
const badge = (state) => h("span", { class: `state s-${STATE_NAMES(state)}`, text: STATE_NAMES(state) });
const runLink = (id) => h("a", { href: `#/runs/${encodeURIComponent(id)}`, text: id });
const jobLink = (id, text) => h("a", { href: `#/jobs/${encodeURIComponent(id)}`, text: text || id });
// A table in a region that scrolls sideways on a narrow screen: focusable, so the keyboard
// scrolls it too (a region with nothing focusable in it could not be reached).
function table(headers, rows, attrs) {
  const label = attrs?.["aria-label"] || `table of ${headers.filter(Boolean).slice(0, 3).join(", ")}`;
  return h("div", { class: "scroll", tabindex: "0", role: "region", "aria-label": label }, h("table", attrs,
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col", text: x })))),
    h("tbody", {}, rows)));
}
function message(el, text, ok) {
  el.replaceChildren(text ? h("div", { class: `msg ${ok ? "ok" : "bad"}`, role: ok ? "status" : "alert", text }) : "");
}
function schedText(sch) {
  if (!sch) return "";
  if (sch.cron) return `cron ${sch.cron.expression} ${sch.cron.timezone || "UTC"}`;
  if (sch.interval) return `every ${fmtDur(sch.interval.intervalMs)}`;
  if (sch.once) return `once at ${fmtTime(sch.once.atMs)}`;
  return "";
}
// A button that runs `fn`, disabled meanwhile, reporting an error into `out`.
function action(label, fn, out, cls) {
  const b = h("button", { type: "button", class: cls, text: label });
  b.addEventListener("click", async () => {
    b.disabled = true;
    try { await fn(); } catch (e) { if (out) message(out, e.message); else console.warn(e); }
    finally { b.disabled = false; }
  });
  return b;
}

// -- live updates ------------------------------------------------------------------------------

const live = document.getElementById("live");
const leaderBadge = document.getElementById("leader");
let refresh = null; // the current page's refresh function
let pending = null;
function scheduleRefresh() {
  if (pending || !refresh) return;
  pending = setTimeout(async () => {
    pending = null;
    const fn = refresh;
    try { await fn(); } catch (e) { console.warn("refresh:", e.message); }
  }, 250);
}
function connect() {
  const es = new EventSource(TOKEN ? `/v1/events?access_token=${encodeURIComponent(TOKEN)}`
    : "/v1/events");
  es.addEventListener("open", () => { live.textContent = "live"; live.className = "live on"; });
  es.addEventListener("error", () => { live.textContent = "reconnecting…"; live.className = "live off"; });
  es.addEventListener("cluster", (e) => {
    const c = JSON.parse(e.data);
    leaderBadge.textContent = `node ${c.nodeId} (${c.role}) · leader ${c.leaderNodeId || "none"} · term ${c.term}`;
    leaderBadge.dataset.leader = c.leaderNodeId || "";
    scheduleRefresh();
  });
  es.addEventListener("changes", scheduleRefresh);
  es.addEventListener("resync", scheduleRefresh);
}

// -- pages -------------------------------------------------------------------------------------

async function clusterPage() {
  main.replaceChildren(h("h1", { text: "Cluster" }), h("div", { id: "cluster" }));
  const box = document.getElementById("cluster");
  refresh = async () => {
    const st = await api("GET", "/v1/cluster");
    const byId = Object.fromEntries(st.nodes.map((n) => [n.nodeId, n]));
    box.replaceChildren(
      h("section", { class: "card" }, h("div", { class: "kv" },
        [["answering node", st.nodeId], ["leader", st.leaderNodeId || "none"], ["term", st.term],
          ["commit index", st.commitIndex], ["applied index", st.appliedIndex],
          ["apply lag (entries)", Math.max(0, num(st.commitIndex) - num(st.appliedIndex))],
          ["cluster time", fmtTime(st.clockMs)], ["jobs", st.jobs], ["active runs", st.activeRuns],
          ["dead letters", st.deadLetters], ["version", st.version]].map(([k, v]) =>
          h("div", { "data-testid": `kv-${k.replace(/ /g, "-")}` }, h("b", { text: k }), String(v)))),
      ),
      h("section", { class: "card" }, h("h2", { text: "Nodes" }),
        table(["node", "role", "raft", "gRPC", "match index", "lag", "health"],
          st.nodes.map((n) => h("tr", { "data-node": n.nodeId },
            h("td", { text: n.nodeId }), h("td", {}, h("span", { class: `state s-${n.role === "leader" ? "succeeded" : n.role === "follower" ? "running" : "failed"}`, text: n.role })),
            h("td", { text: n.raftAddress }), h("td", { text: n.grpcAddress }),
            // A follower knows only its own match index: the others' are the leader's to say.
            n.matchIndexKnown
              ? h("td", { text: n.matchIndex })
              : h("td", { text: "—", title: "known to the leader only: open the leader's dashboard" }),
            n.matchIndexKnown
              ? h("td", { text: String(Math.max(0, num(st.commitIndex) - num(n.matchIndex))) })
              : h("td", { text: "—", title: "known to the leader only" }),
            h("td", { text: n.connected ? "connected" : "unreachable" }))),
          { "data-testid": "nodes" })),
      h("section", { class: "card" }, h("h2", { text: `Leader changes seen by node ${st.nodeId}` }),
        (st.leaderChanges || []).length ? table(["seen at", "term", "leader", "before", "cause"],
          st.leaderChanges.map((c, i) => h("tr", { "data-change": i },
            h("td", { title: fmtTime(c.atMs), text: `${fmtTime(c.atMs)} (${sinceText(c.atMs)})` }), h("td", { text: c.term }),
            h("td", { text: c.leaderNodeId || "none" }), h("td", { text: c.previousLeaderNodeId || "—" }), h("td", { class: "wrap", text: c.cause }))),
          { "aria-label": "Leader changes" })
          : h("p", { class: "muted", text: "None seen yet." }),
        h("p", { class: "muted", text: "Each node records the changes it saw (node-local): open another node's dashboard for its view." })),
      h("section", { class: "card" }, h("h2", { text: "Replicated limits" }),
        h("div", { class: "kv" }, Object.entries(st.limits || {}).map(([k, v]) => {
          const [text, raw] = limitText(k, v);
          return h("div", { "data-limit": k }, h("b", { text: k }), h("span", { text, title: raw }));
        }))),
    );
    void byId;
  };
  await refresh();
}

// -- the jobs list: each job's health at a glance (#/jobs?show=warn&sort=success&backlog=1m) --
// GET /v1/jobs?health=true answers each job's last runs, success counts, duration and fire
// lateness percentiles and its queues (backlog, workers: the leader's). The page sorts and
// filters them; the filter, the sort and the backlog threshold live in the URL.

// A run's state as a glyph as well as a colour (never colour alone).
const RUN_GLYPHS = { succeeded: "✓", failed: "✗", running: "▶", queued: "…", cancelled: "⊘", skipped: "–" };
const JOB_SHOW_CHOICES = [["", "all"], ["failing", "with failed runs"], ["warn", "with warnings"],
  ["circuit", "circuit not closed"], ["late", "fires late (p99 over 1 s)"], ["paused", "paused"]];
const JOB_SORTS = { // key: [header, value of a row (larger sorts later)]
  name: ["name", (r) => r.job.spec.name.toLowerCase()],
  success: ["success", (r) => (r.rate === null ? 2 : r.rate)],
  duration: ["duration p50 / p99", (r) => num(r.health.durationP99Ms)],
  lateness: ["fire lateness p50 / p99", (r) => num(r.health.latenessP99Ms)],
  next: ["next fire", (r) => num(r.job.nextFireMs) || Infinity],
  warnings: ["warnings", (r) => -r.warnings.length],
};
const DEFAULT_BACKLOG = "1m";

function durationParam(text) {
  const m = (text || "").trim().match(/^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)$/);
  return m ? Math.round(Number(m[1]) * Object.fromEntries(DURATION_UNITS)[m[2]]) : null;
}

// What an on-call engineer should look at first: a queue without a worker, an old backlog.
function jobWarnings(health, backlogMs) {
  const out = [];
  for (const q of health.queues || []) {
    if (q.workersKnown && !num(q.workers)) out.push(`no worker on queue ${q.queue}`);
    if (num(q.oldestReadyAgeMs) > backlogMs) out.push(`queue ${q.queue}: oldest ready ${fmtDur(q.oldestReadyAgeMs)} (${q.ready} waiting)`);
  }
  return out;
}

function jobRow(job, health, backlogMs) {
  const ended = num(health.succeeded) + num(health.failed);
  return { job, health, rate: ended ? num(health.succeeded) / ended : null, warnings: jobWarnings(health, backlogMs),
    circuit: (job.circuit?.status || "CIRCUIT_STATUS_CLOSED").replace("CIRCUIT_STATUS_", "").toLowerCase().replace("unspecified", "closed") };
}

function jobShown(r, show) {
  if (show === "failing") return num(r.health.failed) > 0;
  if (show === "warn") return r.warnings.length > 0;
  if (show === "circuit") return r.circuit !== "closed";
  if (show === "late") return num(r.health.latenessP99Ms) > 1000;
  if (show === "paused") return !!r.job.paused;
  return true;
}

function healthStrip(health) {
  const runs = health.recentRuns || [];
  return h("div", { class: "strip mini", role: "list", "aria-label": `last ${runs.length} runs, oldest first` }, runs.map((r) => {
    const st = STATE_NAMES(r.state);
    const late = num(r.lateMs) > 1000 ? `, ${fmtDur(r.lateMs)} late` : "";
    return h("a", { role: "listitem", href: `#/runs/${encodeURIComponent(r.runId)}`, class: `s-${st}${late ? " late" : ""}`, "data-state": st,
      title: `${r.runId}: ${st}${num(r.durationMs) ? `, ${fmtDur(r.durationMs)}` : ""}${late}`, "aria-label": `run ${r.runId} ${st}${late}`,
      text: RUN_GLYPHS[st] || "?" });
  }));
}

function pair(a, b) { return num(a) || num(b) ? `${fmtDur(a)} / ${fmtDur(b)}` : "—"; }

function jobsFilterForm(q) {
  const input = (name, label, attrs) => h("label", {}, label, h("input", { id: `jobs-${name}`, name, value: q.get(name) || "", ...attrs }));
  const select = (name, label, choices) => h("label", {}, label, h("select", { id: `jobs-${name}`, name },
    choices.map(([value, text]) => h("option", { value, text, selected: (q.get(name) || "") === value }))));
  const form = h("form", { role: "search", "aria-label": "Filter jobs" },
    h("div", { class: "row" }, input("tenant", "Tenant", { placeholder: "all tenants" }), input("name", "Name contains", { placeholder: "any" }),
      select("show", "Show", JOB_SHOW_CHOICES),
      input("backlog", "Warn at a backlog older than", { placeholder: DEFAULT_BACKLOG, list: "jobs-backlogs" }),
      h("datalist", { id: "jobs-backlogs" }, ["30s", "1m", "5m", "15m", "1h"].map((x) => h("option", { value: x }))),
      h("div", { class: "btn-cell" }, h("button", { type: "submit", text: "Apply" }))));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const next = new URLSearchParams();
    for (const el of form.elements) if (el.name && el.value.trim()) next.set(el.name, el.value.trim());
    if (q.get("sort")) next.set("sort", q.get("sort"));
    location.hash = `#/jobs${next.toString() ? `?${next}` : ""}`;
  });
  return form;
}

// A sortable column's header: a button that sorts by it (again: the other way round).
function sortHeader(q, key) {
  const [label] = JOB_SORTS[key];
  const current = (q.get("sort") || "").replace(/^-/, "");
  const desc = (q.get("sort") || "").startsWith("-");
  const th = h("th", { scope: "col", "aria-sort": current === key ? (desc ? "descending" : "ascending") : "none" },
    h("button", { type: "button", class: "sort", "data-sort": key, onclick: () => {
      const next = new URLSearchParams(q);
      next.set("sort", current === key && !desc ? `-${key}` : key);
      location.hash = `#/jobs?${next}`;
    } }, label, current === key ? (desc ? " ▼" : " ▲") : ""));
  return th;
}

async function jobsPage() {
  const q = new URLSearchParams(location.hash.split("?")[1] || "");
  const list = h("div", { id: "jobs" });
  const out = h("div");
  main.replaceChildren(
    h("h1", { text: "Jobs" }),
    h("section", { class: "card" }, jobsFilterForm(q)),
    h("section", { class: "card" }, out, list),
    h("section", { class: "card" }, h("h2", { text: "New job" }), jobForm(null)),
  );
  refresh = async () => {
    const backlogMs = durationParam(q.get("backlog") || DEFAULT_BACKLOG);
    if (backlogMs === null) { message(out, `backlog: ${JSON.stringify(q.get("backlog"))} is not a duration (30s, 5m, 1h)`); return; }
    const tenant = (q.get("tenant") || "").trim();
    const path = tenant ? `/v1/tenants/${encodeURIComponent(tenant)}/jobs?limit=1000&health=true` : "/v1/jobs?limit=1000&health=true";
    const res = await api("GET", path);
    const needle = (q.get("name") || "").trim().toLowerCase();
    const sort = q.get("sort") || "";
    const [, value] = JOB_SORTS[sort.replace(/^-/, "")] || [null, null];
    const rows = res.jobs.filter((j) => !needle || j.spec.name.toLowerCase().includes(needle))
      .map((j) => jobRow(j, (res.health || {})[j.jobId] || {}, backlogMs)).filter((r) => jobShown(r, q.get("show") || ""));
    if (value) {
      const dir = sort.startsWith("-") ? -1 : 1;
      rows.sort((a, b) => { const x = value(a), y = value(b); return (x < y ? -1 : x > y ? 1 : 0) * dir; });
    }
    const workersUnknown = rows.some((r) => (r.health.queues || []).some((x) => !x.workersKnown));
    message(out, "");
    list.replaceChildren(rows.length ? h("div", { class: "scroll", tabindex: "0", role: "region", "aria-label": "Jobs" }, h("table", { "aria-label": "Jobs" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col", text: "job" }), sortHeader(q, "name"), h("th", { scope: "col", text: "tenant" }),
        h("th", { scope: "col", text: "last runs (oldest first)" }), sortHeader(q, "success"), sortHeader(q, "duration"), sortHeader(q, "lateness"),
        sortHeader(q, "next"), h("th", { scope: "col", text: "circuit" }), sortHeader(q, "warnings"), h("th", { scope: "col", text: "state" }),
        h("th", { scope: "col", text: "actions" }))),
      h("tbody", {}, rows.map((r) => h("tr", { "data-job": r.job.jobId },
        h("td", {}, jobLink(r.job.jobId)), h("td", {}, jobLink(r.job.jobId, r.job.spec.name)), h("td", { text: r.job.spec.tenant }),
        h("td", {}, healthStrip(r.health)),
        h("td", { "data-testid": "success", title: `${num(r.health.succeeded)} succeeded, ${num(r.health.failed)} failed of the runs shown`,
          text: r.rate === null ? "—" : `${Math.round(r.rate * 100)}%` }),
        h("td", { text: pair(r.health.durationP50Ms, r.health.durationP99Ms) }),
        h("td", { text: pair(r.health.latenessP50Ms, r.health.latenessP99Ms) }),
        h("td", { title: fmtTime(r.job.nextFireMs), text: r.job.paused ? "paused" : num(r.job.nextFireMs) ? fmtAgo(r.job.nextFireMs) : "—" }),
        h("td", {}, r.circuit === "closed" ? "closed" : h("span", { class: `state s-${r.circuit === "open" ? "failed" : "queued"}`, text: r.circuit })),
        h("td", { class: "wrap", "data-testid": "warnings" }, r.warnings.length ? h("ul", { class: "warnings" }, r.warnings.map((w) => h("li", { text: `⚠ ${w}` }))) : "—"),
        h("td", { text: r.job.paused ? "paused" : "active" }),
        h("td", {}, jobActions(r.job, out))))))) : h("p", { class: "muted", text: "No jobs match." }),
    workersUnknown ? h("p", { class: "muted", text: "Workers are known to the leader only: this answer came from a node that does not lead." }) : "");
  };
  await refresh();
}

// Trigger with parameters: the request's overlap policy for this one run.
function triggerForm(jobId, out) {
  const policy = h("select", { id: "trigger-overlap", name: "overlapPolicy" },
    ["OVERLAP_POLICY_UNSPECIFIED", "OVERLAP_POLICY_ALLOW_ALL", "OVERLAP_POLICY_SKIP", "OVERLAP_POLICY_BUFFER_ONE", "OVERLAP_POLICY_BUFFER_ALL"].map((k) =>
      h("option", { value: k, text: k === "OVERLAP_POLICY_UNSPECIFIED" ? "the job's" : k.replace("OVERLAP_POLICY_", "").toLowerCase() })));
  const params = h("textarea", { id: "trigger-params", name: "paramsJson", placeholder: '{"date": "2026-01-01"}', rows: "2" });
  const form = h("form", { "aria-label": "Trigger with parameters", class: "row" },
    h("label", { for: "trigger-params" }, "Parameters (a JSON object merged into every task's payload)", params),
    h("label", { for: "trigger-overlap" }, "Overlap policy for this run", policy),
    h("div", { class: "btn-cell" }, h("button", { type: "submit", text: "Trigger with policy" })));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const r = await api("POST", `/v1/jobs/${encodeURIComponent(jobId)}/trigger`,
        { overlapPolicy: policy.value, paramsJson: params.value.trim() });
      message(out, `Run ${r.run.runId}: ${STATE_NAMES(r.run.state)}${r.run.reason ? ` (${r.run.reason})` : ""}`, true);
    } catch (err) { message(out, err.message); }
  });
  return form;
}

function jobActions(job, out) {
  const id = encodeURIComponent(job.jobId);
  return h("div", { class: "actions" },
    job.paused ? action("Resume", async () => { await api("POST", `/v1/jobs/${id}/resume`); await refresh(); }, out)
      : action("Pause", async () => { await api("POST", `/v1/jobs/${id}/pause`); await refresh(); }, out),
    action("Trigger", async () => {
      const r = await api("POST", `/v1/jobs/${id}/trigger`);
      message(out, `Started run ${r.run.runId}`, true);
    }, out));
}

// -- the job form ------------------------------------------------------------------------------
// Create posts the whole spec. Edit never sends what the user did not change: Save lists the
// fields that differ from the job's current version (the page keeps it current: every event,
// pause and resume reloads it), the user confirms, and a PATCH with an update mask changes
// exactly those fields, conditional on that version. Every field the form does not show
// (overlap, jitter, circuit breaker, ...) stays as it is (node/api/http/DESIGN.md, "Editing").

// A task as the form's JSON shows it: every field that is not its default (payloads as the
// API answers them: a JSON value, or payloadBase64 for bytes that are not JSON).
function taskView(t) {
  const o = {};
  for (const [k, v] of Object.entries(t)) {
    if (k === "payload" || k === "payloadBase64") { if (v !== null && v !== undefined) o[k] = v; continue; }
    if (k === "queue" && v === "default") continue;
    const p = pruneDefaults(v);
    if (p !== undefined) o[k] = p;
  }
  return o;
}
function pruneDefaults(v) {
  if (v === null || v === undefined || v === "" || v === "0" || v === 0 || v === false) return undefined;
  if (Array.isArray(v)) return v.length ? v : undefined;
  if (typeof v === "object") {
    const o = {};
    for (const [k, x] of Object.entries(v)) { const p = pruneDefaults(x); if (p !== undefined) o[k] = p; }
    return Object.keys(o).length ? o : undefined;
  }
  return v;
}
// A payload (or result) for people: JSON pretty-printed, raw bytes as their base64.
function bytesText(value, b64) {
  if (value !== null && value !== undefined) return JSON.stringify(value, null, 2);
  return b64 ? `base64 ${b64}` : "";
}

// Leaves of a JSON value by path ("tasks[0].retry.maxAttempts"); empty objects and lists are leaves.
function leaves(v, path, out = {}) {
  if (v !== null && typeof v === "object" && Object.keys(v).length) {
    for (const [k, x] of Object.entries(v)) leaves(x, Array.isArray(v) ? `${path}[${k}]` : `${path}.${k}`, out);
  } else if (v !== undefined) out[path] = v;
  return out;
}
// Outside payloads 64-bit integers are strings and numbers alike ("60000" = 60000).
const same = (path, a, b) => /\.payload(\.|\[|$)/.test(path) ? JSON.stringify(a) === JSON.stringify(b)
  : (typeof a === "number" || typeof b === "number") && a !== undefined && b !== undefined ? String(a) === String(b)
    : JSON.stringify(a) === JSON.stringify(b);
function leafDiff(path, before, after) {
  const a = leaves(before, path), b = leaves(after, path);
  return [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => !same(k, a[k], b[k]))
    .map((k) => ({ path: k, before: a[k], after: b[k] }));
}
const getPath = (o, path) => path.split(".").reduce((x, k) => (x == null ? undefined : x[k]), o);
function setPath(o, path, value) {
  const ks = path.split(".");
  ks.slice(0, -1).reduce((x, k) => (x[k] ||= {}), o)[ks[ks.length - 1]] = value;
}
const shown = (v) => (v === undefined ? "—" : typeof v === "string" ? v : JSON.stringify(v));

const OPTIONS = {
  kind: [["interval", "interval"], ["cron", "cron"], ["once", "once"]],
  dialect: [["CRON_DIALECT_UNSPECIFIED", "5 fields or an alias"], ["CRON_DIALECT_SECONDS_LAST", "5 fields, or 6 with seconds last"],
    ["CRON_DIALECT_SECONDS_FIRST", "6 fields, seconds first"]],
  dstNonexistent: [["DST_NONEXISTENT_POLICY_UNSPECIFIED", "default (shift forward)"], ["DST_NONEXISTENT_POLICY_SHIFT_FORWARD", "shift forward"],
    ["DST_NONEXISTENT_POLICY_SKIP", "skip"]],
  dstAmbiguous: [["DST_AMBIGUOUS_POLICY_UNSPECIFIED", "default (both)"], ["DST_AMBIGUOUS_POLICY_BOTH", "both"],
    ["DST_AMBIGUOUS_POLICY_FIRST", "first"], ["DST_AMBIGUOUS_POLICY_LAST", "last"]],
  misfire: ["MISFIRE_POLICY_RUN_ALL", "MISFIRE_POLICY_RUN_LATEST", "MISFIRE_POLICY_SKIP"].map((k) => [k, k.replace("MISFIRE_POLICY_", "").toLowerCase()]),
};
// The form's value of each field for a spec (strings, as the controls hold them).
function formValues(spec) {
  const sch = spec.schedule || { interval: { intervalMs: "60000" } };
  const cron = sch.cron || {};
  const isoAt = (ms) => new Date(num(ms)).toISOString().slice(0, 19);
  return {
    tenant: spec.tenant || "", name: spec.name || "",
    kind: sch.cron ? "cron" : sch.once ? "once" : "interval",
    expression: sch.cron ? cron.expression || "" : "*/5 * * * *",
    dialect: sch.cron ? cron.dialect || "CRON_DIALECT_UNSPECIFIED" : "CRON_DIALECT_SECONDS_LAST",
    timezone: sch.cron ? cron.timezone || "" : "UTC",
    dstNonexistent: cron.dstNonexistent || "DST_NONEXISTENT_POLICY_UNSPECIFIED",
    dstAmbiguous: cron.dstAmbiguous || "DST_AMBIGUOUS_POLICY_UNSPECIFIED",
    interval: String(sch.interval?.intervalMs || "60000"),
    anchor: String(sch.interval?.anchorMs || "0"),
    at: sch.once ? isoAt(sch.once.atMs) : "",
    tasks: JSON.stringify((spec.tasks || [{ name: "main" }]).map(taskView), null, 2),
    priority: String(spec.priority || 0),
    misfire: spec.misfirePolicy && spec.misfirePolicy !== "MISFIRE_POLICY_UNSPECIFIED" ? spec.misfirePolicy : "MISFIRE_POLICY_RUN_ALL",
    paused: String(!!spec.paused),
  };
}
// Form field -> the JobSpec path it edits and its value there. Schedule fields apply to one kind.
const FIELDS = {
  expression: { kind: "cron", path: "schedule.cron.expression" },
  dialect: { kind: "cron", path: "schedule.cron.dialect" },
  timezone: { kind: "cron", path: "schedule.cron.timezone" },
  dstNonexistent: { kind: "cron", path: "schedule.cron.dstNonexistent" },
  dstAmbiguous: { kind: "cron", path: "schedule.cron.dstAmbiguous" },
  interval: { kind: "interval", path: "schedule.interval.intervalMs", value: (v) => v || "0" },
  anchor: { kind: "interval", path: "schedule.interval.anchorMs", value: (v) => v || "0" },
  at: { kind: "once", path: "schedule.once.atMs", value: (v) => String(v ? Date.parse(v + "Z") : 0) },
  tasks: { path: "tasks", value: (v) => JSON.parse(v || "[]") },
  priority: { path: "priority", value: (v) => Number(v || 0) },
  misfire: { path: "misfirePolicy" },
  paused: { path: "paused", value: (v) => v === "true" },
};
const fieldValue = (key, v) => (FIELDS[key].value || ((x) => x))(v);

// The create form (job null) or a job's edit form. Validation messages come from the API's
// problem `field`. An edit form has `load(job)`: the job's newer version, from a refresh.
function jobForm(job) {
  let current = job;
  let base = formValues(job?.spec || {});
  const select = (name, opts) => h("select", { name }, opts.map(([v, t]) => h("option", { value: v, text: t })));
  const f = {
    tenant: h("input", { name: "tenant", placeholder: "default", disabled: !!job }),
    name: h("input", { name: "name", required: true, disabled: !!job }),
    kind: select("kind", OPTIONS.kind),
    expression: h("input", { name: "expression" }),
    dialect: select("dialect", OPTIONS.dialect),
    timezone: h("input", { name: "timezone", placeholder: "UTC" }),
    dstNonexistent: select("dstNonexistent", OPTIONS.dstNonexistent),
    dstAmbiguous: select("dstAmbiguous", OPTIONS.dstAmbiguous),
    interval: h("input", { name: "interval", type: "number", min: "1" }),
    anchor: h("input", { name: "anchor", type: "number", min: "0" }),
    at: h("input", { name: "at", type: "datetime-local", step: "1" }),
    tasks: h("textarea", { name: "tasks", rows: "8" }),
    priority: h("input", { name: "priority", type: "number" }),
    misfire: select("misfire", OPTIONS.misfire),
    paused: h("input", { name: "paused", type: "checkbox" }),
  };
  const read = (k) => (f[k].type === "checkbox" ? String(f[k].checked) : f[k].value);
  const write = (k, v) => { if (f[k].type === "checkbox") f[k].checked = v === "true"; else f[k].value = v; };
  for (const [k, v] of Object.entries(base)) write(k, v);
  const errs = {};
  const field = (label, key, el) => {
    errs[key] = h("span", { class: "err", id: `err-${key}${job ? "-edit" : ""}`, "data-testid": `err-${key}` });
    el.id = `job-${key}${job ? "-edit" : ""}`;
    el.setAttribute("aria-describedby", errs[key].id);
    return h("label", { for: el.id }, label, el, errs[key]);
  };
  const schedRow = h("div", { class: "row" });
  const showSched = () => {
    const k = f.kind.value;
    schedRow.replaceChildren(...(k === "cron" ? [field("Cron expression", "expression", f.expression), field("Dialect", "dialect", f.dialect),
      field("Timezone", "timezone", f.timezone), field("DST gap (nonexistent time)", "dstNonexistent", f.dstNonexistent),
      field("DST overlap (time twice)", "dstAmbiguous", f.dstAmbiguous)]
      : k === "interval" ? [field("Interval (ms)", "interval", f.interval), field("Anchor (ms since the epoch)", "anchor", f.anchor)]
        : [field("At (UTC)", "at", f.at)]));
  };
  f.kind.addEventListener("change", showSched);
  showSched();
  const out = h("div", { "data-testid": "form-message" });
  const review = h("div", { class: "review", role: "region", "aria-label": "Changes to save", "data-testid": "review", hidden: true });
  const submit = h("button", { type: "submit", class: "primary", text: job ? "Save" : "Create job" });
  const previewOut = h("ul", { "data-testid": "form-preview", "aria-live": "polite" });
  const previewBtn = h("button", { type: "button", text: "Preview next fires" });
  const form = h("form", { "aria-label": job ? "Edit job" : "New job", novalidate: true },
    h("div", { class: "row" }, field("Tenant", "tenant", f.tenant), field("Name", "name", f.name), field("Schedule", "kind", f.kind)),
    schedRow,
    h("div", { class: "row" }, field("Tasks (JSON: name, queue, dependsOn, payload as JSON or payloadBase64, retry, timeoutMs)", "tasks", f.tasks)),
    h("div", { class: "row" }, field("Priority", "priority", f.priority), field("Misfire policy", "misfire", f.misfire),
      field("Created paused", "paused", f.paused)),
    job ? h("p", { class: "muted", text: "Save shows what changes; fields the form does not show (overlap, jitter, retries' backoff, circuit breaker, ...) keep their values." }) : null,
    out, h("div", { class: "actions" }, submit, previewBtn), previewOut, review);
  const scheduleOf = () => {
    const k = f.kind.value;
    if (k === "cron") {
      return { cron: { expression: f.expression.value, timezone: f.timezone.value, dialect: f.dialect.value,
        dstNonexistent: f.dstNonexistent.value, dstAmbiguous: f.dstAmbiguous.value } };
    }
    return k === "interval" ? { interval: { intervalMs: fieldValue("interval", f.interval.value), anchorMs: fieldValue("anchor", f.anchor.value) } }
      : { once: { atMs: fieldValue("at", f.at.value) } };
  };
  const showProblem = (err) => {
    const p = err.problem || {};
    const key = fieldKey(p.field || "");
    if (key && errs[key]) {
      errs[key].textContent = p.rule || err.message;
      f[key].setAttribute("aria-invalid", "true");
      f[key].focus();
    }
    message(out, err.message);
  };
  const clearErrors = () => {
    for (const [k, el] of Object.entries(errs)) { el.textContent = ""; f[k]?.removeAttribute("aria-invalid"); }
    message(out, "");
  };
  const badTasks = (err) => {
    errs.tasks.textContent = `not valid JSON: ${err.message}`; f.tasks.setAttribute("aria-invalid", "true"); f.tasks.focus();
  };
  // The changes of the form against the job's current version: rows to show, and the PATCH.
  const changes = () => {
    const now = formValues(current.spec);
    const rows = [], mask = [], spec = {};
    const add = (path, value, diff) => { if (diff.length) { rows.push(...diff); mask.push(path); setPath(spec, path, value); } };
    if (read("kind") !== now.kind) {
      const after = scheduleOf();
      add("schedule", after, leafDiff("schedule", current.spec.schedule, after));
    } else {
      for (const [k, d] of Object.entries(FIELDS)) {
        if (d.kind !== now.kind || read(k) === now[k]) continue;
        const after = fieldValue(k, read(k));
        add(d.path, after, leafDiff(d.path, getPath(current.spec, d.path), after));
      }
    }
    if (read("tasks") !== now.tasks) {
      const tasks = fieldValue("tasks", read("tasks")); // throws on bad JSON
      add("tasks", tasks, leafDiff("tasks", (current.spec.tasks || []).map(taskView),
        Array.isArray(tasks) ? tasks.map((t) => (t && typeof t === "object" ? taskView(t) : t)) : tasks));
    }
    for (const k of ["priority", "misfire", "paused"]) {
      if (read(k) === now[k]) continue;
      const after = fieldValue(k, read(k));
      add(FIELDS[k].path, after, leafDiff(FIELDS[k].path, getPath(current.spec, FIELDS[k].path), after));
    }
    return { rows, body: { spec, updateMask: mask.join(","), expectedVersion: current.version } };
  };
  const closeReview = () => { review.hidden = true; review.replaceChildren(); };
  const showReview = (pending, note) => {
    const confirm = h("button", { type: "button", class: "primary", text: "Confirm save" });
    const cancel = h("button", { type: "button", text: "Cancel" });
    review.replaceChildren(...[
      h("h3", { text: `Save ${pending.rows.length} change${pending.rows.length === 1 ? "" : "s"} to job ${current.jobId} (version ${pending.body.expectedVersion})?` }),
      note ? h("p", { class: "msg bad", role: "alert", text: note }) : null,
      table(["field", `now (version ${pending.body.expectedVersion})`, "after saving"], pending.rows.map((r) =>
        h("tr", { "data-path": r.path }, h("td", { text: r.path }), h("td", { class: "wrap before", text: shown(r.before) }),
          h("td", { class: "wrap after", text: shown(r.after) }))), { "data-testid": "diff" }),
      h("div", { class: "actions" }, confirm, cancel)].filter(Boolean));
    review.hidden = false;
    cancel.addEventListener("click", () => { closeReview(); submit.focus(); });
    confirm.addEventListener("click", async () => {
      confirm.disabled = cancel.disabled = true;
      try {
        const res = await api("PATCH", `/v1/jobs/${encodeURIComponent(current.jobId)}`, pending.body);
        closeReview();
        load(res.job, true);
        message(out, `Saved ${res.job.jobId} (version ${res.job.version})`, true);
        await refresh();
      } catch (err) {
        if (err.problem?.reason === "VERSION_CONFLICT") { // changed meanwhile: review it again
          const { job: newer } = await api("GET", `/v1/jobs/${encodeURIComponent(current.jobId)}`);
          load(newer);
          const again = changes();
          if (again.rows.length) showReview(again, `The job changed meanwhile (now version ${newer.version}); check the changes again.`);
          else { closeReview(); message(out, `The job changed meanwhile (now version ${newer.version}) and already has these values.`, true); }
          return;
        }
        closeReview();
        showProblem(err);
      } finally { confirm.disabled = cancel.disabled = false; }
    });
    confirm.focus();
  };
  // A newer version of the job: fields the user has not touched follow it (reset: all do).
  const load = (newer, reset = false) => {
    const next = formValues(newer.spec);
    const kind = read("kind");
    for (const [k, v] of Object.entries(next)) if (reset || read(k) === base[k]) write(k, v);
    if (read("kind") !== kind) showSched(); // re-rendered only then: a refresh keeps the focus
    base = next;
    current = newer;
  };
  previewBtn.addEventListener("click", async () => {
    clearErrors();
    previewOut.replaceChildren();
    try {
      const r = await api("POST", "/v1/schedules/preview", { schedule: scheduleOf(), tenant: f.tenant.value.trim(), name: f.name.value.trim(), count: 5 }, false);
      previewOut.replaceChildren(...r.fires.map((x) => h("li", { text: `${x.utc} (${x.local} ${r.timezone})${x.dstNote ? ` — ${x.dstNote}` : ""}` })));
    } catch (err) { showProblem(err); }
  });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    clearErrors();
    if (job) {
      let pending;
      try { pending = changes(); } catch (err) { badTasks(err); return; }
      if (!pending.rows.length) {
        closeReview();
        message(out, `Nothing to save: the form shows version ${current.version} as it is.`, true);
        return;
      }
      showReview(pending);
      return;
    }
    let tasks;
    try { tasks = fieldValue("tasks", f.tasks.value); } catch (err) { badTasks(err); return; }
    const newSpec = { tenant: f.tenant.value.trim(), name: f.name.value.trim(), schedule: scheduleOf(), tasks,
      priority: fieldValue("priority", f.priority.value), misfirePolicy: f.misfire.value, paused: f.paused.checked };
    submit.disabled = true;
    try {
      const res = await api("POST", "/v1/jobs", { spec: newSpec });
      message(out, `Created ${res.job.jobId} (version ${res.job.version})`, true);
      location.hash = `#/jobs/${encodeURIComponent(res.job.jobId)}`;
    } catch (err) {
      showProblem(err);
    } finally { submit.disabled = false; }
  });
  if (job) form.load = (newer) => load(newer);
  return form;
}

function fieldKey(path) {
  const p = path.replace(/^spec\./, "");
  if (p.startsWith("schedule.cron.timezone")) return "timezone";
  if (p.startsWith("schedule.cron.dialect")) return "dialect";
  if (p.startsWith("schedule.cron.dst_nonexistent")) return "dstNonexistent";
  if (p.startsWith("schedule.cron.dst_ambiguous")) return "dstAmbiguous";
  if (p.startsWith("schedule.cron")) return "expression";
  if (p.startsWith("schedule.interval.anchor")) return "anchor";
  if (p.startsWith("schedule.interval")) return "interval";
  if (p.startsWith("schedule.once")) return "at";
  if (p.startsWith("schedule")) return "kind";
  if (p.startsWith("tasks")) return "tasks";
  if (p.startsWith("misfire")) return "misfire";
  return { tenant: "tenant", name: "name", priority: "priority", paused: "paused" }[p] || "";
}

async function jobPage(jobId) {
  const id = encodeURIComponent(jobId);
  const head = h("div");
  const out = h("div");
  const strip = h("div");
  const runs = h("div");
  const tasks = h("section", { class: "card" });
  const edit = h("section", { class: "card" });
  main.replaceChildren(h("h1", {}, "Job ", h("span", { text: jobId })), out, head, tasks,
    h("section", { class: "card" }, h("h2", { text: "Trigger with parameters" }), triggerForm(jobId, out)),
    h("section", { class: "card" }, h("h2", { text: "Runs over time" }), strip,
      h("div", { class: "legend" }, [["succeeded", "var(--ok)"], ["failed", "var(--bad)"], ["running", "var(--run)"], ["skipped", "var(--skip)"], ["late (bar)", "var(--late)"]].map(([t, c]) =>
        h("span", {}, h("i", { style: `background:${c}` }), t)))),
    h("section", { class: "card" }, h("h2", { text: "Runs" }), runs), edit);
  let form = null;
  refresh = async () => {
    const { job } = await api("GET", `/v1/jobs/${id}`);
    const res = await api("GET", `/v1/jobs/${id}/runs?limit=200`);
    const preview = job.paused || !num(job.nextFireMs) ? { fires: [] }
      : await api("GET", `/v1/jobs/${id}/schedule/preview?count=5`).catch(() => ({ fires: [] }));
    const grace = num(job.spec.misfireGraceMs) || 60000;
    const late = (r) => r.trigger === "RUN_TRIGGER_SCHEDULE" && num(r.createdMs) - num(r.scheduledForMs) > Math.min(grace, 1000);
    const lateness = res.runs.filter((r) => r.trigger === "RUN_TRIGGER_SCHEDULE" && STATE_NAMES(r.state) !== "skipped")
      .map((r) => Math.max(0, num(r.createdMs) - num(r.scheduledForMs))).sort((a, b) => a - b);
    head.replaceChildren(h("section", { class: "card" },
      h("div", { class: "kv" }, [["tenant", job.spec.tenant], ["name", job.spec.name], ["schedule", schedText(job.spec.schedule)],
        ["state", job.paused ? "paused" : "active"], ["next fire", num(job.nextFireMs) ? `${fmtTime(job.nextFireMs)} (${fmtAgo(job.nextFireMs)})` : "—"],
        ["version", job.version], ["tasks", job.spec.tasks.length],
        ["fire lateness p50", lateness.length ? fmtDur(lateness[Math.floor(lateness.length / 2)]) : "—"],
        ["fire lateness max", lateness.length ? fmtDur(lateness[lateness.length - 1]) : "—"]].map(([k, v]) =>
        h("div", { "data-testid": `job-${k.replace(/ /g, "-")}` }, h("b", { text: k }), String(v)))),
      preview.fires.length ? h("div", { "data-testid": "next-fires" }, h("b", { class: "muted", text: "Next fires" }),
        h("ul", {}, preview.fires.map((f) => h("li", {}, `${f.utc} (${f.local} ${preview.timezone})`, f.dstNote ? h("span", { class: "muted", text: ` — ${f.dstNote}` }) : null)))) : null,
      h("p", {}, jobActions(job, out))));
    const ordered = [...res.runs].reverse();
    strip.replaceChildren(h("div", { class: "strip", "data-testid": "run-strip" }, ordered.map((r) =>
      h("a", { href: `#/runs/${encodeURIComponent(r.runId)}`, class: `s-${STATE_NAMES(r.state)}${late(r) ? " late" : ""}`,
        title: `${r.runId} ${STATE_NAMES(r.state)} scheduled ${fmtTime(r.scheduledForMs)}`, "aria-label": `run ${r.runId} ${STATE_NAMES(r.state)}` }))));
    runs.replaceChildren(res.runs.length ? table(["run", "state", "trigger", "scheduled for", "created", "lateness", "finished"],
      res.runs.map((r) => h("tr", { "data-run": r.runId }, h("td", {}, runLink(r.runId)), h("td", {}, badge(r.state)),
        h("td", { text: (r.trigger || "").replace("RUN_TRIGGER_", "").toLowerCase() }), h("td", { text: fmtTime(r.scheduledForMs) }),
        h("td", { text: fmtTime(r.createdMs) }), h("td", { text: r.trigger === "RUN_TRIGGER_SCHEDULE" ? fmtDur(Math.max(0, num(r.createdMs) - num(r.scheduledForMs))) : "" }),
        h("td", { text: fmtTime(r.finishedMs) })))) : h("p", { class: "muted", text: "No runs yet." }));
    tasks.replaceChildren(h("h2", { text: "Tasks" }), table(["task", "queue", "depends on", "timeout", "attempts", "payload"],
      job.spec.tasks.map((t) => h("tr", { "data-task": t.name }, h("td", { text: t.name }), h("td", { text: t.queue }),
        h("td", { text: (t.dependsOn || []).join(", ") }), h("td", { text: num(t.timeoutMs) ? fmtDur(t.timeoutMs) : "—" }),
        h("td", { text: t.retry?.maxAttempts || "default" }),
        h("td", { class: "wrap" }, bytesText(t.payload, t.payloadBase64)
          ? h("pre", { class: "json", "data-testid": "task-payload", text: bytesText(t.payload, t.payloadBase64) }) : "—"))),
      { "data-testid": "job-tasks" }));
    if (!form) {
      form = jobForm(job);
      edit.replaceChildren(h("h2", { text: "Edit" }), form);
    } else form.load(job); // the current version: Save diffs against it and sends it
  };
  await refresh();
}

// `units` joined by `joiner` into lines no wider than `width` px (`widthOf` measures): broken
// between units, a unit wider than a line at characters. Nothing is cut off.
function wrapUnits(units, joiner, width, widthOf) {
  const lines = [];
  let line = "";
  for (let unit of units) {
    const joined = line ? line + joiner + unit : unit;
    if (widthOf(joined) <= width) { line = joined; continue; }
    if (line) lines.push(line);
    while (unit.length > 1 && widthOf(unit) > width) {
      let n = 1;
      while (n < unit.length - 1 && widthOf(unit.slice(0, n + 1)) <= width) n++;
      lines.push(unit.slice(0, n));
      unit = unit.slice(n);
    }
    line = unit;
  }
  if (line || !lines.length) lines.push(line);
  return lines;
}
let measureCtx = null;
function textWidth(font) {
  measureCtx ||= document.createElement("canvas").getContext("2d");
  return (t) => { measureCtx.font = font; return measureCtx.measureText(t).width; };
}

// A task's time under its current or last lease (to now while held), for the DAG's label.
function taskDuration(t) {
  const start = num(t.startedMs);
  if (!start) return [];
  const end = num(t.finishedMs) || (STATE_NAMES(t.state) === "leased" ? Date.now() : 0);
  return end >= start ? [fmtDur(end - start)] : [];
}

// The DAG: tasks in columns by depth (longest path from a root), edges from dependencies.
// Every node shows its whole name and state · attempt · fencing token, wrapped over as many
// lines as they take (the node grows; a column stacks its nodes by their heights).
function dagSvg(run, specTasks, onPick) {
  const deps = Object.fromEntries((specTasks || []).map((t) => [t.name, t.dependsOn || []]));
  const names = run.tasks.map((t) => t.taskName);
  const depth = {};
  const depthOf = (n, seen = new Set()) => {
    if (depth[n] !== undefined) return depth[n];
    if (seen.has(n)) return 0;
    seen.add(n);
    const ds = (deps[n] || []).filter((d) => names.includes(d));
    depth[n] = ds.length ? 1 + Math.max(...ds.map((d) => depthOf(d, seen))) : 0;
    return depth[n];
  };
  names.forEach((n) => depthOf(n));
  const cols = {};
  names.forEach((n) => (cols[depth[n]] ||= []).push(n));
  const W = 200, GX = 60, GY = 18, P = 16, PAD = 8, LINE = 18;
  // The font of `svg.dag text` (app.css): 12px of the page's family.
  const widthOf = textWidth(`12px ${getComputedStyle(document.body).fontFamily}`);
  const lines = Object.fromEntries(run.tasks.map((t) => [t.taskName, [
    ...wrapUnits([t.taskName], "", W - 2 * PAD, widthOf),
    ...wrapUnits([STATE_NAMES(t.state), `attempt ${t.attempt}`, `token ${t.fencingToken}`, ...taskDuration(t)], " · ", W - 2 * PAD, widthOf)]]));
  const pos = {};
  let height = 0;
  Object.entries(cols).forEach(([d, ns]) => {
    let y = P;
    for (const n of ns) {
      const tall = 12 + LINE * lines[n].length;
      pos[n] = { x: P + d * (W + GX), y, h: tall };
      y += tall + GY;
    }
    height = Math.max(height, y - GY + P);
  });
  const width = P * 2 + (Object.keys(cols).length) * (W + GX) - GX;
  const color = { succeeded: "#2e7d32", dead: "#c62828", upstream_failed: "#c62828", leased: "#1565c0", ready: "#8d6e00", pending: "#8d6e00", retry_wait: "#8d6e00", cancelled: "#757575" };
  const svg = s("svg", { class: "dag", viewBox: `0 0 ${width} ${height}`, width, height, role: "group", "aria-label": `DAG of run ${run.runId}`, "data-testid": "dag" });
  for (const n of names) for (const d of deps[n] || []) {
    if (!pos[d]) continue;
    const a = pos[d], b = pos[n];
    const x1 = a.x + W, y1 = a.y + a.h / 2, x2 = b.x, y2 = b.y + b.h / 2;
    svg.append(s("path", { d: `M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2},${y2}`, "data-edge": `${d}->${n}` }));
  }
  for (const t of run.tasks) {
    const p = pos[t.taskName], st = STATE_NAMES(t.state);
    const g = s("g", { class: "task", tabindex: "0", role: "button", "data-task": t.taskName, "data-state": st, "aria-label": `task ${t.taskName} ${st}` },
      s("rect", { x: p.x, y: p.y, width: W, height: p.h, fill: color[st] || "#9e9e9e" }),
      lines[t.taskName].map((line, i) => s("text", { x: p.x + PAD, y: p.y + 19 + LINE * i, text: line })));
    g.addEventListener("click", () => onPick(t.taskName));
    g.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); onPick(t.taskName); } });
    svg.append(g);
  }
  return svg;
}

// Per task: cancel a live one; retry one that is dead, cancelled or upstream-failed.
function taskActions(id, t, out) {
  const st = STATE_NAMES(t.state);
  const path = `/v1/runs/${id}/tasks/${encodeURIComponent(t.taskName)}`;
  if (["pending", "ready", "leased", "retry_wait"].includes(st)) {
    return action("Cancel", async () => { await api("POST", `${path}/cancel`, { reason: "cancelled from the dashboard" }); await refresh(); }, out, "danger");
  }
  if (["dead", "cancelled", "upstream_failed"].includes(st)) {
    return action("Retry", async () => { await api("POST", `${path}/retry`); await refresh(); }, out);
  }
  return null;
}

// -- a run's timeline: each task's attempts as bars on one time axis ----------------------------
// From GetRun alone: a task waits for its upstream from the run's creation to `readyMs`, is
// queued until a lease is granted, holds each lease from its attempt's `startedMs` to
// `finishedMs` (the part the worker measured as run time drawn darker, at the lease's end),
// waits out a retry's back-off (and the queue again) between attempts, and ends at `finishedMs`.
// A bar is a button: its worker, fencing token, exit code and output tail show below.
const OUTCOME = (o) => (o || "").replace("ATTEMPT_OUTCOME_", "").toLowerCase();

function taskSegments(run, t, now) {
  const segs = [];
  const add = (kind, from, to, info) => { if (from && to >= from) segs.push({ kind, from, to, info }); };
  const created = num(run.createdMs), ready = num(t.readyMs);
  const attempts = t.attempts || [];
  if (!ready) { // never ready: waiting for (or failed with) its upstream
    add("upstream", created, num(t.finishedMs) || now, { what: `${STATE_NAMES(t.state).replace("_", " ")}: waiting for upstream tasks` });
    return segs;
  }
  if (ready > created) add("upstream", created, ready, { what: "waiting for upstream tasks" });
  let last = ready;
  for (const a of attempts) {
    const start = num(a.startedMs), end = num(a.finishedMs);
    if (last && start >= last) add(last === ready ? "queued" : "backoff", last, start, { what: last === ready ? "queued: ready, no lease yet" : "retry back-off, then queued" });
    add(`lease ${OUTCOME(a.outcome)}`, start, end, { attempt: a });
    last = end;
  }
  const st = STATE_NAMES(t.state);
  const current = num(t.startedMs) > last ? num(t.startedMs) : 0; // a lease not in `attempts`: held now
  if (current) {
    if (last && current > last) add(last === ready ? "queued" : "backoff", last, current, { what: last === ready ? "queued: ready, no lease yet" : "retry back-off, then queued" });
    const end = num(t.finishedMs) || now;
    add(st === "leased" ? "lease held" : `lease ${st}`, current, end, { attempt: { attempt: t.attempt, fencingToken: t.fencingToken, workerId: t.workerId, startedMs: current, finishedMs: num(t.finishedMs), outcome: st === "leased" ? "held now" : st } });
  } else if (st === "retry_wait") add("backoff", last, Math.max(now, num(t.retryAtMs)), { what: `retry back-off until ${fmtTime(t.retryAtMs)}` });
  else if (st === "ready" && last) add(last === ready ? "queued" : "backoff", last, now, { what: "queued: ready, no lease yet" });
  return segs;
}

const segKey = (t, seg) => `${t.taskName}|${seg.kind.startsWith("lease") ? `lease ${seg.info.attempt.attempt}` : seg.kind}|${seg.from}`;

function attemptText(a) {
  return [`attempt ${a.attempt}`, OUTCOME(a.outcome) || a.outcome, `worker ${a.workerId || "—"}`, `fencing token ${a.fencingToken}`,
    a.exitCode !== undefined ? `exit code ${a.exitCode}` : null, num(a.durationMs) ? `ran ${fmtDur(a.durationMs)} (worker's measure)` : null,
    `lease ${fmtTime(a.startedMs)} → ${a.finishedMs ? fmtTime(a.finishedMs) : "now"}`, a.error ? `error: ${a.error}` : null].filter(Boolean).join(" · ");
}

function timelineSvg(run, onPick) {
  const now = Math.max(Date.now(), num(run.finishedMs));
  const rows = run.tasks.map((t) => ({ t, segs: taskSegments(run, t, now) }));
  const t0 = num(run.createdMs);
  const t1 = Math.max(t0 + 1, num(run.finishedMs) || now, ...rows.flatMap((r) => r.segs.map((s) => s.to)));
  const LABEL = 150, W = 720, ROW = 28, TOP = 24, PAD = 8;
  const x = (ms) => LABEL + ((ms - t0) / (t1 - t0)) * (W - LABEL - PAD);
  const height = TOP + rows.length * ROW + PAD;
  const svg = s("svg", { class: "timeline", viewBox: `0 0 ${W} ${height}`, width: W, height, role: "group", "aria-label": `Timeline of run ${run.runId}: ${fmtDur(t1 - t0)} from its creation`, "data-testid": "timeline" });
  for (const f of [0, 0.25, 0.5, 0.75, 1]) {
    const at = x(t0 + f * (t1 - t0));
    svg.append(s("line", { x1: at, x2: at, y1: TOP - 6, y2: height - PAD, class: "tick" }),
      s("text", { x: Math.min(at, W - 40), y: 12, class: "axis", text: `+${fmtDur(Math.round(f * (t1 - t0)))}` }));
  }
  rows.forEach(({ t, segs }, i) => {
    const y = TOP + i * ROW;
    svg.append(s("text", { x: 4, y: y + 17, class: "label", text: t.taskName.length > 20 ? `${t.taskName.slice(0, 19)}…` : t.taskName }, s("title", { text: t.taskName })));
    for (const seg of segs) {
      const x1 = x(seg.from), w = Math.max(3, x(seg.to) - x1);
      const name = seg.info.attempt ? `${t.taskName} attempt ${seg.info.attempt.attempt}: ${seg.kind}, ${fmtDur(seg.to - seg.from)}` : `${t.taskName}: ${seg.info.what}, ${fmtDur(seg.to - seg.from)}`;
      const g = s("g", { class: `seg k-${seg.kind.replace(/ /g, "-")}`, tabindex: "0", role: "button", "aria-label": name, "data-task": t.taskName, "data-kind": seg.kind },
        s("rect", { x: x1, y: y + 4, width: w, height: ROW - 8 }), s("title", { text: name }));
      const ran = num(seg.info.attempt?.durationMs);
      if (ran) g.append(s("rect", { class: "ran", x: x1 + Math.max(0, w - (ran / (t1 - t0)) * (W - LABEL - PAD)), y: y + 8, width: Math.min(w, Math.max(2, (ran / (t1 - t0)) * (W - LABEL - PAD))), height: ROW - 16 }));
      const pick = () => onPick(t, seg);
      g.addEventListener("click", pick);
      g.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); pick(); } });
      svg.append(g);
    }
  });
  return svg;
}

// `picked` ({ key }) keeps the selected bar across the page's live refreshes.
function timelineCard(run, picked) {
  const detail = h("div", { class: "tl-detail", role: "region", "aria-live": "polite", "aria-label": "Selected bar", "data-testid": "timeline-detail" },
    h("p", { class: "muted", text: "Select a bar (click, or Tab then Enter) for its worker, fencing token, exit code and output." }));
  const pick = (t, seg) => {
    picked.key = segKey(t, seg);
    const a = seg.info.attempt;
    detail.replaceChildren(h("h3", { text: `${t.taskName}: ${seg.kind}` }),
      h("p", { text: a ? attemptText(a) : `${seg.info.what} · ${fmtTime(seg.from)} → ${fmtTime(seg.to)} · ${fmtDur(seg.to - seg.from)}` }),
      a?.outputTail ? h("pre", { class: "tail", text: a.outputTail }) : "");
  };
  const svg = timelineSvg(run, pick);
  for (const t of run.tasks) for (const seg of taskSegments(run, t, Math.max(Date.now(), num(run.finishedMs)))) if (segKey(t, seg) === picked.key) pick(t, seg);
  return h("section", { class: "card" }, h("h2", { text: "Timeline" }),
    h("div", { class: "legend" }, [["upstream", "waiting for upstream"], ["queued", "queued"], ["lease-succeeded", "lease: succeeded"],
      ["lease-failed", "lease: failed / expired (dashed)"], ["lease-held", "lease held now"], ["backoff", "retry back-off"], ["ran", "run time (worker's measure)"]].map(([k, text]) =>
      h("span", {}, s("svg", { width: 14, height: 10, "aria-hidden": "true", class: "timeline" },
        k === "ran" ? s("rect", { class: "ran", x: 0, y: 0, width: 14, height: 10 }) : s("g", { class: `seg k-${k}` }, s("rect", { x: 0, y: 0, width: 14, height: 10 }))), ` ${text}`))),
    h("div", { class: "scroll" }, svg), detail);
}

// -- why is it late? (GET /v1/runs/{id}/waits): what the run and its tasks wait for -------------
const WAIT_TITLES = { SKIPPED: "skipped", LATE_FIRE: "fired late", OVERLAP: "overlap policy", CIRCUIT_OPEN: "circuit open",
  FIRE_ADMISSION: "fire admission", UPSTREAM: "upstream tasks", RETRY_BACKOFF: "retry back-off", NO_WORKER: "no worker",
  NO_FREE_WORKER: "no free worker", TENANT_CONCURRENCY: "tenant concurrency cap", QUEUE_CONCURRENCY: "queue concurrency cap",
  DISPATCH: "about to be leased", RUNNING: "running" };

function waitsCard(res) {
  const waits = res.waits || [];
  if (!waits.length) return "";
  const blocking = waits.filter((w) => !["WAIT_KIND_RUNNING", "WAIT_KIND_DISPATCH"].includes(w.kind));
  return h("section", { class: "card", "aria-labelledby": "waits-title", "data-testid": "waits" },
    h("h2", { id: "waits-title", text: blocking.length ? "Why is it waiting?" : "Where it is" }),
    h("ul", { class: "waits" }, waits.map((w) => {
      const kind = (w.kind || "").replace("WAIT_KIND_", "");
      return h("li", { "data-wait": kind.toLowerCase(), "data-task": w.taskName || "" },
        h("b", { text: `${w.taskName ? `${w.taskName}: ` : "run: "}${WAIT_TITLES[kind] || kind.toLowerCase()}` }), " — ", w.detail,
        w.limit ? h("div", { class: "limit" }, "bound: ", h("code", { text: w.limit }), ` = ${w.limitValue} (now ${w.current})`) : "",
        w.change ? h("div", { class: "muted" }, "change: ", h("code", { text: w.change })) : "");
    })),
    res.workersKnown ? "" : h("p", { class: "muted", text: "Workers are known to the leader only: this answer came from a node that does not lead." }));
}

async function runPage(runId) {
  const id = encodeURIComponent(runId);
  const out = h("div");
  const body = h("div");
  main.replaceChildren(h("h1", {}, "Run ", h("span", { text: runId })), out, body);
  let specTasks = null;
  const picked = { key: "" };
  refresh = async () => {
    const { run } = await api("GET", `/v1/runs/${id}`);
    const ended = ["succeeded", "failed", "cancelled"].includes(STATE_NAMES(run.state));
    const waits = ended && !(run.trigger === "RUN_TRIGGER_SCHEDULE" && num(run.createdMs) - num(run.scheduledForMs) - num(run.fireDelayMs) > 1000)
      ? { waits: [] } : await api("GET", `/v1/runs/${id}/waits`).catch((e) => ({ waits: [], error: e.message }));
    if (specTasks === null) {
      try { specTasks = (await api("GET", `/v1/jobs/${encodeURIComponent(run.jobId)}`)).job.spec.tasks; }
      catch { specTasks = []; } // a deleted job: tasks without edges
    }
    const pick = (name) => {
      const row = document.querySelector(`tr[data-task="${CSS.escape(name)}"]`);
      if (row) { row.scrollIntoView({ block: "center" }); row.querySelector("button, a, summary")?.focus(); }
    };
    const running = STATE_NAMES(run.state) === "running";
    body.replaceChildren(
      h("section", { class: "card" }, h("div", { class: "kv" },
        [["state", badge(run.state)], ["job", jobLink(run.jobId)], ["tenant", run.tenant],
          ["trigger", (run.trigger || "").replace("RUN_TRIGGER_", "").toLowerCase()],
          ["scheduled for", fmtTime(run.scheduledForMs)], ["created", fmtTime(run.createdMs)],
          ["finished", fmtTime(run.finishedMs)], ["job version", run.jobVersion],
          ...(run.reason ? [["reason", run.reason]] : []),
          ...(bytesText(run.params, run.paramsBase64) ? [["parameters", h("pre", { class: "json", text: bytesText(run.params, run.paramsBase64) })]] : [])].map(([k, v]) =>
          h("div", { "data-testid": `run-${k.replace(/ /g, "-")}` }, h("b", { text: k }), v))),
        h("p", { class: "actions" }, running ? action("Cancel run", async () => {
          await api("POST", `/v1/runs/${id}/cancel`, { reason: "cancelled from the dashboard" }); await refresh();
        }, out, "danger") : null,
        ["failed", "cancelled"].includes(STATE_NAMES(run.state)) ? action("Re-run", async () => {
          await api("POST", `/v1/runs/${id}/rerun`); await refresh();
        }, out) : null)),
      waitsCard(waits),
      h("section", { class: "card" }, h("h2", { text: "DAG" }), h("div", { class: "scroll" }, dagSvg(run, specTasks, pick))),
      timelineCard(run, picked),
      h("section", { class: "card" }, h("h2", { text: "Tasks" }),
        table(["task", "state", "attempt", "fencing token", "worker", "ready", "started", "finished", "result", "error", ""],
          run.tasks.map((t) => h("tr", { "data-task": t.taskName },
            h("td", { text: t.taskName }), h("td", {}, badge(t.state)), h("td", { text: t.attempt }),
            h("td", { text: t.fencingToken }), h("td", { text: t.workerId }), h("td", { text: fmtTime(t.readyMs) }),
            h("td", { text: fmtTime(t.startedMs) }), h("td", { text: fmtTime(t.finishedMs) }),
            h("td", { class: "wrap" }, bytesText(t.result, t.resultBase64)
              ? h("pre", { class: "json", "data-testid": "task-result", text: bytesText(t.result, t.resultBase64) }) : ""),
            h("td", { class: "wrap" }, t.lastError || "",
              (t.attempts || []).length ? h("details", {}, h("summary", { text: `${t.attempts.length} attempt${t.attempts.length === 1 ? "" : "s"}` }),
                t.attempts.map((a) => h("div", {},
                  h("p", { text: `#${a.attempt} ${(a.outcome || "").replace("ATTEMPT_OUTCOME_", "").toLowerCase()} · token ${a.fencingToken} · ${a.workerId} · ${fmtDur(a.durationMs)}${a.exitCode !== undefined ? ` · exit ${a.exitCode}` : ""}${a.error ? ` · ${a.error}` : ""}` }),
                  a.outputTail ? h("pre", { class: "tail", text: a.outputTail }) : null))) : null),
            h("td", { class: "actions" }, taskActions(id, t, out)))))),
    );
  };
  await refresh();
}

// -- dead letters as a work list (#/dlq?tenant=&group=job|error) ------------------------------
// Grouped by job or by error class (the error's first line, digits as N), several selected
// (a group's checkbox selects it all) and replayed or discarded with a reason, which the audit
// log keeps (ReplayDeadLetters and DiscardDeadLetters are audited calls).
const errorClass = (e) => ((e || "no error text").split("\n")[0].replace(/\d+/g, "N").trim().slice(0, 80)) || "no error text";
const DLQ_GROUPS = [["job", "job"], ["error", "error class"], ["", "none"]];

async function dlqPage() {
  const q = new URLSearchParams(location.hash.split("?")[1] || "");
  const group = q.get("group") ?? "job";
  const tenant = h("input", { id: "dlq-tenant", name: "tenant", placeholder: "all tenants", value: q.get("tenant") || "" });
  const groupBy = h("select", { id: "dlq-group", name: "group" }, DLQ_GROUPS.map(([v, t]) => h("option", { value: v, text: t, selected: v === group })));
  const reason = h("input", { id: "dlq-reason", name: "reason", maxlength: "500", placeholder: "e.g. disk freed on db-3", "aria-describedby": "dlq-reason-help" });
  const list = h("div", { id: "dlq" });
  const out = h("div");
  const selected = new Set();
  const count = h("span", { "data-testid": "dlq-selected", role: "status", text: "0 selected" });
  const replay = h("button", { type: "button", class: "primary", text: "Replay selected", disabled: true });
  const discard = h("button", { type: "button", class: "danger", text: "Discard selected", disabled: true });
  const filter = h("form", { role: "search", "aria-label": "Filter dead letters" },
    h("div", { class: "row" }, h("label", { for: "dlq-tenant" }, "Tenant", tenant), h("label", { for: "dlq-group" }, "Group by", groupBy),
      h("div", { class: "btn-cell" }, h("button", { type: "submit", text: "Apply" }))));
  filter.addEventListener("submit", (e) => {
    e.preventDefault();
    const next = new URLSearchParams();
    if (tenant.value.trim()) next.set("tenant", tenant.value.trim());
    next.set("group", groupBy.value);
    location.hash = `#/dlq?${next}`;
  });
  main.replaceChildren(h("h1", { text: "Dead letters" }),
    h("section", { class: "card" }, filter),
    h("section", { class: "card" }, h("form", { "aria-label": "Replay or discard the selected dead letters", onsubmit: (e) => { e.preventDefault(); replay.click(); } },
      h("div", { class: "row" }, h("label", { for: "dlq-reason" }, "Reason (kept in the audit log)", reason),
        h("div", { class: "btn-cell" }, count), h("div", { class: "btn-cell" }, replay), h("div", { class: "btn-cell" }, discard)),
      h("p", { id: "dlq-reason-help", class: "muted", text: "Replaying starts a fresh attempt series for each selected task (same idempotency key). Discarding drops them from the queue for good: the tasks stay dead in their runs." }))),
    h("section", { class: "card" }, out, list));
  const sync = () => {
    count.textContent = `${selected.size} selected`;
    replay.disabled = discard.disabled = !selected.size;
    for (const box of list.querySelectorAll("input[data-key]")) box.checked = selected.has(box.dataset.key);
    for (const box of list.querySelectorAll("input[data-group]")) {
      const keys = JSON.parse(box.dataset.keys);
      box.checked = keys.every((k) => selected.has(k));
      box.indeterminate = !box.checked && keys.some((k) => selected.has(k));
    }
  };
  // Replay or discard the selection: a reason first (the audit log keeps it), then one call.
  const act = (verb, path, field) => async () => {
    if (!reason.value.trim()) { message(out, `reason: say why you ${verb.toLowerCase()} them (it goes to the audit log)`); reason.setAttribute("aria-invalid", "true"); reason.focus(); return; }
    reason.removeAttribute("aria-invalid");
    replay.disabled = discard.disabled = true;
    try {
      const tasks = [...selected].map((k) => { const i = k.lastIndexOf(":"); return { runId: k.slice(0, i), taskName: k.slice(i + 1) }; });
      const r = await api("POST", path, { tasks, reason: reason.value.trim() });
      selected.clear();
      message(out, `${verb}ed ${r[field].length} task${r[field].length === 1 ? "" : "s"}`, true);
      await refresh();
    } catch (e) { message(out, e.message); } finally { sync(); }
  };
  replay.addEventListener("click", act("Replay", "/v1/dlq/replay", "replayed"));
  discard.addEventListener("click", act("Discard", "/v1/dlq/discard", "discarded"));
  refresh = async () => {
    const t = tenant.value.trim();
    const res = await api("GET", t ? `/v1/tenants/${encodeURIComponent(t)}/dlq?limit=1000` : "/v1/dlq?limit=1000");
    const letters = res.deadLetters;
    const present = new Set(letters.map((d) => `${d.runId}:${d.taskName}`));
    for (const k of [...selected]) if (!present.has(k)) selected.delete(k);
    const groups = new Map();
    for (const d of letters) {
      const key = group === "job" ? `job ${d.jobId}` : group === "error" ? errorClass(d.lastError) : "all";
      (groups.get(key) || groups.set(key, []).get(key)).push(d);
    }
    const row = (d) => {
      const key = `${d.runId}:${d.taskName}`;
      const box = h("input", { type: "checkbox", "data-key": key, "aria-label": `select ${key}` });
      box.addEventListener("change", () => { if (box.checked) selected.add(key); else selected.delete(key); sync(); });
      return h("tr", { "data-dead": key }, h("td", {}, box), h("td", {}, runLink(d.runId)), h("td", { text: d.taskName }), h("td", {}, jobLink(d.jobId)),
        h("td", { text: d.tenant }), h("td", { text: d.attempts }), h("td", { class: "wrap", text: d.lastError }), h("td", { text: fmtTime(d.deadMs) }));
    };
    list.replaceChildren(...(letters.length ? [...groups].map(([name, items]) => {
      const keys = items.map((d) => `${d.runId}:${d.taskName}`);
      const all = h("input", { type: "checkbox", "data-group": name, "data-keys": JSON.stringify(keys), "aria-label": `select all of ${name}` });
      all.addEventListener("change", () => { for (const k of keys) { if (all.checked) selected.add(k); else selected.delete(k); } sync(); });
      return h("section", { class: "dlq-group", "data-group": name, "aria-label": name },
        h("h2", {}, h("label", { class: "check" }, all, ` ${name} — ${items.length} dead letter${items.length === 1 ? "" : "s"}`)),
        table(["", "run", "task", "job", "tenant", "attempts", "error", "dead since"], items.map(row)));
    }) : [h("p", { class: "muted", "data-testid": "dlq-empty", text: "The dead-letter queue is empty." })]));
    sync();
  };
  await refresh();
}

// A queue's backlog against the page's thresholds (#/queues?amber=1m&red=5m): the level in
// words and a colour, never a colour alone.
function backlogLevel(ageMs, amberMs, redMs) {
  if (ageMs > redMs) return ["red", `✖ over ${humanMs(redMs)}`];
  if (ageMs > amberMs) return ["amber", `⚠ over ${humanMs(amberMs)}`];
  return ["ok", "ok"];
}

async function queuesPage() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const amberMs = durationParam(params.get("amber") || "1m"), redMs = durationParam(params.get("red") || "5m");
  const box = h("div");
  const form = h("form", { role: "search", "aria-label": "Backlog thresholds" },
    h("div", { class: "row" }, h("label", {}, "Amber at an oldest ready task older than", h("input", { id: "queues-amber", name: "amber", value: params.get("amber") || "", placeholder: "1m" })),
      h("label", {}, "Red at", h("input", { id: "queues-red", name: "red", value: params.get("red") || "", placeholder: "5m" })),
      h("div", { class: "btn-cell" }, h("button", { type: "submit", text: "Apply" }))));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const next = new URLSearchParams();
    for (const el of form.elements) if (el.name && el.value.trim()) next.set(el.name, el.value.trim());
    location.hash = `#/queues${next.toString() ? `?${next}` : ""}`;
  });
  main.replaceChildren(h("h1", { text: "Queues & workers" }), h("section", { class: "card" }, form), box);
  refresh = async () => {
    if (amberMs === null || redMs === null) { message(box, "amber, red: a duration such as 30s, 5m, 1h"); return; }
    const [q, w, a] = await Promise.all([api("GET", "/v1/queues"), api("GET", "/v1/workers"),
      api("GET", "/v1/active-runs?limit=50")]);
    const drainOut = h("div", { "data-testid": "drain-out" });
    // Drain: the leader grants the worker nothing more; its leases run to their end.
    const drain = (x) => x.draining ? h("span", { "data-testid": "draining", text: "draining: no new leases" })
      : action(`Drain ${x.workerId}`, async () => {
        // Not a replicated write (no request id): sent as a read is, followed to the leader.
        await api("POST", `/v1/workers/${encodeURIComponent(x.workerId)}/drain`, {}, false);
        await refresh();
      }, drainOut);
    box.replaceChildren(
      h("section", { class: "card" }, h("h2", { text: "Queues" }), q.queues.length ? table(["queue", "ready (backlog)", "oldest ready", "backlog", "leased", "workers"],
        q.queues.map((x) => {
          const [level, text] = backlogLevel(num(x.oldestReadyAgeMs), amberMs, redMs);
          return h("tr", { "data-queue": x.queue, "data-level": level }, h("td", { text: x.queue }), h("td", { text: x.ready }),
            h("td", { text: num(x.oldestReadyAgeMs) ? fmtDur(x.oldestReadyAgeMs) : "—" }),
            h("td", {}, h("span", { class: `level l-${level}`, text })), h("td", { text: x.leased }),
            h("td", { text: x.workers.length ? x.workers.join(", ") : "⚠ none" }));
        })) : h("p", { class: "muted", text: "No queued or running tasks." })),
      h("section", { class: "card" }, h("h2", { text: "Workers" }),
        drainOut,
        w.workers.length ? table(["worker", "queues", "free slots", "leases held", "connected", "last heartbeat", "came through", "drain"],
          w.workers.map((x) => h("tr", { "data-worker": x.workerId }, h("td", { text: x.workerId }),
            h("td", { text: x.queues.join(", ") }), h("td", { text: x.credits }), h("td", { text: x.leasesHeld }),
            h("td", { "data-testid": "connected", title: fmtTime(x.connectedMs), text: num(x.connectedMs) ? sinceText(x.connectedMs) : "—" }),
            h("td", { "data-testid": "heartbeat", title: fmtTime(x.lastHeartbeatMs), text: num(x.lastHeartbeatMs) ? sinceText(x.lastHeartbeatMs) : "none yet" }),
            h("td", { text: x.peer === "relay" ? "a gateway's relay" : x.peer || "—" }),
            h("td", {}, drain(x))))) : h("p", { class: "muted", text: "No workers connected to the leader." }),
        h("p", { class: "muted", text: "A drained worker is granted nothing more while its stream lasts; stop it once it holds no lease (a worker that reconnects is served again)." })),
      h("section", { class: "card" }, h("h2", { text: "Active runs (oldest first)" }),
        a.runs.length ? table(["run", "job", "tenant", "scheduled for", "tasks"],
          a.runs.map((r) => h("tr", {}, h("td", {}, runLink(r.runId)), h("td", {}, jobLink(r.jobId)), h("td", { text: r.tenant }),
            h("td", { text: fmtTime(r.scheduledForMs) }),
            h("td", { text: r.tasks.map((t) => `${t.taskName}: ${STATE_NAMES(t.state)}`).join(", ") })))) : h("p", { class: "muted", text: "No active runs." })),
    );
  };
  await refresh();
}

// -- runs across jobs (#/runs?state=failed&since=1h&...) ---------------------------------------
// The filter lives in the URL (shareable: loading it restores the form and the page); "since"
// and "until" stay as written (1h is re-read as "an hour before now" on every refresh). The
// server pages (GET /v1/runs, page_token); earlier tokens are kept in memory for Previous.

const RUN_FILTERS = ["tenant", "job", "queue", "state", "trigger", "since", "until", "late", "errors", "sort", "limit", "page"];
const RUN_STATE_CHOICES = ["running", "queued", "succeeded", "failed", "cancelled", "skipped"];
const RUN_TRIGGER_CHOICES = ["schedule", "manual", "backfill"];
const RUN_SORT_CHOICES = [["created_desc", "newest first"], ["created_asc", "oldest first"],
  ["duration_desc", "longest first"], ["duration_asc", "shortest first"]];
let runPages = { key: "", tokens: [] }; // tokens of the pages before this one, for Previous

// "1h" / "30m" / "7d" ago, epoch ms, or an ISO time -> ms since the epoch ("" -> "").
function instantParam(text, name) {
  const t = (text || "").trim();
  if (!t) return "";
  if (/^\d+$/.test(t)) return t;
  const m = t.match(/^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)$/);
  if (m) return String(Date.now() - Math.round(Number(m[1]) * Object.fromEntries(DURATION_UNITS)[m[2]]));
  const at = Date.parse(t);
  if (Number.isNaN(at)) throw new ApiError({ detail: `${name}: ${JSON.stringify(t)} is not a time (1h, 7d, epoch ms or ISO 8601)` }, 400);
  return String(at);
}

function runsQuery(q) {
  const out = new URLSearchParams();
  for (const key of ["tenant", "job", "queue", "state", "trigger", "sort", "limit"]) if (q.get(key)) out.set(key, q.get(key));
  for (const key of ["since", "until"]) { const v = instantParam(q.get(key), key); if (v) out.set(key, v); }
  if (q.get("late")) out.set("late", "1");
  if (q.get("errors")) out.set("errors", "1");
  if (q.get("page")) out.set("page_token", q.get("page"));
  return out;
}

function runLateness(r) {
  if (r.trigger !== "RUN_TRIGGER_SCHEDULE") return "—";
  const late = num(r.createdMs) - num(r.scheduledForMs) - num(r.fireDelayMs);
  return late > 0 ? fmtDur(late) : "—";
}

function runsForm(q) {
  const input = (name, label, attrs) => h("label", {}, label, h("input", { id: `runs-${name}`, name, value: q.get(name) || "", ...attrs }));
  const select = (name, label, choices) => h("label", {}, label, h("select", { id: `runs-${name}`, name },
    choices.map(([value, text]) => h("option", { value, text, selected: (q.get(name) || "") === value }))));
  const check = (name, label) => h("label", { class: "check" }, h("input", { id: `runs-${name}`, name, type: "checkbox", checked: !!q.get(name) }), label);
  const form = h("form", { role: "search", "aria-label": "Filter runs" },
    h("div", { class: "row" }, input("tenant", "Tenant", { placeholder: "all yours" }), input("job", "Job id", { placeholder: "any" }),
      input("queue", "Queue", { placeholder: "any" }),
      select("state", "State", [["", "any"], ...RUN_STATE_CHOICES.map((x) => [x, x])]),
      select("trigger", "Trigger", [["", "any"], ...RUN_TRIGGER_CHOICES.map((x) => [x, x])])),
    h("div", { class: "row" }, input("since", "Created since", { placeholder: "1h, 7d, ISO time", list: "runs-times" }),
      input("until", "Created before", { placeholder: "none", list: "runs-times" }),
      h("datalist", { id: "runs-times" }, ["15m", "1h", "6h", "24h", "7d"].map((x) => h("option", { value: x }))),
      check("late", "Late only"), check("errors", "With errors only"),
      select("sort", "Sort", RUN_SORT_CHOICES), select("limit", "Per page", [["", "100"], ["25", "25"], ["50", "50"], ["200", "200"]]),
      h("div", { class: "btn-cell" }, h("button", { type: "submit", text: "Apply" }))));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const next = new URLSearchParams();
    for (const el of form.elements) {
      if (!el.name) continue;
      if (el.type === "checkbox") { if (el.checked) next.set(el.name, "1"); } else if (el.value.trim()) next.set(el.name, el.value.trim());
    }
    runPages = { key: "", tokens: [] };
    location.hash = `#/runs${next.toString() ? `?${next}` : ""}`;
  });
  return form;
}

async function runsPage() {
  const q = new URLSearchParams(location.hash.split("?")[1] || "");
  const filterKey = RUN_FILTERS.filter((k) => k !== "page").map((k) => `${k}=${q.get(k) || ""}`).join("&");
  if (runPages.key !== filterKey) runPages = { key: filterKey, tokens: [] };
  const list = h("div", { id: "runs" });
  const pager = h("nav", { class: "row pager", "aria-label": "Pages of runs" });
  const out = h("div");
  main.replaceChildren(h("h1", { text: "Runs" }),
    h("section", { class: "card" }, runsForm(q),
      h("p", { class: "muted", text: "The runs in memory: active ones and each job's most recent ended ones (older runs: a job's page)." })),
    h("section", { class: "card" }, out, list, pager));
  const go = (page) => {
    const next = new URLSearchParams(q);
    if (page) next.set("page", page); else next.delete("page");
    location.hash = `#/runs?${next}`;
  };
  refresh = async () => {
    let res;
    try {
      res = await api("GET", `/v1/runs?${runsQuery(q)}`);
    } catch (e) {
      message(out, e.message);
      list.replaceChildren(); pager.replaceChildren();
      return;
    }
    message(out, "");
    list.replaceChildren(res.runs.length ? table(["run", "job", "tenant", "state", "trigger", "created", "late by", "duration", "tasks"],
      res.runs.map((r) => h("tr", { "data-run": r.runId },
        h("td", {}, runLink(r.runId)), h("td", {}, jobLink(r.jobId)), h("td", { text: r.tenant }),
        h("td", {}, badge(r.state)), h("td", { text: (r.trigger || "").replace(/^RUN_TRIGGER_/, "").toLowerCase() }),
        h("td", { title: fmtTime(r.createdMs), text: fmtTime(r.createdMs) }), h("td", { text: runLateness(r) }),
        h("td", { text: num(r.finishedMs) ? fmtDur(num(r.finishedMs) - num(r.createdMs)) : "running" }),
        h("td", { text: `${r.tasks.filter((t) => STATE_NAMES(t.state) === "succeeded").length}/${r.tasks.length} ok` }))),
      { "aria-label": "Runs" }) : h("p", { class: "muted", "data-testid": "runs-empty", text: "No runs match." }));
    const here = q.get("page") || "";
    pager.replaceChildren(
      h("button", { type: "button", text: "← Previous", disabled: !here, onclick: () => go(runPages.tokens.pop() || "") }),
      h("button", { type: "button", text: "Next →", disabled: !res.nextPageToken, onclick: () => { runPages.tokens.push(here); go(res.nextPageToken); } }));
  };
  await refresh();
}

// -- router ------------------------------------------------------------------------------------

async function route() {
  refresh = null;
  const [path] = location.hash.replace(/^#/, "").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const page = parts[0] || "cluster";
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === page) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  try {
    if (page === "jobs" && parts[1]) await jobPage(parts[1]);
    else if (page === "jobs") await jobsPage();
    else if (page === "runs" && parts[1]) await runPage(parts.slice(1).join("/"));
    else if (page === "runs") await runsPage();
    else if (page === "dlq") await dlqPage();
    else if (page === "queues") await queuesPage();
    else await clusterPage();
    document.title = `gnomon · ${page}`;
  } catch (e) {
    main.append(h("div", { class: "msg bad", role: "alert", text: e.message }));
  }
}
window.addEventListener("hashchange", route);
// The token field: kept for this tab (sessionStorage), like a #token= in the URL.
const tokenInput = document.getElementById("token");
tokenInput.value = TOKEN;
document.getElementById("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const value = tokenInput.value.trim();
  if (value) sessionStorage.setItem("gnomon-token", value); else sessionStorage.removeItem("gnomon-token");
  location.reload();
});
connect();
route();
