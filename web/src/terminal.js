// The terminal tab: xterm.js over the terminal WebSocket of the public API.
// The session is created once (POST .../terminals) and attached to; its id
// is kept in sessionStorage for this tab so that a reload attaches to the
// same shell again, which replays its recent output.
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { api, sb, wsURL } from "./api.js";
import { h, toast } from "./ui.js";

const storeKey = (id) => "hotcell.terminal." + id;
const enc = new TextEncoder();

export function terminalView(id) {
  const status = h("span.term-status", { "data-term-status": "connecting" }, "connecting…");
  const host = h("div.term", { "data-terminal": "" });
  const copyBtn = h("button", { type: "button", title: "Copy the selection" }, "Copy");
  const pasteBtn = h("button", { type: "button", title: "Paste from the clipboard" }, "Paste");
  const reattachBtn = h("button", { type: "button" }, "Re-attach");
  const newBtn = h("button", { type: "button" }, "New session");
  const el = h("section.terminal-view", {},
    h("div.row.toolbar", {}, status, h("span.grow"), copyBtn, pasteBtn, reattachBtn, newBtn), host);

  const term = new Terminal({ cursorBlink: true, fontSize: 14, scrollback: 5000, convertEol: false,
    fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace",
    theme: { background: "#11151c", foreground: "#e6e6e6" } });
  const fit = new FitAddon();
  term.loadAddon(fit);
  let ws = null, sid = sessionStorage.getItem(storeKey(id)) || "", closed = false;

  const setStatus = (s, text) => { status.dataset.termStatus = s; status.textContent = text; };
  const send = (obj) => { if (ws && ws.readyState === 1) ws.send(JSON.stringify(obj)); };
  term.onData((d) => { if (ws && ws.readyState === 1) ws.send(enc.encode(d)); });
  term.onResize(({ cols, rows }) => {
    host.dataset.cols = String(cols);
    host.dataset.rows = String(rows);
    send({ type: "resize", cols, rows });
  });

  async function session(fresh) {
    if (sid && !fresh) {
      try {
        const info = await api("GET", sb(id, "/terminals/" + sid));
        if (info.running) return sid;
      } catch { /* gone: make another */ }
    }
    const info = await api("POST", sb(id, "/terminals"), { json: { tty: true, cols: term.cols, rows: term.rows, detachTimeoutSec: 900 } });
    sid = info.id;
    sessionStorage.setItem(storeKey(id), sid);
    return sid;
  }

  async function connect(fresh = false) {
    if (ws) { ws.onclose = null; ws.close(); ws = null; }
    setStatus("connecting", "connecting…");
    let s;
    try {
      s = await session(fresh);
    } catch (e) {
      setStatus("error", e.message);
      return;
    }
    if (closed) return;
    if (fresh) term.reset();
    host.dataset.session = s;
    const sock = new WebSocket(wsURL(sb(id, `/terminals/${s}/attach`)));
    sock.binaryType = "arraybuffer";
    ws = sock;
    sock.onmessage = (m) => {
      if (typeof m.data !== "string") { term.write(new Uint8Array(m.data)); return; }
      let msg;
      try { msg = JSON.parse(m.data); } catch { return; }
      if (msg.type === "ready") {
        setStatus("attached", "attached · session " + s);
        fit.fit();
        send({ type: "resize", cols: term.cols, rows: term.rows });
      } else if (msg.type === "exit") {
        setStatus("exited", `exited${msg.exitCode !== undefined ? " with " + msg.exitCode : ""}${msg.signal ? " by " + msg.signal : ""}`);
        sessionStorage.removeItem(storeKey(id));
        sid = "";
      } else if (msg.type === "error") {
        toast("terminal: " + msg.message, "error");
      }
    };
    sock.onclose = () => {
      if (ws !== sock || closed) return;
      if (status.dataset.termStatus !== "exited") setStatus("detached", "detached — Re-attach to continue");
    };
  }

  copyBtn.onclick = async () => {
    const sel = term.getSelection();
    if (!sel) return toast("select text in the terminal first");
    try { await navigator.clipboard.writeText(sel); toast("copied"); } catch (e) { toast("copy: " + e.message, "error"); }
  };
  pasteBtn.onclick = async () => {
    try { term.paste(await navigator.clipboard.readText()); term.focus(); } catch (e) { toast("paste: " + e.message, "error"); }
  };
  reattachBtn.onclick = () => connect(false);
  newBtn.onclick = () => connect(true);

  const ro = new ResizeObserver(() => { if (host.offsetParent) fit.fit(); });
  return {
    el,
    mount() {
      if (!term.element) { term.open(host); ro.observe(host); }
      fit.fit();
      host.dataset.cols = String(term.cols);
      host.dataset.rows = String(term.rows);
      if (!ws) connect(false);
      term.focus();
    },
    dispose() { closed = true; ro.disconnect(); if (ws) { ws.onclose = null; ws.close(); } term.dispose(); },
  };
}
