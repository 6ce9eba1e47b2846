// The rank x time heatmap of the median profiled step (record/heatmap.py), from the plugin's
// heatmap route: at most MAX_ROWS x BINS cells per layer, whatever the job's size. One pixel per
// cell on a canvas scaled to the page; rows are ranks (in rank order), columns time bins on the
// aligned clock. Colour: exposed communication, orange waiting for a peer and blue moving data, on
// compute in light grey; or, toggled, collectives in flight. Hover names the rank, the time and
// what ran in that bin (the record's digits: sixteenths of the bin). Nothing is recomputed here.

import { el, getJSON, PHASE_COLORS } from "./common.js";

const WAIT = [230, 102, 0], TRANSFER = [0, 89, 217], IN_FLIGHT = [115, 51, 153];
const COMPUTE_GREY = 0.18;
const PHASE_NAMES = { f: "forward", b: "backward", o: "optimizer", ".": "outside the phases" };

const digit = (c) => parseInt(c, 16) / 15;

function paint(canvas, h, inFlight) {
  const rows = h.ranks.length, g = canvas.getContext("2d");
  const img = g.createImageData(h.bins, rows);
  const layers = inFlight ? [[h.in_flight, IN_FLIGHT]] : [[h.wait, WAIT], [h.transfer, TRANSFER]];
  for (let r = 0; r < rows; r++) {
    const compute = h.compute[r];
    for (let b = 0; b < h.bins; b++) {
      const grey = 255 * (1 - COMPUTE_GREY * digit(compute[b]));
      let red = grey, green = grey, blue = grey;
      for (const [layer, colour] of layers) {
        const c = layer[r].charCodeAt(b);
        if (c === 48) continue; // "0": none of the bin
        const f = digit(layer[r][b]);
        red = red * (1 - f) + colour[0] * f;
        green = green * (1 - f) + colour[1] * f;
        blue = blue * (1 - f) + colour[2] * f;
      }
      const o = 4 * (r * h.bins + b);
      img.data[o] = red; img.data[o + 1] = green; img.data[o + 2] = blue; img.data[o + 3] = 255;
    }
  }
  g.putImageData(img, 0, 0);
}

function phaseBand(h) {
  const band = el("canvas", { class: "po-heat-band", width: String(h.bins), height: "1" });
  const g = band.getContext("2d");
  for (let b = 0; b < h.bins; b++) {
    const counts = {};
    for (const p of h.phase) counts[p[b]] = (counts[p[b]] || 0) + 1;
    const [top, n] = Object.entries(counts).sort((x, y) => y[1] - x[1])[0];
    g.fillStyle = n * 2 > h.phase.length && PHASE_NAMES[top] && top !== "." ? PHASE_COLORS[PHASE_NAMES[top]] : "#fff";
    g.fillRect(b, 0, 1, 1);
  }
  return band;
}

function describe(h, row, bin) {
  const first = h.ranks[row];
  const who = h.ranks_per_row > 1 ? `ranks ${first}–${first + h.ranks_per_row - 1} (most of each)` : `rank ${first}`;
  const t0 = (bin * h.bin_us) / 1e3, t1 = ((bin + 1) * h.bin_us) / 1e3;
  const pct = (layer) => `${Math.round(100 * digit(layer[row][bin]))}%`;
  return `${who}, ${t0.toFixed(2)}–${t1.toFixed(2)} ms (${PHASE_NAMES[h.phase[row][bin]]}): ` +
    `exposed wait ${pct(h.wait)}, exposed transfer ${pct(h.transfer)}, collective in flight ${pct(h.in_flight)}, ` +
    `compute ${pct(h.compute)} of the bin`;
}

// The panel for one mode, or a line saying why there is none.
export async function heatmapPanel(run, mode) {
  let h;
  try {
    h = await getJSON(`heatmap?run=${encodeURIComponent(run.run)}&mode=${encodeURIComponent(mode)}`);
  } catch (err) {
    return el("p", { class: "po-muted", text: `${mode}: no rank x time heatmap (${err.message || err})` });
  }
  const rows = h.ranks.length;
  const canvas = el("canvas", { class: "po-heat", width: String(h.bins), height: String(rows) });
  canvas.style.height = `${Math.max(rows, 120)}px`;
  const tip = el("div", { class: "po-muted po-heat-tip", text: "hover a cell: rank, time, what ran" });
  canvas.addEventListener("mousemove", (ev) => {
    const box = canvas.getBoundingClientRect();
    const row = Math.min(rows - 1, Math.floor(((ev.clientY - box.top) / box.height) * rows));
    const bin = Math.min(h.bins - 1, Math.floor(((ev.clientX - box.left) / box.width) * h.bins));
    tip.textContent = describe(h, row, bin);
  });
  const toggle = el("select", { class: "po-heat-toggle" },
    el("option", { value: "exposed", text: "exposed: wait (orange) / transfer (blue)" }),
    el("option", { value: "flight", text: "collectives in flight (purple)" }));
  toggle.onchange = () => paint(canvas, h, toggle.value === "flight");
  paint(canvas, h, false);
  const span = (h.bin_us * h.bins) / 1e3;
  return el("section", { class: "po-heatmap", "data-mode": mode },
    el("div", {}, el("b", { text: `${mode}: step ${h.step}, ${rows} rows` }), " colour ", toggle),
    phaseBand(h), canvas, tip,
    el("p", { class: "po-muted", text: `rows: ${h.ranks_per_row === 1 ? "ranks" : `${h.ranks_per_row} ranks each`} ` +
      `${h.ranks[0]} (top) to ${h.ranks[rows - 1]}; columns: ${h.bins} bins of ${h.bin_us.toFixed(1)} µs, ${span.toFixed(2)} ms ` +
      "from the first rank's start of the step (aligned clock); grey: compute; band: the phase on most rows." }));
}
