/* gpt_pickle.h - nanoGPT's meta.pkl (data/shakespeare_char/prepare.py:
 * pickle.dump({'vocab_size': V, 'itos': {i: ch}, 'stoi': {ch: i}}, f)) read
 * and written without Python. The reader is a strict interpreter of the few
 * pickle opcodes such a file holds (protocols 2 to 5: PROTO, FRAME, MARK,
 * EMPTY_DICT, SETITEM(S), the int and str opcodes, the memo's PUT, GET and
 * MEMOIZE, STOP); any other opcode (GLOBAL, REDUCE, ... which is how a
 * pickle runs code) is refused, never executed. Standalone (no nabla calls),
 * so tests/fuzz/fuzz_meta_pkl.c compiles it in. Internal to the tools. */
#ifndef NB_GPT_PICKLE_H
#define NB_GPT_PICKLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct gpt_meta_pkl {
    int vocab_size;   /* 1 .. 65536 (the .bin files are uint16) */
    uint32_t *itos;   /* vocab_size code points, strictly increasing (malloc'ed) */
} gpt_meta_pkl;

/* Reads buf[0..len-1]. 0, or -1 with a message in err[0..n-1] (naming the
 * byte offset for a bad opcode). On success free with gpt_meta_pkl_free. */
int gpt_meta_pkl_read(const unsigned char *buf, size_t len, gpt_meta_pkl *out, char *err,
                      size_t n);
void gpt_meta_pkl_free(gpt_meta_pkl *m);

/* The bytes Python 3.8-3.13's pickle.dump (protocol 4) writes for
 * prepare.py's meta of the code points chars[0..n-1] (sorted). malloc'ed;
 * NULL when out of memory. */
unsigned char *gpt_meta_pkl_write(const uint32_t *chars, int n, size_t *len);

#endif
