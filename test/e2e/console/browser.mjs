// Shared by the console's browser tests: Debian's chromium, headless, on
// a fresh profile, and the API as the tests check it from the other side.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

export const BASE = process.env.HOTCELL_URL;
export const TOKEN = process.env.HOTCELL_TOKEN;
export const KEY = process.env.HOTCELL_KEY;
export const SHOTS = process.env.SCREENSHOTS;
export const T = 90_000; // bound on each wait (a loaded host stops containers slowly); none is a timing assertion

// launch starts chromium on a fresh profile (--user-data-dir, which
// playwright passes for a persistent context) and returns the context,
// its first page and a close function that also removes the profile.
export async function launch() {
  const profile = mkdtempSync(join(tmpdir(), "hc-chromium-"));
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 860 },
    permissions: ["clipboard-read", "clipboard-write"],
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
      "--disable-sync", "--no-first-run"],
  });
  const page = browser.pages()[0] || await browser.newPage();
  page.on("pageerror", (e) => console.log("page error:", e.message));
  // Whatever the Content-Security-Policy refuses is reported on the
  // console: the console's own pages must never trip it.
  const violations = [];
  const watch = (p) => p.on("console", (m) => {
    if (m.type() === "error") console.log("console error:", m.text());
    if (/Content Security Policy|Refused to (load|execute|apply|connect|frame)/.test(m.text()) && p.url().includes("/ui/")) violations.push(m.text());
  });
  watch(page);
  return {
    browser,
    page,
    violations,
    async close() {
      await browser.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

// apiCall checks from the API's side, with the daemon's token.
export async function apiCall(method, path, body) {
  const r = await fetch(BASE + path, {
    method,
    headers: { Authorization: "Bearer " + TOKEN, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: r.status, text: await r.text() };
}

export async function signIn(page) {
  await page.goto(BASE + "/ui/");
  await page.fill("#key", KEY);
  await page.click("button[type=submit]");
  await page.locator("h1", { hasText: "Sandboxes" }).waitFor({ timeout: T });
}
