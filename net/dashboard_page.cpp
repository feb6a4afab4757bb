#include "net/dashboard_page.h"

namespace astrai::net {

// Rates and the batch size are computed here from the cumulative counters of two polls (generated
// tokens, steps, avg_batch_size * steps) a second or more apart, so each point is the figure over
// that interval rather than since start-up;
// latency percentiles are the engine's over its recent samples.
std::string_view dashboard_page_html() {
  static constexpr std::string_view kPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>astrai dashboard</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; background: #f5f6f8; color: #222; }
  header { padding: 8px 16px; background: #223; color: #eef; display: flex; gap: 16px; align-items: center; }
  header input { width: 14em; }
  #status { margin-left: auto; font-size: 13px; }
  #status.error { color: #f99; }
  #tiles { display: flex; flex-wrap: wrap; gap: 8px; padding: 12px 16px 0; }
  .tile { background: #fff; border-radius: 6px; padding: 6px 12px; min-width: 9em; box-shadow: 0 1px 2px #0002; }
  .tile b { display: block; font-size: 20px; }
  .tile span { font-size: 12px; color: #666; }
  #charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(420px, 1fr)); gap: 12px; padding: 12px 16px; }
  .chart { background: #fff; border-radius: 6px; padding: 8px 10px; box-shadow: 0 1px 2px #0002; }
  .chart h3 { margin: 0 0 4px; font-size: 14px; font-weight: 600; }
  .chart canvas { width: 100%; height: 160px; display: block; }
  .legend { font-size: 12px; color: #444; display: flex; gap: 12px; flex-wrap: wrap; }
  .legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; border-radius: 2px; }
</style>
</head>
<body>
<header><strong>astrai</strong><span id="model"></span><span>last 5 minutes</span>
  <label>API key <input id="api_key" type="password" autocomplete="off"></label>
  <span id="status">connecting…</span></header>
<div id="tiles"></div>
<div id="charts"></div>
<script>
"use strict";
const params = new URLSearchParams(location.search);
const interval = Math.max(100, parseInt(params.get("interval") || "1000", 10));
const windowSeconds = 300;
const samples = [];
window.__samples = samples;
const charts = [
  {id: "tps", title: "Throughput (tokens/s)", series: [["gen_tps", "generated", "#2a6fdb"], ["prompt_tps", "prompt", "#e08a1e"]]},
  {id: "ttft", title: "Time to first token (ms)", series: [["ttft_p50", "p50", "#2a9d5b"], ["ttft_p99", "p99", "#c0392b"]]},
  {id: "itl", title: "Inter-token latency (ms)", series: [["itl_p50", "p50", "#2a9d5b"], ["itl_p99", "p99", "#c0392b"]]},
  {id: "reqs", title: "Requests", series: [["running", "running", "#2a6fdb"], ["waiting", "waiting", "#c0392b"]]},
  {id: "batch", title: "Batch size (sequences per step)", series: [["batch", "batch", "#7b3fb5"]]},
  {id: "kv", title: "KV cache pages", series: [["kv_used", "used", "#2a6fdb"], ["kv_cached", "cached (prefix)", "#2a9d5b"], ["kv_total", "total", "#999", false]]},
  {id: "hit", title: "Prefix-cache hit rate (%)", series: [["hit_rate", "hit rate", "#e08a1e"]], max: 100},
];
const tiles = [
  ["gen_tps", "generated tokens/s", 1], ["running", "running", 0], ["waiting", "waiting", 0],
  ["ttft_p50", "TTFT p50 ms", 1], ["itl_p50", "ITL p50 ms", 2], ["batch", "batch size", 1],
  ["kv_used", "KV pages used", 0], ["hit_rate", "prefix hit %", 1],
];
const chartsEl = document.getElementById("charts");
for (const c of charts) {
  const div = document.createElement("div");
  div.className = "chart";
  div.id = "chart-" + c.id;
  div.innerHTML = "<h3></h3><canvas></canvas><div class='legend'></div>";
  div.querySelector("h3").textContent = c.title;
  chartsEl.appendChild(div);
  c.canvas = div.querySelector("canvas");
  c.legend = div.querySelector(".legend");
}
const tilesEl = document.getElementById("tiles");
for (const [key, label] of tiles) {
  const div = document.createElement("div");
  div.className = "tile";
  div.innerHTML = "<b id='tile-" + key + "'>–</b><span></span>";
  div.querySelector("span").textContent = label;
  tilesEl.appendChild(div);
}
function headers() {
  const key = document.getElementById("api_key").value;
  return key ? {"Authorization": "Bearer " + key} : {};
}
function fmt(v, digits) {
  if (!isFinite(v)) return "–";
  return v >= 1000 ? Math.round(v).toLocaleString("en") : v.toFixed(digits);
}
function draw(c) {
  const dpr = window.devicePixelRatio || 1;
  const w = c.canvas.clientWidth, h = c.canvas.clientHeight;
  if (c.canvas.width !== Math.round(w * dpr)) { c.canvas.width = Math.round(w * dpr); c.canvas.height = Math.round(h * dpr); }
  const g = c.canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const left = 48, right = 8, top = 6, bottom = 18;
  let max = c.max || 0;
  // Series marked false show in the legend only (the pool's total would flatten used and cached).
  if (!c.max) for (const s of samples) for (const [k, , , plot] of c.series) if (plot !== false) max = Math.max(max, s[k] || 0);
  if (max <= 0) max = 1;
  max *= c.max ? 1 : 1.1;
  // The time axis spans the data, from 30 s up to the whole window.
  const now = samples.length ? samples[samples.length - 1].t : 0;
  const span = Math.min(windowSeconds, Math.max(30, samples.length ? now - samples[0].t : 0));
  const X = (t) => left + (w - left - right) * (1 - (now - t) / span);
  const Y = (v) => top + (h - top - bottom) * (1 - v / max);
  g.strokeStyle = "#e3e3e3";
  g.fillStyle = "#777";
  g.font = "11px system-ui, sans-serif";
  g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = max * i / 4, y = Y(v);
    g.beginPath(); g.moveTo(left, y); g.lineTo(w - right, y); g.stroke();
    g.fillText(fmt(v, max < 10 ? 2 : 0), 2, y + 4);
  }
  const step = [5, 10, 15, 30, 60].find((s) => span / s <= 6) || 60;
  for (let a = 0; a <= span + 0.01; a += step) {
    const label = a === 0 ? "now" : a % 60 === 0 ? "-" + a / 60 + "m" : "-" + a + "s";
    g.fillText(label, Math.min(X(now - a) - 10, w - right - 22), h - 4);
  }
  for (const [k, , color, plot] of c.series) {
    if (plot === false) continue;
    g.strokeStyle = color;
    g.lineWidth = 1.8;
    g.beginPath();
    let started = false;
    for (const s of samples) {
      if (s[k] === undefined) continue;
      const x = X(s.t), y = Y(Math.min(s[k], max));
      if (!started) { g.moveTo(x, y); started = true; } else g.lineTo(x, y);
    }
    g.stroke();
  }
  const last = samples[samples.length - 1] || {};
  c.legend.innerHTML = "";
  for (const [k, label, color] of c.series) {
    const span = document.createElement("span");
    span.innerHTML = "<i></i>";
    span.querySelector("i").style.background = color;
    span.appendChild(document.createTextNode(label + " " + fmt(last[k], 1)));
    c.legend.appendChild(span);
  }
}
function sample(s, t) {
  const lat = s.latency_ms;
  const x = {
    t, running: s.requests.running, waiting: s.requests.waiting,
    ttft_p50: lat.ttft.p50, ttft_p99: lat.ttft.p99, itl_p50: lat.itl.p50, itl_p99: lat.itl.p99,
    kv_used: s.kv.pages_used, kv_total: s.kv.pages_total, kv_cached: s.prefix_cache.cached_pages,
    hit_rate: 100 * s.prefix_cache.hit_rate,
    gen: s.tokens.generated, prompt: s.tokens.prompt, steps: s.steps, seqs: s.avg_batch_size * s.steps,
  };
  // Rates over at least the last second (a faster poll would otherwise show each step's burst).
  let back = null;
  for (let i = samples.length - 1; i >= 0; i--) {
    back = samples[i];
    if (t - back.t >= 1) break;
  }
  if (back && t > back.t) {
    const dt = t - back.t, ds = x.steps - back.steps;
    x.gen_tps = (x.gen - back.gen) / dt;
    x.prompt_tps = (x.prompt - back.prompt) / dt;
    x.batch = ds > 0 ? (x.seqs - back.seqs) / ds : 0;
  }
  return x;
}
async function poll() {
  const status = document.getElementById("status");
  try {
    const r = await fetch("/stats", {headers: headers(), cache: "no-store"});
    const s = await r.json();
    if (!r.ok) throw new Error((s.error && s.error.message) || r.statusText);
    document.getElementById("model").textContent = s.model || "";
    samples.push(sample(s, performance.now() / 1000));
    while (samples.length && samples[samples.length - 1].t - samples[0].t > windowSeconds) samples.shift();
    for (const c of charts) draw(c);
    const last = samples[samples.length - 1];
    for (const [key, , digits] of tiles) document.getElementById("tile-" + key).textContent = fmt(last[key], digits);
    status.className = "";
    status.textContent = "updated " + new Date().toLocaleTimeString("en-GB") + " · uptime " + Math.round(s.uptime_s) + " s";
  } catch (e) {
    status.className = "error";
    status.textContent = "error: " + e.message;
  }
  setTimeout(poll, interval);
}
window.addEventListener("resize", () => { for (const c of charts) draw(c); });
poll();
</script>
</body>
</html>
)HTML";
  return kPage;
}

}  // namespace astrai::net
