// Flotilla's web UI: plain JavaScript over the REST API (GET /api/v1/openapi.json), no build step.
// Pages are hash routes: #/queues, #/jobs?filters, #/job/<id>, #/jobset/<queue>/<job set>.
// Every call sends the token given in the header form (kept for this browser session), so the UI
// can do exactly what the API lets its user do, and shows the API's reason when it refuses.
"use strict";

const REFRESH_MS = 2000;
const STATES = ["queued", "leased", "pending", "running", "succeeded", "failed", "cancelled", "preempted"];
const main = document.getElementById("main");
const statusLine = document.getElementById("status");
let refreshTimer = null;
let pageToken = 0; // a page's refreshes stop when another page is shown

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function say(text, kind) {
  statusLine.textContent = text;
  statusLine.className = kind || "";
}

async function api(method, path, body) {
  const headers = { "Content-Type": "application/json" };
  const token = sessionStorage.getItem("flotilla-token");
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = text; }
  if (!response.ok) {
    const reason = data && data.error ? data.error : `HTTP ${response.status}`;
    const error = new Error(`${reason} (HTTP ${response.status})`);
    error.status = response.status;
    throw error;
  }
  return data;
}

const time = (ms) => (ms ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "");
const pct = (x) => (x === undefined || x === null ? "" : `${(100 * x).toFixed(1)}%`);
const stateBadge = (state) => h("span", { class: `state state-${state}` }, state);
const jobLink = (id) => h("a", { href: `#/job/${encodeURIComponent(id)}` }, id);
const jobSetLink = (queue, jobSet) => h("a", { href: `#/jobset/${encodeURIComponent(queue)}/${encodeURIComponent(jobSet)}` }, jobSet);

// Quantities come in milli-units (1000 = one core, one byte, one device).
function amount(resource, value) {
  if (resource === "memory") return `${(value / 1000 / 2 ** 30).toFixed(2)} GiB`;
  if (resource === "cpu") return `${(value / 1000).toFixed(2)} cpu`;
  return `${(value / 1000).toFixed(2)} ${resource}`;
}
const resources = (map) => Object.entries(map || {}).map(([name, value]) => amount(name, value)).join(", ");

function table(caption, headings, rows) {
  return h("table", {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, headings.map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, rows.length ? rows : [h("tr", {}, h("td", { colspan: headings.length }, "none"))]));
}

function show(...nodes) {
  main.replaceChildren(...nodes.filter((node) => node !== null));
}

// ------------------------------------------------------------------ queues

async function queuesPage(live) {
  const [queues, counts, cluster] = await Promise.all([
    api("GET", "/api/v1/queues"),
    api("GET", "/api/v1/job-counts?group_by=queue"),
    api("GET", "/api/v1/cluster"),
  ]);
  const countOf = Object.fromEntries(counts.groups.map((g) => [g.queue, g.counts]));
  const shares = {};
  for (const pool of cluster.pools) for (const q of pool.queues) (shares[q.queue] = shares[q.queue] || []).push({ pool: pool.pool, ...q });
  const rows = queues.queues.map((queue) => {
    const c = countOf[queue.name] || {};
    const s = shares[queue.name] || [];
    const cell = (f) => s.map((x) => f(x)).join(" / ");
    return h("tr", { "data-queue": queue.name },
      h("th", { scope: "row" }, h("a", { href: `#/jobs?queue=${encodeURIComponent(queue.name)}` }, queue.name)),
      h("td", { class: "num" }, queue.priority_factor),
      h("td", {}, queue.cordoned ? "cordoned" : ""),
      h("td", { class: "num" }, cell((x) => pct(x.fair_share))),
      h("td", { class: "num" }, cell((x) => pct(x.adjusted_fair_share))),
      h("td", { class: "num" }, cell((x) => pct(x.actual_share))),
      h("td", {}, cell((x) => resources(x.allocation))),
      h("td", { class: "num" }, c.queued || 0),
      h("td", { class: "num" }, (c.leased || 0) + (c.pending || 0) + (c.running || 0)),
      h("td", { class: "num" }, c.succeeded || 0),
      h("td", { class: "num" }, (c.failed || 0) + (c.cancelled || 0) + (c.preempted || 0)));
  });
  const executors = cluster.executors.map((e) => h("tr", {},
    h("th", { scope: "row" }, e.executor), h("td", {}, e.pool), h("td", { class: "num" }, e.nodes),
    h("td", {}, resources(e.capacity)), h("td", {}, resources(e.allocated)),
    h("td", { class: "num" }, e.active_runs),
    h("td", { class: "num" }, `${e.report_age_s.toFixed(1)} s`),
    h("td", {}, e.cordoned ? `cordoned by ${e.cordoned_by}: ${e.cordon_reason}` : "")));
  show(
    h("h1", {}, "Queues"),
    table("Queues: weight, shares of the last scheduling cycle, usage and jobs",
      ["Queue", "Weight", "Cordon", "Fair share", "Adjusted fair share", "Current share", "Usage", "Queued", "Active", "Succeeded", "Ended otherwise"], rows),
    cluster.scheduler_here ? null : h("p", {}, "Shares and executors are shown by the worker that schedules; this one does not."),
    table("Executors", ["Executor", "Pool", "Nodes", "Capacity", "Allocated", "Active runs", "Last report", "Cordon"], executors));
}

// ------------------------------------------------------------------ jobs

function filtersFrom(params) {
  return {
    queue: params.get("queue") || "", job_set: params.get("job_set") || "", state: (params.get("state") || "").split(",").filter(Boolean),
    priority_class: params.get("priority_class") || "", label: params.get("label") || "", node: params.get("node") || "",
    submitted_from: params.get("submitted_from") || "", submitted_to: params.get("submitted_to") || "",
    sort: params.get("sort") || "submitted", order: params.get("order") || "desc", cursor: params.get("cursor") || "",
  };
}

function query(filters) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(filters)) {
    const text = Array.isArray(value) ? value.join(",") : value;
    if (text) params.set(key, text);
  }
  return params;
}

function jobsTable(caption, jobs) {
  return table(caption, ["Job", "Queue", "Job set", "State", "Priority", "Class", "Submitted", "Last transition", "Node", "Reason"],
    jobs.map((job) => h("tr", { "data-job": job.job_id },
      h("td", {}, jobLink(job.job_id)), h("td", {}, job.queue), h("td", {}, jobSetLink(job.queue, job.job_set)),
      h("td", {}, stateBadge(job.state)), h("td", { class: "num" }, job.priority), h("td", {}, job.priority_class),
      h("td", {}, time(job.submitted)), h("td", {}, time(job.last_transition)), h("td", {}, job.node || ""), h("td", {}, job.reason || ""))));
}

function filterForm(filters, fixed) {
  const field = (name, label, type) => h("label", {}, label, h("input", { name, type: type || "text", value: filters[name] }));
  const form = h("form", { class: "filters", "aria-label": "Filters" },
    fixed ? null : field("queue", "Queue"),
    fixed ? null : field("job_set", "Job set"),
    h("fieldset", {}, h("legend", {}, "States"),
      STATES.map((s) => h("label", {}, h("input", { type: "checkbox", name: "state", value: s, checked: filters.state.includes(s) }), s))),
    field("priority_class", "Priority class"), field("label", "Label (key=value)"), field("node", "Node"),
    field("submitted_from", "Submitted from (epoch ms)", "number"), field("submitted_to", "Submitted before (epoch ms)", "number"),
    h("label", {}, "Sort", h("select", { name: "sort" }, ["submitted", "last_transition", "priority"].map((s) => h("option", { value: s, selected: filters.sort === s }, s)))),
    h("label", {}, "Order", h("select", { name: "order" }, ["desc", "asc"].map((s) => h("option", { value: s, selected: filters.order === s }, s)))),
    h("button", { type: "submit" }, "Apply"));
  return form;
}

function readForm(form, base) {
  const data = new FormData(form);
  const filters = { ...base };
  for (const key of ["queue", "job_set", "priority_class", "label", "node", "submitted_from", "submitted_to", "sort", "order"]) {
    if (data.has(key)) filters[key] = data.get(key).trim();
  }
  filters.state = data.getAll("state");
  filters.cursor = "";
  return filters;
}

async function jobsPage(live, params) {
  const filters = filtersFrom(params);
  const page = await api("GET", `/api/v1/jobs?${query(filters)}`);
  if (live && document.activeElement && main.contains(document.activeElement) && document.activeElement.form) {
    // The user is editing a filter: refresh the rows only.
    main.querySelector("table").replaceWith(jobsTable("Jobs", page.jobs));
    return;
  }
  const form = filterForm(filters, false);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = `#/jobs?${query(readForm(form, filters))}`;
  });
  const pager = h("div", { class: "pager" },
    filters.cursor ? h("a", { href: `#/jobs?${query({ ...filters, cursor: "" })}` }, "First page") : null,
    page.next_cursor ? h("a", { href: `#/jobs?${query({ ...filters, cursor: page.next_cursor })}`, rel: "next" }, "Next page") : null,
    h("span", {}, `partitions ${page.partitions.join(", ")} of ${page.partitions_total}`));
  show(h("h1", {}, "Jobs"), form, jobsTable("Jobs", page.jobs), pager);
}

// ------------------------------------------------------------------ one job

async function control(path, body, what) {
  try {
    const answer = await api("POST", path, body);
    say(`${what}: request written (event ${answer.event_ids.join(", ")})`, "ok");
  } catch (error) {
    say(`${what} refused: ${error.message}`, "error");
  }
}

async function jobPage(live, params, jobId) {
  const path = `/api/v1/jobs/${encodeURIComponent(jobId)}`;
  const [job, scheduling] = await Promise.all([api("GET", path), api("GET", `${path}/scheduling`)]);
  const runs = job.runs.map((run) => h("tr", {},
    h("td", {}, run.run_id), h("td", {}, run.executor), h("td", {}, run.node), h("td", {}, stateBadge(run.state)),
    h("td", {}, time(run.leased_at)), h("td", {}, time(run.started_at)), h("td", {}, time(run.finished_at)),
    h("td", { class: "num" }, run.exit_code === null ? "" : run.exit_code), h("td", {}, run.reason || "")));
  const why = scheduling.last_cycle_reason || (job.state === "queued" && !scheduling.scheduler_here ? "(the scheduling worker knows)" : "");
  const header = h("section", { "aria-label": "Job" },
    h("h1", {}, `Job ${job.job_id}`),
    h("dl", {},
      h("dt", {}, "State"), h("dd", { id: "job-state" }, stateBadge(job.state)),
      h("dt", {}, "Queue"), h("dd", {}, h("a", { href: `#/jobs?queue=${encodeURIComponent(job.queue)}` }, job.queue)),
      h("dt", {}, "Job set"), h("dd", {}, jobSetLink(job.queue, job.job_set)),
      h("dt", {}, "Priority"), h("dd", {}, `${job.priority} (${job.priority_class})`),
      h("dt", {}, "Submitted"), h("dd", {}, time(job.submitted)),
      h("dt", {}, "Last transition"), h("dd", {}, time(job.last_transition)),
      h("dt", {}, "Reason"), h("dd", { id: "job-reason" }, job.reason || ""),
      h("dt", {}, "Why not scheduled / preempted"), h("dd", { id: "job-why" }, why || "")),
    table("Runs", ["Run", "Executor", "Node", "State", "Leased", "Started", "Finished", "Exit code", "Reason"], runs));
  if (live) {
    main.querySelector("section[aria-label=Job]").replaceWith(header);
    return;
  }
  const priority = h("input", { id: "new-priority", type: "number", min: "0", value: job.priority, "aria-label": "New priority" });
  const actions = h("div", { class: "actions" },
    h("button", { id: "cancel-job", onclick: () => control(`${path}/cancel`, { reason: "cancelled from the UI" }, "Cancel") }, "Cancel job"),
    h("button", { id: "preempt-job", onclick: () => control(`${path}/preempt`, { reason: "preempted from the UI" }, "Preempt") }, "Preempt job"),
    priority,
    h("button", { id: "reprioritize-job", onclick: () => control(`${path}/reprioritize`, { priority: Number(priority.value) }, "Reprioritise") }, "Reprioritise"));
  const logs = h("pre", { id: "job-logs", "aria-label": "Logs" }, "");
  const loadLogs = async () => {
    try { logs.textContent = (await api("GET", `${path}/logs`)).log || "(empty)"; } catch (error) { logs.textContent = `no logs: ${error.message}`; }
  };
  const events = h("section", { "aria-label": "Events" }, h("h2", {}, "Events"), h("p", {}, "Loading…"));
  const spec = h("pre", { id: "job-spec", "aria-label": "Spec" }, "");
  show(header, actions,
    h("h2", {}, "Logs"), h("button", { id: "load-logs", onclick: loadLogs }, "Load logs"), logs,
    events, h("h2", {}, "Spec"), spec);
  api("GET", `${path}/spec`).then((answer) => { spec.textContent = JSON.stringify(answer.spec, null, 2); }).catch((e) => { spec.textContent = e.message; });
  api("GET", `${path}/events`).then((answer) => {
    events.replaceChildren(h("h2", {}, "Events"), table("Events", ["Time", "Kind", "Details"], answer.events.map((e) => h("tr", {},
      h("td", {}, time(e.created)), h("td", {}, e.kind), h("td", {}, JSON.stringify(e.payload))))));
  }).catch((e) => events.replaceChildren(h("h2", {}, "Events"), h("p", { class: "error" }, e.message)));
  if (job.runs.length) loadLogs();
}

// ------------------------------------------------------------------ one job set

async function jobSetPage(live, params, queue, jobSet) {
  const filters = { ...filtersFrom(params), queue, job_set: jobSet };
  const [counts, page] = await Promise.all([
    api("GET", `/api/v1/job-counts?group_by=job_set&queue=${encodeURIComponent(queue)}`),
    api("GET", `/api/v1/jobs?${query(filters)}`),
  ]);
  const mine = (counts.groups.find((g) => g.job_set === jobSet) || { counts: {} }).counts;
  const summary = table("Jobs by state", STATES, [h("tr", {}, STATES.map((s) => h("td", { class: "num", "data-state": s }, mine[s] || 0)))]);
  if (live) {
    main.querySelectorAll("table")[0].replaceWith(summary);
    main.querySelectorAll("table")[1].replaceWith(jobsTable("Jobs of the job set", page.jobs));
    return;
  }
  const base = `/api/v1/queues/${encodeURIComponent(queue)}/jobsets/${encodeURIComponent(jobSet)}`;
  const actions = h("div", { class: "actions" },
    h("button", { id: "cancel-job-set", onclick: () => control(`${base}/cancel`, { reason: "cancelled from the UI" }, "Cancel job set") }, "Cancel job set"));
  const pager = h("div", { class: "pager" },
    page.next_cursor ? h("a", { href: `#/jobset/${encodeURIComponent(queue)}/${encodeURIComponent(jobSet)}?${query({ cursor: page.next_cursor })}` }, "Next page") : null);
  show(h("h1", {}, `Job set ${jobSet} of queue ${queue}`), summary, actions, jobsTable("Jobs of the job set", page.jobs), pager);
}

// ------------------------------------------------------------------ routing

function route() {
  const [path, search] = (location.hash.slice(1) || "/queues").split("?");
  const params = new URLSearchParams(search || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  for (const link of document.querySelectorAll("nav a")) link.toggleAttribute("aria-current", link.getAttribute("href") === `#/${parts[0]}`);
  if (parts[0] === "jobs") return (live) => jobsPage(live, params);
  if (parts[0] === "job" && parts[1]) return (live) => jobPage(live, params, parts[1]);
  if (parts[0] === "jobset" && parts[2]) return (live) => jobSetPage(live, params, parts[1], parts[2]);
  return (live) => queuesPage(live);
}

async function render(clearStatus) {
  const token = ++pageToken;
  clearTimeout(refreshTimer);
  const page = route();
  const run = async (live) => {
    try {
      await page(live);
      if (!live) main.focus({ preventScroll: true });
    } catch (error) {
      if (!live) show(h("h1", {}, "Not shown"), h("p", { class: "error", role: "alert" }, error.message));
    }
    if (token === pageToken) refreshTimer = setTimeout(() => run(true), REFRESH_MS);
  };
  if (clearStatus) say("");
  await run(false);
}

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const value = document.getElementById("token").value.trim();
  if (value) sessionStorage.setItem("flotilla-token", value);
  else sessionStorage.removeItem("flotilla-token");
  say(value ? "token in use for this session" : "no token", "ok");
  render(false);
});
window.addEventListener("hashchange", () => render(true));
render(true);
