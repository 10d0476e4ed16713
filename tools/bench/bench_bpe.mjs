// bench_bpe.mjs - tiktoken's GPT-2 encode speed (npm `tiktoken`, WASM), the
// yardstick for nabla-bench-bpe:
//
//   node tools/bench/bench_bpe.mjs NPM_DIR TEXT [ROUNDS]
//
// Reads TEXT as UTF-8, encodes it once with encode_ordinary to warm up, then
// ROUNDS (5) more times, and prints the median round in nabla-bench-bpe's
// format (mb counts the file's bytes; the time includes tiktoken's copy of
// the JavaScript string into WASM memory, which every caller pays):
//
//   bpe-encode impl=tiktoken mb=M tokens=N digest=D ms=X mb_per_s=Y load_ms=Z
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join, resolve } from "node:path";

const [npmDir, path, roundsArg] = process.argv.slice(2);
if (!npmDir || !path) {
  console.error("usage: node tools/bench/bench_bpe.mjs NPM_DIR TEXT [ROUNDS]");
  process.exit(2);
}
const rounds = Number(roundsArg || 5);
const require = createRequire(join(resolve(npmDir), "package.json"));
const bytes = readFileSync(path);
const text = bytes.toString("utf8");
const now = () => Number(process.hrtime.bigint()) / 1e6;
let t0 = now();
const { get_encoding } = require("tiktoken");
const enc = get_encoding("gpt2");
const loadMs = now() - t0;
const ms = [];
let ids;
for (let r = 0; r <= rounds; r++) {
  t0 = now();
  ids = enc.encode_ordinary(text);
  if (r > 0) ms.push(now() - t0);
}
ms.sort((a, b) => a - b);
const med = ms[Math.floor(rounds / 2)];
let digest = 2166136261;
for (const id of ids) digest = Math.imul(digest ^ id, 16777619) >>> 0;
enc.free();
console.log(`bpe-encode impl=tiktoken mb=${(bytes.length / 1e6).toFixed(3)} tokens=${ids.length} ` +
  `digest=${digest.toString(16).padStart(8, "0")} ms=${med.toFixed(1)} ` +
  `mb_per_s=${(bytes.length / 1e3 / med).toFixed(2)} load_ms=${loadMs.toFixed(1)}`);
