// prepare_gpt2_ref.mjs - what nanoGPT's data/shakespeare/prepare.py writes
// for an input text, with npm `tiktoken`'s "gpt2" encoding (the library
// prepare.py imports), for tests/check_gpt2_data.c:
//
//   node tools/ref/prepare_gpt2_ref.mjs INPUT OUT_DIR [NPM_DIR]   (NPM_DIR: build/npm)
//
// prepare.py reads the file in Python's text mode ("\r\n" and a lone "\r"
// become "\n"), takes n = len(data) characters (code points), encodes
// data[:int(n * 0.9)] and the rest separately with encode_ordinary, and
// writes each as uint16 little-endian (np.uint16 tofile) to train.bin and
// val.bin. This does the same in JavaScript, counting code points, not
// UTF-16 units.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const [input, outDir] = process.argv.slice(2, 4);
if (!input || !outDir) {
  console.error("usage: node tools/ref/prepare_gpt2_ref.mjs INPUT OUT_DIR [NPM_DIR]");
  process.exit(2);
}
const npmDir = resolve(process.argv[4] || join(here, "..", "..", "build", "npm"));
const require = createRequire(join(npmDir, "package.json"));
const { get_encoding } = require("tiktoken");
const enc = get_encoding("gpt2");

const data = readFileSync(input, "utf8").replace(/\r\n?/g, "\n");
const chars = Array.from(data); // code points, as Python's str
const cut = Math.floor(chars.length * 0.9);
for (const [name, part] of [["train.bin", chars.slice(0, cut).join("")],
                            ["val.bin", chars.slice(cut).join("")]]) {
  const ids = part.length ? enc.encode_ordinary(part) : new Uint32Array(0);
  const out = Buffer.alloc(ids.length * 2);
  ids.forEach((id, i) => out.writeUInt16LE(id, 2 * i));
  writeFileSync(join(outDir, name), out);
  console.log(`${name} has ${ids.length} tokens`);
}
enc.free();
