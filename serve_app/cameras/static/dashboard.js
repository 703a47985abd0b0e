"use strict";
// The camera dashboard (served as /static/dashboard.js: the page's Content-Security-Policy allows
// scripts from the server only, no inline scripts).
// The API key is kept in this tab's sessionStorage and sent only in the Authorization header,
// never in a URL. Events are read with fetch() streaming (EventSource cannot send headers).
const KEY_ITEM = "cosmos-serve-key";
const SVG = "http://www.w3.org/2000/svg";
const cams = new Map();   // id -> {status, root, ..., points: [{f, l}]}
let lastEventId = "", aborter = null;

function headers(extra) {
  const h = Object.assign({}, extra || {});
  const k = sessionStorage.getItem(KEY_ITEM);
  if (k) h["Authorization"] = "Bearer " + k;
  return h;
}
async function api(path, opts) {
  opts = opts || {};
  const r = await fetch(path, Object.assign({}, opts, {headers: headers(opts.headers)}));
  if (r.status === 401) { askKey("The key was refused."); throw new Error("unauthorized"); }
  return r;
}
function askKey(msg) {
  document.getElementById("keybox").hidden = false;
  document.getElementById("keyerr").textContent = msg || "";
  document.getElementById("conn").textContent = "waiting for the API key";
}

function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls; if (text != null) e.textContent = text; return e; }
function svgEl(tag, attrs) { const e = document.createElementNS(SVG, tag); for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v); return e; }
function updateEmpty() { document.getElementById("empty").hidden = cams.size > 0; }

function card(id) {
  let c = cams.get(id);
  if (c) return c;
  const root = el("section", "cam"); root.dataset.stream = id;
  const h = el("h2"); const name = el("span", "name", id); const state = el("span", "state", "…");
  const rm = el("button", "rm", "remove"); rm.type = "button"; rm.onclick = () => removeCam(id);
  rm.setAttribute("aria-label", "remove camera " + id);
  h.append(name, state, rm);
  const src = el("p", "src");
  // No frame yet: a placeholder, never a broken image.
  const thumb = el("div", "thumb"); const ph = el("div", "ph", "no frame yet");
  const img = el("img"); img.alt = "latest window of camera " + id; img.hidden = true;
  thumb.append(img, ph);
  const answer = el("div", "answer", "(no answer yet)");
  const rw = el("div", "rw"); const alertmsg = el("div", "alertmsg");
  const lasterr = el("p", "lasterr"); lasterr.hidden = true;
  const reasoning = el("div", "reasoning"); reasoning.tabIndex = 0;
  const spark = svgEl("svg", {"class": "spark", viewBox: "0 0 100 40", preserveAspectRatio: "none", role: "img",
                              "aria-label": "freshness and latency of recent answers: none yet"});
  const legend = el("div", "legend");
  for (const [cls, text] of [["f", "freshness (s)"], ["l", "latency (s)"]]) {
    const item = el("span"); item.append(el("span", "sw " + cls), text); legend.append(item);
  }
  const scale = el("span", "scale"); legend.append(scale);
  const meta = el("div", "meta");
  root.append(h, src, thumb, answer, rw, alertmsg, lasterr, reasoning, spark, legend, meta);
  document.getElementById("grid").append(root);
  c = {root, name, state, rm, src, img, ph, answer, rw, alertmsg, lasterr, reasoning, spark, scale, meta,
       points: [], status: null, answers: 0, alerts: 0, imgUrl: null};
  cams.set(id, c);
  updateEmpty();
  return c;
}
function dropCard(id) {
  const c = cams.get(id); if (!c) return;
  if (c.imgUrl) URL.revokeObjectURL(c.imgUrl);
  c.root.remove(); cams.delete(id); updateEmpty();
}
function renderStatus(c, s) {
  c.status = s;
  const label = s.name || s.id;
  c.name.textContent = label; c.name.title = label;   // cut with an ellipsis when long: the whole name on hover
  c.rm.setAttribute("aria-label", "remove camera " + label);
  c.img.alt = "latest window of camera " + label;
  c.src.textContent = s.url; c.src.title = s.url;
  setState(c, s.state, s.last_error);
  const dropped = Object.values(s.windows_dropped || {}).reduce((a, b) => a + b, 0);
  const f = s.freshness_s || {}, l = s.latency_ms || {};
  c.meta.replaceChildren();
  for (const [k, v] of [["answered", s.windows_answered], ["dropped", dropped], ["frames", s.frames_received],
                        ["reconnects", s.reconnects], ["fresh p50/p95 s", fmt(f.p50) + "/" + fmt(f.p95)],
                        ["latency p95 ms", fmt(l.p95)],
                        ...(s.skip_unchanged ? [["skipped", s.windows_skipped]] : [])]) {
    const span = el("span", null, k + ": " + v); span.dataset.k = k.split(" ")[0]; c.meta.append(span);
  }
  if (dropped) c.meta.title = JSON.stringify(s.windows_dropped);
  if (s.last_answer && !c.answers) showAnswer(c, {answer: s.last_answer.answer, reasoning: s.last_answer.reasoning, random_weights: s.last_answer.random_weights});
}
function fmt(x) { return x == null ? "–" : (Math.round(x * 100) / 100).toString(); }
function setState(c, state, error) {
  c.state.textContent = state; c.state.className = "state " + state;
  c.root.dataset.state = state;
  // The camera's last error stays on its card (not only in a tooltip).
  c.lasterr.textContent = error ? "last error: " + error : "";
  c.lasterr.hidden = !error;
  if (!c.imgUrl) c.ph.textContent = state === "failed" ? "no frame: the camera failed" : "no frame yet";
}
function showAnswer(c, ev) {
  c.answer.textContent = ev.answer;
  c.reasoning.textContent = ev.reasoning ? "reasoning: " + ev.reasoning : "";
  c.rw.textContent = ev.random_weights ? "random-weight model: the text is meaningless" : "";
  c.root.dataset.answered = "1";
}
async function refreshThumb(id) {
  const c = cams.get(id); if (!c) return;
  const r = await api("v1/streams/" + encodeURIComponent(id) + "/thumbnail");
  if (r.status !== 200) return;
  const url = URL.createObjectURL(await r.blob());
  if (c.imgUrl) URL.revokeObjectURL(c.imgUrl);
  c.imgUrl = url; c.img.src = url;
  c.img.hidden = false; c.ph.hidden = true;
}
function drawSpark(c) {
  const pts = c.points.slice(-60); if (!pts.length) return;
  const drawn = pts.length === 1 ? [pts[0], pts[0]] : pts;   // one answer: a flat line, not an invisible point
  const max = Math.max(1e-3, ...pts.map(p => Math.max(p.f, p.l)));
  const line = key => drawn.map((p, i) => `${(i / (drawn.length - 1)) * 100},${40 - (p[key] / max) * 38}`).join(" ");
  // latency underneath and wider, freshness on top: both stay visible where they coincide
  c.spark.replaceChildren(svgEl("polyline", {"class": "l", points: line("l")}), svgEl("polyline", {"class": "f", points: line("f")}));
  c.spark.setAttribute("data-points", pts.length);
  const last = pts[pts.length - 1];
  c.spark.setAttribute("aria-label", `freshness (blue) and latency (orange) of the last ${pts.length} answers, ` +
                       `scale 0–${max.toFixed(2)} s; latest: freshness ${fmt(last.f)} s, latency ${fmt(last.l)} s`);
  c.scale.textContent = "scale 0–" + max.toFixed(2) + " s";
}
function onEvent(type, ev) {
  if (type === "answer") {
    const c = card(ev.stream_id);
    if (ev.question_index === 0) {
      c.answers++; showAnswer(c, ev);
      c.points.push({f: ev.timings.freshness_s, l: ev.timings.latency_ms / 1000}); drawSpark(c);
      refreshThumb(ev.stream_id).catch(() => {});
    }
  } else if (type === "alert") {
    const c = card(ev.stream_id); c.alerts++;
    c.root.classList.add("alert"); c.alertmsg.textContent = "ALERT: " + ev.matched.join(", ");
    setTimeout(() => c.root.classList.remove("alert"), 15000);
  } else if (type === "skipped") {
    // nothing changed: the previous answer stands; the count comes with the next status refresh
    const c = card(ev.stream_id), span = c.meta.querySelector('[data-k="skipped"]');
    if (span) span.textContent = "skipped: " + ((c.status && c.status.windows_skipped || 0) + 1);
    if (c.status) c.status = {...c.status, windows_skipped: (c.status.windows_skipped || 0) + 1};
  } else if (type === "state") {
    if (ev.state === "deleted") { dropCard(ev.stream_id); return; }
    setState(card(ev.stream_id), ev.state, ev.error);
  }
}
async function follow() {
  // Server-sent events over fetch; on a drop, reconnect with Last-Event-ID (replayed from the server's history).
  for (;;) {
    aborter = new AbortController();
    try {
      const h = headers({"Accept": "text/event-stream"});
      if (lastEventId) h["Last-Event-ID"] = lastEventId;
      const r = await fetch("v1/events", {headers: h, signal: aborter.signal});
      if (r.status === 401) { askKey("The key was refused."); return; }
      if (!r.ok) throw new Error("HTTP " + r.status);
      document.getElementById("conn").textContent = "live";
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i); buf = buf.slice(i + 2);
          let id = null, type = "message", data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("id: ")) id = line.slice(4);
            else if (line.startsWith("event: ")) type = line.slice(7);
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          if (!data) continue;
          if (id) lastEventId = id;  // opaque (several stream workers: one position each, joined by "-")
          try { onEvent(type, JSON.parse(data)); } catch (e) { console.error(e); }
        }
      }
    } catch (e) { if (String(e).includes("unauthorized")) return; }
    document.getElementById("conn").textContent = "reconnecting…";
    await new Promise(res => setTimeout(res, 2000));
  }
}
async function seedHistory(id) {
  // The sparkline starts from the stored answer history (newest first), then grows from live events.
  const r = await api("v1/streams/" + encodeURIComponent(id) + "/answers");
  if (!r.ok) return;
  const c = cams.get(id); if (!c || c.points.length) return;
  const rows = (await r.json()).data.reverse();
  c.points = rows.map(e => ({f: e.timings.freshness_s, l: e.timings.latency_ms / 1000}));
  drawSpark(c);
}
async function refresh() {
  const r = await api("v1/streams");
  if (!r.ok) return;
  const body = await r.json();
  const seen = new Set();
  for (const s of body.data) { seen.add(s.id); renderStatus(card(s.id), s); }
  for (const id of [...cams.keys()]) if (!seen.has(id)) dropCard(id);
}
async function removeCam(id) {
  await api("v1/streams/" + encodeURIComponent(id), {method: "DELETE"});
  await refresh();
}
let started = false;
async function start() {
  try { await refresh(); } catch (e) { return; }
  for (const id of cams.keys()) { refreshThumb(id).catch(() => {}); seedHistory(id).catch(() => {}); }
  if (started) return;
  started = true;
  follow();
  setInterval(() => refresh().catch(() => {}), 3000);
}
document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("keyform").addEventListener("submit", ev => {
    ev.preventDefault();
    sessionStorage.setItem(KEY_ITEM, document.getElementById("key").value.trim());
    document.getElementById("keybox").hidden = true;
    start();
  });
  document.getElementById("add").addEventListener("submit", async ev => {
    ev.preventDefault();
    const f = new FormData(ev.target), err = document.getElementById("formerr");
    const body = {url: f.get("url"), questions: [f.get("question") || "What is happening in the video?"],
                  window_s: Number(f.get("window_s")), fps: Number(f.get("fps")), loop: f.get("loop") === "on"};
    if (f.get("name")) body.name = f.get("name");
    const kw = (f.get("keywords") || "").split(",").map(s => s.trim()).filter(Boolean);
    if (kw.length) body.alert = {kind: "keywords", keywords: kw};
    const r = await api("v1/streams", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
    if (!r.ok) { err.textContent = (await r.json()).error.message; return; }
    err.textContent = ""; ev.target.reset(); await refresh();
  });
  start();
});
