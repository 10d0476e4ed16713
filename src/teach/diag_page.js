"use strict";
/* teach/diag_page.js - the training-diagnostics page (nb_diag_write_html),
 * embedded by tools/teach/embed_page.py. Each plot is a div.nb-plot with
 * data-plot and its series as path.nb-line (what make test-browser counts). */
(function () {
  var all = JSON.parse(document.getElementById("nb-diag").textContent);
  var recs = all.filter(function (r) { return r.step !== undefined; });
  var evals = all.filter(function (r) { return r.eval !== undefined; });
  var SVGNS = "http://www.w3.org/2000/svg";
  function num(v) { return v === null ? NaN : typeof v === "string" ? Number(v) : v; }
  /* 3 digits: 0.0123, 412, 5.09e-6, 1.2e+5 */
  function fmt(v) {
    if (!isFinite(v)) return String(v);
    var a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2).replace(/\.?0+e/, "e").replace("e+", "e");
    return String(Number(v.toPrecision(3)));
  }
  /* ---- colour by position in the model: a series' layer (the number in
   * its name: transformer.h.3..., trf_blocks.3...) picks the colour along
   * one scale, first layer blue to last red; what it is in the layer
   * (attn.c_attn.weight, mlp gelu) picks the dash. Outside the layers
   * (embeddings, the head): a grey each, solid. */
  var DASHES = ["", "7 3", "2 2", "9 3 2 3", "4 4", "1 3", "12 3 3 3 3 3", "6 2 1 2 1 2"];
  var GREYS = ["#888", "#555", "#bbb", "#777", "#aaa", "#666"]; /* lighter than the kinds key (#333) */
  function layerOf(name) { var m = /\.(\d+)(?:[. ]|$)/.exec(name); return m ? Number(m[1]) : -1; }
  function kindOf(name) { return name.replace(/^.*?\.\d+(?:[. ]|$)/, "").replace(/ #\d+$/, "") || name; }
  function layerColour(l, layers) {
    return "hsl(" + Math.round(layers > 1 ? 230 - 230 * l / (layers - 1) : 230) + ", 75%, 42%)";
  }
  function styles(names) {
    var layers = 0, kinds = [], outside = [], out = {};
    names.forEach(function (n) { layers = Math.max(layers, layerOf(n) + 1); });
    names.forEach(function (n) {
      if (layerOf(n) < 0) { if (outside.indexOf(n) < 0) outside.push(n); }
      else if (kinds.indexOf(kindOf(n)) < 0) kinds.push(kindOf(n));
    });
    names.forEach(function (n) {
      var l = layerOf(n);
      out[n] = l < 0 ? { colour: GREYS[outside.indexOf(n) % GREYS.length], dash: "" }
                     : { colour: layerColour(l, layers), dash: DASHES[kinds.indexOf(kindOf(n)) % DASHES.length] };
    });
    return { of: out, layers: layers, kinds: kinds, outside: outside };
  }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svg(tag, attrs) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }
  /* one plot: series [{name, xs, ys}], a dashed reference line at y = ref */
  function plot(id, title, note, series, opts) {
    opts = opts || {};
    var box = el("div", { "class": "nb-plot", "data-plot": id, id: "nb-plot-" + id });
    box.appendChild(el("h2", {}, title));
    box.appendChild(el("div", { "class": "nb-note" }, note));
    var W = 600, H = 200, L = 48, R = 8, T = 8, B = 22;
    var s = svg("svg", { viewBox: "0 0 " + W + " " + H, preserveAspectRatio: "none" });
    var xs = [], ys = [];
    series.forEach(function (sr) {
      sr.xs.forEach(function (x, i) { if (isFinite(sr.ys[i])) { xs.push(x); ys.push(sr.ys[i]); } });
    });
    if (opts.ref !== undefined) ys.push(opts.ref);
    if (opts.ymin !== undefined) ys.push(opts.ymin);
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (!xs.length) { x0 = 0; x1 = 1; y0 = 0; y1 = 1; }
    if (x1 === x0) { x1 = x0 + 1; }
    if (y1 === y0) { if (opts.ymin === y0) y1 = y0 + 1; else { y1 = y0 + 1; y0 -= 1; } }
    function px(x) { return L + (x - x0) / (x1 - x0) * (W - L - R); }
    function py(y) { return T + (1 - (y - y0) / (y1 - y0)) * (H - T - B); }
    s.appendChild(svg("path", { "class": "nb-axis", d: "M" + L + "," + T + " V" + (H - B) + " H" + (W - R) }));
    [[y0, H - B], [y1, T + 8], [(y0 + y1) / 2, (T + H - B) / 2]].forEach(function (t) {
      var e = svg("text", { x: 2, y: t[1] }); e.textContent = fmt(t[0]); s.appendChild(e);
    });
    [[x0, L, "start"], [x1, W - R, "end"]].forEach(function (t) {
      var e = svg("text", { x: t[1], y: H - 6, "text-anchor": t[2] }); e.textContent = (opts.xname || "") + fmt(t[0]); s.appendChild(e);
    });
    if (opts.ref !== undefined)
      s.appendChild(svg("path", { "class": "nb-ref", d: "M" + L + "," + py(opts.ref) + " H" + (W - R) }));
    var legend = el("div", { "class": "nb-legend" });
    var st = styles(series.map(function (sr) { return sr.name; }));
    var compact = series.length > 6 && st.layers > 1 && !series.some(function (sr) { return sr.note || sr.colour; });
    function key(text, c, dash) {
      var item = el("div", { title: text });
      var sw = svg("svg", { width: 26, height: 8, "class": "nb-swatch" });
      var line = svg("path", { d: "M1,4 H25", stroke: c, "stroke-width": 2 });
      if (dash) line.setAttribute("stroke-dasharray", dash);
      sw.appendChild(line);
      item.appendChild(sw); item.appendChild(document.createTextNode(text));
      legend.appendChild(item);
    }
    series.forEach(function (sr) {
      var c = sr.colour || st.of[sr.name].colour, dash = sr.dash !== undefined ? sr.dash : st.of[sr.name].dash, d = "";
      sr.xs.forEach(function (x, i) {
        if (!isFinite(sr.ys[i])) return;
        d += (d ? " L" : "M") + px(x).toFixed(1) + "," + py(sr.ys[i]).toFixed(1);
      });
      if (!d) return;
      var p = svg("path", { "class": "nb-line", d: d, stroke: c, "data-series": sr.name });
      if (dash) p.setAttribute("stroke-dasharray", dash);
      var t = svg("title", {}); t.textContent = sr.name; p.appendChild(t);
      s.appendChild(p);
      if (!compact) key(sr.name + (sr.note ? " " + sr.note : ""), c, dash);
    });
    /* many series by layer and kind: one key per layer, one per kind */
    if (compact) {
      for (var l = 0; l < st.layers; l++) key("layer " + l, layerColour(l, st.layers), "");
      st.kinds.forEach(function (k, i) { key("\u2026" + k + " (each layer)", "#333", DASHES[i % DASHES.length]); });
      st.outside.forEach(function (n) { key(n, st.of[n].colour, ""); });
    }
    box.appendChild(s);
    if (series.some(function (sr) { return sr.note; })) legend.className = "nb-legend nb-legend-wide";
    if (series.length > 1 || opts.legend) box.appendChild(legend);
    document.getElementById("nb-plots").appendChild(box);
  }
  function hist(h) {
    var lo = num(h.lo), hi = num(h.hi), n = h.hist.length, w = (hi - lo) / n, tot = 0;
    h.hist.forEach(function (c) { tot += c; });
    return { xs: h.hist.map(function (c, i) { return lo + (i + 0.5) * w; }),
             ys: h.hist.map(function (c) { return tot ? c / tot : 0; }) };
  }
  var full = recs.filter(function (r) { return r.params; });
  var last = full[full.length - 1];
  document.getElementById("nb-summary").textContent = recs.length + " steps, " + full.length +
    " recorded" + (recs.length ? ", loss " + fmt(num(recs[0].loss)) + " \u2192 " + fmt(num(recs[recs.length - 1].loss)) : "");
  var lossSeries = [{ name: "train loss (each step's batch)", colour: "#3a6fb0", dash: "",
    xs: recs.map(function (r) { return r.step; }), ys: recs.map(function (r) { return num(r.loss); }) }];
  if (evals.length)
    lossSeries.push({ name: "val loss (evaluations)", colour: "#d1495b", dash: "",
      xs: evals.map(function (r) { return r.eval; }), ys: evals.map(function (r) { return num(r.val_loss); }) });
  plot("loss", "loss", evals.length ? "every step's training batch, and the val loss at each of " +
    evals.length + " evaluations" : "every step (no evaluations recorded)", lossSeries, { xname: "step " });
  /* the weights (2-D and up) as Karpathy plots them; all when there are none */
  var params = last ? last.params.filter(function (p) { return p.ndim >= 2; }) : [];
  if (last && !params.length) params = last.params;
  var names = params.map(function (p) { return p.name; });
  var withRatio = full.filter(function (r) { return r.update_ratio; });
  plot("update-ratio", "update / data ratio", "log10(std(lr \u00B7 update) / std(w)) per weight over steps; dashed: -3",
    names.map(function (n) { return { name: n, xs: withRatio.map(function (r) { return r.step; }),
      ys: withRatio.map(function (r) { return num(r.update_ratio[n]); }) }; }), { ref: -3, xname: "step " });
  var acts = last ? last.activations : [];
  /* saturation means something for tanh and sigmoid (the flat ends) and
   * for GELU and SiLU as the share of inputs below -3 (where they are about
   * 0); norms' outputs and gated products have none (saturated null) */
  var satActs = acts.filter(function (a) { return a.op === "tanh" || a.op === "sigmoid" || a.op === "gelu" || a.op === "silu"; });
  var satNote = { tanh: "|tanh| > 0.97", sigmoid: "sigmoid within 0.03 of 0 or 1", gelu: "GELU input below -3",
    silu: "SiLU input below -3" };
  var satKinds = [];
  satActs.forEach(function (a) { if (satKinds.indexOf(a.op) < 0) satKinds.push(a.op); });
  plot("activations", "activation histograms", "last record (step " + (last ? last.step : "-") +
    "): mean, std, % saturated per layer",
    acts.map(function (a) { var h = hist(a); return { name: a.name, xs: h.xs, ys: h.ys,
      note: "\u03BC " + fmt(num(a.mean)) + " \u03C3 " + fmt(num(a.std)) +
        (a.saturated === null ? "" : " sat " + fmt(num(a.saturated)) + "%") }; }), { legend: true });
  plot("saturation", "saturated activations (% of each layer's)", satActs.length
    ? "per layer over steps: " + satKinds.map(function (k) { return satNote[k]; }).join("; ")
    : "no tanh, sigmoid, GELU or SiLU in the model", satActs.map(function (a) { return { name: a.name, xs: full.map(function (r) { return r.step; }),
      ys: full.map(function (r) { var m = r.activations.filter(function (b) { return b.name === a.name; })[0]; return m ? num(m.saturated) : NaN; }) }; }),
    { xname: "step ", ymin: 0, legend: true });
  var gp = params.filter(function (p) { return p.grad; });
  plot("grad-hist", "gradient histograms", "last record: per weight, with grad std / data std",
    gp.map(function (p) { var h = hist(p.grad); return { name: p.name, xs: h.xs, ys: h.ys,
      note: "ratio " + fmt(num(p.grad.std) / num(p.data_std)) }; }), { legend: true });
  plot("grad-norm", "gradient norms", "per weight over steps",
    names.map(function (n) { return { name: n, xs: full.map(function (r) { return r.step; }),
      ys: full.map(function (r) { var m = r.params.filter(function (p) { return p.name === n; })[0]; return m ? num(m.grad_norm) : NaN; }) }; }), { xname: "step " });
  document.body.setAttribute("data-plots", document.querySelectorAll(".nb-plot").length);
})();
