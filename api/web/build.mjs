// The build of the pages: our modules bundled by esbuild, MapLibre GL JS and Swagger UI copied
// from node_modules as npm installed them (package-lock.json pins them), all into dist/.
// `make web` (deploy/web.sh) runs it when the lockfile or a source changed.
import { copyFile, mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import * as esbuild from "esbuild";

const DIST = "dist";
const VENDOR = {
  "node_modules/maplibre-gl/dist": ["maplibre-gl.mjs", "maplibre-gl-worker.mjs", "maplibre-gl.css"],
  "node_modules/swagger-ui-dist": ["swagger-ui-bundle.js", "swagger-ui.css"],
};
const PAGES = ["viewer.html", "docs.html", "viewer.css", "docs.css", "favicon.svg"];

// MapLibre stays a file of its own: it finds its worker module beside itself (import.meta.url)
const maplibreBeside = {
  name: "maplibre-beside",
  setup(build) {
    build.onResolve({ filter: /^maplibre-gl$/ }, () => ({
      path: "./maplibre-gl.mjs",
      external: true,
    }));
  },
};

await rm(DIST, { recursive: true, force: true });
await mkdir(DIST);
await esbuild.build({
  entryPoints: { viewer: "src/viewer/main.js", docs: "src/docs/main.js" },
  outdir: DIST,
  bundle: true,
  format: "esm",
  target: "es2022",
  sourcemap: true,
  legalComments: "none",
  plugins: [maplibreBeside],
  logLevel: "warning",
});
for (const [folder, names] of Object.entries(VENDOR)) {
  for (const name of names) await copyFile(join(folder, name), join(DIST, name));
}
for (const name of PAGES) await copyFile(join("src", name), join(DIST, name));
// the API sends a file's .gz to clients that take gzip
for (const name of await readdir(DIST)) {
  if (/\.(m?js|css|svg)$/.test(name)) {
    await writeFile(join(DIST, `${name}.gz`), gzipSync(await readFile(join(DIST, name)), { level: 9 }));
  }
}
console.log(`web: built ${DIST}/ (${(await readdir(DIST)).length} files)`);
