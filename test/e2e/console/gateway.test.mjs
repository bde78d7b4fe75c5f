// The Gateway tab: a sandbox's LLM gateway use against its provider's
// budget. Run by TestConsoleBrowserGateway, which made one call through
// provider "limited" (budget: 2 requests) from HOTCELL_SANDBOX.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { BASE, SHOTS, T, launch, apiCall, signIn } from "./browser.mjs";

const ID = process.env.HOTCELL_SANDBOX;
let b;

before(async () => { b = await launch(); });
after(async () => { if (b) await b.close(); });

test("gateway usage against the budget", async () => {
  const { page } = b;
  await signIn(page);
  await page.goto(`${BASE}/ui/#/sandboxes/${ID}/gateway`);
  const row = page.locator("tr", { hasText: "limited" });
  await row.waitFor({ timeout: T });
  const usage = JSON.parse((await apiCall("GET", `/v1/sandboxes/${ID}/usage`)).text).providers.find((p) => p.provider === "limited");
  assert.equal(usage.requests, 1);
  assert.equal(usage.budget.requests, 2);
  const cells = await row.locator("td").allInnerTexts();
  assert.equal(cells[0], "limited");
  assert.equal(cells[1].trim(), "1 / 2", `requests cell: ${cells}`);
  assert.equal(await row.locator("meter").first().getAttribute("value"), "1");
  await page.screenshot({ path: join(SHOTS, "gateway.png") });
});
