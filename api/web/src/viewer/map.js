// The map: MapLibre GL JS over a base drawn from our own countries layer (no outside base
// map), raster layers as tile sources, vector layers styled by their geometry type, and
// PMTiles exports read from their download URL (the `pmtiles` protocol).
import * as maplibregl from "maplibre-gl";
import { api, apiUrl, authHeaders } from "./api.js";
import { openArchive, registerArchives } from "./archive.js";
import { follow } from "./sse.js";

registerArchives(maplibregl);

/** The vector layer drawn as the base, when the catalogue offers it. */
export const BASE_LAYER = "public.countries";
const PALETTE = ["#d7263d", "#1b998b", "#f46036", "#2e294e", "#c5d86d", "#3f88c5", "#8f2d56"];
const BASE_IDS = ["base-fill", "base-line"];
/** The colour a seeding run's coverage is drawn in (a fill at 0.3, its outline whole). */
export const COVERAGE_COLOUR = "#ff00ff";
const COVERAGE_IDS = ["coverage-fill", "coverage-line"];

const colour = (id) => PALETTE[[...id].reduce((sum, c) => sum + c.charCodeAt(0), 0) % PALETTE.length];

/** Bounds [w, s, e, n] of a GeoJSON Polygon's (or MultiPolygon's) rings. */
export function polygonBounds(polygon) {
  const points = polygon.coordinates.flat(polygon.type === "MultiPolygon" ? 2 : 1);
  const xs = points.map((p) => p[0]);
  const ys = points.map((p) => p[1]);
  return [Math.min(...xs), Math.min(...ys), Math.max(...xs), Math.max(...ys)];
}

/** The source and the hillshade layer of the 3D terrain (one DEM at a time). */
const TERRAIN_SOURCE = "terrain";
const TERRAIN_HILLSHADE = "terrain-hillshade";
/** How much the terrain's heights are exaggerated, and the pitch it is first seen at. */
const EXAGGERATION = 1.5;
const TERRAIN_PITCH = 50;

export class LayerMap {
  /** onClick({ lngLat, features }), onIdle(drawnIds), onError(message) */
  constructor(container, { onClick, onIdle, onError }) {
    this.container = container;
    this.shown = new Map(); // layer key -> { source, layers }
    this.renderings = new Map(); // raster layer id -> the rendering parameters it is drawn with
    this.terrain = null; // the id of the raster layer drawn as the 3D terrain
    this.pitched = false; // whether the terrain tilted the map (it levels it when it goes)
    this.map = new maplibregl.Map({
      container,
      hash: "map",
      center: [10, 30],
      zoom: 1,
      fadeDuration: 0,
      attributionControl: false,
      // the frame stays readable (screenshots, tests reading the canvas)
      canvasContextAttributes: { preserveDrawingBuffer: true },
      transformRequest: (url) => ({ url, headers: authHeaders(url) }),
      style: {
        version: 8,
        sources: {},
        layers: [{ id: "background", type: "background", paint: { "background-color": "#c9dcea" } }],
      },
    });
    this.map.addControl(new maplibregl.NavigationControl({ showCompass: false }));
    this.map.addControl(new maplibregl.ScaleControl());
    this.ready = new Promise((resolve) => this.map.on("load", resolve));
    this.map.on("error", (event) => onError(String(event.error?.message ?? event.error ?? event)));
    this.map.on("dataloading", () => (container.dataset.state = "loading"));
    this.map.on("idle", () => {
      container.dataset.state = "idle";
      onIdle([...this.shown.keys()].filter((key) => this.map.isSourceLoaded(this.shown.get(key).source)));
    });
    this.map.on("click", (event) => {
      const layers = [...this.shown.values()].flatMap((shown) => (shown.vector ? shown.layers : []));
      const features = layers.length ? this.map.queryRenderedFeatures(event.point, { layers }) : [];
      this.mark(event.lngLat);
      onClick({ lngLat: event.lngLat, features });
    });
  }

  /** Draw the base from the catalogue's countries layer, if it is there. */
  async setBase(catalogue) {
    await this.ready;
    for (const id of BASE_IDS) if (this.map.getLayer(id)) this.map.removeLayer(id);
    if (this.map.getSource("base")) this.map.removeSource("base");
    const entry = catalogue.find((layer) => layer.id === BASE_LAYER);
    if (!entry) return false;
    const tilejson = await api(`gis-datasource/${encodeURIComponent(entry.id)}`);
    this.map.addSource("base", vectorSource(tilejson));
    const sourceLayer = tilejson.vector_layers?.[0]?.id ?? entry.id;
    const before = this.firstOverlay();
    this.map.addLayer(
      {
        id: "base-fill",
        type: "fill",
        source: "base",
        "source-layer": sourceLayer,
        paint: { "fill-color": "#f3f0e6" },
      },
      before,
    );
    this.map.addLayer(
      {
        id: "base-line",
        type: "line",
        source: "base",
        "source-layer": sourceLayer,
        paint: { "line-color": "#9a9486", "line-width": 0.6 },
      },
      before,
    );
    return true;
  }

  firstOverlay() {
    return this.map.getStyle().layers.find((layer) => layer.id.startsWith("overlay:"))?.id;
  }

  isShown(key) {
    return this.shown.has(key);
  }

  /**
   * Show (or hide) a raster layer: the tiles of its TileJSON, in the default language, drawn
   * with the rendering parameters chosen for it on the page (setRendering), else its own.
   */
  async showRaster(id, on) {
    await this.ready;
    const key = `raster:${id}`;
    if (!on) return this.hide(key);
    if (this.shown.has(key)) return;
    const tilejson = await api(`rtile/${encodeURIComponent(id)}/tilejson.json`, {
      params: this.renderings.get(id),
    });
    if (this.shown.has(key)) return; // drawn meanwhile
    const source = `overlay:${key}`;
    // no maxzoom: past the layer's own zoom the server still draws its tiles (its resampling)
    this.map.addSource(source, {
      type: "raster",
      tiles: tilejson.tiles,
      bounds: tilejson.bounds,
      tileSize: 256,
    });
    this.map.addLayer({ id: source, type: "raster", source }, this.rasterSlot());
    this.shown.set(key, { source, layers: [source], vector: false });
  }

  /** The layer rasters go under: the terrain's hillshade, else the first vector overlay. */
  rasterSlot() {
    if (this.map.getLayer(TERRAIN_HILLSHADE)) return TERRAIN_HILLSHADE;
    return this.map.getStyle().layers.find((layer) => layer.id.startsWith("overlay:vector:"))?.id;
  }

  /** The rendering parameters a raster layer is drawn with on this page (null: its own). */
  renderingOf(id) {
    return this.renderings.get(id) ?? null;
  }

  /**
   * Draw a raster layer with these rendering parameters (null: its own rendering), its tiles
   * those of `tilejson`, its TileJSON asked with them (the template carries them). A layer not
   * shown is drawn so when it is.
   */
  async setRendering(id, params, tilejson) {
    await this.ready;
    if (params) this.renderings.set(id, params);
    else this.renderings.delete(id);
    const shown = this.shown.get(`raster:${id}`);
    if (shown) this.map.getSource(shown.source).setTiles(tilejson.tiles);
  }

  /**
   * Draw a DEM as 3D terrain (null: no terrain): a `raster-dem` source of its terrain-RGB
   * tiles (`tilejson`: its TileJSON asked with algorithm=terrainrgb), the map's terrain, and a
   * hillshade layer of the same source under the vector overlays.
   */
  async showTerrain(id, tilejson) {
    await this.ready;
    if (this.map.getLayer(TERRAIN_HILLSHADE)) this.map.removeLayer(TERRAIN_HILLSHADE);
    if (this.map.getTerrain()) this.map.setTerrain(null);
    if (this.map.getSource(TERRAIN_SOURCE)) this.map.removeSource(TERRAIN_SOURCE);
    this.terrain = null;
    if (tilejson) {
      const source = {
        type: "raster-dem",
        tiles: tilejson.tiles,
        encoding: "mapbox",
        tileSize: 256,
        maxzoom: tilejson.maxzoom ?? 14,
      };
      if (tilejson.bounds) source.bounds = tilejson.bounds;
      this.map.addSource(TERRAIN_SOURCE, source);
      // over the rasters, under the vector overlays
      const firstVector = this.map.getStyle().layers.find((layer) => layer.id.startsWith("overlay:vector:"));
      this.map.addLayer(
        {
          id: TERRAIN_HILLSHADE,
          type: "hillshade",
          source: TERRAIN_SOURCE,
          paint: { "hillshade-exaggeration": 0.5 },
        },
        firstVector?.id,
      );
      this.map.setTerrain({ source: TERRAIN_SOURCE, exaggeration: EXAGGERATION });
      this.terrain = id;
      if (this.map.getPitch() < 1) {
        this.map.jumpTo({ pitch: TERRAIN_PITCH });
        this.pitched = true;
      }
    } else if (this.pitched) {
      this.map.jumpTo({ pitch: 0 });
      this.pitched = false;
    }
    // what the map says, for the page (and its tests): the terrain's source, or nothing
    this.container.dataset.terrain = this.map.getTerrain()?.source ?? "";
  }

  /**
   * Show (or hide) a PMTiles archive (an export): raster tiles under the vector overlays,
   * vector tiles styled as a layer of any geometry. Its bounds and zooms, as its header says.
   */
  async showArchive(url, on = true) {
    await this.ready;
    const key = `pmtiles:${url}`;
    if (!on) return this.hide(key);
    const archive = await openArchive(url);
    if (this.shown.has(key)) return archive;
    const source = `overlay:${key}`;
    // the protocol answers the source's TileJSON from the header: bounds, zooms
    if (archive.vector) {
      this.map.addSource(source, { type: "vector", url: archive.url });
      const layers = styleLayers(source, archive.sourceLayer, "GEOMETRY", colour(url));
      for (const layer of layers) this.map.addLayer(layer);
      this.shown.set(key, { source, layers: layers.map((layer) => layer.id), vector: true });
    } else {
      // 256 px tiles, as the tile routes make them
      this.map.addSource(source, { type: "raster", url: archive.url, tileSize: 256 });
      this.map.addLayer({ id: source, type: "raster", source }, this.rasterSlot());
      this.shown.set(key, { source, layers: [source], vector: false });
    }
    return archive;
  }

  /** Show (or hide) a vector layer of the catalogue, styled by its geometry type. */
  async showVector(entry, on) {
    await this.ready;
    const key = `vector:${entry.id}`;
    if (!on) return this.hide(key);
    if (this.shown.has(key)) return;
    const tilejson = await api(`gis-datasource/${encodeURIComponent(entry.id)}`);
    const source = `overlay:${key}`;
    this.map.addSource(source, vectorSource(tilejson));
    const sourceLayer = tilejson.vector_layers?.[0]?.id ?? entry.id;
    const layers = styleLayers(source, sourceLayer, entry.geometry_type, colour(entry.id));
    for (const layer of layers) this.map.addLayer(layer);
    const watching = tilejson.watched ? new AbortController() : null;
    this.shown.set(key, { source, layers: layers.map((layer) => layer.id), vector: true, watching });
    if (watching) this.followChanges(entry.id, source, tilejson.tiles, watching.signal);
  }

  /**
   * Draw a watched layer's source again each time its data changes (its `layer-changed`
   * lines): its tiles are `no-cache`, so the browser asks again and gets new bytes where the
   * change was, `304` elsewhere.
   */
  followChanges(id, source, tiles, signal) {
    const url = apiUrl(`watches/${encodeURIComponent(id)}/events`);
    const redraw = () => this.map.getSource(source)?.setTiles(tiles);
    follow(url, {
      signal,
      onEvent: ({ data }) => void (data.startsWith("layer-changed ") && redraw()),
    }).catch(
      () => {}, // no stream (every slot taken, or the API gone): the layer stays as drawn
    );
  }

  /**
   * Draw a seeding run's coverage (a GeoJSON Feature of EPSG:4326) over the layers, in place of
   * the one drawn before; null only removes it. Its bounds [w, s, e, n], or null.
   */
  async showCoverage(feature) {
    await this.ready;
    for (const id of COVERAGE_IDS) if (this.map.getLayer(id)) this.map.removeLayer(id);
    if (this.map.getSource("coverage")) this.map.removeSource("coverage");
    if (!feature?.geometry) return null;
    this.map.addSource("coverage", { type: "geojson", data: feature });
    const [fill, line] = COVERAGE_IDS;
    const paint = { "fill-color": COVERAGE_COLOUR, "fill-opacity": 0.3 };
    this.map.addLayer({ id: fill, type: "fill", source: "coverage", paint });
    const outline = { "line-color": COVERAGE_COLOUR, "line-width": 2 };
    this.map.addLayer({ id: line, type: "line", source: "coverage", paint: outline });
    return polygonBounds(feature.geometry);
  }

  hideAll() {
    for (const key of [...this.shown.keys()]) this.hide(key);
    this.renderings.clear();
    if (this.terrain) this.showTerrain(null, null);
  }

  hide(key) {
    const shown = this.shown.get(key);
    if (!shown) return;
    for (const id of shown.layers) this.map.removeLayer(id);
    this.map.removeSource(shown.source);
    shown.watching?.abort();
    this.shown.delete(key);
  }

  fit([west, south, east, north]) {
    const clamp = (v, limit) => Math.max(-limit, Math.min(limit, v));
    this.map.fitBounds(
      [
        [clamp(west, 180), clamp(south, 85)],
        [clamp(east, 180), clamp(north, 85)],
      ],
      { padding: 30, maxZoom: 16, duration: 0 },
    );
  }

  /** A dot where the map was clicked. */
  mark(lngLat) {
    const data = {
      type: "Feature",
      properties: {},
      geometry: { type: "Point", coordinates: [lngLat.lng, lngLat.lat] },
    };
    if (this.map.getSource("click")) {
      this.map.getSource("click").setData(data);
      return;
    }
    this.map.addSource("click", { type: "geojson", data });
    this.map.addLayer({
      id: "click",
      type: "circle",
      source: "click",
      paint: {
        "circle-radius": 5,
        "circle-color": "#fff",
        "circle-stroke-color": "#1d2733",
        "circle-stroke-width": 2,
      },
    });
  }
}

function vectorSource(tilejson) {
  const source = {
    type: "vector",
    tiles: tilejson.tiles,
    minzoom: tilejson.minzoom ?? 0,
    maxzoom: tilejson.maxzoom ?? 14,
  };
  // a watched layer's data may move anywhere: its bounds as read once would hide it there
  if (tilejson.bounds && !tilejson.watched) source.bounds = tilejson.bounds;
  return source;
}

/** The layers that draw a vector source: fills, lines, circles by geometry type. */
export function styleLayers(source, sourceLayer, geometryType, paint) {
  const type = String(geometryType ?? "").toUpperCase();
  const base = { source, "source-layer": sourceLayer };
  const fill = {
    ...base,
    id: `${source}:fill`,
    type: "fill",
    paint: { "fill-color": paint, "fill-opacity": 0.45 },
  };
  const outline = {
    ...base,
    id: `${source}:outline`,
    type: "line",
    paint: { "line-color": paint, "line-width": 1.2 },
  };
  const line = {
    ...base,
    id: `${source}:line`,
    type: "line",
    paint: { "line-color": paint, "line-width": 2.5 },
  };
  const circle = {
    ...base,
    id: `${source}:circle`,
    type: "circle",
    paint: {
      "circle-color": paint,
      "circle-radius": 5,
      "circle-stroke-color": "#fff",
      "circle-stroke-width": 1,
    },
  };
  if (type.includes("POLYGON")) return [fill, outline];
  if (type.includes("LINE")) return [line];
  if (type.includes("POINT")) return [circle];
  // a column of any geometry: each kind by its own layer ($type is the kind, multi or not)
  return [
    { ...fill, filter: ["==", "$type", "Polygon"] },
    { ...outline, filter: ["==", "$type", "Polygon"] },
    { ...line, filter: ["==", "$type", "LineString"] },
    { ...circle, filter: ["==", "$type", "Point"] },
  ];
}
