// The public HTTP API, as the console uses it: the session cookie rides on
// every request by itself; unsafe methods add the session's CSRF token.

let csrfToken = "";
let onSignedOut = () => {};

export function setCSRF(token) { csrfToken = token || ""; }
export function whenSignedOut(fn) { onSignedOut = fn; }

export class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function url(path, query) {
  const u = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v === undefined || v === null || v === "") continue;
    if (Array.isArray(v)) v.forEach((x) => u.searchParams.append(k, x));
    else u.searchParams.set(k, String(v));
  }
  return u.pathname + u.search;
}

function headersFor(method, extra) {
  const h = new Headers(extra || {});
  if (!["GET", "HEAD", "OPTIONS"].includes(method)) h.set("X-Hotcell-CSRF", csrfToken);
  return h;
}

async function failure(resp) {
  let code = "", message = `${resp.status} ${resp.statusText}`;
  try {
    const doc = await resp.json();
    if (doc && doc.error) { code = doc.error.code; message = doc.error.message; }
  } catch { /* not JSON */ }
  if (resp.status === 401) onSignedOut(message);
  return new APIError(resp.status, code, message);
}

// request sends one call and returns the response, failing on a non-2xx
// answer with the API's own error message.
export async function request(method, path, { query, json, body, headers, signal } = {}) {
  const h = headersFor(method, headers);
  if (json !== undefined) {
    h.set("Content-Type", "application/json");
    body = JSON.stringify(json);
  }
  const resp = await fetch(url(path, query), { method, headers: h, body, signal, credentials: "same-origin" });
  if (!resp.ok) throw await failure(resp);
  return resp;
}

// api is request for JSON answers (undefined for 204).
export async function api(method, path, opts) {
  const resp = await request(method, path, opts);
  if (resp.status === 204) return undefined;
  const type = resp.headers.get("Content-Type") || "";
  return type.includes("json") ? resp.json() : resp.text();
}

// stream reads an NDJSON answer, calling onLine with each decoded line,
// until it ends, fails, or signal aborts it. A stream.error line throws.
export async function stream(method, path, onLine, opts = {}) {
  const resp = await request(method, path, opts);
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    let r;
    try {
      r = await reader.read();
    } catch (e) {
      if (opts.signal && opts.signal.aborted) return;
      throw e;
    }
    if (r.done) break;
    buf += dec.decode(r.value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (!line) continue;
      const v = JSON.parse(line);
      if (v.type === "stream.error" || (v.error && v.type === undefined)) {
        const e = v.error || {};
        throw new APIError(0, e.code || "", e.message || "the stream failed");
      }
      onLine(v);
    }
  }
}

// upload PUTs a body with progress (fetch cannot report upload progress).
export function upload(path, query, file, onProgress) {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open("PUT", url(path, query));
    x.setRequestHeader("X-Hotcell-CSRF", csrfToken);
    x.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded, e.total); };
    x.onload = () => {
      if (x.status >= 200 && x.status < 300) return resolve(x.responseText ? JSON.parse(x.responseText) : undefined);
      let msg = `${x.status}`, code = "";
      try { const d = JSON.parse(x.responseText); msg = d.error.message; code = d.error.code; } catch { /* not JSON */ }
      if (x.status === 401) onSignedOut(msg);
      reject(new APIError(x.status, code, msg));
    };
    x.onerror = () => reject(new APIError(0, "", "upload failed: the connection was lost"));
    x.send(file);
  });
}

export function wsURL(path, query) {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  return proto + "//" + location.host + url(path, query);
}

export const sb = (id, rest = "") => `/v1/sandboxes/${encodeURIComponent(id)}${rest}`;
