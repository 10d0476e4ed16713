/* core/pcg32.c - the PCG32 generator, written from M. E. O'Neill's published
 * algorithm (PCG: A Family of Simple Fast Space-Efficient Statistically Good
 * Algorithms for Random Number Generation, 2014): a 64-bit LCG whose output
 * is permuted by xorshift-high then a random rotation (XSH-RR). Checked
 * against the reference vectors in tests/check_pcg32.c. */
#include "core/core_internal.h"

#define PCG_MULT 6364136223846793005ULL

/* The output of a state: xorshift-high, then a rotation by its top 5 bits. */
static inline uint32_t pcg_output(uint64_t old) {
    uint32_t xorshifted = (uint32_t)(((old >> 18) ^ old) >> 27);
    uint32_t rot = (uint32_t)(old >> 59);
    return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
}

uint32_t nb_pcg32_next(nb_pcg32 *rng) {
    if (!rng) return 0;
    uint64_t old = rng->state;
    rng->state = old * PCG_MULT + rng->inc;
    return pcg_output(old);
}

/* The state k steps on is s_k = A_k s + C_k with A_k = MULT^k and
 * C_k = inc (MULT^(k-1) + ... + 1), all mod 2^64. Four draws are computed
 * from one state with A_1..A_3, and the state jumps by A_4: the multiplies
 * do not wait on each other, and the bits are those of nb_pcg32_next. */
void nb_pcg32_fill(nb_pcg32 *rng, uint32_t *out, size_t n) {
    if (!rng || !out) return;
    uint64_t a1 = PCG_MULT, c1 = rng->inc;
    uint64_t a2 = a1 * PCG_MULT, c2 = c1 * PCG_MULT + rng->inc;
    uint64_t a3 = a2 * PCG_MULT, c3 = c2 * PCG_MULT + rng->inc;
    uint64_t a4 = a3 * PCG_MULT, c4 = c3 * PCG_MULT + rng->inc;
    uint64_t st = rng->state;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        out[i] = pcg_output(st);
        out[i + 1] = pcg_output(a1 * st + c1);
        out[i + 2] = pcg_output(a2 * st + c2);
        out[i + 3] = pcg_output(a3 * st + c3);
        st = a4 * st + c4;
    }
    rng->state = st;
    for (; i < n; i++) out[i] = nb_pcg32_next(rng);
}

/* Jumps delta steps in O(log delta): the LCG's k-step map is again affine,
 * s -> A s + C, and composing maps squares them (Brown, "Random number
 * generation with arbitrary strides", 1994). */
void nb_pcg32_advance(nb_pcg32 *rng, uint64_t delta) {
    uint64_t mult = PCG_MULT, plus = rng->inc; /* the map of 2^bit steps */
    uint64_t acc_mult = 1, acc_plus = 0;        /* the map of the steps taken */
    for (; delta; delta >>= 1) {
        if (delta & 1) {
            acc_mult *= mult;
            acc_plus = acc_plus * mult + plus;
        }
        plus = (mult + 1) * plus;
        mult *= mult;
    }
    rng->state = acc_mult * rng->state + acc_plus;
}

void nb_pcg32_seed(nb_pcg32 *rng, uint64_t initstate, uint64_t initseq) {
    if (!rng) return;
    rng->state = 0;
    rng->inc = (initseq << 1) | 1u;
    nb_pcg32_next(rng);
    rng->state += initstate;
    nb_pcg32_next(rng);
}

uint32_t nb_pcg32_bounded(nb_pcg32 *rng, uint32_t bound) {
    if (!rng || bound == 0) return 0;
    /* Reject the lowest (2^32 mod bound) values so every residue is equally
     * likely; 2^32 mod bound is computed as (-bound) mod bound in 32 bits. */
    uint32_t threshold = (0u - bound) % bound;
    for (;;) {
        uint32_t r = nb_pcg32_next(rng);
        if (r >= threshold) return r % bound;
    }
}

float nb_pcg32_float(nb_pcg32 *rng) {
    if (!rng) return NAN;
    return (float)(nb_pcg32_next(rng) >> 8) * 0x1p-24f;
}

double nb_pcg32_double(nb_pcg32 *rng) {
    if (!rng) return NAN;
    uint64_t hi = nb_pcg32_next(rng) >> 5; /* 27 bits */
    uint64_t lo = nb_pcg32_next(rng) >> 6; /* 26 bits */
    return (double)((hi << 26) | lo) * 0x1p-53;
}

double nb_pcg32_normal(nb_pcg32 *rng) {
    if (!rng) return NAN;
    /* Box-Muller; 1 - u keeps the log argument in (0, 1]. */
    double u1 = 1.0 - nb_pcg32_double(rng);
    double u2 = nb_pcg32_double(rng);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}
