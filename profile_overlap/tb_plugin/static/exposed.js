// Why communication is exposed, in the Overlap tab: exposed time in two shades on each rank's comm
// lane (wait: a peer had not started the call; transfer: all had), the critical path of the median
// profiled step as a line across the ranks it passes through, and the record's top calls as a
// table whose rows zoom the panel to that call. Geometry comes from timeline.json (each rank's
// wait, transfer, critical and calls); every number shown is the record's (analysis.exposed).

import { bytes, el, fixed, ms, table } from "./common.js";

export const EXPOSED_COLORS = { wait: "#c0392b", transfer: "#7b3f00", critical: "#111" };

// One rank's exposure, as timeline.json holds it (absent in timelines written before it).
export function exposureOf(rank) {
  return { wait: rank.wait || [], transfer: rank.transfer || [], critical: rank.critical || [], calls: rank.calls || [] };
}

// Legend entries for the panel (only when the timeline has the exposure).
export function legendItems(ranks) {
  if (!ranks.some((r) => r.exposed.wait.length || r.exposed.transfer.length || r.exposed.critical.length)) return [];
  return [
    el("span", {}, el("i", { style: `background:${EXPOSED_COLORS.wait}` }), "exposed: wait"),
    el("span", {}, el("i", { style: `background:${EXPOSED_COLORS.transfer}` }), "exposed: transfer"),
    el("span", {}, el("i", { style: `background:${EXPOSED_COLORS.critical};height:3px;vertical-align:3px` }), "critical path (median step)"),
  ];
}

// Draw over a rank's comm lane (y: top of its three lanes): wait and transfer pieces in the lower
// half of the comm lane, and the critical path as a thick line above the compute lane.
export function drawExposure(tl, g, r, y, width) {
  const e = r.exposed;
  const h = Math.max(Math.floor(tl.laneH / 2), 1);
  const ly = y + tl.laneH + tl.laneH - h - 1;
  let drawn = 0;
  for (const [kind, pieces] of [["wait", e.wait], ["transfer", e.transfer]]) {
    g.fillStyle = EXPOSED_COLORS[kind];
    for (const [a, b] of pieces) {
      if (b < tl.view[0] || a > tl.view[1]) continue;
      const x0 = Math.max(tl.xOf(a), 64), x1 = Math.min(tl.xOf(b), width - 8);
      if (x1 < x0) continue;
      g.fillRect(x0, ly, Math.max(x1 - x0, 0.5), h);
      drawn++;
    }
  }
  g.fillStyle = EXPOSED_COLORS.critical;
  for (const [a, b] of e.critical) {
    if (b < tl.view[0] || a > tl.view[1]) continue;
    const x0 = Math.max(tl.xOf(a), 64), x1 = Math.min(tl.xOf(b), width - 8);
    if (x1 < x0) continue;
    g.fillRect(x0, y - 2, Math.max(x1 - x0, 0.5), 2);
    drawn++;
  }
  return drawn;
}

// The time a row's call ran, over the ranks, in the first profiled step it appears in.
function extentOf(ranks, c) {
  let step = null, lo = Infinity, hi = -Infinity;
  for (const r of ranks) {
    for (const [kind, phase, call, s, a, b] of r.exposed.calls) {
      if (kind !== c.kind || phase !== c.phase || call !== c.call) continue;
      if (step == null || s < step) { step = s; lo = a; hi = b; } else if (s === step) { lo = Math.min(lo, a); hi = Math.max(hi, b); }
    }
  }
  return step == null ? null : { step, lo, hi };
}

// The record's top calls (analysis.exposed.top); a row with a place in the timeline zooms to it.
export function callsPanel(tl, exposed) {
  if (!exposed || !exposed.top?.length) return null;
  const rows = exposed.top.map((c) => [
    `${c.kind} #${c.call} in ${c.phase}`, bytes(c.bytes), ms(c.exposed_us),
    c.wait_us == null ? "–" : ms(c.wait_us), c.transfer_us == null ? "–" : ms(c.transfer_us),
    c.slack_us == null ? "–" : c.slack_us === 0 ? "0 (waited at once)" : ms(c.slack_us),
    c.required_gbps == null ? "–" : `${fixed(c.required_gbps, 4)} GB/s`, c.late_rank == null ? "–" : String(c.late_rank)]);
  const t = table(["call", "size", "exposed", "wait", "transfer", "slack", "required busbw", "late rank"], rows);
  [...t.tBodies[0].rows].forEach((tr, i) => {
    const where = extentOf(tl.ranks, exposed.top[i]);
    if (!where) return;
    tr.classList.add("po-zoomable");
    tr.title = `zoom to step ${where.step}`;
    tr.dataset.call = `${exposed.top[i].kind}#${exposed.top[i].call}/${exposed.top[i].phase}`;
    tr.onclick = () => tl.zoomTo(where.lo, where.hi);
  });
  return el("details", { class: "po-calls", open: "" },
    el("summary", { text: "Top calls by exposed time (summed over ranks and profiled steps; click a row to zoom to it)" }), t);
}
