"use strict";
/* teach/diag_page.js - the training-diagnostics page (nb_diag_write_html),
 * embedded by tools/teach/embed_page.py. Each plot is a div.nb-plot with
 * data-plot and its series as path.nb-line (what make test-browser counts). */
(function () {
  var recs = JSON.parse(document.getElementById("nb-diag").textContent);
  var SVGNS = "http://www.w3.org/2000/svg";
  var COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                 "#7f7f7f", "#bcbd22", "#17becf"];
  function num(v) { return v === null ? NaN : typeof v === "string" ? Number(v) : v; }
  function fmt(v) { return isFinite(v) ? String(Number(v.toPrecision(3))) : String(v); }
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
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (!xs.length) { x0 = 0; x1 = 1; y0 = 0; y1 = 1; }
    if (x1 === x0) { x1 = x0 + 1; }
    if (y1 === y0) { y1 = y0 + 1; y0 -= 1; }
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
    series.forEach(function (sr, k) {
      var c = COLOURS[k % COLOURS.length], d = "";
      sr.xs.forEach(function (x, i) {
        if (!isFinite(sr.ys[i])) return;
        d += (d ? " L" : "M") + px(x).toFixed(1) + "," + py(sr.ys[i]).toFixed(1);
      });
      if (!d) return;
      var p = svg("path", { "class": "nb-line", d: d, stroke: c, "data-series": sr.name });
      var t = svg("title", {}); t.textContent = sr.name; p.appendChild(t);
      s.appendChild(p);
      var item = el("div", { title: sr.name + (sr.note ? " " + sr.note : "") }); var sw = el("span", {}); sw.style.background = c;
      item.appendChild(sw); item.appendChild(document.createTextNode(sr.name + (sr.note ? " " + sr.note : "")));
      legend.appendChild(item);
    });
    box.appendChild(s);
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
  plot("loss", "loss", "every step", [{ name: "loss", xs: recs.map(function (r) { return r.step; }),
    ys: recs.map(function (r) { return num(r.loss); }) }], { xname: "step " });
  /* the weights (2-D and up) as Karpathy plots them; all when there are none */
  var params = last ? last.params.filter(function (p) { return p.ndim >= 2; }) : [];
  if (last && !params.length) params = last.params;
  var names = params.map(function (p) { return p.name; });
  var withRatio = full.filter(function (r) { return r.update_ratio; });
  plot("update-ratio", "update / data ratio", "log10(std(lr \u00B7 update) / std(w)) per weight over steps; dashed: -3",
    names.map(function (n) { return { name: n, xs: withRatio.map(function (r) { return r.step; }),
      ys: withRatio.map(function (r) { return num(r.update_ratio[n]); }) }; }), { ref: -3, xname: "step " });
  var acts = last ? last.activations : [];
  plot("activations", "activation histograms", "last record (step " + (last ? last.step : "-") +
    "): mean, std, % saturated per layer",
    acts.map(function (a) { var h = hist(a); return { name: a.name, xs: h.xs, ys: h.ys,
      note: "\u03BC " + fmt(num(a.mean)) + " \u03C3 " + fmt(num(a.std)) + " sat " + fmt(num(a.saturated)) + "%" }; }), { legend: true });
  plot("saturation", "saturated activations (%)", "per layer over steps",
    acts.map(function (a) { return { name: a.name, xs: full.map(function (r) { return r.step; }),
      ys: full.map(function (r) { var m = r.activations.filter(function (b) { return b.name === a.name; })[0]; return m ? num(m.saturated) : NaN; }) }; }), { xname: "step " });
  var gp = params.filter(function (p) { return p.grad; });
  plot("grad-hist", "gradient histograms", "last record: per weight, with grad std / data std",
    gp.map(function (p) { var h = hist(p.grad); return { name: p.name, xs: h.xs, ys: h.ys,
      note: "ratio " + fmt(num(p.grad.std) / num(p.data_std)) }; }), { legend: true });
  plot("grad-norm", "gradient norms", "per weight over steps",
    names.map(function (n) { return { name: n, xs: full.map(function (r) { return r.step; }),
      ys: full.map(function (r) { var m = r.params.filter(function (p) { return p.name === n; })[0]; return m ? num(m.grad_norm) : NaN; }) }; }), { xname: "step " });
  document.body.setAttribute("data-plots", document.querySelectorAll(".nb-plot").length);
})();
