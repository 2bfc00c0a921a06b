"use strict";
// Data lives in JSON script elements written by page.py: "manifest", one list
// per group ("s0g3") and one text per trace ("s0g3t17"). Each is parsed only when first needed, so
// opening the page costs nothing per trace; the list is drawn PAGE rows at a time while scrolling.
// This script runs before the trace texts are read (they follow it in the file): until the browser
// has read one, data() of it is null.

const PAGE = 200;
const cache = new Map();
function data(id) {
  if (!cache.has(id)) {
    const el = document.getElementById(id);
    if (!el) return null;
    try {
      cache.set(id, JSON.parse(el.textContent));
    } catch (e) {
      if (document.readyState === "loading") return null;  // the parser is still inside this element
      throw e;
    }
  }
  return cache.get(id);
}

const sources = data("manifest");
const compare = sources.length > 1;
const state = { groups: sources.map(() => 0), score: "all", eos: "all", chunks: "all", src: "all",
                sort: "index", shown: [], drawn: 0, open: null };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k.startsWith("on")) node[k] = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

function select(id, label, options, value, onchange) {
  const s = el("select", { id, onchange: (e) => onchange(e.target.value) });
  for (const [v, text] of options) s.append(el("option", { value: v }, text));
  s.value = value;
  return el("label", {}, label + " ", s);
}

function groupList(s) { return data(sources[s].groups[state.groups[s]].id); }
function groupId(s) { return sources[s].groups[state.groups[s]].id; }

function drawControls() {
  const c = document.getElementById("controls");
  c.replaceChildren();
  sources.forEach((src, s) => {
    const opts = src.groups.map((g, i) => [String(i), `${g.name} (${g.count})`]);
    const name = compare ? `${s === 0 ? "A" : "B"}: ${src.name}` : "step";
    c.append(select(`group-${s}`, name, opts, String(state.groups[s]), (v) => {
      state.groups[s] = Number(v); state.open = null; drawControls(); refresh();
      document.getElementById("detail").replaceChildren(el("p", { class: "hint" }, "Pick a trajectory on the left."));
    }));
  });
  const rows = groupList(0);
  const counts = [...new Set(rows.map((r) => r.n))].sort((a, b) => a - b);
  const srcs = [...new Set(rows.map((r) => r.src))].sort();
  if (state.chunks !== "all" && !counts.includes(Number(state.chunks))) state.chunks = "all";
  if (state.src !== "all" && !srcs.includes(state.src)) state.src = "all";
  const set = (key) => (v) => { state[key] = v; refresh(); };
  c.append(
    select("f-score", "score", [["all", "any"], ["pos", "> 0"], ["zero", "≤ 0"]], state.score, set("score")),
    select("f-eos", "EOS", [["all", "any"], ["yes", "yes"], ["no", "no"]], state.eos, set("eos")),
    select("f-chunks", "chunks", [["all", "any"], ...counts.map((n) => [String(n), String(n)])], state.chunks, set("chunks")),
    select("f-src", "data source", [["all", "any"], ...srcs.map((x) => [x, x])], state.src, set("src")),
    select("sort", "sort", [["index", "index"], ["score-", "score ↓"], ["score+", "score ↑"],
      ["tok-", "thinking tokens ↓"], ["tok+", "thinking tokens ↑"], ["n-", "chunks ↓"], ["n+", "chunks ↑"]],
      state.sort, set("sort")),
    el("span", { id: "count" }));
}

function keep(r) {
  return (state.score === "all" || (state.score === "pos" ? r.score > 0 : r.score <= 0))
    && (state.eos === "all" || r.eos === (state.eos === "yes"))
    && (state.chunks === "all" || r.n === Number(state.chunks))
    && (state.src === "all" || r.src === state.src);
}

function partners() {
  if (!compare) return null;
  return new Map(groupList(1).map((r) => [r.key, r]));
}

function refresh() {
  const rows = groupList(0).filter(keep);
  if (state.sort !== "index") {
    const key = state.sort.slice(0, -1), sign = state.sort.endsWith("-") ? -1 : 1;
    rows.sort((a, b) => sign * (a[key] - b[key]) || a.i - b.i);
  }
  state.shown = rows; state.drawn = 0; state.pairs = partners();
  document.getElementById("count").textContent = `${rows.length} of ${groupList(0).length} shown`;
  const head = ["#", "source", "score", "EOS", "chunks", "tokens", "finish", "answer"];
  if (compare) head.push("B score", "B chunks", "B tokens");
  document.getElementById("list-head").replaceChildren(el("tr", {}, ...head.map((h) => el("th", {}, h))));
  document.getElementById("rows").replaceChildren();
  drawMore();
  if (state.open !== null) openTrace(state.open);
}

function fmt(score) { return String(Math.round(score * 1000) / 1000); }
function scoreCell(score) { return el("td", { class: score > 0 ? "good" : "bad" }, fmt(score)); }

function drawMore() {
  const body = document.getElementById("rows");
  const end = Math.min(state.drawn + PAGE, state.shown.length);
  for (const r of state.shown.slice(state.drawn, end)) {
    const tr = el("tr", { class: "row" + (r.i === state.open ? " open" : ""), "data-i": r.i, onclick: () => openTrace(r.i) },
      el("td", {}, String(r.i)), el("td", {}, r.src), scoreCell(r.score), el("td", {}, r.eos ? "yes" : "no"),
      el("td", {}, String(r.n)), el("td", {}, String(r.tok)), el("td", {}, r.fin), el("td", { title: r.ans ?? "" }, r.ans ?? "—"));
    const b = state.pairs && state.pairs.get(r.key);
    if (state.pairs) tr.append(b ? scoreCell(b.score) : el("td", {}, "—"), el("td", {}, b ? String(b.n) : "—"), el("td", {}, b ? String(b.tok) : "—"));
    body.append(tr);
  }
  state.drawn = end;
}

new IntersectionObserver((entries) => {
  if (entries.some((e) => e.isIntersecting) && state.drawn < state.shown.length) drawMore();
}, { root: document.getElementById("list") }).observe(document.getElementById("more"));

function openTrace(i) {
  state.open = i;
  for (const tr of document.querySelectorAll("tr.row")) tr.classList.toggle("open", Number(tr.dataset.i) === i);
  const a = groupList(0).find((r) => r.i === i);
  const b = compare ? state.pairs.get(a.key) : null;
  if (data(`${groupId(0)}t${i}`) === null || (b && data(`${groupId(1)}t${b.i}`) === null)) {
    document.getElementById("detail").replaceChildren(el("p", { class: "hint" }, "Still reading this trajectory from the file…"));
    document.addEventListener("DOMContentLoaded", () => { if (state.open === i) openTrace(i); }, { once: true });
    return;
  }
  const panes = [drawTrace(a, `${groupId(0)}t${i}`, compare ? `A: ${sources[0].groups[state.groups[0]].name}` : null)];
  if (compare) {
    const label = `B: ${sources[1].groups[state.groups[1]].name}`;
    panes.push(b ? drawTrace(b, `${groupId(1)}t${b.i}`, label) : el("div", { class: "trace hint" }, `${label}: no trajectory with this prompt and sample`));
  }
  document.getElementById("detail").replaceChildren(...panes);
}

function drawTrace(r, id, label) {
  const d = data(id);
  const meta = el("div", { class: "meta" },
    el("span", {}, el("b", {}, "score "), el("span", { class: r.score > 0 ? "good" : "bad" }, fmt(r.score))),
    el("span", {}, el("b", {}, "answer "), r.ans ?? "none"), el("span", {}, el("b", {}, "truth "), r.gt),
    el("span", {}, el("b", {}, "finish "), r.fin), el("span", {}, el("b", {}, "EOS "), r.eos ? "yes" : "no"),
    el("span", {}, el("b", {}, "chunks "), String(r.n)), el("span", {}, el("b", {}, "thinking tokens "), String(r.tok)));
  const legend = el("div", { class: "legend" },
    ...(d.carry ? [el("span", { class: "head" }, `carried head (first ${d.keep[0]} tokens)`),
                   el("span", { class: "tail" }, `carried tail (last ${d.keep[1]} tokens)`)] : []),
    el("span", { class: "think_end" }, "</think>"), el("span", { class: "answer" }, "answer"),
    el("span", { class: "split_char" }, "character split by a boundary"),
    d.carry ? el("span", { class: "hint" }, "click a chunk header to show only what it was prompted with") : "");
  const pane = el("div", { class: "trace" }, ...(label ? [el("h3", {}, label)] : []), meta,
    el("div", { class: "question" }, d.question), legend);
  const bodies = d.chunks.map(() => el("div", { class: "chunk" }));
  for (const [text, chunk, heads, tails, marks] of d.segs) {
    const cls = [...marks, ...(heads.length ? ["head"] : []), ...(tails.length ? ["tail"] : [])];
    const why = [...heads.map((k) => `head carried into chunk ${k + 1}`), ...tails.map((k) => `tail carried into chunk ${k + 1}`)];
    bodies[chunk].append(el("span", { class: cls.join(" "), "data-into": [...heads, ...tails].join(" "), title: why.join("; ") }, text));
  }
  d.chunks.forEach((c, k) => {
    const carried = k > 0 && d.carry ? ` · prompt: question + carry-over (${c.ptok} tokens in all)` : "";
    const header = el("div", { class: "chunk-head" },
      `chunk ${k + 1} · ${c.tok ?? "?"} tokens · finish: ${c.fin}${carried}`);
    if (k > 0 && d.carry) header.onclick = () => focusChunk(pane, k);
    pane.append(header, bodies[k]);
  });
  return pane;
}

function focusChunk(pane, k) {
  const off = pane.dataset.focus === String(k);
  pane.dataset.focus = off ? "" : String(k);
  pane.classList.toggle("dim", !off);
  pane.querySelectorAll(".chunk-head").forEach((h, j) => h.classList.toggle("focused", !off && j === k));
  for (const s of pane.querySelectorAll("span[data-into]")) {
    s.classList.toggle("focus", !off && s.dataset.into.split(" ").includes(String(k)));
  }
}

drawControls();
refresh();
