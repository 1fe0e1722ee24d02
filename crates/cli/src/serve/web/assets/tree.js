// A box's history drawn as a tree in SVG. Layout: one row per node, newest at the top;
// a node's first child stays in its lane, each other child gets the lowest lane free
// from the row after its parent down to its own row. Rendering is virtual: only the rows
// in (and near) the scrolled view are in the DOM, so 1,000 nodes cost no more than 40.
// Every box-controlled string (command, message, tag name) goes in with textContent.
"use strict";
(function () {
  const ROW = 26, LANE = 14, PAD = 12, OVERSCAN = 10, NS = "http://www.w3.org/2000/svg";

  // nodes: [{id, parent, seq, created, command, message}], any order.
  // Returns {rows: [node], lane: Map id->lane, row: Map id->row, lanes, edges: [[p,c]]};
  // row 0 is the oldest node.
  function layout(nodes) {
    const rows = nodes.slice().sort((a, b) => (a.seq - b.seq) || (a.created < b.created ? -1 : 1));
    const row = new Map(), lane = new Map(), kids = new Map();
    rows.forEach((n, i) => { row.set(n.id, i); kids.set(n.id, []); });
    const edges = [];
    for (const n of rows) {
      if (n.parent != null && kids.has(n.parent)) { kids.get(n.parent).push(n); edges.push([n.parent, n.id]); }
    }
    const busy = []; // busy[l]: the last row lane l is reserved to
    const take = (from, to) => {
      let l = 0;
      while (l < busy.length && busy[l] >= from) l++;
      busy[l] = to;
      return l;
    };
    for (const n of rows) {
      const r = row.get(n.id);
      let l = lane.get(n.id);
      if (l === undefined) { l = take(r, r); lane.set(n.id, l); }
      const cs = kids.get(n.id);
      busy[l] = Math.max(busy[l], cs.length ? row.get(cs[0].id) : r);
      if (cs.length) lane.set(cs[0].id, l);
      for (let i = 1; i < cs.length; i++) lane.set(cs[i].id, take(r + 1, row.get(cs[i].id)));
    }
    return { rows, row, lane, kids, edges, lanes: Math.max(1, busy.length) };
  }

  function el(name, attrs, parent) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  function when(iso) {
    const d = new Date(iso);
    if (isNaN(d)) return "";
    const now = new Date();
    const hm = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
    return d.toDateString() === now.toDateString() ? hm : d.toLocaleDateString() + " " + hm;
  }

  // A tree in `svg` inside the scrolling `scroller`. marks: {head, tags: Map id->[names],
  // checkpoints: Map id->[names]}; onPick(node) on a click.
  class Tree {
    constructor(svg, scroller, onPick) {
      this.svg = svg; this.scroller = scroller; this.onPick = onPick;
      this.data = null; this.selected = null; this.frame = 0;
      scroller.addEventListener("scroll", () => this.schedule());
      window.addEventListener("resize", () => this.schedule());
    }
    set(nodes, marks) {
      this.data = layout(nodes);
      this.marks = marks;
      const n = this.data.rows.length;
      this.x0 = PAD + this.data.lanes * LANE + 8;
      this.svg.setAttribute("height", String(n * ROW + 2 * PAD));
      this.svg.setAttribute("width", "100%");
      this.draw();
    }
    y(row) { return PAD + (this.data.rows.length - 1 - row) * ROW + ROW / 2; }
    x(lane) { return PAD + lane * LANE + LANE / 2; }
    schedule() {
      if (this.frame) return;
      this.frame = requestAnimationFrame(() => { this.frame = 0; this.draw(); });
    }
    select(id) { this.selected = id; this.draw(); }
    scrollTo(id) {
      const r = this.data && this.data.row.get(id);
      if (r === undefined) return;
      const top = this.y(r) - this.scroller.clientHeight / 2;
      this.scroller.scrollTop = Math.max(0, top);
      this.draw();
    }
    draw() {
      const svg = this.svg, d = this.data;
      while (svg.firstChild) svg.removeChild(svg.firstChild);
      if (!d || !d.rows.length) return;
      const n = d.rows.length, top = this.scroller.scrollTop, h = this.scroller.clientHeight || 600;
      // Visible rows, counted from the top (newest); rows are numbered from the oldest.
      const first = Math.max(0, Math.floor((top - PAD) / ROW) - OVERSCAN);
      const last = Math.min(n - 1, Math.ceil((top + h - PAD) / ROW) + OVERSCAN);
      const hi = n - 1 - first, lo = n - 1 - last; // row range shown
      const edges = el("g", {}, svg), dots = el("g", {}, svg);
      for (const [p, c] of d.edges) {
        const rp = d.row.get(p), rc = d.row.get(c);
        if (rc < lo || rp > hi) continue;
        const xp = this.x(d.lane.get(p)), xc = this.x(d.lane.get(c)), yp = this.y(rp), yc = this.y(rc);
        const path = xp === xc ? `M${xp},${yp}V${yc}`
          : `M${xp},${yp}C${xp},${yp - ROW / 2} ${xc},${yp - ROW / 2} ${xc},${yp - ROW}V${yc}`;
        el("path", { d: path, class: "edge" }, edges);
      }
      const width = Math.max(this.scroller.clientWidth, 400);
      for (let r = lo; r <= hi; r++) {
        const node = d.rows[r], y = this.y(r), x = this.x(d.lane.get(node.id));
        const isHead = node.id === this.marks.head, isTip = d.kids.get(node.id).length === 0;
        const g = el("g", { class: "row" + (node.id === this.selected ? " sel" : ""), "data-id": node.id }, dots);
        el("rect", { class: "bg", x: 0, y: y - ROW / 2, width, height: ROW }, g);
        el("circle", { class: "dot" + (isHead ? " head" : "") + (isTip ? " tip" : ""), cx: x, cy: y, r: isHead ? 6 : 4.5 }, g);
        let tx = this.x0;
        const badge = (cls, label) => {
          const b = el("g", { class: "badge " + cls }, g);
          const t = el("text", { x: tx + 5, y: y + 4 }, null);
          t.textContent = label;
          const w = 12 + 7 * [...label].length;
          el("rect", { x: tx, y: y - 8, width: w, height: 16 }, b);
          b.appendChild(t);
          tx += w + 4;
        };
        if (isHead) badge("head", "HEAD");
        for (const t of this.marks.tags.get(node.id) || []) badge("tag", t);
        for (const c of this.marks.checkpoints.get(node.id) || []) badge("cp", "⚑ " + c);
        const label = el("text", { x: tx + 2, y: y + 4 }, g);
        const text = node.command || node.message || "(no command)";
        // Cut to the room left before the time column (about 6.6 px a character).
        const room = Math.max(8, Math.floor((width - tx - 110) / 6.6));
        label.textContent = text.length > room ? text.slice(0, room - 1) + "…" : text;
        const time = el("text", { class: "time", x: width - 8, y: y + 4, "text-anchor": "end" }, g);
        time.textContent = when(node.created);
        const title = el("title", {}, g);
        title.textContent = `${node.id}\n${node.message || ""}`;
        g.addEventListener("click", () => this.onPick(node));
      }
    }
  }
  window.AbTree = { layout, Tree, when };
})();
