// A raster layer's rendering, in its panel: its bands, their stretch, a colour map, hillshade or
// band math (TiTiler's parameters: bidx, rescale, colormap_name, algorithm, expression) applied
// to the map from the layer's TileJSON asked with them, its legend (legend.json, legend.png),
// saved as the layer's own rendering (the configuration job), and a DEM as 3D terrain.
import { ApiError, api, apiBlob, explain } from "./api.js";
import { fill, h, status } from "./dom.js";

/** The colour maps offered by name (rio-tiler's; "other" takes any of its names). */
export const COLORMAPS = ["viridis", "magma", "terrain", "rdylgn", "greys"];
const OTHER = "other";
/** The hillshade's light when the layer's rendering names none. */
const AZIMUTH = 315;
const ALTITUDE = 45;
/** The parameters of a layer's rendering the form has no field for: kept as they are. */
const KEPT = ["colormap", "nodata", "resampling"];

// the legend routes answered 404 (not on this server): not asked again on this page
let legendMissing = false;
let legendUrl = null; // the object URL of the legend image shown

const tilejsonPath = (id) => `rtile/${encodeURIComponent(id)}/tilejson.json`;

/** Whether a layer's statistics are those of a DEM: one band of floats or of 16-bit integers. */
export function isDem(statistics) {
  return statistics?.length === 1 && /^(float\d*|int16)$/.test(String(statistics[0].dtype));
}

/** A number as a short text for an input (7 significant digits at most). */
function short(value) {
  return value == null || !Number.isFinite(Number(value)) ? "" : String(Number(Number(value).toPrecision(7)));
}

/**
 * The "Rendering" section of a configured raster's panel (row: { id, path, name }).
 * map: the LayerMap; draw(): tick the layer's box (draw it); run(label, path, params, title):
 * start a job and watch it.
 */
export function renderingSection(row, { map, draw, run }) {
  const section = h("section", { id: "rendering-section" }, h("h3", {}, "Rendering"));
  const body = h("div", {}, h("p", { class: "note" }, "Rendering…"));
  section.append(body);
  api(tilejsonPath(row.id), { params: map.renderingOf(row.id) ?? undefined })
    .then((tilejson) => fill(body, form(row, tilejson, { map, draw, run })))
    .catch((error) => fill(body, h("p", { class: "error" }, explain(error))));
  return section;
}

function form(row, tilejson, { map, draw, run }) {
  const stats = tilejson.statistics ?? [];
  if (!stats.length) {
    return h(
      "p",
      { class: "note" },
      "No band statistics: the layer was configured before rendering parameters. ",
      h(
        "button",
        {
          type: "button",
          id: "rendering-configure",
          onclick: () => run("Configure", `gis-raster/${row.path}`, {}, `Configure ${row.name}`),
        },
        "Configure it again",
      ),
    );
  }
  const error = h("p", { id: "rendering-error", class: "error", role: "alert" });
  const legend = legendBlock();

  // bands: up to three selects of the layer's bands ("—" leaves one out)
  const bandSelects = [0, 1, 2].slice(0, Math.min(3, stats.length)).map((i) =>
    h(
      "select",
      { id: `rendering-band-${i + 1}`, "aria-label": ["Band (red, or the one band)", "Green", "Blue"][i] },
      i ? h("option", { value: "" }, "—") : null,
      stats.map((s) => h("option", { value: String(s.band) }, `b${s.band}`)),
    ),
  );
  const expression = h("input", {
    id: "rendering-expression",
    type: "text",
    placeholder: "(b4-b3)/(b4+b3)",
    spellcheck: false,
    "aria-label": "Expression",
  });
  const stretch = h("div", { id: "rendering-stretch" });
  const colormap = h(
    "select",
    { id: "rendering-colormap", "aria-label": "Colour map" },
    h("option", { value: "" }, "none"),
    COLORMAPS.map((name) => h("option", { value: name }, name)),
    h("option", { value: OTHER }, "other…"),
  );
  const colormapOther = h("input", {
    id: "rendering-colormap-other",
    type: "text",
    placeholder: "a rio-tiler name (cividis, blues…)",
    spellcheck: false,
    hidden: true,
    "aria-label": "Colour map name",
  });
  const hillshade = h("input", { id: "rendering-hillshade", type: "checkbox" });
  const azimuth = h("input", {
    id: "rendering-azimuth",
    type: "number",
    min: 0,
    max: 360,
    step: "any",
    value: AZIMUTH,
    "aria-label": "Azimuth",
  });
  const altitude = h("input", {
    id: "rendering-altitude",
    type: "number",
    min: 0,
    max: 90,
    step: "any",
    value: ALTITUDE,
    "aria-label": "Altitude",
  });
  let kept = {}; // the layer's parameters the form has no field for
  const keptNote = h("p", { class: "note", id: "rendering-kept" });

  const statOf = (band) => stats.find((s) => s.band === Number(band));
  const bands = () => bandSelects.map((select) => select.value).filter(Boolean);
  const blocks = () =>
    expression.value.trim() ? Math.min(3, expression.value.split(";").filter((b) => b.trim()).length) : 0;

  let shape = null; // the bands (or the expression's blocks) the stretch rows are of
  const shapeNow = () => (blocks() ? `expression ${blocks()}` : bands().join(","));

  /** One min/max row per band drawn (or per block of the expression), prefilled. */
  function stretchRows(ranges = []) {
    shape = shapeNow();
    const labels = blocks() ? [...Array(blocks()).keys()].map((i) => `expr. ${i + 1}`) : bands();
    fill(
      stretch,
      labels.map((label, i) => {
        const s = blocks() ? null : statOf(label);
        // as the server reads a rendering: the last range serves the bands after it
        const [lo, hi] = ranges[i] ?? ranges.at(-1) ?? defaultRange(s);
        const title = s
          ? `b${s.band} ${s.dtype}: min ${short(s.min)}, max ${short(s.max)}, mean ${short(s.mean)},` +
            ` 2–98 % ${short(s.percentile_2)}–${short(s.percentile_98)}`
          : "the expression's values stretched to 0–255 (empty: not stretched)";
        return h(
          "div",
          { class: "stretch-row", title },
          h(
            "span",
            { class: "band" },
            blocks() ? label : `b${label}`,
            s ? h("small", {}, ` ${s.dtype}`) : null,
          ),
          h("input", {
            id: `rendering-min-${i + 1}`,
            type: "number",
            step: "any",
            value: lo,
            placeholder: "min",
            "aria-label": `Minimum of ${label}`,
          }),
          "–",
          h("input", {
            id: `rendering-max-${i + 1}`,
            type: "number",
            step: "any",
            value: hi,
            placeholder: "max",
            "aria-label": `Maximum of ${label}`,
          }),
        );
      }),
    );
    sync();
  }

  /** Fields that do not apply are disabled: bands with an expression, a colour map over more
   * than one band, the stretch of a hillshade, the light without one. */
  function sync() {
    const math = Boolean(expression.value.trim());
    for (const select of bandSelects) select.disabled = math;
    colormap.disabled = !math && bands().length > 1;
    colormapOther.hidden = colormap.value !== OTHER;
    colormapOther.disabled = colormap.disabled;
    azimuth.disabled = altitude.disabled = !hillshade.checked;
    for (const input of stretch.querySelectorAll("input")) input.disabled = hillshade.checked;
  }

  /** The form's fields from a rendering (the TileJSON's: the parameters asked, else the layer's). */
  function load(rendering) {
    const r = rendering ?? {};
    const chosen = (r.bidx ?? []).map(String);
    const fallback = stats.length >= 3 ? ["1", "2", "3"] : ["1"];
    const picked = chosen.length ? chosen : fallback;
    bandSelects.forEach((select, i) => (select.value = picked[i] ?? ""));
    expression.value = r.expression ?? "";
    const name = r.colormap_name ?? "";
    colormap.value = !name || COLORMAPS.includes(name) ? name : OTHER;
    colormapOther.value = COLORMAPS.includes(name) ? "" : name;
    hillshade.checked = r.algorithm === "hillshade";
    const light = r.algorithm === "hillshade" ? (r.algorithm_params ?? {}) : {};
    azimuth.value = light.azimuth ?? AZIMUTH;
    altitude.value = light.angle_altitude ?? ALTITUDE;
    kept = Object.fromEntries(KEPT.filter((k) => r[k] != null).map((k) => [k, r[k]]));
    if (r.algorithm && r.algorithm !== "hillshade") {
      kept.algorithm = r.algorithm;
      if (r.algorithm_params) kept.algorithm_params = r.algorithm_params;
    }
    keptNote.textContent = Object.keys(kept).length
      ? `Kept from the layer's rendering: ${Object.keys(kept).join(", ")}.`
      : "";
    const ranges = (r.rescale ?? []).map((text) => String(text).split(","));
    // a stretch chosen for other bands than these is not theirs: their statistics instead
    stretchRows(chosen.length || r.expression ? ranges : []);
  }

  /** The rendering parameters the form names (TiTiler's names; lists for bidx and rescale). */
  function params() {
    const out = {};
    const math = expression.value.trim();
    if (math) out.expression = math;
    else out.bidx = bands();
    if (!hillshade.checked) {
      const rows = [...stretch.querySelectorAll(".stretch-row")].map((row) =>
        [...row.querySelectorAll("input")].map((input) => input.value.trim()),
      );
      if (rows.length && rows.every(([lo, hi]) => lo !== "" && hi !== ""))
        out.rescale = rows.map(([lo, hi]) => `${lo},${hi}`);
    }
    const name = colormap.value === OTHER ? colormapOther.value.trim().toLowerCase() : colormap.value;
    if (name && !colormap.disabled) out.colormap_name = name;
    for (const [key, value] of Object.entries(kept)) {
      if (key === "colormap" && name) continue; // a name replaces the layer's colour table
      if (key.startsWith("algorithm") && hillshade.checked) continue;
      out[key] = typeof value === "object" ? JSON.stringify(value) : value;
    }
    if (hillshade.checked) {
      out.algorithm = "hillshade";
      out.algorithm_params = JSON.stringify({
        azimuth: Number(azimuth.value || AZIMUTH),
        angle_altitude: Number(altitude.value || ALTITUDE),
      });
    }
    return out;
  }

  /** Draw the layer with the form's parameters: its TileJSON asked with them (a 400 names a
   * wrong one), its source's tiles from that template, its legend. */
  async function apply() {
    error.textContent = "";
    const chosen = params();
    try {
      const drawn = await api(tilejsonPath(row.id), { params: chosen });
      await map.setRendering(row.id, chosen, drawn);
      if (!map.isShown(`raster:${row.id}`)) await draw();
      showLegend(legend, row.id, chosen);
      status(`${row.name}: drawn with ${flat(chosen).join("&")}`);
      return true;
    } catch (failure) {
      error.textContent = explain(failure);
      return false;
    }
  }

  async function reset() {
    error.textContent = "";
    try {
      const own = await api(tilejsonPath(row.id));
      await map.setRendering(row.id, null, own);
      load(own.rendering);
      showLegend(legend, row.id, null);
      status(`${row.name}: drawn with its own rendering`);
    } catch (failure) {
      error.textContent = explain(failure);
    }
  }

  async function save() {
    // what is saved is what the map shows: applied first (its errors before any job)
    if (await apply())
      run("Save rendering", `gis-raster/${row.path}`, params(), `Save the rendering of ${row.name}`);
  }

  for (const select of bandSelects) select.addEventListener("change", () => stretchRows());
  // rows of their own once the expression reads another number of blocks (or none)
  expression.addEventListener("input", () => (shapeNow() === shape ? sync() : stretchRows()));
  for (const input of [colormap, hillshade]) input.addEventListener("change", sync);

  load(tilejson.rendering);
  showLegend(legend, row.id, map.renderingOf(row.id));
  return h(
    "div",
    {},
    h(
      "form",
      {
        id: "rendering",
        onsubmit: (event) => {
          event.preventDefault();
          apply();
        },
      },
      h("label", { class: "bands" }, "Bands ", bandSelects),
      h("label", {}, "Expression ", expression),
      h("div", { class: "field" }, "Stretch (min–max)", stretch),
      h("label", {}, "Colour map ", colormap, " ", colormapOther),
      h(
        "div",
        { class: "field hillshade" },
        h("label", {}, hillshade, " hillshade"),
        h("label", {}, "azimuth ", azimuth),
        h("label", {}, "altitude ", altitude),
      ),
      keptNote,
      h(
        "div",
        { class: "buttons" },
        h("button", { type: "submit", id: "rendering-apply" }, "Apply"),
        h("button", { type: "button", id: "rendering-reset", onclick: reset }, "Reset"),
        h("button", { type: "button", id: "rendering-save", onclick: save }, "Save as the layer's rendering"),
      ),
      error,
    ),
    legend.node,
    isDem(stats) ? terrainToggle(row, map, error) : null,
  );
}

/** Parameters as name=value texts, to read (a list's parameter repeated). */
function flat(params) {
  return Object.entries(params).flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map((one) => `${k}=${one}`));
}

/** The stretch of a band by default: its 2–98 % (0–255 for an 8-bit band, drawn as it is). */
function defaultRange(stat) {
  if (!stat) return ["", ""];
  if (stat.dtype === "uint8") return ["0", "255"];
  return [short(stat.percentile_2), short(stat.percentile_98)];
}

function legendBlock() {
  const image = h("img", { id: "legend-image", alt: "The legend's colours" });
  const range = h("p", { id: "legend-range" });
  const node = h("div", { id: "rendering-legend", class: "legend", hidden: true }, image, range);
  return { node, image, range, asked: 0 };
}

/**
 * The legend of the layer drawn with params (null: its own rendering): legend.png and the
 * min/max of legend.json. Hidden when the server has no legend routes (404) or fails.
 */
async function showLegend(legend, id, params) {
  const asked = ++legend.asked;
  legend.node.hidden = true;
  if (legendMissing) return;
  const base = `rtile/${encodeURIComponent(id)}/legend`;
  try {
    const [body, blob] = await Promise.all([
      api(`${base}.json`, { params: params ?? undefined }),
      apiBlob(`${base}.png`, { params: params ?? undefined }),
    ]);
    if (asked !== legend.asked) return; // asked again meanwhile
    if (legendUrl) URL.revokeObjectURL(legendUrl);
    legendUrl = URL.createObjectURL(blob);
    legend.image.src = legendUrl;
    // three bands or an algorithm's output have no colours to show: their words only
    legend.image.hidden = !(body.entries ?? []).length;
    legend.node.dataset.kind = body.kind ?? "";
    legend.range.textContent = legendText(body);
    legend.node.hidden = false;
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) legendMissing = true;
  }
}

function legendText(body) {
  const entries = body.entries ?? [];
  if (body.min != null && body.max != null) return `${short(body.min)} – ${short(body.max)}`;
  if (body.kind === "classes" || body.kind === "intervals") return `${entries.length} ${body.kind}`;
  if (body.kind === "rgb") return "red, green, blue";
  return body.kind ?? "";
}

/** A DEM's "3D terrain": its terrain-RGB tiles as the map's terrain, with a hillshade. */
function terrainToggle(row, map, error) {
  const box = h("input", { id: "terrain-toggle", type: "checkbox", checked: map.terrain === row.id });
  box.addEventListener("change", async () => {
    error.textContent = "";
    box.disabled = true;
    try {
      if (box.checked) {
        const tilejson = await api(tilejsonPath(row.id), {
          params: { algorithm: "terrainrgb", resampling: "bilinear" },
        });
        await map.showTerrain(row.id, tilejson);
      } else await map.showTerrain(null, null);
    } catch (failure) {
      error.textContent = `3D terrain: ${explain(failure)}`;
      box.checked = map.terrain === row.id;
    } finally {
      box.disabled = false;
    }
  });
  return h(
    "label",
    { class: "terrain", title: "Its heights (terrain-RGB tiles) as the map's relief, shaded" },
    box,
    " 3D terrain",
  );
}
