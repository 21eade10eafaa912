// The panel of a raster: its statistics (gis-raster-stat) and metadata (gis-raster-info), and
// what can be done with it: configure it as a layer, choose how it is drawn (rendering.js),
// pre-tile it (the dry-run plan first), compress it, run the speed test.
import { api, explain } from "./api.js";
import { byId, fieldTable, fill, h, rawJson, status } from "./dom.js";
import { startJob, watch } from "./jobs.js";
import { renderingSection } from "./rendering.js";

const FORMATS = ["png", "webp", "jpg", "png@2x", "webp@2x", "jpg@2x"];
const RESAMPLING = ["bilinear", "nearest", "cubic"];

/** The EPSG:4326 bounds [w, s, e, n] of a layer's raster, from gis-raster-info. */
export async function rasterBounds(id) {
  const info = await api(`gis-raster-info/${id}`);
  const points = info.wgs84Extent?.coordinates?.flat() ?? [];
  if (!points.length) throw new Error("the raster's metadata has no EPSG:4326 extent");
  const xs = points.map((p) => p[0]);
  const ys = points.map((p) => p[1]);
  return [Math.min(...xs), Math.min(...ys), Math.max(...xs), Math.max(...ys)];
}

async function run(label, path, params, title) {
  try {
    await startJob(path, params, title);
    status(`${label}: started`);
  } catch (error) {
    const line = status(`${label}: ${explain(error)}`, "error");
    const running = error.detail?.job_id; // 409: the layer's run going on
    if (running)
      line.append(
        " ",
        h("button", { type: "button", onclick: () => watch({ id: running }, title) }, "Watch it"),
      );
  }
}

/**
 * Open the panel of a listing row ({ id, name, path, type, islayer }). zoomTo(): fit the map to
 * it; map: the LayerMap; draw(): draw the layer (tick its box).
 */
export function openRaster(row, { zoomTo, map, draw }) {
  const section = byId("layer-panel");
  section.hidden = false;
  section.dataset.layerId = row.id;
  const stat = h("div", { id: "raster-stat" }, h("p", { class: "note" }, "Statistics…"));
  const info = h("div", { id: "raster-info" }, row.islayer ? h("p", { class: "note" }, "Metadata…") : null);
  fill(
    section,
    h("h2", {}, row.name, " ", h("small", {}, row.type === "dir" ? "folder" : "file")),
    fieldTable({ path: row.path, id: row.id, layer: row.islayer ? "yes" : "not configured" }),
    row.islayer ? renderingSection(row, { map, draw, run }) : null,
    row.islayer ? actions(row, zoomTo) : configureForm(row),
    h("h3", {}, "Statistics"),
    stat,
    row.islayer ? h("h3", {}, "Metadata") : null,
    info,
  );
  api(`gis-raster-stat/${row.id}`)
    .then((body) => fill(stat, statView(body)))
    .catch((error) => fill(stat, h("p", { class: "error" }, explain(error))));
  if (row.islayer) {
    api(`gis-raster-info/${row.id}`)
      .then((body) => fill(info, infoView(body)))
      .catch((error) => fill(info, h("p", { class: "error" }, explain(error))));
  }
}

function configureForm(row) {
  const resampling = h(
    "select",
    { id: "configure-resampling" },
    RESAMPLING.map((r) => h("option", { value: r }, r)),
  );
  return h(
    "form",
    {
      id: "configure",
      class: "actions",
      onsubmit: (event) => {
        event.preventDefault();
        run("Configure", `gis-raster/${row.path}`, { resampling: resampling.value }, `Configure ${row.name}`);
      },
    },
    h("p", { class: "note" }, "Not a layer yet: configure it to draw its tiles."),
    h("label", {}, "Resampling ", resampling),
    h("button", { type: "submit" }, "Configure"),
  );
}

function actions(row, zoomTo) {
  const minzoom = h("input", { id: "pretile-minzoom", type: "number", min: 0, max: 24, placeholder: "6" });
  const maxzoom = h("input", { id: "pretile-maxzoom", type: "number", min: 1, max: 25, placeholder: "16" });
  const format = h(
    "select",
    { id: "pretile-format" },
    FORMATS.map((f) => h("option", { value: f }, f)),
  );
  const nocache = h("input", { id: "pretile-nocache", type: "checkbox" });
  const plan = h("div", { id: "pretile-plan" });
  const start = h("button", { id: "pretile-start", type: "button", disabled: true }, "Start pre-tiling");
  const params = () => ({
    minzoom: minzoom.value,
    maxzoom: maxzoom.value,
    tile_format: format.value,
    nocache: nocache.checked ? 1 : null,
  });
  const stale = () => {
    start.disabled = true;
    fill(plan);
  };
  for (const input of [minzoom, maxzoom, format, nocache]) input.addEventListener("input", stale);
  start.addEventListener("click", () => {
    start.disabled = true;
    run("Pre-tiling", `gis-layer-pretile/${row.id}`, params(), `Pre-tile ${row.name}`);
  });
  return h(
    "div",
    { class: "actions" },
    h("button", { type: "button", onclick: zoomTo }, "Zoom to extent"),
    h(
      "form",
      {
        id: "pretile",
        onsubmit: async (event) => {
          event.preventDefault();
          stale();
          try {
            const body = await api(`gis-layer-pretile/${row.id}`, { params: { ...params(), dryrun: 1 } });
            fill(plan, planView(body));
            start.disabled = Boolean(body.over_ceiling);
            start.textContent = `Start pre-tiling (${body.total} tiles)`;
          } catch (error) {
            fill(plan, h("p", { class: "error" }, explain(error)));
          }
        },
      },
      h("h3", {}, "Pre-tile"),
      h("label", {}, "From zoom ", minzoom),
      h("label", {}, "to zoom (not included) ", maxzoom),
      h("label", {}, "Format ", format),
      h("label", {}, nocache, " render cached tiles again"),
      h("button", { type: "submit", id: "pretile-dryrun" }, "Plan (dry run)"),
      plan,
      start,
    ),
    h("h3", {}, "Other jobs"),
    h(
      "button",
      {
        type: "button",
        id: "compress",
        onclick: () => run("Compression", `gis-layer-compress/${row.id}`, {}, `Compress ${row.name}`),
      },
      "Compress",
    ),
    h(
      "button",
      {
        type: "button",
        id: "speed-test",
        onclick: () => run("Speed test", "gis-speed-test", { layer: row.id }, `Speed test ${row.name}`),
      },
      "Speed test",
    ),
  );
}

function planView(plan) {
  return h(
    "div",
    {},
    h(
      "table",
      { class: "fields plan" },
      h("thead", {}, h("tr", {}, h("th", {}, "zoom"), h("th", {}, "tiles"), h("th", {}, "tiled"))),
      h(
        "tbody",
        {},
        plan.zooms.map((z) =>
          h(
            "tr",
            {},
            h("td", {}, z.zoom),
            h("td", {}, z.tiles),
            h("td", {}, z.tiled === false ? "cut by the cap" : "yes"),
          ),
        ),
      ),
    ),
    h("p", { id: "pretile-total" }, `${plan.total} tiles`),
    plan.cut?.length
      ? h(
          "p",
          { class: "note" },
          `Zooms ${plan.cut.join(", ")} are over the cap of ${plan.cap} tiles: left out.`,
        )
      : null,
    plan.over_ceiling
      ? h("p", { class: "error" }, `Over the ceiling of ${plan.ceiling} tiles: choose fewer zooms.`)
      : null,
  );
}

function statView(body) {
  const files = body.files ?? [];
  return h(
    "div",
    {},
    fieldTable({
      type: body.type,
      created: body.stat?.cdate,
      modified: body.stat?.edate,
      files: files.length,
    }),
    files.length
      ? h(
          "table",
          { class: "fields" },
          h(
            "tbody",
            {},
            files
              .slice(0, 20)
              .map((f) =>
                h(
                  "tr",
                  {},
                  h("td", {}, f.name),
                  h("td", { class: f.err ? "error" : null }, f.err || fileSummary(f)),
                ),
              ),
          ),
        )
      : null,
    rawJson("gis-raster-stat", body),
  );
}

function fileSummary(file) {
  const parts = [];
  if (file.size != null) parts.push(`${(file.size / 1048576).toFixed(1)} MB`);
  if (file.rasterSize) parts.push(`${file.rasterSize.join(" × ")} px`);
  if (file.bands) parts.push(file.bands);
  return parts.join(", ");
}

function infoView(info) {
  const bands = info.bands ?? [];
  const crs = info.coordinateSystem?.wkt?.match(/^\w+\["([^"]+)"/)?.[1];
  return h(
    "div",
    {},
    fieldTable({
      driver: info.driverShortName,
      size: info.size?.join(" × "),
      bands: bands.map((b) => `${b.colorInterpretation ?? b.band} ${b.type}`).join(", "),
      crs,
      compression: info.metadata?.IMAGE_STRUCTURE?.COMPRESSION,
    }),
    rawJson("gis-raster-info", info),
  );
}
