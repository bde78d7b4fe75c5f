// One sandbox: state and actions, live charts, and a tab per feature.
import { api, stream, sb } from "./api.js";
import { h, replace, toast, bytes, when, ago, stateBadge, confirmDialog, promptDialog, busy } from "./ui.js";
import { LineChart } from "./chart.js";
import { terminalView } from "./terminal.js";
import { filesView } from "./files.js";

const b64 = (s) => { const bin = atob(s); const u = new Uint8Array(bin.length); for (let i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i); return new TextDecoder().decode(u); };

export function sandboxPage(id, go) {
  const ctl = new AbortController();
  const disposers = [() => ctl.abort(), () => clearTimeout(pending)];
  let box = null;

  const head = h("div.sandbox-head");
  const tabsNav = h("div.tabs", { role: "tablist", "aria-label": "Sandbox" });
  const panel = h("div.tab-panel", { role: "tabpanel" });
  const el = h("section.page.sandbox-page", { "data-sandbox": id }, head, tabsNav, panel);

  const tabs = {};
  const defs = [
    ["overview", "Overview", overviewTab],
    ["terminal", "Terminal", () => terminalView(id)],
    ["files", "Files", () => filesView(id)],
    ["processes", "Processes", processesTab],
    ["ports", "Ports", portsTab],
    ["egress", "Egress", egressTab],
    ["gateway", "Gateway", gatewayTab],
    ["events", "Events", eventsTab],
    ["backups", "Backups", backupsTab],
  ];
  let current = "";
  function show(name) {
    if (!tabs[name]) {
      const def = defs.find((d) => d[0] === name) || defs[0];
      tabs[name] = def[2]();
      disposers.push(() => tabs[name].dispose && tabs[name].dispose());
    }
    current = name;
    for (const b of tabsNav.children) b.setAttribute("aria-selected", String(b.dataset.tab === name));
    replace(panel, tabs[name].el);
    tabs[name].mount && tabs[name].mount();
    history.replaceState(null, "", `#/sandboxes/${id}/${name}`);
  }
  defs.forEach(([name, label]) => tabsNav.append(h("button", { type: "button", role: "tab", "data-tab": name, onclick: () => show(name) }, label)));
  tabsNav.addEventListener("keydown", (e) => {
    const i = defs.findIndex((d) => d[0] === current);
    if (e.key === "ArrowRight" || e.key === "ArrowLeft") {
      const n = defs[(i + (e.key === "ArrowRight" ? 1 : defs.length - 1)) % defs.length][0];
      show(n);
      tabsNav.querySelector(`[data-tab=${n}]`).focus();
    }
  });

  // --- head: state and actions -------------------------------------------
  const act = (label, fn, cls = "") => h("button" + cls, { type: "button", "data-action": label.toLowerCase(), onclick: (e) => busy(e.currentTarget, fn) }, label);
  async function refresh() {
    try {
      box = await api("GET", sb(id));
    } catch (e) {
      if (e.status === 404) { replace(head, h("h1", {}, id), h("p.muted", {}, "This sandbox does not exist (any more).")); return; }
      toast(e.message, "error");
      return;
    }
    const s = box.state;
    replace(head,
      h("div.row.wrap", {}, h("h1", {}, box.id), stateBadge(s), h("span.muted", {}, box.template ? `${box.template.name} v${box.template.version}` : box.image), h("span.muted", {}, box.runtime)),
      box.error ? h("p.error", {}, box.error) : null,
      h("div.row.wrap.actions", {},
        s === "stopped" || s === "error" ? act("Start", () => lifecycle("start")) : null,
        s === "running" ? act("Stop", () => lifecycle("stop")) : null,
        s === "running" ? act("Pause", () => lifecycle("pause")) : null,
        s === "paused" ? act("Resume", () => lifecycle("resume")) : null,
        act("Backup", backup), act("Snapshot", snapshot), act("Fork", fork),
        s === "running" ? act("Save as template", saveTemplate) : null,
        act("Destroy", destroy, ".danger")));
    el.dataset.state = s;
    for (const t of Object.values(tabs)) t.update && t.update(box);
  }
  async function lifecycle(op) {
    await api("POST", sb(id, "/" + op));
    toast(`${op}: done`);
    await refresh();
  }
  async function destroy() {
    if (!(await confirmDialog(`Destroy ${id}?`, "The sandbox and its workspace are deleted; backups stay.", "Destroy"))) return;
    await api("DELETE", sb(id));
    toast(`destroyed ${id}`);
    go("#/sandboxes");
  }
  async function backup() {
    let last;
    await stream("POST", sb(id, "/backups"), (ev) => { if (ev.type === "backup") last = ev.backup; }, { query: { progress: "true" }, json: {} });
    toast(last ? `backup ${last.id}: ${bytes(last.size)}` : "backup done");
    if (tabs.backups) tabs.backups.mount();
  }
  async function snapshot() {
    const sn = await api("POST", sb(id, "/snapshots"), { json: {} });
    toast(`snapshot ${sn.id}`);
    if (tabs.backups) tabs.backups.mount();
    return sn;
  }
  async function saveTemplate() {
    const name = await promptDialog("Save as template", "Template name (lower case, digits, . _ -)");
    if (!name) return;
    const t = await api("POST", sb(id, "/template"), { json: { name } });
    toast(`saved as template ${t.name} v${t.version}`);
  }
  async function fork() {
    if (!(await confirmDialog(`Fork ${id}?`, "A snapshot of this sandbox is taken and a new sandbox is created from it.", "Fork"))) return;
    const sn = await api("POST", sb(id, "/snapshots"), { json: {} });
    const made = await api("POST", "/v1/sandboxes", { json: { snapshot: sn.id, labels: box.labels || {} } });
    toast(`forked into ${made.id}`);
    go(`#/sandboxes/${made.id}`);
  }

  // --- overview: info, charts, setup -------------------------------------
  function overviewTab() {
    const info = h("dl.info");
    const setup = h("div");
    const cpu = new LineChart("CPU", { format: (v) => v.toFixed(1) + "%" });
    const mem = new LineChart("Memory", { format: bytes });
    const net = new LineChart("Network", { series: ["rx/s", "tx/s"], format: (v) => bytes(v) + "/s" });
    const disk = new LineChart("Workspace disk", { format: bytes });
    const statsNote = h("p.muted");
    const el = h("section", {}, h("div.charts", {}, cpu.el, mem.el, net.el, disk.el), statsNote, h("h2", {}, "Details"), info, setup);
    let statsCtl = null, lastNet = null;
    function startStats() {
      if (statsCtl || !box || box.state !== "running") return;
      statsCtl = new AbortController();
      const my = statsCtl;
      ctl.signal.addEventListener("abort", () => my.abort());
      statsNote.textContent = "live: a sample every second";
      stream("GET", sb(id, "/stats"), (ev) => {
        if (ev.type !== "sample") return;
        const s = ev.stats, t = new Date(s.time).getTime() / 1000;
        cpu.push(s.cpu.percent);
        mem.push(s.memory.usageBytes);
        if (lastNet) {
          const dt = Math.max(0.001, t - lastNet.t);
          net.push(Math.max(0, (s.network.rxBytes - lastNet.rx) / dt), Math.max(0, (s.network.txBytes - lastNet.tx) / dt));
        }
        lastNet = { t, rx: s.network.rxBytes, tx: s.network.txBytes };
        if (s.disk) disk.push(s.disk.bytes);
      }, { query: { stream: "true", intervalMs: 1000 }, signal: my.signal })
        .catch((e) => { if (!my.signal.aborted) statsNote.textContent = "stats stopped: " + e.message; })
        .finally(() => { if (statsCtl === my) statsCtl = null; });
    }
    function update(b) {
      const lim = b.limits || {};
      const row = (k, v) => [h("dt", {}, k), h("dd", {}, v)];
      replace(info,
        row("Image", b.image), row("Runtime", b.runtime), row("Created", when(b.createdAt)),
        row("Limits", `${lim.memoryMb ? lim.memoryMb + " MiB" : "no memory cap"}, ${lim.cpus ? lim.cpus + " CPUs" : "no CPU cap"}, ${lim.pidsLimit ? lim.pidsLimit + " pids" : "no pids cap"}${lim.diskMb ? ", " + lim.diskMb + " MiB disk" : ""}`),
        row("Labels", Object.entries(b.labels || {}).map(([k, v]) => `${k}=${v}`).join(", ") || "–"),
        row("Egress", b.egress ? b.egress.mode + (b.egress.allow && b.egress.allow.length ? ": " + b.egress.allow.join(", ") : "") : "default"),
        b.repo ? row("Repository", `${b.repo.url || ""} ${b.repo.commit || ""}`) : null,
        b.timeouts ? row("Timeouts", `idle ${b.timeouts.idleSeconds || "∞"} s → ${b.timeouts.idleAction}; lifetime ${b.timeouts.maxLifetimeSeconds || "∞"} s → ${b.timeouts.lifetimeAction}${b.timeouts.expiresAt ? " (at " + when(b.timeouts.expiresAt) + ")" : ""}`) : null,
        row("Gateway", (b.gateway || []).join(", ") || "–"));
      replace(setup, b.setup && b.setup.length ? [h("h2", {}, "Setup"), b.setup.map((r) => h("details.setup", { open: r.exitCode !== 0 },
        h("summary", {}, h("code", {}, r.command), ` → exit ${r.exitCode}${r.signal ? " (" + r.signal + ")" : ""}${r.timedOut ? ", timed out" : ""}, ${r.durationMs} ms`),
        h("pre", {}, r.outputTail || "(no output)")))] : null);
      if (b.state === "running") startStats();
      else statsNote.textContent = `no live stats while ${b.state}`;
    }
    return { el, update, mount() { if (box) update(box); } };
  }

  // --- processes ---------------------------------------------------------
  function processesTab() {
    const rows = h("tbody");
    const log = h("pre.log", { "data-log": "" });
    const logHead = h("div.row");
    const cmd = h("input", { name: "command", placeholder: "command, e.g. python3 -m http.server 8000", required: true, "aria-label": "Command" });
    const name = h("input", { name: "name", placeholder: "name (optional)", "aria-label": "Name" });
    const form = h("form.row.wrap", {}, cmd, name, h("button.primary", { type: "submit" }, "Run in background"));
    let followCtl = null;
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      busy(form.querySelector("button"), async () => {
        const p = await api("POST", sb(id, "/processes"), { json: { command: cmd.value, name: name.value || undefined } });
        cmd.value = "";
        await load();
        follow(p);
      });
    });
    async function load() {
      const res = await api("GET", sb(id, "/processes"));
      replace(rows, res.processes.map((p) => h("tr", { "data-process": p.id },
        h("td", {}, p.id), h("td", {}, p.name || ""), h("td", {}, h("code", {}, p.command || (p.argv || []).join(" "))),
        h("td", {}, p.state === "running" ? stateBadge("running") : `exit ${p.exitCode ?? 0}${p.signal ? " " + p.signal : ""}`),
        h("td.hide-sm", {}, ago(p.startedAt)),
        h("td.actions", {},
          h("button", { type: "button", onclick: () => follow(p) }, "Logs"),
          p.state === "running" ? [h("button", { type: "button", onclick: (e) => busy(e.currentTarget, () => signal(p, "TERM")) }, "TERM"),
            h("button.danger", { type: "button", onclick: (e) => busy(e.currentTarget, () => signal(p, "KILL")) }, "KILL")]
            : h("button", { type: "button", onclick: (e) => busy(e.currentTarget, async () => { await api("DELETE", sb(id, "/processes/" + p.id)); await load(); }) }, "Remove")))));
      if (!res.processes.length) rows.append(h("tr", {}, h("td.muted", { colspan: 6 }, "no background processes")));
    }
    async function signal(p, sig) {
      await api("POST", sb(id, `/processes/${p.id}/signal`), { json: { signal: sig } });
      toast(`sent ${sig} to ${p.id}`);
      setTimeout(load, 500);
    }
    function follow(p) {
      if (followCtl) followCtl.abort();
      followCtl = new AbortController();
      const my = followCtl;
      ctl.signal.addEventListener("abort", () => my.abort());
      log.textContent = "";
      log.dataset.process = p.id;
      replace(logHead, h("strong", {}, `Output of ${p.id}${p.name ? " (" + p.name + ")" : ""}`), h("span.grow"), h("span.muted.follow-state", {}, "following"));
      stream("GET", sb(id, `/processes/${p.id}/logs`), (ev) => {
        if (ev.type === "stdout" || ev.type === "stderr") {
          const span = h("span." + ev.type, {}, b64(ev.data));
          log.append(span);
          log.scrollTop = log.scrollHeight;
        } else if (ev.type === "exit") {
          log.append(h("span.muted", {}, `\n[exited${ev.signal ? " by " + ev.signal : " " + (ev.exitCode ?? 0)}${ev.message ? ": " + ev.message : ""}]\n`));
          load();
        }
      }, { query: { follow: "true" }, signal: my.signal })
        .catch((e) => { if (!my.signal.aborted) toast(e.message, "error"); })
        .finally(() => { const s = logHead.querySelector(".follow-state"); if (s && !my.signal.aborted) s.textContent = "ended"; });
    }
    const el = h("section", {}, form,
      h("table.list", {}, h("thead", {}, h("tr", {}, ["ID", "Name", "Command", "State"].map((t) => h("th", {}, t)), h("th.hide-sm", {}, "Started"), h("th"))), rows),
      logHead, log);
    return { el, mount() { load().catch((e) => toast(e.message, "error")); }, dispose() { if (followCtl) followCtl.abort(); } };
  }

  // --- ports ---------------------------------------------------------------
  function portsTab() {
    const port = h("input", { type: "number", min: 1, max: 65535, required: true, placeholder: "8000", "aria-label": "Port" });
    const out = h("div.port-links");
    const form = h("form.row.wrap", {}, h("label", {}, "Port ", port), h("button.primary", { type: "submit" }, "Open preview"));
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      busy(form.querySelector("button"), async () => {
        const p = Number(port.value);
        const u = await api("POST", sb(id, `/ports/${p}/preview-url`), { json: {} });
        // The preview by host name is its own origin; the one by path
        // shares the daemon's and is sandboxed by its CSP.
        const link = u.url || u.pathUrl;
        out.prepend(h("div.row.wrap", { "data-port": p }, h("strong", {}, `port ${p}`),
          h("a", { href: link, target: "_blank", rel: "noopener noreferrer" }, "open preview ↗"),
          h("span.muted", {}, u.public ? "public" : "token valid for a day"),
          h("button", { type: "button", onclick: (e) => busy(e.currentTarget, async () => {
            const r = await api("POST", sb(id, `/ports/${p}/public`), { json: { public: !u.public } });
            u.public = r.public;
            toast(`port ${p} is now ${r.public ? "public" : "private"}`);
          }) }, "Toggle public")));
      });
    });
    const el = h("section", {}, h("p.muted", {}, "Open an HTTP preview of a port a server in the sandbox listens on."), form, out);
    return { el };
  }

  // --- egress ----------------------------------------------------------------
  function egressTab() {
    const status = h("div");
    const denied = h("tbody");
    const mode = h("select", { name: "mode", "aria-label": "Egress mode" }, ["open", "none", "allowlist"].map((m) => h("option", { value: m }, m)));
    const allow = h("textarea", { name: "allow", rows: 4, placeholder: "example.com\n*.pypi.org\n10.0.0.0/8", "aria-label": "Allowed destinations, one per line" });
    const form = h("form.egress-form", {}, h("label", {}, "Mode ", mode), h("label", {}, "Allowlist (one per line)", allow), h("button.primary", { type: "submit" }, "Apply"));
    let timer = 0, editing = false;
    allow.addEventListener("input", () => { editing = true; });
    mode.addEventListener("change", () => { editing = true; });
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      busy(form.querySelector("button"), async () => {
        const list = allow.value.split(/[\n,]/).map((s) => s.trim()).filter(Boolean);
        await api("PUT", sb(id, "/egress"), { json: { mode: mode.value, allow: mode.value === "allowlist" ? list : undefined } });
        editing = false;
        toast("egress policy applied");
        await load();
      });
    });
    async function load() {
      let e;
      try { e = await api("GET", sb(id, "/egress")); } catch (err) { replace(status, h("p.muted", {}, err.message)); return; }
      if (!editing) { mode.value = e.policy.mode || "open"; allow.value = (e.policy.allow || []).join("\n"); }
      replace(status, h("dl.info", {},
        h("dt", {}, "Policy"), h("dd", {}, e.policy.mode + (e.policy.allow ? ": " + e.policy.allow.join(", ") : "")),
        h("dt", {}, "Enforced"), h("dd", {}, e.enforced ? "yes" : "no"),
        h("dt", {}, "Dropped"), h("dd", {}, `${e.droppedPackets} packets, ${bytes(e.droppedBytes)}; ${e.refusedQueries} DNS queries refused`),
        e.address ? [h("dt", {}, "Address"), h("dd", {}, e.address)] : null));
      const rows = [...(e.denied || [])].reverse();
      replace(denied, rows.map((d) => h("tr", { "data-denial": d.kind },
        h("td.hide-sm", {}, when(d.time)), h("td", {}, d.kind),
        h("td", {}, d.name || [d.address, d.port].filter(Boolean).join(":") || "–"),
        h("td", {}, d.protocol || ""), h("td", {}, d.reason || (d.kind === "dns" ? "not-allowed" : "")), h("td.num", {}, d.packets || ""))));
      if (!rows.length) denied.append(h("tr", {}, h("td.muted", { colspan: 6 }, "nothing denied yet")));
    }
    const el = h("section", {}, status, form, h("h2", {}, "Recent denials"),
      h("table.list", {}, h("thead", {}, h("tr", {}, h("th.hide-sm", {}, "Time"), ["Kind", "Destination", "Protocol", "Reason"].map((t) => h("th", {}, t)), h("th.num", {}, "Packets"))), denied));
    return {
      el,
      mount() { load(); clearInterval(timer); timer = setInterval(() => { if (el.isConnected && !document.hidden) load(); }, 3000); },
      dispose() { clearInterval(timer); },
    };
  }

  // --- gateway ---------------------------------------------------------------
  function gatewayTab() {
    const body = h("div");
    async function load() {
      let u;
      try { u = await api("GET", sb(id, "/usage")); } catch (e) { replace(body, h("p.muted", {}, e.message)); return; }
      if (!u.providers.length) { replace(body, h("p.muted", {}, "This sandbox has no LLM gateway provider (create it with gateway providers to use one).")); return; }
      const of = (used, cap) => cap ? `${used} / ${cap}` : String(used);
      replace(body, h("table.list", {}, h("thead", {}, h("tr", {}, ["Provider", "Requests", "Rejected", "Errors", "Tokens", "Rate/min", "In", "Out"].map((t) => h("th", {}, t)))),
        h("tbody", {}, u.providers.map((p) => {
          const b = p.budget || {};
          const meter = (used, cap, what) => cap ? h("meter", { min: 0, max: cap, value: used, high: cap * 0.8, title: `${what} used of the budget` }) : null;
          return h("tr", {}, h("td", {}, p.provider), h("td", {}, of(p.requests, b.requests), meter(p.requests, b.requests, "requests")), h("td", {}, p.rejected), h("td", {}, p.errors),
            h("td", {}, of(p.totalTokens, b.tokens), meter(p.totalTokens, b.tokens, "tokens")),
            h("td", {}, b.ratePerMinute || "–"), h("td", {}, bytes(p.bytesIn)), h("td", {}, bytes(p.bytesOut)));
        }))));
    }
    const el = h("section", {}, h("div.row", {}, h("h2", {}, "LLM gateway usage"), h("span.grow"), h("button", { type: "button", onclick: () => load() }, "Refresh")), body);
    return { el, mount: load };
  }

  // --- events ------------------------------------------------------------
  function eventsTab() {
    const list = h("ol.timeline", { reversed: true });
    let started = false;
    const el = h("section", {}, h("h2", {}, "Event timeline"), list);
    return {
      el,
      mount() {
        if (started) return;
        started = true;
        stream("GET", sb(id, "/events"), (ev) => {
          if (ev.type === "keepalive" || ev.type === "end") return;
          list.prepend(h("li", { "data-event": ev.type }, h("time", {}, when(ev.time)), " ", h("strong", {}, ev.type), ev.message ? " — " + ev.message : ""));
        }, { query: { follow: "true" }, signal: ctl.signal }).catch((e) => { if (!ctl.signal.aborted) toast(e.message, "error"); });
      },
    };
  }

  // --- backups and snapshots -------------------------------------------------
  function backupsTab() {
    const body = h("div");
    async function load() {
      const [bk, sn] = await Promise.all([api("GET", sb(id, "/backups")), api("GET", sb(id, "/snapshots"))]);
      replace(body,
        h("h2", {}, "Backups"),
        h("table.list", {}, h("tbody", {}, bk.backups.map((b) => h("tr", { "data-backup": b.id }, h("td", {}, b.id), h("td", {}, b.source), h("td.num", {}, bytes(b.size)), h("td.hide-sm", {}, when(b.createdAt)),
          h("td.actions", {},
            h("a.button", { href: sb(id, `/backups/${b.id}/download`), download: b.id + ".tar" + (b.gzip ? ".gz" : "") }, "Download"),
            h("button", { type: "button", onclick: (e) => busy(e.currentTarget, async () => {
              if (!(await confirmDialog(`Restore ${b.id}?`, "The workspace is replaced by this backup's content.", "Restore"))) return;
              await api("POST", sb(id, "/restore"), { json: { backupId: b.id } });
              toast("restored " + b.id);
            }) }, "Restore"),
            h("button.danger", { type: "button", onclick: (e) => busy(e.currentTarget, async () => { await api("DELETE", sb(id, `/backups/${b.id}`)); await load(); }) }, "Delete")))),
          !bk.backups.length ? h("tr", {}, h("td.muted", {}, "no backups")) : null)),
        h("h2", {}, "Snapshots"),
        h("table.list", {}, h("tbody", {}, sn.snapshots.map((s) => h("tr", {}, h("td", {}, s.id), h("td.hide-sm", {}, s.image), h("td", {}, when(s.createdAt)),
          h("td.actions", {}, h("button", { type: "button", onclick: (e) => busy(e.currentTarget, async () => {
            const made = await api("POST", "/v1/sandboxes", { json: { snapshot: s.id } });
            go(`#/sandboxes/${made.id}`);
          }) }, "New sandbox from it")))),
          !sn.snapshots.length ? h("tr", {}, h("td.muted", {}, "no snapshots")) : null)));
    }
    return { el: h("section", {}, body), mount() { load().catch((e) => toast(e.message, "error")); } };
  }

  // Keep the head current from the sandbox's own event stream (its
  // backlog comes at once: one refresh for a burst).
  let pending = 0;
  stream("GET", sb(id, "/events"), (ev) => {
    if (ev.type === "keepalive" || ev.type === "end") return;
    clearTimeout(pending);
    pending = setTimeout(refresh, 150);
  }, { query: { follow: "true", since: 0 }, signal: ctl.signal }).catch(() => {});

  refresh().then(() => show(location.hash.split("/")[3] || "overview"));
  return { el, dispose() { disposers.forEach((d) => d()); } };
}
