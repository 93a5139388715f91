// dormant's dashboard: live charts on the overview, live refresh of a thread's page.
// Plain JavaScript of the package's own (no library, no build step). It reads JSON from
// the dashboard's own routes and draws with DOM calls only: no text is ever parsed as HTML.
const SVG = "http://www.w3.org/2000/svg";
const KEEP = 360; // samples kept in the page: the server's ring is one hour of them
const POLL_MS = 5000;
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];

function el(name, attrs) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}

function fmt(v) {
  if (v >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return Number.isInteger(v) ? String(v) : v.toFixed(2);
}

// One chart: named series of [t, value] points, optional horizontal marks.
function draw(figure, series, marks) {
  const w = 360, h = 120, pad = 4;
  for (const old of figure.querySelectorAll("svg, .legend")) old.remove();
  const svg = el("svg", { viewBox: `0 0 ${w} ${h}`, width: w, height: h, role: "img" });
  const all = series.flatMap((s) => s.points);
  const ts = all.map((p) => p[0]);
  const vs = all.map((p) => p[1]).concat((marks || []).map((m) => m.value));
  const t0 = Math.min(...ts), t1 = Math.max(...ts, t0 + 1);
  const vmax = Math.max(...vs, 1e-9);
  const x = (t) => pad + ((t - t0) / (t1 - t0)) * (w - 2 * pad);
  const y = (v) => h - pad - (v / vmax) * (h - 2 * pad);
  svg.append(el("rect", { x: 0, y: 0, width: w, height: h, class: "bg" }));
  for (const m of marks || []) {
    svg.append(el("line", { x1: 0, x2: w, y1: y(m.value), y2: y(m.value), class: "mark" }));
  }
  series.forEach((s, i) => {
    if (!s.points.length) return;
    const d = s.points.map((p, j) => `${j ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
    svg.append(el("path", { d, fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": 1.5 }));
  });
  figure.append(svg);
  const legend = document.createElement("p");
  legend.className = "legend";
  series.forEach((s, i) => {
    const span = document.createElement("span");
    span.className = "c" + (i % COLORS.length);
    const last = s.points.length ? s.points[s.points.length - 1][1] : 0;
    span.textContent = `${s.name} ${fmt(last)}  `;
    legend.append(span);
  });
  figure.append(legend);
}

const CHARTS = {
  rss: (r) => ({
    series: [{ name: "RSS", points: r.map((s) => [s.t, s.rss]) }],
    marks: r.length && r[r.length - 1].soft
      ? [0.6, 0.75, 0.9].map((f) => ({ value: f * r[r.length - 1].soft })).concat([{ value: r[r.length - 1].hard }])
      : [],
  }),
  level: (r) => ({ series: [{ name: "level", points: r.map((s) => [s.t, s.level]) }] }),
  slices: (r) => ({
    series: [
      { name: "active", points: r.map((s) => [s.t, s.active]) },
      { name: "allowed", points: r.map((s) => [s.t, s.allowed]) },
    ],
  }),
  turns: (r) => ({ series: [{ name: "turns/s", points: r.map((s) => [s.t, s.turns_s]) }] }),
  backlog: (r) => ({
    series: ["P0", "P1", "P2"].map((p) => ({ name: p, points: r.map((s) => [s.t, s.backlog[p] || 0]) })),
  }),
  oldest: (r) => ({ series: [{ name: "age s", points: r.map((s) => [s.t, s.oldest_ready_s]) }] }),
  cache: (r) => ({
    series: [
      { name: "bytes", points: r.map((s) => [s.t, s.cache_bytes]) },
      { name: "hit ratio ×max", points: r.map((s) => [s.t, s.cache_hit_ratio * Math.max(...r.map((q) => q.cache_bytes), 1)]) },
    ],
  }),
  outbox: (r) => ({
    series: ["pending", "running", "external", "unknown"]
      .map((k) => ({ name: k, points: r.map((s) => [s.t, s.outbox[k] || 0]) }))
      .concat([{ name: "dead", points: r.map((s) => [s.t, s.dead_letters]) }]),
  }),
  approvals: (r) => ({
    series: [
      { name: "open", points: r.map((s) => [s.t, s.approvals_open || 0]) },
      { name: "oldest s", points: r.map((s) => [s.t, s.approvals_oldest_s || 0]) },
    ],
  }),
  tokens: (r) => ({
    series: ["prompt", "completion"].map((k) => ({ name: k, points: r.map((s) => [s.t, s.tokens[k] || 0]) })),
  }),
};

async function charts(section) {
  let rows = [];
  const tick = async () => {
    const since = rows.length ? rows[rows.length - 1].t : 0;
    try {
      const resp = await fetch(`${section.dataset.src}?since=${since}`, { credentials: "same-origin" });
      if (resp.ok) {
        const body = await resp.json();
        rows = rows.concat(body.samples).slice(-KEEP);
        for (const figure of section.querySelectorAll("figure[data-chart]")) {
          const spec = CHARTS[figure.dataset.chart](rows);
          draw(figure, spec.series, spec.marks);
        }
        section.dataset.samples = String(rows.length);
      }
    } catch (err) {
      section.dataset.error = String(err);
    }
  };
  await tick();
  setInterval(tick, POLL_MS);
}

function liveThread(head) {
  if (head.dataset.live !== "yes") return;
  const url = `/ui/api/thread?id=${encodeURIComponent(head.dataset.id)}`;
  setInterval(async () => {
    try {
      const resp = await fetch(url, { credentials: "same-origin" });
      if (!resp.ok) return;
      const now = await resp.json();
      if (String(now.last_seq) !== head.dataset.lastSeq || now.state !== head.dataset.state) location.reload();
    } catch (err) {
      head.dataset.error = String(err);
    }
  }, 2000);
}

const section = document.getElementById("charts");
if (section) charts(section);
const head = document.getElementById("thread-head");
if (head) liveThread(head);
