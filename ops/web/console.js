// The console view: one row per conversation (a request, who asked, what it waits for or how it ended) that opens
// onto its sessions and a timeline from its audit log; open questions and approvals. It reads /_console/ (the product's Firestore, read-only) every few seconds while it is shown. Links to
// Slack open the thread in the workspace view when this page has one.
"use strict";

const consoleUi = { open: null, selected: null, timer: null, data: null, timeline: null };
const POLL_MS = 3000;

function age(iso, now) {
  if (!iso) return "?";
  const seconds = Math.max(0, Math.round((new Date(now) - new Date(iso)) / 1000));
  if (seconds < 60) return `${seconds}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h${String(Math.floor(seconds / 60) % 60).padStart(2, "0")}m`;
  return `${Math.floor(seconds / 86400)}d${Math.floor(seconds / 3600) % 24}h`;
}

function tokens(t) {
  const n = (k) => Number(t[k]) || 0; // numbers only: a count stored as text is never written into the page
  const total = n("prompt") + n("output") + n("thinking");
  return `<span title="prompt ${n("prompt")}, cached ${n("cached")}, output ${n("output")}, thinking ${n("thinking")}">${total.toLocaleString()}</span>`;
}

function slackLink(channel, ts, label) {
  if (!channel || !ts) return esc(label || "");
  const text = esc(label || `${channel}/${ts}`);
  return ui.hasWorkspace
    ? `<a href="#workspace" class="slack-link" data-channel="${esc(channel)}" data-ts="${esc(ts)}">${text}</a>`
    : `<span title="channel ${esc(channel)}, message ${esc(ts)}">${text}</span>`;
}

// One row per conversation (its request, who asked, its state); the open one shows its sessions and the timeline
// below it, across the whole table, so the list keeps its columns. The server gives people by name already.
// A session that handed its conversation to the next one is "resumed" in the store; a person reads "continued".
const STATUS_WORDS = { resumed: "continued below", silent_exit: "ended silently" };

// A request as Slack showed it (bold, emoji); its mentions and links are already plain text from the server.
function shown(text) {
  return mrkdwn(text, (id) => id);
}

function memberRows(c, now) {
  return c.sessions.map((m) => {
    const selected = m.id === consoleUi.selected ? " selected" : "";
    const task = m.depth ? ` <span class="task">${shown(m.text.slice(0, 100))}</span>` : "";
    return `<tr class="session${selected}" data-session="${esc(m.id)}" data-status="${esc(m.status)}">
      <td style="padding-left:${8 + m.depth * 20}px">${m.depth ? "↳ " : ""}${esc(m.role)}${task}</td>
      <td class="status">${esc(STATUS_WORDS[m.status] || m.status)}</td><td>${age(m.created_at, now)}</td><td>${tokens(m.tokens || {})}</td>
      <td><code>${esc(m.id)}</code></td></tr>`;
  }).join("");
}

function sessionRows(data) {
  const rows = data.conversations.map((c) => {
    const open = c.id === consoleUi.open;
    const row = `<tr class="conversation${open ? " open" : ""}" data-conversation="${esc(c.id)}" data-state="${esc(c.state)}">
      <td class="request">${open ? "▾" : "▸"} ${shown(c.request.slice(0, 140))}</td><td class="who">${esc(c.who)}</td>
      <td class="status state-${esc(c.state)}">${esc(c.label)}</td><td>${age(c.created_at, data.now)}</td>
      <td>${tokens(c.tokens || {})}</td><td>${slackLink(c.channel, c.ts, "thread")}</td></tr>`;
    if (!open) return row;
    return `${row}<tr class="detail"><td colspan="6">
      <table class="members"><thead><tr><th>session</th><th>status</th><th>age</th><th>tokens</th><th>id</th></tr></thead>
      <tbody>${memberRows(c, data.now)}</tbody></table>
      <div id="timeline-pane"><h3>Timeline <span id="timeline-title"></span></h3><ol id="timeline"></ol></div>
    </td></tr>`;
  });
  return rows.join("") || '<tr><td colspan="6">no requests in the last 7 days</td></tr>';
}

function renderOverview(data) {
  document.querySelector("#sessions tbody").innerHTML = sessionRows(data);
  if (consoleUi.timeline && consoleUi.timeline.session === consoleUi.selected) renderTimeline(consoleUi.timeline);
  document.querySelector("#questions tbody").innerHTML = data.questions.map((q) => `<tr>
      <td>${age(q.asked_at, data.now)}</td><td>${slackLink(q.channel, q.post_ts || q.thread_ts, q.text.slice(0, 100))}</td>
      <td>${q.options.map(esc).join(" · ")}</td><td>${q.may_answer.map(esc).join(", ")}</td>
      <td><code>${esc(q.session)}</code></td></tr>`).join("") || '<tr><td colspan="5">none</td></tr>';
  document.querySelector("#approvals tbody").innerHTML = data.approvals.map((a) => `<tr>
      <td>${age(a.asked_at, data.now)}</td><td>${slackLink(a.channel, a.card_ts || a.thread_ts, a.tool)}</td>
      <td><code>${esc(a.args)}</code></td><td>${a.may_decide.map(esc).join(", ")}</td>
      <td><code>${esc(a.session)}</code></td></tr>`).join("") || '<tr><td colspan="5">none</td></tr>';
}

function auditHtml(entry, step) {
  const ch = step.channel;
  switch (entry.type) {
    case "model": {
      const calls = entry.calls && entry.calls.length ? ` → calls ${entry.calls.map((c) => `<code>${esc(c)}</code>`).join(", ")}` : "";
      const cost = entry.tokens ? ` <small>(${tokens(entry.tokens)} tokens)</small>` : "";
      return `model turn${cost}${calls}${entry.text ? `<pre>${esc(entry.text)}</pre>` : ""}${entry.error ? `<pre>${esc(entry.error)}</pre>` : ""}`;
    }
    case "tool":
      return `tool <code>${esc(entry.name)}</code>(<code>${esc(entry.args || "")}</code>)<pre>${esc(entry.result || "")}</pre>` +
        (entry.posts || []).map((ts) => slackLink(ch, ts, "its post")).join(" ");
    case "post": return `posted ${slackLink(ch, entry.ts, `${entry.parts || 1} message(s)`)}${entry.text ? `<pre>${esc(entry.text)}</pre>` : ""}`;
    case "answer": return `answer${entry.text ? `<pre>${esc(entry.text)}</pre>` : ""}`;
    case "approval": return `decision on <code>${esc(entry.name)}</code>: ${esc(entry.result || "")} ${esc(entry.text || "")}`;
    case "notes": return `${Number(entry.count) || 0} note(s) folded in${entry.text ? `<pre>${esc(entry.text)}</pre>` : ""}`;
    case "result": return `result handed to the parent<pre>${esc(entry.text || "")}</pre>`;
    case "failure": return `failure<pre>${esc(entry.error || entry.text || "")}</pre>`;
    default: return `${esc(entry.type)}${entry.text ? `<pre>${esc(entry.text)}</pre>` : ""}`;
  }
}

function renderTimeline(data) {
  if (!$("timeline")) return; // its conversation was closed meanwhile
  $("timeline-title").innerHTML = `<code>${esc(data.session)}</code> ${slackLink(data.channel, data.thread_ts, "open its thread")}`;
  $("timeline").innerHTML = data.steps.map((step) => {
    const audit = step.audit.map((entry) => `<div class="audit" data-type="${esc(entry.type)}">${auditHtml(entry, { ...step, channel: data.channel })}</div>`).join("");
    const other = step.session !== data.session ? ` <small>by <code>${esc(step.session)}</code></small>` : "";
    return `<li data-kind="${esc(step.kind)}"><span class="kind">${esc(step.kind)}</span> <small>${esc(new Date(step.at).toLocaleTimeString())}</small>${other}${audit}</li>`;
  }).join("");
}

async function consoleRead(path) {
  const response = await fetch(`/_console/${path}`);
  const body = await response.json();
  if (!response.ok || body.ok === false) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

async function consoleRefresh() {
  try {
    consoleUi.data = await consoleRead("overview");
    renderOverview(consoleUi.data);
    if (consoleUi.selected) {
      consoleUi.timeline = await consoleRead(`timeline?session=${encodeURIComponent(consoleUi.selected)}`);
      renderTimeline(consoleUi.timeline);
    }
    $("console-error").textContent = "";
    document.body.dataset.console = consoleUi.data.now; // tests wait for a fresh read
  } catch (error) {
    $("console-error").textContent = `cannot read the product's state: ${error.message}`;
  }
}

document.addEventListener("view", (event) => {
  clearInterval(consoleUi.timer);
  if (event.detail !== "console") return;
  consoleRefresh();
  consoleUi.timer = setInterval(consoleRefresh, POLL_MS);
});

document.addEventListener("click", (event) => {
  const link = event.target.closest(".slack-link");
  if (link) {
    event.preventDefault();
    openInWorkspace(link.dataset.channel, link.dataset.ts);
    return;
  }
  const member = event.target.closest("tr.session");
  const conversation = event.target.closest("tr.conversation");
  if (member) {
    consoleUi.selected = member.dataset.session;
  } else if (conversation) {
    const id = conversation.dataset.conversation;
    consoleUi.open = consoleUi.open === id ? null : id;
    consoleUi.selected = consoleUi.open; // the request's timeline: its continuations' steps are in it too
  } else {
    return;
  }
  consoleUi.timeline = null;
  if (consoleUi.data) renderOverview(consoleUi.data);
  consoleRefresh();
});
