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
 * padded at the edge. a is read in place through its strides (both
 * layouts give the kernel cache-friendly broadcasts), except a last sliver
 * of fewer than MR rows, which is packed with zero rows; a partial tile of
 * c goes through a small buffer.
 * The packing buffers belong to the calling thread (allocated at its first
 * call, freed when it exits), so no call allocates after the first. */
#include "kernels.h"

#include <pthread.h>
#include <stdlib.h>

#define GEMM_NC 512

typedef struct pack_buffers {
    float *b; /* (NB_GEMM_KC, GEMM_NC) at most, as slivers */
    float *a; /* (MR, NB_GEMM_KC) */
} pack_buffers;

static pthread_key_t pack_key;
static pthread_once_t pack_once = PTHREAD_ONCE_INIT;

static void pack_free(void *p) {
    pack_buffers *pb = p;
    free(pb->b);
    free(pb->a);
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
    /* room for the widest sliver (32) and the tallest (16) of any kernel */
    pb->b = aligned_alloc(64, sizeof(float) * NB_GEMM_KC * (GEMM_NC + 32));
    pb->a = aligned_alloc(64, sizeof(float) * NB_GEMM_KC * 16);
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
            for (int64_t p = 0; p < kc; p++) memcpy(dst + p * nr, bj + p * brs, sizeof(float) * (size_t)nr);
            continue;
        }
        if (brs == 1) { /* b^T: each column of b is a contiguous row in memory */
            for (int l = 0; l < w; l++)
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

bool nb_sgemm_packed(const nb_sgemm_kernel *k, float *c, const float *a, int64_t ars,
                     int64_t acs, const float *b, int64_t brs, int64_t bcs, int64_t rows,
                     int64_t inner, int64_t cols, bool add) {
    pack_buffers *pb = pack_get();
    if (!pb) return false;
    const int mr = k->mr, nr = k->nr;
    float edge[16 * 32]; /* a partial tile of c, (mr, nr) */
    for (int64_t j0 = 0; j0 < cols; j0 += GEMM_NC) {
        int64_t nc = cols - j0 < GEMM_NC ? cols - j0 : GEMM_NC;
        for (int64_t p0 = 0; p0 < inner; p0 += NB_GEMM_KC) {
            int64_t kc = inner - p0 < NB_GEMM_KC ? inner - p0 : NB_GEMM_KC;
            bool acc = add || p0 > 0;
            pack_b(pb->b, b + p0 * brs + j0 * bcs, brs, bcs, kc, nc, nr);
            for (int64_t i = 0; i < rows; i += mr) {
                int h = rows - i < mr ? (int)(rows - i) : mr;
                const float *as = a + i * ars + p0 * acs;
                int64_t sr = ars, sc = acs;
                if (h < mr) {
                    pack_a(pb->a, as, ars, acs, kc, h, mr);
                    as = pb->a, sr = 1, sc = mr;
                }
                for (int64_t j = 0; j < nc; j += nr) {
                    int w = nc - j < nr ? (int)(nc - j) : nr;
                    float *ct = c + i * cols + j0 + j;
                    const float *bs = pb->b + j / nr * (kc * nr);
                    if (h == mr && w == nr) {
                        k->ukr(kc, as, sr, sc, bs, ct, cols, acc);
                        continue;
                    }
                    for (int r = 0; acc && r < h; r++)
                        memcpy(edge + r * nr, ct + r * cols, sizeof(float) * (size_t)w);
                    k->ukr(kc, as, sr, sc, bs, edge, nr, acc);
                    for (int r = 0; r < h; r++)
                        memcpy(ct + r * cols, edge + r * nr, sizeof(float) * (size_t)w);
                }
            }
        }
    }
    return true;
}

const nb_sgemm_kernel *nb_sgemm_kernel_best(void) {
#if NB_X86_KERNELS
    static const nb_sgemm_kernel avx512 = {NB_SGEMM_AVX512_MR, NB_SGEMM_AVX512_NR,
                                           nb_sgemm_ukr_avx512};
    static const nb_sgemm_kernel avx2 = {NB_SGEMM_AVX2_MR, NB_SGEMM_AVX2_NR, nb_sgemm_ukr_avx2};
    if (__builtin_cpu_supports("avx512f")) return &avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &avx2;
#endif
    return NULL;
}
