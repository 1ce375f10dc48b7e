/* snerd dashboard: plain JavaScript, no framework, no build step.
 * Routes (location.hash): #/ overview, #/tasks?state=&type=&q=, #/task/<id>, #/dlq.
 * Data: the JSON API under /api/; live updates from the websocket /ws. */
"use strict";
(() => {
  const STATES = ["pending", "scheduled", "blocked", "active", "dead_lettered", "completed", "cancelled"];
  const LIVE_CARDS = ["pending", "scheduled", "blocked", "active", "dead_lettered"];
  const CARD_LABEL = { pending: "Pending", scheduled: "Scheduled", blocked: "Blocked", active: "Active", dead_lettered: "Dead-lettered" };
  const CANCELLABLE = new Set(["pending", "scheduled", "blocked"]);
  const view = document.getElementById("view");
  let current = null; // the rendered view: {onChanged(msg), onProgress(msg)}

  // --- DOM helpers ---------------------------------------------------------------------
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "text") el.textContent = v;
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const kid of kids.flat()) if (kid !== null && kid !== undefined && kid !== false)
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    return el;
  }
  function s(tag, attrs, ...kids) {
    const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, v);
    for (const kid of kids.flat()) if (kid) el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    return el;
  }
  const put = (el, ...kids) => el.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false));
  const label = (state) => String(state || "").replace(/_/g, " ");
  const badge = (state) => h("span", { class: `badge s-${state}`, "data-state": state, text: label(state) });
  const taskLink = (id) => h("a", { href: `#/task/${encodeURIComponent(id)}`, class: "mono", text: id });
  const panel = (title, hint, ...body) =>
    h("section", { class: "panel" }, h("header", {}, h("h2", { text: title }), hint ? h("span", { class: "hint", text: hint }) : null), ...body);

  function progressBar(pct, state, id) {
    const cls = state === "completed" ? "bar done" : state === "dead_lettered" ? "bar dead" : "bar";
    const fill = h("i");
    fill.style.width = `${Math.round(pct || 0)}%`;
    return h("div", { class: "progress-line", "data-progress": id || null },
      h("div", { class: cls, role: "progressbar", "aria-valuenow": Math.round(pct || 0) }, fill),
      h("span", { class: "pct", text: `${Math.round(pct || 0)}%` }));
  }
  function setProgress(root, pct) {
    const fill = root.querySelector(".bar > i");
    if (fill) fill.style.width = `${Math.round(pct)}%`;
    const text = root.querySelector(".pct");
    if (text) text.textContent = `${Math.round(pct)}%`;
    const bar = root.querySelector(".bar");
    if (bar) bar.setAttribute("aria-valuenow", Math.round(pct));
  }

  // --- formatting --------------------------------------------------------------------------
  function when(iso) {
    if (!iso) return "—";
    const d = new Date(iso);
    if (isNaN(d)) return String(iso);
    const time = d.toLocaleTimeString([], { hour12: false });
    return d.toDateString() === new Date().toDateString() ? time : `${d.toLocaleDateString()} ${time}`;
  }
  function relative(iso) {
    if (!iso) return "";
    const secs = Math.round((new Date(iso) - Date.now()) / 1000);
    const abs = Math.abs(secs);
    const text = abs < 60 ? `${abs}s` : abs < 3600 ? `${Math.round(abs / 60)}m` : `${Math.round(abs / 3600)}h`;
    return secs >= 0 ? `in ${text}` : `${text} ago`;
  }
  const json = (value) => {
    if (typeof value === "string") { try { return JSON.stringify(JSON.parse(value), null, 2); } catch { return value; } }
    return JSON.stringify(value, null, 2);
  };

  function toast(message, bad) {
    const el = h("div", { class: bad ? "toast bad" : "toast", text: message });
    document.getElementById("toasts").append(el);
    setTimeout(() => el.remove(), bad ? 6000 : 3000);
  }
  function throttle(fn, ms) {
    let timer = null, again = false;
    return () => {
      if (timer) { again = true; return; }
      fn();
      timer = setTimeout(function tick() { timer = null; if (again) { again = false; fn(); timer = setTimeout(tick, ms); } }, ms);
    };
  }

  // --- API ---------------------------------------------------------------------------------
  async function call(method, path, body) {
    const init = { method, headers: { Accept: "application/json" } };
    if (body !== undefined) { init.body = JSON.stringify(body); init.headers["Content-Type"] = "application/json"; }
    const res = await fetch(path, init);
    const data = await res.json().catch(() => ({ error: res.statusText }));
    if (!res.ok) { const err = new Error(data.error || res.statusText); err.status = res.status; throw err; }
    return data;
  }
  const get = (path) => call("GET", path);
  async function act(method, path, done) {
    try { await call(method, path); toast(done); } catch (e) { toast(e.message, true); }
  }

  // --- overview ------------------------------------------------------------------------------
  function throughputChart(rows) {
    const W = 600, H = 180, pad = { l: 34, r: 8, t: 10, b: 22 };
    const max = Math.max(4, ...rows.map((r) => Math.max(r.completed + r.failed_attempts + r.dead_lettered, r.enqueued)));
    const bw = (W - pad.l - pad.r) / rows.length, y = (v) => H - pad.b - (v / max) * (H - pad.t - pad.b);
    const g = s("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": "Throughput per minute" });
    for (const v of [0, Math.round(max / 2), max]) {
      g.append(s("line", { class: "grid-line", x1: pad.l, x2: W - pad.r, y1: y(v), y2: y(v) }),
        s("text", { class: "axis", x: pad.l - 6, y: y(v) + 3, "text-anchor": "end" }, String(v)));
    }
    rows.forEach((r, i) => {
      const x = pad.l + i * bw + bw * 0.12, w = bw * 0.36;
      if (r.enqueued) g.append(s("rect", { class: "k-enqueued", x, width: w, y: y(r.enqueued), height: y(0) - y(r.enqueued), rx: 2 }));
      let base = 0;
      for (const [key, cls] of [["completed", "k-completed"], ["failed_attempts", "k-failed"], ["dead_lettered", "k-dead"]]) {
        if (!r[key]) continue;
        g.append(s("rect", { class: cls, x: x + w + bw * 0.04, width: w, y: y(base + r[key]), height: y(base) - y(base + r[key]), rx: 2 }));
        base += r[key];
      }
      if (i % 5 === rows.length % 5 || i === rows.length - 1) {
        const t = new Date(r.minute * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hour12: false });
        g.append(s("text", { class: "axis", x: pad.l + i * bw + bw / 2, y: H - 6, "text-anchor": "middle" }, t));
      }
    });
    return h("div", { class: "chart body" }, g, h("div", { class: "legend" },
      ...[["k-completed", "completed"], ["k-failed", "failed attempts"], ["k-dead", "dead-lettered"], ["k-enqueued", "enqueued"]]
        .map(([cls, text]) => h("span", {}, h("i", { class: cls }), text))));
  }

  function rateTable(groups) {
    if (!groups.length) return h("div", { class: "empty", text: "No rate-limited groups." });
    return h("div", { class: "table-wrap" }, h("table", {},
      h("thead", {}, h("tr", {}, h("th", { text: "Group" }), h("th", { text: "Window (60 s)" }), h("th", { text: "Waiting" }), h("th", { text: "Next slot" }))),
      h("tbody", {}, groups.map((g) => {
        const limit = g.maxPerMinute, pct = limit ? Math.min(100, (100 * g.used) / limit) : 0, fill = h("i");
        fill.style.width = `${pct}%`;
        return h("tr", { "data-group": g.group }, h("td", { class: "mono", text: g.group }),
          h("td", {}, h("div", { class: "meter" }, h("div", { class: pct >= 100 ? "bar full" : "bar" }, fill),
            h("span", { class: "mono", text: `${g.used}/${limit ?? "?"}` }))),
          h("td", { class: "num", text: g.waiting }), h("td", { text: g.nextSlotAt ? relative(g.nextSlotAt) : "free" }));
      }))));
  }

  function renderOverview() {
    const feed = h("ul", { class: "feed" }, h("li", { class: "empty", text: "Waiting for activity…" }));
    const body = h("div", {});
    put(view, h("h1", { text: "Overview" }), h("p", { class: "sub", id: "overview-sub", text: "Loading…" }), body,
      panel("Live activity", "progress and state changes as they happen", feed));
    const note = (text) => {
      if (feed.firstChild && feed.firstChild.classList.contains("empty")) put(feed);
      feed.prepend(h("li", {}, h("span", { class: "t", text: new Date().toLocaleTimeString([], { hour12: false }) }), text));
      while (feed.children.length > 50) feed.lastChild.remove();
    };
    async function load() {
      const st = await get("/api/stats");
      document.getElementById("overview-sub").textContent =
        `${st.storage || "in-memory log"} · ${st.log.records} records · seq ${st.seq}`;
      const t = st.totals, scope = st.historyComplete ? "since the log began" : "counting history…";
      put(body,
        h("div", { class: "grid cards" }, LIVE_CARDS.map((state) =>
          h("a", { class: "card", href: `#/tasks?state=${state}`, "data-state": state },
            h("div", { class: "n", text: st.counts[state] ?? 0 }), h("div", { class: "l", text: CARD_LABEL[state] })))),
        h("div", { class: "totals" }, h("span", {}, h("b", { text: t.enqueued }), " enqueued"), h("span", {}, h("b", { text: t.completed }), " completed"),
          h("span", {}, h("b", { text: t.failed_attempts }), " failed attempts"), h("span", {}, h("b", { text: t.dead_lettered }), " dead-lettered"),
          h("span", {}, h("b", { text: t.cancelled }), " cancelled"), h("span", { text: `(${scope})` })),
        h("div", { class: "grid two" }, panel("Throughput", "per minute, last 15 minutes", throughputChart(st.throughput)),
          panel("Rate-limit groups", "dispatches in the rolling window", rateTable(st.rateGroups))));
      updateDlqPill(st.counts.dead_lettered);
    }
    const reload = throttle(() => load().catch((e) => toast(e.message, true)), 1000);
    reload();
    return {
      onChanged(msg) { reload(); if (msg.ids.length) note(h("span", {}, `${msg.ids.length} task(s) changed: `, ...msg.ids.slice(0, 3).flatMap((id, i) => [i ? ", " : "", taskLink(id)]))); },
      onProgress(msg) { note(h("span", {}, taskLink(msg.task_id), ` progress ${Math.round(msg.percent)}%`)); },
    };
  }

  // --- task list ------------------------------------------------------------------------------
  function taskRow(t, refresh) {
    const cancel = CANCELLABLE.has(t.state)
      ? h("button", { class: "danger", text: "Cancel", onclick: () => act("POST", `/api/tasks/${encodeURIComponent(t.id)}/cancel`, `Cancelled ${t.id}`).then(refresh) })
      : null;
    return h("tr", { "data-task-id": t.id, "data-state": t.state },
      h("td", {}, taskLink(t.id)), h("td", { text: t.type }), h("td", {}, badge(t.state)),
      h("td", {}, progressBar(t.progress, t.state, t.id)),
      h("td", { class: "num", text: `${t.attempt || 0} / ${t.maxRetries + 1}` }),
      h("td", { text: when(t.createdAt) }), h("td", {}, h("div", { class: "actions" }, cancel)));
  }

  function renderTasks(params) {
    const stateSel = h("select", { "aria-label": "State", id: "f-state" }, h("option", { value: "", text: "All states" }),
      STATES.map((st) => h("option", { value: st, text: label(st), selected: params.get("state") === st })));
    const typeSel = h("select", { "aria-label": "Type", id: "f-type" }, h("option", { value: "", text: "All types" }));
    const search = h("input", { type: "search", placeholder: "Search by task id…", id: "f-q", value: params.get("q") || "" });
    const count = h("span", { class: "hint" });
    const tbody = h("tbody", {});
    put(view, h("h1", { text: "Tasks" }), h("p", { class: "sub", text: "Live and dead-lettered tasks, plus the ones that finished recently." }),
      h("section", { class: "panel" }, h("div", { class: "filters" }, stateSel, typeSel, search, count),
        h("div", { class: "table-wrap" }, h("table", { id: "tasks" },
          h("thead", {}, h("tr", {}, ["Task", "Type", "State", "Progress", "Attempts", "Created", ""].map((c) => h("th", { text: c })))), tbody))));
    const query = () => {
      const q = new URLSearchParams();
      if (stateSel.value) q.set("state", stateSel.value);
      if (typeSel.value) q.set("type", typeSel.value);
      if (search.value.trim()) q.set("q", search.value.trim());
      return q;
    };
    async function load() {
      const q = query();
      const res = await fetch(`/api/tasks?${q}&limit=500`);
      const rows = await res.json();
      if (!res.ok) throw new Error(rows.error || res.statusText);
      const total = Number(res.headers.get("X-Total-Count") || rows.length);
      count.textContent = total > rows.length ? `showing ${rows.length} of ${total}` : `${total} task${total === 1 ? "" : "s"}`;
      put(tbody, ...(rows.length ? rows.map((t) => taskRow(t, refresh)) : [h("tr", {}, h("td", { colspan: 7, class: "empty", text: "No tasks match." }))]));
    }
    const refresh = () => load().catch((e) => toast(e.message, true)); // after the user's own action: at once
    const reload = throttle(refresh, 800); // after changes anyone made: at most every 0.8 s
    const apply = () => { history.replaceState(null, "", `#/tasks${query().toString() ? "?" + query() : ""}`); reload(); };
    stateSel.addEventListener("change", apply);
    typeSel.addEventListener("change", apply);
    let debounce = null;
    search.addEventListener("input", () => { clearTimeout(debounce); debounce = setTimeout(apply, 250); });
    get("/api/stats").then((st) => {
      typeSel.append(...st.types.map((t) => h("option", { value: t, text: t, selected: params.get("type") === t })));
      updateDlqPill(st.counts.dead_lettered);
      if (params.get("type")) reload();
    }).catch(() => {});
    reload();
    return {
      onChanged: reload,
      onProgress(msg) {
        const row = tbody.querySelector(`tr[data-task-id="${CSS.escape(msg.task_id)}"] [data-progress]`);
        if (row) setProgress(row, msg.percent);
      },
    };
  }

  // --- task detail ------------------------------------------------------------------------------
  const EVENT_TEXT = {
    enqueued: () => "Enqueued", claimed: (e) => `Attempt ${e.attempt ?? ""} started`, succeeded: () => "Completed",
    retry_scheduled: (e) => `Attempt failed — retry ${e.retryCount ?? ""} scheduled`, dead_lettered: (e) => `Dead-lettered (${label(e.reason || "retries exhausted")})`,
    rescheduled: () => "Rescheduled (next occurrence)", cancelled: () => "Cancelled", requeued: () => "Requeued from the dead-letter queue",
    claim_released: (e) => `Attempt released (${label(e.reason || "")})`, purged: () => "Deleted from the dead-letter queue",
    progress: (e) => `Progress ${typeof e.data === "object" && e.data !== null ? "" : e.data ?? ""}`.trim(),
    blocked: (e) => `Blocked (${e.reason || "waiting for parents"})`, unblocked: (e) => `Unblocked (${e.reason || "parents done"})`,
    "snerdmq:upsert": () => "State line (SnerdMQ format)", "snerdmq:deleted": () => "Deleted (SnerdMQ format)", elided: (e) => `… ${e.count} events not shown …`,
  };
  function timelineItem(e) {
    const text = (EVENT_TEXT[e.event] || (() => e.event))(e);
    const meta = [];
    if (e.daemon) meta.push("by ", h("code", { text: e.daemon }), " ");
    if (e.executeAt) meta.push(`runs at ${when(e.executeAt)} `);
    if (e.retryAfterTime) meta.push(`retry at ${when(e.retryAfterTime)} `);
    if (e.seq !== undefined) meta.push(`· seq ${e.seq}`);
    return h("li", { class: `s-${e.state}`, "data-event": e.event }, h("span", { class: "pin" }),
      h("div", {}, h("span", { class: "what", text: text }), h("span", { class: "when", text: when(e.at) })),
      meta.length ? h("div", { class: "meta" }, meta) : null,
      e.error ? h("div", { class: "error", text: e.error }) : null,
      e.event === "progress" && typeof e.data === "object" && e.data !== null ? h("div", { class: "meta mono", text: JSON.stringify(e.data) }) : null);
  }

  function dagSvg(dag) {
    const NW = 176, NH = 46, GX = 64, GY = 14;
    const levels = [...new Set(dag.nodes.map((n) => n.level))].sort((a, b) => a - b);
    const cols = levels.map((lv) => dag.nodes.filter((n) => n.level === lv));
    const height = Math.max(...cols.map((c) => c.length)) * (NH + GY) + GY, width = cols.length * (NW + GX) - GX + 20;
    const pos = {};
    cols.forEach((col, ci) => col.forEach((n, ri) => {
      const top = (height - col.length * (NH + GY) + GY) / 2;
      pos[n.id] = { x: 10 + ci * (NW + GX), y: top + ri * (NH + GY) };
    }));
    const g = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "Task graph" });
    for (const [p, c] of dag.edges) {
      const a = pos[p], b = pos[c];
      if (!a || !b) continue;
      const x1 = a.x + NW, y1 = a.y + NH / 2, x2 = b.x, y2 = b.y + NH / 2, mx = (x1 + x2) / 2;
      g.append(s("path", { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}` }));
    }
    for (const n of dag.nodes) {
      const { x, y } = pos[n.id], short = n.id.length > 22 ? n.id.slice(0, 21) + "…" : n.id;
      const node = s("g", { class: `node s-${n.state}${n.id === dag.root ? " root" : ""}`, transform: `translate(${x},${y})`, "data-node": n.id },
        s("title", {}, `${n.id} (${n.type || "?"}): ${label(n.state)}`),
        s("rect", { width: NW, height: NH, rx: 8 }), s("text", { x: 10, y: 19 }, short), s("text", { class: "state", x: 10, y: 36 }, label(n.state)));
      node.addEventListener("click", () => { location.hash = `#/task/${encodeURIComponent(n.id)}`; });
      g.append(node);
    }
    return h("div", { class: "dag body" }, g);
  }

  function prop(name, value) {
    const wide = name === "Parents" || name === "Unknown parents" || name === "Children" || name === "Last error";
    return value === null || value === undefined || value === "" ? null : h("div", { class: wide ? "wide" : null }, h("dt", { text: name }), h("dd", {}, value));
  }

  function renderTask(id) {
    const enc = encodeURIComponent(id);
    const head = h("div", { class: "detail-head" }, h("h1", {}, h("span", { class: "mono", text: id })));
    const top = h("div", {}), dagBox = h("div", {}), tl = h("ol", { class: "timeline", id: "timeline" });
    put(view, h("p", { class: "sub" }, h("a", { href: "#/tasks", text: "← Tasks" })), head, top, dagBox,
      panel("Timeline", "every recorded transition, oldest first", h("div", { class: "body" }, tl)));
    let task = null;
    async function loadTask() {
      try { task = await get(`/api/tasks/${enc}`); } catch (e) { if (e.status !== 404) throw e; task = null; }
      const buttons = [];
      if (task && CANCELLABLE.has(task.state)) buttons.push(h("button", { class: "danger", text: "Cancel task", onclick: () => act("POST", `/api/tasks/${enc}/cancel`, "Cancelled").then(refresh) }));
      if (task && task.state === "dead_lettered") {
        const key = encodeURIComponent(task.dlqKey || id);
        buttons.push(h("button", { class: "primary", text: "Requeue", onclick: () => act("POST", `/api/dlq/${key}/requeue`, "Requeued").then(refresh) }),
          h("button", { class: "danger", text: "Delete", onclick: () => confirm(`Delete ${id} from the dead-letter queue for good?`) && act("DELETE", `/api/dlq/${key}`, "Deleted").then(refresh) }));
      }
      put(head, h("div", {}, h("h1", {}, h("span", { class: "mono", text: id }), task ? badge(task.state) : badge("absent")),
        h("p", { class: "sub", text: task ? `type ${task.type}` : "Not in the queue now (completed long ago, purged, or never enqueued)." })),
        h("div", { class: "actions" }, buttons));
      if (!task) { put(top); put(dagBox); return; }
      const links = (items) => items.length ? h("div", { class: "links" }, items.map((p) => h("span", {}, taskLink(p.id), " ", badge(p.state)))) : "—";
      const hasData = task.progressData !== null && task.progressData !== undefined;
      put(top,
        task.state === "active" || hasData ? panel("Progress", task.state === "active" ? "live" : null, h("div", { class: "body", id: "progress" },
          progressBar(task.progress, task.state, id), hasData ? h("pre", { class: "data", id: "progress-data", text: json(task.progressData) }) : null)) : null,
        panel("Details", null, h("div", { class: "body" }, h("dl", { class: "props" },
          prop("Attempts", `${task.attempt || 0} of ${task.maxRetries + 1}`), prop("Retries used", `${task.retryCount} / ${task.maxRetries}`),
          prop("Urgency", task.urgencyScore), prop("Created", when(task.createdAt)), prop("Runs at", task.runAt ? `${when(task.runAt)} (${relative(task.runAt)})` : null),
          prop("Retry at", task.retryAt && CANCELLABLE.has(task.state) ? `${when(task.retryAt)} (${relative(task.retryAt)})` : null),
          prop("Rate group", task.rateLimitGroup), prop("Pool", task.pool), prop("Cron", task.cronExpression), prop("Webhook", task.webhookUrl),
          prop("Timeout", task.maxExecutionSeconds ? `${task.maxExecutionSeconds} s` : null), prop("Running on", task.claim ? task.claim.daemon : null),
          prop("Reason", task.reason ? label(task.reason) : null), prop("Last error", task.lastError),
          prop("Parents", task.parents.length ? links(task.parentStates) : null),
          prop("Unknown parents", task.unknownParents && task.unknownParents.length ? h("span", { class: "err", id: "unknown-parents", text: `${task.unknownParents.join(", ")}: neither live nor dead-lettered when this task was enqueued, so it did not wait for them (a mistyped id?)` }) : null), prop("Children", task.children.length ? links(task.children) : null)),
        h("h2", { text: "Payload", class: "sub" }), h("pre", { class: "data", text: json(task.taskData) }),
        task.state === "completed" ? h("h2", { text: "Result", class: "sub" }) : null,
        task.state === "completed" ? h("pre", { class: "data", id: "task-result", text: task.result === null || task.result === undefined ? "— (none recorded)" : json(task.result) }) : null)));
      if (task.parents.length || task.children.length) {
        const dag = await get(`/api/dag/${enc}`);
        put(dagBox, panel("Workflow", "parents on the left, children on the right; click a task", dagSvg(dag)));
      } else put(dagBox);
    }
    async function loadHistory() {
      try {
        const hist = await get(`/api/tasks/${enc}/history`);
        put(tl, ...hist.entries.map(timelineItem));
      } catch (e) {
        if (e.status !== 404) throw e;
        put(tl, h("li", { class: "empty", text: "No recorded history for this id." }));
      }
    }
    const refresh = () => Promise.all([loadTask(), loadHistory()]).catch((e) => toast(e.message, true)); // after the user's own action
    const reload = throttle(refresh, 1200); // after changes anyone made
    reload();
    return {
      onChanged(msg) { if (msg.reset || msg.more || msg.ids.includes(id) || (task && task.children.some((c) => msg.ids.includes(c.id)))) reload(); },
      onProgress(msg) {
        if (msg.task_id !== id) return;
        const box = document.getElementById("progress");
        if (box) {
          setProgress(box, msg.percent);
          let pre = document.getElementById("progress-data");
          if (!pre) { pre = h("pre", { class: "data", id: "progress-data" }); box.append(pre); }
          pre.textContent = json(msg.data);
        }
        tl.append(timelineItem({ event: "progress", state: "active", data: msg.data, at: new Date().toISOString() }));
      },
    };
  }

  // --- dead letters ---------------------------------------------------------------------------------
  function renderDlq() {
    const tbody = h("tbody", {});
    put(view, h("h1", { text: "Dead letters" }), h("p", { class: "sub", text: "Tasks that ran out of retries, or whose parent did. Requeue restores their retries." }),
      h("section", { class: "panel" }, h("div", { class: "table-wrap" }, h("table", { id: "dlq" },
        h("thead", {}, h("tr", {}, ["Task", "Type", "Reason", "Last error", "Retries", "Dead-lettered", ""].map((c) => h("th", { text: c })))), tbody))));
    async function load() {
      const rows = await get("/api/dlq");
      updateDlqPill(rows.length);
      put(tbody, ...(rows.length ? rows.map((r) => {
        const key = encodeURIComponent(r.dlqKey);
        return h("tr", { "data-task-id": r.dlqKey },
          h("td", {}, taskLink(r.dlqKey)), h("td", { text: r.type }), h("td", {}, h("span", { class: "badge s-dead_lettered", text: label(r.reason) })),
          h("td", { class: "err", title: r.lastError || "", text: r.lastError || "—" }), h("td", { class: "num", text: `${r.retryCount} / ${r.maxRetries}` }),
          h("td", { text: when(r.deadLetteredAt) }),
          h("td", {}, h("div", { class: "actions" },
            h("button", { class: "primary", text: "Requeue", onclick: () => act("POST", `/api/dlq/${key}/requeue`, `Requeued ${r.dlqKey}`).then(refresh) }),
            h("button", { class: "danger", text: "Delete", onclick: () => confirm(`Delete ${r.dlqKey} for good?`) && act("DELETE", `/api/dlq/${key}`, `Deleted ${r.dlqKey}`).then(refresh) }))));
      }) : [h("tr", {}, h("td", { colspan: 7, class: "empty", text: "The dead-letter queue is empty." }))]));
    }
    const refresh = () => load().catch((e) => toast(e.message, true)); // after the user's own action: at once
    const reload = throttle(refresh, 800); // after changes anyone made: at most every 0.8 s
    reload();
    return { onChanged: reload, onProgress() {} };
  }

  function updateDlqPill(n) {
    const pill = document.getElementById("dlq-count");
    pill.hidden = !n;
    pill.textContent = n || "";
  }

  // --- router & live updates ------------------------------------------------------------------------
  function route() {
    const hash = location.hash.replace(/^#/, "") || "/";
    const [path, qs] = hash.split("?");
    const params = new URLSearchParams(qs || "");
    let tab = "overview";
    if (path.startsWith("/task/")) { tab = "tasks"; current = renderTask(decodeURIComponent(path.slice(6))); }
    else if (path === "/tasks") { tab = "tasks"; current = renderTasks(params); }
    else if (path === "/dlq") { tab = "dlq"; current = renderDlq(); }
    else current = renderOverview();
    document.querySelectorAll(".tabs a").forEach((a) => a.classList.toggle("on", a.dataset.tab === tab));
  }

  function connect(delay) {
    const conn = document.getElementById("conn"), text = document.getElementById("conn-text");
    const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`);
    ws.onopen = () => { conn.className = "conn live"; text.textContent = "live"; delay = 500; };
    ws.onmessage = (ev) => {
      const msg = JSON.parse(ev.data);
      if (msg.counts) updateDlqPill(msg.counts.dead_lettered);
      if (!current) return;
      if (msg.type === "progress") current.onProgress(msg);
      else if (msg.type === "changed") current.onChanged(msg);
      else if (msg.type === "resync") current.onChanged({ ids: [], reset: true, more: true });
    };
    ws.onclose = () => {
      conn.className = "conn down"; text.textContent = "reconnecting…";
      setTimeout(() => connect(Math.min(delay * 2, 10000)), delay);
    };
  }

  window.addEventListener("hashchange", route);
  route();
  connect(500);
})();
