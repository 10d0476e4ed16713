/* core/tensor.c - creating tensors, element access, views and gradients of
 * leaves. Printing lives in print.c. */
#include "core/core_internal.h"

#include "nabla/random.h"

static const size_t dtype_sizes[] = {4, 8, 8, 1};
static const char *const dtype_names[] = {"f32", "f64", "i64", "bool"};
_Static_assert(sizeof(dtype_sizes) / sizeof(dtype_sizes[0]) == NB_DTYPE_COUNT, "dtype sizes");
_Static_assert(sizeof(dtype_names) / sizeof(dtype_names[0]) == NB_DTYPE_COUNT, "dtype names");

size_t nb_dtype_size(nb_dtype dt) {
    return (dt >= 0 && dt < NB_DTYPE_COUNT) ? dtype_sizes[dt] : 0;
}

const char *nb_dtype_name(nb_dtype dt) {
    return (dt >= 0 && dt < NB_DTYPE_COUNT) ? dtype_names[dt] : "?";
}

char *nb_shape_str(const nb_tensor *t, char *buf, size_t n) {
    if (!buf || n == 0) return buf;
    if (!t) {
        snprintf(buf, n, "(NULL)");
        return buf;
    }
    return nb_dims_str(t->ndim, t->shape, "()", buf, n);
}

char *nb_dims_str(int nd, const int64_t *v, const char *brackets, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "%c", brackets[0]);
    for (int d = 0; d < nd && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)v[d]);
    if (k < n) snprintf(buf + k, n - k, "%c", brackets[1]);
    return buf;
}

/* Validates a requested shape into *numel (0 for a tensor with a zero-size
 * dim, as PyTorch allows); false with an error naming `op`. */
static bool checked_numel(nb_ctx *ctx, const char *op, nb_dtype dt, int ndim,
                          const int64_t *shape, size_t *numel_out) {
    if (dt < 0 || dt >= NB_DTYPE_COUNT) {
        nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: unknown dtype %d", op, (int)dt);
        return false;
    }
    if (ndim < 0 || ndim > NB_MAX_DIMS) {
        nb_ctx_fail(ctx, NB_ERR_SIZE, "%s: %d dims requested, expected 0..%d", op, ndim,
                    NB_MAX_DIMS);
        return false;
    }
    if (ndim > 0 && !shape) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: shape is NULL for %d dims", op, ndim);
        return false;
    }
    size_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) {
            nb_ctx_fail(ctx, NB_ERR_SIZE, "%s: dim %d has size %lld, expected >= 0", op, d,
                        (long long)shape[d]);
            return false;
        }
        if (numel && ((uint64_t)shape[d] > SIZE_MAX / numel ||
                      numel * (size_t)shape[d] > SIZE_MAX / nb_dtype_size(dt))) {
            nb_ctx_fail(ctx, NB_ERR_SIZE,
                        "%s: element count overflows size_t at dim %d (size %lld)", op, d,
                        (long long)shape[d]);
            return false;
        }
        numel *= (size_t)shape[d];
    }
    *numel_out = numel;
    return true;
}

/* What tensor_alloc gives the data: nothing (a view sets it), zeroed
 * memory, or memory the caller overwrites completely. */
typedef enum { DATA_NONE, DATA_ZEROED, DATA_RAW } data_mode;

static nb_tensor *tensor_alloc(nb_ctx *ctx, const char *op, nb_dtype dt, int ndim,
                               const int64_t *shape, data_mode data) {
    if (!nb_ctx_ok(ctx)) return NULL;
    size_t numel;
    if (!checked_numel(ctx, op, dt, ndim, shape, &numel)) return NULL;
    nb_tensor *t = nb_ctx_alloc(ctx, sizeof *t);
    if (!t) return NULL;
    t->dtype = dt;
    t->ndim = ndim;
    for (int d = 0; d < NB_MAX_DIMS; d++) t->shape[d] = d < ndim ? shape[d] : 1;
    t->numel = numel;
    t->owner = ctx;
    t->stamp = nb_ctx_stamp(ctx);
    if (data != DATA_NONE) {
        size_t bytes = numel * nb_dtype_size(dt);
        t->data = data == DATA_RAW ? nb_ctx_alloc_raw(ctx, bytes) : nb_ctx_alloc(ctx, bytes);
        if (!t->data) return NULL;
    }
    return t;
}

/* Uninitialised, like torch.empty. A debug build fills it with 0xFF bytes
 * (NaN for floats, -1 for i64) so that reading an element never written
 * shows up instead of reading a lucky zero. */
nb_tensor *nb_empty(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape) {
    nb_tensor *t = tensor_alloc(ctx, "empty", dt, ndim, shape, DATA_RAW);
#ifdef NB_DEBUG
    if (t) memset(t->data, 0xFF, t->numel * nb_dtype_size(dt));
#endif
    return t;
}

nb_tensor *nb_zeros(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape) {
    return tensor_alloc(ctx, "zeros", dt, ndim, shape, DATA_ZEROED);
}

/* Is v a number an i64 element can hold after truncation toward zero?
 * Casting NaN, an infinity or anything outside [-2^63, 2^63) is undefined
 * behaviour in C, so every double -> i64 conversion asks this first. */
bool nb_fits_i64(double v) { return v >= -0x1p63 && v < 0x1p63; }

/* Records an error on ctx (naming op) when values[0..n-1] cannot all be
 * stored in dtype dt. */
static bool check_values_fit(nb_ctx *ctx, const char *op, nb_dtype dt, const double *values,
                             size_t n) {
    if (dt != NB_I64) return true;
    for (size_t i = 0; i < n; i++)
        if (!nb_fits_i64(values[i])) {
            nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: value %g (element %zu) cannot be stored in an "
                        "i64 tensor (NaN, inf or outside [-2^63, 2^63))", op, values[i], i);
            return false;
        }
    return true;
}

/* nb_full, with errors naming `op` (full, ones or scalar). */
static nb_tensor *full_as(nb_ctx *ctx, const char *op, nb_dtype dt, int ndim,
                          const int64_t *shape, double value) {
    if (nb_ctx_ok(ctx) && !check_values_fit(ctx, op, dt, &value, 1)) return NULL;
    nb_tensor *t = tensor_alloc(ctx, op, dt, ndim, shape, DATA_RAW);
    if (t)
        for (size_t i = 0; i < t->numel; i++) nb_set(t, i, value);
    return t;
}

nb_tensor *nb_full(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape, double value) {
    return full_as(ctx, "full", dt, ndim, shape, value);
}

nb_tensor *nb_ones(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape) {
    return full_as(ctx, "ones", dt, ndim, shape, 1.0);
}

nb_tensor *nb_scalar(nb_ctx *ctx, nb_dtype dt, double value) {
    return full_as(ctx, "scalar", dt, 0, NULL, value);
}

nb_tensor *nb_from_data(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape,
                        const void *data) {
    if (nb_ctx_ok(ctx) && !data) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "from_data: data is NULL");
        return NULL;
    }
    nb_tensor *t = tensor_alloc(ctx, "from_data", dt, ndim, shape, DATA_RAW);
    if (t) memcpy(t->data, data, t->numel * nb_dtype_size(dt));
    return t;
}

nb_tensor *nb_from_doubles(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape,
                           const double *values) {
    if (nb_ctx_ok(ctx) && !values) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "from_doubles: values is NULL");
        return NULL;
    }
    nb_tensor *t = tensor_alloc(ctx, "from_doubles", dt, ndim, shape, DATA_RAW);
    if (!t || !check_values_fit(ctx, "from_doubles", dt, values, t->numel)) return NULL;
    for (size_t i = 0; i < t->numel; i++) nb_set(t, i, values[i]);
    return t;
}

static nb_tensor *random_tensor(nb_ctx *ctx, const char *op, nb_dtype dt, int ndim,
                                const int64_t *shape, double a, double b, nb_pcg32 *rng,
                                bool normal) {
    if (nb_ctx_ok(ctx) && !rng) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: rng is NULL", op);
        return NULL;
    }
    /* PyTorch: uniform_ requires from <= to, normal_ requires std >= 0 */
    if (nb_ctx_ok(ctx) && (normal ? !(b >= 0) : !(a <= b) || !isfinite(b - a))) {
        nb_ctx_fail(ctx, NB_ERR_VALUE,
                    normal ? "%s: std is %g (mean %g), expected std >= 0"
                           : "%s: lo %g, hi %g; expected lo <= hi and a finite hi - lo",
                    op, normal ? b : a, normal ? a : b);
        return NULL;
    }
    if (nb_ctx_ok(ctx) && dt != NB_F32 && dt != NB_F64) {
        nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: dtype %s, expected f32 or f64", op,
                    nb_dtype_name(dt));
        return NULL;
    }
    nb_tensor *t = tensor_alloc(ctx, op, dt, ndim, shape, DATA_RAW);
    if (!t) return NULL;
    for (size_t i = 0; i < t->numel; i++) {
        double v;
        if (normal)
            v = a + b * nb_pcg32_normal(rng);
        else if (dt == NB_F32)
            v = a + (b - a) * (double)nb_pcg32_float(rng);
        else
            v = a + (b - a) * nb_pcg32_double(rng);
        nb_set(t, i, v);
    }
    return t;
}

nb_tensor *nb_uniform(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape, double lo,
                      double hi, nb_pcg32 *rng) {
    return random_tensor(ctx, "uniform", dt, ndim, shape, lo, hi, rng, false);
}

nb_tensor *nb_normal(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape, double mean,
                     double std, nb_pcg32 *rng) {
    return random_tensor(ctx, "normal", dt, ndim, shape, mean, std, rng, true);
}

nb_tensor *nb_copy(nb_ctx *ctx, const nb_tensor *t, nb_dtype dt) {
    if (!nb_ctx_ok(ctx)) return NULL;
    if (!t) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "copy: input is NULL");
        return NULL;
    }
    if (!nb_check_live(ctx, "copy", 1, &t)) return NULL;
    nb_tensor *c = tensor_alloc(ctx, "copy", dt, t->ndim, t->shape, DATA_RAW);
    if (!c) return NULL;
    if (dt == t->dtype) {
        memcpy(c->data, t->data, t->numel * nb_dtype_size(dt));
    } else {
        for (size_t i = 0; i < t->numel; i++) {
            double v = nb_get(t, i);
            if (!check_values_fit(ctx, "copy", dt, &v, 1)) return NULL;
            nb_set(c, i, v);
        }
    }
    c->name = t->name;
    return c;
}

nb_tensor *nb_tensor_over(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape, void *data) {
    nb_tensor *t = tensor_alloc(ctx, "load", dt, ndim, shape, DATA_NONE);
    if (t) t->data = data;
    return t;
}

nb_tensor *nb_view_of(nb_ctx *ctx, nb_tensor *src, int ndim, const int64_t *shape) {
    nb_tensor *t = tensor_alloc(ctx, "view", src->dtype, ndim, shape, DATA_NONE);
    if (t) t->data = src->data;
    return t;
}

void nb_zero_grad(nb_tensor *t) {
    if (t && t->grad) memset(t->grad, 0, t->numel * nb_dtype_size(t->dtype));
    if (t) t->grad_stale = false;
}

static double load(nb_dtype dt, const void *p, size_t i) {
    switch (dt) {
    case NB_F32: return ((const float *)p)[i];
    case NB_F64: return ((const double *)p)[i];
    case NB_I64: return (double)((const int64_t *)p)[i];
    case NB_BOOL: return ((const uint8_t *)p)[i] ? 1.0 : 0.0;
    default: return NAN;
    }
}

double nb_get(const nb_tensor *t, size_t i) {
    if (!t || !nb_check_live(NULL, "get", 1, &t) || !t->data || i >= t->numel) return NAN;
    return load(t->dtype, t->data, i);
}

double nb_grad_get(const nb_tensor *t, size_t i) {
    if (!t || !t->grad || i >= t->numel) return 0.0;
    return load(t->dtype, t->grad, i);
}

void nb_set(nb_tensor *t, size_t i, double v) {
    const nb_tensor *ct = t;
    if (!t || !nb_check_live(NULL, "set", 1, &ct) || !t->data || i >= t->numel) return;
    switch (t->dtype) {
    case NB_F32: ((float *)t->data)[i] = (float)v; break;
    case NB_F64: ((double *)t->data)[i] = v; break;
    case NB_I64:
        if (nb_fits_i64(v))
            ((int64_t *)t->data)[i] = (int64_t)v;
        else
            nb_ctx_fail(t->owner, NB_ERR_VALUE, "set: value %g (element %zu) cannot be stored "
                        "in an i64 tensor (NaN, inf or outside [-2^63, 2^63))", v, i);
        break;
    case NB_BOOL: ((uint8_t *)t->data)[i] = v != 0.0; break;
    default: break;
    }
}

double nb_item(const nb_tensor *t) {
    return (t && t->numel == 1) ? nb_get(t, 0) : NAN;
}

bool nb_same_shape(const nb_tensor *a, const nb_tensor *b) {
    if (!a || !b || a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}
