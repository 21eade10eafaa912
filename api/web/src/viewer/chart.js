// The speed test's result as bars: the median time of a tile per zoom, cold and cached.
const SVG = "http://www.w3.org/2000/svg";

function s(tag, attrs, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  if (text != null) el.textContent = text;
  return el;
}

/** An SVG chart of a speed test result ({ zooms: [{ zoom, cold: { p50_ms }, cached: { p50_ms } }] }). */
export function speedChart(result) {
  const zooms = result.zooms ?? [];
  const series = [
    ["cold", "#d7263d"],
    ["cached", "#1b998b"],
  ];
  const top = Math.max(1, ...zooms.flatMap((z) => series.map(([name]) => z[name]?.p50_ms ?? 0)));
  const [width, height, left, bottom, bar] = [340, 180, 34, 24, 16];
  const group = (width - left) / Math.max(1, zooms.length);
  const svg = s("svg", {
    viewBox: `0 0 ${width} ${height}`,
    class: "chart",
    role: "img",
    "aria-label": "Speed test: median milliseconds per tile by zoom, cold and cached",
  });
  const plot = height - bottom - 16;
  svg.append(s("text", { x: 0, y: 10, class: "axis" }, `${Math.round(top)} ms`));
  svg.append(
    s("line", { x1: left, y1: height - bottom, x2: width, y2: height - bottom, class: "axis-line" }),
  );
  zooms.forEach((z, i) => {
    const x0 = left + i * group + (group - bar * series.length) / 2;
    series.forEach(([name, colour], j) => {
      const ms = z[name]?.p50_ms ?? 0;
      const h = Math.max(1, (ms / top) * plot); // a cached tile takes ~1/500 of a cold one
      const x = x0 + j * bar;
      const rect = s("rect", {
        x,
        y: height - bottom - h,
        width: bar - 2,
        height: h,
        fill: colour,
        class: `bar ${name}`,
      });
      rect.append(s("title", {}, `zoom ${z.zoom}, ${name}: p50 ${ms} ms`));
      svg.append(rect);
      const label = ms >= 10 ? Math.round(ms) : ms.toFixed(ms >= 1 ? 1 : 2);
      svg.append(s("text", { x: x + (bar - 2) / 2, y: height - bottom - h - 2, class: "value" }, label));
    });
    svg.append(s("text", { x: x0 + bar - 4, y: height - 8, class: "axis" }, `z${z.zoom}`));
  });
  series.forEach(([name, colour], j) => {
    svg.append(s("rect", { x: width - 120 + j * 60, y: 2, width: 10, height: 10, fill: colour }));
    svg.append(s("text", { x: width - 106 + j * 60, y: 11, class: "axis" }, name));
  });
  return svg;
}
