// The file browser tab: list, open (text and images), download, upload by
// drag and drop with progress, new folder, rename, delete.
import { api, request, sb, upload } from "./api.js";
import { h, replace, toast, bytes, when, confirmDialog, promptDialog, busy } from "./ui.js";

const imageTypes = { png: "image/png", jpg: "image/jpeg", jpeg: "image/jpeg", gif: "image/gif", webp: "image/webp", svg: "image/svg+xml", bmp: "image/bmp", ico: "image/x-icon" };
const maxText = 1 << 20;

const join = (dir, name) => (dir.endsWith("/") ? dir : dir + "/") + name;
const parent = (p) => p.replace(/\/[^/]+\/?$/, "") || "/";

export function filesView(id) {
  let dir = "/workspace";
  const crumbs = h("nav.crumbs", { "aria-label": "Path" });
  const list = h("tbody");
  const viewer = h("div.viewer", { hidden: true });
  const progress = h("div.uploads");
  const fileInput = h("input", { type: "file", multiple: true, hidden: true, "aria-label": "Files to upload" });
  const drop = h("div.dropzone", { tabindex: "0", role: "button", "aria-label": "Upload files: drop them here or press Enter to choose" },
    "Drop files here to upload to this folder, or ", h("u", {}, "choose files"));
  const el = h("section.files-view", {},
    h("div.row.toolbar", {}, crumbs, h("span.grow"),
      h("button", { type: "button", onclick: (e) => busy(e.currentTarget, newFolder) }, "New folder"),
      h("button", { type: "button", onclick: () => load() }, "Refresh")),
    drop, fileInput, progress,
    h("div.split", {},
      h("table.list.files", {}, h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th.num", {}, "Size"), h("th.hide-sm", {}, "Modified"), h("th", {}, ""))), list),
      viewer));

  async function load(to = dir) {
    let res;
    try {
      res = await api("GET", sb(id, "/fs/list"), { query: { path: to } });
    } catch (e) {
      toast(e.message, "error");
      return;
    }
    dir = res.path;
    el.dataset.dir = dir;
    const parts = dir.split("/").filter(Boolean);
    replace(crumbs, h("a", { href: "#", onclick: (e) => { e.preventDefault(); load("/"); } }, "/"),
      parts.map((p, i) => [h("a", { href: "#", onclick: (e) => { e.preventDefault(); load("/" + parts.slice(0, i + 1).join("/")); } }, p), "/"]));
    const entries = [...res.entries].sort((a, b) => (a.type === "dir") === (b.type === "dir") ? a.name.localeCompare(b.name) : a.type === "dir" ? -1 : 1);
    replace(list,
      dir !== "/" ? h("tr", {}, h("td", {}, h("a", { href: "#", onclick: (e) => { e.preventDefault(); load(parent(dir)); } }, "..")), h("td"), h("td.hide-sm"), h("td")) : null,
      entries.map((f) => h("tr", { "data-file": f.name },
        h("td", {}, h("a", { href: "#", onclick: (e) => { e.preventDefault(); f.type === "dir" ? load(f.path) : open(f); } },
          f.type === "dir" ? "📁 " : "", f.name, f.type === "symlink" ? " → " + (f.linkTarget || "") : "")),
        h("td.num", {}, f.type === "dir" ? "" : bytes(f.size)),
        h("td.hide-sm", {}, when(f.mtime)),
        h("td.actions", {},
          f.type === "file" ? h("a.button", { href: sb(id, "/files") + "?path=" + encodeURIComponent(f.path), download: f.name, title: "Download " + f.name }, "Download") : null,
          h("button", { type: "button", title: "Rename " + f.name, onclick: (e) => busy(e.currentTarget, () => rename(f)) }, "Rename"),
          h("button.danger", { type: "button", title: "Delete " + f.name, onclick: (e) => busy(e.currentTarget, () => remove(f)) }, "Delete")))));
    if (!entries.length) list.append(h("tr", {}, h("td.muted", { colspan: 4 }, "empty folder")));
  }

  async function open(f) {
    viewer.hidden = false;
    const ext = (f.name.split(".").pop() || "").toLowerCase();
    const head = h("div.row", {}, h("strong", {}, f.path), h("span.grow"), h("button", { type: "button", onclick: () => { viewer.hidden = true; } }, "Close"));
    if (imageTypes[ext]) {
      const resp = await request("GET", sb(id, "/files"), { query: { path: f.path } });
      const blob = new Blob([await resp.arrayBuffer()], { type: imageTypes[ext] });
      const img = h("img", { alt: f.name, src: URL.createObjectURL(blob) });
      img.onload = () => URL.revokeObjectURL(img.src);
      replace(viewer, head, img);
      return;
    }
    const resp = await request("GET", sb(id, "/files"), { query: { path: f.path, length: maxText } });
    const buf = new Uint8Array(await resp.arrayBuffer());
    if (buf.subarray(0, 8000).includes(0)) {
      replace(viewer, head, h("p.muted", {}, `binary file (${bytes(f.size)}): download it to look inside`));
      return;
    }
    replace(viewer, head, h("pre.file-text", { "data-open-file": f.path }, new TextDecoder().decode(buf)),
      f.size > maxText ? h("p.muted", {}, `showing the first ${bytes(maxText)} of ${bytes(f.size)}`) : null);
  }

  async function newFolder() {
    const name = await promptDialog("New folder", "Name");
    if (!name) return;
    await api("POST", sb(id, "/fs/mkdir"), { json: { path: join(dir, name) } });
    toast("created " + name);
    await load();
  }

  async function rename(f) {
    const name = await promptDialog("Rename " + f.name, "New name", f.name);
    if (!name || name === f.name) return;
    await api("POST", sb(id, "/fs/move"), { json: { from: f.path, to: join(parent(f.path), name) } });
    await load();
  }

  async function remove(f) {
    if (!(await confirmDialog("Delete " + f.name + "?", f.type === "dir" ? "The folder and everything in it is deleted." : "The file is deleted.", "Delete"))) return;
    await api("DELETE", sb(id, "/files"), { query: { path: f.path, recursive: f.type === "dir" ? "true" : "" } });
    await load();
  }

  async function uploadFiles(files) {
    for (const file of files) {
      const bar = h("progress", { max: 100, value: 0 });
      const row = h("div.upload", { "data-upload": file.name }, h("span", {}, file.name), bar, h("span.pct", {}, "0%"));
      progress.append(row);
      try {
        await upload(sb(id, "/files"), { path: join(dir, file.name) }, file, (done, total) => {
          bar.value = Math.round((100 * done) / total);
          row.lastChild.textContent = bar.value + "%";
        });
        bar.value = 100;
        row.lastChild.textContent = "done";
        row.dataset.done = "true";
        setTimeout(() => row.remove(), 4000);
      } catch (e) {
        row.lastChild.textContent = "failed: " + e.message;
        row.classList.add("failed");
      }
    }
    await load();
  }

  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => { e.preventDefault(); drop.classList.remove("over"); uploadFiles([...e.dataTransfer.files]); });
  drop.addEventListener("click", () => fileInput.click());
  drop.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); fileInput.click(); } });
  fileInput.addEventListener("change", () => { uploadFiles([...fileInput.files]); fileInput.value = ""; });

  return { el, mount() { if (!el.dataset.dir) load(); }, dispose() {} };
}
