"use strict";
/* tools/wasm/playground.js - the playground's script (docs/playground.html,
 * made by tools/wasm/make_playground.py): the code box is the body of a
 * function of (nb, print) in nabla.js's API that returns the tensor to
 * explore; Run builds its tape in the page's wasm and shows it in the tape
 * explorer beside the code (backward steps, formulas, per-op checks). Code
 * that returns {step, diagnostics} trains live instead, in slices of
 * about 30 ms so the page stays responsive, with the loss curve and the
 * diagnostics page refreshed as it goes. window.pg is what make
 * test-browser reads. */
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var MAX_CHECKED_OPS = 60;  /* per-op checks run the forward twice per entry */
  var SLICE_MS = 30;         /* training runs this long, then yields to the page */
  var DIAG_EVERY = 20;       /* steps between diagnostics pages */
  var nb = null, training = null, replaying = false;

  /* ---- presets ------------------------------------------------------------ */

  var INPUTS = "const inputs = nb.tensor([\n" +
    "  [0.43, 0.15, 0.89], // Your     (x^1)\n" +
    "  [0.55, 0.87, 0.66], // journey  (x^2)\n" +
    "  [0.57, 0.85, 0.64], // starts   (x^3)\n" +
    "  [0.22, 0.58, 0.33], // with     (x^4)\n" +
    "  [0.77, 0.25, 0.10], // one      (x^5)\n" +
    "  [0.05, 0.80, 0.55], // step     (x^6)\n" +
    "], {name: 'inputs'});\n";
  var SA_WEIGHTS = "// the seed's SelfAttention_v1 weights after torch.manual_seed(123)\n" +
    "const W_query = nb.tensor([[0.296111941, 0.516562283], [0.251670718, 0.68855679], [0.0739724636, 0.866521955]], {requiresGrad: true, name: 'W_query'});\n" +
    "const W_key = nb.tensor([[0.136579871, 0.102479041], [0.184056461, 0.726446748], [0.315253913, 0.687106669]], {requiresGrad: true, name: 'W_key'});\n" +
    "const W_value = nb.tensor([[0.075635314, 0.196638167], [0.316411972, 0.401740134], [0.118568301, 0.82739538]], {requiresGrad: true, name: 'W_value'});\n";

  var PRESETS = [
    {name: "micrograd's neuron", code: [
      "// micrograd's neuron: o = tanh(x1 w1 + x2 w2 + b). Edit it and press Ctrl-Enter.",
      "const leaf = (v, name) => nb.tensor(v, {requiresGrad: true, name});",
      "const x1 = leaf(2.0, 'x1'), x2 = leaf(0.0, 'x2');",
      "const w1 = leaf(-3.0, 'w1'), w2 = leaf(1.0, 'w2');",
      "const b = leaf(6.8813735870195432, 'b');",
      "const n = x1.mul(w1).add(x2.mul(w2)).add(b);",
      "const o = n.tanh();",
      "o.backward();",
      "print('o', o.item());",
      "print('x1.grad', x1.grad[0], ' w1.grad', w1.grad[0]);",
      "print('x2.grad', x2.grad[0], ' w2.grad', w2.grad[0]);",
      "return o;  // the tensor whose tape the explorer shows"].join("\n")},
    {name: "self-attention (seed 001)", code:
      "// Chapter 3's simplified self-attention on \"Your journey starts with one step\"\n" +
      INPUTS + [
      "const scores = inputs.matmul(inputs.T);   // (6, 6) dot products",
      "const weights = scores.softmax(-1);        // each row sums to 1",
      "const context = weights.matmul(inputs);    // (6, 3) context vectors",
      "print('attention weights', weights);",
      "print('context vectors', context);",
      "// and the trainable version, SelfAttention_v1 with the seed's weights",
      SA_WEIGHTS.trim(),
      "const q = inputs.matmul(W_query), k = inputs.matmul(W_key), v = inputs.matmul(W_value);",
      "const w = q.matmul(k.T).mul(1 / Math.sqrt(2)).softmax(-1);",
      "const sa = w.matmul(v);",
      "print('SelfAttention_v1', sa);",
      "return sa;  // the explorer backpropagates ones(6, 2)"].join("\n")},
    {name: "causal attention head with dropout", code:
      "// One causal attention head (seed 003): future tokens masked, dropout on the weights\n" +
      INPUTS + SA_WEIGHTS + [
      "const keys = inputs.matmul(W_key), queries = inputs.matmul(W_query);",
      "const scores = queries.matmul(keys.T).causalMask();  // -inf above the diagonal",
      "const weights = scores.mul(1 / Math.sqrt(2)).softmax(-1);",
      "print('causal attention weights', weights);",
      "const dropout = new nb.Dropout(0.5, {generator: nb.Generator(123)});",
      "const dropped = dropout.forward(weights);  // zeroes half, scales the rest by 2",
      "print('after dropout', dropped);",
      "const context = dropped.matmul(inputs.matmul(W_value));",
      "print('context vectors', context);",
      "return context.sum();"].join("\n")},
    {name: "two-layer MLP on a toy dataset", code: [
      "// micrograd's toy dataset: 4 points in 3-D, targets +-1; Linear-tanh-Linear-tanh",
      "const xs = nb.tensor([[2, 3, -1], [3, -1, 0.5], [0.5, 1, 1], [1, 1, -1]], {name: 'xs'});",
      "const ys = nb.tensor([[1], [-1], [-1], [1]], {name: 'ys'});",
      "nb.manualSeed(1337);",
      "const l1 = new nb.Linear(3, 4), l2 = new nb.Linear(4, 1);",
      "const opt = new nb.SGD([l1, l2], {lr: 0.05});",
      "const model = x => l2.forward(l1.forward(x).tanh()).tanh();",
      "for (let step = 0; step < 30; step++) {   // train in scopes: memory goes back",
      "  const loss = nb.scope(() => {",
      "    const l = model(xs).sub(ys).pow(2).sum();",
      "    opt.zeroGrad(); l.backward(); opt.step();",
      "    return l.item();",
      "  });",
      "  if (step % 10 === 0) print('step', step, 'loss', loss.toFixed(4));",
      "}",
      "opt.zeroGrad();",
      "const loss = model(xs).sub(ys).pow(2).sum();",
      "print('after 30 steps: loss', loss.item().toFixed(4), ' predictions', model(xs).data.map(v => v.toFixed(3)).join(' '));",
      "return loss;"].join("\n")},
    {name: "tiny GPT", code: [
      "// The course's GPTModel, tiny: 1 block, 2 heads, width 16, on 11 tokens",
      "nb.manualSeed(0);",
      "const gpt = new nb.GPT({vocabSize: 11, contextLength: 8, embDim: 16, nHeads: 2, nLayers: 1});",
      "const ids = [[1, 2, 3, 4, 5, 6]];",
      "const targets = [[2, 3, 4, 5, 6, 7]];   // next token",
      "const loss = gpt.loss(ids, targets);",
      "print('loss', loss.item().toFixed(4), '  log(11) =', Math.log(11).toFixed(4), '(an untrained model guesses uniformly)');",
      "return loss;  // fold and unfold the blocks in the explorer"].join("\n")},
    {name: "live training: reverse digits", code: [
      "// The reverse-digits attention model (examples/reverse_model.h) trained live:",
      "// token + position embeddings -> causal MultiHeadAttention (+ residual)",
      "// -> LayerNorm -> Linear over the 10 digits and the separator.",
      "//   input  7 3 9 0 4 4 1 8 | 8 1 4 4 0 9 3     target 8 1 4 4 0 9 3 7",
      "nb.setDefaultDtype('float32');",
      "nb.manualSeed(42, 1);",
      "const N = 8, T = 2 * N, B = 32, D = 32, V = 11, SEP = 10;",
      "const tok = new nb.Embedding(V, D), pos = new nb.Embedding(T, D);",
      "const attn = new nb.MultiHeadAttention(D, D, T, 0.1, 4, {fused: true});",
      "const norm = new nb.LayerNorm(D), head = new nb.Linear(D, V);",
      "const model = [tok, pos, attn, norm, head];",
      "const opt = new nb.AdamW(model, {lr: 3e-3});",
      "const diagnostics = new nb.Diagnostics(model, {every: 20});",
      "const data = nb.Generator(42, 2);",
      "function batch() {",
      "  const ids = [], targets = [];",
      "  for (let b = 0; b < B; b++) {",
      "    const src = Array.from({length: N}, () => data.randint(10));",
      "    const rev = src.slice().reverse();",
      "    ids.push(src.concat([SEP], rev.slice(0, N - 1)));",
      "    targets.push(...rev);",
      "  }",
      "  return {ids: nb.tensor(ids, {dtype: 'int64'}), targets: nb.tensor(targets, {dtype: 'int64'})};",
      "}",
      "const positions = Array.from({length: T}, (_, t) => t);",
      "// one step: forward, cross-entropy on the answer positions, backward, AdamW",
      "function step(i) {",
      "  return nb.scope(() => {",
      "    const {ids, targets} = batch();",
      "    const x = tok.forward(ids).add(pos.forward(positions));",
      "    const logits = head.forward(norm.forward(x.add(attn.forward(x))));",
      "    const answer = logits.split([N, N], 1)[1].reshape(B * N, V);",
      "    const loss = answer.crossEntropy(targets);",
      "    opt.zeroGrad(); loss.backward(); opt.step();",
      "    diagnostics.step(i, loss);",
      "    return loss.item();",
      "  });",
      "}",
      "return {step, diagnostics, steps: 600};  // Stop ends it early"].join("\n")},
    {name: "live training: character GPT on your text", text: true, code: [
      "// A character-level GPT trained on the text below the code (paste your own).",
      "nb.setDefaultDtype('float32');",
      "nb.manualSeed(7);",
      "const chars = Array.from(new Set(text)).sort(), V = chars.length;",
      "const id = new Map(chars.map((c, i) => [c, i]));",
      "const data = Array.from(text, c => id.get(c));",
      "const T = 16, B = 16;",
      "if (data.length < T + 2) throw new Error('paste at least ' + (T + 2) + ' characters of text');",
      "const gpt = new nb.GPT({vocabSize: V, contextLength: T, embDim: 32, nHeads: 4, nLayers: 2});",
      "const opt = new nb.AdamW(gpt, {lr: 3e-3});",
      "const diagnostics = new nb.Diagnostics(gpt, {every: 20});",
      "const rng = nb.Generator(1);",
      "function step(i) {",
      "  const ids = [], targets = [];",
      "  for (let b = 0; b < B; b++) {",
      "    const at = rng.randint(data.length - T - 1);",
      "    ids.push(data.slice(at, at + T));",
      "    targets.push(data.slice(at + 1, at + T + 1));",
      "  }",
      "  return nb.scope(() => {",
      "    const loss = gpt.loss(ids, targets);",
      "    opt.zeroGrad(); loss.backward(); opt.step();",
      "    diagnostics.step(i, loss);",
      "    return loss.item();",
      "  });",
      "}",
      "print(V + ' distinct characters; an untrained model is near log(V) = ' + Math.log(V).toFixed(3));",
      "return {step, diagnostics, steps: 400};"].join("\n")},
  ];
  var SAMPLE_TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n" +
    "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n";

  /* ---- output ------------------------------------------------------------- */

  function show(v) {
    if (v instanceof nb.Tensor) return "\n" + String(v);
    if (typeof v === "number") return String(v);
    return typeof v === "string" ? v : JSON.stringify(v);
  }
  function print() {
    if (replaying) return;
    $("pg-out").textContent += Array.prototype.map.call(arguments, show).join(" ") + "\n";
  }
  function status(s) { $("pg-status").textContent = s; }
  function showError(e) {
    var what = e && e.name === "NablaError" ? "nabla: " : e && e.name ? e.name + ": " : "";
    var msg = e && e.message !== undefined ? e.message : String(e);
    var at = e && e.stack ? /<anonymous>:(\d+):(\d+)/.exec(e.stack) : null;
    /* new Function's body starts on line 3 of its source */
    var line = at ? " (line " + (Number(at[1]) - 2) + ")" : "";
    $("pg-error").textContent = what + msg + line;
    $("pg-error").className = "pg-shown";
  }
  function clearError() {
    $("pg-error").textContent = "";
    $("pg-error").className = "";
  }

  /* ---- the explorer ------------------------------------------------------- */

  /* The explorer's page (nb_tape_html's parts, embedded by make_playground)
   * around the model; "</" escaped so nothing in it ends the script. */
  function explorerPage(json) {
    return EXPLORER.head + json.replace(/<\//g, "<\\/") + "<\/script>\n<script>\n" + EXPLORER.script +
      "<\/script>\n</body></html>\n";
  }
  function showPage(frame, html, then) {
    frame.onload = then || null;
    frame.srcdoc = html;
  }
  /* The model in the explorer: loaded once, then handed to its nbExplore
   * (no page load, so a Run shows its graph at once); then() when shown. */
  var explorerLoaded = false;
  function showExplorer(json, then) {
    var f = $("pg-explorer"), w = f.contentWindow;
    if (explorerLoaded && w && w.nbExplore) {
      try {
        w.nbExplore(json);
        requestAnimationFrame(function () { then(); }); /* shown: the frame that paints it */
        return;
      } catch (e) { /* the page went wrong: load it afresh */ }
    }
    explorerLoaded = false;
    showPage(f, explorerPage(json), function () { explorerLoaded = true; then(); });
  }

  /* ---- Run ---------------------------------------------------------------- */

  function stopTraining(why) {
    if (!training) return;
    training.stopped = true;
    clearTimeout(training.timer);
    training = null;
    $("pg-stop").disabled = true;
    if (why) status(why);
  }

  function run() {
    var t0 = performance.now();
    stopTraining();
    clearError();
    $("pg-train").className = "";
    $("pg-explorer").className = "";
    $("pg-out").textContent = "";
    nb.reset();
    nb.setDefaultDtype("float64"); /* the per-op checks are float64 */
    nb.manualSeed(0);
    var fn, code = $("pg-code").value, text = $("pg-text").value;
    try {
      fn = new Function("nb", "print", "text", code);
    } catch (e) {
      showError(e);
      status("syntax error: nothing ran");
      pg.runs++;
      return false;
    }
    var forward = function () { return fn(nb, print, text); };
    var rec;
    try {
      rec = nb.record(forward);
      var root = rec.value;
      if (root && typeof root.step === "function") return startTraining(root, t0);
      if (!(root instanceof nb.Tensor))
        throw new Error("return the tensor to explore (for example: return loss;), or {step} to train");
      /* backward from the root unless the code ran it (its gradient is there) */
      if (!root.grad) root.backward(root.numel === 1 ? undefined : nb.ones(root.shape, {dtype: root.dtype}));
      var recorded = nb.tapeLength(root); /* root's tape and any ops after it */
      var check = $("pg-check").checked && recorded <= MAX_CHECKED_OPS;
      var t1 = performance.now();
      var json = nb.pageJSON(root, check ? function () {
        replaying = true;
        try { return nb.replay(rec.made, forward); } finally { replaying = false; }
      } : null);
      var t2 = performance.now();
      showExplorer(json, function () {
        var t3 = performance.now(), ops = $("pg-explorer").contentWindow.nbTape.nodes;
        pg.ops = ops;
        pg.lastShownMs = t3 - t0;
        status(ops + " ops; ran in " + (t1 - t0).toFixed(0) + " ms, " + (check ? "checked" : "model") +
               " in " + (t2 - t1).toFixed(0) + " ms, shown in " + (t3 - t0).toFixed(0) + " ms" +
               (check || !$("pg-check").checked ? "" : " (over " + MAX_CHECKED_OPS + " ops: not checked)"));
        pg.shown++;
      });
    } catch (e) {
      showError(e);
      status("error: the page is ready for the next Run");
      nb.reset();
    }
    pg.runs++;
    return true;
  }

  /* ---- live training ------------------------------------------------------ */

  function drawLoss(losses) {
    var c = $("pg-loss"), g = c.getContext("2d"), w = c.width, h = c.height, pad = 34;
    g.clearRect(0, 0, w, h);
    if (!losses.length) return;
    var lo = Math.min.apply(null, losses), hi = Math.max.apply(null, losses);
    if (hi - lo < 1e-9) hi = lo + 1;
    g.strokeStyle = "#bbb";
    g.strokeRect(pad, 6, w - pad - 6, h - pad);
    g.fillStyle = "#555";
    g.font = "10px monospace";
    g.fillText(hi.toFixed(2), 2, 12);
    g.fillText(lo.toFixed(2), 2, h - pad + 4);
    g.fillText("step " + losses.length, w - 70, h - 12);
    g.strokeStyle = "#36c";
    g.beginPath();
    for (var i = 0; i < losses.length; i++) {
      var x = pad + (w - pad - 6) * (losses.length > 1 ? i / (losses.length - 1) : 0);
      var y = 6 + (h - pad) * (1 - (losses[i] - lo) / (hi - lo));
      if (i) g.lineTo(x, y); else g.moveTo(x, y);
    }
    g.stroke();
  }

  function startTraining(job, t0) {
    var tr = training = {losses: [], step: 0, max: job.steps || 500, stopped: false, timer: 0};
    pg.losses = tr.losses;
    $("pg-train").className = "pg-shown";
    $("pg-stop").disabled = false;
    $("pg-explorer").className = "pg-hidden";
    $("pg-diag").srcdoc = "<p style='font:14px system-ui;padding:10px'>The diagnostics (activation and " +
      "gradient histograms, update-to-data ratios) appear after " + DIAG_EVERY + " steps.</p>";
    function slice() {
      if (tr.stopped) return;
      var end = performance.now() + SLICE_MS;
      try {
        while (performance.now() < end && tr.step < tr.max) {
          tr.losses.push(job.step(tr.step));
          tr.step++;
          if (job.diagnostics && tr.step % DIAG_EVERY === 0) {
            showPage($("pg-diag"), job.diagnostics.html());
            pg.diagPages++;
          }
        }
      } catch (e) {
        showError(e);
        stopTraining("training stopped by an error");
        return;
      }
      drawLoss(tr.losses);
      $("pg-steps").textContent = "step " + tr.step + ", loss " + tr.losses[tr.losses.length - 1].toFixed(4);
      pg.trainSteps = tr.step;
      if (tr.step >= tr.max) {
        stopTraining("trained " + tr.step + " steps in " + ((performance.now() - t0) / 1000).toFixed(1) + " s");
        return;
      }
      tr.timer = setTimeout(slice, 0);
    }
    status("training...");
    tr.timer = setTimeout(slice, 0);
    pg.runs++;
    return true;
  }

  /* ---- wiring ------------------------------------------------------------- */

  function loadPreset(i) {
    var p = PRESETS[i];
    $("pg-code").value = p.code;
    $("pg-text").style.display = p.text ? "block" : "none";
    if (p.text && !$("pg-text").value) $("pg-text").value = SAMPLE_TEXT;
  }

  var pg = window.pg = {runs: 0, shown: 0, diagPages: 0, ops: 0, lastShownMs: 0, losses: [], trainSteps: 0,
                        presets: PRESETS.map(function (p) { return p.name; }), run: run,
                        presetCode: function (name) {
                          return PRESETS.filter(function (p) { return p.name === name; })[0].code;
                        },
                        stop: function () { stopTraining("stopped"); }, nb: null};

  PRESETS.forEach(function (p, i) {
    var o = document.createElement("option");
    o.value = i;
    o.textContent = p.name;
    $("pg-preset").appendChild(o);
  });
  $("pg-preset").onchange = function () { loadPreset(Number(this.value)); run(); };
  $("pg-run").onclick = run;
  $("pg-stop").onclick = pg.stop;
  $("pg-code").addEventListener("keydown", function (e) {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(); }
    if (e.key === "Tab") { /* two spaces, not the next control */
      e.preventDefault();
      var t = e.target, s = t.selectionStart;
      t.value = t.value.slice(0, s) + "  " + t.value.slice(t.selectionEnd);
      t.selectionStart = t.selectionEnd = s + 2;
    }
  });

  status("loading the WebAssembly module...");
  nablaModule().then(function (m) {
    nb = pg.nb = m;
    /* each op's site: the line of the code box that made it (new Function's
     * body starts on line 3 of its source) */
    nb.setSiteHook(function () {
      var at = /<anonymous>:(\d+):\d+/.exec(new Error().stack || "");
      return at ? Number(at[1]) - 2 : 0;
    });
    /* "open this in the playground" from an explorer page: #code=... */
    var h = /^#code=(.*)$/.exec(location.hash);
    if (h) $("pg-code").value = decodeURIComponent(h[1]); else loadPreset(0);
    pg.ready = true;
    run();
  });
})();
