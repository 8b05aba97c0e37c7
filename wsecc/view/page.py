"""The viewer page: HTML, CSS and JavaScript as Python strings (nothing fetched at view time).

The page reads its data from the `<script type="application/json" id="wsecc-data">` block
(built by `wsecc.view.viewer.render_viewer`) and draws on one <canvas>:

- world coordinates are PEs of the program rectangle; the view is a scale (CSS px per PE) and
  an offset, changed by wheel (zoom around the cursor), drag (pan), Fit and the search box;
- every per-PE layer (lanes, SRAM, colors per router, link load) is rasterised once (heat maps
  when first switched on) into an offscreen canvas at one pixel per PE, plus max-pooled halvings so thin features survive
  zooming out; a frame draws the right level with one drawImage of the visible part;
- lanes switch to vector polylines with arrowheads once a PE is LANE_VECTOR_MIN px wide and
  at most VECTOR_LANES_MAX lanes cross the visible tiles (only those are drawn);
- kernel regions, outlines and labels are culled to the viewport; labels appear when the
  region is wide enough on screen for its name;
- the header states what limits the throughput (`D.limits.lines`, the summary's words), and the
  "limit" layer picks out its on-wafer limit: the kernel's region outlined, or the flow's lanes
  (a handful, always drawn as vectors) stroked, inside a dashed box at least LIMIT_MIN_PX wide
  so it is found at any zoom; the legend's line says what it is and zooms to it.

After the first frame the page sets `window.__wsecc.ready`, `kernelsDrawn` (regions drawn
in the last frame) and `limit` (what is highlighted: name, kind, kernel index, lanes, box); `frameTimes` holds recent frame times in ms and `measure()` plays a zoom/pan
sequence one step per animation frame and times each frame with its raster flushed (for the
smoothness test).
"""

from __future__ import annotations

CSS = """
:root { color-scheme: dark; }
* { box-sizing: border-box; }
html, body { margin: 0; height: 100%; background: #15171a; color: #e6e6e6;
  font: 13px/1.35 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
body { display: flex; flex-direction: column; }
#bar { display: flex; flex-wrap: wrap; gap: 6px 14px; align-items: center; padding: 6px 10px;
  background: #20242a; border-bottom: 1px solid #333a42; }
#title { font-weight: 600; font-size: 14px; }
#bar button, #bar input[type=search] { background: #2c323a; color: #e6e6e6;
  border: 1px solid #46505c; border-radius: 4px; padding: 3px 8px; font: inherit; }
#bar button:hover { background: #38404a; }
#search { width: 16em; }
.layers { display: flex; gap: 10px; flex-wrap: wrap; }
.layers label { cursor: pointer; user-select: none; white-space: nowrap; }
#stats { color: #a8b0ba; font-size: 12px; }
#limits { color: #ffb0ec; font-size: 12px; }
#stage { position: relative; flex: 1; min-height: 0; overflow: hidden; }
#view { display: block; width: 100%; height: 100%; cursor: crosshair; touch-action: none; }
#view.dragging { cursor: grabbing; }
#tip { position: absolute; pointer-events: none; max-width: 460px; padding: 7px 9px;
  background: rgba(24, 27, 31, 0.96); border: 1px solid #4a5562; border-radius: 5px;
  box-shadow: 0 3px 12px rgba(0, 0, 0, 0.5); font-size: 12px; z-index: 3; }
#tip .name { font-weight: 600; font-size: 13px; word-break: break-all; }
#tip .kind { display: inline-block; padding: 0 6px; margin-left: 6px; border-radius: 3px;
  color: #111; font-size: 11px; }
#tip table { border-collapse: collapse; margin-top: 4px; }
#tip td { padding: 1px 8px 1px 0; vertical-align: top; }
#tip td:first-child { color: #9aa4ae; white-space: nowrap; }
#tip .nodes { overflow-wrap: anywhere; }
#tip .pe { margin-top: 4px; color: #9aa4ae; border-top: 1px solid #39424c; padding-top: 3px; }
#legend { position: absolute; right: 8px; bottom: 8px; padding: 6px 8px; max-height: 60%;
  overflow: auto; background: rgba(24, 27, 31, 0.88); border: 1px solid #39424c;
  border-radius: 5px; font-size: 12px; z-index: 2; }
#legend .row { display: flex; align-items: center; gap: 6px; }
#legend .sw { width: 12px; height: 12px; border-radius: 2px; border: 1px solid #0006; }
#legend .heat { margin-top: 6px; }
#legend .limit { cursor: pointer; margin-bottom: 4px; color: #ffb0ec; max-width: 340px; }
#legend .limit .sw { border-width: 2px; background: transparent; flex: none; }
#legend canvas { display: block; width: 180px; height: 10px; margin: 3px 0; }
#legend .scale { display: flex; justify-content: space-between; color: #a8b0ba; }
#status { position: absolute; left: 8px; bottom: 8px; padding: 2px 6px; font-size: 12px;
  color: #a8b0ba; background: rgba(24, 27, 31, 0.8); border-radius: 4px; z-index: 2; }
#status.error { color: #ff8a80; }
#systems { display: flex; gap: 4px; align-items: center; overflow-x: auto; padding: 6px 10px;
  background: #20242a; border-top: 1px solid #333a42; font-size: 11px; }
#systems .system { flex: none; padding: 4px; border: 1px solid #39424c; border-radius: 4px; }
#systems .system canvas { display: block; background: #0d0f11; margin-bottom: 3px; }
#systems .crossing { flex: none; color: #ffb0ec; text-align: center; padding: 0 4px; }
"""

BODY = """
<header id="bar">
  <span id="title">__TITLE__</span>
  <button id="fit" type="button" title="fit the fabric to the window (F)">Fit</button>
  <input id="search" type="search" list="kernel-names" placeholder="find a kernel or ONNX node"
    autocomplete="off" title="Enter: zoom to the first match (/)">
  <datalist id="kernel-names"></datalist>
  <span class="layers">
    <label><input type="checkbox" id="layer-regions" checked> regions</label>
    <label><input type="checkbox" id="layer-labels" checked> labels</label>
    <label><input type="checkbox" id="layer-flows" checked> flows</label>
    <label title="outline the kernel or flow that limits the throughput on the wafer"><input type="checkbox" id="layer-limit" checked> limit</label>
    <label><input type="checkbox" id="layer-sram" data-heat="sram"> SRAM per PE</label>
    <label title="bytes of resident keys and values per PE: in generate mode the K/V cache of every sequence in flight"><input type="checkbox" id="layer-kv" data-heat="kv"> K/V cache per PE</label>
    <label><input type="checkbox" id="layer-colors" data-heat="colors"> colors per router</label>
    <label><input type="checkbox" id="layer-links" data-heat="links"> link load</label>
  </span>
  <span id="stats"></span>
  <span id="limits"></span>
</header>
<main id="stage">
  <canvas id="view"></canvas>
  <div id="tip" hidden></div>
  <div id="legend"></div>
  <div id="status">loading…</div>
</main>
<section id="systems" hidden></section>
"""

JS = r"""
"use strict";
(async () => {
const api = (window.__wsecc = { ready: false, kernelsDrawn: 0, frameTimes: [] });
const statusEl = document.getElementById("status");
try {
  await main();
} catch (err) {
  statusEl.textContent = "viewer error: " + (err && err.message ? err.message : err);
  statusEl.className = "error";
  throw err;
}

async function main() {
const D = JSON.parse(document.getElementById("wsecc-data").textContent);
const F = D.fabric, W = F.width, H = F.height;
const K = D.kernels, NK = K.length;
const LANE_VECTOR_MIN = 4;   // px per PE from which lanes are drawn as vectors
const ARROW_MIN = 6;         // px per PE from which lanes get arrowheads
const VECTOR_LANES_MAX = 3000;  // more lanes on screen than this: draw the lane bitmap instead
const LABEL_FONT = "11px system-ui, sans-serif";
const TILE = 32;             // PEs per side of a lane-index tile
const LIMIT_MIN_PX = 24;     // the limit's dashed box is at least this wide on screen
const canvas = document.getElementById("view");
const ctx = canvas.getContext("2d", { alpha: false });
const tip = document.getElementById("tip");

// ---------------------------------------------------------------- decoding
function bytesOf(b64) {
  const bin = atob(b64), n = bin.length, out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = bin.charCodeAt(i);
  return out;
}
const TYPES = { u8: Uint8Array, u16: Uint16Array, u32: Uint32Array };
async function unpack(p) {
  if (typeof DecompressionStream === "undefined")
    throw new Error("this browser has no DecompressionStream (needs Chrome 80, Firefox 113, Safari 16.4 or later)");
  const stream = new Blob([bytesOf(p.b64)]).stream().pipeThrough(new DecompressionStream("deflate"));
  const buf = await new Response(stream).arrayBuffer();
  const T = TYPES[p.dtype];
  return new T(buf, 0, buf.byteLength / T.BYTES_PER_ELEMENT);
}
const L = D.lanes, NL = L.count;
const [laneStart, lanePts, laneFlow, laneIndex, laneColor, sramVals, kvVals, colorVals, linkPlanes] =
  await Promise.all([L.start, L.pts, L.flow, L.index, L.color, D.heat.sram.data, D.heat.kv.data,
                     D.heat.colors.data, D.heat.links.data].map(unpack));

// ---------------------------------------------------------------- indexes
const owner = new Int32Array(W * H).fill(-1);   // kernel index per PE
K.forEach((k, i) => {
  const x0 = Math.max(0, k.x), x1 = Math.min(W, k.x + k.w);
  for (let y = Math.max(0, k.y); y < Math.min(H, k.y + k.h); y++) owner.fill(i, y * W + x0, y * W + x1);
});
const kindColor = D.kinds;
const byKind = {};
K.forEach((k, i) => (byKind[k.kind] = byKind[k.kind] || []).push(i));

const laneAt = new Int32Array(W * H).fill(-1);  // a lane through each PE (the last drawn)
const laneOcc = new Uint8Array(W * H);
const tw = Math.ceil(W / TILE), th = Math.ceil(H / TILE);
const tiles = Array.from({ length: tw * th }, () => []);
const kernelLanes = Array.from({ length: NK }, () => []);
function inside(x, y) { return x >= 0 && y >= 0 && x < W && y < H; }
function mark(x, y, i) {
  if (!inside(x, y)) return;
  const p = y * W + x;
  laneAt[p] = i;
  if (laneOcc[p] < 255) laneOcc[p]++;
}
function tileAdd(tx, ty, i) {
  if (tx < 0 || ty < 0 || tx >= tw || ty >= th) return;
  const list = tiles[ty * tw + tx];
  if (list[list.length - 1] !== i) list.push(i);
}
for (let i = 0; i < NL; i++) {
  const s = laneStart[i], e = laneStart[i + 1];
  if (e <= s) continue;
  let x = lanePts[2 * s], y = lanePts[2 * s + 1];
  mark(x, y, i);
  tileAdd(Math.floor(x / TILE), Math.floor(y / TILE), i);
  for (let c = s + 1; c < e; c++) {
    const tx = lanePts[2 * c], ty = lanePts[2 * c + 1];
    const x0 = Math.min(x, tx), x1 = Math.max(x, tx), y0 = Math.min(y, ty), y1 = Math.max(y, ty);
    for (let a = Math.floor(x0 / TILE); a <= Math.floor(x1 / TILE); a++)
      for (let b = Math.floor(y0 / TILE); b <= Math.floor(y1 / TILE); b++) tileAdd(a, b, i);
    while (x !== tx) { x += Math.sign(tx - x); mark(x, y, i); }
    while (y !== ty) { y += Math.sign(ty - y); mark(x, y, i); }
  }
  const sx = lanePts[2 * s], sy = lanePts[2 * s + 1];
  const a = inside(sx, sy) ? owner[sy * W + sx] : -1, b = inside(x, y) ? owner[y * W + x] : -1;
  if (a >= 0) kernelLanes[a].push(i);
  if (b >= 0 && b !== a) kernelLanes[b].push(i);
}
// the on-wafer limit: a kernel (its region) or a flow (its lanes), and a box around it in PEs
const HL = D.limits && D.limits.highlight, LIMIT_COLOR = D.limits ? D.limits.color : "";
const limitLanes = [];
let limitBox = null;
if (HL && HL.kernel >= 0) {
  const k = K[HL.kernel];
  limitBox = [k.x, k.y, k.x + k.w, k.y + k.h];
} else if (HL && HL.flow >= 0) {
  const b = [Infinity, Infinity, -Infinity, -Infinity];
  for (let i = 0; i < NL; i++) {
    if (laneFlow[i] !== HL.flow) continue;
    limitLanes.push(i);
    for (let c = laneStart[i]; c < laneStart[i + 1]; c++) {
      const x = lanePts[2 * c], y = lanePts[2 * c + 1];
      b[0] = Math.min(b[0], x); b[1] = Math.min(b[1], y); b[2] = Math.max(b[2], x + 1); b[3] = Math.max(b[3], y + 1);
    }
  }
  if (limitLanes.length) limitBox = b;
}
const linkMax = new Uint8Array(W * H);
for (let d = 0; d < 4; d++) {
  const plane = linkPlanes.subarray(d * W * H, (d + 1) * W * H);
  for (let p = 0; p < W * H; p++) if (plane[p] > linkMax[p]) linkMax[p] = plane[p];
}

// ---------------------------------------------------------------- bitmaps
// Level k holds the max over 2^k x 2^k PEs, so a one-PE lane or hot spot stays visible when
// a screen pixel covers several PEs.
function pyramid(vals) {
  const levels = [{ w: W, h: H, v: vals }];
  while (levels.length < 12) {
    const p = levels[levels.length - 1];
    if (p.w <= 64 && p.h <= 64) break;
    const w = Math.ceil(p.w / 2), h = Math.ceil(p.h / 2), v = new p.v.constructor(w * h);
    for (let y = 0; y < p.h; y++) {
      const row = (y >> 1) * w;
      for (let x = 0; x < p.w; x++) {
        const a = p.v[y * p.w + x], q = row + (x >> 1);
        if (a > v[q]) v[q] = a;
      }
    }
    levels.push({ w, h, v });
  }
  return levels;
}
function paint(levels, colorOf) {
  return levels.map(({ w, h, v }) => {
    const c = document.createElement("canvas");
    c.width = w; c.height = h;
    const cx = c.getContext("2d");
    const img = cx.createImageData(w, h);
    const px = new Uint32Array(img.data.buffer);
    for (let i = 0; i < v.length; i++) if (v[i] > 0) px[i] = colorOf(v[i]);
    cx.putImageData(img, 0, 0);
    return { w, h, canvas: c };
  });
}
function rgba(r, g, b, a) { return ((a << 24) | (b << 16) | (g << 8) | r) >>> 0; }  // little-endian
const VIRIDIS = ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779",
                 "#6ece58", "#b5de2b", "#fde725"];
const LUT = (() => {
  const anchors = VIRIDIS.map(h => [1, 3, 5].map(i => parseInt(h.slice(i, i + 2), 16)));
  const out = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    const t = i / 255 * (anchors.length - 1), j = Math.min(anchors.length - 2, Math.floor(t)), f = t - j;
    const c = anchors[j].map((v, k) => Math.round(v + (anchors[j + 1][k] - v) * f));
    out[i] = rgba(c[0], c[1], c[2], 255);
  }
  return out;
})();
// The darkest fifth of the map is left out: small values must stand out on the dark fabric.
const LUT_LOW = 48;
function heatIndex(v, top) { return LUT_LOW + Math.round((255 - LUT_LOW) * Math.min(1, v / top)); }
const HEAT = {
  sram: { spec: D.heat.sram, vals: sramVals },
  kv: { spec: D.heat.kv, vals: kvVals },
  colors: { spec: D.heat.colors, vals: colorVals },
  links: { spec: D.heat.links, vals: linkMax },
};
function heatLevels(name) {
  const h = HEAT[name];
  if (!h.levels) {
    const top = Math.max(1, h.spec.scale_max);
    h.levels = paint(pyramid(h.vals), v => LUT[heatIndex(v, top)]);
  }
  return h.levels;
}
let laneLevels = null;
function laneBitmaps() {
  return (laneLevels = laneLevels || paint(pyramid(laneOcc), () => rgba(245, 245, 245, 235)));
}

// ---------------------------------------------------------------- view state
const view = { s: 1, ox: 0, oy: 0 };
let cw = 0, ch = 0, dpr = 1, fitScale = 1;
const layers = {};
document.querySelectorAll("input[id^=layer-]").forEach(el => (layers[el.id.slice(6)] = el.checked));
let hovered = -1, selected = -1, pending = false, frameNo = 0;
const laneStamp = new Uint32Array(Math.max(1, NL));
ctx.font = LABEL_FONT;
const labelWidth = K.map(k => ctx.measureText(k.name).width);

function activeHeat() {
  for (const n of ["sram", "kv", "colors", "links"]) if (layers[n]) return n;
  return null;
}
function resize() {
  const r = canvas.getBoundingClientRect();
  const ncw = Math.max(1, r.width), nch = Math.max(1, r.height);
  dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(ncw * dpr);
  canvas.height = Math.round(nch * dpr);
  if (cw) { view.ox += (ncw - cw) / 2; view.oy += (nch - ch) / 2; }
  cw = ncw; ch = nch;
  fitScale = Math.min((cw - 24) / W, (ch - 24) / H);
}
function fit() {
  view.s = Math.max(1e-3, Math.min((cw - 24) / W, (ch - 24) / H));
  view.ox = (cw - W * view.s) / 2;
  view.oy = (ch - H * view.s) / 2;
  requestRender();
}
function zoomAt(mx, my, factor) {
  const s = Math.min(80, Math.max(fitScale / 4, view.s * factor));
  view.ox = mx - (mx - view.ox) * (s / view.s);
  view.oy = my - (my - view.oy) * (s / view.s);
  view.s = s;
  requestRender();
}
function panBy(dx, dy) { view.ox += dx; view.oy += dy; requestRender(); }
function zoomToBox(x, y, w, h) {
  const pad = Math.max(w, h) * 0.6 + 4;
  view.s = Math.min(40, Math.min(cw / (w + 2 * pad), ch / (h + 2 * pad)));
  view.ox = cw / 2 - (x + w / 2) * view.s;
  view.oy = ch / 2 - (y + h / 2) * view.s;
  requestRender();
}
function zoomToKernel(i) { const k = K[i]; zoomToBox(k.x, k.y, k.w, k.h); }
function zoomToLimit() {
  if (!limitBox) return false;
  const [x0, y0, x1, y1] = limitBox;
  zoomToBox(x0, y0, x1 - x0, y1 - y0);
  return true;
}
function requestRender() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => { pending = false; frame(); });
}
let flushTiming = false, probe = null;
function frame() {
  const t0 = performance.now();
  render();
  if (flushTiming) {
    probe = probe || document.createElement("canvas").getContext("2d", { willReadFrequently: true });
    probe.drawImage(canvas, 0, 0, 1, 1, 0, 0, 1, 1);
    probe.getImageData(0, 0, 1, 1);
  }
  const ms = performance.now() - t0;
  api.frameTimes.push(ms);
  if (api.frameTimes.length > 240) api.frameTimes.shift();
  api.lastFrameMs = ms;
  if (!api.ready) { api.ready = true; }
  if (lastMouse && !drag) hover(lastMouse[0], lastMouse[1]);  // the view moved under the cursor
  showStatus();
}

// ---------------------------------------------------------------- drawing
function drawLevels(levels) {
  const { s, ox, oy } = view;
  let k = 0;
  while (k + 1 < levels.length && (1 << k) * s < 1) k++;  // the finest level with texels >= 1 px
  const lv = levels[k], f = 1 << k, fs = f * s;
  const x0 = Math.max(0, Math.floor(-ox / fs)), y0 = Math.max(0, Math.floor(-oy / fs));
  const x1 = Math.min(lv.w, Math.ceil((cw - ox) / fs)), y1 = Math.min(lv.h, Math.ceil((ch - oy) / fs));
  if (x1 <= x0 || y1 <= y0) return;
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(lv.canvas, x0, y0, x1 - x0, y1 - y0, ox + x0 * fs, oy + y0 * fs, (x1 - x0) * fs, (y1 - y0) * fs);
}
function visibleLanes() {
  const { s, ox, oy } = view;
  const tx0 = Math.max(0, Math.floor(-ox / s / TILE)), ty0 = Math.max(0, Math.floor(-oy / s / TILE));
  const tx1 = Math.min(tw - 1, Math.floor((cw - ox) / s / TILE)), ty1 = Math.min(th - 1, Math.floor((ch - oy) / s / TILE));
  const stamp = ++frameNo, out = [];
  for (let ty = ty0; ty <= ty1; ty++)
    for (let tx = tx0; tx <= tx1; tx++)
      for (const i of tiles[ty * tw + tx]) if (laneStamp[i] !== stamp) { laneStamp[i] = stamp; out.push(i); }
  return out;
}
function traceLanes(list, arrows) {
  // One path for every lane, arrowheads included as open chevrons: Skia strokes thousands of
  // short segments in a few ms, but filling thousands of small triangles costs ten times that.
  const { s, ox, oy } = view;
  const path = new Path2D(), size = Math.min(0.45 * s, 8);
  for (const i of list) {
    const a = laneStart[i], e = laneStart[i + 1];
    if (e - a < 2) continue;
    path.moveTo(ox + (lanePts[2 * a] + 0.5) * s, oy + (lanePts[2 * a + 1] + 0.5) * s);
    for (let c = a + 1; c < e; c++) path.lineTo(ox + (lanePts[2 * c] + 0.5) * s, oy + (lanePts[2 * c + 1] + 0.5) * s);
    if (!arrows) continue;
    const px = lanePts[2 * e - 4], py = lanePts[2 * e - 3], qx = lanePts[2 * e - 2], qy = lanePts[2 * e - 1];
    const dx = Math.sign(qx - px), dy = Math.sign(qy - py);
    const tx = ox + (qx + 0.5 + 0.45 * dx) * s, ty = oy + (qy + 0.5 + 0.45 * dy) * s;  // at the PE's far edge
    path.lineTo(tx, ty);
    path.moveTo(tx - dx * size - dy * size * 0.7, ty - dy * size - dx * size * 0.7);
    path.lineTo(tx, ty);
    path.lineTo(tx - dx * size + dy * size * 0.7, ty - dy * size + dx * size * 0.7);
  }
  return path;
}
function strokeLanes(list, color, width, arrows) {
  ctx.strokeStyle = color; ctx.lineWidth = width; ctx.lineJoin = "miter";
  ctx.stroke(traceLanes(list, arrows));
}
function drawLabels(visible) {
  const { s, ox, oy } = view;
  ctx.font = LABEL_FONT; ctx.textAlign = "center"; ctx.textBaseline = "middle";
  ctx.lineWidth = 3; ctx.strokeStyle = "rgba(0,0,0,0.75)"; ctx.fillStyle = "#fff";
  ctx.lineJoin = "round";
  for (const i of visible) {
    const k = K[i], w = k.w * s, h = k.h * s;
    if (w < labelWidth[i] + 6 || h < 14) continue;
    // centre of the part of the region on screen, so huge regions keep their label in view
    const x0 = Math.max(ox + k.x * s, 0), x1 = Math.min(ox + (k.x + k.w) * s, cw);
    const y0 = Math.max(oy + k.y * s, 0), y1 = Math.min(oy + (k.y + k.h) * s, ch);
    if (x1 - x0 < labelWidth[i] + 6 || y1 - y0 < 14) continue;
    const cx = (x0 + x1) / 2, cy = (y0 + y1) / 2, two = y1 - y0 >= 30;
    const yName = two ? cy - 7 : cy;
    ctx.strokeText(k.name, cx, yName); ctx.fillText(k.name, cx, yName);
    if (two) {
      const sub = k.kind + " " + k.w + "\u00d7" + k.h;
      ctx.strokeText(sub, cx, cy + 7); ctx.fillText(sub, cx, cy + 7);
    }
  }
}
function drawLimit() {
  const { s, ox, oy } = view;
  if (limitLanes.length)
    strokeLanes(limitLanes, LIMIT_COLOR, Math.max(2, Math.min(7, s * 0.4)), s >= ARROW_MIN / 2);
  if (HL.kernel >= 0) {
    const k = K[HL.kernel];
    ctx.strokeStyle = LIMIT_COLOR; ctx.lineWidth = 3;
    ctx.strokeRect(ox + k.x * s - 1.5, oy + k.y * s - 1.5, Math.max(1, k.w * s) + 3, Math.max(1, k.h * s) + 3);
  }
  const [x0, y0, x1, y1] = limitBox;
  const w = Math.max(LIMIT_MIN_PX, (x1 - x0) * s + 12), h = Math.max(LIMIT_MIN_PX, (y1 - y0) * s + 12);
  const cx = ox + (x0 + x1) / 2 * s, cy = oy + (y0 + y1) / 2 * s;
  ctx.setLineDash([5, 3]); ctx.strokeStyle = LIMIT_COLOR; ctx.lineWidth = 1.5;
  ctx.strokeRect(cx - w / 2, cy - h / 2, w, h);
  ctx.setLineDash([]);
}
// copies 1..k-1 of a replicated program (copy 0 is the detailed one): each region outlined in
// its tile, when that stays cheap; every tile dashed and labelled
const R = D.replicas, COPY_RECTS_MAX = 20000;
function drawCopies() {
  if (!R || R.k < 2) return;
  const { s, ox, oy } = view, tw = R.tile.w, th = R.tile.h;
  const onScreen = R.origins.map(([tx, ty], c) => [c, ox + tx * s, oy + ty * s])
    .filter(([, x, y]) => x < cw && y < ch && x + tw * s > 0 && y + th * s > 0);
  if (layers.regions && onScreen.length * NK <= COPY_RECTS_MAX) {
    ctx.beginPath();
    for (const [c, x0, y0] of onScreen) {
      if (c === 0) continue;
      for (const k of K) ctx.rect(x0 + k.x * s, y0 + k.y * s, Math.max(1, k.w * s), Math.max(1, k.h * s));
    }
    ctx.fillStyle = "rgba(200,210,220,0.10)"; ctx.fill();
    ctx.strokeStyle = "rgba(200,210,220,0.55)"; ctx.lineWidth = 1; ctx.stroke();
  }
  ctx.setLineDash([6, 4]); ctx.strokeStyle = "#8a949e"; ctx.lineWidth = 1;
  ctx.font = LABEL_FONT; ctx.textAlign = "left"; ctx.textBaseline = "top"; ctx.fillStyle = "#c8d0da";
  for (const [c, x0, y0] of onScreen) {
    ctx.strokeRect(x0 + 0.5, y0 + 0.5, tw * s - 1, th * s - 1);
    if (tw * s >= 60 && th * s >= 16) ctx.fillText(`copy ${c}`, x0 + 4, y0 + 3);
  }
  ctx.setLineDash([]);
}
function render() {
  const { s, ox, oy } = view;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = "#15171a";
  ctx.fillRect(0, 0, cw, ch);
  // the whole wafer (memcpy halo) dashed, the program rectangle filled
  ctx.setLineDash([5, 4]); ctx.strokeStyle = "#3b424b"; ctx.lineWidth = 1;
  ctx.strokeRect(ox - F.program_x * s, oy - F.program_y * s, F.full_width * s, F.full_height * s);
  ctx.setLineDash([]);
  ctx.fillStyle = "#22262c";
  ctx.fillRect(ox, oy, W * s, H * s);
  const heat = activeHeat();
  const visible = [];
  for (let i = 0; i < NK; i++) {
    const k = K[i], x = ox + k.x * s, y = oy + k.y * s;
    if (x > cw || y > ch || x + Math.max(1, k.w * s) < 0 || y + Math.max(1, k.h * s) < 0) continue;
    visible.push(i);
  }
  let drawn = 0;
  if (layers.regions && !heat) {
    for (const kind in byKind) {
      ctx.fillStyle = kindColor[kind];
      for (const i of byKind[kind]) {
        const k = K[i], x = ox + k.x * s, y = oy + k.y * s;
        const w = Math.max(1, k.w * s), h = Math.max(1, k.h * s);
        if (x > cw || y > ch || x + w < 0 || y + h < 0) continue;
        ctx.fillRect(x, y, w, h);
      }
    }
  }
  drawCopies();
  if (heat) drawLevels(heatLevels(heat));
  if (layers.regions) {
    ctx.beginPath();
    for (const i of visible) {
      const k = K[i];
      if (k.w * s >= 5 && k.h * s >= 5) ctx.rect(ox + k.x * s + 0.5, oy + k.y * s + 0.5, k.w * s - 1, k.h * s - 1);
    }
    ctx.strokeStyle = heat ? "rgba(255,255,255,0.55)" : "rgba(0,0,0,0.55)"; ctx.lineWidth = 1;
    ctx.stroke();
    drawn = visible.length;
  }
  // routing heat maps sit exactly on the lanes: show lanes over them only as vectors
  const routingHeat = heat === "colors" || heat === "links";
  if (layers.flows && NL) {
    const onScreen = s >= LANE_VECTOR_MIN ? visibleLanes() : null;
    if (onScreen && onScreen.length <= VECTOR_LANES_MAX) {
      strokeLanes(onScreen, routingHeat ? "rgba(255,255,255,0.5)" : "rgba(250,250,250,0.9)",
                  Math.max(1, Math.min(6, s * (routingHeat ? 0.12 : 0.22))), s >= ARROW_MIN);
    } else if (!routingHeat) {
      drawLevels(laneBitmaps());
    }
  }
  if (layers.labels) drawLabels(visible);
  if (layers.limit && limitBox) drawLimit();
  for (const [i, color, width] of [[hovered, "#ffd54f", 2], [selected, "#4dd0e1", 3]]) {
    if (i < 0) continue;
    const k = K[i];
    if (layers.flows && kernelLanes[i].length)
      strokeLanes(kernelLanes[i], color, Math.max(1.5, Math.min(6, s * 0.3)), s >= ARROW_MIN / 2);
    ctx.strokeStyle = color; ctx.lineWidth = width;
    ctx.strokeRect(ox + k.x * s - width / 2, oy + k.y * s - width / 2,
                   Math.max(1, k.w * s) + width, Math.max(1, k.h * s) + width);
  }
  ctx.strokeStyle = "#6b7785"; ctx.lineWidth = 1;
  ctx.strokeRect(ox - 0.5, oy - 0.5, W * s + 1, H * s + 1);
  api.kernelsDrawn = drawn;
}

// ---------------------------------------------------------------- text: header, legend, tip
const fmt = n => (typeof n === "number" ? n.toLocaleString("en-US", { maximumFractionDigits: 2 }) : String(n));
function esc(t) {
  return String(t).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
const S = D.stats;
document.getElementById("stats").textContent =
  `${F.target} ${W}\u00d7${H} PEs \u00b7 ${fmt(S.kernels)} kernels, ${fmt(S.pes_used)} PEs ` +
  `(${(100 * S.pes_used / S.usable_pes).toFixed(1)}%) \u00b7 ${fmt(S.lanes)} lanes, ${fmt(L.segments)} hops \u00b7 ` +
  `colors max ${S.colors_used_max}/${S.color_budget} \u00b7 link load max ${S.link_load_max} \u00b7 ` +
  (S.gap === null ? S.placer : `${S.placer} gap ${(100 * S.gap).toFixed(1)}%` +
    (S.bound_kind ? ` to the ${S.bound_kind} bound` : "")) +
  (R && R.k > 1 ? ` \u00b7 ${fmt(R.k)} copies` + (R.reason ? ` (stopped by ${R.reason})` : "") : "");
document.getElementById("limits").textContent = D.limits ? D.limits.lines.join(" \u00b7 ") : "";
const names = document.getElementById("kernel-names");
names.append(...K.map(k => Object.assign(document.createElement("option"), { value: k.name })));

function updateLegend() {
  const heat = activeHeat();
  let html = "";
  if (HL && layers.limit) {
    const what = HL.kind === "flow" ? `flow ${esc(HL.name)} (${limitLanes.length} lanes)` : `${esc(HL.kind)} ${esc(HL.name)}`;
    html += `<div class="row limit" id="limit-legend" title="zoom to it"><span class="sw" style="border-color:${LIMIT_COLOR}"></span>` +
      `<span>highlighted: ${esc(HL.label)}, ${what}${limitBox ? "" : " \u2014 not on the fabric"}</span></div>`;
  }
  if (R && R.k > 1)
    html += `<div style="color:#8a949e">copy 0 in detail; copies 1\u2013${R.k - 1} outlined in their tiles (the same regions and routes, moved)</div>`;
  for (const kind in byKind)
    html += `<div class="row"><span class="sw" style="background:${kindColor[kind]}"></span>${esc(kind)} <span style="color:#8a949e">${byKind[kind].length}</span></div>`;
  if (heat) {
    const spec = HEAT[heat].spec;
    let top = 0;
    for (const v of HEAT[heat].vals) if (v > top) top = v;
    html += `<div class="heat"><b>${esc(spec.label)}</b><canvas id="heat-bar" width="256" height="1"></canvas>` +
      `<div class="scale"><span>0</span><span>${fmt(spec.scale_max)} ${esc(spec.unit)}</span></div>` +
      `<div>max on this fabric: ${fmt(top)} ${esc(spec.unit)}</div></div>`;
  }
  if (heat === "colors" || heat === "links")
    html += `<div style="color:#8a949e">lanes drawn when zoomed in</div>`;
  document.getElementById("legend").innerHTML = html;
  const hl = document.getElementById("limit-legend");
  if (hl) hl.addEventListener("click", zoomToLimit);
  const bar = document.getElementById("heat-bar");
  if (bar) {
    const bx = bar.getContext("2d"), img = bx.createImageData(256, 1), px = new Uint32Array(img.data.buffer);
    for (let i = 0; i < 256; i++) px[i] = LUT[heatIndex(i, 255)];
    bx.putImageData(img, 0, 0);
  }
}
const KNOWN = new Set(["pes", "sram_bytes_per_pe", "sram_breakdown", "cycles_per_sample",
  "compute_cycles", "link_cycles", "bound", "onnx_nodes", "params", "kind"]);
function kernelTip(i) {
  const k = K[i], info = k.info || {}, rows = [];
  rows.push(["PEs", `${fmt(info.pes ?? k.w * k.h)} (${k.w}\u00d7${k.h})`]);
  rows.push(["region", `x ${k.x}, y ${k.y}, w ${k.w}, h ${k.h}`]);
  if (info.sram_bytes_per_pe !== undefined) {
    let t = `${fmt(info.sram_bytes_per_pe)} B`;
    const b = info.sram_breakdown;
    if (b) t += ` (${Object.entries(b).filter(([, v]) => v).map(([n, v]) => `${n} ${fmt(v)}`).join(", ")})`;
    rows.push(["SRAM per PE", t]);
  }
  if (info.cycles_per_sample !== undefined) {
    let t = fmt(info.cycles_per_sample);
    if (info.compute_cycles !== undefined) t += ` (compute ${fmt(info.compute_cycles)}, link ${fmt(info.link_cycles)})`;
    rows.push(["cycles/sample", t]);
  }
  if (info.bound !== undefined) rows.push(["bound", info.bound]);
  const nodes = info.onnx_nodes || [];
  if (nodes.length)
    rows.push([`ONNX nodes (${nodes.length})`, nodes.slice(0, 8).concat(nodes.length > 8 ? [`\u2026 ${nodes.length - 8} more`] : [])]);
  if (info.params && Object.keys(info.params).length) rows.push(["params", Object.entries(info.params).map(([n, v]) => `${n}=${v}`).join(" ")]);
  for (const [n, v] of Object.entries(info)) if (!KNOWN.has(n)) rows.push([n, typeof v === "object" ? JSON.stringify(v) : fmt(v)]);
  const fl = kernelLanes[i].length;
  if (fl) rows.push(["lanes", `${fl} in or out`]);
  const cell = b => (Array.isArray(b) ? b.map(esc).join("<br>") : esc(b));
  return `<div class="name">${esc(k.name)}<span class="kind" style="background:${kindColor[k.kind]}">${esc(k.kind)}</span></div>` +
    `<table>${rows.map(([a, b]) => `<tr><td>${esc(a)}</td><td class="nodes">${cell(b)}</td></tr>`).join("")}</table>`;
}
function peTip(x, y) {
  const p = y * W + x, bits = [`PE (${x}, ${y})`];
  const li = laneAt[p];
  if (li >= 0) bits.push(`lane ${esc(L.flows[laneFlow[li]])} #${laneIndex[li]}, color ${laneColor[li]}` +
                         (laneOcc[p] > 1 ? ` (+${laneOcc[p] - 1} more)` : ""));
  const heat = activeHeat();
  if (heat === "links") {
    const d = D.heat.links.dirs, per = [];
    for (let j = 0; j < 4; j++) { const v = linkPlanes[j * W * H + p]; if (v) per.push(`${d[j]} ${v}`); }
    bits.push(`links out: ${per.join(", ") || "none"}`);
  } else if (heat) {
    bits.push(`${esc(HEAT[heat].spec.label)}: ${fmt(HEAT[heat].vals[p])} ${esc(HEAT[heat].spec.unit)}`);
  }
  return bits.join("<br>");
}
let tipKey = "";
function hover(mx, my) {
  const x = Math.floor((mx - view.ox) / view.s), y = Math.floor((my - view.oy) / view.s);
  const on = inside(x, y);
  const ki = on ? owner[y * W + x] : -1;
  const li = on ? laneAt[y * W + x] : -1;
  if (ki !== hovered) { hovered = ki; requestRender(); }
  const key = on && (ki >= 0 || li >= 0 || activeHeat()) ? `${ki}:${x}:${y}:${activeHeat()}` : "";
  if (!key) { tip.hidden = true; tipKey = ""; return; }
  if (key !== tipKey) {
    tip.innerHTML = (ki >= 0 ? kernelTip(ki) : "") + `<div class="pe">${peTip(x, y)}</div>`;
    tipKey = key;
  }
  tip.hidden = false;
  const tw_ = tip.offsetWidth, th_ = tip.offsetHeight;
  tip.style.left = `${mx + 16 + tw_ > cw ? Math.max(0, mx - 12 - tw_) : mx + 16}px`;
  tip.style.top = `${my + 16 + th_ > ch ? Math.max(0, my - 12 - th_) : my + 16}px`;
}
let lastMouse = null;
function showStatus(msg) {
  if (msg !== undefined) { statusEl.dataset.msg = msg; }
  const m = statusEl.dataset.msg ? statusEl.dataset.msg + " \u00b7 " : "";
  let pe = "";
  if (lastMouse) {
    const x = Math.floor((lastMouse[0] - view.ox) / view.s), y = Math.floor((lastMouse[1] - view.oy) / view.s);
    if (inside(x, y)) pe = `PE (${x}, ${y}) \u00b7 `;
  }
  statusEl.textContent = `${m}${pe}${view.s.toFixed(view.s < 10 ? 2 : 1)} px/PE \u00b7 frame ${(api.lastFrameMs || 0).toFixed(1)} ms`;
}

// ---------------------------------------------------------------- input
let drag = null;
function local(e) { const r = canvas.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; }
canvas.addEventListener("wheel", e => {
  e.preventDefault();
  const [mx, my] = local(e);
  const unit = e.deltaMode === 1 ? 0.05 : e.deltaMode === 2 ? 1 : 0.0015;
  zoomAt(mx, my, Math.exp(-e.deltaY * unit));
}, { passive: false });
canvas.addEventListener("pointerdown", e => {
  if (e.button !== 0) return;
  const [mx, my] = local(e);
  drag = { mx, my, ox: view.ox, oy: view.oy, moved: false };
  canvas.setPointerCapture(e.pointerId);
});
canvas.addEventListener("pointermove", e => {
  const [mx, my] = local(e);
  lastMouse = [mx, my];
  if (drag) {
    if (Math.abs(mx - drag.mx) + Math.abs(my - drag.my) > 3) { drag.moved = true; canvas.classList.add("dragging"); tip.hidden = true; }
    if (drag.moved) { view.ox = drag.ox + mx - drag.mx; view.oy = drag.oy + my - drag.my; requestRender(); return; }
  }
  hover(mx, my);
  showStatus();
});
function endDrag(e) {
  if (!drag) return;
  if (!drag.moved && e.type === "pointerup") { selected = hovered; requestRender(); }
  drag = null;
  canvas.classList.remove("dragging");
}
canvas.addEventListener("pointerup", endDrag);
canvas.addEventListener("pointercancel", endDrag);
canvas.addEventListener("pointerleave", () => { if (!drag) { lastMouse = null; tip.hidden = true; tipKey = ""; if (hovered >= 0) { hovered = -1; requestRender(); } } });
canvas.addEventListener("dblclick", e => { const [mx, my] = local(e); zoomAt(mx, my, 2); });
document.getElementById("fit").addEventListener("click", fit);
document.querySelectorAll("input[id^=layer-]").forEach(el => el.addEventListener("change", () => {
  if (el.dataset.heat && el.checked)
    document.querySelectorAll("input[data-heat]").forEach(o => { if (o !== el) { o.checked = false; layers[o.id.slice(6)] = false; } });
  layers[el.id.slice(6)] = el.checked;
  tipKey = "";
  updateLegend();
  requestRender();
}));
function find(query) {
  const q = query.trim().toLowerCase();
  if (!q) return -1;
  let i = K.findIndex(k => k.name.toLowerCase() === q);
  if (i < 0) i = K.findIndex(k => k.name.toLowerCase().includes(q));
  if (i < 0) i = K.findIndex(k => (k.info.onnx_nodes || []).some(n => n.toLowerCase().includes(q)));
  if (i < 0) { showStatus(`no kernel matches "${query.trim()}"`); return -1; }
  selected = i;
  zoomToKernel(i);
  showStatus(`found ${K[i].name}`);
  return i;
}
const search = document.getElementById("search");
search.addEventListener("keydown", e => { if (e.key === "Enter") find(search.value); if (e.key === "Escape") search.blur(); });
search.addEventListener("change", () => find(search.value));
window.addEventListener("keydown", e => {
  if (e.target instanceof HTMLInputElement && e.target.type !== "checkbox") return;
  if (e.key === "f") fit();
  else if (e.key === "+" || e.key === "=") zoomAt(cw / 2, ch / 2, 1.5);
  else if (e.key === "-") zoomAt(cw / 2, ch / 2, 1 / 1.5);
  else if (e.key === "/") { e.preventDefault(); search.focus(); }
  else if (e.key === "Escape") { selected = -1; requestRender(); }
});
new ResizeObserver(() => { resize(); requestRender(); }).observe(canvas);

// ---------------------------------------------------------------- test and tool hooks
const ZOOM_PAN = [["zoom", 1.25], ["zoom", 1.25], ["pan", 40, 25], ["zoom", 1.25], ["zoom", 1.25],
  ["pan", -60, 10], ["zoom", 1.25], ["zoom", 1.25], ["zoom", 1.25], ["pan", 30, -40], ["zoom", 1.5],
  ["zoom", 1.5], ["pan", -80, -30], ["zoom", 1.5], ["pan", 50, 60], ["zoom", 0.5], ["zoom", 0.5],
  ["pan", 20, 20], ["zoom", 0.5], ["zoom", 0.5], ["pan", -20, 10], ["zoom", 0.5], ["zoom", 0.8]];
async function measure(steps) {
  // One zoom/pan step per animation frame, as under a wheel or a drag. render_ms: the frame's
  // drawing with the raster flushed (a pixel is read back from the view), so it is the whole
  // cost of drawing, not just issuing it; interval_ms: time between frames as the page sees it.
  const nextFrame = () => new Promise(r => requestAnimationFrame(r));
  const render_ms = [], interval_ms = [];
  await nextFrame();
  flushTiming = true;
  let last = performance.now();
  try {
    for (const st of steps || ZOOM_PAN) {
      if (st[0] === "zoom") zoomAt(cw / 2, ch / 2, st[1]); else panBy(st[1], st[2]);
      await nextFrame();  // our frame() was queued first, so it has run
      const now = performance.now();
      render_ms.push(api.lastFrameMs);
      interval_ms.push(now - last);
      last = now;
    }
  } finally {
    flushTiming = false;
  }
  return { render_ms, interval_ms };
}
Object.assign(api, {
  kernels: NK, lanes: NL, fit, zoomAt, panBy, find, measure, zoomToLimit,
  limit: HL ? { name: HL.name, kind: HL.kind, kernel: HL.kernel, lanes: limitLanes.length, box: limitBox } : null,
  view: () => ({ ...view, cw, ch }),
  kernelCenter(name) {
    const i = K.findIndex(k => k.name === name);
    if (i < 0) return null;
    const r = canvas.getBoundingClientRect(), k = K[i];
    return { x: r.left + view.ox + (k.x + k.w / 2) * view.s, y: r.top + view.oy + (k.y + k.h / 2) * view.s };
  },
});
drawSystems();
resize();
fit();
updateLegend();
statusEl.dataset.msg = "";

// ---------------------------------------------------------------- several systems: one panel each
// D.systems (a program over several systems, wsecc.core.partition): each system's regions drawn small,
// the kernels sending or receiving a crossing outlined, and between panels the bytes crossing.
function drawSystems() {
  const SYS = D.systems;
  if (!SYS || SYS.length < 2) return;
  const strip = document.getElementById("systems");
  strip.hidden = false;
  const scale = 140 / W, cw = 140, ch = Math.max(1, Math.round(H * scale));
  SYS.forEach((sy, i) => {
    if (i) {
      const c = document.createElement("div");
      c.className = "crossing";
      c.textContent = `→ ${fmt(sy.crossing_in_bytes)} B/sample\n+${fmt(sy.crossing_latency_us)} µs`;
      c.style.whiteSpace = "pre";
      strip.append(c);
    }
    const box = document.createElement("div");
    box.className = "system";
    const cv = Object.assign(document.createElement("canvas"), { width: cw, height: ch });
    const g = cv.getContext("2d");
    for (const [x, y, w, h, kind, ends] of sy.rects) {
      g.fillStyle = D.kinds[kind] || "#888";
      g.fillRect(x * scale, y * scale, Math.max(1, w * scale), Math.max(1, h * scale));
      if (ends) {
        g.strokeStyle = "#ffb0ec";
        g.lineWidth = 2;
        g.strokeRect(x * scale, y * scale, Math.max(2, w * scale), Math.max(2, h * scale));
      }
    }
    box.append(cv);
    const text = document.createElement("div");
    text.innerHTML = sy.lines.map(esc).join("<br>");
    box.append(text);
    strip.append(box);
  });
}
}
})();
"""

TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="wsecc __VERSION__">
<title>__TITLE__</title>
<style>__CSS__</style>
</head>
<body>__BODY__
<script type="application/json" id="wsecc-data">__DATA__</script>
<script>__JS__</script>
</body>
</html>
"""
