// The page of tests/browser/test_maplibre.py. Its query string says what to draw:
//   api     the API's base URL (another origin than this page's)
//   raster  a raster layer id: its tiles /api-user/rtile/<raster>/en/{z}/{x}/{y}.png
//   vector  a PostGIS layer: its TileJSON /api-user/gis-datasource/<vector>, drawn as a fill
//   z x y   the map shows exactly this raster tile, pixel for pixel (a 256 px map)
//   key     optional: an `api_key` query parameter added to every request to the API
//   rasterjson, vectorjson
//           optional, instead of the above: the two layers' TileJSON URLs, as a user pastes
//           them (a key in them or not); MapLibre reads each itself (`url:`) and asks the tiles
//           it lists, exactly as listed: no transformRequest, so `requests` stays empty
//   run     an id the result is posted back with
// On `idle` (or after a time limit) the page writes its result, as JSON, into #result and
// posts it to its own origin's /result.
import * as maplibregl from "/maplibre/maplibre-gl.mjs";

const FILL = [255, 0, 255]; // the countries' fill: a colour no raster pixel has
const LIMIT_MS = 15000;

const q = new URLSearchParams(location.search);
const api = q.get("api");
const key = q.get("key");
const [rasterJson, vectorJson] = [q.get("rasterjson"), q.get("vectorjson")];
const [z, x, y] = ["z", "x", "y"].map((name) => Number(q.get(name)));
const errors = [];
const requests = [];

function tileCentre(z, x, y) {
  const n = 2 ** z;
  const lng = ((x + 0.5) / n) * 360 - 180;
  const lat = (Math.atan(Math.sinh(Math.PI * (1 - (2 * (y + 0.5)) / n))) * 180) / Math.PI;
  return [lng, lat];
}

function withKey(url) {
  if (!key || !url.startsWith(api)) return url;
  const parsed = new URL(url);
  parsed.searchParams.set("api_key", key);
  return parsed.href;
}

function report(extra) {
  const result = { errors, requests, ...extra };
  const text = JSON.stringify(result);
  document.getElementById("result").textContent = text;
  return fetch(`/result?run=${encodeURIComponent(q.get("run"))}`, { method: "POST", body: text });
}

// the canvas's pixels: RGBA bytes, row by row, base64 (preserveDrawingBuffer keeps the frame)
function pixels(map) {
  const gl = map.getCanvas();
  const copy = document.createElement("canvas");
  [copy.width, copy.height] = [gl.width, gl.height];
  const ctx = copy.getContext("2d");
  ctx.drawImage(gl, 0, 0);
  const bytes = ctx.getImageData(0, 0, copy.width, copy.height).data;
  let text = "";
  for (let i = 0; i < bytes.length; i += 8192) {
    text += String.fromCharCode(...bytes.subarray(i, i + 8192));
  }
  return { width: copy.width, height: copy.height, rgba: btoa(text) };
}

let done = false;
function finish(map, reason) {
  if (done) return;
  done = true;
  const rendered = map.getLayer("countries")
    ? map.queryRenderedFeatures({ layers: ["countries"] }).map((f) => f.properties)
    : [];
  report({ reason, pixels: pixels(map), rendered, loaded: map.loaded() });
}

// the sources: tile templates and a key added by transformRequest, or the two TileJSONs alone
const sources = rasterJson
  ? {
      raster: { type: "raster", url: rasterJson, tileSize: 256 },
      countries: { type: "vector", url: vectorJson },
    }
  : {
      raster: {
        type: "raster",
        tiles: [`${api}/api-user/rtile/${q.get("raster")}/en/{z}/{x}/{y}.png`],
        tileSize: 256,
      },
      countries: { type: "vector", url: `${api}/api-user/gis-datasource/${q.get("vector")}` },
    };
function recorded(url) {
  const sent = withKey(url);
  requests.push(sent);
  return { url: sent };
}

try {
  const map = new maplibregl.Map({
    container: "map",
    center: tileCentre(z, x, y),
    zoom: z - 1, // MapLibre's zoom 0 is one 512 px world: a 256 px tile of zoom z is 1:1 at z - 1
    pixelRatio: 1,
    fadeDuration: 0,
    attributionControl: false,
    interactive: false,
    canvasContextAttributes: { preserveDrawingBuffer: true, antialias: false },
    transformRequest: rasterJson ? undefined : recorded,
    style: {
      version: 8,
      sources,
      layers: [
        {
          id: "raster",
          type: "raster",
          source: "raster",
          paint: { "raster-fade-duration": 0, "raster-resampling": "nearest" },
        },
        {
          id: "countries",
          type: "fill",
          source: "countries",
          "source-layer": q.get("vector"),
          paint: { "fill-color": `rgb(${FILL.join(",")})`, "fill-antialias": false },
        },
      ],
    },
  });
  map.on("error", (event) => {
    const error = event.error || {};
    errors.push({
      message: String(error.message || error),
      status: error.status ?? null,
      url: error.url ?? null,
      source: event.sourceId ?? null,
    });
  });
  map.on("idle", () => finish(map, "idle"));
  setTimeout(() => finish(map, "time limit"), LIMIT_MS);
} catch (error) {
  report({ reason: "exception", exception: String(error && error.stack ? error.stack : error) });
}
