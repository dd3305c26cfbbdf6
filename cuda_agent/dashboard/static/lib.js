// The dashboard's toolkit: DOM building, the keyed API client (REST and server-sent events), syntax
// highlighting, line diffs and SVG plots. No dependencies and no build step: the browser loads this file as is.
//
// Everything shown comes from tenants and agents (problem sources, candidate code, model text): it is only ever
// set as text (textContent, attribute values), never parsed as HTML.

// ---- DOM -----------------------------------------------------------------------------------------------------

function build(el, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

export const h = (tag, attrs, ...children) => build(document.createElement(tag), attrs, children);
const SVG_NS = "http://www.w3.org/2000/svg";
export const s = (tag, attrs, ...children) => build(document.createElementNS(SVG_NS, tag), attrs, children);

// ---- API -----------------------------------------------------------------------------------------------------

// The key lives in sessionStorage: it is gone when the tab closes and is never put in a URL (URLs end up in
// logs and the browser history).
const KEY_ITEM = "cuda-agent-api-key";
export const auth = {
  get: () => sessionStorage.getItem(KEY_ITEM),
  set: (key) => sessionStorage.setItem(KEY_ITEM, key),
  clear: () => sessionStorage.removeItem(KEY_ITEM),
};

export class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
    this.detail = detail;
  }
}

function headers(extra) {
  const key = auth.get();
  return { ...(key ? { Authorization: `Bearer ${key}` } : {}), ...extra };
}

function detailOf(status, text) {
  try {
    const detail = JSON.parse(text).detail;
    if (typeof detail === "string") return detail;
    if (Array.isArray(detail)) return detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
  } catch {
    // not JSON: the text itself says what went wrong
  }
  return text.slice(0, 300) || `HTTP ${status}`;
}

export async function api(path, { method = "GET", body, signal } = {}) {
  const init = { method, signal, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  const text = await response.text();
  if (!response.ok) throw new ApiError(response.status, detailOf(response.status, text));
  return text ? JSON.parse(text) : null;
}

// Server-sent events read with fetch, not EventSource: EventSource cannot send the key in a header.
export async function streamEvents(path, onEvent, signal) {
  const response = await fetch(path, { headers: headers({ Accept: "text/event-stream" }), signal });
  if (!response.ok) throw new ApiError(response.status, detailOf(response.status, await response.text()));
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onEvent(event, JSON.parse(data.join("\n")));
    }
  }
}

// ---- formatting ----------------------------------------------------------------------------------------------

export const fmtSpeedup = (x) => (typeof x === "number" ? `${x.toFixed(2)}x` : "–");
export const fmtNumber = (x, digits = 3) => (typeof x === "number" ? Number(x.toPrecision(digits)).toString() : "–");
export const fmtTime = (iso) => (iso ? new Date(iso).toLocaleString() : "–");
export const shortId = (id) => (id ? String(id).slice(0, 8) : "–");

// ---- syntax highlighting -------------------------------------------------------------------------------------

const WORDS = {
  python: new Set(
    ("and as assert async await break class continue def del elif else except False finally for from global if " +
      "import in is lambda None nonlocal not or pass raise return True try while with yield").split(" "),
  ),
  cpp: new Set(
    ("auto bool break case char const constexpr continue default do double else enum extern false float for if " +
      "inline int long namespace nullptr return short signed sizeof static struct switch template true typedef " +
      "typename unsigned using void volatile while __global__ __device__ __host__ __shared__ __restrict__ " +
      "__forceinline__ __launch_bounds__ size_t int8_t int16_t int32_t int64_t uint8_t uint32_t uint64_t half dim3 " +
      "float2 float4 int4").split(" "),
  ),
};
const TOKENS = {
  python: /(#[^\n]*)|("""[\s\S]*?"""|'''[\s\S]*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')|(\b\d[\d_]*(?:\.\d+)?(?:e[+-]?\d+)?\b)|([A-Za-z_]\w*)/g,
  cpp: /(\/\/[^\n]*|\/\*[\s\S]*?\*\/|^[ \t]*#[^\n]*)|("(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')|(\b\d[\d.]*(?:e[+-]?\d+)?[fFuUlL]*\b)|([A-Za-z_]\w*)/gm,
};

export const languageOf = (path) => (/\.(cu|cuh|cpp|cc|h|hpp|inl)$/.test(path || "") ? "cpp" : "python");

// A <code> element whose tokens are spans with classes (tok-comment, tok-string, tok-number, tok-keyword).
export function highlight(code, language) {
  const out = h("code", { class: `lang-${language}` });
  const pattern = new RegExp(TOKENS[language].source, TOKENS[language].flags);
  let last = 0;
  for (const match of code.matchAll(pattern)) {
    const [text, comment, string, number, word] = match;
    const kind = comment
      ? "comment"
      : string
        ? "string"
        : number
          ? "number"
          : word && WORDS[language].has(word)
            ? "keyword"
            : null;
    if (!kind) continue;
    if (match.index > last) out.append(code.slice(last, match.index));
    out.append(h("span", { class: `tok-${kind}` }, text));
    last = match.index + text.length;
  }
  out.append(code.slice(last));
  return out;
}

// ---- diff ----------------------------------------------------------------------------------------------------

const MAX_DIFF_CELLS = 4_000_000; // lines(a) x lines(b): beyond this the table would stall the tab

// Lines of a longest-common-subsequence diff: [" " | "-" | "+", text]; null when the files are too large.
export function diffLines(before, after) {
  const a = before.split("\n");
  const b = after.split("\n");
  if (a.length * b.length > MAX_DIFF_CELLS) return null;
  const width = b.length + 1;
  const lcs = new Uint32Array((a.length + 1) * width);
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      lcs[i * width + j] =
        a[i] === b[j] ? lcs[(i + 1) * width + j + 1] + 1 : Math.max(lcs[(i + 1) * width + j], lcs[i * width + j + 1]);
    }
  }
  const rows = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    if (i < a.length && j < b.length && a[i] === b[j]) {
      rows.push([" ", a[i]]);
      i++;
      j++;
    } else if (i < a.length && (j === b.length || lcs[(i + 1) * width + j] >= lcs[i * width + j + 1])) {
      rows.push(["-", a[i++]]); // removals before additions, as diff tools show a changed line
    } else rows.push(["+", b[j++]]);
  }
  return rows;
}

// ---- plots ---------------------------------------------------------------------------------------------------

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];

// Round tick values covering [lo, hi]: the first at or below lo, the last at or above hi.
function niceTicks(lo, hi, count = 5) {
  if (lo === hi) [lo, hi] = [lo - 1, hi + 1];
  const raw = (hi - lo) / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((st) => st >= raw);
  const ticks = [];
  let t = Math.floor(lo / step) * step;
  for (; t < hi - step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
  ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

// A line and/or dot plot of series [{name, points: [[x, y], ...]}] as an <svg>; x and y are numbers.
// With logY, y is drawn on a log10 scale (timings spread over orders of magnitude); y must then be positive.
export function plot(series, { width = 560, height = 260, xLabel = "", yLabel = "", lines = true, dots = true, logY = false } = {}) {
  const margin = { left: 56, right: 12, top: 24, bottom: 40 };
  const scale = logY ? Math.log10 : (y) => y;
  const usable = ([x, y]) => Number.isFinite(x) && Number.isFinite(scale(y));
  series = series.map((sr) => ({ ...sr, points: sr.points.filter(usable).map(([x, y]) => [x, scale(y), y]) }));
  const all = series.flatMap((sr) => sr.points);
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "plot", role: "img" });
  if (!all.length) {
    svg.append(s("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "muted" }, "no data yet"));
    return svg;
  }
  const xs = all.map((p) => p[0]);
  const ys = all.map((p) => p[1]);
  const xTicks = niceTicks(Math.min(...xs), Math.max(...xs));
  const yTicks = logY
    ? Array.from({ length: Math.ceil(Math.max(...ys)) - Math.floor(Math.min(...ys)) + 1 }, (_, k) => Math.floor(Math.min(...ys)) + k)
    : niceTicks(Math.min(...ys), Math.max(...ys));
  const yText = (t) => (logY ? String(Number((10 ** t).toPrecision(3))) : String(t));
  const [x0, x1] = [xTicks[0], xTicks.at(-1)];
  const [y0, y1] = [yTicks[0], yTicks.at(-1)];
  const px = (x) => margin.left + ((x - x0) / (x1 - x0 || 1)) * (width - margin.left - margin.right);
  const py = (y) => height - margin.bottom - ((y - y0) / (y1 - y0 || 1)) * (height - margin.top - margin.bottom);
  for (const t of yTicks) {
    svg.append(s("line", { x1: margin.left, x2: width - margin.right, y1: py(t), y2: py(t), class: "grid" }));
    svg.append(s("text", { x: margin.left - 6, y: py(t) + 4, "text-anchor": "end", class: "tick" }, yText(t)));
  }
  for (const t of xTicks) {
    svg.append(s("text", { x: px(t), y: height - margin.bottom + 16, "text-anchor": "middle", class: "tick" }, String(t)));
  }
  svg.append(s("text", { x: (width + margin.left) / 2, y: height - 4, "text-anchor": "middle", class: "label" }, xLabel));
  svg.append(
    s("text", { x: 12, y: height / 2, transform: `rotate(-90 12 ${height / 2})`, "text-anchor": "middle", class: "label" }, yLabel),
  );
  series.forEach((sr, k) => {
    const color = COLORS[k % COLORS.length];
    const points = sr.points;
    if (lines && points.length > 1) {
      const d = points.map(([x, y], n) => `${n ? "L" : "M"}${px(x).toFixed(1)},${py(y).toFixed(1)}`).join(" ");
      svg.append(s("path", { d, fill: "none", stroke: color, "stroke-width": 2 }));
    }
    if (dots) {
      for (const [x, y, value] of points) {
        svg.append(s("circle", { cx: px(x), cy: py(y), r: 3, fill: color }, s("title", {}, `${sr.name}: ${value}`)));
      }
    }
    svg.append(s("rect", { x: margin.left + 8 + k * 130, y: 2, width: 10, height: 10, fill: color }));
    svg.append(s("text", { x: margin.left + 22 + k * 130, y: 11, class: "legend" }, sr.name));
  });
  return svg;
}

// Grouped bars: categories along x, one bar per series [{name, values: {category: value}}].
export function bars(categories, series, { width = 560, height = 240, yLabel = "" } = {}) {
  const values = series.map((sr) => categories.map((c) => sr.values[c] ?? 0));
  const top = Math.max(...values.flat(), 0);
  const ticks = niceTicks(0, top || 1);
  const margin = { left: 56, right: 12, top: 18, bottom: 30 };
  const innerW = width - margin.left - margin.right;
  const innerH = height - margin.top - margin.bottom;
  const py = (v) => margin.top + innerH - (v / ticks.at(-1)) * innerH;
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "plot", role: "img" });
  for (const t of ticks) {
    svg.append(s("line", { x1: margin.left, x2: width - margin.right, y1: py(t), y2: py(t), class: "grid" }));
    svg.append(s("text", { x: margin.left - 6, y: py(t) + 4, "text-anchor": "end", class: "tick" }, String(t)));
  }
  svg.append(s("text", { x: 12, y: height / 2, transform: `rotate(-90 12 ${height / 2})`, "text-anchor": "middle", class: "label" }, yLabel));
  const group = innerW / Math.max(categories.length, 1);
  const bar = (group * 0.8) / Math.max(series.length, 1);
  categories.forEach((c, i) => {
    const gx = margin.left + i * group + group * 0.1;
    svg.append(s("text", { x: gx + group * 0.4, y: height - 10, "text-anchor": "middle", class: "tick" }, String(c)));
    series.forEach((sr, k) => {
      const v = values[k][i];
      svg.append(
        s("rect", { x: gx + k * bar, y: py(v), width: bar - 2, height: py(0) - py(v), fill: COLORS[k % COLORS.length] },
          s("title", {}, `${sr.name} ${c}: ${v}`)),
      );
    });
  });
  series.forEach((sr, k) => {
    svg.append(s("rect", { x: margin.left + 8 + k * 130, y: 2, width: 10, height: 10, fill: COLORS[k % COLORS.length] }));
    svg.append(s("text", { x: margin.left + 22 + k * 130, y: 11, class: "legend" }, sr.name));
  });
  return svg;
}
