// The workspace: channels, DMs and threads of the fake Slack, shown as Slack shows them, for whichever person
// you switch to. Typing, clicking and reacting go through the fake Slack's control API (the same endpoints the
// terminal chat uses), which sends the product signed events and interactivity payloads. Live updates come
// from the server-sent event stream; each event says only that something changed.
"use strict";

const params = new URLSearchParams(location.search);
const ui = {
  snapshot: null,
  user: params.get("user") || localStorage.getItem("user") || "U0HUMAN",
  channel: "C0LOCAL",
  thread: null, // the root ts of the open thread
  seen: {}, // channel -> how many messages were seen there
};
const REACTIONS = ["+1", "eyes", "white_check_mark", "tada", "heart", "raised_hands"];
const $ = (id) => document.getElementById(id);

function people() {
  const s = ui.snapshot;
  return s ? [s.bot, ...s.people] : [];
}

function who(id) {
  return people().find((p) => p.id === id) || { id, name: id.toLowerCase(), real_name: id, color: "#868686" };
}

function names(id) {
  return who(id).name;
}

async function api(name, body) {
  const response = await fetch(`/_fake/${name}`, body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok || answer.ok === false) throw new Error(answer.error || `HTTP ${response.status}`);
  return answer;
}

function toast(text) {
  const el = $("toast");
  el.textContent = text;
  el.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { el.hidden = true; }, 4000);
}

// -- rendering --------------------------------------------------------------------------------

function avatar(person, small) {
  const letter = (person.real_name || person.name || "?")[0].toUpperCase();
  return `<span class="avatar${small ? " small" : ""}" style="background:${esc(person.color)}">${esc(letter)}</span>`;
}

function time(ts) {
  return new Date(Number(ts) * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

function reactionsOf(message) {
  const pills = (message.reactions || []).map((r) => {
    const mine = r.users.includes(ui.user) ? " mine" : "";
    const title = r.users.map((u) => who(u).real_name).join(", ");
    return `<button type="button" class="reaction${mine}" data-reaction="${esc(r.name)}" title="${esc(title)} reacted with :${esc(r.name)}:">${emoji(r.name)} ${r.count}</button>`;
  });
  return pills.length ? `<div class="reactions">${pills.join("")}</div>` : "";
}

function messageHtml(message, { inThread, ephemeral }) {
  const author = message.bot_id ? ui.snapshot.bot : who(message.user);
  const app = message.bot_id ? '<span class="app">APP</span>' : "";
  const edited = message.edited ? '<span class="edited">(edited)</span>' : "";
  const only = ephemeral ? '<span class="only-you">Only visible to you</span>' : "";
  const replies = !inThread && message.reply_count
    ? `<div class="replies-link" data-thread="${esc(message.ts)}">${message.reply_count} ${message.reply_count === 1 ? "reply" : "replies"}</div>` : "";
  const tools = ephemeral ? "" : `<div class="tools">${REACTIONS.map((r) =>
    `<button type="button" data-add-reaction="${r}" title=":${r}:">${emoji(r)}</button>`).join("")}${
    inThread ? "" : `<button type="button" data-thread="${esc(message.ts)}" title="reply in thread">💬</button>`}</div>`;
  const kind = ephemeral ? "message ephemeral" : "message";
  return `<div class="${kind}" data-ts="${esc(message.ts)}" data-channel="${esc(message.channel)}" data-user="${esc(author.id)}">
    ${avatar(author)}
    <div class="content">
      <div><span class="who">${esc(author.real_name)}</span>${app}<span class="time">${time(message.ts)}</span>${edited}${only}</div>
      <div class="body">${messageBody(message, names)}</div>
      ${reactionsOf(message)}${replies}
    </div>${tools}
  </div>`;
}

function channelName(id) {
  const s = ui.snapshot;
  const person = s.people.find((p) => p.dm === id); // a DM first: once it has messages it is a channel too
  if (person) return `${s.bot.real_name} (direct message with ${person.real_name})`;
  const channel = [...s.channels, ...s.extra_channels].find((c) => c.id === id);
  return channel ? `# ${channel.name}` : id;
}

function sidebar() {
  const s = ui.snapshot;
  const me = s.people.find((p) => p.id === ui.user) || s.people[0];
  const unread = (id) => {
    const count = (s.messages[id] || []).length - (ui.seen[id] || 0);
    return id !== ui.channel && count > 0 ? `<span class="unread">${count}</span>` : "";
  };
  const item = (id, label) =>
    `<li data-channel="${esc(id)}" class="${id === ui.channel ? "active" : ""}">${label}${unread(id)}</li>`;
  $("channels").innerHTML = [...s.channels, ...s.extra_channels.filter((c) => !c.id.startsWith("D"))]
    .map((c) => item(c.id, `# ${esc(c.name)}`)).join("");
  $("dms").innerHTML = item(me.dm, `${avatar(s.bot, true)} ${esc(s.bot.real_name)}`);
  $("offline").hidden = s.connected;
}

function render() {
  const s = ui.snapshot;
  if (!s) return;
  const me = who(ui.user);
  $("user").innerHTML = s.people.map((p) =>
    `<option value="${esc(p.id)}"${p.id === ui.user ? " selected" : ""}>${esc(p.real_name)}</option>`).join("");
  $("who-avatar").outerHTML = `<span id="who-avatar">${avatar(me, true)}</span>`;
  const mine = s.people.find((p) => p.id === ui.user);
  $("who-role").textContent = mine && mine.operator ? "operator" : "not an operator";
  $("notice").hidden = !s.notice;
  $("notice").textContent = s.notice || "";
  ui.seen[ui.channel] = (s.messages[ui.channel] || []).length;
  sidebar();
  $("channel-title").textContent = channelName(ui.channel);
  const purpose = (s.channels.find((c) => c.id === ui.channel) || {}).purpose || "";
  $("channel-purpose").hidden = !purpose;
  $("channel-purpose").textContent = purpose;
  const all = s.messages[ui.channel] || [];
  const mineOnly = s.ephemerals.filter((e) => e.channel === ui.channel);
  // A DM with the bot is Slack's agent view (the app's Messages tab): a conversation, the bot's answers to what is
  // typed there in it; a thread someone starts in the DM stays a thread, as in a channel.
  const dm = ui.channel.startsWith("D");
  const roots = all.filter((m) => !m.thread_ts || m.thread_ts === m.ts);
  const offered = dm && (s.prompts || {})[ui.channel];
  $("prompts").hidden = !offered;
  $("prompts").innerHTML = offered ? `<span class="prompts-title">${esc(offered.prompts_title || "")}</span>${
    (offered.prompts || []).map((p) => `<button type="button" data-prompt="${esc(p.message)}">${esc(p.title)}</button>`)
      .join("")}` : "";
  const channelEphemerals = mineOnly.filter((e) => !e.thread_ts);
  fill($("messages"), [...roots.map((m) => [m, false]), ...channelEphemerals.map((e) => [e, true])],
    { inThread: false });
  // In a DM, the bot's status for a request answered in the conversation (a root without replies) shows under it.
  const working = dm ? roots.filter((m) => !m.reply_count && !m.bot_id).map((m) => [m, s.statuses[`${ui.channel}/${m.ts}`]])
    .filter(([m, status]) => status || (m.reactions || []).some((r) => r.name === "eyes" && r.users.includes(s.bot.id))) : [];
  $("channel-status").hidden = !working.length;
  $("channel-status").textContent = working.length ? `${s.bot.real_name} ${working[working.length - 1][1] || "is working…"}` : "";
  $("thread").hidden = !ui.thread;
  if (ui.thread) {
    const thread = all.filter((m) => m.ts === ui.thread || m.thread_ts === ui.thread);
    const ephemerals = mineOnly.filter((e) => e.thread_ts === ui.thread);
    fill($("thread-messages"), [...thread.map((m) => [m, false]), ...ephemerals.map((e) => [e, true])],
      { inThread: true });
    // The bot's status: Slack's own (assistant.threads.setStatus) when it sets one, else its 👀 while it works.
    const status = s.statuses[`${ui.channel}/${ui.thread}`];
    const working = thread.some((m) => (m.reactions || []).some((r) => r.name === "eyes" && r.users.includes(s.bot.id)));
    $("thread-status").hidden = !status && !working;
    $("thread-status").textContent = `${s.bot.real_name} ${status || "is working…"}`;
  }
}

// Messages and ephemerals in time order; the list stays scrolled to the bottom if it was there.
// A list whose messages did not change is left as it is, so a live update elsewhere does not replace what is
// under someone's pointer.
function fill(el, items, where) {
  const atBottom = el.scrollHeight - el.scrollTop - el.clientHeight < 40;
  items.sort((a, b) => Number(a[0].ts) - Number(b[0].ts));
  const html = items.map(([m, ephemeral]) => messageHtml({ ...m, channel: m.channel }, { ...where, ephemeral })).join("");
  if (html !== el.filled) {
    el.filled = html;
    el.innerHTML = html;
  }
  showVotes(el);
  if (atBottom) el.scrollTop = el.scrollHeight;
}

// Slack shows a person the feedback button they pressed (their vote), until they press the other one.
const voteKey = (ts) => `vote:${ui.user}:${ts}`;

function showVotes(el) {
  for (const button of el.querySelectorAll(".block.feedback button")) {
    const chosen = localStorage.getItem(voteKey(button.closest(".message").dataset.ts)) === button.dataset.value;
    button.classList.toggle("chosen", chosen);
    button.setAttribute("aria-pressed", String(chosen));
  }
}

async function refresh() {
  try {
    ui.snapshot = await api(`snapshot?user=${encodeURIComponent(ui.user)}`);
    render();
    if (typeof showModals === "function") showModals(); // modal.js: the modal a button opened for you
    document.body.dataset.version = ui.snapshot.version; // tests wait for the page to have read the workspace
  } catch (error) {
    toast(`cannot read the fake Slack: ${error.message}`);
  }
}

// -- acting as the person you are --------------------------------------------------------------

// "@olivia" typed (or picked from the autocomplete) becomes <@U0OPERATOR>, as Slack's composer does.
function encodeMentions(text) {
  return text.replace(/(^|\s)@([a-z0-9._-]+)/gi, (whole, space, handle) => {
    const person = people().find((p) => p.name.toLowerCase() === handle.toLowerCase());
    return person ? `${space}<@${person.id}>` : whole;
  });
}

async function send(text, threadTs) {
  const body = { user: ui.user, channel: ui.channel, text: encodeMentions(text) };
  if (threadTs) body.thread_ts = threadTs;
  body.channel_type = ui.channel.startsWith("D") ? "im" : "channel";
  const result = await api("user_message", body);
  for (const delivery of result.deliveries || []) {
    if (delivery.error || delivery.status < 200 || delivery.status >= 300) {
      toast(`the app did not accept the ${delivery.type} event: ${delivery.error || `HTTP ${delivery.status}`}`);
    }
  }
}

function composer(formId, textId, threadTs) {
  $(formId).addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = $(textId).value.trim();
    if (!text) return;
    $(textId).value = "";
    try {
      await send(text, threadTs());
    } catch (error) {
      $(textId).value = text;
      toast(`not sent: ${error.message}`);
    }
  });
  $(textId).addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && $("autocomplete").hidden) {
      event.preventDefault();
      $(formId).requestSubmit();
    }
  });
  autocomplete($(textId));
}

function autocomplete(textarea) {
  const list = $("autocomplete");
  let choices = [];
  let selected = 0;
  const query = () => (textarea.value.slice(0, textarea.selectionStart).match(/(^|\s)@([a-z0-9._-]*)$/i) || [])[2];
  const show = () => {
    clearTimeout(list.hideTimer);  // a blur of the other composer (a thread closed) must not hide what this shows
    const typed = query();
    choices = typed === undefined ? [] : people().filter((p) =>
      p.name.startsWith(typed.toLowerCase()) || p.real_name.toLowerCase().startsWith(typed.toLowerCase()));
    list.hidden = !choices.length;
    if (!choices.length) return;
    selected = Math.min(selected, choices.length - 1);
    list.innerHTML = choices.map((p, i) =>
      `<li data-index="${i}" class="${i === selected ? "selected" : ""}">${avatar(p, true)} <b>${esc(p.real_name)}</b> @${esc(p.name)}</li>`).join("");
    const box = textarea.getBoundingClientRect();
    list.style.left = `${box.left}px`;
    list.style.bottom = `${window.innerHeight - box.top + 4}px`;
  };
  const pick = (i) => {
    const before = textarea.value.slice(0, textarea.selectionStart).replace(/@([a-z0-9._-]*)$/i, `@${choices[i].name} `);
    textarea.value = before + textarea.value.slice(textarea.selectionStart);
    textarea.selectionStart = textarea.selectionEnd = before.length;
    list.hidden = true;
    textarea.focus();
  };
  textarea.addEventListener("input", () => { selected = 0; show(); });
  // One list serves both composers: the hide a blur schedules is kept on it, so the next show cancels it.
  textarea.addEventListener("blur", () => { list.hideTimer = setTimeout(() => { list.hidden = true; }, 150); });
  textarea.addEventListener("keydown", (event) => {
    if (list.hidden) return;
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      selected = (selected + (event.key === "ArrowDown" ? 1 : choices.length - 1)) % choices.length;
      show();
    } else if (event.key === "Enter" || event.key === "Tab") {
      pick(selected);
    } else if (event.key === "Escape") {
      list.hidden = true;
    } else {
      return;
    }
    event.preventDefault();
  });
  list.addEventListener("mousedown", (event) => {
    const li = event.target.closest("li");
    if (li) { event.preventDefault(); pick(Number(li.dataset.index)); }
  });
}

const ACTIONABLE = "button, [data-thread], li[data-channel]";

// What a press was on: its action's data and its message, so a release can tell it is on the same thing.
function actionKey(el) {
  const target = el && el.closest(ACTIONABLE);
  const message = target && target.closest(".message");
  return target ? JSON.stringify([target.tagName, target.className, { ...target.dataset }, message && message.dataset.ts])
    : null;
}

// A live update that re-renders a list between a press and its release swallows the click: the browser fires
// none when the pressed element has left the page. The release then acts as the click, if what is under the
// pointer now is the same thing re-rendered.
function onPress(event) {
  ui.pressed = event.button === 0 ? event.target : null;
  ui.actedOnRelease = false;
}

function onRelease(event) {
  const pressed = ui.pressed;
  ui.pressed = null;
  if (event.button === 0 && pressed && !pressed.isConnected && actionKey(pressed) !== null
      && actionKey(pressed) === actionKey(event.target)) {
    ui.actedOnRelease = true; // a browser that still fires the click (at the list, at once) must not act twice
    setTimeout(() => { ui.actedOnRelease = false; }, 0);
    onClick(event);
  }
}

async function onClick(event) {
  if (event.type === "click" && ui.actedOnRelease) {
    ui.actedOnRelease = false;
    return;
  }
  const target = event.target.closest(ACTIONABLE);
  if (!target) return;
  const message = target.closest(".message");
  try {
    if (target.matches("li[data-channel]")) {
      ui.channel = target.dataset.channel;
      ui.thread = null;
      render();
      // Opening the DM is opening the app's Messages tab: Slack sends app_home_opened (agent view).
      if (ui.channel.startsWith("D")) await api("open_app_home", { user: ui.user });
    } else if (target.dataset.prompt) {
      await send(target.dataset.prompt);
    } else if (target.dataset.thread) {
      ui.thread = target.dataset.thread;
      render();
    } else if (target.classList.contains("block-button")) {
      const body = { user: ui.user, channel: message.dataset.channel, message_ts: message.dataset.ts };
      Object.assign(body, { action_id: target.dataset.action, value: target.dataset.value, block_id: target.dataset.block });
      const result = await api("click", body);
      if (result.error || result.status < 200 || result.status >= 300) {
        toast(`the app did not accept the click: ${result.error || `HTTP ${result.status}`}`);
      } else if (target.closest(".block.feedback")) {
        localStorage.setItem(voteKey(message.dataset.ts), target.dataset.value);
        render();
      }
    } else if (target.dataset.reaction || target.dataset.addReaction) {
      const name = target.dataset.reaction || target.dataset.addReaction;
      await api("react", { user: ui.user, channel: message.dataset.channel, ts: message.dataset.ts, name });
    }
  } catch (error) {
    toast(error.message);
  }
}

function listen() {
  const events = new EventSource("/_fake/stream");
  events.onmessage = () => {
    clearTimeout(listen.timer);
    listen.timer = setTimeout(refresh, 50); // a burst of changes is read once
  };
}

function switchUser(id) {
  ui.user = id;
  localStorage.setItem("user", id);
  if (ui.channel.startsWith("D")) ui.channel = "C0LOCAL"; // another person's DM is not yours to read
  ui.thread = null;
  refresh();
}

// From the console: show a message's thread (a DM as the person it belongs to).
function openInWorkspace(channel, ts) {
  const s = ui.snapshot;
  const owner = s.people.find((p) => p.dm === channel);
  if (owner && owner.id !== ui.user) {
    ui.user = owner.id;
    localStorage.setItem("user", owner.id);
  }
  const message = (s.messages[channel] || []).find((m) => m.ts === ts);
  ui.channel = channel;
  ui.thread = message ? message.thread_ts || message.ts : ts;
  location.hash = "#workspace";
  refresh();
}

function showView() {
  const view = location.hash === "#console" || location.pathname === "/console" ? "console" : "workspace";
  $("workspace").hidden = view !== "workspace" || !ui.hasWorkspace;
  $("console").hidden = view !== "console";
  $("who").hidden = view !== "workspace";
  for (const a of document.querySelectorAll("#views a")) a.classList.toggle("active", a.dataset.view === view);
  document.dispatchEvent(new CustomEvent("view", { detail: view }));
}

async function start() {
  ui.hasWorkspace = await fetch("/_fake/health").then((r) => r.ok, () => false);
  if (!ui.hasWorkspace) {
    $("views").hidden = true;
    location.hash = "#console";
  }
  window.addEventListener("hashchange", showView);
  showView();
  if (!ui.hasWorkspace) return;
  composer("composer", "text", () => null);
  composer("reply-composer", "reply-text", () => ui.thread);
  $("close-thread").addEventListener("click", () => { ui.thread = null; render(); });
  $("user").addEventListener("change", (event) => switchUser(event.target.value));
  document.body.addEventListener("click", onClick);
  document.body.addEventListener("mousedown", onPress);
  document.body.addEventListener("mouseup", onRelease);
  listen();
}

start();
