// The console's script: live figures without a reload, the sparklines, the body views and
// the admin forms' confirmations. No library; the page works without it (figures as rendered).
"use strict";

function at(obj, path) {
  return path.split(".").reduce((o, k) => (o == null ? undefined : o[k]), obj);
}

function shown(value, format) {
  if (value === null || value === undefined) return "-";
  if (format === "percent") return (value * 100).toFixed(1) + "%";
  if (format === "time") return value > 0 ? new Date(value).toISOString().replace("T", " ").slice(0, 23) : "-";
  return String(value);
}

function sparkline(svg, points) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  if (!points || points.length < 2) return;
  const t0 = points[0][0], t1 = points[points.length - 1][0];
  const top = Math.max(1e-9, ...points.map((p) => p[1]));
  const xy = points.map((p) => [((p[0] - t0) / Math.max(1, t1 - t0)) * 300, 58 - (p[1] / top) * 56]);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", xy.map((p) => p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", "currentColor");
  line.setAttribute("stroke-width", "1.5");
  svg.appendChild(line);
}

function apply(data) {
  document.querySelectorAll("[data-live]").forEach((el) => {
    const v = at(data, el.dataset.live);
    if (v !== undefined) el.textContent = shown(v, el.dataset.format);
  });
  document.querySelectorAll("svg[data-series]").forEach((svg) => sparkline(svg, at(data, svg.dataset.series)));
  document.querySelectorAll("[data-last]").forEach((el) => {
    const s = at(data, el.dataset.last);
    el.textContent = s && s.length ? "now " + s[s.length - 1][1] : "";
  });
}

async function refresh() {
  const body = document.body, live = document.getElementById("live");
  if (document.hidden) return;
  try {
    const res = await fetch(body.dataset.api, { headers: { Accept: "application/json" } });
    const data = await res.json();
    if (!res.ok) throw new Error(data.error || res.statusText);
    apply(data);
    live.textContent = "live " + new Date().toISOString().slice(11, 19);
    live.className = "live ok";
  } catch (err) {
    live.textContent = "not refreshed: " + err.message;
    live.className = "live bad";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-format=time]").forEach((el) => {
    el.textContent = shown(Number(el.dataset.ms), "time");
  });
  document.querySelectorAll("td.body .views button").forEach((btn) => {
    btn.addEventListener("click", () => {
      const cell = btn.closest("td.body");
      cell.querySelectorAll("pre[data-body]").forEach((pre) => { pre.hidden = pre.dataset.body !== btn.dataset.view; });
      cell.querySelectorAll(".views button").forEach((b) => b.classList.toggle("on", b === btn));
    });
  });
  document.querySelectorAll("form[data-confirm]").forEach((form) => {
    form.addEventListener("submit", (ev) => { if (!window.confirm(form.dataset.confirm)) ev.preventDefault(); });
  });
  const api = document.body.dataset.api;
  if (api) {
    refresh();
    setInterval(refresh, Number(document.body.dataset.refresh) || 5000);
  }
});
