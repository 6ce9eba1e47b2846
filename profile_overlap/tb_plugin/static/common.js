// Helpers shared by the Overlap tab's modules: DOM building, fetching from the plugin's routes,
// and formatting of the record's numbers (never recomputing them).

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c != null) node.append(c);
  return node;
}

export async function getJSON(url) {
  const resp = await fetch(url);
  const body = await resp.json();
  if (!resp.ok) throw new Error(body.error || `${url}: HTTP ${resp.status}`);
  return body;
}

// Record values exactly as stored (the record keeps 3 decimals for µs, 4 for GB/s).
export const exact = (x) => (x == null ? "–" : x.toLocaleString("en-US", { maximumFractionDigits: 6 }));
export const fixed = (x, d) => (x == null ? "–" : x.toFixed(d));

export function bytes(n) {
  if (n == null) return "–";
  for (const [unit, size] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) {
    if (n >= size) return `${(n / size).toFixed(2)} ${unit} (${n.toLocaleString("en-US")} B)`;
  }
  return `${n} B`;
}

export function ms(us) {
  return Math.abs(us) >= 1000 ? `${(us / 1000).toFixed(3)} ms` : `${us.toFixed(1)} µs`;
}

export function table(headers, rows, rowClass = () => "") {
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

// Long tables (64 ranks × steps) start folded, so the timeline and stragglers stay in view.
export function foldable(mode, what, t) {
  const rows = t.tBodies[0].rows.length;
  if (rows <= 32) return t;
  return el("details", {}, el("summary", { text: `${mode}: ${rows} ${what} rows (click to show)` }), t);
}

// The step's phases, in step order, as the server's registry has them (core/modes.py PHASES,
// sent with the runs reply), with the colours of the report's timeline figure
// (render/timeline_style.py PHASE_COLOURS: light, colour-blind safe).
export let PHASES = [];
export function setPhases(phases) { PHASES = phases; }
export const PHASE_COLORS = { forward: "#99DDFF", backward: "#FBB4AE", optimizer: "#BBCC33" };
export const PHASE_OTHER_COLOR = "#DDDDDD";
export const PHASE_SHORT = { forward: "fwd", backward: "bwd", optimizer: "opt" };
