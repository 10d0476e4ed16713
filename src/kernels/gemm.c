/* kernels/gemm.c - the gemm engine: one product kernel that serves
 * matmul's and linear's forward and both halves of their backward:
 *
 *   gemm:  C (rows, cols) (+)= A (rows, inner) @ B (inner, cols)
 *
 * (adding to C, or overwriting it without reading it), where A and B are
 * read through (row, column) strides, so a transposed operand is just other
 * strides and is never materialised:
 *
 *   forward   C   = A  @ B      A, B as stored
 *   backward  dA += dC @ B^T    B^T: B read with strides (1, m)
 *             dB += A^T @ dC    A^T: A read with strides (1, k)
 *
 * C is split into register tiles of MR rows by NR columns. A tile's
 * accumulators are a small local array with constant bounds, which gcc and
 * clang keep in vector registers and vectorise even at -O2; each step of the
 * tile's loop broadcasts one element of A per row against one contiguous
 * row of B's strip. The strip of B a tile column needs (inner x NR) is read
 * in place when it is contiguous and full width; otherwise (B^T, or the last
 * narrow strip) it is packed into a stack panel, zero-padded to NR. The
 * inner dimension is blocked by MM_KC so a strip stays in L1 while every row
 * tile of C streams past it.
 *
 * The kernel is built for three tile shapes: a portable one (4 rows x 32
 * bytes: two SSE2 or NEON vectors a row) and, on x86-64 with gcc or clang,
 * two for AVX2 + FMA (4 x 64 bytes, and 8 x 32 bytes for C no wider than
 * 8 floats, as attention heads often are), chosen at run time when the CPU
 * has AVX2 and FMA. Define NB_NO_AVX2 to build only the portable one. FMA
 * rounds once per multiply-add, so results agree to rounding, not bit for
 * bit, across machines. */
#include "kernels/kernels_internal.h"

#include <pthread.h>

#define MM_KC NB_GEMM_KC /* inner-dimension block: a strip of B is at most MM_KC x NR */

/* The tile's row loop must be unrolled for its accumulators to live in
 * registers (see NB_UNROLL). */
#define MM_UNROLL NB_UNROLL(8)

/* acc + x * y: plain, or fused (one rounding) where the ISA has FMA. */
#define MM_MADD_PLAIN(acc, x, y) ((acc) + (x) * (y))
#define MM_MADD_FMA_float(acc, x, y) __builtin_fmaf((x), (y), (acc))
#define MM_MADD_FMA_double(acc, x, y) __builtin_fma((x), (y), (acc))

/* MM_TILE(T, ROWS, NR, MADD): c (ROWS, nr) += a (ROWS, kc) @ b (kc, NR), or
 * c = ... when !add (c is then not read).
 *   c: rows ldc apart; only the first nr <= NR columns are written.
 *   a: element (r, p) at a[r * ars + p * acs].
 *   b: rows ldb apart, NR valid columns each (in place or packed). */
#define MM_TILE(T, ROWS, NR, MADD)                                                \
    {                                                                             \
        T acc[ROWS][NR];                                                          \
        for (int r = 0; r < (ROWS); r++)                                          \
            for (int l = 0; l < (NR); l++) acc[r][l] = 0;                         \
        for (int64_t p = 0; p < kc; p++) {                                        \
            const T *brow = b + p * ldb;                                          \
            MM_UNROLL                                                             \
            for (int r = 0; r < (ROWS); r++) {                                    \
                T av = a[r * ars + p * acs];                                      \
                for (int l = 0; l < (NR); l++) acc[r][l] = MADD(acc[r][l], av, brow[l]); \
            }                                                                     \
        }                                                                         \
        if (nr == (NR) && add) {                                                  \
            for (int r = 0; r < (ROWS); r++)                                      \
                for (int l = 0; l < (NR); l++) c[r * ldc + l] += acc[r][l];       \
        } else if (nr == (NR)) {                                                  \
            for (int r = 0; r < (ROWS); r++)                                      \
                for (int l = 0; l < (NR); l++) c[r * ldc + l] = acc[r][l];        \
        } else {                                                                  \
            for (int r = 0; r < (ROWS); r++)                                      \
                for (int l = 0; l < nr; l++)                                      \
                    c[r * ldc + l] = add ? c[r * ldc + l] + acc[r][l] : acc[r][l]; \
        }                                                                         \
    }

/* MM_DEFINE(T, ISA, MR, NR_BYTES, MADD, ATTR) defines, for element type T
 * and kernel ISA: tile_mr_<T>_<ISA> (MR rows of NR_BYTES), tile_1_<T>_<ISA>
 * (one row, for the last rows) and gemm_<T>_<ISA>:
 *
 *   c (rows, cols) += a (rows, inner) @ b (inner, cols), or = when !add
 *     c's rows ldc apart; a's element (i, p) at a[i * ars + p * acs];
 *     b's element (p, j) at b[p * brs + j * bcs]. */
#define MM_DEFINE(T, ISA, MR, NR_BYTES, MADD, ATTR)                               \
    enum { MM_NR_##T##_##ISA = (int)((NR_BYTES) / sizeof(T)) };                   \
                                                                                  \
    ATTR static void tile_mr_##T##_##ISA(T *restrict c, int64_t ldc, int nr,      \
                                         const T *restrict a, int64_t ars,        \
                                         int64_t acs, const T *restrict b,        \
                                         int64_t ldb, int64_t kc, bool add)       \
        MM_TILE(T, MR, MM_NR_##T##_##ISA, MADD)                                   \
                                                                                  \
    ATTR static void tile_1_##T##_##ISA(T *restrict c, int64_t ldc, int nr,       \
                                        const T *restrict a, int64_t ars,         \
                                        int64_t acs, const T *restrict b,         \
                                        int64_t ldb, int64_t kc, bool add)        \
        MM_TILE(T, 1, MM_NR_##T##_##ISA, MADD)                                    \
                                                                                  \
    ATTR static void gemm_##T##_##ISA(T *restrict c, int64_t ldc,                 \
                                      const T *restrict a, int64_t ars,           \
                                      int64_t acs, const T *restrict b,           \
                                      int64_t brs, int64_t bcs, int64_t rows,     \
                                      int64_t inner, int64_t cols, bool add) {    \
        enum { NR = MM_NR_##T##_##ISA };                                          \
        T panel[MM_KC * NR];                                                      \
        for (int64_t p0 = 0; p0 < inner; p0 += MM_KC) {                           \
            int64_t kc = inner - p0 < MM_KC ? inner - p0 : MM_KC;                 \
            for (int64_t j0 = 0; j0 < cols; j0 += NR) {                           \
                int nr = cols - j0 < NR ? (int)(cols - j0) : NR;                  \
                const T *bs = b + p0 * brs + j0 * bcs; /* the strip, (kc, nr) */  \
                const T *strip = bs;                                              \
                int64_t ldb = brs;                                                \
                if (bcs != 1 || nr != NR) {                                       \
                    /* column by column: B^T's columns are rows of B */           \
                    for (int l = 0; l < nr; l++)                                  \
                        for (int64_t p = 0; p < kc; p++)                          \
                            panel[p * NR + l] = bs[p * brs + l * bcs];            \
                    for (int l = nr; l < NR; l++)                                 \
                        for (int64_t p = 0; p < kc; p++) panel[p * NR + l] = 0;   \
                    strip = panel;                                                \
                    ldb = NR;                                                     \
                }                                                                 \
                const T *ap = a + p0 * acs;                                       \
                T *cp = c + j0;                                                   \
                int64_t i = 0;                                                    \
                for (; i + (MR) <= rows; i += (MR))                               \
                    tile_mr_##T##_##ISA(cp + i * ldc, ldc, nr, ap + i * ars,      \
                                        ars, acs, strip, ldb, kc, add || p0 > 0); \
                for (; i < rows; i++)                                             \
                    tile_1_##T##_##ISA(cp + i * ldc, ldc, nr, ap + i * ars,       \
                                       ars, acs, strip, ldb, kc, add || p0 > 0);  \
            }                                                                     \
        }                                                                         \
    }

/* Portable: 4 rows x 32 bytes, 8 accumulator vectors of SSE2 or NEON. */
MM_DEFINE(float, base, 4, 32, MM_MADD_PLAIN, )
MM_DEFINE(double, base, 4, 32, MM_MADD_PLAIN, )

#if NB_X86_KERNELS
/* AVX2: 4 rows x 64 bytes, or 8 rows x 32 bytes when C has at most 32 bytes
 * a row (an attention head of 8 floats) so no lane is padding; either way 8
 * accumulators, enough to keep both FMA units busy. */
#define MM_AVX2_ATTR __attribute__((target("avx2,fma")))
MM_DEFINE(float, avx2, 4, 64, MM_MADD_FMA_float, MM_AVX2_ATTR)
MM_DEFINE(double, avx2, 4, 64, MM_MADD_FMA_double, MM_AVX2_ATTR)
MM_DEFINE(float, avx2n, 8, 32, MM_MADD_FMA_float, MM_AVX2_ATTR)
MM_DEFINE(double, avx2n, 8, 32, MM_MADD_FMA_double, MM_AVX2_ATTR)

static bool mm_have_avx2(void) { return nb_cpu()->avx2_fma; }

/* AVX-512: 8 rows x 64 bytes, one vector a row, for C too wide for avx2n's
 * 32 bytes and at most 64 (the fused attention's products for heads of 16
 * floats). */
#define MM_AVX512_ATTR __attribute__((target("avx512f,fma")))
MM_DEFINE(float, avx512n, 8, 64, MM_MADD_FMA_float, MM_AVX512_ATTR)
MM_DEFINE(double, avx512n, 8, 64, MM_MADD_FMA_double, MM_AVX512_ATTR)

static bool mm_have_avx512(void) { return nb_cpu()->avx512f; }
#endif

/* nb_gemm_<T> (declared in kernels_internal.h; matmul and linear call it): the AVX2
 * build where the CPU runs it, else the portable one. Every tile shape
 * computes an element of C the same way (a MADD chain over the inner index
 * in order, from zero, per MM_KC block, then stored in or added to C), so
 * splitting C's rows or columns among threads does not change any bit. */
#if NB_X86_KERNELS
/* The unpacked AVX2 build where the CPU runs it, else the portable one. */
#define MM_GEMM_UNPACKED(T)                                                       \
    static void gemm_unpacked_##T(T *c, int64_t ldc, const T *a, int64_t ars,     \
                                  int64_t acs, const T *b, int64_t brs,           \
                                  int64_t bcs, int64_t rows, int64_t inner,       \
                                  int64_t cols, bool add) {                       \
        if (!mm_have_avx2())                                                      \
            gemm_##T##_base(c, ldc, a, ars, acs, b, brs, bcs, rows, inner, cols, add); \
        else if (cols <= MM_NR_##T##_avx2n && rows >= 8)                          \
            gemm_##T##_avx2n(c, ldc, a, ars, acs, b, brs, bcs, rows, inner, cols, add); \
        else if (cols <= MM_NR_##T##_avx512n && rows >= 8 && mm_have_avx512())   \
            gemm_##T##_avx512n(c, ldc, a, ars, acs, b, brs, bcs, rows, inner, cols, add); \
        else                                                                      \
            gemm_##T##_avx2(c, ldc, a, ars, acs, b, brs, bcs, rows, inner, cols, add); \
    }
#else
#define MM_GEMM_UNPACKED(T)                                                       \
    static void gemm_unpacked_##T(T *c, int64_t ldc, const T *a, int64_t ars,     \
                                  int64_t acs, const T *b, int64_t brs,           \
                                  int64_t bcs, int64_t rows, int64_t inner,       \
                                  int64_t cols, bool add) {                       \
        gemm_##T##_base(c, ldc, a, ars, acs, b, brs, bcs, rows, inner, cols, add); \
    }
#endif
MM_GEMM_UNPACKED(float)
MM_GEMM_UNPACKED(double)

/* nb_gemm_<T> (declared in kernels_internal.h; matmul and linear call it). float goes
 * through the packed SIMD gemm (kernels/sgemm_packed.c) when the CPU has
 * AVX-512 or AVX2 + FMA (in a wasm build, SIMD128: kernels/sgemm_wasm.c,
 * multiply and add as the portable tile) and the product is big enough to
 * repay packing; double, small products and other CPUs use the unpacked
 * kernels above.
 * Every path computes an element of C the same way (an FMA chain over the
 * inner index in order, from zero, per MM_KC block, then stored in or added
 * to C), so the choice, and splitting C's rows or columns among threads,
 * do not change any bit. */
#if NB_WASM_KERNELS
#define SGEMM_MIN_COLS NB_SGEMM_WASM_NR
#else
#define SGEMM_MIN_COLS 16
#endif

static const nb_sgemm_kernel *sgemm_best;
static pthread_once_t sgemm_once = PTHREAD_ONCE_INIT;

static void sgemm_choose(void) { sgemm_best = nb_sgemm_kernel_best(); }

/* Chosen once, by whichever thread asks first (linear's workers may). */
static const nb_sgemm_kernel *sgemm_kernel(void) {
    pthread_once(&sgemm_once, sgemm_choose);
    return sgemm_best;
}

void nb_gemm_float_ldc(float *c, int64_t ldc, const float *a, int64_t ars, int64_t acs,
                       const float *b, int64_t brs, int64_t bcs, int64_t rows, int64_t inner,
                       int64_t cols, bool add) {
    const nb_sgemm_kernel *k = sgemm_kernel();
    /* small products pay for packing b more than the kernel saves, unless b
     * is read in place and fills whole slivers (the fused attention's
     * groups of 16 rows at head sizes from 32; in wasm, whose slivers are 8
     * wide, from 8) */
    if (k && rows >= k->mr && cols >= SGEMM_MIN_COLS &&
        (rows * inner * cols >= 32768 || (cols >= k->nr && nb_sgemm_b_in_place(brs, bcs))) &&
        nb_sgemm_packed(k, c, ldc, a, ars, acs, b, brs, bcs, rows, inner, cols, add))
        return;
    gemm_unpacked_float(c, ldc, a, ars, acs, b, brs, bcs, rows, inner, cols, add);
}

void nb_gemm_float(float *c, const float *a, int64_t ars, int64_t acs, const float *b,
                   int64_t brs, int64_t bcs, int64_t rows, int64_t inner, int64_t cols,
                   bool add) {
    nb_gemm_float_ldc(c, cols, a, ars, acs, b, brs, bcs, rows, inner, cols, add);
}

/* ---- one float gemm on every thread ---------------------------------------------
 * Split over c's rows in whole slivers of the kernel's MR rows. With the
 * packed kernel, b is packed once by the calling thread and every thread
 * reads that copy: packing all of b again for each chunk of rows would, for
 * a linear layer's (768, 128) x (128, 128), cost as much as the second core
 * saves. */
typedef struct gemm_par_job {
    const nb_sgemm_kernel *k; /* NULL: each range calls nb_gemm_float */
    float *c;
    const float *bias, *a, *b, *bp; /* bp: b packed whole (k set) */
    int64_t ars, acs, brs, bcs, rows, inner, cols, unit;
    bool add;
} gemm_par_job;

#define GEMM_PAR_GRAIN 65536 /* multiply-adds worth a thread */
#define COL_SPLIT_MIN 512 /* c's columns for a split over columns */

static void gemm_par_range(void *arg, int64_t lo, int64_t hi) {
    const gemm_par_job *j = arg;
    int64_t r0 = lo * j->unit, r1 = hi * j->unit < j->rows ? hi * j->unit : j->rows;
    float *c = j->c + r0 * j->cols;
    const float *a = j->a + r0 * j->ars;
    for (int64_t r = r0; j->bias && r < r1; r++, c += j->cols)
        memcpy(c, j->bias, sizeof(float) * (size_t)j->cols);
    c = j->c + r0 * j->cols;
    bool add = j->add || j->bias;
    if (j->k && nb_sgemm_prepacked(j->k, c, a, j->ars, j->acs, j->bp, r1 - r0, j->inner,
                                   j->cols, add))
        return;
    nb_gemm_float(c, a, j->ars, j->acs, j->b, j->brs, j->bcs, r1 - r0, j->inner, j->cols, add);
}

/* Columns [lo, hi) units of c (unit columns each): the same product on a
 * band of b's and c's columns, b packed block by block by the thread that
 * uses it. */
static void gemm_col_range(void *arg, int64_t lo, int64_t hi) {
    const gemm_par_job *j = arg;
    int64_t c0 = lo * j->unit, c1 = hi * j->unit < j->cols ? hi * j->unit : j->cols;
    for (int64_t r = 0; j->bias && r < j->rows; r++)
        memcpy(j->c + r * j->cols + c0, j->bias + c0, sizeof(float) * (size_t)(c1 - c0));
    nb_gemm_float_ldc(j->c + c0, j->cols, j->a, j->ars, j->acs, j->b + c0 * j->bcs, j->brs,
                      j->bcs, j->rows, j->inner, c1 - c0, j->add || j->bias);
}

static void gemm_pack_range(void *arg, int64_t lo, int64_t hi) {
    gemm_par_job *j = arg;
    nb_sgemm_pack_whole(j->k, (float *)j->bp, j->b, j->brs, j->bcs, j->inner, j->cols, lo, hi);
}

void nb_gemm_float_par_n(const nb_gemm_desc *d, int n, const nb_task *extra, int n_extra) {
    if (n + n_extra > NB_MAX_TASKS) { /* more than a job holds: in several */
        int now = n < NB_MAX_TASKS ? n : NB_MAX_TASKS;
        nb_gemm_float_par_n(d, now, NULL, 0);
        if (n > now) nb_gemm_float_par_n(d + now, n - now, extra, n_extra);
        else nb_parallel_tasks(extra, n_extra, GEMM_PAR_GRAIN);
        return;
    }
    const nb_sgemm_kernel *k = sgemm_kernel();
    gemm_par_job j[NB_MAX_TASKS];
    nb_task pack[NB_MAX_TASKS], run[NB_MAX_TASKS];
    int n_pack = 0, n_run = 0;
    bool threads = nb_parallel_parts() > 1;
    for (int i = 0; i < n; i++) {
        const nb_gemm_desc *g = &d[i];
        j[i] = (gemm_par_job){NULL,   g->c,   g->bias, g->a,     g->b,     NULL,
                              g->ars, g->acs, g->brs,  g->bcs,   g->rows,  g->inner,
                              g->cols, 1,     g->add};
        int64_t macs = g->rows * g->inner * g->cols;
        bool packed = k && g->rows >= k->mr && g->cols >= 16 && macs >= 32768;
        /* b read in place (see nb_sgemm_packed) needs no shared copy; ranges
         * of whole slivers keep a's partial sliver to the end */
        if (packed && nb_sgemm_b_in_place(g->brs, g->bcs)) {
            j[i].unit = k->mr;
        } else if (packed && threads && g->cols >= COL_SPLIT_MIN && g->cols >= g->rows) {
            /* wide and short (a linear of a few hundred tokens): split over
             * c's columns, each thread packing only its own band of b, so
             * nothing is packed twice and no whole copy of b is kept (for
             * GPT-2's head, 154 MB) */
            int64_t parts = 2 * nb_parallel_parts(); /* two bands a thread: a's reads stay few */
            int64_t unit = (g->cols + parts - 1) / parts;
            j[i].unit = (unit + k->nr - 1) / k->nr * k->nr;
            run[n_run++] = (nb_task){gemm_col_range, &j[i], (g->cols + j[i].unit - 1) / j[i].unit,
                                     (double)(j[i].unit * g->inner * g->rows)};
            continue;
        } else if (packed && threads && macs >= 2 * GEMM_PAR_GRAIN) {
            float *bp = nb_sgemm_whole_buffer(i, nb_sgemm_whole_size(k, g->inner, g->cols));
            if (bp) {
                j[i].k = k, j[i].bp = bp, j[i].unit = k->mr;
                pack[n_pack++] = (nb_task){gemm_pack_range, &j[i],
                                           nb_sgemm_whole_slivers(k, g->cols),
                                           (double)(g->inner * k->nr)};
            }
        }
        run[n_run++] = (nb_task){gemm_par_range, &j[i], (g->rows + j[i].unit - 1) / j[i].unit,
                                 (double)(j[i].unit * g->inner * g->cols)};
    }
    if (n_pack) nb_parallel_tasks(pack, n_pack, 8192); /* ~8k floats copied a thread */
    for (int e = 0; e < n_extra; e++) run[n_run++] = extra[e];
    nb_parallel_tasks(run, n_run, GEMM_PAR_GRAIN);
}

void nb_gemm_float_par(float *c, const float *bias, const float *a, int64_t ars, int64_t acs,
                       const float *b, int64_t brs, int64_t bcs, int64_t rows, int64_t inner,
                       int64_t cols, bool add) {
    nb_gemm_desc d = {c, bias, a, ars, acs, b, brs, bcs, rows, inner, cols, add};
    nb_gemm_float_par_n(&d, 1, NULL, 0);
}

void nb_gemm_double_ldc(double *c, int64_t ldc, const double *a, int64_t ars, int64_t acs,
                        const double *b, int64_t brs, int64_t bcs, int64_t rows, int64_t inner,
                        int64_t cols, bool add) {
    gemm_unpacked_double(c, ldc, a, ars, acs, b, brs, bcs, rows, inner, cols, add);
}

void nb_gemm_double(double *c, const double *a, int64_t ars, int64_t acs, const double *b,
                    int64_t brs, int64_t bcs, int64_t rows, int64_t inner, int64_t cols,
                    bool add) {
    nb_gemm_double_ldc(c, cols, a, ars, acs, b, brs, bcs, rows, inner, cols, add);
}
