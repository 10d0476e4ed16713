/* fuzz_text.c - libFuzzer target for nabla-gpt's text path (nabla/data.h):
 * the input, as text, goes through UTF-8 checking, the character
 * vocabulary, encoding, decoding and batching; as a string, through the
 * vocabulary parser. Properties checked: decode(encode(text)) == text, a
 * vocabulary survives to_string/from_string, and every refusal is an error
 * on the context, never a crash. Seeds: tests/fuzz/seeds/text/, dictionary:
 * tests/fuzz/text.dict. The checks live in fuzz_text.h, which
 * tests/check_fuzz_regressions.c replays the corpus through.
 * fuzz-needs: include/nabla/data.h
 * (`make fuzz` skips a target whose fuzz-needs file is missing.) */
#include <stdlib.h>

#include "fuzz_input.h"
#include "fuzz_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static nb_ctx *ctx;
    if (!ctx)
        ctx = nb_ctx_new(0);
    if (!nb_fuzz_text(ctx, data, size))
        abort();
    return 0;
}
