/* check_safetensors.c - safetensors save/load: exact round trips, the byte
 * layout, hand-written files, F16/BF16 conversion, every rejection, and the
 * atomic write. Files live in a mkdtemp directory under /tmp that the fixture
 * removes after each test. */
#include "check_nabla.h"

#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- fixture and file helpers -------------------------------------------- */
static char g_dir[64];

static void rm_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                char sub[1024];
                snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
                rm_tree(sub);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

static void setup(void) {
    strcpy(g_dir, "/tmp/nb-st-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void teardown(void) { rm_tree(g_dir); }

/* g_dir/name, in one of four rotating buffers. */
static const char *tpath(const char *name) {
    static char bufs[4][256];
    static int k;
    char *b = bufs[k++ % 4];
    snprintf(b, 256, "%s/%s", g_dir, name);
    return b;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static void put_u64le(unsigned char *p, uint64_t v) {
    for (int k = 0; k < 8; k++) p[k] = (unsigned char)(v >> (8 * k));
}

/* A safetensors file: header size hlen, the header bytes, then the data. */
static void write_st_n(const char *path, const char *hdr, size_t hlen, const void *data,
                       size_t ndata) {
    unsigned char *buf = malloc(8 + hlen + ndata + 1);
    put_u64le(buf, hlen);
    memcpy(buf + 8, hdr, hlen);
    if (ndata) memcpy(buf + 8 + hlen, data, ndata);
    write_bytes(path, buf, 8 + hlen + ndata);
    free(buf);
}

static void write_st(const char *path, const char *hdr, const void *data, size_t ndata) {
    write_st_n(path, hdr, strlen(hdr), data, ndata);
}

/* The whole file (caller frees), its length in *len; NULL when absent. */
static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    p[n] = '\0'; /* so a header can be searched with strstr */
    fclose(f);
    *len = (size_t)n;
    return p;
}

static int dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Loading `path` fails with `status`, a message naming the path and
 * containing `part`, and appends nothing. */
static void expect_load_fail(const char *path, nb_status status, const char *part) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list out = {0};
    nb_status st = nb_load_safetensors(ctx, path, &out);
    const char *e = nb_ctx_error(ctx);
    ck_assert_msg(st == status, "%s: status %s, want %s (%s)", part, nb_status_str(st),
                  nb_status_str(status), e ? e : "no error");
    ck_assert_int_eq(nb_ctx_status(ctx), status);
    ck_assert_msg(strstr(e, part) != NULL, "error '%s' lacks '%s'", e, part);
    ck_assert_msg(strstr(e, path) != NULL, "error '%s' lacks the path", e);
    ck_assert_int_eq(out.n, 0);
    nb_ctx_free(ctx);
}

/* A hand-written header whose one tensor entry is `entry` and data 8 bytes. */
static void expect_entry_fail(const char *entry, const char *part) {
    char hdr[512];
    snprintf(hdr, sizeof hdr, "{\"a\":%s}", entry);
    const char *p = tpath("entry.safetensors");
    write_st(p, hdr, "\0\0\0\0\0\0\0\0", 8);
    expect_load_fail(p, NB_ERR_FORMAT, part);
}

/* Fills t with deterministic bytes (xorshift); BOOL gets 0/1. For floats the
 * bit patterns include NaNs with payloads, denormals and infinities now and
 * then, which must all survive bit for bit. */
static void fill_bits(nb_tensor *t, uint32_t seed) {
    unsigned char *p = t->data;
    size_t n = t->numel * nb_dtype_size(t->dtype);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        p[i] = t->dtype == NB_BOOL ? (unsigned char)(x & 1) : (unsigned char)(x >> 7);
    }
}

/* Saves tensors of 0..4 dims of dtype dt and checks the load gives the
 * same names, shapes and bits, in list order. */
static void roundtrip_ranks(nb_dtype dt) {
    static const int64_t shapes[5][4] = {{0}, {3}, {2, 3}, {2, 1, 3}, {1, 2, 2, 2}};
    static const char *names[5] = {"scalar", "vec", "mat", "cube", "quad"};
    nb_ctx *a = nb_ctx_new(0), *b = nb_ctx_new(0);
    nb_tensor_list list = {0};
    for (int r = 0; r < 5; r++) {
        nb_tensor *t = nb_empty(a, dt, r, shapes[r]);
        fill_bits(t, (uint32_t)(r + 10 * dt));
        ck_assert_int_eq(nb_list_add(&list, names[r], t), NB_OK);
    }
    const char *p = tpath("ranks.safetensors");
    ck_assert_int_eq(nb_save_safetensors(a, p, &list, 0, NULL, NULL), NB_OK);
    nb_tensor_list out = {0};
    ck_assert_int_eq(nb_load_safetensors(b, p, &out), NB_OK);
    ck_assert_ptr_null(nb_ctx_error(b));
    ck_assert_int_eq(out.n, 5);
    for (int r = 0; r < 5; r++) {
        nb_tensor *t = out.t[r], *want = list.t[r];
        ck_assert_str_eq(out.names[r], names[r]);
        ck_assert_str_eq(t->name, names[r]);
        ck_assert_int_eq(t->dtype, dt);
        ck_assert_int_eq(t->ndim, r);
        for (int d = 0; d < 4; d++) ck_assert_int_eq(t->shape[d], want->shape[d]);
        ck_assert_uint_eq(t->numel, want->numel);
        ck_assert_ptr_eq(t->owner, b);
        ck_assert(!t->requires_grad);
        ck_assert_ptr_null(t->grad);
        ck_assert_int_eq(memcmp(t->data, want->data, t->numel * nb_dtype_size(dt)), 0);
    }
    nb_ctx_free(a);
    nb_ctx_free(b);
}

/* ---- round trips ---------------------------------------------------------- */
START_TEST(test_roundtrip_f32_ranks) { roundtrip_ranks(NB_F32); }
END_TEST

START_TEST(test_roundtrip_f64_ranks) { roundtrip_ranks(NB_F64); }
END_TEST

START_TEST(test_roundtrip_i64_ranks) { roundtrip_ranks(NB_I64); }
END_TEST

START_TEST(test_roundtrip_bool_ranks) { roundtrip_ranks(NB_BOOL); }
END_TEST

START_TEST(test_roundtrip_special_values) {
    nb_ctx *a = nb_ctx_new(0), *b = nb_ctx_new(0);
    const uint32_t f32_bits[6] = {0x80000000u, 0x7fc00001u, 0xff800000u,
                                  0x00000001u, 0x7f7fffffu, 0x3eaaaaabu};
    const uint64_t f64_bits[4] = {0x8000000000000000u, 0x7ff0000000000001u, 0x0000000000000001u,
                                  0x3fd5555555555555u};
    const int64_t i64s[4] = {INT64_MIN, INT64_MAX, -1, 0};
    nb_tensor_list list = {0};
    nb_list_add(&list, "f32", nb_from_data(a, NB_F32, NB_SHAPE(6), f32_bits));
    nb_list_add(&list, "f64", nb_from_data(a, NB_F64, NB_SHAPE(2, 2), f64_bits));
    nb_list_add(&list, "i64", nb_from_data(a, NB_I64, NB_SHAPE(4), i64s));
    const char *p = tpath("special.safetensors");
    ck_assert_int_eq(nb_save_safetensors(a, p, &list, 0, NULL, NULL), NB_OK);
    nb_tensor_list out = {0};
    ck_assert_int_eq(nb_load_safetensors(b, p, &out), NB_OK);
    ck_assert_int_eq(memcmp(nb_list_get(&out, "f32")->data, f32_bits, sizeof f32_bits), 0);
    ck_assert_int_eq(memcmp(nb_list_get(&out, "f64")->data, f64_bits, sizeof f64_bits), 0);
    ck_assert_int_eq(memcmp(nb_list_get(&out, "i64")->data, i64s, sizeof i64s), 0);
    ck_assert(signbit(nb_get(nb_list_get(&out, "f32"), 0)));
    ck_assert(isnan(nb_get(nb_list_get(&out, "f64"), 1)));
    ck_assert_int_eq((int64_t)nb_get(nb_list_get(&out, "i64"), 2), -1);
    nb_ctx_free(a);
    nb_ctx_free(b);
}
END_TEST

START_TEST(test_roundtrip_mixed_order_appends) {
    nb_ctx *a = nb_ctx_new(0), *b = nb_ctx_new(0);
    nb_tensor_list list = {0};
    nb_list_add(&list, "z.weight", nb_from_doubles(a, NB_F32, NB_SHAPE(2, 2), (double[]){1, 2, 3, 4}));
    nb_list_add(&list, "a.ids", nb_from_doubles(a, NB_I64, NB_SHAPE(3), (double[]){7, -8, 9}));
    nb_list_add(&list, "m.mask", nb_from_doubles(a, NB_BOOL, NB_SHAPE(2, 2), (double[]){1, 0, 0, 1}));
    nb_list_add(&list, "b.scale", nb_scalar(a, NB_F64, -0.125));
    const char *p = tpath("mixed.safetensors");
    ck_assert_int_eq(nb_save_safetensors(a, p, &list, 0, NULL, NULL), NB_OK);

    nb_tensor_list out = {0};
    nb_tensor *existing = nb_scalar(b, NB_F32, 5);
    nb_list_add(&out, "existing", existing);
    ck_assert_int_eq(nb_load_safetensors(b, p, &out), NB_OK);
    ck_assert_int_eq(out.n, 5);
    ck_assert_ptr_eq(out.t[0], existing);
    const char *want[4] = {"z.weight", "a.ids", "m.mask", "b.scale"};
    for (int i = 0; i < 4; i++) {
        ck_assert_str_eq(out.names[i + 1], want[i]);
        ck_assert_ptr_ne(out.names[i + 1], list.names[i]); /* copied into b's arena */
    }
    ck_assert_tensor_near(out.t[1], ((double[]){1, 2, 3, 4}), 4, 0);
    ck_assert_int_eq(out.t[2]->dtype, NB_I64);
    ck_assert_tensor_near(out.t[2], ((double[]){7, -8, 9}), 3, 0);
    ck_assert_int_eq(out.t[3]->dtype, NB_BOOL);
    ck_assert_tensor_near(out.t[3], ((double[]){1, 0, 0, 1}), 4, 0);
    ck_assert_int_eq(out.t[4]->ndim, 0);
    ck_assert_double_eq(nb_item(out.t[4]), -0.125);
    nb_ctx_free(a);
    nb_ctx_free(b);
}
END_TEST

/* ---- the bytes a save writes ------------------------------------------------ */
START_TEST(test_header_layout_exact) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list list = {0};
    nb_list_add(&list, "w", nb_from_doubles(ctx, NB_F32, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6}));
    nb_list_add(&list, "bias", nb_from_doubles(ctx, NB_F32, NB_SHAPE(3), (double[]){-1, 0.5, 0}));
    const char *p = tpath("layout.safetensors");
    ck_assert_int_eq(nb_save_safetensors(ctx, p, &list, 0, NULL, NULL), NB_OK);
    size_t len;
    unsigned char *f = read_all(p, &len);
    ck_assert_ptr_nonnull(f);
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = hlen << 8 | f[k];
    const char *json = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                       "\"bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[24,36]}}";
    size_t jlen = strlen(json); /* 8 + 115 = 123 bytes, padded with 5 spaces to 128 */
    ck_assert_uint_eq(jlen, 115);
    ck_assert_uint_eq(hlen, 120);
    ck_assert_uint_eq((8 + hlen) % 8, 0);
    ck_assert_int_eq(memcmp(f + 8, json, jlen), 0);
    for (size_t i = jlen; i < hlen; i++) ck_assert_int_eq(f[8 + i], ' ');
    ck_assert_uint_eq(len, 8 + hlen + 36);
    const unsigned char one_f32[4] = {0x00, 0x00, 0x80, 0x3f};       /* 1.0f LE */
    const unsigned char minus_one_f32[4] = {0x00, 0x00, 0x80, 0xbf}; /* -1.0f LE */
    ck_assert_int_eq(memcmp(f + 8 + hlen, one_f32, 4), 0);
    ck_assert_int_eq(memcmp(f + 8 + hlen + 24, minus_one_f32, 4), 0);
    free(f);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_empty_list_file) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list list = {0};
    const char *p = tpath("empty.safetensors");
    ck_assert_int_eq(nb_save_safetensors(ctx, p, &list, 0, NULL, NULL), NB_OK);
    size_t len;
    unsigned char *f = read_all(p, &len);
    /* "{}" padded with 6 spaces so the (empty) data starts at 16 */
    ck_assert_uint_eq(len, 16);
    ck_assert_int_eq(f[0], 8);
    ck_assert_int_eq(memcmp(f + 8, "{}      ", 8), 0);
    free(f);
    nb_tensor_list out = {0};
    ck_assert_int_eq(nb_load_safetensors(ctx, p, &out), NB_OK);
    ck_assert_int_eq(out.n, 0);
    write_st(p, "{}", NULL, 0); /* no padding at all is fine too */
    ck_assert_int_eq(nb_load_safetensors(ctx, p, &out), NB_OK);
    ck_assert_int_eq(out.n, 0);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_metadata_roundtrip) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list list = {0};
    nb_list_add(&list, "x", nb_scalar(ctx, NB_F32, 3));
    const char *keys[3] = {"format", "note", "\xc3\xbcn\xc3\xaf"};
    const char *vals[3] = {"pt", "quote \" backslash \\ newline \n tab \t ctrl \x01 end",
                           "\xc3\xa7\xe2\x82\xac\xf0\x9d\x84\x9e"};
    const char *p = tpath("meta.safetensors");
    ck_assert_int_eq(nb_save_safetensors(ctx, p, &list, 3, keys, vals), NB_OK);
    size_t len;
    unsigned char *f = read_all(p, &len);
    ck_assert_int_eq(memcmp(f + 8, "{\"__metadata__\":{\"format\":\"pt\",", 31), 0);
    ck_assert_ptr_nonnull(strstr((char *)f + 8, "\\\" backslash \\\\ newline \\u000a tab"));
    free(f);

    nb_ctx *c2 = nb_ctx_new(0);
    nb_tensor_list out = {0};
    const char *k[8], *v[8];
    int n = -1;
    ck_assert_int_eq(nb_load_safetensors_meta(c2, p, &out, 8, &n, k, v), NB_OK);
    ck_assert_int_eq(n, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_str_eq(k[i], keys[i]);
        ck_assert_str_eq(v[i], vals[i]);
        ck_assert_ptr_ne(k[i], keys[i]);
    }
    ck_assert_int_eq(out.n, 1);
    ck_assert_double_eq(nb_item(out.t[0]), 3);

    /* Fewer slots than pairs: the first are stored, *n_meta says how many exist. */
    nb_tensor_list out2 = {0};
    const char *k1[2] = {NULL, "untouched"}, *v1[2] = {NULL, "untouched"};
    ck_assert_int_eq(nb_load_safetensors_meta(c2, p, &out2, 1, &n, k1, v1), NB_OK);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(k1[0], "format");
    ck_assert_str_eq(v1[0], "pt");
    ck_assert_str_eq(k1[1], "untouched");

    /* The plain loader ignores metadata. */
    nb_tensor_list out3 = {0};
    ck_assert_int_eq(nb_load_safetensors(c2, p, &out3), NB_OK);
    ck_assert_int_eq(out3.n, 1);

    /* No metadata: no "__metadata__" key at all, and n_meta 0. */
    ck_assert_int_eq(nb_save_safetensors(ctx, p, &list, 0, NULL, NULL), NB_OK);
    f = read_all(p, &len);
    ck_assert_ptr_null(strstr((char *)f + 8, "__metadata__"));
    free(f);
    nb_tensor_list out4 = {0};
    ck_assert_int_eq(nb_load_safetensors_meta(c2, p, &out4, 8, &n, k, v), NB_OK);
    ck_assert_int_eq(n, 0);
    nb_ctx_free(ctx);
    nb_ctx_free(c2);
}
END_TEST

START_TEST(test_names_with_special_characters) {
    nb_ctx *ctx = nb_ctx_new(0);
    const char *names[4] = {"layer.0/attn \"q\"", "back\\slash", "new\nline",
                            "\xc3\xbcnicode-\xe5\x90\x8d\xe5\x89\x8d"};
    nb_tensor_list list = {0};
    for (int i = 0; i < 4; i++) nb_list_add(&list, names[i], nb_scalar(ctx, NB_F64, i + 0.5));
    const char *p = tpath("names.safetensors");
    ck_assert_int_eq(nb_save_safetensors(ctx, p, &list, 0, NULL, NULL), NB_OK);
    nb_tensor_list out = {0};
    ck_assert_int_eq(nb_load_safetensors(ctx, p, &out), NB_OK);
    ck_assert_int_eq(out.n, 4);
    for (int i = 0; i < 4; i++) {
        ck_assert_str_eq(out.names[i], names[i]);
        ck_assert_double_eq(nb_item(nb_list_get(&out, names[i])), i + 0.5);
    }
    nb_ctx_free(ctx);
}
END_TEST

/* ---- hand-written files ------------------------------------------------------ */
START_TEST(test_handwritten_file_loads) {
    const char *p = tpath("hand.safetensors");
    const unsigned char data[8] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40}; /* 1, 2 */
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list out = {0};
    ck_assert_int_eq(nb_load_safetensors(ctx, p, &out), NB_OK);
    ck_assert_int_eq(out.n, 1);
    ck_assert_str_eq(out.names[0], "a");
    ck_assert_int_eq(out.t[0]->dtype, NB_F32);
    ck_assert_int_eq(out.t[0]->ndim, 1);
    ck_assert_int_eq(out.t[0]->shape[0], 2);
    ck_assert_double_eq(nb_get(out.t[0], 0), 1.0);
    ck_assert_double_eq(nb_get(out.t[0], 1), 2.0);
    nb_ctx_free(ctx);
}
END_TEST

/* Keys out of data order, whitespace, metadata last, padding: the list
 * comes out in data-offset order. */
START_TEST(test_handwritten_reordered_with_metadata) {
    const char *p = tpath("hand2.safetensors");
    unsigned char data[24];
    const int64_t id = -3;
    const double two[2] = {0.25, -6.5};
    memcpy(data, &id, 8); /* the tests run on little-endian hosts */
    memcpy(data + 8, two, 16);
    write_st(p,
             "{\n  \"b\": {\"dtype\": \"F64\", \"shape\": [2], \"data_offsets\": [8, 24]},\n"
             "  \"a\": {\"data_offsets\": [0, 8], \"shape\": [], \"dtype\": \"I64\"},\n"
             "  \"__metadata__\": {\"k\": \"v\"}\n}\n    ",
             data, 24);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list out = {0};
    const char *k[1], *v[1];
    int n;
    ck_assert_int_eq(nb_load_safetensors_meta(ctx, p, &out, 1, &n, k, v), NB_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(k[0], "k");
    ck_assert_str_eq(v[0], "v");
    ck_assert_int_eq(out.n, 2);
    ck_assert_str_eq(out.names[0], "a");
    ck_assert_str_eq(out.names[1], "b");
    ck_assert_int_eq(out.t[0]->dtype, NB_I64);
    ck_assert_int_eq(out.t[0]->ndim, 0);
    ck_assert_double_eq(nb_item(out.t[0]), -3);
    ck_assert_tensor_near(out.t[1], two, 2, 0);
    nb_ctx_free(ctx);
}
END_TEST

/* nb_load_safetensors_each: the header's stand-ins, then each tensor in
 * file order with nb_load_safetensors's values; a callback's status stops
 * the load. */
typedef struct each_log {
    int headers, tensors, stop_at;
    char names[4][8];
    double first[4];
    int ndim[4];
} each_log;

static nb_status each_header(void *user, const nb_tensor_list *all) {
    each_log *g = user;
    g->headers = all->n;
    for (int i = 0; i < all->n; i++) {
        const nb_tensor *t = nb_list_tensor(all, i);
        ck_assert_ptr_null(t->data);
        ck_assert_str_eq(t->name, nb_list_name(all, i));
        g->ndim[i] = t->ndim;
    }
    return NB_OK;
}

static nb_status each_tensor(void *user, const nb_tensor *t) {
    each_log *g = user;
    if (g->tensors == g->stop_at) return NB_ERR_VALUE;
    snprintf(g->names[g->tensors], sizeof g->names[0], "%s", t->name);
    g->first[g->tensors++] = nb_get(t, 0);
    return NB_OK;
}

START_TEST(test_load_each) {
    const char *p = tpath("hand3.safetensors");
    unsigned char data[24];
    const int64_t id = -3;
    const double two[2] = {0.25, -6.5};
    memcpy(data, &id, 8);
    memcpy(data + 8, two, 16);
    write_st(p,
             "{\"b\": {\"dtype\": \"F64\", \"shape\": [2], \"data_offsets\": [8, 24]},"
             " \"a\": {\"data_offsets\": [0, 8], \"shape\": [], \"dtype\": \"I64\"}}",
             data, 24);
    nb_ctx *ctx = nb_ctx_new(0);
    each_log g = {.stop_at = -1};
    ck_assert_int_eq(nb_load_safetensors_each(ctx, p, each_header, each_tensor, &g), NB_OK);
    ck_assert_int_eq(g.headers, 2);
    ck_assert_int_eq(g.ndim[0], 0);
    ck_assert_int_eq(g.ndim[1], 1);
    ck_assert_int_eq(g.tensors, 2);
    ck_assert_str_eq(g.names[0], "a"); /* file order */
    ck_assert_str_eq(g.names[1], "b");
    ck_assert_double_eq(g.first[0], -3);
    ck_assert_double_eq(g.first[1], 0.25);
    /* no header callback; a stop */
    g = (each_log){.stop_at = 1};
    ck_assert_int_eq(nb_load_safetensors_each(ctx, p, NULL, each_tensor, &g), NB_ERR_VALUE);
    ck_assert_int_eq(g.tensors, 1);
    ck_assert_error_has(ctx, "stopped by the caller (status");
    nb_ctx_clear_error(ctx);
    /* a bad file: refused before any callback */
    write_st(p, "{\"a\": {\"dtype\": \"F64\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
             data, 8);
    g = (each_log){.stop_at = -1};
    ck_assert_int_eq(nb_load_safetensors_each(ctx, p, each_header, each_tensor, &g),
                     NB_ERR_FORMAT);
    ck_assert_int_eq(g.headers + g.tensors, 0);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_handwritten_bool) {
    const char *p = tpath("bool.safetensors");
    write_st(p, "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[1,3],\"data_offsets\":[0,3]}}",
             "\x01\x00\x01", 3);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list out = {0};
    ck_assert_int_eq(nb_load_safetensors(ctx, p, &out), NB_OK);
    ck_assert_int_eq(out.t[0]->dtype, NB_BOOL);
    ck_assert_int_eq(out.t[0]->shape[1], 3);
    ck_assert_tensor_near(out.t[0], ((double[]){1, 0, 1}), 3, 0);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_f16_converts_to_f32) {
    const uint16_t h[12] = {0x3c00, 0xc000, 0x7c00, 0xfc00, 0x0001, 0x03ff,
                            0x0400, 0x7bff, 0x8000, 0x3555, 0x7e00, 0x8001};
    unsigned char data[24];
    for (int i = 0; i < 12; i++) data[2 * i] = h[i] & 0xff, data[2 * i + 1] = h[i] >> 8;
    const char *p = tpath("f16.safetensors");
    write_st(p, "{\"h\":{\"dtype\":\"F16\",\"shape\":[3,4],\"data_offsets\":[0,24]}}", data, 24);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list out = {0};
    ck_assert_int_eq(nb_load_safetensors(ctx, p, &out), NB_OK);
    const nb_tensor *t = out.t[0];
    ck_assert_int_eq(t->dtype, NB_F32);
    ck_assert_int_eq(t->ndim, 2);
    ck_assert_uint_eq(t->numel, 12);
    const float *f = t->data;
    ck_assert(f[0] == 1.0f);
    ck_assert(f[1] == -2.0f);
    ck_assert(isinf(f[2]) && f[2] > 0);
    ck_assert(isinf(f[3]) && f[3] < 0);
    ck_assert(f[4] == 5.960464477539063e-08f); /* 2^-24, the smallest subnormal */
    ck_assert(f[4] == ldexpf(1, -24));
    ck_assert(f[5] == ldexpf(1023, -24)); /* the largest subnormal */
    ck_assert(f[6] == ldexpf(1, -14));    /* the smallest normal */
    ck_assert(f[7] == 65504.0f);          /* the largest finite */
    ck_assert(f[8] == 0 && signbit(f[8]));
    ck_assert(f[9] == 0.333251953125f);
    ck_assert(isnan(f[10]));
    ck_assert(f[11] == -ldexpf(1, -24));
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_bf16_converts_to_f32) {
    const uint16_t h[9] = {0x3f80, 0xc040, 0x7f80, 0xff80, 0x0001,
                           0x7fc0, 0x8000, 0x4049, 0x7f7f};
    unsigned char data[18];
    for (int i = 0; i < 9; i++) data[2 * i] = h[i] & 0xff, data[2 * i + 1] = h[i] >> 8;
    const char *p = tpath("bf16.safetensors");
    write_st(p, "{\"h\":{\"dtype\":\"BF16\",\"shape\":[9],\"data_offsets\":[0,18]}}", data, 18);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list out = {0};
    ck_assert_int_eq(nb_load_safetensors(ctx, p, &out), NB_OK);
    const float *f = out.t[0]->data;
    ck_assert_int_eq(out.t[0]->dtype, NB_F32);
    ck_assert(f[0] == 1.0f);
    ck_assert(f[1] == -3.0f);
    ck_assert(isinf(f[2]) && f[2] > 0);
    ck_assert(isinf(f[3]) && f[3] < 0);
    ck_assert(f[4] == ldexpf(1, -133)); /* a float subnormal */
    ck_assert(isnan(f[5]));
    ck_assert(f[6] == 0 && signbit(f[6]));
    ck_assert(f[7] == 3.140625f);
    ck_assert(f[8] == 3.3895313892515355e38f);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- rejections ------------------------------------------------------------------ */
START_TEST(test_reject_short_files) {
    const char *p = tpath("short.safetensors");
    const size_t lens[3] = {0, 1, 7};
    for (int i = 0; i < 3; i++) {
        write_bytes(p, "\x10\0\0\0\0\0\0", lens[i]);
        expect_load_fail(p, NB_ERR_FORMAT, "too short for the 8-byte header size");
    }
}
END_TEST

START_TEST(test_reject_truncated_good_file) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list list = {0};
    nb_list_add(&list, "w", nb_from_doubles(ctx, NB_F32, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6}));
    nb_list_add(&list, "b", nb_from_doubles(ctx, NB_F32, NB_SHAPE(3), (double[]){1, 2, 3}));
    const char *good = tpath("good.safetensors");
    ck_assert_int_eq(nb_save_safetensors(ctx, good, &list, 0, NULL, NULL), NB_OK);
    size_t len;
    unsigned char *f = read_all(good, &len);
    const size_t h = 112; /* 8 + 112 is already a multiple of 8: no padding */
    ck_assert_uint_eq(len, 8 + h + 36);
    const char *p = tpath("cut.safetensors");
    const size_t in_header[3] = {8, 9, 8 + h - 1};
    for (int i = 0; i < 3; i++) {
        write_bytes(p, f, in_header[i]);
        expect_load_fail(p, NB_ERR_FORMAT, "header size 112 runs past the end of the file");
    }
    const size_t in_data[4] = {8 + h, 8 + h + 1, 8 + h + 24, len - 1};
    for (int i = 0; i < 4; i++) {
        write_bytes(p, f, in_data[i]);
        expect_load_fail(p, NB_ERR_FORMAT, "run past the end of the");
        expect_load_fail(p, NB_ERR_FORMAT, "(file truncated?)");
    }
    write_bytes(p, f, len);
    nb_tensor_list out = {0};
    ck_assert_int_eq(nb_load_safetensors(ctx, p, &out), NB_OK);
    free(f);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_reject_header_size_field) {
    const char *p = tpath("size.safetensors");
    unsigned char b[16] = {0};
    put_u64le(b, 100000001u);
    write_bytes(p, b, 16);
    expect_load_fail(p, NB_ERR_FORMAT, "header size 100000001 exceeds the 100000000-byte limit");
    put_u64le(b, UINT64_MAX);
    write_bytes(p, b, 16);
    expect_load_fail(p, NB_ERR_FORMAT, "header size 18446744073709551615 exceeds");
    unsigned char c[50];
    memset(c, ' ', sizeof c);
    put_u64le(c, 100);
    write_bytes(p, c, sizeof c);
    expect_load_fail(p, NB_ERR_FORMAT, "header size 100 runs past the end of the file (50 bytes)");
}
END_TEST

START_TEST(test_reject_garbage_headers) {
    const char *p = tpath("garbage.safetensors");
    write_st(p, "\x01\x02garbage bytes!", NULL, 0);
    expect_load_fail(p, NB_ERR_FORMAT, "header is not a JSON object (it must start with '{')");
    write_st(p, "[1, 2]", NULL, 0);
    expect_load_fail(p, NB_ERR_FORMAT, "header is not a JSON object");
    write_st(p, "", NULL, 0);
    expect_load_fail(p, NB_ERR_FORMAT, "header is not a JSON object");
    write_st(p, "{\"a\": nope}", NULL, 0);
    expect_load_fail(p, NB_ERR_FORMAT, "header is not valid JSON");
    write_st(p, "{\"a\": {\"dtype\": \"F32\"", NULL, 0);
    expect_load_fail(p, NB_ERR_FORMAT, "header is not valid JSON");
    write_st(p, "{} x", NULL, 0);
    expect_load_fail(p, NB_ERR_FORMAT, "header has data after its JSON object (header offset 3)");
    write_st_n(p, "{}\0\0", 4, NULL, 0);
    expect_load_fail(p, NB_ERR_FORMAT, "header has data after its JSON object (header offset 2)");
}
END_TEST

START_TEST(test_reject_invalid_utf8) {
    const char *p = tpath("utf8.safetensors");
    const char *bad[5] = {
        "{\"\xff\":{}}",             /* not a lead byte */
        "{\"\xc0\xaf\":{}}",         /* overlong '/' */
        "{\"\xed\xa0\x80\":{}}",     /* a UTF-16 surrogate */
        "{\"\xf4\x90\x80\x80\":{}}", /* past U+10FFFF */
        "{\"a\":{}}  \xe2\x82",      /* cut short at the end */
    };
    for (int i = 0; i < 4; i++) {
        write_st(p, bad[i], NULL, 0);
        expect_load_fail(p, NB_ERR_FORMAT, "header is not valid UTF-8");
        expect_load_fail(p, NB_ERR_FORMAT, "at header offset 2)");
    }
    write_st(p, bad[4], NULL, 0);
    expect_load_fail(p, NB_ERR_FORMAT, "header is not valid UTF-8 (byte 0xe2 at header offset 10)");
}
END_TEST

START_TEST(test_reject_bad_entries) {
    expect_entry_fail("5", "tensor 'a': entry is not a JSON object");
    expect_entry_fail("{\"shape\":[2],\"data_offsets\":[0,8]}", "tensor 'a': missing \"dtype\"");
    expect_entry_fail("{\"dtype\":\"F32\",\"data_offsets\":[0,8]}", "tensor 'a': missing \"shape\"");
    expect_entry_fail("{\"dtype\":\"F32\",\"shape\":[2]}", "tensor 'a': missing \"data_offsets\"");
    expect_entry_fail("{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}",
                      "\"dtype\" is not a string");
    expect_entry_fail("{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}",
                      "\"shape\" is not an array");
    const char *p = tpath("emptyname.safetensors");
    write_st(p, "{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "12345678", 8);
    expect_load_fail(p, NB_ERR_FORMAT, "a tensor has an empty name");
}
END_TEST

START_TEST(test_reject_unsupported_dtypes) {
    expect_entry_fail("{\"dtype\":\"F8_E9\",\"shape\":[8],\"data_offsets\":[0,8]}",
                      "tensor 'a': unsupported dtype 'F8_E9' (nabla reads F32, F64, F16, BF16, "
                      "I64 and BOOL)");
    expect_entry_fail("{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}",
                      "unsupported dtype 'I32'");
    expect_entry_fail("{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}",
                      "unsupported dtype 'f32'");
}
END_TEST

START_TEST(test_reject_bad_shapes) {
    expect_entry_fail("{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,8]}",
                      "tensor 'a': shape[1] is not an integer in 0..2^53");
    expect_entry_fail("{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}",
                      "shape[0] is not an integer");
    expect_entry_fail("{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}",
                      "shape[0] is not an integer");
    expect_entry_fail("{\"dtype\":\"BOOL\",\"shape\":[9007199254740994],\"data_offsets\":[0,8]}",
                      "shape[0] is not an integer in 0..2^53");
    expect_entry_fail("{\"dtype\":\"F32\",\"shape\":[2,0],\"data_offsets\":[0,8]}",
                      "tensor 'a': data_offsets [0, 8] hold 8 bytes but F32 shape [2, 0] needs 0");
    expect_entry_fail("{\"dtype\":\"BOOL\",\"shape\":[2,1,1,1,1,1,1,2,2],\"data_offsets\":[0,8]}",
                      "tensor 'a': shape has 9 dims, nabla tensors have at most 8");
    expect_entry_fail("{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
                      "\"data_offsets\":[0,8]}",
                      "tensor 'a': byte size of the shape overflows 64 bits");
    expect_entry_fail("{\"dtype\":\"BOOL\",\"shape\":[9007199254740992,2048],"
                      "\"data_offsets\":[0,8]}",
                      "byte size of the shape overflows 64 bits");
}
END_TEST

START_TEST(test_reject_bad_offsets) {
    const char *msg = "tensor 'a': \"data_offsets\" is not [begin, end] with integers in 0..2^53";
    expect_entry_fail("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}", msg);
    expect_entry_fail("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,16]}", msg);
    expect_entry_fail("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0.5,8]}", msg);
    expect_entry_fail("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}", msg);
    expect_entry_fail("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[\"0\",8]}", msg);
    expect_entry_fail("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":\"0-8\"}", msg);
    expect_entry_fail("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}",
                      "tensor 'a': data_offsets [8, 0] has begin > end");
}
END_TEST

START_TEST(test_reject_size_mismatch_and_out_of_bounds) {
    expect_entry_fail("{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}",
                      "tensor 'a': data_offsets [0, 8] hold 8 bytes but F32 shape [3] needs 12");
    expect_entry_fail("{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,8]}",
                      "hold 8 bytes but F16 shape [2, 3] needs 12");
    const char *p = tpath("oob.safetensors");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "1234", 4);
    expect_load_fail(p, NB_ERR_FORMAT,
                     "tensor 'a': data_offsets [0, 8] run past the end of the 4 data bytes");
}
END_TEST

START_TEST(test_reject_overlap_gap_trailing) {
    const char *p = tpath("tiling.safetensors");
    const char *data = "0123456789abcdef";
    write_st(p,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
             data, 12);
    expect_load_fail(p, NB_ERR_FORMAT, "tensors 'a' [0, 8) and 'b' [4, 12) overlap");
    write_st(p,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
             data, 8);
    expect_load_fail(p, NB_ERR_FORMAT, "overlap");
    write_st(p,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
             data, 12);
    expect_load_fail(p, NB_ERR_FORMAT, "gap in the data: bytes [4, 8) before tensor 'b'");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", data, 8);
    expect_load_fail(p, NB_ERR_FORMAT, "gap in the data: bytes [0, 4) before tensor 'a'");
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 12);
    expect_load_fail(p, NB_ERR_FORMAT,
                     "4 trailing bytes: the data region is 12 bytes but the tensors end at 8");
    write_st(p, "{}", data, 1);
    expect_load_fail(p, NB_ERR_FORMAT, "1 trailing bytes");
}
END_TEST

START_TEST(test_reject_bad_metadata) {
    const char *p = tpath("badmeta.safetensors");
    write_st(p, "{\"__metadata__\":[\"a\"]}", NULL, 0);
    expect_load_fail(p, NB_ERR_FORMAT, "\"__metadata__\" is not an object");
    write_st(p, "{\"__metadata__\":{\"epoch\":3}}", NULL, 0);
    expect_load_fail(p, NB_ERR_FORMAT, "\"__metadata__\" value of 'epoch' is not a string");
    write_st(p, "{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", NULL, 0);
    expect_load_fail(p, NB_ERR_FORMAT, "duplicate key 'k' in \"__metadata__\"");
}
END_TEST

START_TEST(test_reject_duplicate_names) {
    const char *p = tpath("dup.safetensors");
    write_st(p,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             "12345678", 8);
    expect_load_fail(p, NB_ERR_FORMAT, "duplicate name 'a' in header");
    write_st(p, "{\"__metadata__\":{},\"__metadata__\":{}}", NULL, 0);
    expect_load_fail(p, NB_ERR_FORMAT, "duplicate name '__metadata__'");
}
END_TEST

START_TEST(test_reject_bool_bytes) {
    const char *p = tpath("badbool.safetensors");
    write_st(p, "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}", "\x01\x02\x00",
             3);
    expect_load_fail(p, NB_ERR_FORMAT, "tensor 'm': BOOL element 1 is 2, expected 0 or 1");
}
END_TEST

START_TEST(test_load_io_and_list_errors) {
    expect_load_fail(tpath("missing.safetensors"), NB_ERR_IO,
                     "cannot open: No such file or directory");
    expect_load_fail(g_dir, NB_ERR_IO, "not a regular file");

    const char *p = tpath("two.safetensors");
    write_st(p,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             "\0\0\x80\x3f\0\0\0\x40", 8);
    nb_tensor_list out = {0};
    ck_assert_int_eq(nb_load_safetensors(NULL, p, &out), NB_ERR_NULL);
    nb_ctx *ctx = nb_ctx_new(0);
    ck_assert_int_eq(nb_load_safetensors(ctx, NULL, &out), NB_ERR_NULL);
    ck_assert_error_has(ctx, "load_safetensors: path is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_load_safetensors(ctx, p, NULL), NB_ERR_NULL);
    ck_assert_error_has(ctx, "out is NULL");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_load_safetensors_meta(ctx, p, &out, 2, NULL, NULL, NULL), NB_ERR_NULL);
    ck_assert_error_has(ctx, "max_meta is 2 but keys is NULL");
    nb_ctx_clear_error(ctx);

    /* 255 entries: the file's two go to the last inline slot and the heap. */
    nb_tensor *s = nb_scalar(ctx, NB_F32, 0);
    static char names[NB_LIST_MAX][8];
    for (int i = 0; i < NB_LIST_MAX - 1; i++) {
        snprintf(names[i], sizeof names[i], "n%d", i);
        nb_list_add(&out, names[i], s);
    }
    ck_assert_int_eq(nb_load_safetensors(ctx, p, &out), NB_OK);
    ck_assert_int_eq(out.n, NB_LIST_MAX + 1);
    ck_assert_str_eq(nb_list_name(&out, NB_LIST_MAX), "b");
    ck_assert_double_eq(nb_item(nb_list_get(&out, "b")), 2.0);
    nb_list_free(&out);

    /* A name already in the list: nothing is appended. */
    nb_tensor_list small = {0};
    nb_list_add(&small, "b", s);
    ck_assert_int_eq(nb_load_safetensors(ctx, p, &small), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "tensor 'b' is already in the list");
    ck_assert_int_eq(small.n, 1);
    nb_ctx_clear_error(ctx);

    /* A context holding an error: nothing happens, its status comes back. */
    nb_ctx_fail(ctx, NB_ERR_SHAPE, "earlier failure");
    nb_tensor_list fresh = {0};
    ck_assert_int_eq(nb_load_safetensors(ctx, p, &fresh), NB_ERR_SHAPE);
    ck_assert_str_eq(nb_ctx_error(ctx), "earlier failure");
    ck_assert_int_eq(fresh.n, 0);
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_load_safetensors(ctx, p, &fresh), NB_OK);
    ck_assert_int_eq(fresh.n, 2);
    ck_assert_double_eq(nb_item(fresh.t[1]), 2.0);
    nb_ctx_free(ctx);
}
END_TEST

/* Saving fails with `status` and `part`, and leaves g_dir empty. */
static void expect_save_fail(nb_ctx *ctx, const nb_tensor_list *list, int n_meta,
                             const char *const *k, const char *const *v, nb_status status,
                             const char *part) {
    const char *p = tpath("bad-save.safetensors");
    ck_assert_int_eq(nb_save_safetensors(ctx, p, list, n_meta, k, v), status);
    ck_assert_error_has(ctx, part);
    ck_assert_error_has(ctx, p);
    ck_assert_int_eq(dir_entries(g_dir), 0);
    nb_ctx_clear_error(ctx);
}

START_TEST(test_save_argument_errors) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_scalar(ctx, NB_F32, 1);
    nb_tensor_list list = {0};
    nb_list_add(&list, "x", x);
    ck_assert_int_eq(nb_save_safetensors(NULL, tpath("a"), &list, 0, NULL, NULL), NB_ERR_NULL);
    ck_assert_int_eq(nb_save_safetensors(ctx, NULL, &list, 0, NULL, NULL), NB_ERR_NULL);
    ck_assert_error_has(ctx, "save_safetensors: path is NULL");
    nb_ctx_clear_error(ctx);
    expect_save_fail(ctx, NULL, 0, NULL, NULL, NB_ERR_NULL, "list is NULL");

    /* Lists built by hand, as nb_list_add would refuse some of these. */
    nb_tensor_list bad = {.n = 2, .names = {"x", "y"}, .t = {x, NULL}};
    expect_save_fail(ctx, &bad, 0, NULL, NULL, NB_ERR_NULL, "tensor 'y' is NULL");
    bad = (nb_tensor_list){.n = 1, .names = {NULL}, .t = {x}};
    expect_save_fail(ctx, &bad, 0, NULL, NULL, NB_ERR_NULL, "entry 0 has a NULL name");
    bad = (nb_tensor_list){.n = 2, .names = {"x", ""}, .t = {x, x}};
    expect_save_fail(ctx, &bad, 0, NULL, NULL, NB_ERR_VALUE, "entry 1 has an empty name");
    bad = (nb_tensor_list){.n = 3, .names = {"x", "y", "x"}, .t = {x, x, x}};
    expect_save_fail(ctx, &bad, 0, NULL, NULL, NB_ERR_VALUE, "duplicate tensor name 'x'");
    bad = (nb_tensor_list){.n = 1, .names = {"__metadata__"}, .t = {x}};
    expect_save_fail(ctx, &bad, 0, NULL, NULL, NB_ERR_VALUE, "'__metadata__' is reserved");
    bad = (nb_tensor_list){.n = 1, .names = {"bad\xff"}, .t = {x}};
    expect_save_fail(ctx, &bad, 0, NULL, NULL, NB_ERR_VALUE, "entry 0: name is not valid UTF-8");
    bad = (nb_tensor_list){.n = -1};
    expect_save_fail(ctx, &bad, 0, NULL, NULL, NB_ERR_VALUE, "list is corrupt (n = -1)");
    nb_tensor odd = *x;
    odd.dtype = (nb_dtype)99;
    bad = (nb_tensor_list){.n = 1, .names = {"odd"}, .t = {&odd}};
    expect_save_fail(ctx, &bad, 0, NULL, NULL, NB_ERR_DTYPE, "tensor 'odd' has unknown dtype 99");
    odd = *x;
    odd.data = NULL;
    expect_save_fail(ctx, &bad, 0, NULL, NULL, NB_ERR_NULL, "tensor 'odd' has no data");

    const char *k2[2] = {"a", "a"}, *v2[2] = {"1", "2"};
    expect_save_fail(ctx, &list, -1, NULL, NULL, NB_ERR_VALUE, "n_meta is -1");
    expect_save_fail(ctx, &list, 1, NULL, v2, NB_ERR_NULL, "1 metadata pairs but meta_keys is NULL");
    expect_save_fail(ctx, &list, 2, k2, v2, NB_ERR_VALUE, "duplicate metadata key 'a'");
    const char *kn[1] = {"k"}, *vn[1] = {NULL};
    expect_save_fail(ctx, &list, 1, kn, vn, NB_ERR_NULL, "metadata value 0 is NULL");
    const char *vb[1] = {"\xc3"};
    expect_save_fail(ctx, &list, 1, kn, vb, NB_ERR_VALUE, "metadata pair 0 is not valid UTF-8");

    /* A context holding an error: nothing is written. */
    nb_ctx_fail(ctx, NB_ERR_DTYPE, "earlier failure");
    ck_assert_int_eq(nb_save_safetensors(ctx, tpath("x.safetensors"), &list, 0, NULL, NULL),
                     NB_ERR_DTYPE);
    ck_assert_str_eq(nb_ctx_error(ctx), "earlier failure");
    ck_assert_int_eq(dir_entries(g_dir), 0);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- the atomic write ----------------------------------------------------------- */
START_TEST(test_save_into_missing_directory) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list list = {0};
    nb_list_add(&list, "x", nb_scalar(ctx, NB_F32, 1));
    const char *p = tpath("no-such-dir/model.safetensors");
    ck_assert_int_eq(nb_save_safetensors(ctx, p, &list, 0, NULL, NULL), NB_ERR_IO);
    ck_assert_error_has(ctx, "cannot create temporary file");
    ck_assert_error_has(ctx, "No such file or directory");
    ck_assert_error_has(ctx, p);
    ck_assert_int_eq(dir_entries(g_dir), 0);
    nb_ctx_free(ctx);
}
END_TEST

/* A write that fails half-way leaves the old file byte for byte. The failure
 * is real, not simulated: RLIMIT_FSIZE makes the kernel refuse writes past
 * 4096 bytes with EFBIG (root is not exempt, unlike with chmod), so the save
 * creates its temporary file, writes part of a 64 KiB tensor and then fails.
 * SIGXFSZ is ignored meanwhile so the failure is an error return, not a
 * signal; both are restored before any assertion. */
START_TEST(test_failed_write_keeps_old_file) {
    nb_ctx *ctx = nb_ctx_new(0);
    const char *p = tpath("model.safetensors");
    nb_tensor_list old = {0};
    nb_list_add(&old, "w", nb_from_doubles(ctx, NB_F32, NB_SHAPE(3), (double[]){1, 2, 3}));
    ck_assert_int_eq(nb_save_safetensors(ctx, p, &old, 0, NULL, NULL), NB_OK);
    size_t old_len;
    unsigned char *before = read_all(p, &old_len);

    nb_tensor_list big = {0};
    nb_list_add(&big, "w", nb_full(ctx, NB_F32, NB_SHAPE(128, 128), 7.0));
    struct rlimit saved, small;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &saved), 0);
    small = saved;
    small.rlim_cur = 4096;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
    nb_status st = nb_save_safetensors(ctx, p, &big, 0, NULL, NULL);
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, prev);

    ck_assert_int_eq(st, NB_ERR_IO);
    ck_assert_error_has(ctx, "writing '");
    ck_assert_error_has(ctx, ".tmp.");
    ck_assert_error_has(ctx, "failed: File too large");
    size_t len;
    unsigned char *after = read_all(p, &len);
    ck_assert_uint_eq(len, old_len);
    ck_assert_int_eq(memcmp(before, after, len), 0);
    ck_assert_int_eq(dir_entries(g_dir), 1); /* the temporary file is gone */
    nb_ctx_clear_error(ctx);
    nb_tensor_list out = {0};
    ck_assert_int_eq(nb_load_safetensors(ctx, p, &out), NB_OK);
    ck_assert_tensor_near(out.t[0], ((double[]){1, 2, 3}), 3, 0);
    free(before);
    free(after);
    nb_ctx_free(ctx);
}
END_TEST

/* The last step failing: everything is written and synced, then rename()
 * cannot replace a non-empty directory. The directory stays, the temporary
 * file goes. */
START_TEST(test_failed_rename_removes_temp) {
    nb_ctx *ctx = nb_ctx_new(0);
    const char *target = tpath("target");
    ck_assert_int_eq(mkdir(target, 0700), 0);
    write_bytes(tpath("target/keep"), "keep", 4);
    nb_tensor_list list = {0};
    nb_list_add(&list, "x", nb_scalar(ctx, NB_F32, 1));
    ck_assert_int_eq(nb_save_safetensors(ctx, target, &list, 0, NULL, NULL), NB_ERR_IO);
    ck_assert_error_has(ctx, "cannot rename '");
    ck_assert_error_has(ctx, "Is a directory");
    ck_assert_int_eq(dir_entries(g_dir), 1);
    ck_assert(file_exists(tpath("target/keep")));
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_save_replaces_existing_file) {
    nb_ctx *ctx = nb_ctx_new(0);
    const char *p = tpath("model.safetensors");
    nb_tensor_list a = {0}, b = {0};
    nb_list_add(&a, "old", nb_from_doubles(ctx, NB_F64, NB_SHAPE(100), (double[100]){1}));
    nb_list_add(&b, "new", nb_scalar(ctx, NB_I64, 42));
    ck_assert_int_eq(nb_save_safetensors(ctx, p, &a, 0, NULL, NULL), NB_OK);
    ck_assert_int_eq(nb_save_safetensors(ctx, p, &b, 0, NULL, NULL), NB_OK);
    ck_assert_int_eq(dir_entries(g_dir), 1);
    nb_tensor_list out = {0};
    ck_assert_int_eq(nb_load_safetensors(ctx, p, &out), NB_OK);
    ck_assert_int_eq(out.n, 1);
    ck_assert_str_eq(out.names[0], "new");
    ck_assert_int_eq(out.t[0]->dtype, NB_I64);
    ck_assert_double_eq(nb_item(out.t[0]), 42);
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_safetensors(void) {
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_roundtrip_f32_ranks);
    tcase_add_test(tc, test_roundtrip_f64_ranks);
    tcase_add_test(tc, test_roundtrip_i64_ranks);
    tcase_add_test(tc, test_roundtrip_bool_ranks);
    tcase_add_test(tc, test_roundtrip_special_values);
    tcase_add_test(tc, test_roundtrip_mixed_order_appends);
    tcase_add_test(tc, test_header_layout_exact);
    tcase_add_test(tc, test_empty_list_file);
    tcase_add_test(tc, test_metadata_roundtrip);
    tcase_add_test(tc, test_names_with_special_characters);
    tcase_add_test(tc, test_handwritten_file_loads);
    tcase_add_test(tc, test_handwritten_reordered_with_metadata);
    tcase_add_test(tc, test_handwritten_bool);
    tcase_add_test(tc, test_load_each);
    tcase_add_test(tc, test_f16_converts_to_f32);
    tcase_add_test(tc, test_bf16_converts_to_f32);
    tcase_add_test(tc, test_reject_short_files);
    tcase_add_test(tc, test_reject_truncated_good_file);
    tcase_add_test(tc, test_reject_header_size_field);
    tcase_add_test(tc, test_reject_garbage_headers);
    tcase_add_test(tc, test_reject_invalid_utf8);
    tcase_add_test(tc, test_reject_bad_entries);
    tcase_add_test(tc, test_reject_unsupported_dtypes);
    tcase_add_test(tc, test_reject_bad_shapes);
    tcase_add_test(tc, test_reject_bad_offsets);
    tcase_add_test(tc, test_reject_size_mismatch_and_out_of_bounds);
    tcase_add_test(tc, test_reject_overlap_gap_trailing);
    tcase_add_test(tc, test_reject_bad_metadata);
    tcase_add_test(tc, test_reject_duplicate_names);
    tcase_add_test(tc, test_reject_bool_bytes);
    tcase_add_test(tc, test_load_io_and_list_errors);
    tcase_add_test(tc, test_save_argument_errors);
    tcase_add_test(tc, test_save_into_missing_directory);
    tcase_add_test(tc, test_failed_write_keeps_old_file);
    tcase_add_test(tc, test_failed_rename_removes_temp);
    tcase_add_test(tc, test_save_replaces_existing_file);
    suite_add_tcase(s, tc);
    return s;
}
