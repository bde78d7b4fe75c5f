// The sandbox list, kept live by the host's event stream (/v1/events):
// each event refetches the one sandbox it is about, a destroyed one leaves.
import { api, stream, sb } from "./api.js";
import { h, replace, toast, ago, stateBadge, confirmDialog, busy } from "./ui.js";
import { createForm } from "./create.js";

export function listPage(go) {
  const ctl = new AbortController();
  const boxes = new Map();
  const rows = h("tbody");
  const stateF = h("select", { "aria-label": "Filter by state" }, h("option", { value: "" }, "any state"),
    ["creating", "running", "stopped", "paused", "error"].map((s) => h("option", { value: s }, s)));
  const labelF = h("input", { type: "search", placeholder: "label key=value", "aria-label": "Filter by label" });
  const tplF = h("input", { type: "search", placeholder: "template or image", "aria-label": "Filter by template or image" });
  const count = h("span.muted");
  const selAll = h("input", { type: "checkbox", "aria-label": "Select all shown" });
  const bulkStop = h("button", { type: "button", disabled: true }, "Stop selected");
  const bulkDestroy = h("button.danger", { type: "button", disabled: true }, "Destroy selected");
  const live = h("span.live", { "data-live": "connecting", title: "state changes arrive through /v1/events" }, "connecting");
  const formBox = h("div.create-box", { hidden: true });
  const newBtn = h("button.primary", { type: "button", "aria-expanded": "false", onclick: () => toggleForm() }, "New sandbox");
  const el = h("section.page", {},
    h("div.row.wrap", {}, h("h1", {}, "Sandboxes"), count, live, h("span.grow"), newBtn),
    formBox,
    h("div.row.wrap.filters", {}, stateF, labelF, tplF, h("span.grow"), bulkStop, bulkDestroy),
    h("table.list.sandboxes", {}, h("thead", {}, h("tr", {}, h("th", {}, selAll), h("th", {}, "ID"), h("th", {}, "State"), h("th.hide-sm", {}, "Template / image"), h("th.hide-sm", {}, "Labels"), h("th.hide-sm", {}, "Created"))), rows));

  function toggleForm(open = formBox.hidden) {
    formBox.hidden = !open;
    newBtn.setAttribute("aria-expanded", String(open));
    if (open && !formBox.firstChild) formBox.append(createForm((made) => { toggleForm(false); upsert(made); go(`#/sandboxes/${made.id}`); }, () => toggleForm(false)));
    if (open) formBox.querySelector("input,select")?.focus();
  }

  const selected = new Set();
  function matches(b) {
    if (stateF.value && b.state !== stateF.value) return false;
    const lf = labelF.value.trim();
    if (lf) {
      const [k, v] = lf.split("=");
      const got = (b.labels || {})[k];
      if (got === undefined || (v !== undefined && got !== v)) return false;
    }
    const tf = tplF.value.trim().toLowerCase();
    if (tf && !((b.template && b.template.name.toLowerCase().includes(tf)) || b.image.toLowerCase().includes(tf))) return false;
    return true;
  }
  function render() {
    const shown = [...boxes.values()].filter(matches).sort((a, b) => b.createdAt.localeCompare(a.createdAt));
    for (const id of [...selected]) if (!shown.some((b) => b.id === id)) selected.delete(id);
    replace(rows, shown.map((b) => h("tr", { "data-sandbox": b.id, "data-state": b.state },
      h("td", {}, h("input", { type: "checkbox", "aria-label": "Select " + b.id, checked: selected.has(b.id),
        onchange: (e) => { e.target.checked ? selected.add(b.id) : selected.delete(b.id); sync(); } })),
      h("td", {}, h("a", { href: `#/sandboxes/${b.id}` }, b.id)),
      h("td", {}, stateBadge(b.state)),
      h("td.hide-sm", {}, b.template ? `${b.template.name} v${b.template.version}` : b.image),
      h("td.hide-sm", {}, Object.entries(b.labels || {}).map(([k, v]) => h("span.tag", {}, `${k}=${v}`))),
      h("td.hide-sm", {}, ago(b.createdAt)))));
    if (!shown.length) rows.append(h("tr", {}, h("td.muted", { colspan: 6 }, boxes.size ? "no sandbox matches the filters" : "no sandboxes yet: create one")));
    count.textContent = `${shown.length} of ${boxes.size}`;
    sync();
  }
  function sync() {
    bulkStop.disabled = bulkDestroy.disabled = selected.size === 0;
    bulkStop.textContent = `Stop selected (${selected.size})`;
    bulkDestroy.textContent = `Destroy selected (${selected.size})`;
    selAll.checked = selected.size > 0 && selected.size === rows.querySelectorAll("input[type=checkbox]").length;
  }
  selAll.onchange = () => {
    for (const b of [...boxes.values()].filter(matches)) selAll.checked ? selected.add(b.id) : selected.delete(b.id);
    render();
  };
  [stateF, labelF, tplF].forEach((f) => f.addEventListener("input", render));

  async function bulk(op) {
    const ids = [...selected];
    const verb = op === "stop" ? "Stop" : "Destroy";
    if (!(await confirmDialog(`${verb} ${ids.length} sandbox${ids.length > 1 ? "es" : ""}?`, ids.join(", ") + (op === "stop" ? "" : ": their workspaces are deleted."), verb))) return;
    const results = await Promise.allSettled(ids.map((id) => api(op === "stop" ? "POST" : "DELETE", sb(id, op === "stop" ? "/stop" : ""))));
    const failed = results.map((r, i) => r.status === "rejected" ? `${ids[i]}: ${r.reason.message}` : null).filter(Boolean);
    failed.length ? toast(failed.join("; "), "error") : toast(`${verb.toLowerCase()}: ${ids.length} done`);
    selected.clear();
    render();
  }
  bulkStop.onclick = (e) => busy(e.currentTarget, () => bulk("stop"));
  bulkDestroy.onclick = (e) => busy(e.currentTarget, () => bulk("destroy"));

  function upsert(b) { boxes.set(b.id, b); render(); }
  const pending = new Map();
  function refetch(id) {
    clearTimeout(pending.get(id));
    pending.set(id, setTimeout(async () => {
      pending.delete(id);
      try { upsert(await api("GET", sb(id))); } catch (e) { if (e.status === 404) { boxes.delete(id); render(); } }
    }, 100));
  }

  // follow keeps the list live: it reads the list once, then follows the
  // host's events from the last one seen, reconnecting (with backoff) when
  // the stream ends or drops, until the page is left or the session ends.
  async function start() {
    let since = 0, delay = 1000, loaded = false;
    while (!ctl.signal.aborted) {
      try {
        if (!loaded) {
          // The last event first, so that the stream starts after it; a
          // change between the two reads is only refetched once more.
          const evs = await api("GET", "/v1/events", { query: { limit: 1000 } });
          since = evs.events.reduce((m, e) => Math.max(m, e.seq || 0), 0);
          const list = await api("GET", "/v1/sandboxes");
          boxes.clear();
          list.sandboxes.forEach((b) => boxes.set(b.id, b));
          render();
          loaded = true;
        }
        live.dataset.live = "live";
        live.textContent = "live";
        await stream("GET", "/v1/events", (ev) => {
          delay = 1000;
          if (ev.seq) since = Math.max(since, ev.seq);
          if (!ev.sandboxId || ev.type === "keepalive") return;
          if (ev.type === "destroyed") { clearTimeout(pending.get(ev.sandboxId)); boxes.delete(ev.sandboxId); render(); } else refetch(ev.sandboxId);
        }, { query: { follow: "true", since }, signal: ctl.signal });
      } catch (e) {
        if (ctl.signal.aborted || e.status === 401) return;
        live.dataset.live = "down";
        live.textContent = `not live (${e.message}); retrying`;
      }
      if (ctl.signal.aborted) return;
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 15000);
    }
  }
  start();
  return { el, dispose() { ctl.abort(); pending.forEach((t) => clearTimeout(t)); } };
}
