// The web console in a real headless Chromium (Debian's, never a
// downloaded one), driven by playwright-core. Run by
// test/e2e/console_browser_test.go, which gives HOTCELL_URL, HOTCELL_TOKEN
// (to check from the API's side), HOTCELL_KEY (what the user signs in
// with), HOTCELL_LABEL, CHROMIUM and SCREENSHOTS.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { join } from "node:path";
import { BASE, TOKEN, KEY, SHOTS, T, launch, apiCall } from "./browser.mjs";

const LABEL = process.env.HOTCELL_LABEL;
const TEMPLATE = process.env.HOTCELL_TEMPLATE;

let b, browser, page, sandboxId;

const shot = (name) => page.screenshot({ path: join(SHOTS, name + ".png") });
const termText = () => page.locator(".xterm-rows").innerText();

async function typeInTerminal(line) {
  await page.locator(".xterm-helper-textarea").focus();
  await page.keyboard.type(line);
  await page.keyboard.press("Enter");
}

before(async () => {
  b = await launch();
  browser = b.browser;
  page = b.page;
});

after(async () => { if (b) await b.close(); });

test("the console, end to end", { timeout: 12 * 60_000 }, async (t) => {
  await t.test("a wrong key is refused", async () => {
    await page.goto(BASE + "/ui/");
    await page.fill("#key", "e2b_" + "0".repeat(40));
    await page.click("button[type=submit]");
    await page.locator("p.error").filter({ hasText: "not an API key" }).waitFor({ timeout: T });
    const cookies = await browser.cookies();
    assert.equal(cookies.length, 0, "a refused sign-in set a cookie");
    await shot("signin");
  });

  await t.test("sign in with the keyboard alone", async () => {
    await page.fill("#key", "");
    await page.locator("#key").focus();
    await page.keyboard.type(KEY);
    await page.keyboard.press("Enter");
    await page.locator("h1", { hasText: "Sandboxes" }).waitFor({ timeout: T });
    const cookies = await browser.cookies();
    assert.equal(cookies.length, 1);
    assert.equal(cookies[0].httpOnly, true);
    assert.equal(cookies[0].sameSite, "Strict");
    assert.notEqual(cookies[0].value, KEY);
    const stored = await page.evaluate(() => JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie);
    assert.ok(!stored.includes(KEY), "the key is kept by the page");
  });

  await t.test("create from the form and see it running", async () => {
    await page.click("text=New sandbox");
    await page.fill("#cf-memoryMb", "256");
    await page.fill("#cf-labels", `test=${LABEL}, made-by=console`);
    await page.fill("#cf-setup", "echo set up > /workspace/setup.txt");
    await page.click("form.create button[type=submit]");
    await page.waitForURL(/#\/sandboxes\/sb-/, { timeout: 2 * T });
    sandboxId = decodeURIComponent(page.url().split("#/sandboxes/")[1].split("/")[0]);
    await page.locator(`.sandbox-page[data-state=running]`).waitFor({ timeout: T });
    const got = JSON.parse((await apiCall("GET", `/v1/sandboxes/${sandboxId}`)).text);
    assert.equal(got.state, "running");
    assert.equal(got.labels.test, LABEL);
    assert.equal(got.limits.memoryMb, 256);
    await page.locator("details.setup", { hasText: "exit 0" }).waitFor({ timeout: T });

    await page.click("nav.top >> text=Sandboxes");
    await page.locator(`tr[data-sandbox="${sandboxId}"][data-state=running]`).waitFor({ timeout: T });
    await shot("sandboxes");
  });

  await t.test("the list follows state changes live", async () => {
    // A stop through the API (not the page) shows up through /v1/events.
    assert.equal((await apiCall("POST", `/v1/sandboxes/${sandboxId}/stop`)).status, 200);
    await page.locator(`tr[data-sandbox="${sandboxId}"][data-state=stopped]`).waitFor({ timeout: T });
    assert.equal((await apiCall("POST", `/v1/sandboxes/${sandboxId}/start`)).status, 200);
    await page.locator(`tr[data-sandbox="${sandboxId}"][data-state=running]`).waitFor({ timeout: T });
    await page.selectOption("select[aria-label='Filter by state']", "stopped");
    await page.locator(`tr[data-sandbox="${sandboxId}"]`).waitFor({ state: "detached", timeout: T });
    await page.selectOption("select[aria-label='Filter by state']", "");
  });

  await t.test("a stats chart updates", async () => {
    // Keyboard: the sandbox's link takes focus and Enter opens it.
    await page.locator(`a[href="#/sandboxes/${sandboxId}"]`).focus();
    await page.keyboard.press("Enter");
    const cpu = page.locator("figure.chart[data-chart=CPU]");
    await cpu.waitFor({ timeout: T });
    await page.waitForFunction(() => Number(document.querySelector("figure.chart[data-chart=CPU]").dataset.samples) >= 3, null, { timeout: T });
    const line = await page.locator("figure.chart[data-chart=Memory] polyline").getAttribute("points");
    assert.ok(line.split(" ").length >= 3, `memory chart has points ${line}`);
    await shot("sandbox");
  });

  let session;
  await t.test("terminal: echo, resize, reload and re-attach", async () => {
    // The tabs take the arrow keys: Overview -> Terminal.
    await page.locator("button[data-tab=overview]").focus();
    await page.keyboard.press("ArrowRight");
    assert.equal(await page.locator("button[data-tab=terminal]").getAttribute("aria-selected"), "true");
    await page.locator(".term-status[data-term-status=attached]").waitFor({ timeout: T });
    session = await page.locator("[data-terminal]").getAttribute("data-session");
    await typeInTerminal("echo hello-$((6*7))");
    await page.waitForFunction(() => document.querySelector(".xterm-rows").innerText.includes("hello-42"), null, { timeout: T });

    await typeInTerminal("stty size");
    await page.waitForFunction(() => /\n\d+ \d+\s*\n/.test(document.querySelector(".xterm-rows").innerText), null, { timeout: T });
    const size = (s) => [...s.matchAll(/(?:^|\n)(\d+) (\d+)\s*(?=\n)/g)].map((m) => m[1] + "x" + m[2]);
    const before = size(await termText()).pop();
    const cols = await page.locator("[data-terminal]").getAttribute("data-cols");
    await page.setViewportSize({ width: 900, height: 700 });
    // The terminal fits its new box and sends the PTY its size before
    // anything typed after it.
    await page.waitForFunction((c) => document.querySelector("[data-terminal]").dataset.cols !== c, cols, { timeout: T });
    await typeInTerminal("clear; stty size");
    await page.waitForFunction((b) => {
      const m = [...document.querySelector(".xterm-rows").innerText.matchAll(/(?:^|\n)(\d+) (\d+)\s*(?=\n)/g)];
      return m.length && m[m.length - 1][1] + "x" + m[m.length - 1][2] !== b;
    }, before, { timeout: T });
    const after = size(await termText()).pop();
    assert.notEqual(after, before, `the PTY size did not follow the window (${before} -> ${after})`);
    await page.setViewportSize({ width: 1280, height: 860 });

    await typeInTerminal("echo before-reload-$((2*3))");
    await page.waitForFunction(() => document.querySelector(".xterm-rows").innerText.includes("before-reload-6"), null, { timeout: T });
    await shot("terminal");
    await page.reload();
    await page.locator(".term-status[data-term-status=attached]").waitFor({ timeout: T });
    assert.equal(await page.locator("[data-terminal]").getAttribute("data-session"), session, "the reload attached to another session");
    // The replay brings back what the shell printed before the reload.
    await page.waitForFunction(() => document.querySelector(".xterm-rows").innerText.includes("before-reload-6"), null, { timeout: T });
    await typeInTerminal("echo after-reload-$((3*3))");
    await page.waitForFunction(() => document.querySelector(".xterm-rows").innerText.includes("after-reload-9"), null, { timeout: T });
  });

  await t.test("terminal: copy and paste", async () => {
    // Paste: the clipboard's text goes to the shell as typed input.
    await page.evaluate(() => navigator.clipboard.writeText("echo pasted-$((5*5))"));
    await page.click("button:has-text('Paste')");
    // The paste is async (the clipboard read): wait for the shell to echo
    // it before pressing Enter in the terminal, or Enter would hit the
    // still-focused button and paste again.
    await page.waitForFunction(() => document.querySelector(".xterm-rows").innerText.includes("echo pasted-$((5*5))"), null, { timeout: T });
    await page.locator(".xterm-helper-textarea").focus();
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.querySelector(".xterm-rows").innerText.includes("pasted-25"), null, { timeout: T });
    // Copy: a double-click selects the word on screen; Copy puts it on
    // the clipboard.
    const row = page.locator(".xterm-rows > div", { hasText: /^after-reload-9\s*$/ }).first();
    const box = await row.boundingBox();
    await page.mouse.dblclick(box.x + 4, box.y + box.height / 2);
    await page.click("button:has-text('Copy')");
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), "after-reload-9");
  });

  await t.test("upload a file by drag and drop", async () => {
    await page.click("button[data-tab=files]");
    await page.locator("tr[data-file='setup.txt']").waitFor({ timeout: T });
    const dt = await page.evaluateHandle(() => {
      const d = new DataTransfer();
      d.items.add(new File(["uploaded by the browser\n"], "dropped.txt", { type: "text/plain" }));
      return d;
    });
    await page.dispatchEvent(".dropzone", "drop", { dataTransfer: dt });
    await page.locator("tr[data-file='dropped.txt']").waitFor({ timeout: T });
    const viaAPI = await apiCall("GET", `/v1/sandboxes/${sandboxId}/files?path=/workspace/dropped.txt`);
    assert.equal(viaAPI.status, 200);
    assert.equal(viaAPI.text, "uploaded by the browser\n");
    await page.click("tr[data-file='dropped.txt'] >> text=dropped.txt");
    await page.locator("pre.file-text", { hasText: "uploaded by the browser" }).waitFor({ timeout: T });
    await shot("files");
  });

  await t.test("new folder, rename and delete in the file browser", async () => {
    const answer = async (text) => {
      await page.locator("dialog input").fill(text);
      await page.locator("dialog button[type=submit]").click();
    };
    await page.click("text=New folder");
    await answer("made-here");
    await page.locator("tr[data-file='made-here']").waitFor({ timeout: T });
    await page.click("tr[data-file='dropped.txt'] >> button:has-text('Rename')");
    await answer("renamed.txt");
    await page.locator("tr[data-file='renamed.txt']").waitFor({ timeout: T });
    assert.equal((await apiCall("GET", `/v1/sandboxes/${sandboxId}/files?path=/workspace/renamed.txt`)).text, "uploaded by the browser\n");
    await page.click("tr[data-file='made-here'] >> button:has-text('Delete')");
    await page.click("dialog [data-confirm=yes]");
    await page.locator("tr[data-file='made-here']").waitFor({ state: "detached", timeout: T });
    assert.equal((await apiCall("GET", `/v1/sandboxes/${sandboxId}/fs/stat?path=/workspace/made-here`)).status, 404);
  });

  await t.test("a sandbox's file names, contents and output are shown as text, never run", async () => {
    // The sandbox chooses all of these; were any parsed as markup, its
    // script would run on the console's origin with the user's session.
    const evil = `<img src=x onerror="document.title='hijacked'">`;
    const put = async (path, body) => {
      const r = await fetch(`${BASE}/v1/sandboxes/${sandboxId}/files?path=${encodeURIComponent(path)}`, {
        method: "PUT", headers: { Authorization: "Bearer " + TOKEN }, body });
      assert.ok(r.ok, await r.text());
    };
    await put(`/workspace/${evil}.txt`, `<script>document.title='hijacked'</script>${evil}`);
    await put("/workspace/evil.svg", `<svg xmlns="http://www.w3.org/2000/svg" onload="document.title='hijacked'"><script>document.title='hijacked'</script><rect width="10" height="10"/></svg>`);
    await page.click("button[data-tab=files]");
    await page.click("text=Refresh");
    const row = page.locator("tr[data-file]", { hasText: "onerror" });
    await row.waitFor({ timeout: T });
    assert.equal(await row.getAttribute("data-file"), `${evil}.txt`);
    await row.locator("a").first().click();
    await page.locator("pre.file-text", { hasText: "<script>" }).waitFor({ timeout: T });
    await page.click("tr[data-file='evil.svg'] >> a");
    await page.locator(".viewer img[alt='evil.svg']").waitFor({ timeout: T });
    const started = await apiCall("POST", `/v1/sandboxes/${sandboxId}/processes`, { command: `echo '${evil.replaceAll("'", "")}'`, name: evil });
    assert.equal(started.status, 201, started.text);
    await page.click("button[data-tab=processes]");
    await page.locator("tr[data-process]", { hasText: "onerror" }).first().locator("button:has-text('Logs')").click();
    await page.locator("pre.log", { hasText: "<img src=x" }).waitFor({ timeout: T });
    assert.notEqual(await page.title(), "hijacked");
    assert.equal(await page.locator("img[src=x]").count(), 0, "a sandbox's markup became an element");
  });

  await t.test("follow a process log", async () => {
    await page.click("button[data-tab=processes]");
    await page.fill("input[name=command]", "for i in 1 2 3; do echo line-$i; sleep 0.3; done");
    await page.fill("input[name=name]", "counter");
    await page.click("text=Run in background");
    await page.locator("pre.log", { hasText: "line-3" }).waitFor({ timeout: T });
    await page.locator("pre.log", { hasText: "[exited 0]" }).waitFor({ timeout: T });
    const text = await page.locator("pre.log").innerText();
    assert.ok(text.indexOf("line-1") < text.indexOf("line-2") && text.indexOf("line-2") < text.indexOf("line-3"), text);
    await shot("processes");
  });

  await t.test("the event timeline", async () => {
    await page.click("button[data-tab=events]");
    await page.locator("ol.timeline li[data-event=created]").waitFor({ timeout: T });
    await page.locator("ol.timeline li[data-event=stopped]").waitFor({ timeout: T });
  });

  await t.test("pause and resume", async () => {
    await page.click("button[data-action=pause]");
    await page.locator(".sandbox-page[data-state=paused]").waitFor({ timeout: T });
    await page.locator("ol.timeline li[data-event=paused]").waitFor({ timeout: T });
    await page.click("button[data-action=resume]");
    await page.locator(".sandbox-page[data-state=running]").waitFor({ timeout: T });
  });

  await t.test("backup and restore", async () => {
    const put = await fetch(`${BASE}/v1/sandboxes/${sandboxId}/files?path=/workspace/kept.txt`, {
      method: "PUT", headers: { Authorization: "Bearer " + TOKEN }, body: "before the backup\n" });
    assert.ok(put.ok, await put.text());
    await page.click("button[data-tab=backups]");
    await page.click("button[data-action=backup]");
    const row = page.locator("tr[data-backup]").first();
    await row.waitFor({ timeout: T });
    await fetch(`${BASE}/v1/sandboxes/${sandboxId}/files?path=/workspace/kept.txt`, {
      method: "PUT", headers: { Authorization: "Bearer " + TOKEN }, body: "changed after it\n" });
    await row.locator("button:has-text('Restore')").click();
    await page.click("dialog [data-confirm=yes]");
    await page.locator(".toast", { hasText: "restored" }).waitFor({ timeout: T });
    assert.equal((await apiCall("GET", `/v1/sandboxes/${sandboxId}/files?path=/workspace/kept.txt`)).text, "before the backup\n");
  });

  await t.test("open a port's preview", async () => {
    await fetch(`${BASE}/v1/sandboxes/${sandboxId}/files?path=/workspace/site/index.html`, {
      method: "PUT", headers: { Authorization: "Bearer " + TOKEN }, body: "<h1>served from the sandbox</h1>" });
    const started = await apiCall("POST", `/v1/sandboxes/${sandboxId}/processes`, { command: "httpd -f -p 8000 -h /workspace/site", name: "web" });
    assert.equal(started.status, 201, started.text);
    assert.equal((await apiCall("GET", `/v1/sandboxes/${sandboxId}/ports/8000/wait?timeoutMs=10000`)).status, 200);
    await page.click("button[data-tab=ports]");
    await page.fill("input[aria-label=Port]", "8000");
    await page.click("text=Open preview");
    const link = page.locator("[data-port='8000'] a");
    await link.waitFor({ timeout: T });
    const [preview] = await Promise.all([browser.waitForEvent("page"), link.click()]);
    await preview.locator("h1", { hasText: "served from the sandbox" }).waitFor({ timeout: T });
    await shot("ports");
    await preview.close();
  });

  await t.test("fork", async () => {
    await page.click("button[data-action=fork]");
    await page.click("dialog [data-confirm=yes]");
    await page.waitForURL((u) => u.hash.startsWith("#/sandboxes/") && !u.hash.includes(sandboxId), { timeout: 2 * T });
    const forked = decodeURIComponent(page.url().split("#/sandboxes/")[1].split("/")[0]);
    await page.locator(".sandbox-page[data-state=running]").waitFor({ timeout: T });
    const got = JSON.parse((await apiCall("GET", `/v1/sandboxes/${forked}`)).text);
    assert.equal(got.labels.test, LABEL, "the fork keeps the labels");
    assert.equal((await apiCall("GET", `/v1/sandboxes/${forked}/files?path=/workspace/kept.txt`)).text, "before the backup\n");
    await page.goto(`${BASE}/ui/#/sandboxes/${sandboxId}`);
    await page.locator(`.sandbox-page[data-sandbox="${sandboxId}"]`).waitFor({ timeout: T });
  });

  await t.test("change egress and see a denial", async () => {
    await page.click("button[data-tab=egress]");
    await page.selectOption("select[name=mode]", "allowlist");
    await page.fill("textarea[name=allow]", "allowed.example");
    await page.click("form.egress-form button[type=submit]");
    await page.locator("dd", { hasText: "allowlist: allowed.example" }).waitFor({ timeout: T });
    const pol = JSON.parse((await apiCall("GET", `/v1/sandboxes/${sandboxId}/egress`)).text);
    assert.deepEqual(pol.policy.allow, ["allowed.example"]);
    // A name off the allowlist: the pinned resolver refuses it.
    await apiCall("POST", `/v1/sandboxes/${sandboxId}/exec`, { command: "nslookup blocked.example >/dev/null 2>&1; true" });
    await page.locator("tr[data-denial=dns]", { hasText: "blocked.example" }).first().waitFor({ timeout: T });
    await shot("egress");
  });

  await t.test("a page of another origin cannot act with the session", async () => {
    // Another port of the same host: the same site, so the browser sends
    // the SameSite=Strict cookie; Origin and the CSRF token must stop it.
    const target = `${BASE}/v1/sandboxes/${sandboxId}/exec`;
    const evil = createServer((req, res) => {
      if (req.url === "/evil.js") {
        res.setHeader("Content-Type", "text/javascript");
        res.end(`
          fetch(${JSON.stringify(target)}, { method: "POST", mode: "no-cors", credentials: "include",
            headers: { "Content-Type": "text/plain" }, body: JSON.stringify({ command: "touch /workspace/pwned-fetch" }) })
            .finally(() => { document.title = "fetched"; });
          const ws = new WebSocket(${JSON.stringify(target.replace("http", "ws"))} + "?command=touch+/workspace/pwned-ws");
          ws.onopen = () => { document.body.dataset.ws = "open"; };
          ws.onerror = ws.onclose = () => { document.body.dataset.ws = document.body.dataset.ws || "refused"; };
          document.querySelector("iframe").onload = () => { document.body.dataset.form = "answered"; };
          document.forms[0].submit();`);
        return;
      }
      res.setHeader("Content-Type", "text/html");
      res.end(`<!doctype html><body><form method="POST" enctype="text/plain" action="${target}" target="sink">` +
        `<input name='{"command":"touch /workspace/pwned-form","x":"' value='"}'></form><iframe name="sink"></iframe><script src="/evil.js"></script></body>`);
    });
    await new Promise((r) => evil.listen(0, "127.0.0.1", r));
    try {
      const other = await browser.newPage();
      await other.goto(`http://127.0.0.1:${evil.address().port}/`);
      await other.waitForFunction(() => document.title === "fetched" && document.body.dataset.ws && document.body.dataset.form, null, { timeout: T });
      assert.equal(await other.evaluate(() => document.body.dataset.ws), "refused");
      await other.close();
    } finally {
      evil.close();
    }
    const ls = await apiCall("GET", `/v1/sandboxes/${sandboxId}/fs/list?path=/workspace`);
    for (const made of ["pwned-fetch", "pwned-ws", "pwned-form"]) {
      assert.ok(!ls.text.includes(made), `the other origin's requests acted (${made}): ${ls.text}`);
    }
  });

  await t.test("save as template, and see it on the host page", async () => {
    await page.goto(`${BASE}/ui/#/sandboxes/${sandboxId}`);
    await page.click("button[data-action='save as template']");
    await page.locator("dialog input").fill(TEMPLATE);
    await page.locator("dialog button[type=submit]").click();
    await page.locator(".toast", { hasText: `saved as template ${TEMPLATE} v1` }).waitFor({ timeout: T });
    const got = JSON.parse((await apiCall("GET", `/v1/templates/${TEMPLATE}`)).text);
    assert.equal(got.fromSandbox, sandboxId);
  });

  await t.test("host page", async () => {
    await page.click("nav.top >> text=Host");
    await page.locator("[data-host=version]").waitFor({ timeout: T });
    await page.locator(`tr[data-template="${TEMPLATE}"]`, { hasText: "none" }).waitFor({ timeout: T });
    await page.locator("a[href='/metrics']").waitFor({ timeout: T });
    await shot("host");
  });

  await t.test("phone width", async () => {
    await page.setViewportSize({ width: 390, height: 800 });
    await page.goto(`${BASE}/ui/#/sandboxes/${sandboxId}/overview`);
    await page.locator(".sandbox-page[data-state=running]").waitFor({ timeout: T });
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `the page is ${overflow}px wider than a phone`);
    await shot("phone");
    await page.setViewportSize({ width: 1280, height: 860 });
  });

  await t.test("destroy and see it leave the list", async () => {
    await page.goto(`${BASE}/ui/#/sandboxes/${sandboxId}`);
    await page.click("button[data-action=destroy]");
    await page.click("dialog [data-confirm=yes]");
    await page.locator("h1", { hasText: "Sandboxes" }).waitFor({ timeout: T });
    await page.locator(`tr[data-sandbox="${sandboxId}"]`).waitFor({ state: "detached", timeout: T });
    assert.equal((await apiCall("GET", `/v1/sandboxes/${sandboxId}`)).status, 404);
  });

  await t.test("bulk stop and destroy after a confirmation", async () => {
    const ids = [];
    for (let i = 0; i < 2; i++) {
      const r = await apiCall("POST", "/v1/sandboxes", { labels: { test: LABEL, bulk: "yes" } });
      assert.equal(r.status, 201, r.text);
      ids.push(JSON.parse(r.text).id);
    }
    for (const id of ids) await page.locator(`tr[data-sandbox="${id}"]`).waitFor({ timeout: T });
    await page.fill("input[aria-label='Filter by label']", "bulk=yes");
    for (const id of ids) await page.check(`tr[data-sandbox="${id}"] input[type=checkbox]`);
    await page.click("text=Stop selected (2)");
    await page.click("dialog [data-confirm=yes]");
    for (const id of ids) await page.locator(`tr[data-sandbox="${id}"][data-state=stopped]`).waitFor({ timeout: T });
    for (const id of ids) assert.equal(JSON.parse((await apiCall("GET", `/v1/sandboxes/${id}`)).text).state, "stopped");
    for (const id of ids) await page.check(`tr[data-sandbox="${id}"] input[type=checkbox]`);
    await page.click("text=Destroy selected (2)");
    await page.click("dialog [data-confirm=yes]");
    for (const id of ids) {
      await page.locator(`tr[data-sandbox="${id}"]`).waitFor({ state: "detached", timeout: T });
      assert.equal((await apiCall("GET", `/v1/sandboxes/${id}`)).status, 404);
    }
    await page.fill("input[aria-label='Filter by label']", "");
  });

  await t.test("sign out", async () => {
    await page.click("button[data-action=sign-out]");
    await page.locator("#key").waitFor({ timeout: T });
    await page.reload();
    await page.locator("#key").waitFor({ timeout: T });
  });

  await t.test("nothing tripped the Content-Security-Policy", () => {
    assert.deepEqual(b.violations, []);
  });

  await t.test("the policy refuses an inline script, and says so", async () => {
    // The check above would be empty if violations went unreported.
    await page.evaluate(() => {
      const s = document.createElement("script");
      s.textContent = "document.title = 'inline ran'";
      document.body.append(s);
    });
    const deadline = Date.now() + T;
    while (!b.violations.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.notEqual(await page.title(), "inline ran");
    assert.equal(b.violations.length, 1, "the refused inline script was not reported");
  });
});
