/* core/list.c - named tensor lists: the first NB_LIST_MAX entries inside the
 * struct, the rest in heap storage that doubles as it fills, so
 * `nb_tensor_list l = {0};` lists of any length work and small ones never
 * touch the heap. */
#include "core/core_internal.h"

#include <limits.h>
#include <stdlib.h>

bool nb_list_valid(const nb_tensor_list *l) {
    if (!l || l->n < 0 || l->more_cap < 0) return false;
    if (l->more_cap > 0 && (!l->more_names || !l->more_t)) return false;
    return l->n <= NB_LIST_MAX || l->n - NB_LIST_MAX <= l->more_cap;
}

const char *nb_list_name(const nb_tensor_list *l, int i) {
    if (!nb_list_valid(l) || i < 0 || i >= l->n) return NULL;
    return i < NB_LIST_MAX ? l->names[i] : l->more_names[i - NB_LIST_MAX];
}

nb_tensor *nb_list_tensor(const nb_tensor_list *l, int i) {
    if (!nb_list_valid(l) || i < 0 || i >= l->n) return NULL;
    return i < NB_LIST_MAX ? l->t[i] : l->more_t[i - NB_LIST_MAX];
}

/* Makes room for one more entry past the inline storage. */
static nb_status grow(nb_tensor_list *l) {
    int cap = l->more_cap ? l->more_cap : NB_LIST_MAX;
    if (cap > (INT_MAX - NB_LIST_MAX) / 2) return NB_ERR_SIZE;
    cap *= 2;
    const char **names = realloc(l->more_names, (size_t)cap * sizeof *names);
    if (!names) return NB_ERR_MEMORY;
    l->more_names = names;
    nb_tensor **t = realloc(l->more_t, (size_t)cap * sizeof *t);
    if (!t) return NB_ERR_MEMORY; /* more_names is larger than needed: harmless */
    l->more_t = t;
    l->more_cap = cap;
    return NB_OK;
}

nb_status nb_list_append(nb_tensor_list *l, const char *name, nb_tensor *t) {
    if (!nb_list_valid(l)) return NB_ERR_VALUE;
    if (l->n == INT_MAX) return NB_ERR_SIZE;
    if (l->n < NB_LIST_MAX) {
        l->names[l->n] = name;
        l->t[l->n] = t;
    } else {
        int k = l->n - NB_LIST_MAX;
        if (k == l->more_cap) {
            nb_status s = grow(l);
            if (s) return s;
        }
        l->more_names[k] = name;
        l->more_t[k] = t;
    }
    l->n++;
    return NB_OK;
}

nb_status nb_list_insert(nb_tensor_list *l, const char *name, nb_tensor *t) {
    if (!l || !name || !t) return NB_ERR_NULL;
    if (!nb_list_valid(l) || nb_list_get(l, name)) return NB_ERR_VALUE;
    return nb_list_append(l, name, t);
}

/* The list has no context; the tensor's own context takes the message. */
nb_status nb_list_add(nb_tensor_list *l, const char *name, nb_tensor *t) {
    nb_status s = nb_list_insert(l, name, t);
    if (!s || !t) return s;
    nb_ctx *ctx = t->owner;
    if (s == NB_ERR_NULL)
        return nb_ctx_fail(ctx, s, "list_add: %s is NULL", !l ? "the list" : "the name");
    if (s == NB_ERR_VALUE && nb_list_valid(l))
        return nb_ctx_fail(ctx, s, "list_add: '%s' is already in the list", name);
    if (s == NB_ERR_VALUE)
        return nb_ctx_fail(ctx, s, "list_add: the list is corrupt (n = %d)", l->n);
    if (s == NB_ERR_SIZE)
        return nb_ctx_fail(ctx, s, "list_add: the list is full (%d entries)", l->n);
    return nb_ctx_fail(ctx, s, "list_add: out of memory for entry %d ('%s')", l->n, name);
}

nb_tensor *nb_list_get(const nb_tensor_list *l, const char *name) {
    if (!nb_list_valid(l) || !name) return NULL;
    for (int i = 0; i < l->n; i++) {
        const char *ni = nb_list_name(l, i);
        if (ni && strcmp(ni, name) == 0) return nb_list_tensor(l, i);
    }
    return NULL;
}

void nb_list_free(nb_tensor_list *l) {
    if (!l) return;
    free(l->more_names);
    free(l->more_t);
    l->more_names = NULL;
    l->more_t = NULL;
    l->more_cap = 0;
    l->n = 0;
}
