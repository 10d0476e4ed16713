/* fuzz_meta_pkl.c - libFuzzer target for nabla-gpt's meta.pkl reader
 * (tools/support/gpt_pickle.c, compiled in): any bytes are either nanoGPT's
 * {'vocab_size', 'itos', 'stoi'} (then itos holds vocab_size strictly
 * increasing code points, and writing them back and reading that gives the
 * same vocabulary) or refused with a message; never executed, never a crash.
 * Dictionary: tests/fuzz/meta_pkl.dict. */
#include <stdlib.h>
#include <string.h>

#include "../../tools/support/gpt_pickle.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gpt_meta_pkl m;
    char err[300];
    if (gpt_meta_pkl_read(data, size, &m, err, sizeof err)) {
        if (!err[0] || m.itos) abort();
        return 0;
    }
    if (m.vocab_size < 1 || m.vocab_size > 65536) abort();
    for (int i = 1; i < m.vocab_size; i++)
        if (m.itos[i] <= m.itos[i - 1] || m.itos[i] > 0x10ffff) abort();
    size_t len = 0;
    unsigned char *again = gpt_meta_pkl_write(m.itos, m.vocab_size, &len);
    gpt_meta_pkl back;
    if (!again || gpt_meta_pkl_read(again, len, &back, err, sizeof err)) abort();
    if (back.vocab_size != m.vocab_size ||
        memcmp(back.itos, m.itos, (size_t)m.vocab_size * sizeof *m.itos))
        abort();
    free(again);
    gpt_meta_pkl_free(&back);
    gpt_meta_pkl_free(&m);
    return 0;
}
