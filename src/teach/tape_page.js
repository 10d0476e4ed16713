"use strict";
/* teach/tape_page.js - the tape explorer's script (nb_tape_html), embedded
 * into src/teach/tape_page.inc by tools/teach/embed_page.py (make
 * teach-page). It reads the JSON model (#nb-tape), groups the ops by module
 * path into boxes (folded by default on large tapes), lays the graph out
 * with elkjs when the page carries it (window.ELK) and in nested ranks
 * otherwise,
 * steps the backward pass, draws tensors as heatmaps and shows each op's
 * gradient check. Element ids and classes are what make test-browser reads. */
/* Shows `model`; called again for each tape the playground
 * (docs/playground.html) hands nbExplore, in the same page: no page load. */
function nbExploreModel(model) {
  ["nb-graph", "nb-step-info", "nb-tensor-info"].forEach(function (id) {
    document.getElementById(id).textContent = "";
  });
  var T = model.tensors, N = model.nodes;
  var SVGNS = "http://www.w3.org/2000/svg";
  var steps = N.filter(function (n) { return n.sends; }).reverse();
  var current = -1, selected = model.root, acc = [], layoutCount = 0;
  var SHOW = 64; /* values printed as text; the heatmaps use all the model has */

  function num(v) { return typeof v === "string" ? Number(v) : v; }
  function fmt(v) {
    v = num(v);
    if (isNaN(v)) return "nan";
    if (!isFinite(v)) return v > 0 ? "inf" : "-inf";
    return String(Number(v.toPrecision(6)));
  }
  /* short, for the check table: 2.59e-12, 0.125, 3.1416 (no wrapping) */
  function fmtShort(v) {
    v = num(v);
    if (isNaN(v)) return "nan";
    if (!isFinite(v)) return v > 0 ? "inf" : "-inf";
    var a = Math.abs(v);
    if (a === 0) return "0";
    return a >= 1e-3 && a < 1e5 ? String(Number(v.toPrecision(5))) : v.toExponential(2);
  }
  /* a tensor by what it is: its name (x, W_query.weight), the output of an
   * op, or an unnamed leaf */
  function label(t) {
    return t.name || (t.node >= 0 ? "out of #" + t.node + " " + (N[t.node].label || N[t.node].op)
                                  : "leaf " + t.id);
  }
  var NO_SITE = "no call site recorded (use NB_HERE)";
  function opLabel(n) { return "#" + n.index + " " + (n.label || n.op); }
  function shapeStr(t) { return "(" + t.shape.join(", ") + ")"; }
  function base(site) { return site ? site.replace(/^.*\//, "") : ""; }
  /* a long name keeps its two ends: "trf_blocks.0.att…W_query.weight" */
  function elide(s, max) {
    if (s.length <= max) return s;
    var head = Math.ceil((max - 1) / 2), tail = max - 1 - head;
    return s.slice(0, head) + "\u2026" + s.slice(s.length - tail);
  }
  /* values laid out row by row along the last dim, the first SHOW of them */
  function valuesText(t, vals, stats) {
    if (!vals) return "None";
    var cut = t.numel > SHOW, v = vals.slice(0, SHOW);
    var last = t.shape.length ? t.shape[t.shape.length - 1] : 1, rows = [];
    for (var i = 0; i < v.length; i += last) rows.push("[" + v.slice(i, i + last).map(fmt).join(", ") + "]");
    var s = t.shape.length < 2 ? rows.join("") : rows.join("\n");
    if (t.shape.length === 0) s = fmt(v[0]);
    if (cut)
      s += "\n... first " + v.length + " of " + t.numel + " values" +
        (stats ? "; min " + fmt(stats[0]) + ", max " + fmt(stats[1]) + ", mean " + fmt(stats[2]) : "");
    return s;
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

  /* ---- modules: paths split at dots, a numeric part kept with the one
   * before it (trf_blocks.0, layers.2), every prefix a box */
  function parts(path) {
    var out = [];
    (path || "").split(".").forEach(function (p) {
      if (p === "") return;
      if (/^\d+$/.test(p) && out.length) out[out.length - 1] += "." + p;
      else out.push(p);
    });
    return out;
  }
  var modules = {}, moduleList = [];
  function moduleOf(path) {
    var ps = parts(path), cur = "";
    ps.forEach(function (p) {
      var parent = cur;
      cur = cur ? cur + "." + p : p;
      if (!modules[cur]) {
        modules[cur] = { path: cur, parent: parent, depth: 0, ops: 0 };
        moduleList.push(modules[cur]);
      }
    });
    return cur;
  }
  function depth(m) { return m ? parts(m).length : 0; }
  function ancestors(m) { var out = []; while (m) { out.unshift(m); m = modules[m].parent; } return out; }
  function common(a, b) {
    var pa = ancestors(a), pb = ancestors(b), c = "";
    for (var i = 0; i < pa.length && i < pb.length && pa[i] === pb[i]; i++) c = pa[i];
    return c;
  }
  var opMod = [], tMod = [];
  N.forEach(function (n) {
    opMod[n.index] = moduleOf(n.scope);
    ancestors(opMod[n.index]).forEach(function (m) { modules[m].ops++; });
  });
  T.forEach(function (t) {
    if (t.node >= 0) { tMod[t.id] = opMod[t.node]; return; }
    var m = null;
    N.forEach(function (n) { if (n.inputs.indexOf(t.id) >= 0) m = m === null ? opMod[n.index] : common(m, opMod[n.index]); });
    tMod[t.id] = m || "";
  });
  var folded = {};
  var big = N.length > 40;
  moduleList.forEach(function (m) { folded[m.path] = big; });
  /* the box an item shows as: its outermost folded module, or itself */
  function rep(kind, id) {
    var anc = ancestors(kind === "t" ? tMod[id] : opMod[id]);
    for (var i = 0; i < anc.length; i++) if (folded[anc[i]]) return "m:" + anc[i];
    return kind + id;
  }
  function unfoldTo(m) {
    var changed = false;
    ancestors(m).forEach(function (a) { if (folded[a]) { folded[a] = false; changed = true; } });
    return changed;
  }

  /* ---- sizes: text measured in the page's own font */
  var canvas = document.createElement("canvas").getContext("2d");
  canvas.font = "11px monospace";
  function textW(s) { return Math.ceil(canvas.measureText(s).width); }
  var NAME_MAX = 34;
  function tensorLines(t) {
    var name = label(t);
    return [elide(name, NAME_MAX), shapeStr(t) + " " + t.dtype + (t.numel === 1 && t.data ? " = " + fmt(t.data[0]) : "")];
  }
  function opLines(n) { return [elide(opLabel(n), NAME_MAX), base(n.site) || " "]; }
  function moduleLines(m) { return [elide(m.path, NAME_MAX), m.ops + " op" + (m.ops === 1 ? "" : "s") + " \u25B8"]; }
  function boxSize(lines) {
    return { width: Math.max.apply(null, lines.map(textW)) + 20, height: 16 * lines.length + 8 };
  }

  /* ---- the visible graph: items, folded modules, open modules, edges */
  function visibleGraph() {
    var items = {}, open = {}, edges = {}, list = [];
    function addItem(id, kind, ref, lines, mod) {
      if (items[id]) return;
      var s = boxSize(lines);
      items[id] = { id: id, kind: kind, ref: ref, lines: lines, mod: mod, width: s.width, height: s.height };
    }
    T.forEach(function (t) {
      var r = rep("t", t.id);
      if (r === "t" + t.id) addItem(r, "t", t.id, tensorLines(t), tMod[t.id]);
    });
    N.forEach(function (n) {
      var r = rep("op", n.index);
      if (r === "op" + n.index) addItem(r, "op", n.index, opLines(n), opMod[n.index]);
    });
    moduleList.forEach(function (m) {
      var anc = ancestors(m.path), hidden = false;
      for (var i = 0; i < anc.length - 1; i++) if (folded[anc[i]]) hidden = true;
      if (hidden) return;
      if (folded[m.path]) addItem("m:" + m.path, "m", m.path, moduleLines(m), m.parent);
      else open[m.path] = true;
    });
    function modOfRep(r) { return items[r].mod; }
    function edge(a, b) {
      if (a === b || edges[a + ">" + b]) return;
      edges[a + ">" + b] = { id: "e" + list.length, sources: [a], targets: [b], mod: common(modOfRep(a), modOfRep(b)) };
      list.push(edges[a + ">" + b]);
    }
    N.forEach(function (n) {
      var o = rep("op", n.index);
      n.inputs.forEach(function (i) { edge(rep("t", i), o); });
      edge(o, rep("t", n.out));
    });
    return { items: items, open: open, edges: list };
  }

  /* ELK's graph: open modules as compound nodes, edges in their lowest
   * common module, every coordinate in the root's frame */
  function elkGraph(g) {
    var nodes = { "": { id: "root", children: [], edges: [], layoutOptions: {
      "elk.algorithm": "layered", "elk.direction": "DOWN",
      "elk.hierarchyHandling": "INCLUDE_CHILDREN",
      "elk.layered.spacing.nodeNodeBetweenLayers": "22", "elk.spacing.nodeNode": "14",
      "elk.spacing.edgeNode": "10", "elk.edgeRouting": "ORTHOGONAL",
      "elk.json.shapeCoords": "ROOT", "elk.json.edgeCoords": "ROOT" } } };
    Object.keys(g.open).sort(function (a, b) { return depth(a) - depth(b); }).forEach(function (m) {
      var lab = elide(m, 60);
      nodes[m] = { id: "c:" + m, children: [], edges: [], labels: [{ text: lab, width: textW(lab) + 8, height: 16 }],
        layoutOptions: { "elk.padding": "[top=26,left=10,bottom=10,right=10]",
          "elk.nodeLabels.placement": "INSIDE V_TOP H_LEFT" } };
      nodes[modules[m].parent].children.push(nodes[m]);
    });
    Object.keys(g.items).forEach(function (k) {
      var it = g.items[k];
      nodes[it.mod].children.push({ id: it.id, width: it.width, height: it.height });
    });
    g.edges.forEach(function (e) { nodes[e.mod].edges.push({ id: e.id, sources: e.sources, targets: e.targets }); });
    return nodes[""];
  }

  /* Without ELK: every open module a box around what it holds, laid out
   * from the inside out. In each box its items and sub-boxes go in ranks by
   * longest path over the edges between them, each rank ordered by where
   * its predecessors are and centred; edges are straight, bottom to top. */
  function rankLayout(g) {
    var PAD_T = 26, PAD = 10, GAP_X = 16, GAP_Y = 30;
    var kids = { "": [] }, size = {}, local = {};
    Object.keys(g.open).forEach(function (m) { kids[m] = []; });
    Object.keys(g.open).sort(function (a, b) { return depth(a) - depth(b); }).forEach(function (m) {
      kids[modules[m].parent].push("c:" + m);
    });
    Object.keys(g.items).forEach(function (id) { kids[g.items[id].mod].push(id); });
    /* the child of box C that holds item id */
    function up(id, C) {
      var m = g.items[id].mod;
      if (m === C) return id;
      while (modules[m].parent !== C) m = modules[m].parent;
      return "c:" + m;
    }
    function sz(id) { return id.indexOf("c:") === 0 ? size[id.slice(2)] : { w: g.items[id].width, h: g.items[id].height }; }
    function lay(C) {
      var ch = kids[C], preds = {}, rank = {}, rows = [], cx = {}, order = {};
      ch.forEach(function (id, i) { order[id] = i; if (id.indexOf("c:") === 0) lay(id.slice(2)); });
      g.edges.forEach(function (e) {
        if (e.mod !== C) return;
        var a = up(e.sources[0], C), b = up(e.targets[0], C);
        if (a !== b) (preds[b] = preds[b] || []).push(a);
      });
      function r(id) {
        if (rank[id] !== undefined) return rank[id];
        rank[id] = 0;
        var best = 0;
        (preds[id] || []).forEach(function (p) { best = Math.max(best, r(p) + 1); });
        return (rank[id] = best);
      }
      ch.forEach(function (id) { (rows[r(id)] = rows[r(id)] || []).push(id); });
      var y = C ? PAD_T : 0, width = C ? textW(elide(C, 60) + " \u25BE") + 14 : 0, placed = [];
      rows.forEach(function (row) {
        if (!row) return;
        function key(id) {
          var s = 0, n = 0;
          (preds[id] || []).forEach(function (q) { if (cx[q] !== undefined) { s += cx[q]; n++; } });
          return n ? s / n : Infinity;
        }
        var keys = {};
        row.forEach(function (id) { keys[id] = key(id); });
        row.sort(function (a, b) { return keys[a] - keys[b] || order[a] - order[b]; });
        var x = 0, h = 0;
        row.forEach(function (id) {
          var z = sz(id);
          local[id] = { x: x, y: y };
          cx[id] = x + z.w / 2;
          x += z.w + GAP_X;
          h = Math.max(h, z.h);
        });
        width = Math.max(width, x - GAP_X);
        placed.push({ row: row, w: x - GAP_X });
        y += h + GAP_Y;
      });
      placed.forEach(function (p) { /* centred in the box */
        var shift = (C ? PAD : 0) + (width - p.w) / 2;
        p.row.forEach(function (id) { local[id].x += shift; });
      });
      size[C] = { w: width + (C ? 2 * PAD : 0), h: (placed.length ? y - GAP_Y : y) + (C ? PAD : 0) };
    }
    lay("");
    var pos = {}, clusters = [];
    (function place(C, ox, oy) {
      kids[C].forEach(function (id) {
        var z = sz(id), x = ox + local[id].x, y = oy + local[id].y;
        if (id.indexOf("c:") === 0) {
          clusters.push({ path: id.slice(2), box: { x: x, y: y, width: z.w, height: z.h } });
          place(id.slice(2), x, y);
        } else {
          pos[id] = { x: x, y: y, width: z.w, height: z.h };
        }
      });
    })("", 10, 10);
    var edges = g.edges.map(function (e) {
      var a = pos[e.sources[0]], b = pos[e.targets[0]];
      return { id: e.id, points: [{ x: a.x + a.width / 2, y: a.y + a.height }, { x: b.x + b.width / 2, y: b.y }] };
    });
    return { pos: pos, edges: edges, clusters: clusters, width: size[""].w + 30, height: size[""].h + 30 };
  }

  function fromElk(res) {
    var pos = {}, clusters = [], edges = [];
    (function walk(n) {
      (n.children || []).forEach(function (c) {
        var p = { x: c.x, y: c.y, width: c.width, height: c.height };
        if (c.id.indexOf("c:") === 0) clusters.push({ path: c.id.slice(2), box: p });
        else pos[c.id] = p;
        walk(c);
      });
      (n.edges || []).forEach(function (e) {
        (e.sections || []).forEach(function (s) {
          edges.push({ id: e.id, points: [s.startPoint].concat(s.bendPoints || [], [s.endPoint]) });
        });
      });
    })(res);
    return { pos: pos, edges: edges, clusters: clusters, width: res.width + 20, height: res.height + 20 };
  }

  var box = document.getElementById("nb-graph");
  var elk = window.ELK ? new window.ELK() : null, pending = 0;
  function layout() {
    var g = visibleGraph(), ticket = ++pending;
    if (!elk) { draw(g, rankLayout(g)); return; }
    elk.layout(elkGraph(g)).then(function (res) {
      if (ticket === pending) draw(g, fromElk(res));
    }, function (err) { console.error("layout failed: " + err); draw(g, rankLayout(g)); });
  }

  /* ---- drawing */
  function draw(g, L) {
    box.textContent = "";
    var root = svg("svg", { width: L.width, height: L.height, viewBox: "-10 -10 " + L.width + " " + L.height, id: "nb-svg" });
    var defs = svg("defs", {});
    var marker = svg("marker", { id: "nb-arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
    marker.appendChild(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#889" }));
    defs.appendChild(marker);
    root.appendChild(defs);
    function text(gr, x, y, s, cls) {
      var e = svg("text", { x: x, y: y });
      if (cls) e.setAttribute("class", cls);
      e.textContent = s;
      gr.appendChild(e);
    }
    L.clusters.forEach(function (c) {
      var gr = svg("g", { "class": "nb-module nb-open", id: "nb-mod-" + c.path, "data-module": c.path });
      var t = svg("title", {});
      t.textContent = c.path + " (click the name to fold)";
      gr.appendChild(t);
      gr.appendChild(svg("rect", { x: c.box.x, y: c.box.y, width: c.box.width, height: c.box.height, rx: 6 }));
      var lab = elide(c.path, 60);
      var hit = svg("rect", { "class": "nb-module-name", x: c.box.x + 2, y: c.box.y + 2, width: textW(lab) + 12, height: 18, rx: 3 });
      gr.appendChild(hit);
      var tx = svg("text", { x: c.box.x + 8, y: c.box.y + 15, "class": "nb-left" });
      tx.textContent = lab + " \u25BE";
      gr.appendChild(tx);
      hit.addEventListener("click", function (ev) { ev.stopPropagation(); folded[c.path] = true; layout(); });
      root.appendChild(gr);
    });
    L.edges.forEach(function (e) {
      var d = e.points.map(function (p, i) { return (i ? "L" : "M") + p.x + "," + p.y; }).join(" ");
      root.appendChild(svg("path", { "class": "nb-edge", d: d }));
    });
    Object.keys(g.items).forEach(function (k) {
      var it = g.items[k], p = L.pos[k];
      if (!p) return;
      var cls, id, title;
      if (it.kind === "t") {
        var t = T[it.ref];
        cls = "nb-tensor" + (t.node < 0 ? " nb-leaf" : "") + (t.id === model.root ? " nb-root" : "");
        id = "nb-t" + t.id;
        title = label(t) + " " + shapeStr(t) + (t.node >= 0 ? "\nmade at " + (N[t.node].site || NO_SITE) : "");
      } else if (it.kind === "op") {
        var n = N[it.ref];
        cls = "nb-op";
        id = "nb-op" + n.index;
        title = opLabel(n) + (n.scope ? "\nin " + n.scope : "") + "\nat " + (n.site || NO_SITE) +
          (n.call_site ? "\ncalled from " + n.call_site : "");
      } else {
        cls = "nb-module nb-folded";
        id = "nb-mod-" + it.ref;
        title = it.ref + ": folded, click to unfold";
      }
      var gr = svg("g", { "class": cls, id: id });
      if (it.kind === "t") gr.setAttribute("data-tensor", it.ref);
      if (it.kind === "op") gr.setAttribute("data-node", it.ref);
      if (it.kind === "m") gr.setAttribute("data-module", it.ref);
      var tt = svg("title", {});
      tt.textContent = title;
      gr.appendChild(tt);
      gr.appendChild(svg("rect", { x: p.x, y: p.y, width: p.width, height: p.height,
        rx: it.kind === "op" ? 12 : 3 }));
      it.lines.forEach(function (s, i) { text(gr, p.x + p.width / 2, p.y + 16 + 16 * i, s, i ? "nb-sub" : ""); });
      gr.addEventListener("click", function () {
        if (it.kind === "t") { select(it.ref); toTop(info); }
        else if (it.kind === "op") { showNode(N[it.ref], true); toTop(stepInfo); }
        else { folded[it.ref] = false; layout(); }
      });
      root.appendChild(gr);
    });
    box.appendChild(root);
    /* the view fits what was drawn: nothing cut off at the left or top */
    var bb = root.getBBox();
    var vx = Math.min(-10, Math.floor(bb.x) - 10), vy = Math.min(-10, Math.floor(bb.y) - 10);
    var vw = Math.max(L.width, Math.ceil(bb.x + bb.width) + 10 - vx), vh = Math.max(L.height, Math.ceil(bb.y + bb.height) + 10 - vy);
    root.setAttribute("viewBox", vx + " " + vy + " " + vw + " " + vh);
    root.setAttribute("width", vw);
    root.setAttribute("height", vh);
    layoutCount++;
    root.setAttribute("data-layout", layoutCount);
    paint();
  }

  /* ---- pictures: a diverging scale (blue < 0 < red), numbers on hover */
  function colour(v, m) {
    v = num(v);
    if (!isFinite(v)) return "#999";
    var a = m > 0 ? Math.min(1, Math.abs(v) / m) : 0, w = Math.round(255 * (1 - a));
    return v >= 0 ? "rgb(255," + w + "," + w + ")" : "rgb(" + w + "," + w + ",255)";
  }
  function maxAbs(vals) {
    var m = 0;
    vals.forEach(function (v) { v = Math.abs(num(v)); if (isFinite(v) && v > m) m = v; });
    return m;
  }
  /* one 2-D slice: rows x cols cells from vals at offset; mask(i, j) marks cells */
  function grid(vals, off, rows, cols, m, mask, cls, cap) {
    var d = el("div", { "class": "nb-grid " + cls });
    d.style.gridTemplateColumns = "repeat(" + cols + ", max-content)";
    for (var i = 0; i < rows; i++)
      for (var j = 0; j < cols; j++) {
        var v = vals[off + i * cols + j], masked = mask && mask(i, j);
        var c = el("div", { "class": "nb-cell" + (masked ? " nb-masked" : ""),
          title: (rows > 1 ? "[" + i + ", " + j + "] " : "[" + j + "] ") + fmt(v) + (masked ? " (masked)" : "") });
        c.style.background = masked ? "" : colour(v, m);
        d.appendChild(c);
      }
    if (cap) { var w = el("div", { "class": "nb-slice" }); w.appendChild(el("div", { "class": "nb-muted" }, cap)); w.appendChild(d); return w; }
    return d;
  }
  /* a tensor as a picture: 1-D a bar strip, 2-D a heatmap, more a grid of
   * 2-D slices over the dim before the last two, the ones before that chosen
   * with selectors. attn: query x key maps with the future masked. */
  function picture(t, vals, attn) {
    var wrap = el("div", { "class": "nb-picture" + (attn ? " nb-attn" : ""), "data-tensor": t.id });
    if (!vals || vals.length < t.numel) {
      wrap.appendChild(el("div", { "class": "nb-muted" }, vals ? "too large to draw (" + t.numel + " values)" : "no values"));
      return wrap;
    }
    var m = maxAbs(vals), sh = t.shape.slice(), nd = sh.length;
    if (attn) m = 1;
    wrap.appendChild(el("div", { "class": "nb-muted" }, (attn ? "attention: rows are queries, columns keys; " : "") +
      "colour scale \u00B1" + fmt(m) + (attn ? ", hatched: masked (the future)" : "")));
    if (nd <= 1) { wrap.appendChild(grid(vals, 0, 1, nd ? sh[0] : 1, m, null, "nb-strip")); return wrap; }
    var rows = sh[nd - 2], cols = sh[nd - 1];
    var mask = attn ? function (i, j) { return j > i; } : null;
    if (nd === 2) { wrap.appendChild(grid(vals, 0, rows, cols, m, mask, "nb-heat")); return wrap; }
    var lead = sh.slice(0, nd - 3), k = sh[nd - 3], sel = lead.map(function () { return 0; });
    var holder = el("div", { "class": "nb-slices" });
    var G = attn && nd === 4 ? kvGroups(t) : 0, per = G ? k / G : 1;
    if (G) wrap.appendChild(el("div", { "class": "nb-muted nb-gqa" }, "grouped-query attention: " + k +
      " query heads share " + G + " key/value head" + (G === 1 ? "" : "s") + ", " + per + " to a group"));
    /* a map's caption: its query head, and under grouped-query attention
     * the key/value group it reads */
    function caption(s) {
      if (!(attn && nd === 4)) return "[" + sel.concat([s]).join(", ") + "] ";
      return "head " + s + (G ? " \u00B7 kv group " + Math.floor(s / per) : "");
    }
    function redraw() {
      holder.textContent = "";
      var off = 0;
      for (var d = 0; d < lead.length; d++) off = off * lead[d] + sel[d];
      off *= k * rows * cols;
      for (var s = 0; s < k; s++)
        holder.appendChild(grid(vals, off + s * rows * cols, rows, cols, m, mask, attn ? "nb-heat nb-attn-map" : "nb-heat",
          caption(s)));
    }
    lead.forEach(function (n, d) {
      var s = el("select", { "class": "nb-dim", "data-dim": d });
      for (var i = 0; i < n; i++) s.appendChild(el("option", { value: i }, "dim " + d + " = " + i));
      s.addEventListener("change", function () { sel[d] = Number(s.value); redraw(); });
      wrap.appendChild(s);
    });
    redraw();
    wrap.appendChild(holder);
    return wrap;
  }
  /* The key/value heads G of an attention map t (B, H, T, T) under
   * grouped-query attention, 0 when every query head has its own (or the
   * tape does not say): its scores' matmul reads k through an index_select
   * that copies each of k's G heads to H / G query heads (the composed
   * attention's gather); the first 4-D tensor before that gather is k
   * (B, G, T, hd). Query head h reads group h / (H / G). */
  function kvGroups(t) {
    var H = t.shape[t.shape.length - 3], src = T[N[t.node].inputs[0]];
    for (var hop = 0; hop < 4 && src.node >= 0 && N[src.node].op !== "matmul"; hop++)
      src = T[N[src.node].inputs[0]];
    if (src.node < 0 || N[src.node].op !== "matmul") return 0;
    var k = T[N[src.node].inputs[1]], gathered = false;
    for (hop = 0; hop < 8 && k.node >= 0; hop++) {
      if (gathered && k.shape.length === 4) break;
      if (N[k.node].op === "index_select") gathered = true;
      k = T[N[k.node].inputs[0]];
    }
    if (!gathered || k.shape.length !== 4) return 0;
    var G = k.shape[1];
    return G > 0 && G < H && H % G === 0 ? G : 0;
  }
  /* softmax outputs of attention: a softmax fed by causal_fill or masked_fill,
   * directly or through scale */
  function isAttention(t) {
    if (t.node < 0 || N[t.node].op !== "softmax" || t.shape.length < 2) return false;
    var src = T[N[t.node].inputs[0]];
    for (var hop = 0; hop < 3 && src.node >= 0; hop++) {
      var op = N[src.node].op;
      if (op === "causal_fill" || op === "masked_fill") return true;
      src = T[N[src.node].inputs[0]];
    }
    return false;
  }

  /* ---- the side panel */
  var info = document.getElementById("nb-tensor-info"), stepInfo = document.getElementById("nb-step-info");
  /* what was clicked last goes on top of the side panel */
  function toTop(e) {
    var side = document.getElementById("nb-side");
    if (side.firstChild !== e) side.insertBefore(e, side.firstChild);
    side.scrollTop = 0;
  }
  function section(parent, title, cls, t, vals, stats, pic) {
    parent.appendChild(el("h3", {}, title));
    var pre = el("pre", { "class": cls, "data-tensor": t.id }, valuesText(t, vals, stats));
    parent.appendChild(pre);
    if (pic && vals && t.numel > 1) parent.appendChild(picture(t, vals, pic === "attn"));
    return pre;
  }
  function select(id) {
    var t = T[id];
    if (!t) return;
    selected = id;
    info.textContent = "";
    info.appendChild(el("h2", { "class": "nb-tensor-title" }, label(t)));
    info.appendChild(el("div", {}, "shape " + shapeStr(t) + ", " + t.dtype + ", " + t.numel + " element" + (t.numel === 1 ? "" : "s")));
    info.appendChild(el("div", { "class": "nb-site" }, t.node >= 0
      ? "made by op #" + t.node + " " + N[t.node].op + " at " + (t.site || NO_SITE) +
        (N[t.node].call_site ? ", called from " + N[t.node].call_site : "")
      : "a leaf: made by the program, not by an op" + (t.requires_grad ? " (requires grad)" : "")));
    var attn = isAttention(t);
    section(info, attn ? "value: the attention weights" : "value", "nb-values", t, t.data, t.data_stats, attn ? "attn" : "heat");
    if (t.requires_grad) {
      section(info, "gradient after the whole backward pass", "nb-grad", t, t.grad, t.grad_stats, "heat");
      section(info, "gradient so far (after step " + (current + 1) + " of " + steps.length + ")", "nb-acc", t, acc[id]);
    }
    paint();
  }
  function checkView(n) {
    var c = n.check, d = el("div", { "class": "nb-check" + (c && c.passed ? " nb-pass" : c ? " nb-fail" : "") });
    if (!c) return d;
    d.appendChild(el("h3", {}, "check this op: " + (c.passed ? "\u2713 passed" : "\u2717 FAILED") +
      " (max error " + fmtShort(c.max_err) + ", float64 central differences, eps " + fmtShort(c.eps) + ")"));
    c.inputs.forEach(function (ci) {
      if (!ci) return;
      var tb = el("table", { "class": "nb-check-table" });
      var hd = el("tr", {});
      ["input " + ci.input + " " + label(T[n.inputs[ci.input]]) + " [entry]", "analytic", "numeric", "error"].forEach(function (h) { hd.appendChild(el("th", {}, h)); });
      tb.appendChild(hd);
      ci.entries.forEach(function (e, k) {
        var tr = el("tr", {});
        [String(e), fmtShort(ci.analytic[k]), fmtShort(ci.numeric[k]), fmtShort(Math.abs(num(ci.analytic[k]) - num(ci.numeric[k])))].forEach(function (v) { tr.appendChild(el("td", {}, v)); });
        tb.appendChild(tr);
      });
      d.appendChild(tb);
      if (ci.sampled) d.appendChild(el("div", { "class": "nb-muted" }, ci.entries.length + " sampled entries of " + T[n.inputs[ci.input]].numel));
    });
    return d;
  }
  /* the op's heading; with `check`, its gradient check after it (a step
   * puts the lesson, what it receives and sends, in between) */
  function showNode(n, check) {
    var k = steps.indexOf(n);
    stepInfo.textContent = "";
    var h = el("h2", { "class": "nb-node-title", "data-node": n.index }, opLabel(n));
    stepInfo.appendChild(h);
    stepInfo.appendChild(el("div", { "class": "nb-site" },
      (n.scope ? "in " + n.scope + ", " : "") + "at " + (n.site || NO_SITE) +
      (n.call_site ? "  \u2190 called from " + n.call_site : "")));
    stepInfo.appendChild(el("div", { "class": "nb-formula" }, n.formula));
    stepInfo.appendChild(el("div", { "class": "nb-muted" }, "its inputs, in the rule's order: " +
      n.inputs.map(function (i) { return label(T[i]); }).join(", ") + "; its output: " + label(T[n.out])));
    if (check) stepInfo.appendChild(checkView(n));
    if (k < 0) stepInfo.appendChild(el("p", { "class": "nb-muted" }, "backward did not reach this node"));
  }

  /* ---- stepping: acc[] holds each tensor's gradient as the steps add to it */
  function add(a, b) {
    if (!b) return a;
    if (!a) return b.map(num);
    return a.map(function (v, i) { return v + num(b[i]); });
  }
  function recompute() {
    acc = [];
    var r = T[model.root];
    if (steps.length && r.grad) acc[model.root] = r.grad.map(num);
    for (var k = 0; k <= current; k++)
      steps[k].inputs.forEach(function (i, j) { acc[i] = add(acc[i], steps[k].sends[j]); });
  }
  function mark(id, cls) { var e = document.getElementById(id); if (e) e.classList.add(cls); }
  /* the step's classes on whatever is drawn now */
  function paint() {
    document.querySelectorAll(".nb-current, .nb-done, .nb-receives, .nb-sends, .nb-selected").forEach(function (e) {
      e.classList.remove("nb-current", "nb-done", "nb-receives", "nb-sends", "nb-selected");
    });
    mark("nb-t" + selected, "nb-selected");
    for (var k = 0; k < current; k++) mark("nb-op" + steps[k].index, "nb-done");
    if (current < 0) return;
    var n = steps[current];
    mark("nb-op" + n.index, "nb-current");
    mark("nb-t" + n.out, "nb-receives");
    n.inputs.forEach(function (i) { mark("nb-t" + i, "nb-sends"); });
    var e = document.getElementById("nb-op" + n.index);
    if (e) e.scrollIntoView({ block: "nearest", inline: "nearest" });
  }
  function render() {
    recompute();
    var count = document.getElementById("nb-step-count");
    count.textContent = "step " + (current + 1) + " of " + steps.length;
    count.setAttribute("data-step", current + 1);
    count.setAttribute("data-steps", steps.length);
    stepInfo.textContent = "";
    /* the backward unfolds what it reaches */
    var changed = false;
    for (var k = 0; k <= current; k++) {
      var s = steps[k];
      changed = unfoldTo(opMod[s.index]) || changed;
      s.inputs.forEach(function (i) { changed = unfoldTo(tMod[i]) || changed; });
    }
    if (current < 0) {
      stepInfo.appendChild(el("p", { "class": "nb-muted" }, steps.length
        ? "Press Step to run the backward pass one node at a time, newest first. The root's gradient starts at 1."
        : "No backward pass was recorded: call nb_backward before writing the page."));
    } else {
      var n = steps[current], out = T[n.out];
      showNode(n, false);
      stepInfo.appendChild(el("h3", {}, "receives dout, the gradient of " + label(out)));
      stepInfo.appendChild(el("pre", { "class": "nb-received", "data-tensor": out.id }, valuesText(out, out.grad)));
      n.inputs.forEach(function (i, j) {
        var t = T[i], head = "sends to input " + j + ": " + label(t);
        if (n.same_as[j] >= 0) {
          stepInfo.appendChild(el("h3", {}, head + " (the same tensor as input " + n.same_as[j] + ": sent there)"));
        } else if (!n.sends[j]) {
          stepInfo.appendChild(el("h3", {}, head + " (needs no gradient)"));
        } else {
          stepInfo.appendChild(el("h3", {}, head));
          stepInfo.appendChild(el("pre", { "class": "nb-sent", "data-input": j, "data-tensor": i }, valuesText(t, n.sends[j])));
        }
      });
      stepInfo.appendChild(checkView(n));
      toTop(stepInfo);
    }
    select(selected);
    if (changed) layout();
    else paint();
  }
  /* ---- "open this in the playground" ----------------------------------
   * The tape as nabla.js code for the playground (docs/playground.html,
   * where NB_PLAYGROUND points when the page was written beside a build):
   * the leaves with their values, then each op as a method call, up to the
   * first op with arguments the model does not carry (a comment says
   * which). Hidden inside the playground itself. */
  var jsUsed = {};
  function jsName(t) { /* an identifier from its name, unique in the code */
    var s = (t.name || "leaf" + t.id).replace(/[^A-Za-z0-9_$]/g, "_");
    if (/^[0-9]/.test(s)) s = "_" + s;
    if (jsUsed[s] || /^t[0-9]+$/.test(s)) s += "_" + t.id;
    jsUsed[s] = true;
    return s;
  }
  function jsNum(v) { v = num(v); return isFinite(v) ? String(v) : v > 0 ? "Infinity" : isNaN(v) ? "NaN" : "-Infinity"; }
  var UNARY = { neg: "neg", exp: "exp", log: "log", sqrt: "sqrt", tanh: "tanh", sigmoid: "sigmoid",
                relu: "relu", erf: "erf", silu: "silu", relu2: "relu2", gelu: "gelu", softmax: "softmax",
                log_softmax: "logSoftmax", causal_fill: "causalMask" };
  var BINARY = { add: "add", sub: "sub", mul: "mul", div: "div", matmul: "matmul", mse_loss: "mseLoss",
                 linear: "linear" };
  function opCode(n, ins, out) {
    var a = ins[0], rest = ins.slice(1).join(", ");
    var k = /(-?[0-9.e+-]+)$/.exec(n.label || ""), c = k ? Number(k[1]) : NaN;
    if (UNARY[n.op] && ins.length === 1) return a + "." + UNARY[n.op] + "()";
    if (BINARY[n.op]) return a + "." + BINARY[n.op] + "(" + rest + ")";
    if (n.op === "scale" && !isNaN(c)) return a + ".mul(" + c + ")";
    if (n.op === "pow" && !isNaN(c)) return a + ".pow(" + c + ")";
    if (n.op === "add_scalar" && !isNaN(c)) return a + ".add(" + c + ")";
    if ((n.op === "sum" || n.op === "mean") && out.numel === 1) return a + "." + n.op + "()";
    if (n.op === "reshape" || n.op === "view") return a + ".reshape(" + JSON.stringify(out.shape) + ")";
    if (n.op === "transpose") {
      var x = T[n.inputs[0]].shape, d = x.length;
      if (d >= 2 && out.shape[d - 1] === x[d - 2] && out.shape[d - 2] === x[d - 1]) return a + ".transpose(-2, -1)";
    }
    return null;
  }
  function playgroundCode() {
    var lines = ["// " + N.length + " ops from a tape explorer page, as nabla.js; edit and Run"], done = {};
    var dtype = T.length && T[0].dtype === "f32" ? "float32" : "float64", last = null;
    lines.push("nb.setDefaultDtype('" + dtype + "');");
    T.forEach(function (t) {
      if (t.node >= 0 || !t.data) return;
      var name = jsName(t), opts = "{shape: " + JSON.stringify(t.shape) +
        (t.grad || t.requires_grad ? ", requiresGrad: true" : "") + (t.name ? ", name: " + JSON.stringify(t.name) : "") + "}";
      if (t.truncated || t.data.length !== t.numel) {
        lines.push("const " + name + " = nb.randn(" + JSON.stringify(t.shape) + ", " + t.id + ", " + opts + "); // values not in the page");
      } else {
        lines.push("const " + name + " = nb.tensor([" + t.data.map(jsNum).join(", ") + "], " + opts + ");");
      }
      done[t.id] = name;
    });
    for (var i = 0; i < N.length; i++) {
      var n = N[i], out = T[n.out], ins = n.inputs.map(function (k) { return done[k]; });
      var code = ins.every(function (v) { return v; }) ? opCode(n, ins, out) : null;
      if (!code) {
        lines.push("// #" + n.index + " " + (n.label || n.op) + ": not written out here (its arguments are not in the page); the code stops before it");
        break;
      }
      var name = "t" + n.index;
      lines.push("const " + name + " = " + code + ";" + (n.scope ? "  // " + n.scope : ""));
      done[n.out] = last = name;
    }
    lines.push("return " + (done[model.root] || last || "null") + ";");
    return lines.join("\n");
  }
  function playgroundLink() {
    var a = document.getElementById("nb-playground");
    if (!a || window.parent !== window) return;
    try {
      a.href = (window.NB_PLAYGROUND || "playground.html") + "#code=" + encodeURIComponent(playgroundCode());
      a.hidden = false;
    } catch (e) { /* a model the code cannot be written from: no link */ }
  }
  function go(k) { current = Math.max(-1, Math.min(steps.length - 1, k)); render(); }
  document.getElementById("nb-step").onclick = function () { go(current + 1); };
  document.getElementById("nb-back").onclick = function () { go(current - 1); };
  document.getElementById("nb-reset").onclick = function () { go(-1); };
  document.getElementById("nb-all").onclick = function () { go(steps.length - 1); };
  /* folding only where there are modules */
  ["nb-unfold", "nb-fold"].forEach(function (id) {
    document.getElementById(id).style.display = moduleList.length ? "" : "none";
  });
  document.getElementById("nb-unfold").onclick = function () {
    moduleList.forEach(function (m) { folded[m.path] = false; }); layout(); };
  document.getElementById("nb-fold").onclick = function () {
    moduleList.forEach(function (m) { folded[m.path] = true; }); layout(); };
  playgroundLink();
  layout();
  render();
  window.nbTape = { folded: folded, modules: moduleList, nodes: N.length,
                   layouts: function () { return layoutCount; } };
}
nbExploreModel(JSON.parse(document.getElementById("nb-tape").textContent));
window.nbExplore = function (text) {
  document.getElementById("nb-tape").textContent = text;
  nbExploreModel(JSON.parse(text));
};
