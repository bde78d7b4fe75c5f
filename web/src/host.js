// The host: capacity, runtimes, templates, version and the settings that
// matter, with a link to /metrics.
import { api } from "./api.js";
import { h, replace, bytes, when, toast } from "./ui.js";

// pool describes a template's warm pool: ready boxes of its target, and
// how creates fared.
function pool(p) {
  if (!p) return h("span.muted", {}, "none");
  const c = p.config || {};
  return h("span", { "data-pool": p.template }, `${p.ready} ready of ${c.min}${c.max > c.min ? "–" + c.max : ""}`,
    p.creating ? `, ${p.creating} starting` : "", ` · ${p.claims} claimed, ${p.misses} missed`,
    p.lastError ? h("span.error", {}, " · " + p.lastError) : null);
}

export function hostPage() {
  const body = h("div");
  const el = h("section.page.host-page", {}, h("h1", {}, "Host"), body);
  (async () => {
    try {
      const [host, list, tpl] = await Promise.all([api("GET", "/v1/host"), api("GET", "/v1/sandboxes"),
        api("GET", "/v1/templates").catch(() => ({ templates: [] }))]);
      const running = list.sandboxes.filter((b) => b.state === "running");
      const memAsked = running.reduce((s, b) => s + (b.limits.memoryMb || 0), 0) * 1024 * 1024;
      const cpuAsked = running.reduce((s, b) => s + (b.limits.cpus || 0), 0);
      const lim = (l) => [l.memoryMb ? l.memoryMb + " MiB" : "memory –", l.cpus ? l.cpus + " CPUs" : "CPUs –", l.pidsLimit ? l.pidsLimit + " pids" : "pids –", l.diskMb ? l.diskMb + " MiB disk" : "disk –"].join(", ");
      const row = (k, v) => [h("dt", {}, k), h("dd", {}, v)];
      replace(body,
        h("div.cards", {},
          h("div.card", {}, h("h2", {}, "Sandboxes"), h("p.big", { "data-host": "sandboxes" }, String(host.sandboxes)), h("p.muted", {}, `${running.length} running`)),
          h("div.card", {}, h("h2", {}, "Memory"), h("p.big", {}, bytes(host.memoryBytes)), h("meter", { min: 0, max: host.memoryBytes, value: memAsked }), h("p.muted", {}, `${bytes(memAsked)} capped for running sandboxes`)),
          h("div.card", {}, h("h2", {}, "CPU"), h("p.big", {}, `${host.cpus} cores`), h("meter", { min: 0, max: host.cpus, value: cpuAsked }), h("p.muted", {}, `${cpuAsked} cores capped for running sandboxes`))),
        h("h2", {}, "Daemon"),
        h("dl.info", {},
          row("Version", h("span", { "data-host": "version" }, host.version)),
          row("Driver", `${host.driver} (engine ${host.engineVersion})`),
          row("Runtimes", host.runtimes.join(", ") + ` (default ${host.defaultRuntime})`),
          row("Default image", host.defaultImage),
          row("Default limits", lim(host.defaultLimits)),
          row("Maximum limits", lim(host.maxLimits)),
          row("Disk limit enforced", host.diskLimitEnforced ? "yes" : "no"),
          row("Metrics", h("a", { href: "/metrics", target: "_blank", rel: "noopener" }, "/metrics (Prometheus)")),
          row("API", h("a", { href: "/v1/openapi.json", target: "_blank", rel: "noopener" }, "/v1/openapi.json"))),
        h("h2", {}, "Templates"),
        tpl.templates.length ? h("table.list", {}, h("thead", {}, h("tr", {}, ["Name", "Version"].map((t) => h("th", {}, t)), h("th.hide-sm", {}, "Image"), h("th", {}, "Warm pool"), h("th.hide-sm", {}, "Built"))),
          h("tbody", {}, tpl.templates.map((t) => h("tr", { "data-template": t.name }, h("td", {}, t.name), h("td", {}, t.version), h("td.hide-sm", {}, t.image),
            h("td", {}, pool(t.pool)), h("td.hide-sm", {}, when(t.createdAt))))))
          : h("p.muted", {}, "No templates (hotcell template build -t NAME, or Save as template on a running sandbox)."));
    } catch (e) {
      toast(e.message, "error");
    }
  })();
  return { el };
}
