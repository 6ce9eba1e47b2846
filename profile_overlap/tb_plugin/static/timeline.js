// One timeline panel of the Overlap tab: a mode's ranks on a canvas, each rank a group of lanes
// (the step's phases as a thin band, then compute, comm, and their overlap), with zoom, pan and
// hover. It draws the spans and phase windows of timeline.json as served and the record's numbers
// on hover; it computes no metric.

import { bytes, el, fixed, ms, PHASE_COLORS, PHASE_OTHER_COLOR, PHASE_SHORT, PHASES } from "./common.js";
import { callsPanel, drawExposure, exposureOf, legendItems } from "./exposed.js";

export const COLORS = { compute: "#4e79a7", comm: "#f28e2b", overlap: "#59a14f" };
const LANES = ["compute", "comm", "overlap"];
const LABEL_W = 64; // px left of the lanes, for rank names
const AXIS_H = 22;

// ------------------------------------------------------------------ timeline data

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
  // Phase windows [step, phase, start_us, end_us]: absent from timelines written before the
  // analysis kept them (and from foreign traces without phase labels).
  const phases = [...(rank.phases || [])].sort((a, b) => a[2] - b[2]);
  // Clock: timeline.json holds aligned ranks' times on the reference rank's clock (absent before).
  const clock = rank.aligned ? { offsetUs: rank.clock_offset_us, uncertaintyUs: rank.clock_uncertainty_us } : null;
  return { rank: rank.rank, steps: rank.steps, lanes, phases, clock, exposed: exposureOf(rank) };
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

export class Timeline {
  constructor(mode, reply, analysis, slowest, title) {
    this.mode = mode;
    this.analysis = analysis;
    this.ranks = reply.ranks.map(prepareRank);
    this.t0 = Infinity; this.t1 = -Infinity;
    for (const r of reply.ranks) {
      for (const s of r.steps) { this.t0 = Math.min(this.t0, s.start_us); this.t1 = Math.max(this.t1, s.start_us + s.step_us); }
      for (const s of r.spans) { this.t0 = Math.min(this.t0, s[1]); this.t1 = Math.max(this.t1, s[2]); }
    }
    this.full = [this.t0, this.t1];
    this.view = [...this.full];
    this.numSpans = reply.ranks.reduce((n, r) => n + r.spans.length, 0);
    const ranks = this.ranks.length;
    this.laneH = ranks <= 4 ? 14 : ranks <= 16 ? 7 : 3;
    // A rank's group: the phase band (where the timeline has phases), a gap, then the three lanes.
    this.hasPhases = this.ranks.some((r) => r.phases.length);
    this.bandH = !this.hasPhases ? 0 : this.laneH >= 14 ? 12 : this.laneH >= 7 ? 5 : 2;
    this.bandGap = !this.hasPhases ? 0 : this.laneH >= 7 ? 2 : 1;
    this.groupH = this.bandH + this.bandGap + 3 * this.laneH + (ranks <= 16 ? 6 : 2);
    this.slowest = slowest;
    // The reference clock is the lowest rank's (clocks.py): the lowest aligned rank.
    const aligned = this.ranks.filter((r) => r.clock).map((r) => r.rank);
    this.reference = aligned.length ? Math.min(...aligned) : null;

    this.canvas = el("canvas", { class: "po-canvas", "data-mode": mode });
    this.tip = el("div", { class: "po-tip" });
    this.note = el("div", { class: "po-note" });
    const serverNote = reply.num_spans_served < reply.num_spans_in_file
      ? `Server merged ${reply.num_spans_in_file.toLocaleString("en-US")} spans into ${reply.num_spans_served.toLocaleString("en-US")} (at most ${reply.max_spans} per rank and kind; the largest gaps kept). `
      : "";
    this.serverNote = serverNote;
    const reset = el("button", { class: "po-button", text: "reset zoom" });
    reset.onclick = () => { this.view = [...this.full]; this.schedule(); };
    this.node = el("section", { class: "po-panel" },
      el("h3", { text: title || mode }),
      el("div", { class: "po-legend" },
        ...LANES.map((k) => el("span", {}, el("i", { style: `background:${COLORS[k]}` }), k)),
        ...(this.hasPhases ? PHASES.map((p) => el("span", { class: "po-phase-key" },
          el("i", { style: `background:${PHASE_COLORS[p]}` }), `${p} phase`)) : []),
        ...legendItems(this.ranks),
        el("span", { class: "po-hint", text: "wheel: zoom · drag: pan · double-click: reset" }), reset),
      el("div", { class: "po-canvas-wrap" }, this.canvas, this.tip),
      this.note, callsPanel(this, analysis?.exposed));
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
    c.addEventListener("dblclick", () => { this.view = [...this.full]; this.schedule(); });
  }

  // The unzoomed view (reset and double-click return to it): the page gives every panel the same length.
  setFull(a, b) {
    this.full = [a, b];
    this.view = [a, b];
  }

  // Show [a, b] with a margin of a fifth of its length on each side (the top calls' rows).
  zoomTo(a, b) {
    const pad = Math.max((b - a) / 5, 1);
    this.view = [a - pad, b + pad];
    this.schedule();
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
    let inView = 0, rects = 0, windows = 0, exposedPieces = 0;
    const [v0, v1] = this.view;
    this.ranks.forEach((r, i) => {
      const top = AXIS_H + i * this.groupH;
      if (this.hasPhases) windows += this.drawPhases(g, r, top, width);
      const y = top + this.bandH + this.bandGap;
      g.fillStyle = r.rank === this.slowest ? "#b22" : "#333";
      g.textBaseline = "middle";
      const name = this.ranks.length > 16 ? `${r.rank}` : `rank ${r.rank}`;
      g.fillText(r.rank === this.slowest ? `${name} ◆` : name, 4, y + 1.5 * this.laneH);
      if (this.bandH >= 12) { g.fillStyle = "#888"; g.fillText("phase", 4, top + this.bandH / 2); }
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
      exposedPieces += drawExposure(this, g, r, y, width);
    });
    const merged = rects < inView
      ? `Merged at pixel resolution: ${inView.toLocaleString("en-US")} spans in view drawn as ${rects.toLocaleString("en-US")} rectangles; zoom in for detail.`
      : `${inView.toLocaleString("en-US")} spans in view, each drawn.`;
    const clocks = this.reference != null && this.ranks.some((r) => r.clock)
      ? ` Times are on rank ${this.reference}'s clock: each rank's clock offset, estimated from the ends of matched collectives, is taken out (hover for it).`
      : "";
    const other = this.analysis?.clock_slowest_rank;
    const marks = other != null && this.slowest != null
      ? ` ◆ marks the rank that waits least by duration; the aligned clock names rank ${other} (the two disagree).`
      : " ◆ marks the rank the others wait for.";
    this.note.textContent = `${this.serverNote}${merged}${marks}${clocks}`;
    this.node.dataset.drawnRects = String(rects);
    this.node.dataset.phaseWindows = String(windows);
    this.node.dataset.exposedPieces = String(exposedPieces);
    this.node.dataset.spansInView = String(inView);
    this.node.dataset.drawMs = (performance.now() - began).toFixed(1);
  }

  // The band above a rank's lanes: each phase window in its colour, named where it fits, and a
  // dotted line down through the lanes where it starts (where lanes are tall enough to read).
  drawPhases(g, r, top, width) {
    let drawn = 0;
    const lanesY = top + this.bandH + this.bandGap;
    g.save();
    g.textBaseline = "middle";
    g.font = "10px system-ui, sans-serif";
    for (const [, phase, a, b] of r.phases) {
      if (b < this.view[0] || a > this.view[1]) continue;
      const x0 = Math.max(this.xOf(a), LABEL_W), x1 = Math.min(this.xOf(b), width - 8);
      if (x1 <= x0) continue;
      drawn++;
      g.fillStyle = PHASE_COLORS[phase] || PHASE_OTHER_COLOR;
      g.fillRect(x0, top, Math.max(x1 - x0 - 1, 0.5), this.bandH);
      if (this.bandH >= 12) {
        const text = [phase, PHASE_SHORT[phase] || phase.slice(0, 3)].find((t) => g.measureText(t).width + 6 < x1 - x0);
        if (text) { g.fillStyle = "#222"; g.fillText(text, x0 + 3, top + this.bandH / 2 + 0.5); }
      }
      if (this.laneH >= 7 && this.xOf(a) >= LABEL_W) {
        g.strokeStyle = "rgba(0,0,0,0.35)"; g.setLineDash([1, 2]);
        g.beginPath(); g.moveTo(x0 + 0.5, lanesY); g.lineTo(x0 + 0.5, lanesY + 3 * this.laneH); g.stroke();
      }
    }
    g.restore();
    return drawn;
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
    const local = y - AXIS_H - i * this.groupH - this.bandH - this.bandGap;
    const k = Math.floor(local / this.laneH);
    const r = this.ranks[i];
    if (r && x >= LABEL_W && this.hasPhases && local < 0) { this.hoverPhase(r, x, y); return; }
    if (!r || k < 0 || k > 2 || x < LABEL_W) { this.tip.style.display = "none"; return; }
    const kind = LANES[k], lane = r.lanes[kind];
    const t = this.timeAt(x), slack = 2 * (this.view[1] - this.view[0]) / this.plotW();
    const j = firstEnding(lane, t - slack);
    if (j >= lane.start.length || lane.start[j] > t + slack) { this.tip.style.display = "none"; return; }
    const dur = lane.end[j] - lane.start[j];
    const title = kind === "overlap" ? "overlap (comm ∩ compute)" : lane.label[j];
    const lines = [
      `rank ${r.rank} · ${kind}${lane.step[j] != null ? ` · step ${lane.step[j]}` : ""}`,
      `duration ${ms(dur)} · starts at ${ms(lane.start[j] - this.t0)}`,
    ];
    if (r.clock && r.rank !== this.reference) {
      const u = r.clock.uncertaintyUs == null ? "unknown" : ms(r.clock.uncertaintyUs);
      lines.push(`clock: rank ${r.rank}'s minus rank ${this.reference}'s ${ms(r.clock.offsetUs)} (± ${u}), taken out`);
    }
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
    this.showTip(title, lines, x, y);
  }

  // A phase window: its extent, and this rank's numbers for the phase in that step from the record.
  hoverPhase(r, x, y) {
    const t = this.timeAt(x), slack = 2 * (this.view[1] - this.view[0]) / this.plotW();
    const w = r.phases.find(([, , a, b]) => a - slack <= t && t <= b + slack);
    if (!w) { this.tip.style.display = "none"; return; }
    const [step, phase, a, b] = w;
    const lines = [`rank ${r.rank} · step ${step}`,
      `window ${ms(b - a)} · starts at ${ms(a - this.t0)}`];
    const rankRec = (this.analysis?.ranks || []).find((q) => q.rank === r.rank);
    const rec = rankRec?.steps?.find((s) => s.step === step)?.phases?.find((p) => p.phase === phase);
    if (rec) {
      lines.push(`comm ${ms(rec.comm_us)}: hidden behind compute ${ms(rec.overlap_us)}, exposed ${ms(rec.exposed_comm_us)}`,
        `compute ${ms(rec.compute_us)} (this rank, the whole phase in step ${step})`);
    }
    this.showTip(`${phase} phase`, lines, x, y);
  }

  // The tooltip: a bold title, then one line each. Built of text nodes only: labels and collective
  // kinds come from the traces (a hostile trace's event name stays text, never markup).
  showTip(title, lines, x, y) {
    this.tip.replaceChildren(el("b", { text: title }), ...lines.map((line) => el("div", { text: line })));
    this.tip.style.display = "block";
    const left = Math.min(x + 12, this.width - 300);
    this.tip.style.left = `${Math.max(left, 0)}px`;
    this.tip.style.top = `${y + 14}px`;
  }
}
