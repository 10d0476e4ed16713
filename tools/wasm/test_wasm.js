/* tools/wasm/test_wasm.js - nabla.js (the WebAssembly build) against the C
 * library's numbers, under node:
 *
 *   node tools/wasm/test_wasm.js build/wasm/nabla.js [NATIVE_BUILD_DIR]
 *
 * micrograd's neuron (tests/fixtures/teach_scalar.txt, PyTorch's values,
 * to the C test's 1e-14), the seed notebooks' self-attention and causal
 * attention printed digit for digit as tests/check_examples.c expects them
 * (inputs read from examples/seed_common.h and tests/attention_refs.h),
 * gradcheck, the library's messages as exceptions, and the heap flat over
 * 1000 build/backward/release cycles. With a native build directory that
 * holds examples/teach_scalar and examples/seed_self_attention, their
 * output is compared with the same computation here too. Exits 1 on the
 * first failure. */
'use strict';
const assert = require('assert');
const fs = require('fs');
const path = require('path');
const {execFileSync} = require('child_process');

const root = path.resolve(__dirname, '..', '..');
const modulePath = path.resolve(process.argv[2] || path.join(root, 'build/wasm/nabla.js'));
const nativeDir = process.argv[3] ? path.resolve(process.argv[3]) : null;

/* `static const double NAME[N] = {...};` from a C header, as numbers. */
function cArray(file, name) {
  const text = fs.readFileSync(path.join(root, file), 'utf8');
  const m = text.match(new RegExp('static const double ' + name + '\\[[^\\]]*\\] = \\{([^}]*)\\}'));
  assert(m, name + ' not found in ' + file);
  return m[1].replace(/\/\*[^]*?\*\//g, '').split(',').map(s => s.trim()).filter(s => s).map(Number);
}

const tests = [];
function test(name, fn) { tests.push({name, fn}); }

/* ---- micrograd's neuron ---------------------------------------------------- */

function neuron(nb) {
  const leaf = (name, v) => nb.tensor(v, {dtype: 'float64', requiresGrad: true, name});
  const t = {x1: leaf('x1', 2), w1: leaf('w1', -3), x2: leaf('x2', 0), w2: leaf('w2', 1),
             b: leaf('b', 6.8813735870195432)};
  t.x1w1 = t.x1.mul(t.w1);
  t.x2w2 = t.x2.mul(t.w2);
  t.x1w1x2w2 = t.x1w1.add(t.x2w2);
  t.n = t.x1w1x2w2.add(t.b);
  t.o = t.n.tanh();
  t.o.backward();
  return t;
}

test("micrograd's neuron: PyTorch's values and gradients", nb => nb.scope(() => {
  const t = neuron(nb);
  const rows = fs.readFileSync(path.join(root, 'tests/fixtures/teach_scalar.txt'), 'utf8')
    .split('\n').filter(l => l && l[0] !== '#').map(l => l.split(/\s+/));
  assert.strictEqual(rows.length, 10);
  for (const [name, value, grad] of rows) {
    assert(Math.abs(t[name].item() - Number(value)) <= 1e-14, name + ' value ' + t[name].item());
    assert(Math.abs(t[name].grad[0] - Number(grad)) <= 1e-14, name + ' grad ' + t[name].grad[0]);
  }
  assert.strictEqual(String(t.o), 'tensor(0.7071, dtype=torch.float64)');
  assert.deepStrictEqual(t.x1.grad, [t.x1.grad[0]]);
  assert.strictEqual(t.x1.name, 'x1');
}));

/* ---- the seed notebooks' attention ------------------------------------------- */

const R = ',\n        '; /* PyTorch's row break (R2 in check_examples.c) */

function selfAttention(nb) {
  const inputs = nb.tensor(cArray('examples/seed_common.h', 'inputs_data'), {shape: [6, 3]});
  /* the query x^2 (row 1; there is no slicing op yet) */
  const x2 = nb.tensor(cArray('examples/seed_common.h', 'inputs_data').slice(3, 6), {shape: [1, 3]});
  const scores2 = x2.matmul(inputs.transpose(0, 1)).reshape(6);
  const weights2 = scores2.softmax();
  const out = [
    String(scores2), String(scores2.div(scores2.sum())), String(weights2),
    String(weights2.reshape(1, 6).matmul(inputs).reshape(3)),
  ];
  const scores = inputs.matmul(inputs.T);
  const weights = scores.softmax();
  out.push(String(scores), String(weights), String(weights.sum(-1)), String(weights.matmul(inputs)));
  return out;
}

test('seed self-attention: the notebook\'s numbers', nb => nb.scope(() => {
  const out = selfAttention(nb);
  assert.deepStrictEqual(out.slice(0, 4), [
    'tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865])',
    'tensor([0.1455, 0.2278, 0.2249, 0.1285, 0.1077, 0.1656])',
    'tensor([0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581])',
    'tensor([0.4419, 0.6515, 0.5683])',
  ]);
  assert.strictEqual(out[4], 'tensor([[0.9995, 0.9544, 0.9422, 0.4753, 0.4576, 0.6310]' + R +
    '[0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]' + R +
    '[0.9422, 1.4754, 1.4570, 0.8296, 0.7154, 1.0605]' + R +
    '[0.4753, 0.8434, 0.8296, 0.4937, 0.3474, 0.6565]' + R +
    '[0.4576, 0.7070, 0.7154, 0.3474, 0.6654, 0.2935]' + R +
    '[0.6310, 1.0865, 1.0605, 0.6565, 0.2935, 0.9450]])');
  assert.strictEqual(out[5], 'tensor([[0.2098, 0.2006, 0.1981, 0.1242, 0.1220, 0.1452]' + R +
    '[0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]' + R +
    '[0.1390, 0.2369, 0.2326, 0.1242, 0.1108, 0.1565]' + R +
    '[0.1435, 0.2074, 0.2046, 0.1462, 0.1263, 0.1720]' + R +
    '[0.1526, 0.1958, 0.1975, 0.1367, 0.1879, 0.1295]' + R +
    '[0.1385, 0.2184, 0.2128, 0.1420, 0.0988, 0.1896]])');
  assert.strictEqual(out[6], 'tensor([1.0000, 1.0000, 1.0000, 1.0000, 1.0000, 1.0000])');
  assert.strictEqual(out[7], 'tensor([[0.4421, 0.5931, 0.5790]' + R + '[0.4419, 0.6515, 0.5683]' + R +
    '[0.4431, 0.6496, 0.5671]' + R + '[0.4304, 0.6298, 0.5510]' + R +
    '[0.4671, 0.5910, 0.5266]' + R + '[0.4177, 0.6503, 0.5645]])');
}));

test('seed causal attention: masked_fill, causal_fill, softmax', nb => nb.scope(() => {
  const inputs = nb.tensor(cArray('examples/seed_common.h', 'inputs_data'), {shape: [6, 3]});
  const Wq = nb.tensor(cArray('tests/attention_refs.h', 'ref_sa1_p0'), {shape: [3, 2]});
  const Wk = nb.tensor(cArray('tests/attention_refs.h', 'ref_sa1_p1'), {shape: [3, 2]});
  const keys = inputs.matmul(Wk);
  const scores = inputs.matmul(Wq).matmul(keys.T);
  const above = [];
  for (let i = 0; i < 6; i++) above.push([0, 1, 2, 3, 4, 5].map(j => j > i));
  const mask = nb.tensor(above, {dtype: 'bool'});
  assert.strictEqual(String(mask).split('\n')[0], 'tensor([[False,  True,  True,  True,  True,  True],');
  const masked = scores.maskedFill(mask, -Infinity);
  assert.strictEqual(String(masked), 'tensor([[0.9231,   -inf,   -inf,   -inf,   -inf,   -inf]' + R +
    '[1.2705, 1.8524,   -inf,   -inf,   -inf,   -inf]' + R +
    '[1.2544, 1.8284, 1.7877,   -inf,   -inf,   -inf]' + R +
    '[0.6973, 1.0167, 0.9941, 0.5925,   -inf,   -inf]' + R +
    '[0.6114, 0.8819, 0.8626, 0.5121, 0.2707,   -inf]' + R +
    '[0.8995, 1.3165, 1.2871, 0.7682, 0.3937, 1.0996]])');
  assert.deepStrictEqual(scores.causalMask().data, masked.data);
  const weights = masked.mul(1 / Math.sqrt(keys.shape[1])).softmax();
  assert.strictEqual(String(weights), 'tensor([[1.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000]' + R +
    '[0.3986, 0.6014, 0.0000, 0.0000, 0.0000, 0.0000]' + R +
    '[0.2526, 0.3791, 0.3683, 0.0000, 0.0000, 0.0000]' + R +
    '[0.2265, 0.2839, 0.2794, 0.2103, 0.0000, 0.0000]' + R +
    '[0.1952, 0.2363, 0.2331, 0.1820, 0.1534, 0.0000]' + R +
    '[0.1557, 0.2092, 0.2048, 0.1419, 0.1089, 0.1794]])');
}));

/* ---- against the native build, when there is one ------------------------------ */

/* Equal but for the math library's last bits: the wasm build's tanh, exp
 * and erf are musl's, the native build's glibc's (glibc's tanh of the
 * neuron's n is one ulp above PyTorch's 0.70710678118654757, musl's is
 * PyTorch's), so values agree to a few ulps, not always bit for bit. */
function near(a, b, what) {
  assert(Math.abs(a - b) <= 4e-16 * Math.max(1, Math.abs(b)), what + ': wasm ' + a + ', native ' + b);
}

test('the native examples print the same (needs a native build dir)', nb => {
  if (!nativeDir || !fs.existsSync(path.join(nativeDir, 'examples/teach_scalar'))) return 'skipped';
  const text = execFileSync(path.join(nativeDir, 'examples/teach_scalar'), {encoding: 'utf8'});
  nb.scope(() => {
    const t = neuron(nb);
    let rows = 0;
    for (const m of text.matchAll(/^ {2}(\S+)\s+value (\S+) {2}grad (\S+)$/gm)) {
      near(t[m[1]].item(), Number(m[2]), m[1] + ' value');
      near(t[m[1]].grad[0], Number(m[3]), m[1] + ' grad');
      rows++;
    }
    assert.strictEqual(rows, 10);
  });
  const seed = execFileSync(path.join(nativeDir, 'examples/seed_self_attention'), {encoding: 'utf8'});
  const printed = nb.scope(() => selfAttention(nb));
  let at = 0;
  for (const p of printed) {
    const k = seed.indexOf(p, at);
    assert(k >= 0, 'the native example does not print\n' + p);
    at = k + p.length;
  }
  return null;
});

/* ---- gradcheck, errors, dtypes -------------------------------------------------- */

test('gradcheck passes an MLP with softmax, layer_norm and cross-entropy', nb => nb.scope(() => {
  const x = nb.randn([4, 3], 1, {dtype: 'float64', requiresGrad: true});
  const w = nb.randn([5, 3], 2, {dtype: 'float64', requiresGrad: true});
  const g = nb.randn([5], 3, {dtype: 'float64', requiresGrad: true});
  const f = (x, w, g) => x.linear(w).gelu().layerNorm(g, null).softmax().log().crossEntropy([0, 2, 4, 1]);
  const r = nb.gradcheck(f, [x, w, g]);
  assert.strictEqual(r.passed, true, r.message);
  assert(r.maxAbsErr < 1e-6, 'max error ' + r.maxAbsErr);
  assert(/^gradcheck: passed/.test(r.message), r.message);
  const attn = (a, b) => a.matmul(b.T).causalMask().softmax().sum(0).pow(2).sum();
  const fast = nb.gradcheck(attn, [x, w], {fast: true});
  assert.strictEqual(fast.passed, true, fast.message);
}));

test('a failing gradcheck returns passed false with its message', nb => nb.scope(() => {
  const x = nb.randn([3], 6, {dtype: 'float64', requiresGrad: true});
  let calls = 0; /* a forward that changes between calls: the differences disagree */
  const r = nb.gradcheck(a => a.mul(1 + 0.01 * (calls++ % 3)).sum(), [x]);
  assert.strictEqual(r.passed, false);
  assert(r.maxAbsErr > 1e-3, 'max error ' + r.maxAbsErr);
  assert(/d out\[0\] \/ d input 0/.test(r.message), r.message);
  assert.strictEqual(r.blameOp, 'scale'); /* the op that read the changing factor */
}));

test('gradcheck rethrows what the function threw', nb => nb.scope(() => {
  const x = nb.randn([2, 2], 4, {dtype: 'float64', requiresGrad: true});
  assert.throws(() => nb.gradcheck(a => { throw new TypeError('student typo'); }, [x]),
                e => e instanceof TypeError && e.message === 'student typo');
  assert.throws(() => nb.gradcheck(a => a.matmul(nb.ones([3, 3], {dtype: 'float64'})), [x]),
                e => e instanceof nb.NablaError && /^matmul: \(2, 2\) @ \(3, 3\)/.test(e.message));
  assert.strictEqual(nb.gradcheck(a => a.tanh().sum(), [x]).passed, true); /* usable after */
}));

test("a shape mismatch throws the library's message and the context stays usable", nb => nb.scope(() => {
  const a = nb.ones([2, 3]), b = nb.ones([2, 3]);
  assert.throws(() => a.matmul(b), e => e instanceof nb.NablaError && e.status === 2 &&
    e.message.startsWith('matmul: (2, 3) @ (2, 3): inner dims 3 and 2 differ'));
  assert.throws(() => a.add(nb.ones([4])), e => /^add: /.test(e.message) && /\(2, 3\)/.test(e.message));
  assert.throws(() => a.crossEntropy([0, 7]), e => e.status === 5 && /cross_entropy/.test(e.message));
  assert.throws(() => nb.tensor([[1, 2], [3]]), /ragged/);
  assert.throws(() => a.softmax(0), /only the last dim/);
  assert.deepStrictEqual(a.matmul(b.T).data, [3, 3, 3, 3]);
}));

test('a tensor of an ended scope throws instead of reading freed memory', nb => {
  const t = nb.scope(() => nb.ones([2]));
  assert.throws(() => t.data, /used after its scope ended/);
  assert.throws(() => nb.scope(() => t.add(1)), /used after its scope ended/);
});

test('both dtypes, int64 targets, shapes and views', nb => nb.scope(() => {
  const x32 = nb.tensor([[1, 2, 3], [4, 5, 6]]);
  const x64 = x32.to('float64');
  assert.strictEqual(x32.dtype, 'float32');
  assert.strictEqual(x64.dtype, 'float64');
  assert.deepStrictEqual(x64.shape, [2, 3]);
  assert.deepStrictEqual(x64.T.tolist(), [[1, 4], [2, 5], [3, 6]]);
  assert.deepStrictEqual(x64.permute(1, 0).data, [1, 4, 2, 5, 3, 6]);
  assert.deepStrictEqual(x64.sum(1).data, [6, 15]);
  assert.deepStrictEqual(x64.mean(0, true).shape, [1, 3]);
  assert.deepStrictEqual(x64.max(1).data, [3, 6]);
  assert.deepStrictEqual(nb.cat([x64, x64], 0).shape, [4, 3]);
  assert.strictEqual(nb.relu(nb.tensor([-1, 2], {dtype: 'float64'})).data[1], 2);
  const y = nb.tensor([2, 0], {dtype: 'int64'});
  assert.deepStrictEqual(y.data, [2, 0]);
  const logits = nb.tensor([[0, 0, 0], [0, 0, 0]], {dtype: 'float64', requiresGrad: true});
  const loss = logits.crossEntropy(y);
  assert(Math.abs(loss.item() - Math.log(3)) < 1e-15);
  loss.backward();
  assert(Math.abs(logits.grad[2] - (1 / 3 - 1) / 2) < 1e-15);
  const r = nb.randn([1000], 7);
  const mean = r.mean().item(), v = r.sub(mean).pow(2).mean().item();
  assert(Math.abs(mean) < 0.1 && Math.abs(v - 1) < 0.15, 'randn mean ' + mean + ' var ' + v);
  assert.deepStrictEqual(nb.randn([3], 7).data, nb.randn([3], 7).data);
  const d = nb.ones([1000]).dropout(0.5, {seed: 3}).data;
  const kept = d.filter(v => v === 2).length;
  assert(kept > 400 && kept < 600 && d.every(v => v === 0 || v === 2));
  const json = JSON.parse(nb.tapeJSON(loss));
  assert.strictEqual(json.nodes.length, 1);
  assert.strictEqual(json.nodes[0].op, 'cross_entropy');
  assert.deepStrictEqual(json.tensors[json.nodes[0].inputs[0]].grad, logits.grad);
}));

/* ---- modules, optimizers, training --------------------------------------------- */

/* tools/wasm/train_step_ref.c's model, built here from the same seeds: the
 * seed's MultiHeadAttention (composed ops), tanh, Linear; Adam 3 steps,
 * then SGD with momentum 2 steps; the losses and the parameters after. */
function trainRun(nb) {
  const out = {losses: [], params: {}};
  nb.scope(() => {
    nb.manualSeed(7, 1);
    const mha = new nb.MultiHeadAttention(3, 4, 6, 0.0, 2, {dtype: 'float64'});
    const head = new nb.Linear(4, 3, {dtype: 'float64'});
    const x = nb.randn([2, 6, 3], 5, {dtype: 'float64'});
    const y = nb.tensor(Array.from({length: 12}, (_, i) => (i * 7) % 3), {dtype: 'int64'});
    const adam = new nb.Adam([mha, head], {lr: 1e-2});
    const sgd = new nb.SGD([mha, head], {lr: 0.1, momentum: 0.9});
    for (let s = 0; s < 5; s++) {
      const opt = s < 3 ? adam : sgd;
      opt.zeroGrad();
      const loss = nb.scope(() => {
        const l = head.forward(mha.forward(x).tanh()).reshape(12, 3).crossEntropy(y);
        l.backward();
        return l.item();
      });
      out.losses.push(loss);
      opt.step();
    }
    for (const [prefix, m] of [['mha', mha], ['head', head]])
      for (const {name, tensor} of m.namedParameters()) out.params[prefix + '.' + name] = tensor.data;
  });
  return out;
}

test('a float64 training run (Adam, then SGD with momentum) equals the native one', nb => {
  const ref = nativeDir && path.join(nativeDir, 'wasm-ref/train_step_ref');
  if (!ref || !fs.existsSync(ref)) return 'skipped: no ' + ref;
  const text = execFileSync(ref, {encoding: 'utf8'});
  const run = trainRun(nb);
  let worst = 0, n = 0;
  const cmp = (a, b, what) => {
    const rel = Math.abs(a - b) / Math.max(1, Math.abs(b));
    assert(rel <= 1e-13, what + ': wasm ' + a + ', native ' + b);
    worst = Math.max(worst, rel);
    n++;
  };
  for (const m of text.matchAll(/^loss (\d) (\S+)$/gm)) cmp(run.losses[+m[1]], Number(m[2]), 'loss ' + m[1]);
  for (const m of text.matchAll(/^param (\S+) (.*)$/gm)) {
    const want = m[2].split(' ').map(Number), got = run.params[m[1]];
    assert(got && got.length === want.length, m[1] + ': ' + (got && got.length) + ' values');
    want.forEach((v, i) => cmp(got[i], v, m[1] + '[' + i + ']'));
  }
  assert.strictEqual(n, 5 + Object.values(run.params).reduce((a, p) => a + p.length, 0));
  assert(run.losses[4] < run.losses[0], 'the loss went down: ' + run.losses);
  return n + ' numbers, worst relative difference ' + worst.toExponential(1);
});

test('modules: shapes, names, dropout, train/eval, errors', nb => nb.scope(() => {
  nb.manualSeed(1);
  const lin = new nb.Linear(3, 2);
  assert.deepStrictEqual(lin.weight.shape, [2, 3]);
  assert.deepStrictEqual(lin.namedParameters().map(p => p.name), ['weight', 'bias']);
  const bound = 1 / Math.sqrt(3);
  assert(lin.weight.data.every(v => Math.abs(v) <= bound), 'U(-1/sqrt(in), 1/sqrt(in))');
  const x = nb.ones([4, 3]);
  const y = lin.forward(x);
  assert.deepStrictEqual(y.shape, [4, 2]);
  const w = lin.weight.data, b = lin.bias.data;
  assert(Math.abs(y.data[1] - (w[3] + w[4] + w[5] + b[1])) < 1e-6);
  const drop = new nb.Dropout(0.5, {generator: nb.Generator(3)});
  const d = drop.forward(nb.ones([1000])).data;
  assert(d.every(v => v === 0 || v === 2) && d.filter(v => v === 2).length > 400);
  drop.eval();
  assert.deepStrictEqual(drop.forward(nb.ones([3])).data, [1, 1, 1]);
  const mha = new nb.MultiHeadAttention(3, 4, 6, 0.1, 2);
  assert.deepStrictEqual(mha.namedParameters().map(p => p.name),
    ['W_query.weight', 'W_key.weight', 'W_value.weight', 'out_proj.weight', 'out_proj.bias']);
  assert.deepStrictEqual(mha.forward(nb.randn([2, 5, 3], 1)).shape, [2, 5, 4]);
  assert.throws(() => new nb.MultiHeadAttention(3, 5, 6, 0, 2), e => e instanceof nb.NablaError &&
    /MultiHeadAttention: d_out 5 is not divisible by num_heads 2/.test(e.message));
  assert.throws(() => mha.forward(nb.randn([2, 7, 3], 1)), /context_length/);
  assert.throws(() => new nb.SGD([lin], {}), /learning rate/);
  const gpt = new nb.GPT({vocabSize: 11, contextLength: 8, embDim: 16, nHeads: 2, nLayers: 2});
  const ids = [[1, 2, 3, 4], [5, 6, 7, 8]];
  const loss = gpt.loss(ids, [[2, 3, 4, 5], [6, 7, 8, 9]]);
  assert(Math.abs(loss.item() - Math.log(11)) < 0.5, 'an untrained GPT is near log(V): ' + loss.item());
  assert.deepStrictEqual(gpt.forward(ids).shape, [2, 4, 11]);
  const opt = new nb.AdamW(gpt, {lr: 1e-2});
  const first = loss.item();
  loss.backward();
  opt.step();
  assert(gpt.loss(ids, [[2, 3, 4, 5], [6, 7, 8, 9]]).item() < first);
}));

test('modules and optimizers are released with their scope', nb => {
  const cycle = () => nb.scope(() => {
    const m = new nb.MultiHeadAttention(8, 8, 4, 0.1, 2, {generator: nb.Generator(1)});
    const opt = new nb.Adam(m, {lr: 1e-3});
    m.forward(nb.randn([1, 4, 8], 2)).sum().backward();
    opt.step();
  });
  for (let i = 0; i < 10; i++) cycle();
  const heap0 = nb.heapBytes();
  for (let i = 0; i < 300; i++) cycle();
  assert.strictEqual(nb.heapBytes(), heap0);
});

test("the explorer's page model: steps and a passing check on every op, leaves replayed", nb => {
  nb.reset();
  const forward = () => {
    const x = nb.tensor([[0.5, -1, 2]], {dtype: 'float64', requiresGrad: true, name: 'x'});
    const lin = new nb.Linear(3, 2, {dtype: 'float64', generator: nb.Generator(4)});
    const drop = new nb.Dropout(0.3, {generator: nb.Generator(9)});
    return drop.forward(lin.forward(x).tanh()).sum();
  };
  const {value: root, made} = nb.record(forward);
  root.backward();
  const page = JSON.parse(nb.pageJSON(root, () => nb.replay(made, forward)));
  assert(page.nodes.length >= 4, page.nodes.length + ' nodes');
  for (const n of page.nodes) {
    assert(n.sends, 'node ' + n.op + ' has its sends');
    assert(n.check && n.check.passed, 'node ' + n.op + ' check ' + JSON.stringify(n.check));
  }
  nb.reset();
});

/* ---- memory ---------------------------------------------------------------- */

test('1000 build/backward/release cycles keep the heap flat', nb => {
  const w = nb.randn([16, 8], 5, {requiresGrad: true});
  const cycle = i => nb.scope(() => {
    const x = nb.randn([4, 8], i);
    const h = x.matmul(w.T).tanh().layerNorm().softmax();
    const loss = h.crossEntropy([1, 2, 3, 4]).add(h.mseLoss(nb.zeros([4, 16])));
    loss.backward();
    return loss.item();
  });
  for (let i = 0; i < 20; i++) cycle(i);
  const heap0 = nb.heapBytes(), mem0 = nb.memoryBytes();
  for (let i = 0; i < 1000; i++) cycle(i);
  const heap1 = nb.heapBytes(), mem1 = nb.memoryBytes();
  assert.strictEqual(heap1, heap0, 'heap in use went from ' + heap0 + ' to ' + heap1 + ' bytes');
  assert.strictEqual(mem1, mem0, 'wasm memory went from ' + mem0 + ' to ' + mem1 + ' bytes');
  /* errors in the loop release too */
  for (let i = 0; i < 100; i++) {
    try { nb.scope(() => nb.ones([2, 3]).matmul(nb.ones([2, 3]))); } catch (e) { /* expected */ }
  }
  assert.strictEqual(nb.heapBytes(), heap0);
  return 'heap ' + heap0 + ' bytes in use, memory ' + mem0 + ' bytes';
});

/* ---- run ---------------------------------------------------------------------- */

const t0 = Date.now();
require(modulePath)().then(nb => {
  const loaded = Date.now() - t0;
  let failed = 0;
  for (const {name, fn} of tests) {
    const s = Date.now();
    try {
      const note = fn(nb);
      console.log('ok   ' + name + (note ? ' (' + note + ')' : '') + ' [' + (Date.now() - s) + ' ms]');
    } catch (e) {
      failed++;
      console.log('FAIL ' + name + '\n     ' + String(e && e.stack || e).split('\n').join('\n     '));
    }
  }
  console.log('wasm: ' + (tests.length - failed) + '/' + tests.length + ' passed (load ' + loaded +
              ' ms, all ' + (Date.now() - t0) + ' ms), ' + fs.statSync(modulePath).size + ' bytes');
  process.exit(failed ? 1 : 0);
});
