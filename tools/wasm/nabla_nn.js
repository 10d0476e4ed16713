/* tools/wasm/nabla_nn.js - nabla.js's modules, optimizers, generators and
 * the tape explorer's page model (docs/wasm.md), appended after
 * nabla_api.js inside the module's factory (--post-js), whose helpers
 * (current, own, call, wrap, made, replayed, ...) it uses.
 *
 *   nb.manualSeed(123);
 *   const mha = new nb.MultiHeadAttention(3, 2, 6, 0.0, 2);
 *   const opt = new nb.Adam(mha.parameters(), {lr: 1e-3});
 *   const y = mha.forward(x);           // x (B, T, 3) -> (B, T, 2)
 *
 * The modules are the C ones (nb_nn_*, nb_gpt): the same initialisation,
 * drawn from a PCG32 generator in PyTorch's order, so a C program seeding
 * nb_pcg32_seed(&rng, seed, stream) and building the same modules gets the
 * same weights. A module, optimizer or generator belongs to the context
 * current when it was made and is released with it (nb.scope's end,
 * nb.reset()), like its parameters. */

/* ---- generators ------------------------------------------------------------ */

var RNG_BYTES = 16; /* sizeof(nb_pcg32): the state, then the stream */

/* A PCG32 generator seeded (seed, stream): nb_pcg32_seed in C. */
function Generator(seed, stream) {
  if (replay) return replayed();
  if (!(this instanceof Generator)) return new Generator(seed, stream);
  checkSeed(seed);
  checkSeed(stream || 0);
  var p = Module._nb_wasm_rng_new(seed, stream || 0);
  if (!p) throw NablaError('out of memory: no generator', 6);
  this.ptr = p;
  this.start = Module.HEAPU8.slice(p, p + RNG_BYTES);
  var rec = current();
  own(rec, function () { Module._free(p); });
  made(this);
}
function checkSeed(s) {
  if (!Number.isInteger(s) || s < 0) throw NablaError('seed: ' + s + ' is not a whole number >= 0');
}
/* Back to the state it was made in (a replayed forward draws the same masks). */
Generator.prototype.rewind = function () { Module.HEAPU8.set(this.start, this.ptr); };
Generator.prototype.state = function () { return Module.HEAPU8.slice(this.ptr, this.ptr + RNG_BYTES); };
Generator.prototype.setState = function (s) { Module.HEAPU8.set(s, this.ptr); };
/* A whole number in [0, n) (nb_pcg32_bounded). */
Generator.prototype.randint = function (n) { return Module._nb_wasm_rng_bounded(this.ptr, n); };
/* A number in [0, 1) (nb_pcg32_double). */
Generator.prototype.random = function () { return Module._nb_wasm_rng_double(this.ptr); };

/* The generator modules draw from when not given one (torch's global one);
 * nb.manualSeed(seed, stream) re-seeds it. It lives as long as the page. */
var globalRng = 0;
function defaultRng() {
  if (!globalRng) globalRng = Module._nb_wasm_rng_new(0, 0);
  return globalRng;
}
function manualSeed(seed, stream) {
  checkSeed(seed);
  checkSeed(stream || 0);
  var p = defaultRng(), g = Module._nb_wasm_rng_new(seed, stream || 0);
  Module.HEAPU8.copyWithin(p, g, g + RNG_BYTES);
  Module._free(g);
}
function rngOf(opts) {
  if (opts && opts.generator) {
    if (!(opts.generator instanceof Generator)) throw NablaError('generator: expects an nb.Generator');
    return opts.generator.ptr;
  }
  return defaultRng();
}

/* ---- modules ----------------------------------------------------------------- */

/* The C module at ptr (nb_wasm_*_new), owned by context record rec. */
function NbModule() {}

function makeModule(self, what, build) {
  var rec = current();
  var p = build(rec.ptr);
  if (!p) throwCtxError(rec.ptr, what);
  self.ptr = p;
  self.rec = rec;
  self.kind = what;
  own(rec, function () { Module._nb_wasm_module_free(p); });
  return made(self);
}

NbModule.prototype.check = function () {
  if (!this.rec.alive) throw NablaError(this.kind + ': used after its scope ended', NB_ERR_STATE);
  return this.ptr;
};
/* x -> the module's output, recorded on the current context. */
NbModule.prototype.forward = function (x) {
  var m = this.check();
  var p = x instanceof Tensor ? x.check() : this.kind === 'Embedding' || this.kind === 'GPT' ?
    tensor(x, {dtype: 'int64'}).ptr : asTensor(x).ptr;
  return call(this.kind, function (c) { return Module._nb_wasm_module_forward(c, m, p); });
};
/* [{name, tensor}] in named_parameters() order. */
NbModule.prototype.namedParameters = function () {
  var l = Module._nb_wasm_module_params(this.check()), out = [];
  for (var i = 0; i < Module._nb_wasm_list_len(l); i++)
    out.push({name: UTF8ToString(Module._nb_wasm_list_name(l, i)),
              tensor: new Tensor(Module._nb_wasm_list_tensor(l, i), this.rec)});
  return out;
};
NbModule.prototype.parameters = function () {
  return this.namedParameters().map(function (e) { return e.tensor; });
};
/* PyTorch's .train(on) and .eval(): only dropout looks at it. */
NbModule.prototype.train = function (on) {
  Module._nb_wasm_module_train(this.check(), on === undefined || on ? 1 : 0);
  return this;
};
NbModule.prototype.eval = function () { return this.train(false); };
NbModule.prototype.zeroGrad = function () {
  this.parameters().forEach(function (t) { t.zeroGrad(); });
};

function subclass(ctor) {
  ctor.prototype = Object.create(NbModule.prototype);
  ctor.prototype.constructor = ctor;
  return ctor;
}
function dtOf(opts) { return dtypeCode(opts && opts.dtype); }
function whole(v, what) {
  if (!Number.isInteger(v)) throw NablaError(what + ': ' + v + ' is not a whole number');
  return v;
}

/* nn.Linear(inFeatures, outFeatures, {bias: true, dtype, generator}). */
var Linear = subclass(function Linear(inF, outF, opts) {
  if (replay) return replayed();
  opts = opts || {};
  whole(inF, 'Linear: in_features');
  whole(outF, 'Linear: out_features');
  var bias = opts.bias === undefined ? 1 : opts.bias ? 1 : 0, dt = dtOf(opts), r = rngOf(opts);
  return makeModule(this, 'Linear', function (c) { return Module._nb_wasm_linear_new(c, inF, outF, bias, dt, r); });
});
Object.defineProperties(Linear.prototype, {
  weight: {get: function () { return this.namedParameters()[0].tensor; }},
  bias: {get: function () { var p = this.namedParameters(); return p.length > 1 ? p[1].tensor : null; }},
});

/* nn.Dropout(p, {generator}): its masks drawn from the generator. */
var Dropout = subclass(function Dropout(p, opts) {
  if (replay) return replayed();
  var r = rngOf(opts);
  return makeModule(this, 'Dropout', function (c) { return Module._nb_wasm_dropout_new(c, p === undefined ? 0.5 : p, r); });
});

/* nn.Embedding(num, dim, {dtype, generator}): forward takes int64 ids. */
var Embedding = subclass(function Embedding(num, dim, opts) {
  if (replay) return replayed();
  whole(num, 'Embedding: num_embeddings');
  whole(dim, 'Embedding: embedding_dim');
  var dt = dtOf(opts), r = rngOf(opts);
  return makeModule(this, 'Embedding', function (c) { return Module._nb_wasm_embedding_new(c, num, dim, dt, r); });
});

/* nn.LayerNorm(dim, {eps: 1e-5, elementwiseAffine: true, dtype}). */
var LayerNorm = subclass(function LayerNorm(dim, opts) {
  if (replay) return replayed();
  opts = opts || {};
  whole(dim, 'LayerNorm: dim');
  var eps = opts.eps === undefined ? 1e-5 : opts.eps, dt = dtOf(opts);
  var affine = opts.elementwiseAffine === undefined || opts.elementwiseAffine ? 1 : 0;
  return makeModule(this, 'LayerNorm', function (c) { return Module._nb_wasm_layer_norm_new(c, dim, eps, affine, dt); });
});

/* Seed 004's MultiHeadAttention(dIn, dOut, contextLength, dropout,
 * numHeads, {qkvBias: false, fused: false, dtype, generator}). fused
 * false keeps the seed's ops (matmul, causal mask, softmax, dropout, ...)
 * on the tape one by one, for the explorer; true is nb_sdpa. */
var MultiHeadAttention = subclass(function MultiHeadAttention(dIn, dOut, ctxLen, dropout, heads, opts) {
  if (replay) return replayed();
  opts = opts || {};
  whole(dIn, 'MultiHeadAttention: d_in');
  whole(dOut, 'MultiHeadAttention: d_out');
  whole(ctxLen, 'MultiHeadAttention: context_length');
  whole(heads, 'MultiHeadAttention: num_heads');
  var dt = dtOf(opts), r = rngOf(opts), qkv = opts.qkvBias ? 1 : 0, fused = opts.fused ? 1 : 0;
  return makeModule(this, 'MultiHeadAttention', function (c) {
    return Module._nb_wasm_mha_new(c, dIn, dOut, ctxLen, dropout || 0, heads, qkv, fused, dt, r);
  });
});

/* The course's GPTModel: {vocabSize, contextLength, embDim, nHeads,
 * nLayers, dropRate: 0, qkvBias: false}, opts {dtype, generator}.
 * forward(ids (B, T)) -> logits (B, T, V); loss(ids, targets) -> the mean
 * cross-entropy. */
var GPT = subclass(function GPT(cfg, opts) {
  if (replay) return replayed();
  cfg = cfg || {};
  var dt = dtOf(opts), r = rngOf(opts);
  ['vocabSize', 'contextLength', 'embDim', 'nHeads', 'nLayers'].forEach(function (k) { whole(cfg[k], 'GPT: ' + k); });
  return makeModule(this, 'GPT', function (c) {
    return Module._nb_wasm_gpt_new(c, cfg.vocabSize, cfg.contextLength, cfg.nLayers, cfg.nHeads, cfg.embDim,
                                   cfg.dropRate || 0, cfg.qkvBias ? 1 : 0, dt, r);
  });
});
GPT.prototype.loss = function (ids, targets) {
  var m = this.check();
  var i = ids instanceof Tensor ? ids.check() : tensor(ids, {dtype: 'int64'}).ptr;
  var t = targets instanceof Tensor ? targets.check() : tensor(targets, {dtype: 'int64'}).ptr;
  return call('GPT', function (c) { return Module._nb_wasm_gpt_loss(c, m, i, t); });
};

/* ---- optimizers ---------------------------------------------------------------- */

/* The parameters as a C list: tensors, modules, or arrays of either,
 * named as PyTorch would ("weight", "0.bias" for the first of an array). */
function paramList(params, what) {
  var ts = [];
  (function add(p, prefix) {
    if (p instanceof Tensor) ts.push({name: prefix || p.name || 'param', t: p});
    else if (p instanceof NbModule)
      p.namedParameters().forEach(function (e) { ts.push({name: prefix + e.name, t: e.tensor}); });
    else if (Array.isArray(p)) p.forEach(function (q, i) { add(q, prefix + i + '.'); });
    else throw NablaError(what + ': parameters must be tensors or modules, got ' + p);
  })(params, '');
  if (!ts.length) throw NablaError(what + ': no parameters');
  var l = Module._nb_wasm_list_new();
  if (!l) throw NablaError('out of memory', 6);
  ts.forEach(function (e) {
    var st = withString(e.name.replace(/\.$/, ''), function (c) { return Module._nb_wasm_list_add(l, e.t.check(), c); });
    if (st) {
      Module._nb_wasm_list_free(l);
      throw NablaError(what + ": could not list the parameter '" + e.name + "' (listed twice?)", st);
    }
  });
  return l;
}

function Optimizer() {}
function makeOptim(self, what, params, build) {
  var l = paramList(params, what), rec = current(), p;
  try {
    p = build(rec.ptr, l);
  } finally {
    Module._nb_wasm_list_free(l); /* the optimizer keeps its own copy */
  }
  if (!p) throwCtxError(rec.ptr, what);
  self.ptr = p;
  self.rec = rec;
  self.kind = what;
  own(rec, function () { Module._nb_optim_free(p); });
  return self;
}
Optimizer.prototype.check = function () {
  if (!this.rec.alive) throw NablaError(this.kind + ': used after its scope ended', NB_ERR_STATE);
  return this.ptr;
};
/* One update of every parameter that has a gradient. */
Optimizer.prototype.step = function () {
  if (replay) return; /* a replayed forward changes no parameter */
  if (Module._nb_optim_step(this.check())) throwCtxError(this.rec.ptr, this.kind);
};
Optimizer.prototype.zeroGrad = function () { if (!replay) Module._nb_optim_zero_grad(this.check()); };
Object.defineProperty(Optimizer.prototype, 'lr', {
  get: function () { return Module._nb_optim_get_lr(this.check()); },
  set: function (v) {
    Module._nb_optim_set_lr(this.check(), v);
    if (Module._nb_ctx_status(this.rec.ptr)) throwCtxError(this.rec.ptr, this.kind);
  },
});
function optSubclass(ctor) {
  ctor.prototype = Object.create(Optimizer.prototype);
  ctor.prototype.constructor = ctor;
  return ctor;
}
function num(v, dflt) { return v === undefined ? dflt : v; }

/* torch.optim.SGD(params, {lr, momentum, dampening, weightDecay, nesterov}). */
var SGD = optSubclass(function SGD(params, o) {
  o = o || {};
  if (o.lr === undefined) throw NablaError('SGD: give the learning rate {lr}');
  return makeOptim(this, 'SGD', params, function (c, l) {
    return Module._nb_wasm_sgd_new(c, l, o.lr, num(o.momentum, 0), num(o.dampening, 0),
                                   num(o.weightDecay, 0), o.nesterov ? 1 : 0);
  });
});
function adam(name, decoupled) {
  return optSubclass(function (params, o) {
    o = o || {};
    var b = o.betas || [0.9, 0.999];
    return makeOptim(this, name, params, function (c, l) {
      return Module._nb_wasm_adam_new(c, l, num(o.lr, 1e-3), b[0], b[1], num(o.eps, 1e-8),
                                      num(o.weightDecay, decoupled ? 1e-2 : 0), o.amsgrad ? 1 : 0,
                                      decoupled ? 1 : 0);
    });
  });
}
/* torch.optim.Adam / AdamW(params, {lr, betas, eps, weightDecay, amsgrad}). */
var Adam = adam('Adam', false);
var AdamW = adam('AdamW', true);

/* torch.nn.utils.clip_grad_norm_: returns the norm before clipping. */
function clipGradNorm(params, maxNorm) {
  var l = paramList(params, 'clip_grad_norm');
  try {
    return Module._nb_clip_grad_norm(l, maxNorm);
  } finally {
    Module._nb_wasm_list_free(l);
  }
}

/* ---- training diagnostics ---------------------------------------------------------- */

/* nb_diag (nabla/teach.h) over the parameters: every `every` steps the
 * activation and gradient histograms and the update-to-data ratio.
 * step(i, loss) after the optimizer's step, while loss's tape is there;
 * html() the diagnostics page as it stands. */
function Diagnostics(params, opts) {
  opts = opts || {};
  var rec = current(), l = paramList(params, 'Diagnostics');
  var d = Module._nb_diag_new(rec.ptr, opts.every || 10, opts.bins || 0);
  if (!d) { Module._nb_wasm_list_free(l); throwCtxError(rec.ptr, 'Diagnostics'); }
  this.ptr = d;
  this.list = l;
  this.rec = rec;
  own(rec, function () { Module._nb_diag_free(d); Module._nb_wasm_list_free(l); });
}
Diagnostics.prototype.step = function (i, loss) {
  if (!this.rec.alive) throw NablaError('Diagnostics: used after its scope ended', NB_ERR_STATE);
  if (replay) return;
  var p = loss.check(), owner = Module._nb_wasm_owner(p);
  if (Module._nb_diag_step(owner, this.ptr, i, Module._nb_item(p), this.list)) throwCtxError(owner, 'diag_step');
};
Diagnostics.prototype.html = function () {
  var s = Module._nb_wasm_diag_html(this.rec.ptr, this.ptr);
  if (!s) throwCtxError(this.rec.ptr, 'diag_write_html');
  return takeString(s);
};

/* ---- the explorer's page model --------------------------------------------------- */

var checkForward = null;

/* Called by nb_wasm_page_json's check (tools/wasm/nabla_wasm_nn.c) for
 * each run: the forward under check on the fresh context c. */
Module.nbCheckForward = function (c) {
  var rec = {ptr: c, alive: true, owned: []};
  ctxStack.push(rec);
  try {
    var out = checkForward();
    return out instanceof Tensor ? out.check() : 0;
  } catch (e) {
    return 0;
  } finally {
    ctxStack.pop();
    rec.alive = false;
    releaseOwned(rec);
  }
};

/* The model the tape explorer's page embeds for the tape up to root (run
 * backward first for the steps). forward, when given, checks every
 * float64 op: it must record the same tape again on the current context,
 * on the same leaves (nb.replay does that for code that makes its own). */
function pageJSON(root, forward) {
  var p = root.check(), owner = Module._nb_wasm_owner(p), s;
  checkForward = forward || null;
  try {
    s = Module._nb_wasm_page_json(owner, p, forward ? 1 : 0);
  } finally {
    checkForward = null;
  }
  if (!s) throwCtxError(owner, 'tape_html');
  return takeString(s);
}

Object.assign(Module, {
  Generator: Generator, manualSeed: manualSeed, NbModule: NbModule, Linear: Linear, Dropout: Dropout,
  Embedding: Embedding, LayerNorm: LayerNorm, MultiHeadAttention: MultiHeadAttention, GPT: GPT,
  Optimizer: Optimizer, SGD: SGD, Adam: Adam, AdamW: AdamW, clipGradNorm: clipGradNorm,
  pageJSON: pageJSON, Diagnostics: Diagnostics,
});
