// gen_bpe_fixtures.mjs - the GPT-2 tokenizer's expected ids, from tiktoken's
// "gpt2" encoding (npm `tiktoken`, the Rust library compiled to WASM), and the
// expected display text of invalid UTF-8, from node's TextDecoder, for
// tests/check_bpe.c. Run by `make bpe-fixtures` (which installs the npm
// packages into build/npm first), or:
//
//   node tools/ref/gen_bpe_fixtures.mjs [NPM_DIR]     (NPM_DIR: build/npm)
//
// It writes two plain-text files, one case a line, fields separated by one
// space ('#' lines are comments):
//
//   tests/fixtures/bpe/encode.txt    NAME MODE TEXT_HEX ID ID ...
//     MODE is `ordinary` (tiktoken's encode_ordinary, nabla's allow_special
//     false) or `special` (encode(text, "all"), allow_special true); TEXT_HEX
//     is the text's UTF-8 bytes in hex.
//   tests/fixtures/bpe/display.txt   NAME BYTES_HEX DISPLAY_HEX
//     BYTES_HEX are arbitrary bytes (mostly invalid UTF-8), DISPLAY_HEX the
//     UTF-8 of `new TextDecoder().decode(bytes)`: each maximal part of an
//     invalid sequence replaced by U+FFFD.
//
// tiktoken takes a JavaScript string (UTF-16), so it never sees invalid
// UTF-8: a lone surrogate in the string reaches it as U+FFFD (bytes EF BF BD).
// The random cases are therefore random *valid* Unicode strings, drawn from
// scripts that were in Unicode 14 (the tables of Debian 12's PCRE2, which
// nabla's pre-tokenizer uses; tiktoken's regex engine knows newer letters).
// Invalid UTF-8 has no reference ids: check_bpe.c encodes the display cases'
// bytes and checks that they decode back unchanged.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const npmDir = resolve(process.argv[2] || join(here, "..", "..", "build", "npm"));
const require = createRequire(join(npmDir, "package.json"));
const { get_encoding } = require("tiktoken");
const enc = get_encoding("gpt2");
const tiktokenVersion = JSON.parse(
  readFileSync(join(npmDir, "node_modules", "tiktoken", "package.json"), "utf8")).version;
const outDir = join(here, "..", "..", "tests", "fixtures", "bpe");

// mulberry32: a small seeded generator, so the file is the same every run.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = rng(20240601);
const pick = (a) => a[Math.floor(rand() * a.length)];
const between = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

const prose = [
  "The quick brown fox jumps over the lazy dog. It was not amused, and said so at length.",
  "In the beginning the Universe was created. This has made a lot of people very angry and " +
    "been widely regarded as a bad move.",
  "Tokenizers split text into pieces; the pieces become numbers; the numbers feed a model " +
    "that predicts the next one.\nA second line follows the first.\n\nAnd a paragraph after a " +
    "blank line.",
  "She sells sea-shells by the sea-shore (or so they say), for $3.50 a dozen -- 20% off on " +
    "Tuesdays!",
];
const code = [
  "int main(void) {\n    for (int i = 0; i < 10; i++)\n        printf(\"%d\\n\", i * i);\n" +
    "    return 0;\n}\n",
  "def f(x):\n    \"\"\"Square x.\"\"\"\n    return x ** 2  # done\n\n\nclass A:\n\tpass\n",
  '{"name": "nabla", "version": [0, 1, 0], "ok": true, "nested": {"k": null}}',
  "if (a&&b||!c) { x+=1; y<<=2; } // ->, ::, ===, !==, =>, ?.",
];
const whitespace = [
  "   leading spaces", "trailing spaces   ", "a\t\tb", "\n\n\n", " \n \t \r\n", "x \n y",
  "word  \t\n  next", "     ", "a  b   c    d", "line\r\nline\r\n", "\t", "end \n",
  "tab\t \tmix", "  \n", "\u00a0non-breaking\u00a0space", "ideographic\u3000space",
  "next\u0085line", "line\u2028separator", "mongolian\u180evowel\u180e separator",
  "zero\u200bwidth", "\u2003em\u2002en\u2009thin",
];
const digits = [
  "12345678901234567890", "3.14159", "1,000,000", "2024-01-01T12:34:56Z", " 42", "x2 y3",
  "\u0660\u0661\u0662\u0663 Arabic-Indic", "\uff11\uff12\uff13 fullwidth", "E=mc\u00b2",
  "\u216b Roman twelve", "007 and 0.5e-10",
];
const contractions = [
  "don't", "I'M", "He'S", "it's", "'s", "'S", "we'll've", "you're", "'d", "'ll'", "''s",
  "rock 'n' roll", "'ve been", "O'Neil's", "can't won't shouldn't", "THEY'RE", "I'd've",
  "'s's's", "' s", "x'tt", "'re'", "'M'", "'LL",
];
const unicode = [
  "caf\u00e9 na\u00efve fa\u00e7ade \u00dcberm\u00e4\u00dfig \u00c5ngstr\u00f6m",
  "cafe\u0301 (a combining accent)", "\u4e2d\u6587\u5b57\u7b26\u6d4b\u8bd5",
  "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "\ud55c\uad6d\uc5b4 \ubb38\uc7a5",
  "Hello\u4e16\u754c", "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
  "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
  "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
  "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
];
const emoji = [
  "\u{1f44b}\u{1f30d}", "family: \u{1f468}\u200d\u{1f469}\u200d\u{1f467}\u200d\u{1f466}",
  "\u{1f3f3}\ufe0f\u200d\u{1f308} flag", "\u{1f1eb}\u{1f1f7}\u{1f1ef}\u{1f1f5}",
  "thumbs \u{1f44d}\u{1f3fd} up", "math \u{1d400}\u{1d401} bold", "\u2764\ufe0f love",
];
const specials = [
  "Hello<|endoftext|>World", "<|endoftext|><|endoftext|>", "text then <|endoftext|>",
  "<|endoftext|> starts", "a <|endoftext|> b", "almost <|endoftext| special",
  "<|endoftext|>",
];
const long = [
  "a".repeat(600), " ".repeat(500) + "x", "!".repeat(300), "7".repeat(700),
  Array.from({ length: 1000 }, () => pick("abcdefghijklmnopqrstuvwxyz")).join(""),
  Array.from({ length: 400 }, () => pick("\u00e9\u00e8\u00ea\u00e0\u00f9\u00e7")).join(""),
  "ab".repeat(300), "\u4e2d".repeat(200),
];

// Random valid strings: characters from pools of scripts, with spaces,
// apostrophes and digits mixed in so the pattern's branches all fire.
const pools = [
  [0x20, 0x7e], [0x20, 0x7e], [0x20, 0x7e], [0x09, 0x0d], [0xa0, 0xff], [0x100, 0x17f],
  [0x300, 0x36f], [0x391, 0x3c9], [0x400, 0x4ff], [0x5d0, 0x5ea], [0x620, 0x64a],
  [0x905, 0x939], [0x2000, 0x206f], [0x3041, 0x3096], [0x4e00, 0x9fa5], [0xac00, 0xd7a3],
  [0xff10, 0xff5a], [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f],
];
const extras = [" ", " ", "'", "'s", "'t", "\n", "  ", "0", "123", "<|endoftext|>"];
function randomText(n) {
  let s = "";
  while (s.length < n) {
    if (rand() < 0.15) s += pick(extras);
    else {
      const [lo, hi] = pick(pools);
      s += String.fromCodePoint(between(lo, hi));
    }
  }
  return s;
}

const hex = (bytes) => Buffer.from(bytes).toString("hex");
const lines = [
  "# GPT-2 tokenizer cases: NAME MODE TEXT_HEX ID ID ... (tools/ref/gen_bpe_fixtures.mjs,",
  "# from tiktoken " + tiktokenVersion + "'s gpt2 encoding)",
];
function add(name, text, mode) {
  const ids = mode === "special" ? enc.encode(text, "all") : enc.encode_ordinary(text);
  lines.push(`${name} ${mode} ${hex(Buffer.from(text, "utf8"))} ${Array.from(ids).join(" ")}`);
}
const groups = { prose, code, whitespace, digits, contractions, unicode, emoji, long };
for (const [g, texts] of Object.entries(groups)) texts.forEach((t, i) => add(`${g}_${i}`, t, "ordinary"));
specials.forEach((t, i) => {
  add(`special_${i}`, t, "ordinary");
  add(`special_${i}`, t, "special");
});
for (let i = 0; i < 20; i++) add(`random_${i}`, randomText(between(1, 120)), i % 4 ? "ordinary" : "special");

// Display: hand-picked invalid sequences, then random bytes that favour the
// bytes UTF-8 sequences are made of.
const display = [
  "# nb_utf8_display cases: NAME BYTES_HEX DISPLAY_HEX (tools/ref/gen_bpe_fixtures.mjs, from",
  "# node " + process.version + "'s TextDecoder)",
];
const decoder = new TextDecoder("utf-8");
function addDisplay(name, bytes) {
  const shown = Buffer.from(decoder.decode(Uint8Array.from(bytes)), "utf8");
  display.push(`${name} ${hex(bytes)} ${hex(shown)}`);
}
const handPicked = {
  lone_continuation: [0x61, 0x80, 0x62], truncated_3: [0xe2, 0x82], truncated_4: [0xf0, 0x9f, 0x98],
  overlong_slash: [0xc0, 0xaf], overlong_3: [0xe0, 0x80, 0xaf], surrogate: [0xed, 0xa0, 0x80],
  above_max: [0xf4, 0x90, 0x80, 0x80], f5: [0xf5, 0x80], ff_fe: [0xff, 0xfe, 0x41],
  cut_then_ascii: [0xe2, 0x82, 0x41, 0xe2, 0x82, 0xac], valid_euro: [0xe2, 0x82, 0xac],
  latin1: [0x63, 0x61, 0x66, 0xe9], token_halves: [0xe4, 0xb8, 0xad, 0xe6, 0x96],
};
for (const [name, bytes] of Object.entries(handPicked)) addDisplay(name, bytes);
const lead = [0x80, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff];
for (let i = 0; i < 20; i++) {
  const bytes = [];
  for (let n = between(1, 40); bytes.length < n;) {
    const r = rand();
    if (r < 0.4) bytes.push(between(0x20, 0x7e));
    else if (r < 0.7) bytes.push(between(0x80, 0xbf));
    else if (r < 0.85) bytes.push(pick(lead));
    else {
      const c = String.fromCodePoint(between(0x80, 0x1f64f)).replace(/[\ud800-\udfff]/g, "?");
      bytes.push(...Buffer.from(c, "utf8"));
    }
  }
  addDisplay(`random_bytes_${i}`, bytes);
}

mkdirSync(outDir, { recursive: true });
writeFileSync(join(outDir, "encode.txt"), lines.join("\n") + "\n");
writeFileSync(join(outDir, "display.txt"), display.join("\n") + "\n");
console.log(`gen_bpe_fixtures: ${lines.length - 2} encode cases, ${display.length - 2} display ` +
  `cases -> ${outDir}`);
