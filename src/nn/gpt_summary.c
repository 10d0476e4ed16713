/* nn/gpt_summary.c - parameter counts and the per-module table. */
#include "gpt_family.h"
#include "gpt_internal.h"

#include <stdlib.h>
#include <string.h>

int64_t nb_gpt_num_params(const nb_gpt *m, bool count_tied) {
    if (!m || !m->wte) return 0;
    int64_t n = 0;
    for (int i = 0; i < m->params.n; i++) n += (int64_t)nb_list_tensor(&m->params, i)->numel;
    if (count_tied && m->head != m->wte) n -= (int64_t)m->head->numel;
    return n;
}

/* 163009536 -> "163,009,536" */
static const char *commas(int64_t v, char *buf) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%lld", (long long)v), o = 0;
    for (int i = 0; i < n; i++) {
        buf[o++] = tmp[i];
        if (tmp[i] != '-' && (n - i - 1) % 3 == 0 && i < n - 1) buf[o++] = ',';
    }
    buf[o] = '\0';
    return buf;
}

/* The module of a parameter name: "trf_blocks.3.ff.layers.0.weight" ->
 * "trf_blocks.3.ff.layers.0"; its block index (or -1) in *blk. */
static void module_of(const char *name, char *mod, size_t n, int *blk) {
    snprintf(mod, n, "%s", name);
    char *dot = strrchr(mod, '.');
    if (dot) *dot = '\0';
    *blk = -1;
    const char *p = !strncmp(name, "trf_blocks.", 11)       ? name + 11
                    : !strncmp(name, "transformer.h.", 14) ? name + 14
                    : !strncmp(name, "model.layers.", 13)  ? name + 13
                                                           : NULL;
    if (p) *blk = atoi(p);
}

void nb_gpt_summary(const nb_gpt *m, FILE *f) {
    if (!m || !m->wte || !f) return;
    const nb_gpt_config *c = &m->cfg;
    const gpt_layout *l = nb_gpt_layout(c);
    char a[32], s[64];
    if (l->pos == POS_ROPE) {
        fprintf(f, "%s: vocab_size %lld, block_size %lld, n_layer %d, n_head %d, n_kv_head %d, "
                "head_dim %lld, n_embd %lld, ", l->label, (long long)c->vocab_size,
                (long long)c->block_size, c->n_layer, c->n_head, nb_gpt_kv_heads(c),
                (long long)nb_gpt_head_dim(c), (long long)c->n_embd);
        if (c->n_expert)
            fprintf(f, "%d experts of %lld (top %d), ", c->n_expert,
                    (long long)c->moe_hidden_dim, c->n_expert_per_tok);
        else
            fprintf(f, "hidden_dim %lld, ", (long long)c->hidden_dim);
        fprintf(f, "norm_eps %g, rope_theta %g%s%s, window %lld, %s head, %s\n", c->norm_eps,
                c->rope_theta, c->rope_scaled ? " (Llama 3 scaling)" : "",
                c->qk_norm ? ", qk_norm" : "", (long long)c->window,
                c->tie_head ? "tied" : "untied", nb_dtype_name(c->dtype));
    } else {
        fprintf(f, "%s: vocab_size %lld, block_size %lld, n_layer %d, n_head %d, n_embd %lld, "
                "dropout %g, %s, %s\n", l->label, (long long)c->vocab_size,
                (long long)c->block_size, c->n_layer, c->n_head, (long long)c->n_embd,
                c->dropout,
                c->arch == NB_GPT_GPTMODEL ? (c->qkv_bias ? "qkv_bias" : "no qkv_bias")
                                           : (c->bias ? "bias" : "no bias"),
                nb_dtype_name(c->dtype));
    }
    fprintf(f, "%-36s %-22s %14s\n", "module (blocks: block 0, each alike)", "parameter shapes",
            "parameters");
    /* one row per module, in state_dict order; blocks other than 0 are summed */
    int64_t blocks_total = 0;
    for (int i = 0; i < m->state_dict.n;) {
        char mod[160], mod2[160];
        int blk, blk2;
        module_of(nb_list_name(&m->state_dict, i), mod, sizeof mod, &blk);
        int64_t cnt = 0;
        char shapes[64] = "";
        int j = i;
        for (; j < m->state_dict.n; j++) {
            module_of(nb_list_name(&m->state_dict, j), mod2, sizeof mod2, &blk2);
            if (strcmp(mod, mod2)) break;
            cnt += (int64_t)nb_list_tensor(&m->state_dict, j)->numel;
            size_t used = strlen(shapes);
            snprintf(shapes + used, sizeof shapes - used, "%s%s", used ? " " : "",
                     nb_shape_str(nb_list_tensor(&m->state_dict, j), s, sizeof s));
        }
        if (blk >= 0) blocks_total += cnt;
        bool tied =
            !strcmp(nb_list_name(&m->state_dict, i), l->head_name) && m->head == m->wte;
        if (blk <= 0)
            fprintf(f, "%-36s %-22s %14s%s%s%s\n", mod, shapes, commas(cnt, a),
                    tied ? " (tied to " : "", tied ? l->s.tok : "", tied ? ")" : "");
        i = j;
    }
    fprintf(f, "%-36s %-22s %14s\n", "all blocks", "", commas(blocks_total, a));
    int64_t total = nb_gpt_num_params(m, false), tied = nb_gpt_num_params(m, true);
    fprintf(f, "Total number of parameters: %s\n", commas(total, a));
    fprintf(f, "Number of trainable parameters considering weight tying: %s\n", commas(tied, a));
    fprintf(f, "Total size of the model: %.2f MB\n", (double)total * 4.0 / (1024.0 * 1024.0));
}
