// Drives the web view of `agentbox serve` in headless Chromium (Playwright), for
// serve::web. Arguments: the address serve printed (with #token=...), then the JSON of
// what the test made: {boxes: [names], box, marked: {id, path}, changed: {id, path, line},
// back: id}. It prints `need-node` when it waits for the test to make a node in `box`
// from the command line, and reads that node's id on stdin. Exits non-zero on a failed
// check. With SHOTS=DIR it saves screenshots of the main views there.
"use strict";
// playwright-core is found through NODE_PATH (the test sets it to `npm root -g`).
const { chromium } = require("playwright-core");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const readline = require("node:readline");

const [url, spec] = process.argv.slice(2);
const want = JSON.parse(spec);
const shots = process.env.SHOTS;
const HANG = 120000; // a guard against hanging, not a measurement
const fail = (why) => { console.error("FAILED: " + why); process.exit(1); };
const check = (ok, why) => { if (!ok) fail(why); };

async function main() {
const profile = fs.mkdtempSync(path.join(os.tmpdir(), "ab-chromium-"));
// A fresh profile (Playwright passes it as --user-data-dir).
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1440, height: 860 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
try {
  const page = browser.pages()[0] || await browser.newPage();
  page.setDefaultTimeout(HANG);
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("dialog", (d) => { errors.push("a dialog opened: " + d.message()); d.dismiss(); });

  // Without the token: the page asks for it and shows no box.
  const bare = url.split("#")[0];
  await page.goto(bare);
  await page.waitForSelector("#login:not([hidden])");
  check((await page.locator(".box").count()) === 0, "boxes shown without the token");

  // With it (opened from another page, as a click on the printed address does): the
  // token leaves the address bar, and both boxes are listed.
  await page.goto("about:blank");
  await page.goto(url);
  await page.waitForSelector("body[data-listed]", { state: "attached" });
  check(!page.url().includes("token"), "the token stayed in the address: " + page.url());
  for (const b of want.boxes) await page.waitForSelector(`.box[data-box="${b}"]`);
  check((await page.locator(".box").count()) >= 2, "two boxes listed");
  await page.waitForSelector("#live:not(.off)");
  // Branch, ahead/behind and processes arrive after the first paint.
  await page.waitForSelector(`.box[data-box="${want.box}"] .procs`);
  if (shots) await page.screenshot({ path: path.join(shots, "web-boxes.png") });

  // Open the box: its history as a tree, HEAD marked.
  await page.click(`.box[data-box="${want.box}"]`);
  await page.waitForSelector("svg#tree .row .dot.head");
  const rows = await page.locator("svg#tree .row").count();
  check(rows === want.nodes, `${rows} rows drawn, ${want.nodes} nodes`);

  // A node whose file name is HTML: shown as text, never run or parsed.
  await page.click(`svg#tree .row[data-id="${want.marked.id}"]`);
  const shown = page.locator("#changes li .path", { hasText: want.marked.path });
  await shown.first().waitFor();
  check((await shown.first().textContent()) === want.marked.path, "the HTML file name is shown as its text");
  check((await page.locator("#changes img, #changes script, #node-info img, svg#tree img").count()) === 0,
    "box text became elements");
  check((await page.evaluate(() => window.__pwned)) === undefined, "box text ran as script");

  // A node's diff.
  await page.click(`svg#tree .row[data-id="${want.changed.id}"]`);
  await page.locator("#changes li .path", { hasText: want.changed.path }).first().click();
  await page.locator("#patch .add", { hasText: want.changed.line }).first().waitFor();
  if (shots) await page.screenshot({ path: path.join(shots, "web-history.png") });

  // Roll back: check out an older node, after the confirmation.
  await page.click(`svg#tree .row[data-id="${want.back}"]`);
  await page.click("#act-checkout");
  await page.waitForSelector("dialog#confirm[open]");
  await page.click("#confirm-ok");
  await page.waitForSelector(`svg#tree .row[data-id="${want.back}"] .dot.head`);

  // A command in the box makes a node: the page shows it without a reload.
  console.log("need-node");
  const made = (await lines.next()).value.trim();
  await page.waitForSelector(`svg#tree .row[data-id="${made}"] .dot.head`);
  // It is a sibling of an older node (both children of the node checked out): a branch,
  // drawn in a lane of its own.
  const cx = (id) => page.locator(`svg#tree .row[data-id="${id}"] circle`).getAttribute("cx");
  check((await cx(made)) !== (await cx(want.changed.id)), "two branches drawn in one lane");
  await page.click(`svg#tree .row[data-id="${made}"]`);
  await page.locator("#changes li .path", { hasText: "live.txt" }).first().waitFor();
  if (shots) await page.screenshot({ path: path.join(shots, "web-live.png") });

  // The token is in the page's memory only: no storage of the tab holds it, and a reload
  // forgets it and asks for the address serve printed.
  const token = new URLSearchParams(url.split("#")[1]).get("token");
  const stored = await page.evaluate(() => JSON.stringify([Object.entries(sessionStorage), Object.entries(localStorage)]));
  check(!stored.includes(token), "the token is in the tab's storage: " + stored);
  await page.reload();
  await page.waitForSelector("#login:not([hidden])");
  check((await page.textContent("#login")).includes("memory only"), "the reload says why the token is asked for");
  check((await page.locator(".box").count()) === 0, "boxes shown after a reload");

  // A server on this port that cannot prove it holds the token (a squatter's answer, made
  // here by intercepting /api/hello) is sent no request with the token, and the page stops.
  const sent = [];
  page.on("request", (r) => { if (r.headers()["authorization"]) sent.push(r.url()); });
  await page.route("**/api/hello?*", (route) => route.fulfill({
    status: 200, contentType: "application/json", body: JSON.stringify({ proof: "0".repeat(64), port: 0 }),
  }));
  await page.goto("about:blank");
  await page.goto(url);
  await page.waitForSelector("#stopped:not([hidden])");
  check((await page.textContent("#stopped")).includes("not the agentbox serve that issued"), "the page says why it stopped");
  await page.waitForTimeout(2500); // past a reconnection's delay: still nothing sent
  check(sent.length === 0, "the token was sent to an unproven server: " + sent.join(", "));
  await page.unroute("**/api/hello?*");

  check(errors.length === 0, "page errors: " + errors.join("; "));
  console.log("ok");
} finally {
  await browser.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
}
main().then(() => process.exit(0), (e) => fail(e.stack || String(e)));
