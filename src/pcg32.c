/* pcg32.c - the PCG32 generator, written from M. E. O'Neill's published
 * algorithm (PCG: A Family of Simple Fast Space-Efficient Statistically Good
 * Algorithms for Random Number Generation, 2014): a 64-bit LCG whose output
 * is permuted by xorshift-high then a random rotation (XSH-RR). Checked
 * against the reference vectors in tests/check_pcg32.c. */
#include "nabla/random.h"

#include <math.h>

#define PCG_MULT 6364136223846793005ULL

uint32_t nb_pcg32_next(nb_pcg32 *rng) {
    uint64_t old = rng->state;
    rng->state = old * PCG_MULT + rng->inc;
    uint32_t xorshifted = (uint32_t)(((old >> 18) ^ old) >> 27);
    uint32_t rot = (uint32_t)(old >> 59);
    return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
}

void nb_pcg32_seed(nb_pcg32 *rng, uint64_t initstate, uint64_t initseq) {
    rng->state = 0;
    rng->inc = (initseq << 1) | 1u;
    nb_pcg32_next(rng);
    rng->state += initstate;
    nb_pcg32_next(rng);
}

uint32_t nb_pcg32_bounded(nb_pcg32 *rng, uint32_t bound) {
    if (bound == 0) return 0;
    /* Reject the lowest (2^32 mod bound) values so every residue is equally
     * likely; 2^32 mod bound is computed as (-bound) mod bound in 32 bits. */
    uint32_t threshold = (0u - bound) % bound;
    for (;;) {
        uint32_t r = nb_pcg32_next(rng);
        if (r >= threshold) return r % bound;
    }
}

float nb_pcg32_float(nb_pcg32 *rng) {
    return (float)(nb_pcg32_next(rng) >> 8) * 0x1p-24f;
}

double nb_pcg32_double(nb_pcg32 *rng) {
    uint64_t hi = nb_pcg32_next(rng) >> 5; /* 27 bits */
    uint64_t lo = nb_pcg32_next(rng) >> 6; /* 26 bits */
    return (double)((hi << 26) | lo) * 0x1p-53;
}

double nb_pcg32_normal(nb_pcg32 *rng) {
    /* Box-Muller; 1 - u keeps the log argument in (0, 1]. */
    double u1 = 1.0 - nb_pcg32_double(rng);
    double u2 = nb_pcg32_double(rng);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}
