/* tools/wasm/nabla_api.js - nabla's JavaScript API, in PyTorch's style,
 * over libnabla compiled to WebAssembly (docs/wasm.md). Emscripten appends
 * this file inside the module's factory (--post-js), so `Module` and the
 * exported C functions (Module._nb_add, ...) are in scope; the API's
 * functions become the module's own properties:
 *
 *   const nb = await require('build/wasm/nabla.js')();
 *   const x = nb.tensor([[1, 2]], {requiresGrad: true});
 *   const loss = x.matmul(w).add(b).tanh().sum();
 *   loss.backward();  x.grad  // [..] as an array
 *
 * Tensors live in a context (the library's arena). Every op's result goes
 * into the current one: the innermost nb.scope, else the base context.
 * nb.scope(fn) runs fn with a context of its own and resets it when fn
 * returns, so a loop of scopes does not grow the heap; a tensor of an
 * ended scope (or of the base context after nb.reset()) throws when used.
 * Errors are the library's messages, thrown as NablaError. */

/* Element types, in nb_dtype's order (nabla/core.h). */
var NB_DTYPES = ['float32', 'float64', 'int64', 'bool'];
var NB_ERR_STATE = 7; /* nb_status's NB_ERR_STATE */

/* An error the library recorded on a context (message, status), or one of
 * this API's own (status 0). */
function NablaError(message, status) {
  var e = new Error(message);
  e.name = 'NablaError';
  e.status = status || 0;
  Object.setPrototypeOf(e, NablaError.prototype);
  return e;
}
NablaError.prototype = Object.create(Error.prototype);
NablaError.prototype.constructor = NablaError;
NablaError.prototype.name = 'NablaError';

/* ---- contexts ------------------------------------------------------------ */

/* A context in use: its pointer and whether its tensors are still valid.
 * The base context is made at the first use; ended scopes give their
 * contexts back to `ctxPool`, reset, so a scope after the first mallocs
 * nothing. */
var ctxStack = [];
var ctxPool = [];
var baseCtx = null;

function newCtx() {
  var p = ctxPool.length ? ctxPool.pop() : Module._nb_ctx_new(0);
  if (!p) throw NablaError('out of memory: no context', 6);
  return {ptr: p, alive: true, owned: []};
}

/* What a context record owns beside its arena (modules, optimizers,
 * generators made while it was current): released, newest first, when
 * the context ends. */
function own(rec, release) { rec.owned.push(release); }
function releaseOwned(rec) {
  while (rec.owned.length) rec.owned.pop()();
}

function current() {
  if (ctxStack.length) return ctxStack[ctxStack.length - 1];
  if (!baseCtx) baseCtx = newCtx();
  return baseCtx;
}

/* Throws the error recorded on context pointer `ctx`, clearing it so the
 * context stays usable (the library's errors are sticky). */
function throwCtxError(ctx, what) {
  var m = Module._nb_ctx_error(ctx);
  var msg = m ? UTF8ToString(m) : (what || 'nabla') + ' failed';
  var status = Module._nb_ctx_status(ctx);
  Module._nb_ctx_clear_error(ctx);
  throw NablaError(msg, status);
}

/* fn() with a context of its own, reset when fn returns (or throws). */
function scope(fn) {
  if (typeof fn !== 'function') throw NablaError('scope: expects a function');
  var rec = newCtx();
  ctxStack.push(rec);
  try {
    return fn();
  } finally {
    ctxStack.pop();
    rec.alive = false;
    releaseOwned(rec);
    Module._nb_ctx_reset(rec.ptr);
    ctxPool.push(rec.ptr);
  }
}

/* Releases every tensor of the base context (its memory is kept). */
function reset() {
  if (!baseCtx) return;
  baseCtx.alive = false;
  releaseOwned(baseCtx);
  Module._nb_ctx_reset(baseCtx.ptr);
  baseCtx = {ptr: baseCtx.ptr, alive: true, owned: []};
}

/* fn() with gradient recording off in the current context (torch.no_grad). */
function noGrad(fn) {
  var c = current().ptr;
  var was = Module._nb_set_grad_enabled(c, 0);
  try {
    return fn();
  } finally {
    Module._nb_set_grad_enabled(c, was);
  }
}

/* ---- memory helpers ------------------------------------------------------ */

/* Runs fn(pointer) with n bytes of malloc'ed scratch, freed after. */
function withBytes(n, fn) {
  var p = Module._malloc(Math.max(n, 8));
  if (!p) throw NablaError('out of memory', 6);
  try {
    return fn(p);
  } finally {
    Module._free(p);
  }
}

function withInt32s(values, fn) {
  return withBytes(4 * values.length, function (p) {
    Module.HEAP32.set(values, p >> 2);
    return fn(p);
  });
}

function withString(s, fn) {
  var n = lengthBytesUTF8(s) + 1;
  return withBytes(n, function (p) {
    stringToUTF8(s, p, n);
    return fn(p);
  });
}

/* The malloc'ed C string at p as a JavaScript string; frees it. */
function takeString(p) {
  if (!p) return null;
  var s = UTF8ToString(p);
  Module._free(p);
  return s;
}

/* The dtype of tensors and modules made without one (torch's default). */
var defaultDtype = 'float32';
function setDefaultDtype(dt) {
  if (dt !== 'float32' && dt !== 'float64') throw NablaError("setDefaultDtype: '" + dt + "' is not float32 or float64");
  defaultDtype = dt;
}

function dtypeCode(dt) {
  var k = NB_DTYPES.indexOf(dt === undefined ? defaultDtype : dt);
  if (k < 0) throw NablaError("dtype: '" + dt + "' is not one of " + NB_DTYPES.join(', '));
  return k;
}

function checkShape(shape, what) {
  if (!Array.isArray(shape)) throw NablaError(what + ': the shape must be an array of sizes');
  shape.forEach(function (d) {
    if (!Number.isInteger(d)) throw NablaError(what + ': shape entry ' + d + ' is not a whole number');
  });
  return shape;
}

/* ---- tensors ------------------------------------------------------------- */

/* A tensor: the C pointer and the context record it belongs to (so a
 * released one is caught before the library reads freed memory). */
function Tensor(ptr, rec) {
  this.ptr = ptr;
  this.rec = rec;
}

function wrap(ptr, rec, what) {
  if (!ptr) throwCtxError(rec.ptr, what);
  return new Tensor(ptr, rec);
}

Tensor.prototype.check = function () {
  if (!this.rec.alive)
    throw NablaError('tensor used after its scope ended (nb.scope returned, or nb.reset ran)', NB_ERR_STATE);
  return this.ptr;
};

Object.defineProperties(Tensor.prototype, {
  dtype: {get: function () { return NB_DTYPES[Module._nb_wasm_dtype(this.check())]; }},
  ndim: {get: function () { return Module._nb_wasm_ndim(this.check()); }},
  shape: {get: function () {
    var p = this.check(), n = Module._nb_wasm_ndim(p), s = [];
    for (var i = 0; i < n; i++) s.push(Module._nb_wasm_dim(p, i));
    return s;
  }},
  numel: {get: function () { return Module._nb_wasm_numel(this.check()); }},
  /* The values, flat in row-major order, as a new array. */
  data: {get: function () { return readValues(this, Module._nb_wasm_data(this.check())); }},
  /* The gradient as a flat array, null until a backward reaches it. */
  grad: {get: function () {
    var g = Module._nb_wasm_grad(this.check());
    return g ? readValues(this, g) : null;
  }},
  requiresGrad: {get: function () { return !!Module._nb_wasm_requires(this.check()); }},
  name: {
    get: function () { return takeName(Module._nb_wasm_name(this.check())); },
    set: function (s) {
      var p = this.check();
      withString(String(s), function (c) { Module._nb_wasm_set_name(p, c); });
    },
  },
});

function takeName(p) { return p ? UTF8ToString(p) : null; }

function readValues(t, p) {
  var n = t.numel, dt = Module._nb_wasm_dtype(t.ptr);
  if (dt === 0) return Array.from(Module.HEAPF32.subarray(p >> 2, (p >> 2) + n));
  if (dt === 1) return Array.from(Module.HEAPF64.subarray(p >> 3, (p >> 3) + n));
  var out = new Array(n);
  if (p !== Module._nb_wasm_data(t.ptr)) throw NablaError('integer tensors have no gradient');
  for (var i = 0; i < n; i++) out[i] = Module._nb_get(t.ptr, i);
  return out;
}

/* The values nested by the shape, like PyTorch's tolist(). */
Tensor.prototype.tolist = function () {
  var flat = this.data, shape = this.shape, k = 0;
  function build(d) {
    if (d === shape.length) return flat[k++];
    var row = [];
    for (var i = 0; i < shape[d]; i++) row.push(build(d + 1));
    return row;
  }
  return build(0);
};

/* The value of a one-element tensor. */
Tensor.prototype.item = function () {
  if (this.numel !== 1) throw NablaError('item: the tensor has ' + this.numel + ' elements, not 1');
  return Module._nb_item(this.ptr);
};

/* PyTorch's print: "tensor([[0.4421, 0.5931], ...])". */
Tensor.prototype.toString = function () { return takeString(Module._nb_wasm_print(this.check(), 0)); };
Tensor.prototype.gradString = function () { return takeString(Module._nb_wasm_print(this.check(), 1)); };

/* Marks a leaf as needing a gradient (PyTorch's requires_grad_()). */
Tensor.prototype.requiresGrad_ = function () {
  var p = this.check();
  if (!Module._nb_requires_grad(p)) throwCtxError(Module._nb_wasm_owner(p), 'requires_grad');
  return this;
};

Tensor.prototype.zeroGrad = function () {
  if (!replay) Module._nb_zero_grad(this.check());
  return this;
};

/* Backward from this tensor (one element, or with gradOutput of its shape)
 * over the tape of the context that made it. */
Tensor.prototype.backward = function (gradOutput) {
  var p = this.check(), owner = Module._nb_wasm_owner(p);
  if (replay) return; /* a replayed forward changes no gradient */
  var g = gradOutput === undefined ? 0 : asTensor(gradOutput, this).check();
  if (Module._nb_backward(owner, p, g)) throwCtxError(owner, 'backward');
};

/* A copy in the current context without history (t.detach().clone()). */
Tensor.prototype.detach = function () {
  var r = current();
  return wrap(Module._nb_copy(r.ptr, this.check(), Module._nb_wasm_dtype(this.ptr)), r, 'detach');
};

Tensor.prototype.to = function (dtype) {
  var r = current();
  return wrap(Module._nb_copy(r.ptr, this.check(), dtypeCode(dtype)), r, 'to');
};

/* ---- making tensors ------------------------------------------------------- */

/* The shape of nested arrays; throws for ragged ones. */
function nestedShape(data) {
  var shape = [];
  for (var d = data; Array.isArray(d) || ArrayBuffer.isView(d); d = d[0]) shape.push(d.length);
  function walk(x, depth) {
    if (depth === shape.length) {
      if (typeof x !== 'number' && typeof x !== 'boolean')
        throw NablaError('tensor: ' + JSON.stringify(x) + ' is not a number');
      return;
    }
    if (!(Array.isArray(x) || ArrayBuffer.isView(x)) || x.length !== shape[depth])
      throw NablaError('tensor: ragged nested arrays (expected ' + shape[depth] + ' entries at depth ' + depth + ')');
    for (var i = 0; i < x.length; i++) walk(x[i], depth + 1);
  }
  walk(data, 0);
  return shape;
}

function flatten(data, out) {
  if (Array.isArray(data) || ArrayBuffer.isView(data)) {
    for (var i = 0; i < data.length; i++) flatten(data[i], out);
  } else {
    out.push(+data);
  }
  return out;
}

/* nb.tensor(data, {shape, dtype, requiresGrad, name}): data a number,
 * nested arrays (the shape is theirs) or a flat array with opts.shape. */
function tensor(data, opts) {
  if (replay) return replayed();
  opts = opts || {};
  var values = flatten(data, []);
  var shape = opts.shape !== undefined ? checkShape(opts.shape, 'tensor') :
    typeof data === 'number' || typeof data === 'boolean' ? [] : nestedShape(data);
  var numel = shape.reduce(function (a, b) { return a * b; }, 1);
  if (numel !== values.length)
    throw NablaError('tensor: ' + values.length + ' values do not fill the shape [' + shape + '] (' + numel + ')');
  var r = current(), dt = dtypeCode(opts.dtype);
  var t = withInt32s(shape, function (sp) {
    return withBytes(8 * values.length, function (vp) {
      Module.HEAPF64.set(values, vp >> 3);
      return wrap(Module._nb_wasm_from_doubles(r.ptr, dt, shape.length, sp, vp), r, 'tensor');
    });
  });
  return finish(t, opts);
}

function finish(t, opts) {
  if (opts.requiresGrad) t.requiresGrad_();
  if (opts.name !== undefined) t.name = opts.name;
  return made(t);
}

/* ---- replaying a forward ---------------------------------------------------
 * The tape explorer's per-op check runs the student's forward again on a
 * fresh context and moves one entry of a leaf in place: the leaves (and
 * modules, generators) must be the first run's, not new ones. nb.record(fn)
 * runs fn and lists what it made, in order; nb.replay(list, fn) runs fn
 * with each maker returning the next of the list instead (generators put
 * back to their state when first made), so the same code builds the same
 * tape on the same leaves. A replayed forward changes no gradient or
 * parameter: backward, zeroGrad and the optimizers' steps do nothing. */
var recording = null, replay = null;
function made(obj) {
  if (recording) recording.push(obj);
  return obj;
}
function replayed() {
  if (replay.k >= replay.list.length)
    throw NablaError('replay: the forward made more tensors than its first run');
  var obj = replay.list[replay.k++];
  if (obj.rewind) obj.rewind();
  return obj;
}
function record(fn) {
  var outer = recording, list = [];
  recording = list;
  try {
    return {value: fn(), made: list};
  } finally {
    recording = outer;
  }
}
function replayRun(list, fn) {
  var outer = replay;
  replay = {list: list, k: 0};
  try {
    return fn();
  } finally {
    replay = outer;
  }
}

function full(shape, value, opts) {
  if (replay) return replayed();
  opts = opts || {};
  checkShape(shape, 'full');
  var r = current(), dt = dtypeCode(opts.dtype);
  var t = withInt32s(shape, function (sp) {
    return wrap(Module._nb_wasm_full(r.ptr, dt, shape.length, sp, value), r, 'full');
  });
  return finish(t, opts);
}

/* N(0, 1) (randn) or U[0, 1) (rand) from PCG32 seeded (seed, 0). */
function random(normal, shape, seed, opts) {
  if (replay) return replayed();
  opts = opts || {};
  checkShape(shape, normal ? 'randn' : 'rand');
  if (seed === undefined) seed = 0;
  if (!Number.isInteger(seed) || seed < 0) throw NablaError('seed: ' + seed + ' is not a whole number >= 0');
  var r = current(), dt = dtypeCode(opts.dtype);
  var a = normal ? (opts.mean || 0) : (opts.low || 0);
  var b = normal ? (opts.std === undefined ? 1 : opts.std) : (opts.high === undefined ? 1 : opts.high);
  var t = withInt32s(shape, function (sp) {
    return wrap(Module._nb_wasm_random(r.ptr, dt, shape.length, sp, normal ? 1 : 0, a, b, seed), r,
                normal ? 'randn' : 'rand');
  });
  return finish(t, opts);
}

/* ---- ops ------------------------------------------------------------------- */

/* x as a tensor: itself, or a number or array made into one of like's dtype. */
function asTensor(x, like) {
  if (x instanceof Tensor) { x.check(); return x; }
  if (x === null || x === undefined) throw NablaError('expected a tensor, got ' + x);
  var dt = like ? like.dtype : defaultDtype;
  if (typeof x === 'number') {
    var r = current();
    return wrap(Module._nb_scalar(r.ptr, dtypeCode(dt), x), r, 'scalar');
  }
  return tensor(x, {dtype: dt});
}

/* Where ops are made: nb.setSiteHook(fn), fn() giving the line of the
 * caller's code (0: unknown), which each op's node then records as its
 * site "code:LINE" for the explorer (the playground reads its stack). */
var siteHook = null;
function setSiteHook(fn) { siteHook = typeof fn === 'function' ? fn : null; }

/* An op of the current context on pointers: fn(ctx, ...) -> tensor. */
function call(what, fn) {
  var r = current();
  if (siteHook) {
    var line = siteHook();
    if (line > 0) Module._nb_wasm_set_site(r.ptr, line);
  }
  return wrap(fn(r.ptr), r, what);
}

function unary(cfn) {
  return function () {
    var p = this.check();
    return call(cfn, function (c) { return Module['_nb_' + cfn](c, p); });
  };
}

function binary(cfn, scalarFn) {
  return function (other) {
    var p = this.check(), self = this;
    if (typeof other === 'number' && scalarFn)
      return call(cfn, function (c) { return scalarFn(c, p, other); });
    var q = asTensor(other, self).ptr;
    return call(cfn, function (c) { return Module['_nb_' + cfn](c, p, q); });
  };
}

function normDim(dim, what) {
  if (dim === undefined || dim === null) return null;
  if (!Number.isInteger(dim)) throw NablaError(what + ': dim ' + dim + ' is not a whole number');
  return dim;
}

var T = Tensor.prototype;
T.add = binary('add', function (c, p, s) { return Module._nb_add_scalar(c, p, s); });
T.sub = binary('sub', function (c, p, s) { return Module._nb_add_scalar(c, p, -s); });
T.mul = binary('mul', function (c, p, s) { return Module._nb_scale(c, p, s); });
T.div = binary('div');
T.matmul = binary('matmul');
T.mseLoss = binary('mse_loss');
['neg', 'exp', 'log', 'sqrt', 'tanh', 'sigmoid', 'relu', 'erf', 'silu', 'relu2'].forEach(function (f) {
  T[f] = unary(f);
});
T.pow = function (p) {
  var x = this.check();
  return call('pow', function (c) { return Module._nb_pow(c, x, p); });
};
T.gelu = function (opts) {
  var x = this.check(), approx = opts && opts.approximate === 'tanh' ? 1 : 0;
  return call('gelu', function (c) { return Module._nb_gelu(c, x, approx); });
};

function reduction(all, along) {
  return function (dim, keepdim) {
    var x = this.check(), d = normDim(dim, all);
    if (d === null) return call(all, function (c) { return Module['_nb_' + all](c, x); });
    return call(along, function (c) { return Module['_nb_' + along](c, x, d, keepdim ? 1 : 0); });
  };
}
T.sum = reduction('sum', 'sum_dim');
T.mean = reduction('mean', 'mean_dim');
/* The maximum values along dim (the indices are not returned). */
T.max = function (dim, keepdim) {
  var x = this.check(), d = normDim(dim, 'max');
  if (d === null) throw NablaError('max: give the dim (max over all elements is not an op)');
  return call('max_dim', function (c) { return Module._nb_max_dim(c, x, d, keepdim ? 1 : 0, 0); });
};

T.transpose = function (d0, d1) {
  var x = this.check();
  return call('transpose', function (c) { return Module._nb_transpose(c, x, d0, d1); });
};
Object.defineProperty(T, 'T', {get: function () { return this.transpose(-2, -1); }});
T.permute = function () {
  var x = this.check(), perm = Array.isArray(arguments[0]) ? arguments[0] : Array.from(arguments);
  if (perm.length !== this.ndim)
    throw NablaError('permute: ' + perm.length + ' dims given for a tensor of ' + this.ndim);
  return withInt32s(perm, function (pp) {
    return call('permute', function (c) { return Module._nb_permute(c, x, pp); });
  });
};
T.reshape = function () {
  var x = this.check(), shape = checkShape(Array.isArray(arguments[0]) ? arguments[0] : Array.from(arguments), 'reshape');
  return withInt32s(shape, function (sp) {
    return call('reshape', function (c) { return Module._nb_wasm_reshape(c, x, shape.length, sp); });
  });
};
T.view = T.reshape;

function lastDimOnly(t, dim, what) {
  if (dim === undefined || dim === -1 || dim === t.ndim - 1) return;
  throw NablaError(what + ': only the last dim (-1) is supported, got dim=' + dim);
}
T.softmax = function (dim) {
  lastDimOnly(this, dim, 'softmax');
  return unary('softmax').call(this);
};
T.logSoftmax = function (dim) {
  lastDimOnly(this, dim, 'log_softmax');
  return unary('log_softmax').call(this);
};
/* Where mask (a bool tensor, or nested booleans) is true, value. */
T.maskedFill = function (mask, value) {
  var x = this.check();
  var m = mask instanceof Tensor ? mask.check() : tensor(mask, {dtype: 'bool'}).ptr;
  return call('masked_fill', function (c) { return Module._nb_masked_fill(c, x, m, value); });
};
/* The causal triangle of the last two dims (j > i) set to value (-Infinity). */
T.causalMask = function (value) {
  var x = this.check(), v = value === undefined ? -Infinity : value;
  return call('causal_fill', function (c) { return Module._nb_causal_fill(c, x, v); });
};
/* Mean cross-entropy of these logits (..., C) against class indices. */
T.crossEntropy = function (targets) {
  var x = this.check();
  var t = targets instanceof Tensor ? targets.check() : tensor(targets, {dtype: 'int64'}).ptr;
  return call('cross_entropy', function (c) { return Module._nb_cross_entropy(c, x, t); });
};
function optional(t, like) { return t === undefined || t === null ? 0 : asTensor(t, like).ptr; }
T.layerNorm = function (weight, bias, eps) {
  var x = this.check(), w = optional(weight, this), b = optional(bias, this);
  var e = eps === undefined ? 1e-5 : eps;
  return call('layer_norm', function (c) { return Module._nb_layer_norm(c, x, w, b, e); });
};
T.rmsNorm = function (weight, eps) {
  var x = this.check(), w = optional(weight, this), e = eps === undefined ? 1e-6 : eps;
  return call('rms_norm', function (c) { return Module._nb_rms_norm(c, x, w, e); });
};
/* x @ weight^T + bias, F.linear. */
T.linear = function (weight, bias) {
  var x = this.check(), w = asTensor(weight, this).ptr, b = optional(bias, this);
  return call('linear', function (c) { return Module._nb_linear(c, x, w, b); });
};
/* Dropout with its mask from PCG32 seeded (seed, 0); opts.train false: x. */
T.dropout = function (p, opts) {
  opts = opts || {};
  var x = this.check(), train = opts.train === undefined ? 1 : opts.train ? 1 : 0;
  return call('dropout', function (c) { return Module._nb_wasm_dropout(c, x, p, train, opts.seed || 0); });
};
/* Rows of this weight (num, dim) picked by ids (int64). */
T.embedding = function (ids) {
  var w = this.check();
  var i = ids instanceof Tensor ? ids.check() : tensor(ids, {dtype: 'int64'}).ptr;
  return call('embedding', function (c) { return Module._nb_embedding(c, w, i); });
};

/* Splits along dim into pieces of the given sizes (torch.split with a list). */
T.split = function (sizes, dim) {
  var x = this.check(), d = dim || 0;
  if (!Array.isArray(sizes)) throw NablaError('split: the sizes must be an array');
  var r = current();
  return withInt32s(sizes, function (sp) {
    return withBytes(4 * sizes.length, function (op) {
      if (Module._nb_wasm_split(r.ptr, x, d, sizes.length, sp, op)) throwCtxError(r.ptr, 'split');
      var out = [];
      for (var i = 0; i < sizes.length; i++) out.push(new Tensor(Module.HEAP32[(op >> 2) + i], r));
      return out;
    });
  });
};

/* Joins tensors along dim. */
function cat(tensors, dim) {
  var ps = tensors.map(function (t) { return asTensor(t).ptr; });
  return withInt32s(ps, function (pp) {
    return call('concat', function (c) { return Module._nb_concat(c, ps.length, pp, dim || 0); });
  });
}

/* ---- gradcheck and the tape ------------------------------------------------ */

var pendingError = null;
var forwardFn = null;

/* Called by nb_gradcheck (tools/wasm/nabla_wasm.c) for each evaluation:
 * the tensors at `inputs` on the private context ctx go to the function
 * under check; its output pointer goes back, or 0 with the error on ctx. */
Module.nbForward = function (ctx, inputs, n) {
  var rec = {ptr: ctx, alive: true, owned: []}, args = [];
  for (var i = 0; i < n; i++) args.push(new Tensor(Module.HEAP32[(inputs >> 2) + i], rec));
  ctxStack.push(rec);
  try {
    var out = forwardFn.apply(null, args);
    if (!(out instanceof Tensor)) throw NablaError('gradcheck: the function must return a tensor');
    return out.check();
  } catch (e) {
    if (!pendingError) pendingError = e;
    withString(String(e && e.message || e), function (m) { Module._nb_wasm_fail(ctx, NB_ERR_STATE, m); });
    return 0;
  } finally {
    ctxStack.pop();
    rec.alive = false;
    releaseOwned(rec);
  }
};

/* torch.autograd.gradcheck(f, inputs): float64 central differences against
 * backward for every input that requires grad. opts: fast, eps, atol,
 * rtol. Returns {passed, maxAbsErr, worstInput, message, blameOp,
 * blameIndex}; throws what f threw, or the library's error when the check
 * could not run. */
function gradcheck(f, inputs, opts) {
  opts = opts || {};
  if (typeof f !== 'function') throw NablaError('gradcheck: expects a function');
  var ps = inputs.map(function (t) { return asTensor(t).ptr; });
  var r = current();
  forwardFn = f;
  pendingError = null;
  var status;
  try {
    status = withInt32s(ps, function (pp) {
      return Module._nb_wasm_gradcheck(r.ptr, ps.length, pp, opts.fast ? 1 : 0,
                                       opts.eps || 0, opts.atol === undefined ? -1 : opts.atol,
                                       opts.rtol === undefined ? -1 : opts.rtol);
    });
  } finally {
    forwardFn = null;
  }
  var err = pendingError;
  pendingError = null;
  var res = {
    passed: !!Module._nb_wasm_gc_passed(),
    maxAbsErr: Module._nb_wasm_gc_max_abs_err(),
    worstInput: Module._nb_wasm_gc_worst_input(),
    message: UTF8ToString(Module._nb_wasm_gc_message()),
    blameOp: UTF8ToString(Module._nb_wasm_gc_blame_op()),
    blameIndex: Module._nb_wasm_gc_blame_index(),
  };
  if (err) { Module._nb_ctx_clear_error(r.ptr); throw err; }
  if (status !== 0 && !(status === 5 && !res.passed && res.message)) throwCtxError(r.ptr, 'gradcheck');
  Module._nb_ctx_clear_error(r.ptr);
  return res;
}

/* The tape explorer's JSON (nb_tape_json) of root's context, up to root. */
function tapeJSON(root) {
  var p = root.check(), owner = Module._nb_wasm_owner(p);
  var s = Module._nb_wasm_tape_json(owner, p);
  if (!s) throwCtxError(owner, 'tape_json');
  return takeString(s);
}

/* How many ops the context that made t has recorded (its tape's length). */
function tapeLength(t) { return Module._nb_tape_len(Module._nb_wasm_owner(t.check())); }

/* Bytes malloc holds for the program (flat over released scopes), and
 * the wasm memory's size (grows, never shrinks). */
function heapBytes() { return Module._nb_wasm_heap_used(); }
function memoryBytes() { return Module.HEAP8.length; }

var api = {
  Tensor: Tensor, NablaError: NablaError, tensor: tensor, cat: cat, scope: scope, reset: reset,
  noGrad: noGrad, gradcheck: gradcheck, tapeJSON: tapeJSON, heapBytes: heapBytes,
  memoryBytes: memoryBytes, setDefaultDtype: setDefaultDtype,
  getDefaultDtype: function () { return defaultDtype; },
  record: record, replay: replayRun, setSiteHook: setSiteHook, tapeLength: tapeLength,
  zeros: function (shape, opts) { return full(shape, 0, opts); },
  ones: function (shape, opts) { return full(shape, 1, opts); },
  full: full,
  randn: function (shape, seed, opts) { return random(true, shape, seed, opts); },
  rand: function (shape, seed, opts) { return random(false, shape, seed, opts); },
};
/* The ops as functions too: nb.tanh(x), nb.matmul(a, b), nb.crossEntropy(logits, y). */
['add', 'sub', 'mul', 'div', 'matmul', 'mseLoss', 'neg', 'exp', 'log', 'sqrt', 'tanh', 'sigmoid',
 'relu', 'erf', 'silu', 'relu2', 'pow', 'gelu', 'sum', 'mean', 'max', 'transpose', 'permute',
 'reshape', 'softmax', 'logSoftmax', 'maskedFill', 'causalMask', 'crossEntropy', 'layerNorm',
 'rmsNorm', 'linear', 'dropout', 'embedding'].forEach(function (name) {
  api[name] = function (x) {
    var t = asTensor(x);
    return T[name].apply(t, Array.prototype.slice.call(arguments, 1));
  };
});
Object.assign(Module, api);
