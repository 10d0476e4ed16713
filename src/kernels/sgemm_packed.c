/* kernels/sgemm_packed.c - the blocked, packed float32 gemm around a SIMD
 * micro-kernel (BLIS's loop nest, with a's sliver rather than b's kept in
 * L1 because the vectors run along c's rows):
 *
 *   for each NC-column panel of c:
 *     for each KC block of the inner dimension:
 *       pack b (kc, nc) into NR-wide slivers            (L2 resident)
 *       for each MR-row sliver of c (a read in place, L1 resident):
 *         for each NR-wide sliver: micro-kernel c (MR, NR) (+)= a @ b
 *
 * Packing b makes every transposition the same contiguous stream, zero-
 * padded at the edge. a is read in place through its strides, except a
 * last sliver of fewer than MR rows that the kernel's ukr_rows does not
 * take (then packed with zero rows, see run_block), and a transposed a
 * whose columns are far apart; a partial tile of c goes through a small
 * buffer.
 * The packing buffers belong to the calling thread (allocated at its first
 * call, freed when it exits), so no call allocates after the first. */
#include "kernels/kernels_internal.h"

#include <pthread.h>
#include <stdlib.h>

#define GEMM_NC 512
/* a transposed a far apart is packed this many slivers at a time (see
 * run_block) */
#define FAR_SLIVERS 16

typedef struct pack_buffers {
    float *b;     /* (NB_GEMM_KC, GEMM_NC) at most, as slivers */
    float *a;     /* (MR, NB_GEMM_KC) */
    float *whole[NB_SGEMM_WHOLE]; /* whole packed b's (nb_sgemm_whole_buffer), grown */
    size_t whole_cap[NB_SGEMM_WHOLE];
} pack_buffers;

static pthread_key_t pack_key;
static pthread_once_t pack_once = PTHREAD_ONCE_INIT;

static void pack_free(void *p) {
    pack_buffers *pb = p;
    free(pb->b);
    free(pb->a);
    for (int i = 0; i < NB_SGEMM_WHOLE; i++) free(pb->whole[i]);
    free(pb);
}

static void pack_key_init(void) { pthread_key_create(&pack_key, pack_free); }

/* The calling thread's buffers, big enough for any kernel; NULL when out
 * of memory. */
static pack_buffers *pack_get(void) {
    pthread_once(&pack_once, pack_key_init);
    pack_buffers *pb = pthread_getspecific(pack_key);
    if (pb) return pb;
    pb = calloc(1, sizeof *pb);
    if (!pb) return NULL;
    /* room for the widest sliver (32) and, for a, FAR_SLIVERS of the
     * tallest (16) of any kernel */
    pb->b = aligned_alloc(64, sizeof(float) * NB_GEMM_KC * (GEMM_NC + 32));
    pb->a = aligned_alloc(64, sizeof(float) * NB_GEMM_KC * 16 * FAR_SLIVERS);
    if (!pb->b || !pb->a || pthread_setspecific(pack_key, pb)) {
        pack_free(pb);
        return NULL;
    }
    return pb;
}

/* b's block (kc, nc) at b0 -> slivers of NR columns, each (kc, NR). */
static void pack_b(float *dst, const float *b0, int64_t brs, int64_t bcs, int64_t kc, int64_t nc,
                   int nr) {
    for (int64_t j = 0; j < nc; j += nr, dst += kc * nr) {
        int w = nc - j < nr ? (int)(nc - j) : nr;
        const float *bj = b0 + j * bcs;
        if (bcs == 1 && w == nr) {
            /* a copy of a size known here is a few vector moves, not a call */
            if (nr == 16)
                for (int64_t p = 0; p < kc; p++) memcpy(dst + p * 16, bj + p * brs, 16 * 4);
            else if (nr == 32)
                for (int64_t p = 0; p < kc; p++) memcpy(dst + p * 32, bj + p * brs, 32 * 4);
            else
                for (int64_t p = 0; p < kc; p++)
                    memcpy(dst + p * nr, bj + p * brs, sizeof(float) * (size_t)nr);
            continue;
        }
        if (brs == 1 && w == nr) {
            /* b^T (a linear's weight in its forward): the sliver is the
             * transpose of nr contiguous rows, 16 x 16 blocks at a time */
            nb_vec()->transpose(dst, bj, (size_t)bcs, (size_t)nr, (size_t)kc);
            continue;
        }
        if (brs == 1) {
            /* b^T: each column of b is a contiguous row in memory; eight of
             * them are read side by side, so reads and writes both stream */
            int l = 0;
            for (; l + 8 <= w; l += 8) {
                const float *r0 = bj + l * bcs;
                for (int64_t p = 0; p < kc; p++)
                    for (int q = 0; q < 8; q++) dst[p * nr + l + q] = r0[q * bcs + p];
            }
            for (; l < w; l++)
                for (int64_t p = 0; p < kc; p++) dst[p * nr + l] = bj[l * bcs + p];
        } else {
            for (int64_t p = 0; p < kc; p++)
                for (int l = 0; l < w; l++) dst[p * nr + l] = bj[p * brs + l * bcs];
        }
        for (int64_t p = 0; p < kc; p++)
            for (int l = w; l < nr; l++) dst[p * nr + l] = 0;
    }
}

/* a's last sliver (h < MR rows, kc) at a0 -> (kc, MR), zero rows below. */
static void pack_a(float *dst, const float *a0, int64_t ars, int64_t acs, int64_t kc, int h,
                   int mr) {
    for (int64_t p = 0; p < kc; p++) {
        float *d = dst + p * mr;
        for (int r = 0; r < h; r++) d[r] = a0[r * ars + p * acs];
        for (int r = h; r < mr; r++) d[r] = 0;
    }
}

/* a^T's rows [0, hc) of a block (kc of them, each contiguous in memory
 * and acs apart) -> slivers of MR rows, each (kc, MR), the last zero-padded:
 * every step of the inner index reads one contiguous run of hc floats. */
static void pack_a_far(float *dst, const float *a0, int64_t acs, int64_t kc, int64_t hc, int mr) {
    int64_t full = hc / mr, tail = hc - full * mr;
    for (int64_t p = 0; p < kc; p++) {
        const float *src = a0 + p * acs;
        float *d = dst + p * mr;
        if (mr == 8)
            for (int64_t s = 0; s < full; s++) memcpy(d + s * kc * 8, src + s * 8, 8 * 4);
        else if (mr == 6)
            for (int64_t s = 0; s < full; s++) memcpy(d + s * kc * 6, src + s * 6, 6 * 4);
        else
            for (int64_t s = 0; s < full; s++)
                memcpy(d + s * kc * mr, src + s * mr, sizeof(float) * (size_t)mr);
        if (tail) {
            float *dt = d + full * kc * mr;
            for (int r = 0; r < mr; r++) dt[r] = r < tail ? src[full * mr + r] : 0;
        }
    }
}

/* Where a block's slivers of b are: sliver s (columns s NR ..) at
 * b + s * step, rows ldb apart; a last sliver narrower than NR at tail
 * (packed, zero-padded) when tail is set. */
typedef struct slivers {
    const float *b, *tail;
    int64_t ldb, step;
} slivers;

/* One sliver: c's rows [i, i + h) (+)= the sliver as (h <= MR rows, kc,
 * strides sr, sc) @ b's block (kc, nc); a partial tile of c goes through
 * edge. h < MR: padded, as holds MR rows, those past h zero (packed), and
 * the full kernel runs; else the kernel's ukr_rows on the h rows. */
static void run_sliver(const nb_sgemm_kernel *k, float *edge, float *c, int64_t ldc,
                       const float *as, int64_t sr, int64_t sc, int h, bool padded,
                       const slivers *bs, int64_t kc, int64_t nc, bool acc) {
    const int mr = k->mr, nr = k->nr;
    const bool rows = h < mr && !padded; /* h rows only */
    for (int64_t j = 0; j < nc; j += nr) {
        int w = nc - j < nr ? (int)(nc - j) : nr;
        float *ct = c + j;
        const float *bj = bs->b + j / nr * bs->step;
        int64_t ldb = bs->ldb;
        if (w < nr && bs->tail) bj = bs->tail, ldb = nr;
        if (w == nr && (h == mr || rows)) {
            if (rows) k->ukr_rows(h, kc, as, sr, sc, bj, ldb, ct, ldc, acc);
            else k->ukr(kc, as, sr, sc, bj, ldb, ct, ldc, acc);
            continue;
        }
        for (int r = 0; acc && r < h; r++)
            memcpy(edge + r * nr, ct + r * ldc, sizeof(float) * (size_t)w);
        if (rows) k->ukr_rows(h, kc, as, sr, sc, bj, ldb, edge, nr, acc);
        else k->ukr(kc, as, sr, sc, bj, ldb, edge, nr, acc);
        for (int r = 0; r < h; r++) memcpy(ct + r * ldc, edge + r * nr, sizeof(float) * (size_t)w);
    }
}

/* One block: c (rows, nc) (+)= a (rows, kc) @ b's block (kc, nc), c's rows
 * `ldc` apart. a's last sliver of fewer than MR rows is read in place by
 * the kernel's ukr_rows when a's rows are contiguous (the fused
 * attention's groups of 16 rows end in one of 4), else packed through pa
 * with zero rows: a transposed a's partial sliver read in place made the
 * 256-row attention products of bench-gemm (dv, dk) 20% slower on Zen 5,
 * the time going to the full slivers' kernel, not to ukr_rows. */
static void run_block(const nb_sgemm_kernel *k, float *pa, float *c, int64_t ldc,
                      const float *a, int64_t ars, int64_t acs, const slivers *bs, int64_t rows,
                      int64_t kc, int64_t nc, bool acc) {
    const int mr = k->mr;
    float edge[16 * 32]; /* a partial tile of c, (mr, nr) */
    if (ars == 1 && acs >= 512) {
        /* a^T with its columns 2 KB or more apart (a weight gradient's
         * dy^T): a sliver read in place takes a new page for every step of
         * the inner index, and packed alone (six or eight floats from each
         * of kc rows) it cost 5% of an attention step. FAR_SLIVERS slivers
         * are packed together, reading a longer contiguous run per row,
         * then each is used for every sliver of b. */
        for (int64_t i0 = 0; i0 < rows; i0 += (int64_t)FAR_SLIVERS * mr) {
            int64_t hc = rows - i0 < (int64_t)FAR_SLIVERS * mr ? rows - i0 : FAR_SLIVERS * mr;
            pack_a_far(pa, a + i0, acs, kc, hc, mr);
            for (int64_t i = 0; i < hc; i += mr)
                run_sliver(k, edge, c + (i0 + i) * ldc, ldc, pa + i / mr * kc * mr, 1, mr,
                           hc - i < mr ? (int)(hc - i) : mr, true, bs, kc, nc, acc);
        }
        return;
    }
    for (int64_t i = 0; i < rows; i += mr) {
        int h = rows - i < mr ? (int)(rows - i) : mr;
        const float *as = a + i * ars;
        int64_t sr = ars, sc = acs;
        bool padded = h < mr && (!k->ukr_rows || ars == 1);
        if (padded) {
            pack_a(pa, as, ars, acs, kc, h, mr);
            as = pa, sr = 1, sc = mr;
        }
        run_sliver(k, edge, c + i * ldc, ldc, as, sr, sc, h, padded, bs, kc, nc, acc);
    }
}

/* b with contiguous rows no more than 1 KB apart is read in place, sliver
 * by sliver, and only a narrower last sliver is packed: the kernel streams
 * such a sliver's rows from L2 as fast as from a packed copy, and copying b
 * (for a weight gradient, all of x) cost as much as a fifth of the product
 * at the GPT's sizes. Rows further apart spread a sliver over more pages
 * than the TLB holds (2 KB apart measured 3-5% slower), so such b, and
 * transposed b, are packed block by block. */
bool nb_sgemm_b_in_place(int64_t brs, int64_t bcs) { return bcs == 1 && brs <= 256; }

bool nb_sgemm_packed(const nb_sgemm_kernel *k, float *c, int64_t ldc, const float *a,
                     int64_t ars, int64_t acs, const float *b, int64_t brs, int64_t bcs,
                     int64_t rows, int64_t inner, int64_t cols, bool add) {
    pack_buffers *pb = pack_get();
    if (!pb) return false;
    const int nr = k->nr;
    for (int64_t j0 = 0; j0 < cols; j0 += GEMM_NC) {
        int64_t nc = cols - j0 < GEMM_NC ? cols - j0 : GEMM_NC;
        for (int64_t p0 = 0; p0 < inner; p0 += NB_GEMM_KC) {
            int64_t kc = inner - p0 < NB_GEMM_KC ? inner - p0 : NB_GEMM_KC;
            const float *b0 = b + p0 * brs + j0 * bcs;
            slivers bs = {pb->b, NULL, nr, kc * nr};
            if (nb_sgemm_b_in_place(brs, bcs)) {
                int64_t full = nc / nr * nr;
                bs = (slivers){b0, NULL, brs, nr};
                if (full < nc) {
                    pack_b(pb->b, b0 + full, brs, 1, kc, nc - full, nr);
                    bs.tail = pb->b;
                }
            } else {
                pack_b(pb->b, b0, brs, bcs, kc, nc, nr);
            }
            run_block(k, pb->a, c + j0, ldc, a + p0 * acs, ars, acs, &bs, rows, kc, nc,
                      add || p0 > 0);
        }
    }
    return true;
}

/* ---- b packed once, for gemms split over c's rows ------------------------------
 * The whole of b as the blocks nb_sgemm_packed packs one at a time: the
 * NC-column panel j0 starts at j0 * inner, and within it the KC block p0 at
 * p0 * (nc rounded up to NR). */
static int64_t round_up(int64_t n, int m) { return (n + m - 1) / m * m; }

size_t nb_sgemm_whole_size(const nb_sgemm_kernel *k, int64_t inner, int64_t cols) {
    return (size_t)inner * (size_t)round_up(cols, k->nr);
}

float *nb_sgemm_whole_buffer(int which, size_t n) {
    pack_buffers *pb = pack_get();
    if (!pb || which < 0 || which >= NB_SGEMM_WHOLE) return NULL;
    if (n > pb->whole_cap[which]) {
        size_t cap = n + n / 4; /* grown a quarter more, so a few sizes settle */
        float *w = aligned_alloc(64, round_up((int64_t)(cap * sizeof(float)), 64));
        if (!w) return NULL;
        free(pb->whole[which]);
        pb->whole[which] = w, pb->whole_cap[which] = cap;
    }
    return pb->whole[which];
}

int64_t nb_sgemm_whole_slivers(const nb_sgemm_kernel *k, int64_t cols) {
    return (cols + k->nr - 1) / k->nr;
}

void nb_sgemm_pack_whole(const nb_sgemm_kernel *k, float *dst, const float *b, int64_t brs,
                         int64_t bcs, int64_t inner, int64_t cols, int64_t s0, int64_t s1) {
    const int nr = k->nr;
    for (int64_t s = s0; s < s1; s++) {
        int64_t j = s * nr, j0 = j / GEMM_NC * GEMM_NC;
        int64_t nc = cols - j0 < GEMM_NC ? cols - j0 : GEMM_NC, ncp = round_up(nc, nr);
        int64_t w = cols - j < nr ? cols - j : nr;
        for (int64_t p0 = 0; p0 < inner; p0 += NB_GEMM_KC) {
            int64_t kc = inner - p0 < NB_GEMM_KC ? inner - p0 : NB_GEMM_KC;
            pack_b(dst + j0 * inner + p0 * ncp + (j - j0) * kc, b + p0 * brs + j * bcs, brs,
                   bcs, kc, w, nr);
        }
    }
}

bool nb_sgemm_prepacked(const nb_sgemm_kernel *k, float *c, const float *a, int64_t ars,
                        int64_t acs, const float *bp, int64_t rows, int64_t inner,
                        int64_t cols, bool add) {
    pack_buffers *pb = pack_get();
    if (!pb) return false;
    for (int64_t j0 = 0; j0 < cols; j0 += GEMM_NC) {
        int64_t nc = cols - j0 < GEMM_NC ? cols - j0 : GEMM_NC, ncp = round_up(nc, k->nr);
        for (int64_t p0 = 0; p0 < inner; p0 += NB_GEMM_KC) {
            int64_t kc = inner - p0 < NB_GEMM_KC ? inner - p0 : NB_GEMM_KC;
            slivers bs = {bp + j0 * inner + p0 * ncp, NULL, k->nr, kc * k->nr};
            run_block(k, pb->a, c + j0, cols, a + p0 * acs, ars, acs, &bs, rows, kc, nc,
                      add || p0 > 0);
        }
    }
    return true;
}

const nb_sgemm_kernel *nb_sgemm_kernel_best(void) {
#if NB_X86_KERNELS
    static const nb_sgemm_kernel avx512 = {NB_SGEMM_AVX512_MR, NB_SGEMM_AVX512_NR,
                                           nb_sgemm_ukr_avx512, NULL};
    static const nb_sgemm_kernel avx2 = {NB_SGEMM_AVX2_MR, NB_SGEMM_AVX2_NR, nb_sgemm_ukr_avx2,
                                         nb_sgemm_ukr_avx2_rows};
    if (nb_cpu()->avx512f) return &avx512;
    if (nb_cpu()->avx2_fma) return &avx2;
#endif
#if NB_WASM_KERNELS
    static const nb_sgemm_kernel wasm = {NB_SGEMM_WASM_MR, NB_SGEMM_WASM_NR, nb_sgemm_ukr_wasm,
                                         nb_sgemm_ukr_wasm_rows};
    return &wasm;
#endif
    return NULL;
}
