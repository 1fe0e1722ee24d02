// bench/web's browser half: opens the web view in headless Chromium RUNS times, each in a
// fresh page, and prints one JSON line per run: first contentful paint, the box list on
// screen (the page's `boxes-listed` mark), every box's details (status) loaded, and opening the
// box BOX (a click until its history's rows are drawn), all in ms from navigation start
// (the last from the click), and the API calls' own times for the list and the log. Arguments: URL (with #token=...), RUNS, BOX.
"use strict";
const { chromium } = require("playwright-core");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");

async function main() {
  const [url, runs, box] = [process.argv[2], Number(process.argv[3] || 5), process.argv[4]];
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "ab-bench-"));
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1440, height: 860 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  try {
    for (let i = 0; i < runs; i++) {
      const page = await browser.newPage();
      await page.goto(url);
      await page.waitForSelector("body[data-listed]", { state: "attached" });
      await page.waitForSelector("body[data-ready]", { state: "attached", timeout: 120000 });
      const t = await page.evaluate(() => {
        const get = (n) => { const e = performance.getEntriesByName(n)[0]; return e ? e.startTime : null; };
        const list = performance.getEntriesByType("resource").find((e) => e.name.includes("/api/boxes?all=true"));
        return { list_ms: list ? list.duration : null, fcp: get("first-contentful-paint"), listed: get("boxes-listed"), ready: get("boxes-ready"), boxes: document.querySelectorAll(".box").length };
      });
      const open = await page.evaluate(async (name) => {
        const t0 = performance.now();
        document.querySelector(`.box[data-box="${CSS.escape(name)}"]`).click();
        while (!document.querySelector("svg#tree .row .dot.head")) await new Promise((r) => setTimeout(r, 1));
        await new Promise((r) => requestAnimationFrame(() => r()));
        const log = performance.getEntriesByType("resource").filter((e) => e.name.includes("/log")).pop();
        return { ms: performance.now() - t0, log_ms: log ? log.duration : null, drawn: document.querySelectorAll("svg#tree .row").length, nodes: document.getElementById("tree-count").textContent };
      }, box);
      console.log(JSON.stringify({ ...t, open_ms: open.ms, log_ms: open.log_ms, rows_drawn: open.drawn, nodes: open.nodes }));
      await page.close();
    }
  } finally {
    await browser.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
}
main().then(() => process.exit(0), (e) => { console.error(e.stack || String(e)); process.exit(1); });
