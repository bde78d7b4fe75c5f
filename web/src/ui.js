// A few DOM helpers: the console builds its pages from these, never from
// HTML strings, so nothing a sandbox controls is ever parsed as markup.

export function h(tag, attrs, ...children) {
  const [name, ...classes] = tag.split(".");
  const el = document.createElement(name || "div");
  if (classes.length) el.className = classes.join(" ");
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className += (el.className ? " " : "") + v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k in el && typeof v !== "string") el[k] = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

const SVGNS = "http://www.w3.org/2000/svg";
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  for (const c of children) el.append(c);
  return el;
}

export function toast(msg, kind = "info") {
  let box = document.getElementById("toasts");
  if (!box) {
    box = h("div", { id: "toasts", role: "status", "aria-live": "polite" });
    document.body.append(box);
  }
  const t = h("div.toast." + kind, {}, msg);
  box.append(t);
  setTimeout(() => t.remove(), kind === "error" ? 9000 : 4000);
}

// confirmDialog asks before something that cannot be undone.
export function confirmDialog(title, text, action = "Confirm") {
  return new Promise((resolve) => {
    const d = h("dialog.confirm", { "aria-label": title },
      h("h2", {}, title), h("p", {}, text),
      h("div.row.end", {},
        h("button", { type: "button", onclick: () => { d.close(); resolve(false); } }, "Cancel"),
        h("button.danger", { type: "button", "data-confirm": "yes", onclick: () => { d.close(); resolve(true); } }, action)));
    d.addEventListener("cancel", () => resolve(false));
    d.addEventListener("close", () => d.remove());
    document.body.append(d);
    d.showModal();
  });
}

export function promptDialog(title, label, value = "") {
  return new Promise((resolve) => {
    const input = h("input", { type: "text", value, "aria-label": label });
    const f = h("form", { method: "dialog" }, h("h2", {}, title), h("label", {}, label, input),
      h("div.row.end", {},
        h("button", { type: "button", onclick: () => { d.close(); resolve(null); } }, "Cancel"),
        h("button.primary", { type: "submit" }, "OK")));
    const d = h("dialog", { "aria-label": title }, f);
    f.addEventListener("submit", (e) => { e.preventDefault(); d.close(); resolve(input.value); });
    d.addEventListener("cancel", () => resolve(null));
    d.addEventListener("close", () => d.remove());
    document.body.append(d);
    d.showModal();
    input.select();
  });
}

export function bytes(n) {
  if (n === undefined || n === null) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(n < 10 ? 1 : 0) : Math.round(n)) + " " + u[i];
}

export function ago(t) {
  if (!t) return "–";
  const s = Math.round((Date.now() - new Date(t).getTime()) / 1000);
  if (s < 60) return `${Math.max(s, 0)}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

export function when(t) { return t ? new Date(t).toLocaleString() : "–"; }

export function stateBadge(state) { return h("span.badge.state-" + state, { "data-state": state }, state); }

// busy disables a button while fn runs and reports its failure.
export async function busy(btn, fn) {
  if (btn) btn.disabled = true;
  try {
    return await fn();
  } catch (e) {
    toast(e.message, "error");
    return undefined;
  } finally {
    if (btn) btn.disabled = false;
  }
}
