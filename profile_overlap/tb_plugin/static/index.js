// The Overlap tab. TensorBoard loads this module in an iframe (base href: the plugin's routes)
// and calls render(). It reads the run's metrics.json and timeline.json through the plugin's
// routes and draws them; it computes no metric (renderers never recompute) and requests nothing
// outside this TensorBoard server. The timeline panels are timeline.js; helpers, common.js.

import { bytes, el, exact, fixed, foldable, getJSON, PHASE_COLORS, PHASE_OTHER_COLOR, setPhases, table } from "./common.js";
import { heatmapPanel } from "./heatmap.js";
import { Timeline } from "./timeline.js";

// Spans asked of the server per rank and kind (it merges beyond this and says so): about
// 2^17 per kind in all, so that 64 ranks stay smooth; never fewer than 256 per rank.
const maxSpans = (worldSize) => Math.max(256, Math.min(4096, Math.floor(131072 / (worldSize || 1))));

// The rank the others wait for, as the record's summary decided it (no recomputation here).
function slowestRank(metrics, mode) {
  return metrics.summary?.modes?.[mode]?.slowest_rank ?? null;
}

// ------------------------------------------------------------------ tables

// Above this many ranks the per-rank, per-step, per-collective and per-phase rank tables give way
// to the record's spread over the ranks (analysis.spread): the full tables are the CSV files
// `analyze --json OUT` writes, or `analyze --per-rank`.
const TABLE_RANKS = 64;
const many = (analysis) => analysis.ranks.length > TABLE_RANKS;

function spreadTable(mode, analysis) {
  const digits = (s) => (s.metric === "overlap_pct" ? 2 : 0);
  const f = (x, d) => x.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });
  const named = (ranks) => (ranks.length ? ranks.join(", ") : "all equal");
  const outliers = (o) => (o.length ? `${o.length}: ${o.slice(0, 8).join(", ")}${o.length > 8 ? ", …" : ""}` : "0");
  return el("div", { class: "po-spread", "data-mode": mode },
    el("p", { class: "po-muted", text: `${mode}: ${analysis.ranks.length.toLocaleString("en-US")} ranks; each per-rank number ` +
      "over the ranks (µs; overlap in %); outliers: |x − median| > max(3 · 1.4826 · MAD, 5% of the median). Full tables: " +
      "analyze --json OUT writes OUT.ranks.csv and OUT.steps.csv; analyze --per-rank --per-step prints them." }),
    table(["per rank", "min", "p10", "median", "p90", "max", "worst ranks", "best ranks", "outliers"],
      (analysis.spread || []).map((s) => [s.metric === "overlap_pct" ? "overlap %" : s.metric,
        ...[s.min, s.p10, s.median, s.p90, s.max].map((x) => f(x, digits(s))), named(s.worst), named(s.best), outliers(s.outliers)])));
}

function summary(metrics, modes) {
  const box = el("div", { class: "po-summary" });
  const versus = metrics.summary?.speedup_vs_first || [];
  for (const mode of modes) {
    const m = metrics.modes[mode], st = m.step_time;
    const vs = versus.find((x) => x.mode === mode);
    box.append(el("div", { class: "po-card" },
      el("b", { text: mode }),
      el("div", { text: st.median_ms == null ? (m.checks.some((c) => !c.passed) ? "no timed steps (verification failed first)"
        : "no timed steps (traces only)")
        : `step time median ${fixed(st.median_ms, 2)} ms (p10 ${fixed(st.p10_ms, 2)}, p90 ${fixed(st.p90_ms, 2)}; ${st.times_ms.length} steps)` }),
      el("div", { text: vs?.speedup != null && versus.length > 1 && mode !== vs.baseline
        ? `speedup vs ${vs.baseline}: ${fixed(vs.speedup, 2)}×${vs.within_noise ? " (within run-to-run noise)" : ""}` : "" }),
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

// The analysis's integrity checks (docs/metrics.md "Integrity checks"): a line when all are ok,
// else each check that is not ok with what it found and what it means; errors in red.
function integrityPanel(mode, analysis) {
  const integrity = analysis.integrity;
  if (!integrity) return el("p", { class: "po-muted", text: `${mode}: this record predates the integrity checks` });
  const checks = integrity.checks || [];
  const bad = [...checks.filter((c) => c.status === "error"), ...checks.filter((c) => c.status === "warning")];
  const offsets = Object.entries(integrity.clock_offsets_us || {});
  const clocks = offsets.length > 1 && offsets.length <= TABLE_RANKS ? el("p", { class: "po-muted", text: `${mode}: clock offsets against the reference rank: ` +
    offsets.map(([r, x]) => `rank ${r} ${exact(x)} ± ${exact(integrity.clock_uncertainty_us?.[r])} µs` +
      ((integrity.clock_moved || []).includes(Number(r)) ? " (moved)" : "")).join(", ") +
    ((integrity.clock_moved || []).length ? "; only offsets larger than their uncertainty move a rank's lanes"
      : "; every offset lies within its uncertainty, so no rank's lanes are moved") }) : null;
  if (!bad.length) {
    return el("div", { class: "po-integrity", "data-mode": mode },
      el("p", { class: "po-muted", text: `${mode}: all ${checks.length} integrity checks ok` }), clocks);
  }
  return el("div", { class: "po-integrity", "data-mode": mode },
    el("p", { text: `${mode}: ${bad.length} of ${checks.length} checks not ok` }),
    table(["check", "status", "found", "what it means"], bad.map((c) => [c.name, c.status, c.detail, c.meaning]),
      (i) => (bad[i].status === "error" ? "po-error" : "")),
    clocks);
}

// Where the aligned clock names another rank than the durations (the record's clock_slowest_rank), a line says so.
function disagreement(mode, analysis, slow) {
  const other = analysis.clock_slowest_rank;
  if (other == null || slow == null) return null;
  const pctOf = (rank) => analysis.ranks.find((r) => r.rank === rank)?.last_arrival_pct;
  return el("p", { class: "po-muted", text: `${mode}: rank ${slow} waits least by duration, but on the aligned clock rank ${other} ` +
    `started last at ${exact(pctOf(other))}% of its matched calls (rank ${slow} at ${exact(pctOf(slow))}%): a call that runs on ` +
    "after its peers' calls have ended counts as wait on that rank, so the two disagree; Why exposed goes by the aligned clock." });
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

// Each dimension (process groups of one kind: dp, tp, pp, ...) on its own, from the record's
// analysis.dimensions, and the pipeline's stages with their bubble (analysis.pipeline). Nothing is
// computed here; a job of one dimension has no table (its rank table says it all).
const DIMENSION_COLORS = ["#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"];

function hasDimensions(analysis) {
  return Object.keys(analysis.dimensions ?? {}).length >= 2 || analysis.pipeline != null;
}

function dimensionTable(mode, analysis) {
  const rows = [];
  const names = Object.keys(analysis.dimensions ?? {});
  names.forEach((name, i) => {
    const d = analysis.dimensions[name];
    const swatch = el("span", {}, el("i", { class: "po-swatch", style: `background:${DIMENSION_COLORS[i % DIMENSION_COLORS.length]}` }),
      `${name} (groups ${d.pg_names.join(", ")} of ${d.group_size ?? "?"})`);
    for (const [rank, x] of Object.entries(d.ranks)) {
      rows.push([mode, swatch.cloneNode(true), rank, x.calls, bytes(x.bytes), exact(x.comm_us), exact(x.hidden_us), exact(x.exposed_us),
        exact(x.wait_us), exact(x.transfer_us), exact(x.busbw_gbps)]);
    }
  });
  const parts = [table(["mode", "dimension", "rank", "calls", "bytes", "comm_us", "hidden_us", "exposed_us", "wait_us", "transfer_us",
    "busbw GB/s"], rows)];
  const p = analysis.pipeline;
  if (p) {
    parts.push(el("p", { class: "po-muted", text: `${mode}: pipeline stages ${p.stages.join(" → ")}, ${p.microbatches ?? "?"} microbatches ` +
      `per step, ideal bubble ${fixed(p.ideal_bubble_pct, 2)}% = (p-1)/(m+p-1)` }));
    parts.push(table(["mode", "rank", "stage", "bubble_us", "bubble %", "p2p_exposed_us", "idle_us"],
      Object.entries(p.ranks).map(([rank, x]) => [mode, rank, x.stage, exact(x.bubble_us), exact(x.bubble_pct), exact(x.p2p_exposed_us),
        exact(x.idle_us)])));
  }
  return el("div", { class: "po-dimensions", "data-mode": mode }, ...parts);
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

// Hidden vs exposed communication per phase (forward, backward, optimizer): the record summary's
// numbers (per profiled step, mean over ranks) where the record has them, and each rank's from
// the analysis (summed over the profiled steps). Empty for records without phase labels.
function phaseTables(mode, metrics) {
  const swatch = (p) => el("span", {}, el("i", { class: "po-swatch", style: `background:${PHASE_COLORS[p] || PHASE_OTHER_COLOR}` }), p);
  const out = [];
  let summaryPhases = metrics.summary?.modes?.[mode]?.phases;
  if (summaryPhases && !Array.isArray(summaryPhases)) summaryPhases = Object.entries(summaryPhases).map(([phase, p]) => ({ phase, ...p }));
  if (summaryPhases?.length) {
    const bar = hiddenBar(Math.max(...summaryPhases.map((p) => p.comm_ms ?? 0)));
    const t = table(["mode", "phase", "window ms", "comm ms", "compute ms", "hidden ms", "exposed comm ms", "hidden (green) | exposed (orange)"],
      summaryPhases.map((p) => [mode, swatch(p.phase), fixed(p.window_ms, 3), fixed(p.comm_ms, 3), fixed(p.compute_ms, 3),
        fixed(p.hidden_ms, 3), fixed(p.exposed_comm_ms, 3), bar(p.hidden_ms, p.exposed_comm_ms, "ms")]));
    t.dataset.phases = `${mode} summary`;
    t.tHead.rows[0].cells[1].style.textAlign = "left";
    out.push(t);
  }
  const analysis = metrics.modes[mode]?.analysis;
  const ranks = analysis && !many(analysis) ? analysis.ranks.filter((r) => r.phases?.length) : [];
  if (ranks.length) {
    const bar = hiddenBar(Math.max(...ranks.flatMap((r) => r.phases.map((p) => p.comm_us ?? 0))));
    const rows = ranks.flatMap((r) => r.phases.map((p) => [mode, r.rank, swatch(p.phase), exact(p.window_us), exact(p.comm_us),
      exact(p.compute_us), exact(p.overlap_us), exact(p.exposed_comm_us), bar(p.overlap_us, p.exposed_comm_us, "µs")]));
    const t = table(["mode", "rank", "phase", "window_us", "comm_us", "compute_us", "hidden (overlap_us)", "exposed_comm_us",
      "hidden (green) | exposed (orange)"], rows);
    t.dataset.phases = `${mode} ranks`;
    t.tHead.rows[0].cells[2].style.textAlign = "left";
    out.push(foldable(mode, "phase", t));
  }
  return out;
}

// A bar of hidden (green, the overlap lane's colour) then exposed (orange) communication, scaled
// to the largest communication in its table.
function hiddenBar(max) {
  return (hidden, exposed, unit) => el("div", { class: "po-bar", title: `hidden ${fixed(hidden, 3)} ${unit}, exposed ${fixed(exposed, 3)} ${unit}` },
    el("i", { class: "po-hidden", style: `width:${100 * (hidden ?? 0) / (max || 1)}%` }),
    el("i", { class: "po-exposed", style: `width:${100 * (exposed ?? 0) / (max || 1)}%` }));
}

// ------------------------------------------------------------------ explain

function explain(n) {
  // Rank r holds n consecutive numbers r·n+1 … r·n+n. These are the definitions of the
  // collectives applied to that example, not measurements.
  // Only the shown rows and entries are built: the whole example is n × n numbers (a million at 1,024 ranks).
  const input = (r, j) => r * n + j + 1;
  const sum = (j) => n * (j + 1) + n * n * (n - 1) / 2; // Σ_r (r·n + j + 1)
  const vec = (len, at) => (len <= 8 ? `[${Array.from({ length: len }, (_, j) => at(j)).join(", ")}]`
    : `[${at(0)}, ${at(1)}, ${at(2)}, …, ${at(len - 1)}]`);
  const shown = n <= 8 ? Array.from({ length: n }, (_, r) => r) : [0, 1, 2, null, n - 1];
  const rows = shown.map((r) => (r === null ? ["…", "…", "…", "…", "…"]
    : [r, vec(n, (j) => input(r, j)), vec(n, sum), vec(1, () => sum(r)), vec(n, sum)]));
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

// Perfetto opens a local file only when it is dropped onto it or served: offer the download and the command.
function adviceList(lines) {
  // The top three items of advice.json (`advise`), as the console words them.
  return el("div", { id: "po-advice" }, el("h3", { text: "What to change (advise: ranked by predicted gain)" }),
    el("ol", {}, ...lines.map((line) => el("li", { text: line }))));
}

function perfettoLink(run) {
  return el("p", { class: "po-muted", id: "po-perfetto" }, "Open in Perfetto: every event of every rank on one clock, with the overlap drawn in: ",
    el("a", { href: `perfetto?run=${encodeURIComponent(run.run)}`, download: "perfetto.json.gz", text: "perfetto.json.gz" }),
    " (drop it onto ui.perfetto.dev, or run python -m profile_overlap perfetto RUN --open for a local Perfetto UI).");
}

// ------------------------------------------------------------------ the page

async function showRun(main, run, view) {
  main.replaceChildren(el("p", { class: "po-muted", text: `loading ${run.run} …` }));
  const metrics = await getJSON(`metrics?run=${encodeURIComponent(run.run)}`);
  const modes = view === "all" ? run.modes : [view]; // the run's order, as in metrics.json and the report
  const timelines = [];
  // Two modes side by side; three or more stacked, each as wide as the page.
  const panels = el("div", { class: `po-panels po-cols-${modes.length === 2 ? 2 : 1}` });
  for (const mode of modes) {
    const analysis = metrics.modes[mode]?.analysis;
    if (!run.has_timeline || !analysis) {
      panels.append(el("section", { class: "po-panel" }, el("h3", { text: run.mode_titles[mode] || mode }),
        el("p", { class: "po-muted", text: run.status === "failed" && !analysis
          ? "no timeline: the run failed before this mode was profiled" : "not profiled: no timeline for this mode" })));
      continue;
    }
    const reply = await getJSON(`timeline?run=${encodeURIComponent(run.run)}&mode=${encodeURIComponent(mode)}&max_spans=${maxSpans(run.world_size)}`);
    const tl = new Timeline(mode, reply, analysis, slowestRank(metrics, mode), run.mode_titles[mode]);
    timelines.push(tl);
    panels.append(tl.node);
  }
  // One time scale for every panel (each from its own first profiled step), so that the modes' steps compare by eye.
  const longest = Math.max(...timelines.map((tl) => tl.t1 - tl.t0));
  for (const tl of timelines) tl.setFull(tl.t0, tl.t0 + longest);
  const analysed = modes.filter((m) => metrics.modes[m]?.analysis);
  const heatmaps = run.has_timeline ? await Promise.all(analysed.map((m) => heatmapPanel(run, m))) : [];
  const phases = analysed.flatMap((m) => phaseTables(m, metrics));
  const small = analysed.filter((m) => !many(metrics.modes[m].analysis));
  const large = analysed.filter((m) => many(metrics.modes[m].analysis));
  const world = metrics.env?.world_size ?? metrics.modes[analysed[0]]?.analysis?.world_size;
  const parts = [
    failures(metrics, run.status),
    summary(metrics, modes.filter((m) => metrics.modes[m])),
    run.perfetto ? perfettoLink(run) : null,
    run.advice?.length ? adviceList(run.advice) : null,
    panels,
    ...(heatmaps.length ? [
      el("h3", { text: "Every rank over the median step: where communication is exposed (rank x time heatmap)" }),
      ...heatmaps] : []),
    ...(phases.length ? [
      el("h3", { text: "Per phase: communication hidden behind compute vs exposed (forward, backward, optimizer)" }),
      el("p", { class: "po-muted", text: "hidden = the phase's communication that overlaps its compute (overlap_us); exposed = the " +
        "rest of the communication inside the phase's window. Summary rows: per profiled step, mean over ranks; rank rows: " +
        "summed over the profiled steps." }),
      ...phases] : []),
    ...(analysed.length ? [
      el("h3", { text: "Integrity: what the traces say about their own numbers" }),
      ...analysed.map((m) => integrityPanel(m, metrics.modes[m].analysis)),
      ...(large.length ? [el("h3", { text: "Over the ranks: each number's spread, worst and best ranks, outliers" }),
        ...large.map((m) => spreadTable(m, metrics.modes[m].analysis))] : [])] : []),
    ...(analysed.some((m) => hasDimensions(metrics.modes[m].analysis)) ? [
      el("h3", { text: "Per dimension (process groups of one kind) and pipeline stage" }),
      el("p", { class: "po-muted", text: "Each dimension's calls on each rank, inside the step windows: exposed = the union of its calls " +
        "minus compute; dimensions can run at once, so their exposed times add up to at least the rank's. Bubble = the step minus " +
        "the stage's compute: exposed point-to-point communication + idle." }),
      ...analysed.filter((m) => hasDimensions(metrics.modes[m].analysis)).map((m) => dimensionTable(m, metrics.modes[m].analysis))] : []),
    ...(small.length ? [
      el("h3", { text: "Ranks: overlap, and the wait vs transfer split (stragglers)" }),
      el("p", { class: "po-muted", text: "Each collective call is matched across ranks; transfer = the fastest rank's duration, " +
        "wait = the rest. ◆ (red row) is the rank that waits least: the others wait for it." }),
      ...small.flatMap((m) => [rankTable(m, metrics.modes[m].analysis, slowestRank(metrics, m)),
        disagreement(m, metrics.modes[m].analysis, slowestRank(metrics, m))]).filter((p) => p != null),
      el("h3", { text: "Per profiler step (each metric clipped to the ProfilerStep#N window)" }),
      ...small.map((m) => stepTable(m, metrics.modes[m].analysis)),
      el("h3", { text: "Per collective (totals per rank; algbw = S/t, busbw = algbw · factor(kind, n), as nccl-tests)" }),
      ...small.map((m) => collectiveTable(m, metrics.modes[m].analysis))] : []),
    world ? explain(world) : null];
  main.replaceChildren(...parts.filter((p) => p != null)); // replaceChildren(null) would show "null"
  for (const tl of timelines) tl.draw();
  const ro = new ResizeObserver(() => timelines.forEach((tl) => tl.schedule()));
  timelines.forEach((tl) => ro.observe(tl.canvas));
  document.body.dataset.readyMs = String(Math.round(performance.now())); // the frame's own load time (bench_scale.py)
  document.body.dataset.ready = "true";
}

export async function render() {
  document.head.append(el("link", { rel: "stylesheet", href: "style.css" }));
  const runSelect = el("select", { id: "po-run" });
  const viewSelect = el("select", { id: "po-view" });
  const main = el("main", { class: "po-main" });
  const brokenList = el("div", { id: "po-broken" });
  document.body.append(el("header", { class: "po-header" },
    el("b", { text: "Overlap" }), el("label", {}, "run ", runSelect), el("label", {}, "view ", viewSelect)), brokenList, main);
  let runs, broken;
  try {
    const reply = await getJSON("runs");
    setPhases(reply.phases);
    runs = reply.runs.filter((r) => !r.error);
    broken = reply.runs.filter((r) => r.error);
  } catch (err) {
    main.replaceChildren(el("p", { class: "po-error", text: String(err.message || err) }));
    return;
  }
  // Runs whose files cannot be read: listed with the server's one-line reason, not offered.
  if (broken.length) {
    brokenList.append(el("details", { class: "po-broken", open: "" },
      el("summary", { text: `${broken.length} run${broken.length > 1 ? "s" : ""} under the logdir cannot be shown` }),
      el("ul", {}, ...broken.map((r) => el("li", { "data-run": r.run }, el("b", { text: r.run }), `: ${r.error}`)))));
  }
  if (!runs.length) {
    main.replaceChildren(el("p", { text: broken.length ? "No run under the logdir can be shown (the broken ones are listed above)."
      : "No run folders (with metrics.json) under the logdir." }));
    document.body.dataset.ready = "true";
    return;
  }
  runs.forEach((r, i) => runSelect.append(el("option", { value: String(i), text: `${r.run}${r.status ? ` (${r.status})` : ""}` })));
  const fillViews = () => {
    const run = runs[+runSelect.value];
    viewSelect.replaceChildren();
    const modes = run.modes;
    if (modes.length > 1) {
      viewSelect.append(el("option", { value: "all", text: `${modes.join(" | ")}${modes.length === 2 ? ", side by side" : ", stacked"}` }));
    }
    for (const m of modes) viewSelect.append(el("option", { value: m, text: m }));
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
