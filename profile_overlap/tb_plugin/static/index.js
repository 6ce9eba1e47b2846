// The Overlap tab. TensorBoard loads this module in an iframe (base href: the plugin's routes)
// and calls render(). It reads the run's metrics.json and timeline.json through the plugin's
// routes and draws them; it computes no metric (renderers never recompute) and requests nothing
// outside this TensorBoard server.

const COLORS = { compute: "#4e79a7", comm: "#f28e2b", overlap: "#59a14f" };
const LANES = ["compute", "comm", "overlap"];
// Spans asked of the server per rank and kind (it merges beyond this and says so): about
// 2^17 per kind in all, so that 64 ranks stay smooth; never fewer than 256 per rank.
const maxSpans = (worldSize) => Math.max(256, Math.min(4096, Math.floor(131072 / (worldSize || 1))));
const LABEL_W = 64; // px left of the lanes, for rank names
const AXIS_H = 22;
const MODE_TITLES = {
  sequential: "sequential: all_reduce, then Adam, then forward",
  split: "split: reduce_scatter, Adam on the 1/N shard, all_gather overlapped with forward",
  trace: "trace: analyze DIR --tensorboard",
};

// ------------------------------------------------------------------ small helpers

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c != null) node.append(c);
  return node;
}

async function getJSON(url) {
  const resp = await fetch(url);
  const body = await resp.json();
  if (!resp.ok) throw new Error(body.error || `${url}: HTTP ${resp.status}`);
  return body;
}

// Record values exactly as stored (the record keeps 3 decimals for µs, 4 for GB/s).
const exact = (x) => (x == null ? "–" : x.toLocaleString("en-US", { maximumFractionDigits: 6 }));
const fixed = (x, d) => (x == null ? "–" : x.toFixed(d));

function bytes(n) {
  if (n == null) return "–";
  for (const [unit, size] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) {
    if (n >= size) return `${(n / size).toFixed(2)} ${unit} (${n.toLocaleString("en-US")} B)`;
  }
  return `${n} B`;
}

function ms(us) {
  return Math.abs(us) >= 1000 ? `${(us / 1000).toFixed(3)} ms` : `${us.toFixed(1)} µs`;
}

function table(headers, rows, rowClass = () => "") {
  const t = el("table", { class: "po-table" });
  t.append(el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", { text: h })))));
  const body = el("tbody");
  rows.forEach((cells, i) => {
    const tr = el("tr", { class: rowClass(i) });
    for (const c of cells) tr.append(c instanceof Node ? el("td", {}, c) : el("td", { text: String(c) }));
    body.append(tr);
  });
  t.append(body);
  return t;
}

// The collective a comm span belongs to, by its label ("split/all_gather",
// "ncclDevKernel_AllGather_RING_LL"): used only to show that rank's recorded totals on hover.
function collectiveFor(label, collectives) {
  const key = label.toLowerCase().replace(/_/g, "");
  const found = (collectives || []).filter((c) => key.includes(c.kind.replace(/_/g, "")));
  return found.sort((a, b) => b.kind.length - a.kind.length)[0] || null;
}

// ------------------------------------------------------------------ timeline data

// Lanes of one rank as sorted typed arrays; the overlap lane is where the drawn comm and
// compute spans intersect (geometry for display; the overlap numbers are the record's).
function prepareRank(rank) {
  const byKind = { comm: [], compute: [] };
  for (const s of rank.spans) byKind[s[3]]?.push(s);
  const lanes = {};
  for (const kind of ["comm", "compute"]) {
    const spans = byKind[kind].sort((a, b) => a[1] - b[1]);
    lanes[kind] = laneOf(spans);
  }
  const a = union(lanes.comm), b = union(lanes.compute);
  const os = [], oe = [];
  for (let i = 0, j = 0; i < a.length && j < b.length;) {
    const lo = Math.max(a[i][0], b[j][0]), hi = Math.min(a[i][1], b[j][1]);
    if (hi > lo) { os.push(lo); oe.push(hi); }
    if (a[i][1] < b[j][1]) i++; else j++;
  }
  lanes.overlap = laneOf(os.map((s, i) => [null, s, oe[i], "overlap", ""]));
  return { rank: rank.rank, steps: rank.steps, lanes };
}

// A lane: spans sorted by start, plus the running maximum of their ends, so that both "first
// span ending after t" and "last span starting before t" are binary searches.
function laneOf(spans) {
  const end = Float64Array.from(spans, (s) => s[2]);
  const endMax = Float64Array.from(end);
  for (let i = 1; i < endMax.length; i++) endMax[i] = Math.max(endMax[i], endMax[i - 1]);
  return { start: Float64Array.from(spans, (s) => s[1]), end, endMax, step: spans.map((s) => s[0]), label: spans.map((s) => s[4]) };
}

function union(lane) {
  const out = [];
  for (let i = 0; i < lane.start.length; i++) {
    const last = out[out.length - 1];
    if (last && lane.start[i] <= last[1]) last[1] = Math.max(last[1], lane.end[i]);
    else out.push([lane.start[i], lane.end[i]]);
  }
  return out;
}

// First index whose (running maximum) end is >= t.
function firstEnding(lane, t) {
  let lo = 0, hi = lane.start.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (lane.endMax[mid] < t) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// First index whose start is > t.
function firstStartAfter(lane, t) {
  let lo = 0, hi = lane.start.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (lane.start[mid] <= t) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// ------------------------------------------------------------------ one timeline panel

class Timeline {
  constructor(mode, reply, analysis, slowest) {
    this.mode = mode;
    this.analysis = analysis;
    this.ranks = reply.ranks.map(prepareRank);
    this.t0 = Infinity; this.t1 = -Infinity;
    for (const r of reply.ranks) {
      for (const s of r.steps) { this.t0 = Math.min(this.t0, s.start_us); this.t1 = Math.max(this.t1, s.start_us + s.step_us); }
      for (const s of r.spans) { this.t0 = Math.min(this.t0, s[1]); this.t1 = Math.max(this.t1, s[2]); }
    }
    this.view = [this.t0, this.t1];
    this.numSpans = reply.ranks.reduce((n, r) => n + r.spans.length, 0);
    const ranks = this.ranks.length;
    this.laneH = ranks <= 4 ? 14 : ranks <= 16 ? 7 : 3;
    this.groupH = 3 * this.laneH + (ranks <= 16 ? 6 : 2);
    this.slowest = slowest;

    this.canvas = el("canvas", { class: "po-canvas", "data-mode": mode });
    this.tip = el("div", { class: "po-tip" });
    this.note = el("div", { class: "po-note" });
    const serverNote = reply.num_spans_served < reply.num_spans_in_file
      ? `Server merged ${reply.num_spans_in_file.toLocaleString("en-US")} spans into ${reply.num_spans_served.toLocaleString("en-US")} (at most ${reply.max_spans} per rank and kind; the largest gaps kept). `
      : "";
    this.serverNote = serverNote;
    const reset = el("button", { class: "po-button", text: "reset zoom" });
    reset.onclick = () => { this.view = [this.t0, this.t1]; this.schedule(); };
    this.node = el("section", { class: "po-panel" },
      el("h3", { text: MODE_TITLES[mode] || mode }),
      el("div", { class: "po-legend" },
        ...LANES.map((k) => el("span", {}, el("i", { style: `background:${COLORS[k]}` }), k)),
        el("span", { class: "po-hint", text: "wheel: zoom · drag: pan · double-click: reset" }), reset),
      el("div", { class: "po-canvas-wrap" }, this.canvas, this.tip),
      this.note);
    this.bind();
  }

  bind() {
    const c = this.canvas;
    c.addEventListener("wheel", (e) => {
      e.preventDefault();
      const t = this.timeAt(e.offsetX);
      const f = Math.exp(e.deltaY * 0.002);
      const [a, b] = this.view;
      const span = Math.max((b - a) * f, 1);
      const frac = (t - a) / (b - a);
      this.view = [t - frac * span, t - frac * span + span];
      this.schedule();
    }, { passive: false });
    c.addEventListener("mousedown", (e) => { this.drag = { x: e.offsetX, view: [...this.view] }; });
    window.addEventListener("mouseup", () => { this.drag = null; });
    c.addEventListener("mousemove", (e) => {
      if (this.drag) {
        const dt = (e.offsetX - this.drag.x) / this.plotW() * (this.drag.view[1] - this.drag.view[0]);
        this.view = [this.drag.view[0] - dt, this.drag.view[1] - dt];
        this.schedule();
      }
      this.hover(e.offsetX, e.offsetY);
    });
    c.addEventListener("mouseleave", () => { this.tip.style.display = "none"; });
    c.addEventListener("dblclick", () => { this.view = [this.t0, this.t1]; this.schedule(); });
  }

  // The canvas width is read once per draw: reading layout inside the loop would force reflows.
  plotW() { return Math.max(this.width - LABEL_W - 8, 50); }
  timeAt(x) { return this.view[0] + (x - LABEL_W) / this.plotW() * (this.view[1] - this.view[0]); }
  xOf(t) { return LABEL_W + (t - this.view[0]) / (this.view[1] - this.view[0]) * this.plotW(); }

  schedule() {
    if (this.pending) return;
    this.pending = requestAnimationFrame(() => { this.pending = null; this.draw(); });
  }

  draw() {
    const c = this.canvas, dpr = window.devicePixelRatio || 1;
    const height = AXIS_H + this.ranks.length * this.groupH + 4;
    if (c.style.height !== `${height}px`) c.style.height = `${height}px`;
    const width = this.width = c.clientWidth;
    const began = performance.now(); // after the layout read: what follows is this panel's own work
    c.width = Math.round(width * dpr); c.height = Math.round(height * dpr);
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, width, height);
    g.font = "11px system-ui, sans-serif";
    this.drawAxis(g, width);
    let inView = 0, rects = 0;
    const [v0, v1] = this.view;
    this.ranks.forEach((r, i) => {
      const y = AXIS_H + i * this.groupH;
      g.fillStyle = r.rank === this.slowest ? "#b22" : "#333";
      g.textBaseline = "middle";
      const name = this.ranks.length > 16 ? `${r.rank}` : `rank ${r.rank}`;
      g.fillText(r.rank === this.slowest ? `${name} ◆` : name, 4, y + 1.5 * this.laneH);
      // Profiler step windows: alternate bands, numbered where there is room.
      r.steps.forEach((s, n) => {
        const x0 = Math.max(this.xOf(s.start_us), LABEL_W), x1 = Math.min(this.xOf(s.start_us + s.step_us), width - 8);
        if (x1 <= x0) return;
        g.fillStyle = n % 2 ? "rgba(0,0,0,0.07)" : "rgba(0,0,0,0.03)";
        g.fillRect(x0, y, x1 - x0, 3 * this.laneH);
        if (this.laneH >= 7 && x1 - x0 > 60) {
          g.fillStyle = "#999";
          g.fillText(`step ${s.step}`, x0 + 2, y + 2.5 * this.laneH);
        }
      });
      LANES.forEach((kind, k) => {
        const lane = r.lanes[kind];
        g.fillStyle = COLORS[kind];
        const ly = y + k * this.laneH, lh = Math.max(this.laneH - 1, 2);
        // Merge at pixel resolution: spans that start within a pixel of a rectangle join it.
        // Each rectangle costs a few binary searches, however many spans it swallows.
        const stop = firstStartAfter(lane, v1);
        let j = firstEnding(lane, v0);
        inView += Math.max(stop - j, 0);
        while (j < stop) {
          const x0 = Math.max(this.xOf(lane.start[j]), LABEL_W);
          let x1 = Math.max(this.xOf(lane.endMax[j]), x0 + 0.5);
          let next = j + 1;
          for (;;) {
            const upto = Math.min(firstStartAfter(lane, this.timeAt(x1 + 1)), stop);
            if (upto <= next) break;
            x1 = Math.max(x1, this.xOf(lane.endMax[upto - 1]));
            next = upto;
          }
          g.fillRect(x0, ly, Math.min(x1, width - 8) - x0, lh);
          rects++;
          j = next;
        }
      });
    });
    const merged = rects < inView
      ? `Merged at pixel resolution: ${inView.toLocaleString("en-US")} spans in view drawn as ${rects.toLocaleString("en-US")} rectangles; zoom in for detail.`
      : `${inView.toLocaleString("en-US")} spans in view, each drawn.`;
    this.note.textContent = `${this.serverNote}${merged} ◆ marks the rank the others wait for.`;
    this.node.dataset.drawnRects = String(rects);
    this.node.dataset.spansInView = String(inView);
    this.node.dataset.drawMs = (performance.now() - began).toFixed(1);
  }

  drawAxis(g, width) {
    const [v0, v1] = this.view;
    const rough = (v1 - v0) / 8;
    const pow = 10 ** Math.floor(Math.log10(rough));
    const stepUs = [1, 2, 5, 10].map((m) => m * pow).find((s) => s >= rough);
    g.fillStyle = "#555"; g.strokeStyle = "#ddd"; g.textBaseline = "top";
    for (let t = Math.ceil((v0 - this.t0) / stepUs) * stepUs; t + this.t0 <= v1; t += stepUs) {
      const x = this.xOf(t + this.t0);
      g.beginPath(); g.moveTo(x, AXIS_H - 4); g.lineTo(x, AXIS_H + this.ranks.length * this.groupH); g.stroke();
      const text = `${+(t / 1000).toPrecision(6)} ms`;
      if (x + 2 + g.measureText(text).width < width) g.fillText(text, x + 2, 4);
    }
    g.clearRect(0, 0, LABEL_W, AXIS_H);
  }

  hover(x, y) {
    const i = Math.floor((y - AXIS_H) / this.groupH);
    const k = Math.floor((y - AXIS_H - i * this.groupH) / this.laneH);
    const r = this.ranks[i];
    if (!r || k < 0 || k > 2 || x < LABEL_W) { this.tip.style.display = "none"; return; }
    const kind = LANES[k], lane = r.lanes[kind];
    const t = this.timeAt(x), slack = 2 * (this.view[1] - this.view[0]) / this.plotW();
    const j = firstEnding(lane, t - slack);
    if (j >= lane.start.length || lane.start[j] > t + slack) { this.tip.style.display = "none"; return; }
    const dur = lane.end[j] - lane.start[j];
    const lines = [
      `<b>${kind === "overlap" ? "overlap (comm ∩ compute)" : escape(lane.label[j])}</b>`,
      `rank ${r.rank} · ${kind}${lane.step[j] != null ? ` · step ${lane.step[j]}` : ""}`,
      `duration ${ms(dur)} · starts at ${ms(lane.start[j] - this.t0)}`,
    ];
    if (kind === "comm") {
      const rankRec = (this.analysis?.ranks || []).find((a) => a.rank === r.rank);
      const c = collectiveFor(lane.label[j], rankRec?.collectives);
      if (c) {
        lines.push(`${c.kind} on rank ${r.rank}, all ${c.count} calls: ${bytes(c.nbytes)}`,
          `algbw ${fixed(c.algbw_gbps, 4)} GB/s · busbw ${fixed(c.busbw_gbps, 4)} GB/s`);
      } else {
        lines.push("no size recorded for this collective");
      }
    }
    this.tip.innerHTML = lines.join("<br>");
    this.tip.style.display = "block";
    const left = Math.min(x + 12, this.width - 300);
    this.tip.style.left = `${Math.max(left, 0)}px`;
    this.tip.style.top = `${y + 14}px`;
  }
}

function escape(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
}

// The rank the others wait for, as the record's summary decided it (no recomputation here).
function slowestRank(metrics, mode) {
  return metrics.summary?.modes?.[mode]?.slowest_rank ?? null;
}

// ------------------------------------------------------------------ tables

function summary(metrics, modes) {
  const box = el("div", { class: "po-summary" });
  for (const mode of modes) {
    const m = metrics.modes[mode], st = m.step_time;
    box.append(el("div", { class: "po-card" },
      el("b", { text: mode }),
      el("div", { text: st.median_ms == null ? (m.checks.some((c) => !c.passed) ? "no timed steps (verification failed first)"
        : "no timed steps (traces only)")
        : `step time median ${fixed(st.median_ms, 2)} ms (p10 ${fixed(st.p10_ms, 2)}, p90 ${fixed(st.p90_ms, 2)}; ${st.times_ms.length} steps)` }),
      el("div", { text: m.checks.length ? `checks: ${m.checks.filter((c) => c.passed).length}/${m.checks.length} passed` : "" })));
  }
  if (metrics.speedup) {
    box.append(el("div", { class: "po-card" }, el("b", { text: "speedup" }),
      el("div", { text: `measured ${fixed(metrics.speedup.measured, 3)}× (sequential / split median step time)` }),
      el("div", { text: `predicted ${fixed(metrics.speedup.predicted, 3)}× (if all sequential comm hid behind compute)` })));
  }
  return box;
}

// A failed run says so above everything else, naming each failed check as the console does.
function failures(metrics, status) {
  const checks = [...Object.values(metrics.modes).flatMap((m) => m.checks || []), ...(metrics.checks || [])];
  const bad = checks.filter((c) => !c.passed);
  if (!bad.length && status !== "failed") return null;
  const where = (c) => [`rank ${c.worst_rank}`, c.worst_step != null ? `step ${c.worst_step}` : null,
    c.worst_layer != null ? `layer ${c.worst_layer}` : null].filter(Boolean).join(", ");
  const error = (c) => (c.max_abs_err == null ? "values not finite" : `max error ${c.max_abs_err.toPrecision(3)}`);
  return el("div", { class: "po-failed" },
    el("b", { text: bad.length ? `This run FAILED verification (${bad.length} of ${checks.length} checks): ` +
      "its timings are for diagnosis only." : "This run FAILED (see its status.json and report)." }),
    ...bad.map((c) => el("div", { text: `${c.name}: FAILED (${error(c)} at ${where(c)}; tolerance ${c.tolerance} relative)` })));
}

function rankTable(mode, analysis, slow) {
  const maxComm = Math.max(...analysis.ranks.map((r) => (r.wait_us ?? 0) + (r.transfer_us ?? 0)), 1);
  const rows = analysis.ranks.map((r) => {
    const bar = el("div", { class: "po-bar", title: `wait ${exact(r.wait_us)} µs, transfer ${exact(r.transfer_us)} µs` },
      el("i", { class: "po-wait", style: `width:${100 * (r.wait_us ?? 0) / maxComm}%` }),
      el("i", { class: "po-transfer", style: `width:${100 * (r.transfer_us ?? 0) / maxComm}%` }));
    return [mode, r.rank === slow ? `${r.rank} ◆` : r.rank, exact(r.comm_us), exact(r.compute_us), exact(r.overlap_us),
      exact(r.exposed_comm_us), exact(r.overlap_pct), exact(r.wait_us), exact(r.transfer_us), bar];
  });
  return table(["mode", "rank", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap %", "wait_us", "transfer_us",
    "wait (red) | transfer (orange)"], rows, (i) => (analysis.ranks[i].rank === slow ? "po-slow" : ""));
}

// Long tables (64 ranks × steps) start folded, so the timeline and stragglers stay in view.
function foldable(mode, what, t) {
  const rows = t.tBodies[0].rows.length;
  if (rows <= 32) return t;
  return el("details", {}, el("summary", { text: `${mode}: ${rows} ${what} rows (click to show)` }), t);
}

function stepTable(mode, analysis) {
  const rows = [];
  for (const r of analysis.ranks) {
    for (const s of r.steps) {
      rows.push([mode, r.rank, s.step, exact(s.step_us), exact(s.comm_us), exact(s.compute_us), exact(s.overlap_us),
        exact(s.exposed_comm_us), exact(s.overlap_pct)]);
    }
  }
  return foldable(mode, "step", table(["mode", "rank", "step", "step_us", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap %"], rows));
}

function collectiveTable(mode, analysis) {
  const rows = [];
  for (const r of analysis.ranks) {
    for (const c of r.collectives) {
      rows.push([mode, r.rank, c.kind, c.count, bytes(c.nbytes), exact(c.dur_us), exact(c.algbw_gbps), exact(c.busbw_gbps)]);
    }
  }
  return foldable(mode, "collective", table(["mode", "rank", "kind", "count", "bytes", "dur_us", "algbw GB/s", "busbw GB/s"], rows));
}

// ------------------------------------------------------------------ explain

function explain(n) {
  // Rank r holds n consecutive numbers r·n+1 … r·n+n. These are the definitions of the
  // collectives applied to that example, not measurements.
  const inputs = Array.from({ length: n }, (_, r) => Array.from({ length: n }, (_, j) => r * n + j + 1));
  const sums = inputs[0].map((_, j) => inputs.reduce((acc, row) => acc + row[j], 0));
  const vec = (v) => (v.length <= 8 ? `[${v.join(", ")}]` : `[${v.slice(0, 3).join(", ")}, …, ${v[v.length - 1]}]`);
  const shown = n <= 8 ? inputs.map((_, r) => r) : [0, 1, 2, null, n - 1];
  const rows = shown.map((r) => (r === null ? ["…", "…", "…", "…", "…"]
    : [r, vec(inputs[r]), vec(sums), vec([sums[r]]), vec(sums)]));
  const traffic = 2 * (n - 1) / n;
  return el("section", { class: "po-explain" },
    el("h3", { text: `Explain: all_reduce = all_gather(reduce_scatter), with this run's ${n} ranks` }),
    el("p", { text: `Rank r holds ${n} consecutive numbers. all_reduce gives every rank the column sums. ` +
      `reduce_scatter gives rank r only the r-th chunk of those sums (1/${n} of them), so it can update its shard of ` +
      "the parameters right away; all_gather then concatenates the chunks, and every rank again holds the full sum." }),
    table(["rank", "input X_r", "all_reduce", "reduce_scatter shard", "all_gather of shards"], rows),
    el("p", { text: `Traffic is the same: a ring all_reduce sends 2(${n}−1)/${n} = ${+traffic.toFixed(3)}× the data per rank; ` +
      `reduce_scatter and all_gather send (${n}−1)/${n} = ${+(traffic / 2).toFixed(3)}× each. The split wins by overlap ` +
      "(the all_gather hides behind the next forward pass) and memory (optimizer state for 1/N of the parameters)." }));
}

// ------------------------------------------------------------------ the page

async function showRun(main, run, view) {
  main.replaceChildren(el("p", { class: "po-muted", text: `loading ${run.run} …` }));
  const metrics = await getJSON(`metrics?run=${encodeURIComponent(run.run)}`);
  const modes = view === "both" ? ["sequential", "split"] : [view];
  const timelines = [];
  const panels = el("div", { class: `po-panels po-cols-${modes.length}` });
  for (const mode of modes) {
    const analysis = metrics.modes[mode]?.analysis;
    if (!run.has_timeline || !analysis) {
      panels.append(el("section", { class: "po-panel" }, el("h3", { text: MODE_TITLES[mode] || mode }),
        el("p", { class: "po-muted", text: run.status === "failed" && !analysis
          ? "no timeline: the run failed before this mode was profiled" : "not profiled: no timeline for this mode" })));
      continue;
    }
    const reply = await getJSON(`timeline?run=${encodeURIComponent(run.run)}&mode=${encodeURIComponent(mode)}&max_spans=${maxSpans(run.world_size)}`);
    const tl = new Timeline(mode, reply, analysis, slowestRank(metrics, mode));
    timelines.push(tl);
    panels.append(tl.node);
  }
  const analysed = modes.filter((m) => metrics.modes[m]?.analysis);
  const world = metrics.env?.world_size ?? metrics.modes[analysed[0]]?.analysis?.world_size;
  main.replaceChildren(
    failures(metrics, run.status),
    summary(metrics, modes.filter((m) => metrics.modes[m])),
    panels,
    ...(analysed.length ? [
      el("h3", { text: "Ranks: overlap, and the wait vs transfer split (stragglers)" }),
      el("p", { class: "po-muted", text: "Each collective call is matched across ranks; transfer = the fastest rank's duration, " +
        "wait = the rest. ◆ (red row) is the rank that waits least: the others wait for it." }),
      ...analysed.map((m) => rankTable(m, metrics.modes[m].analysis, slowestRank(metrics, m))),
      el("h3", { text: "Per profiler step (each metric clipped to the ProfilerStep#N window)" }),
      ...analysed.map((m) => stepTable(m, metrics.modes[m].analysis)),
      el("h3", { text: "Per collective (totals per rank; algbw = S/t, busbw = algbw · factor(kind, n), as nccl-tests)" }),
      ...analysed.map((m) => collectiveTable(m, metrics.modes[m].analysis))] : []),
    world ? explain(world) : null);
  for (const tl of timelines) tl.draw();
  const ro = new ResizeObserver(() => timelines.forEach((tl) => tl.schedule()));
  timelines.forEach((tl) => ro.observe(tl.canvas));
  document.body.dataset.ready = "true";
}

export async function render() {
  document.head.append(el("link", { rel: "stylesheet", href: "style.css" }));
  const runSelect = el("select", { id: "po-run" });
  const viewSelect = el("select", { id: "po-view" });
  const main = el("main", { class: "po-main" });
  document.body.append(el("header", { class: "po-header" },
    el("b", { text: "Overlap" }), el("label", {}, "run ", runSelect), el("label", {}, "view ", viewSelect)), main);
  let runs;
  try {
    runs = (await getJSON("runs")).runs.filter((r) => !r.error);
  } catch (err) {
    main.replaceChildren(el("p", { class: "po-error", text: String(err.message || err) }));
    return;
  }
  if (!runs.length) {
    main.replaceChildren(el("p", { text: "No run folders (with metrics.json) under the logdir." }));
    return;
  }
  runs.forEach((r, i) => runSelect.append(el("option", { value: String(i), text: `${r.run}${r.status ? ` (${r.status})` : ""}` })));
  const fillViews = () => {
    const run = runs[+runSelect.value];
    viewSelect.replaceChildren();
    if (run.modes.includes("sequential") && run.modes.includes("split")) {
      viewSelect.append(el("option", { value: "both", text: "sequential | split, side by side" }));
    }
    for (const m of run.modes) viewSelect.append(el("option", { value: m, text: m }));
  };
  const show = () => {
    document.body.dataset.ready = "false";
    showRun(main, runs[+runSelect.value], viewSelect.value).catch((err) => {
      main.replaceChildren(el("p", { class: "po-error", text: String(err.message || err) }));
      document.body.dataset.ready = "error";
    });
  };
  runSelect.onchange = () => { fillViews(); show(); };
  viewSelect.onchange = show;
  fillViews();
  show();
}
