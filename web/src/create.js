// The create form: template or image, limits, egress, runtime, timeouts,
// repository and setup commands. It streams the create's progress.
import { api, stream } from "./api.js";
import { h, replace, toast } from "./ui.js";

export function createForm(onCreated, onCancel) {
  const f = (name, attrs = {}) => h("input", { name, id: "cf-" + name, ...attrs });
  const field = (label, input, hint) => h("div.field", {}, h("label", { for: input.id }, label), input, hint ? h("small.muted", {}, hint) : null);
  const source = h("select", { name: "source", id: "cf-source" }, h("option", { value: "image" }, "image"), h("option", { value: "template" }, "template"));
  const image = f("image", { placeholder: "default image" });
  const template = h("select", { name: "template", id: "cf-template" });
  const runtime = h("select", { name: "runtime", id: "cf-runtime" }, h("option", { value: "" }, "default"));
  const mem = f("memoryMb", { type: "number", min: 0, placeholder: "default" });
  const cpus = f("cpus", { type: "number", min: 0, step: "0.01", placeholder: "default" });
  const pids = f("pidsLimit", { type: "number", min: 0, placeholder: "default" });
  const disk = f("diskMb", { type: "number", min: 0, placeholder: "default" });
  const egress = h("select", { name: "egress", id: "cf-egress" }, ["", "open", "none", "allowlist"].map((m) => h("option", { value: m }, m || "default")));
  const allow = h("textarea", { name: "allow", id: "cf-allow", rows: 2, placeholder: "example.com, *.pypi.org" });
  const idle = f("idleSeconds", { type: "number", min: 0, placeholder: "default" });
  const life = f("maxLifetimeSeconds", { type: "number", min: 0, placeholder: "default" });
  const repo = f("repo", { placeholder: "https://github.com/org/app.git" });
  const ref = f("ref", { placeholder: "branch, tag or commit" });
  const setup = h("textarea", { name: "setup", id: "cf-setup", rows: 3, placeholder: "one command per line" });
  const labels = f("labels", { placeholder: "team=ml, purpose=demo" });
  const progress = h("pre.progress", { hidden: true, "aria-live": "polite" });
  const submit = h("button.primary", { type: "submit" }, "Create");
  const form = h("form.create", { "aria-label": "New sandbox" },
    h("div.grid", {},
      field("From", source), field("Image", image), field("Template", template), field("Runtime", runtime),
      field("Memory (MiB)", mem), field("CPUs", cpus), field("Pids", pids), field("Disk (MiB)", disk),
      field("Egress", egress), field("Allowlist", allow, "names, *.names or networks; for allowlist"),
      field("Idle timeout (s)", idle), field("Max lifetime (s)", life),
      field("Repository", repo), field("Ref", ref), field("Setup commands", setup), field("Labels", labels)),
    progress,
    h("div.row.end", {}, h("button", { type: "button", onclick: onCancel }, "Cancel"), submit));

  const syncSource = () => {
    image.closest(".field").hidden = source.value !== "image";
    template.closest(".field").hidden = source.value !== "template";
  };
  source.addEventListener("change", syncSource);
  queueMicrotask(syncSource);
  api("GET", "/v1/host").then((host) => {
    image.placeholder = host.defaultImage;
    host.runtimes.forEach((r) => runtime.append(h("option", { value: r }, r + (r === host.defaultRuntime ? " (default)" : ""))));
  }).catch(() => {});
  api("GET", "/v1/templates").then((t) => {
    replace(template, t.templates.length ? t.templates.map((x) => h("option", { value: x.name }, `${x.name} (v${x.version})`)) : h("option", { value: "" }, "no templates"));
  }).catch(() => replace(template, h("option", { value: "" }, "templates unavailable")));

  const num = (i) => (i.value === "" ? undefined : Number(i.value));
  const list = (s, sep) => s.split(sep).map((x) => x.trim()).filter(Boolean);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const req = {};
    if (source.value === "image" && image.value.trim()) req.image = image.value.trim();
    if (source.value === "template") {
      if (!template.value) return toast("there is no template to create from", "error");
      req.template = template.value;
    }
    if (runtime.value) req.runtime = runtime.value;
    const limits = { memoryMb: num(mem), cpus: num(cpus), pidsLimit: num(pids), diskMb: num(disk) };
    if (Object.values(limits).some((v) => v !== undefined)) req.limits = limits;
    if (egress.value) req.egress = { mode: egress.value, allow: egress.value === "allowlist" ? list(allow.value, /[\n,]/) : undefined };
    if (idle.value || life.value) req.timeouts = { idleSeconds: num(idle), maxLifetimeSeconds: num(life) };
    if (repo.value.trim()) req.repo = { url: repo.value.trim(), ref: ref.value.trim() || undefined };
    if (setup.value.trim()) req.setup = list(setup.value, "\n");
    if (labels.value.trim()) {
      req.labels = {};
      for (const kv of list(labels.value, ",")) {
        const [k, ...v] = kv.split("=");
        req.labels[k.trim()] = v.join("=").trim();
      }
    }
    submit.disabled = true;
    progress.hidden = false;
    progress.textContent = "creating…\n";
    let made = null;
    try {
      await stream("POST", "/v1/sandboxes", (ev) => {
        if (ev.type === "progress") progress.textContent += ev.message + "\n";
        if (ev.type === "sandbox") made = ev.sandbox;
      }, { query: { progress: "true" }, json: req });
      if (!made) throw new Error("the create ended without a sandbox");
      toast(`created ${made.id}`);
      progress.hidden = true;
      form.reset();
      syncSource();
      onCreated(made);
    } catch (err) {
      progress.textContent += "failed: " + err.message + "\n";
      toast(err.message, "error");
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}
