// hotcell's web console: sign in, then a hash-routed page per view. It uses
// only the public API, with the session cookie the sign-in set.
import "@xterm/xterm/css/xterm.css";
import "./style.css";
import { api, setCSRF, whenSignedOut } from "./api.js";
import { h, replace, toast } from "./ui.js";
import { listPage } from "./list.js";
import { sandboxPage } from "./sandbox.js";
import { hostPage } from "./host.js";

const app = document.getElementById("app");
let session = null;
let page = null;

function go(hash) { location.hash = hash; }

function signInPage(message) {
  const key = h("input", { type: "password", id: "key", name: "key", autocomplete: "current-password", required: true, "aria-describedby": "key-help" });
  const err = h("p.error", { role: "alert", hidden: !message }, message || "");
  const submit = h("button.primary", { type: "submit" }, "Sign in");
  const form = h("form.signin", { "aria-label": "Sign in" },
    h("h1", {}, "hotcell"),
    h("label", { for: "key" }, "API key or daemon token"), key,
    h("small.muted", { id: "key-help" }, "Create a key with ", h("code", {}, "hotcell keys create NAME"), ". It is sent once; the browser keeps only a session cookie."),
    err, submit);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    submit.disabled = true;
    try {
      session = await api("POST", "/v1/session", { json: { key: key.value } });
      setCSRF(session.csrfToken);
      key.value = "";
      render();
    } catch (ex) {
      err.hidden = false;
      err.textContent = ex.message;
      key.select();
    } finally {
      submit.disabled = false;
    }
  });
  return { el: h("main.center", {}, form), focus: () => key.focus() };
}

function shell(content) {
  const nav = h("nav.top", { "aria-label": "Main" },
    h("a.brand", { href: "#/sandboxes" }, "hotcell"),
    h("a", { href: "#/sandboxes" }, "Sandboxes"),
    h("a", { href: "#/host" }, "Host"),
    h("span.grow"),
    h("span.muted.who", {}, session.admin ? "token" : "key " + session.keyName),
    h("button", { type: "button", "data-action": "sign-out", onclick: signOut }, "Sign out"));
  return [h("a.skip", { href: "#main" }, "Skip to content"), nav, h("main", { id: "main", tabindex: "-1" }, content)];
}

async function signOut() {
  try { await api("DELETE", "/v1/session"); } catch (e) { toast(e.message, "error"); }
  session = null;
  setCSRF("");
  render();
}

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  if (parts[0] === "sandboxes" && parts[1]) return sandboxPage(decodeURIComponent(parts[1]), go);
  if (parts[0] === "host") return hostPage();
  return listPage(go);
}

let lastRoute = "";
function render(message) {
  if (page && page.dispose) page.dispose();
  page = null;
  if (!session) {
    const p = signInPage(message);
    replace(app, p.el);
    p.focus();
    lastRoute = "";
    return;
  }
  page = route();
  lastRoute = location.hash.split("/").slice(0, 3).join("/");
  replace(app, shell(page.el));
  document.title = "hotcell — " + (location.hash.split("/")[1] || "sandboxes");
}

window.addEventListener("hashchange", () => {
  // A tab change inside a sandbox page only rewrites the hash's tail.
  if (session && location.hash.split("/").slice(0, 3).join("/") === lastRoute) return;
  render();
});

whenSignedOut((msg) => {
  if (!session) return;
  session = null;
  setCSRF("");
  render(msg);
});

(async () => {
  try {
    session = await api("GET", "/v1/session");
    setCSRF(session.csrfToken);
  } catch {
    session = null;
  }
  render();
})();
