// The web view of `agentbox serve`: boxes, a box's history as a tree, a node's changes,
// actions, processes and live updates. It holds no orchestration: every action is one
// call of the JSON API. Text from a box (names, paths, commands, diffs, output) is only
// ever inserted with textContent, never as HTML.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  // Left by earlier versions, which kept the token in the tab's storage: dropped.
  try { sessionStorage.removeItem("agentbox-token"); } catch (_) { /* no storage */ }

  // The token: from the URL fragment, read once and then removed from the address bar (and
  // from the history entry), kept in this variable only. Never in sessionStorage or
  // localStorage: a box on the host's network can listen on this port while serve is down,
  // and a page it serves here would be same-origin and read them. A reload forgets it.
  const frag = new URLSearchParams(location.hash.slice(1));
  let token = frag.get("token") || null;
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);

  // Whether the server answering on this port proved it holds the token (`/api/hello`):
  // asked before the first request that carries it, and again after every break (the
  // event stream ended, a request failed to connect), so that the token is never sent to
  // whatever listens on the port after the real server went away. `stopped` when a proof
  // failed: the page sends nothing more.
  let proven = null, stopped = false;
  const hex = (buf) => Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, "0")).join("");
  class Impostor extends Error {}
  async function prove() {
    if (!window.crypto || !crypto.subtle) {
      throw new Impostor("this page cannot check the server's proof here (WebCrypto needs a loopback or https address); open it on 127.0.0.1 (e.g. through an SSH tunnel)");
    }
    const nonce = hex(crypto.getRandomValues(new Uint8Array(32)));
    const port = location.port || (location.protocol === "https:" ? "443" : "80");
    let r;
    try {
      r = await fetch("/api/hello?nonce=" + nonce, { cache: "no-store", credentials: "omit" });
    } catch (e) { throw new Error("the server is not answering"); }
    let data = null;
    try { data = await r.json(); } catch (_) { /* not JSON */ }
    const enc = new TextEncoder();
    const key = await crypto.subtle.importKey("raw", enc.encode(token), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    const want = hex(await crypto.subtle.sign("HMAC", key, enc.encode("agentbox-serve:" + port + ":" + nonce)));
    if (!r.ok || !data || data.proof !== want) {
      throw new Impostor("the server on this port is not the agentbox serve that issued this page's link: it could not prove it holds the token, so the token was not sent. Stop whatever listens here, restart `agentbox serve`, and open the address it prints.");
    }
  }
  // Resolves once the server is proven; one proof at a time, shared by every caller.
  function ensureProven() {
    if (stopped) return Promise.reject(new Impostor("stopped"));
    if (!proven) {
      proven = prove().catch((e) => {
        proven = null;
        if (e instanceof Impostor) stop(e.message);
        throw e;
      });
    }
    return proven;
  }
  function unproven() { proven = null; }
  function stop(why) {
    stopped = true;
    token = null;
    $("stopped-text").textContent = why;
    $("stopped").hidden = false;
    $("login").hidden = true;
    $("main").hidden = true;
    $("live").textContent = "stopped";
    $("live").className = "live off";
  }
  // The address pasted into a tab already open on the page changes only its fragment: a
  // reload reads the token from it afresh.
  window.addEventListener("hashchange", () => {
    if (new URLSearchParams(location.hash.slice(1)).get("token")) location.reload();
  });

  function notice(text, bad) {
    const n = $("notice");
    n.textContent = text;
    n.className = bad ? "err" : "";
  }

  class ApiError extends Error {}
  async function api(path, opts) {
    opts = opts || {};
    await ensureProven();
    const headers = { Authorization: "Bearer " + token };
    if (opts.body !== undefined) headers["Content-Type"] = "application/json";
    let r;
    try {
      r = await fetch(path, {
        method: opts.method || "GET", headers,
        body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      });
    } catch (e) { unproven(); throw new ApiError("the server is not answering"); }
    let data = null;
    try { data = await r.json(); } catch (_) { /* not JSON */ }
    if (r.status === 401) { showLogin(); throw new ApiError("the API token was refused"); }
    if (!r.ok) {
      const msg = data && data.error ? data.error + (data.hint ? " (" + data.hint + ")" : "") : "HTTP " + r.status;
      throw new ApiError(msg);
    }
    return data;
  }
  const enc = encodeURIComponent;

  function showLogin() {
    $("login").hidden = false;
    $("main").hidden = true;
  }
  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    token = $("login-token").value.trim();
    unproven();
    $("login").hidden = true;
    $("main").hidden = false;
    start();
  });

  function make(tag, cls, text, parent) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (parent) parent.appendChild(e);
    return e;
  }

  function bytes(n) {
    if (n == null) return "";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + " " + u[i];
  }

  // ---- state ----
  const S = {
    boxes: new Map(),     // name -> listed row
    status: new Map(),    // name -> status answer (`box`), loaded lazily
    checkpoints: [],
    current: null,        // selected box name
    log: null,            // its history
    node: null,           // selected node
    proc: null,           // selected process id (live log)
  };
  const tree = new window.AbTree.Tree($("tree"), $("tree-scroll"), (n) => pickNode(n));

  // ---- the box list ----
  let showListed;
  const listed = new Promise((r) => { showListed = r; });
  function project(row) {
    return (row.box && row.box.project) || row.source || "(directories)";
  }
  function renderBoxes() {
    const list = $("box-list");
    list.replaceChildren();
    const groups = new Map();
    for (const row of S.boxes.values()) {
      const p = project(row);
      if (!groups.has(p)) groups.set(p, []);
      groups.get(p).push(row);
    }
    for (const [p, rows] of [...groups].sort((a, b) => a[0].localeCompare(b[0]))) {
      make("div", "project", p, list).title = p;
      for (const row of rows.sort((a, b) => a.name.localeCompare(b.name))) list.appendChild(boxCard(row));
    }
    if (!S.boxes.size) make("div", "hint", "No boxes yet: `agentbox create` in a project makes one.", list);
  }
  function boxCard(row) {
    const c = make("div", "box" + (row.name === S.current ? " sel" : ""));
    c.dataset.box = row.name;
    const top = make("div", "", null, c);
    make("span", "name", row.name, top);
    make("span", "state " + row.state, row.state, top);
    const meta = make("div", "meta", null, c);
    const st = S.status.get(row.name);
    const br = st && st.branches && st.branches[0];
    const repo = row.box && row.box.repos && row.box.repos[0];
    if (br) {
      make("span", "branch", br.branch, meta);
      make("span", "ab", `↑${br.ahead} ↓${br.behind} ${br.against || ""}`, meta).title = "ahead / behind the host's branch";
      if (br.dirty && br.dirty.length) make("span", "dirty", br.dirty.length + " uncommitted", meta);
    } else if (repo) {
      make("span", "branch", repo.branch, meta);
    }
    if (st) {
      make("span", "procs", st.processes + " proc", meta).title = "processes running";
      const used = (st.scratch || []).reduce((a, s) => a + (s.used_bytes || 0), 0);
      make("span", "disk", bytes(used) + " scratch, " + st.changed + " changed", meta).title = "scratch space used; files changed since HEAD";
    } else if (row.kind !== "box") {
      make("span", "", "versioned directory", meta);
    }
    c.addEventListener("click", () => selectBox(row.name));
    return c;
  }
  function updateCard(name) {
    const old = document.querySelector(`.box[data-box="${CSS.escape(name)}"]`);
    const row = S.boxes.get(name);
    if (old && row) old.replaceWith(boxCard(row));
  }

  async function loadBoxes() {
    const rows = await api("/api/boxes?all=true");
    S.boxes = new Map(rows.map((r) => [r.name, r]));
    renderBoxes();
    showListed();
    if (!document.body.dataset.listed) {
      // What bench/web measures: the box list on screen.
      document.body.dataset.listed = String(rows.length);
      performance.mark("boxes-listed");
    }
    // The details (branches, processes, disk) come after the first paint, a few at a time.
    const names = rows.filter((r) => r.kind === "box").map((r) => r.name);
    const worker = async () => {
      while (names.length) await loadStatus(names.shift());
    };
    await Promise.all([worker(), worker(), worker()]);
  }
  async function loadStatus(name) {
    try {
      const st = await api("/api/boxes/" + enc(name));
      S.status.set(name, st.box);
      updateCard(name);
      if (name === S.current) renderFacts();
    } catch (e) { /* a box being destroyed: its card goes with the next event */ }
  }
  async function loadCheckpoints() {
    try { S.checkpoints = await api("/api/checkpoints?all=true"); } catch (_) { S.checkpoints = []; }
  }

  // ---- one box ----
  function renderFacts() {
    const f = $("box-facts");
    f.replaceChildren();
    const row = S.boxes.get(S.current), st = S.status.get(S.current);
    if (!row) return;
    make("span", "state " + row.state, row.state, f);
    if (st && st.branches) for (const b of st.branches) make("span", "", `${b.branch}: ↑${b.ahead} ↓${b.behind} against ${b.against || "?"}`, f);
    if (st) make("span", "", st.processes + " processes", f);
    if (S.log) make("span", "", "HEAD " + S.log.head.slice(0, 12), f);
    const isBox = row.kind === "box";
    for (const id of ["act-undo", "act-fork", "act-checkpoint"]) $(id).disabled = !isBox;
    $("act-checkout").disabled = !S.node || (S.log && S.node.id === S.log.head);
  }

  async function selectBox(name) {
    S.current = name; S.node = null; S.proc = null;
    document.querySelectorAll(".box.sel").forEach((e) => e.classList.remove("sel"));
    const card = document.querySelector(`.box[data-box="${CSS.escape(name)}"]`);
    if (card) card.classList.add("sel");
    $("empty").hidden = true;
    $("box-view").hidden = false;
    $("box-title").textContent = name;
    clearNode();
    await loadHistory(true);
    loadProcs();
  }

  async function loadHistory(scroll) {
    const name = S.current;
    const log = await api("/api/boxes/" + enc(name) + "/log");
    if (name !== S.current) return;
    S.log = log;
    const tags = new Map();
    for (const [t, id] of Object.entries(log.tags || {})) {
      if (!tags.has(id)) tags.set(id, []);
      tags.get(id).push(t);
    }
    // A checkpoint's own node is a cleaned copy outside the box's history; the box records
    // the capture as a node of its own, `checkpoint NAME`, which is the one marked.
    const cps = new Map(), ids = new Set(log.nodes.map((n) => n.id));
    const byMessage = new Map(log.nodes.map((n) => [n.message, n.id]));
    for (const c of S.checkpoints) {
      if (c.source_box !== name) continue;
      const at = ids.has(c.node) ? c.node : byMessage.get("checkpoint " + c.name);
      if (!at) continue;
      if (!cps.has(at)) cps.set(at, []);
      cps.get(at).push(c.name);
    }
    tree.set(log.nodes, { head: log.head, tags, checkpoints: cps });
    if (S.node) tree.select(S.node.id);
    $("tree-count").textContent = log.nodes.length + " nodes";
    if (scroll) tree.scrollTo(log.head);
    renderFacts();
  }

  function clearNode() {
    $("node-info").replaceChildren();
    $("node-info").className = "hint";
    $("node-info").textContent = "Click a node to see what it changed.";
    $("changes").replaceChildren();
    $("patch").replaceChildren();
  }

  async function pickNode(node) {
    S.node = node;
    tree.select(node.id);
    renderFacts();
    const info = $("node-info");
    info.className = "";
    info.replaceChildren();
    make("div", "cmd", node.command || node.message, info);
    make("div", "hint-line", `${node.id} · ${window.AbTree.when(node.created)}` + (node.id === S.log.head ? " · HEAD" : ""), info);
    $("changes").replaceChildren();
    $("patch").replaceChildren();
    const shown = await api(`/api/boxes/${enc(S.current)}/nodes/${enc(node.id)}`);
    if (S.node !== node) return;
    let patches = new Map();
    if (node.parent) {
      try {
        const d = await api(`/api/boxes/${enc(S.current)}/diff?from=${enc(node.parent)}&to=${enc(node.id)}&patch=true`);
        patches = new Map(d.map((c) => [c.path, c.patch]));
      } catch (e) { notice("diff: " + e.message, true); }
    }
    if (S.node !== node) return;
    const ul = $("changes");
    if (!shown.changes.length) make("li", "", "(no changes)", ul);
    // A node that made a whole tree lists thousands of paths: the first ones are enough.
    const MAX = 500;
    if (shown.changes.length > MAX) make("li", "more", `(${shown.changes.length} changes; the first ${MAX} listed)`, ul);
    for (const c of shown.changes.slice(0, MAX)) {
      const li = make("li", c.kind, null, ul);
      make("span", "kind", { added: "+", removed: "−", modified: "~" }[c.kind] || "?", li);
      make("span", "path", c.path, li);
      if (c.detail) make("span", "detail", "  " + c.detail, li);
      li.addEventListener("click", () => {
        ul.querySelectorAll(".sel").forEach((e) => e.classList.remove("sel"));
        li.classList.add("sel");
        showPatch(patches.get(c.path), c);
      });
    }
    const first = ul.querySelector("li." + ["modified", "added", "removed"].find((k) => ul.querySelector("li." + k)));
    if (first) first.click();
  }

  function showPatch(patch, change) {
    const pre = $("patch");
    pre.replaceChildren();
    if (patch == null) {
      make("span", "", `(no text difference to show for ${change.path}: binary, too large, or not a file)`, pre);
      return;
    }
    for (const line of patch.split("\n")) {
      const cls = line.startsWith("@@") ? "hunk" : line.startsWith("+") && !line.startsWith("+++") ? "add"
        : line.startsWith("-") && !line.startsWith("---") ? "del" : "";
      make("span", "ln " + cls, line, pre);
    }
  }

  // ---- actions: each one call, after a confirmation ----
  function confirmAction(text, withName) {
    return new Promise((resolve) => {
      const d = $("confirm");
      $("confirm-text").textContent = text;
      $("confirm-extra").hidden = !withName;
      $("confirm-name").value = "";
      d.returnValue = "";
      d.addEventListener("close", () => resolve(d.returnValue === "ok" ? { name: $("confirm-name").value.trim() } : null), { once: true });
      d.showModal();
    });
  }
  async function act(fn, done) {
    try {
      const r = await fn();
      notice(done(r));
      await loadHistory(true);
      loadStatus(S.current);
    } catch (e) { notice(e.message, true); }
  }
  $("act-checkout").addEventListener("click", async () => {
    const n = S.node;
    if (!n) return;
    if (!(await confirmAction(`Check out node ${n.id.slice(0, 12)} in ${S.current}? Its processes are killed and its working tree becomes that node's.`))) return;
    act(() => api(`/api/boxes/${enc(S.current)}/checkout`, { method: "POST", body: { reference: n.id } }),
      (r) => `checked out ${r.id.slice(0, 12)}` + (r.killed ? `, ${r.killed} processes killed` : ""));
  });
  $("act-undo").addEventListener("click", async () => {
    if (!(await confirmAction(`Undo in ${S.current}: move it to HEAD's parent? Its processes are killed.`))) return;
    act(() => api(`/api/boxes/${enc(S.current)}/undo`, { method: "POST" }), (r) => `undone: HEAD is ${r.id.slice(0, 12)}`);
  });
  $("act-fork").addEventListener("click", async () => {
    const at = S.node ? S.node.id : null;
    const ok = await confirmAction(`Fork ${S.current} at ${at ? at.slice(0, 12) : "HEAD"} into a new box? (name optional)`, true);
    if (!ok) return;
    const body = {};
    if (ok.name) body.name = ok.name;
    if (at) body.at = at;
    act(() => api(`/api/boxes/${enc(S.current)}/fork`, { method: "POST", body }), (r) => `forked into ${r.name}`);
  });
  $("act-checkpoint").addEventListener("click", async () => {
    const ok = await confirmAction(`Capture ${S.current} as a checkpoint of its project? (name optional)`, true);
    if (!ok) return;
    const body = {};
    if (ok.name) body.name = ok.name;
    act(async () => { const r = await api(`/api/boxes/${enc(S.current)}/checkpoints`, { method: "POST", body }); await loadCheckpoints(); return r; },
      (r) => `checkpoint ${r.name || ""} made`);
  });

  // ---- processes and a live, read-only view of one's output ----
  async function loadProcs() {
    const ul = $("proc-list");
    const name = S.current;
    let ps = [];
    try { ps = await api(`/api/boxes/${enc(name)}/processes`); } catch (_) { /* stopped */ }
    if (name !== S.current) return;
    ul.replaceChildren();
    $("procs").querySelector("summary").textContent = `Processes (${ps.filter((p) => !p.exit).length} running)`;
    for (const p of ps) {
      const li = make("li", p.id === S.proc ? "sel" : "", `${p.exit ? "ended " + p.exit.status : "running"} · pid ${p.pid} · ${p.argv.join(" ")}`, ul);
      li.addEventListener("click", () => followLog(p.id));
    }
    if (!ps.length) make("li", "", "(none)", ul);
  }
  let following = 0;
  async function followLog(id) {
    S.proc = id;
    const mine = ++following, name = S.current, pre = $("proc-log");
    pre.replaceChildren();
    let offset = 0;
    while (mine === following && name === S.current) {
      try {
        const part = await api(`/api/boxes/${enc(name)}/processes/${id}/log?offset=${offset}`);
        if (part.text) {
          const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
          pre.appendChild(document.createTextNode(part.text));
          if (atEnd) pre.scrollTop = pre.scrollHeight;
        }
        if (part.next > offset) { offset = part.next; continue; }
      } catch (e) { make("span", "", "\n(" + e.message + ")", pre); return; }
      await new Promise((r) => setTimeout(r, 1000));
    }
  }

  // ---- live updates: the event stream, read with fetch so the token stays in a header ----
  // The list again, redrawn only if a box came, went, or moved since it was last read.
  async function refreshList() {
    const rows = await api("/api/boxes?all=true");
    const moved = rows.length !== S.boxes.size || rows.some((r) => {
      const o = S.boxes.get(r.name);
      return !o || o.state !== r.state || o.head !== r.head;
    });
    if (!moved) return;
    S.boxes = new Map(rows.map((r) => [r.name, r]));
    renderBoxes();
    for (const r of rows) if (r.kind === "box") loadStatus(r.name);
    if (S.current && S.log && S.boxes.has(S.current) && S.boxes.get(S.current).head !== S.log.head) loadHistory(false);
  }

  async function stream() {
    for (;;) {
      try {
        // The server proves it holds the token before every (re)connection.
        await ensureProven();
        const r = await fetch("/api/events", { headers: { Authorization: "Bearer " + token, Accept: "text/event-stream" } });
        if (r.status === 401) { showLogin(); return; }
        if (!r.ok || !r.body) throw new Error("HTTP " + r.status);
        $("live").textContent = "live";
        $("live").className = "live";
        refreshList().catch((x) => notice(x.message, true));
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let i;
          while ((i = buf.indexOf("\n\n")) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            let name = "message", data = "";
            for (const line of block.split("\n")) {
              if (line.startsWith("event:")) name = line.slice(6).trim();
              else if (line.startsWith("data:")) data += line.slice(5).replace(/^ /, "");
            }
            if (data) onEvent(name, data);
          }
        }
      } catch (_) { /* reconnect below */ }
      // A break: whatever answers next on this port proves itself first.
      unproven();
      if (stopped) return;
      $("live").textContent = "reconnecting…";
      $("live").className = "live off";
      await new Promise((r) => setTimeout(r, 2000));
    }
  }
  let boxesTimer = 0;
  function onEvent(name, data) {
    let e;
    try { e = JSON.parse(data); } catch (_) { return; }
    const box = e.box;
    if (name === "created" || name === "destroyed") {
      clearTimeout(boxesTimer);
      boxesTimer = setTimeout(() => loadBoxes().catch((x) => notice(x.message, true)), 200);
      if (name === "destroyed" && box === S.current) { S.current = null; $("box-view").hidden = true; $("empty").hidden = false; }
    } else if (name === "state") {
      const row = S.boxes.get(box);
      if (row) { row.state = e.to; updateCard(box); }
      if (box === S.current) renderFacts();
    } else if (name === "node" || name === "head") {
      const row = S.boxes.get(box);
      if (row && name === "head") row.head = e.node;
      if (name === "node") notice(`${box}: new node ${e.id.slice(0, 12)}: ${e.command || e.message}`);
      if (box === S.current) { loadHistory(false); loadProcs(); }
      loadStatus(box);
    }
  }

  async function start() {
    if (!token) { showLogin(); return; }
    try {
      await ensureProven();
      // The box list first, alone: the event stream's start (which reads every box's
      // history for its baseline) and the checkpoints (which only mark nodes in a tree
      // opened later) would slow its answer down. The stream reloads the list when it
      // connects, so nothing made in between is missed.
      const loading = loadBoxes();
      await Promise.race([listed, loading]); // a failed list rejects here
      const marks = loadCheckpoints();
      stream();
      await loading;
      await marks;
      performance.mark("boxes-ready");
      document.body.dataset.ready = "1";
    } catch (e) { notice(e.message, true); }
  }
  start();
})();
