/* tools/wasm/bench_wasm.js - the reverse-digits model's training step in
 * nabla.js (the WebAssembly build, one thread), as tools/bench/nabla-bench.c
 * times it natively ("demo step"): the model of examples/reverse_model.h
 * (B 32, T 16, d 32, 4 heads, attention dropout 0.1, fused attention),
 * cross-entropy on the answer positions, backward, AdamW 3e-3. Prints the
 * median over 5 rounds of about a second each of the time per step, after
 * 20 warm-up steps, in microseconds:
 *
 *   node tools/wasm/bench_wasm.js build/wasm/nabla.js     (make bench-wasm) */
'use strict';
const path = require('path');

const N = 8, T = 2 * N, B = 32, D = 32, HEADS = 4, V = 11, SEP = 10;
const ROUNDS = 5, ROUND_MS = 1000;

require(path.resolve(process.argv[2] || 'build/wasm/nabla.js'))().then(nb => {
  nb.setDefaultDtype('float32');
  nb.manualSeed(42, 1);
  const tok = new nb.Embedding(V, D), pos = new nb.Embedding(T, D);
  const attn = new nb.MultiHeadAttention(D, D, T, 0.1, HEADS, {fused: true});
  const norm = new nb.LayerNorm(D), head = new nb.Linear(D, V);
  const model = [tok, pos, attn, norm, head];
  const opt = new nb.AdamW(model, {lr: 3e-3});
  const data = nb.Generator(42, 2);
  const positions = nb.tensor(Array.from({length: T}, (_, t) => t), {dtype: 'int64'});
  const ids = new Array(B * T), targets = new Array(B * N);
  function step() {
    for (let b = 0; b < B; b++) { /* reverse_make_batch */
      const row = b * T;
      for (let i = 0; i < N; i++) ids[row + i] = data.randint(10);
      ids[row + N] = SEP;
      for (let j = 0; j < N; j++) targets[b * N + j] = ids[row + N - 1 - j];
      for (let j = 0; j + 1 < N; j++) ids[row + N + 1 + j] = targets[b * N + j];
    }
    return nb.scope(() => {
      const x = tok.forward(nb.tensor(ids, {shape: [B, T], dtype: 'int64'})).add(pos.forward(positions));
      const logits = head.forward(norm.forward(x.add(attn.forward(x))));
      const loss = logits.split([N, N], 1)[1].reshape(B * N, V)
        .crossEntropy(nb.tensor(targets, {dtype: 'int64'}));
      opt.zeroGrad();
      loss.backward();
      opt.step();
      return loss.item();
    });
  }
  for (let i = 0; i < 20; i++) step();
  const per = [];
  for (let k = 0; k < ROUNDS; k++) {
    let steps = 0;
    const t0 = process.hrtime.bigint();
    let t = t0;
    while (Number(t - t0) < ROUND_MS * 1e6) {
      step();
      steps++;
      t = process.hrtime.bigint();
    }
    per.push(Number(t - t0) / 1e3 / steps);
  }
  per.sort((a, b) => a - b);
  const loss = step();
  console.log(per[ROUNDS >> 1].toFixed(2) + (Number.isFinite(loss) ? '' : ' (loss not finite)'));
});
