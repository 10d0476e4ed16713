/* nabla/random.h - the PCG32 generator (O'Neill's pcg32: 64-bit LCG state,
 * XSH-RR output). All randomness in nabla goes through an explicit state:
 * same seed, same bits, on any thread count. */
#ifndef NABLA_RANDOM_H
#define NABLA_RANDOM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_pcg32 {
    uint64_t state; /* the LCG state */
    uint64_t inc;   /* the stream: always odd */
} nb_pcg32;

/* A NULL rng is never dereferenced: seeding it does nothing, next and
 * bounded return 0, and float, double and normal return NaN (so a forgotten
 * generator shows up in the values instead of crashing). The ops and module
 * inits that take an rng record an NB_ERR_NULL error for a NULL one. */

/* Seeds with (initstate, initseq) exactly as the reference pcg32_srandom_r. */
void nb_pcg32_seed(nb_pcg32 *rng, uint64_t initstate, uint64_t initseq);
/* The next 32 uniformly distributed bits. */
uint32_t nb_pcg32_next(nb_pcg32 *rng);
/* Uniform in [0, bound), without modulo bias; 0 when bound is 0. */
uint32_t nb_pcg32_bounded(nb_pcg32 *rng, uint32_t bound);
/* Uniform float in [0, 1): (next >> 8) * 2^-24. */
float nb_pcg32_float(nb_pcg32 *rng);
/* Uniform double in [0, 1) with 53 random bits from two draws. */
double nb_pcg32_double(nb_pcg32 *rng);
/* Standard normal N(0, 1) by the Box-Muller transform (two uniform doubles
 * per draw, no cached second value, so the stream position is simple). */
double nb_pcg32_normal(nb_pcg32 *rng);

#ifdef __cplusplus
}
#endif
#endif
