// PMTiles archives (an export of a layer) drawn straight from their download URL: the
// `pmtiles` protocol of Protomaps reads the archive with HTTP range requests (its header, the
// directories, then each tile MapLibre asks for), nothing in between.
import { FetchSource, PMTiles, Protocol, TileType } from "pmtiles";
import { authHeaders } from "./api.js";

const protocol = new Protocol({ metadata: true });

/** Register `pmtiles://` with MapLibre (once). */
export function registerArchives(maplibregl) {
  maplibregl.addProtocol("pmtiles", protocol.tile);
}

/** The path of an export's download route: `…/gis-layer-export/<layer>/files/<job id>.pmtiles`. */
const EXPORT_FILE = /\/gis-layer-export\/[^/]+\/files\/[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\.pmtiles$/;

/**
 * Whether url (a URL) is an export's download URL: that path, no query, and no segment that
 * the API would read as a slash or a step up (`%2F`, `%5C`, `..`).
 */
function isExportFile(url) {
  if (url.search || !EXPORT_FILE.test(url.pathname)) return false;
  return url.pathname.split("/").every((segment) => {
    try {
      const name = decodeURIComponent(segment);
      return !/[/\\]/.test(name) && name !== "." && name !== "..";
    } catch {
      return false;
    }
  });
}

/**
 * Open the archive at url: its source URL for MapLibre (`pmtiles://<url>`), whether its tiles
 * are vector tiles, its bounds, zooms and first vector layer. The credentials go only with an
 * export's download URL on this origin: `?pmtiles=` is any URL a link gives, and the user's
 * credentials must not ask another route of the API (a truncation, a run) for them.
 */
export async function openArchive(url) {
  const target = new URL(url, location.href);
  const absolute = target.href;
  let archive = protocol.get(absolute);
  if (!archive) {
    const headers = isExportFile(target) ? authHeaders(absolute) : {};
    archive = new PMTiles(new FetchSource(absolute, new Headers(headers)));
    protocol.add(archive);
  }
  const header = await archive.getHeader();
  const vector = header.tileType === TileType.Mvt;
  const metadata = vector ? await archive.getMetadata() : {};
  return {
    url: `pmtiles://${absolute}`,
    vector,
    bounds: [header.minLon, header.minLat, header.maxLon, header.maxLat],
    minzoom: header.minZoom,
    maxzoom: header.maxZoom,
    sourceLayer: metadata?.vector_layers?.[0]?.id,
  };
}
