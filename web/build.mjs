// Builds the console into ../internal/console/dist, which go:embed serves
// at /ui/: app.js and app.css bundled by esbuild from src/, index.html
// copied, and source.sha256, the hash of every file of web/ (but
// node_modules) that the Go test TestBundleIsFresh recomputes to catch a
// bundle not rebuilt after a change. Run: npm ci && npm run build.
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, rmSync, mkdirSync, copyFileSync, writeFileSync } from "node:fs";
import { join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const web = fileURLToPath(new URL(".", import.meta.url));
const dist = join(web, "..", "internal", "console", "dist");

// sourceHash: sha256 over "path\0sha256(content)\n" of each file, paths
// relative to web/ with "/" and sorted by bytes. Keep in step with
// internal/console/console_test.go.
function sourceHash() {
  const files = [];
  const walk = (dir) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) {
        if (e.name !== "node_modules") walk(p);
      } else if (e.isFile()) {
        files.push(relative(web, p).split(sep).join("/"));
      }
    }
  };
  walk(web);
  files.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  const h = createHash("sha256");
  for (const f of files) {
    h.update(f + "\0" + createHash("sha256").update(readFileSync(join(web, f))).digest("hex") + "\n");
  }
  return h.digest("hex");
}

rmSync(dist, { recursive: true, force: true });
mkdirSync(dist, { recursive: true });
await esbuild.build({
  entryPoints: { app: join(web, "src", "main.js") },
  bundle: true,
  minify: true,
  format: "esm",
  target: ["es2022"],
  outdir: dist,
  legalComments: "linked",
  loader: { ".svg": "dataurl" },
  logLevel: "warning",
});
copyFileSync(join(web, "src", "index.html"), join(dist, "index.html"));
copyFileSync(join(web, "src", "icon.svg"), join(dist, "icon.svg"));
writeFileSync(join(dist, "source.sha256"), sourceHash() + "\n");
console.log("built", relative(process.cwd(), dist));
