// Slack's modals in the workspace: the one a button opened for you (views.open) floats over the page with its
// inputs; Submit sends what you typed to the app as Slack's view_submission (through /_fake/submit_view), and the
// app's errors appear under their fields; Cancel closes it. Loaded after app.js: it uses its api, esc and toast.
"use strict";

async function showModals() {
  const el = document.getElementById("modal");
  let open = [];
  try {
    open = (await api(`views?user=${encodeURIComponent(ui.user)}`)).views;
  } catch (error) {
    toast(`cannot read the open modals: ${error.message}`);
  }
  const view = open[0];
  if (!view) {
    el.hidden = true;
    el.dataset.view = "";
    return;
  }
  if (el.dataset.view === view.id && el.dataset.hash === view.hash && !el.hidden) {
    showErrors(el, view.errors || {});  // keep what the person typed; refresh the app's errors only
    return;
  }
  el.dataset.view = view.id;
  el.dataset.hash = view.hash;
  el.innerHTML = `<form class="modal-box" aria-label="${esc(view.title.text)}">
    <h3>${esc(view.title.text)}</h3>
    ${(view.blocks || []).map(modalBlock).join("")}
    <div class="modal-buttons">
      <button type="button" data-modal="cancel">${esc((view.close || { text: "Cancel" }).text)}</button>
      <button type="submit" class="primary">${esc((view.submit || { text: "Submit" }).text)}</button>
    </div></form>`;
  showErrors(el, view.errors || {});
  el.hidden = false;
}

function modalBlock(b) {
  if (b.type === "context") return `<div class="block context">${(b.elements || []).map((e) => textObject(e, names)).join(" ")}</div>`;
  if (b.type !== "input") return block(b, names);
  const e = b.element || {};
  const name = esc(b.block_id);
  let field;
  if (e.type === "static_select") {
    const chosen = e.initial_option ? e.initial_option.value : "";
    field = `<select name="${name}"><option value=""></option>${(e.options || []).map((o) =>
      `<option value="${esc(o.value)}"${o.value === chosen ? " selected" : ""}>${esc(o.text.text)}</option>`).join("")}</select>`;
  } else if (e.type === "plain_text_input" && e.multiline) {
    field = `<textarea name="${name}" rows="4">${esc(e.initial_value || "")}</textarea>`;
  } else {
    const mode = e.type === "number_input" ? ' inputmode="decimal"' : "";
    field = `<input name="${name}"${mode} value="${esc(e.initial_value || "")}">`;
  }
  const hint = b.hint ? `<small>${esc(b.hint.text)}</small>` : "";
  const optional = b.optional ? ' <span class="optional">(optional)</span>' : "";
  return `<label class="modal-field" data-block="${name}"><span>${esc(b.label.text)}${optional}</span>${field}${hint}
    <span class="modal-error" role="alert"></span></label>`;
}

function showErrors(el, errors) {
  for (const field of el.querySelectorAll(".modal-field")) {
    field.querySelector(".modal-error").textContent = errors[field.dataset.block] || "";
  }
}

async function onModal(event) {
  const el = document.getElementById("modal");
  const cancel = event.type === "click" && event.target.closest("[data-modal='cancel']");
  if (event.type === "click" && !cancel) return;
  event.preventDefault();
  try {
    if (cancel) {
      await api("close_view", { view_id: el.dataset.view });
    } else {
      const values = {};
      for (const input of el.querySelectorAll("[name]")) values[input.name] = input.value;
      const answer = await api("submit_view", { view_id: el.dataset.view, user: ui.user, values });
      if (answer.error || answer.status !== 200) toast(`the app did not accept the form: ${answer.error || `HTTP ${answer.status}`}`);
    }
  } catch (error) {
    toast(error.message);
  }
  showModals();
}

document.getElementById("modal").addEventListener("click", onModal);
document.getElementById("modal").addEventListener("submit", onModal);
