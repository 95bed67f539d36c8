// Slack's markup as Slack shows it: mrkdwn (bold, italics, strike, code, links, mentions, emoji) and the
// Block Kit blocks the product posts. Pure functions from a message to HTML; app.js decides where it goes.
"use strict";

const EMOJI = {
  eyes: "👀", white_check_mark: "✅", warning: "⚠️", speech_balloon: "💬", octagonal_sign: "🛑",
  no_entry_sign: "🚫", lock: "🔒", hourglass: "⌛", hourglass_flowing_sand: "⏳", alarm_clock: "⏰",
  x: "❌", heavy_check_mark: "✔️", "+1": "👍", thumbsup: "👍", "-1": "👎", tada: "🎉", heart: "❤️",
  raised_hands: "🙌", robot_face: "🤖", rocket: "🚀", gear: "⚙️", question: "❓", bulb: "💡",
  memo: "📝", mag: "🔍", arrows_counterclockwise: "🔄", wave: "👋", thinking_face: "🤔", fire: "🔥",
  information_source: "ℹ️", link: "🔗", clipboard: "📋", busts_in_silhouette: "👥", bust_in_silhouette: "👤",
  red_circle: "🔴", large_green_circle: "🟢", large_yellow_circle: "🟡", stopwatch: "⏱️", calendar: "📅",
  point_right: "👉", sparkles: "✨", ok_hand: "👌", pray: "🙏", construction: "🚧", package: "📦",
  raising_hand: "🙋", double_vertical_bar: "⏸️", pencil2: "✏️", white_circle: "⚪", hammer_and_wrench: "🛠️", ballot_box_with_check: "☑️",
};

function esc(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

// Slack escapes &, < and > in message text; undo that before escaping for HTML.
function unslack(text) {
  return String(text).replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
}

// Only http, https and mailto URLs become links (or images): a javascript: or data: URL in message text is shown
// as the text it is, so a click never runs script in this page's origin (whose control API posts as anyone).
// The text behind this page's own esc() (the Markdown path escapes first, then finds links).
function unhtml(html) {
  return unslack(String(html).replace(/&quot;/g, '"'));
}

function safeUrl(url, schemes = ["http:", "https:", "mailto:"]) {
  const text = String(url || "");
  if (!/^(https?:\/\/|mailto:)/i.test(text)) return null;
  try {
    return schemes.includes(new URL(text).protocol) ? text : null;
  } catch {
    return null;
  }
}

function link(url, label) {
  const href = safeUrl(url);
  return href ? `<a href="${esc(href)}" target="_blank" rel="noopener">${esc(label)}</a>` : null;
}

function image(url, alt, cls) {
  const src = safeUrl(url, ["http:", "https:"]);
  return src ? `<img${cls ? ` class="${cls}"` : ""} src="${esc(src)}" alt="${esc(alt || "")}">` : `[image: ${esc(alt || url || "")}]`;
}

// The picture of a known emoji name, else undefined: an own key only, so ":constructor:" or ":__proto__:" in a
// message is the text it is, not Object's function or prototype written into the page.
function known(name) {
  return Object.hasOwn(EMOJI, name) ? EMOJI[name] : undefined;
}

// A name as Slack shows it (a reaction's name is anyone's text: escaped when no picture stands for it).
function emoji(name) {
  return known(name) || esc(`:${name}:`);
}

// An attachment's colour bar: Slack's three names or a hex colour; anything else (CSS such as
// "red;background-image:url(...)") is the default grey.
const COLORS = { good: "#2eb886", warning: "#daa038", danger: "#a30200" };

function barColor(color) {
  const text = String(color || "");
  return Object.hasOwn(COLORS, text) ? COLORS[text] : /^#?[0-9a-f]{3,8}$/i.test(text) ? `#${text.replace(/^#/, "")}` : "#ddd";
}

function emojify(html) {
  return html.replace(/:([a-z0-9_+\-]+):/g, (whole, name) =>
    known(name) ? `<span class="emoji" title=":${name}:">${known(name)}</span>` : whole);
}

function styled(html) {
  const edge = "(^|[\\s(>])";
  const end = "(?=$|[\\s).,!?:;<])";
  return html
    .replace(new RegExp(`${edge}\\*([^*\\n]+)\\*${end}`, "g"), "$1<b>$2</b>")
    .replace(new RegExp(`${edge}_([^_\\n]+)_${end}`, "g"), "$1<i>$2</i>")
    .replace(new RegExp(`${edge}~([^~\\n]+)~${end}`, "g"), "$1<s>$2</s>");
}

// One <...> token: a mention, a channel, a special mention or a link.
function token(inner, names) {
  const [target, label] = inner.split("|", 2);
  if (target.startsWith("@")) {
    const id = target.slice(1);
    return `<span class="mention" data-user="${esc(id)}">@${esc(label || names(id))}</span>`;
  }
  if (target.startsWith("#")) return `<span class="mention">#${esc(label || target.slice(1))}</span>`;
  if (target.startsWith("!")) return `<span class="mention">@${esc(label || target.slice(1).split("^")[0])}</span>`;
  return link(unslack(target), unslack(label || target)) || esc(unslack(`<${inner}>`));
}

// mrkdwn to HTML; names(id) gives a user's handle for <@U...>.
function mrkdwn(text, names) {
  const codes = [];
  const keep = (html) => `\u0000${codes.push(html) - 1}\u0000`;
  let source = String(text || "")
    .replace(/```([\s\S]*?)```/g, (w, code) => keep(`<pre>${esc(unslack(code.replace(/^\n/, "")))}</pre>`))
    .replace(/`([^`\n]+)`/g, (w, code) => keep(`<code>${esc(unslack(code))}</code>`));
  let html = "";
  let last = 0;
  for (const match of source.matchAll(/<([^<>\n]+)>/g)) {
    html += esc(unslack(source.slice(last, match.index))) + keep(token(match[1], names));
    last = match.index + match[0].length;
  }
  html += esc(unslack(source.slice(last)));
  html = html.replace(/:([a-z0-9_+\-]+):/g, (whole, name) => // kept aside, so _italics_ may hold :emoji:
    known(name) ? keep(`<span class="emoji" title=":${name}:">${known(name)}</span>`) : whole);
  html = styled(html);
  html = html.split("\n").map((line) => line.startsWith("&gt; ") ? `<blockquote>${line.slice(5)}</blockquote>` : line)
    .join("\n").replace(/\n?(<\/?blockquote>)\n?/g, "$1").replace(/\n/g, "<br>");
  return html.replace(/\u0000(\d+)\u0000/g, (w, i) => codes[Number(i)]);
}

// The "markdown" block takes standard Markdown: **bold**, *italics*, `code`, [links](url), lists, headings.
function markdown(text) {
  const codes = [];
  const keep = (html) => `\u0000${codes.push(html) - 1}\u0000`;
  let html = esc(String(text || ""))
    .replace(/```([\s\S]*?)```/g, (w, code) => keep(`<pre>${code.replace(/^\n/, "")}</pre>`))
    .replace(/`([^`\n]+)`/g, (w, code) => keep(`<code>${code}</code>`))
    .replace(/\[([^\]]+)\]\(([^)\s]+)\)/g, (w, label, url) => keep(link(unhtml(url), unhtml(label)) || w))
    .replace(/\*\*([^*\n]+)\*\*/g, "<b>$1</b>")
    .replace(/(^|[^*\w])[*_]([^*_\n]+)[*_](?=$|[^*\w])/gm, "$1<i>$2</i>")
    .replace(/~~([^~\n]+)~~/g, "<s>$1</s>");
  html = html.split("\n").map((line) => {
    const heading = line.match(/^(#{1,6}) (.*)$/);
    if (heading) return `<b class="md-h">${heading[2]}</b>`;
    const item = line.match(/^\s*(?:[-*]|\d+\.) (.*)$/);
    return item ? `<span class="md-li">• ${item[1]}</span>` : line;
  }).join("<br>");
  return emojify(html).replace(/\u0000(\d+)\u0000/g, (w, i) => codes[Number(i)]);
}

function textObject(obj, names) {
  if (!obj) return "";
  if (obj.type === "mrkdwn") return mrkdwn(obj.text, names);
  // Plain text as Slack shows it: its spaces and lines kept; no emoji codes turned into pictures with emoji: false.
  return `<span class="plain">${obj.emoji === false ? esc(obj.text) : emojify(esc(obj.text))}</span>`;
}

function button(element, blockId) {
  const style = ["primary", "danger"].includes(element.style) ? ` ${element.style}` : ""; // Slack's only two
  const data = `data-action="${esc(element.action_id || "")}" data-value="${esc(element.value || "")}" data-block="${esc(blockId || "")}"`;
  return `<button type="button" class="block-button${style}" ${data}>${emojify(esc(element.text ? element.text.text : ""))}</button>`;
}

// One Block Kit block as HTML; a block this page does not know is named rather than hidden.
function block(b, names) {
  switch (b.type) {
    case "section": {
      const fields = (b.fields || []).map((f) => `<div>${textObject(f, names)}</div>`).join("");
      const accessory = b.accessory && b.accessory.type === "button" ? button(b.accessory, b.block_id) : "";
      return `<div class="block section"><div>${textObject(b.text, names)}${fields ? `<div class="fields">${fields}</div>` : ""}</div>${accessory}</div>`;
    }
    case "markdown": return `<div class="block markdown">${markdown(b.text)}</div>`;
    case "header": return `<div class="block header">${textObject(b.text, names)}</div>`;
    case "divider": return `<hr class="block divider">`;
    case "context": {
      const parts = (b.elements || []).map((e) => e.type === "image"
        ? image(e.image_url, e.alt_text) : `<span>${textObject(e, names)}</span>`);
      return `<div class="block context">${parts.join(" ")}</div>`;
    }
    case "actions": {
      const buttons = (b.elements || []).filter((e) => e.type === "button").map((e) => button(e, b.block_id));
      return `<div class="block actions">${buttons.join("")}</div>`;
    }
    case "context_actions": {  // feedback buttons: 👍 and 👎 share one action, each with its own value
      const sides = (b.elements || []).filter((e) => e.type === "feedback_buttons").flatMap((e) =>
        [e.positive_button, e.negative_button].filter(Boolean).map((side) => button({ ...side, action_id: e.action_id }, b.block_id)));
      return `<div class="block actions feedback">${sides.join("")}</div>`;
    }
    case "image": return image(b.image_url, b.alt_text, "block image");
    default: return `<div class="block unknown">[${esc(b.type)} block]</div>`;
  }
}

// A streamed message (chat.startStream): its task cards, its Markdown text as far as it has come, then the blocks
// chat.stopStream put under it; "…" while Slack still streams it.
function streamedBody(message, names) {
  const cards = (message.stream.tasks || []).map((t) => {
    const mark = { in_progress: "⏳", complete: "✅", error: "⚠️", pending: "○" }[t.status] || "○";
    const sources = (t.sources || []).map((s) => link(s.url, s.text || s.url) || esc(s.text || s.url));
    return `<div class="block context task">${mark} ${esc(t.title)}${sources.length ? ` · ${sources.join(", ")}` : ""}</div>`;
  }).join("");
  const more = message.stream.streaming ? `<span class="streaming">…</span>` : "";
  const below = (message.blocks || []).map((b) => block(b, names)).join("");
  return `${cards}<div class="block markdown">${markdown(message.text || "")}${more}</div>${below}`;
}

// A message's body: its blocks when it has any (Slack then shows them instead of the text), else its text.
function messageBody(message, names) {
  if (message.stream) return streamedBody(message, names);
  const blocks = (message.blocks || []).filter((b) => b.type !== "rich_text");
  let html = blocks.length ? blocks.map((b) => block(b, names)).join("") : mrkdwn(message.text, names);
  for (const a of message.attachments || []) {
    const inner = (a.blocks || []).map((b) => block(b, names)).join("") || mrkdwn(a.text || a.fallback || "", names);
    html += `<div class="attachment" style="border-color:${barColor(a.color)}">${inner}</div>`;
  }
  return html;
}
