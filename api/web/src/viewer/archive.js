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

/**
 * Open the archive at url (with the credentials when it is on this origin): its source URL for
 * MapLibre (`pmtiles://<url>`), whether its tiles are vector tiles, its bounds, zooms and first
 * vector layer.
 */
export async function openArchive(url) {
  const absolute = new URL(url, location.href).href;
  let archive = protocol.get(absolute);
  if (!archive) {
    archive = new PMTiles(new FetchSource(absolute, new Headers(authHeaders(absolute))));
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
