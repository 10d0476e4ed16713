/* seed_gpt.c - the seeds' next chapter: the course's GPTModel with its 124M
 * configuration (GPT_CONFIG_124M: vocab 50257, context 1024, emb 768, 12
 * heads, 12 layers, drop 0.1, no qkv bias), its parameter count and size,
 * then a few tokens from the untrained model (greedy, as the course's
 * generate_text_simple, with the KV cache).
 *
 *   build/examples/seed_gpt [--tokens=N]     (N new tokens, default 6, at most 100)
 *
 * The weights are drawn from PCG32 with PyTorch's default init rules, so the
 * counts match the course's printout and the text is gibberish, as there. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nabla.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(FILE *f) {
    fprintf(f, "usage: seed_gpt [--tokens=N]\n"
               "Builds the course's GPTModel 124M, prints its summary (163,009,536\n"
               "parameters, 621.83 MB in float32) and greedily generates N tokens\n"
               "(default 6, 1..100) from the untrained model with the KV cache.\n");
}

int main(int argc, char **argv) {
    int64_t tokens = 6;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        char *end;
        if (!strncmp(argv[i], "--tokens=", 9) &&
            (tokens = strtoll(argv[i] + 9, &end, 10), *end == '\0' && tokens >= 1 && tokens <= 100))
            continue;
        fprintf(stderr, "seed_gpt: unknown or bad argument '%s'\n", argv[i]);
        usage(stderr);
        return 2;
    }
    nb_gpt_config cfg = nb_gpt_config_default(NB_GPT_GPTMODEL); /* GPT_CONFIG_124M */
    cfg.no_grad = true; /* sampling only: no gradient buffers */
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 123, 1);
    nb_ctx *params = nb_ctx_new(0);
    nb_gpt model;
    double t0 = now();
    if (nb_gpt_init(params, &model, &cfg, &rng)) {
        fprintf(stderr, "error: %s\n", nb_ctx_error(params));
        nb_ctx_free(params);
        return 1;
    }
    printf("GPTModel(GPT_CONFIG_124M) built in %.1f s\n\n", now() - t0);
    nb_gpt_summary(&model, stdout);
    printf("Output head: %lld parameters (out_head.weight, the shape of tok_emb.weight)\n",
           (long long)model.head->numel);

    /* "Hello, I am" in GPT-2's tokenizer, as the course encodes it */
    const int64_t prompt[4] = {15496, 11, 314, 716};
    int64_t out[4 + 100], n_out = 0;
    nb_gpt_sample_opts o = nb_gpt_sample_defaults();
    o.max_new_tokens = tokens;
    o.temperature = 0; /* greedy: torch.argmax(logits, dim=-1) */
    t0 = now();
    nb_status st = nb_gpt_generate(params, &model, prompt, 4, &o, out, &n_out);
    double dt = now() - t0;
    if (st) {
        fprintf(stderr, "error: %s\n", nb_ctx_error(params));
        nb_ctx_free(params);
        return 1;
    }
    printf("\nencoded: [15496, 11, 314, 716]\nOutput: [");
    for (int64_t i = 0; i < n_out; i++) printf("%s%lld", i ? ", " : "", (long long)out[i]);
    printf("]\nOutput length: %lld\n", (long long)n_out);
    printf("%lld new tokens in %.2f s with the KV cache (%.1f tokens/s)\n", (long long)tokens, dt,
           (double)tokens / dt);
    nb_ctx_free(params);
    return 0;
}
