#!/usr/bin/python3
"""make test-browser: the tape explorer pages driven in headless Chromium.

For each teaching program and model, writes the page as the default build
does (--html, laid out by the build's elkjs, which `make` installs; one
page with NB_LAYOUT_JS empty, the page's own placement) and the tape's JSON
(--json, nabla's own gradients), then, as a user would: loads the page (timed: the
2-layer GPT's must open in under 2 s and weigh under 4 MB) and checks in the
DOM that no two node boxes overlap, no label sticks out of its box and no
edge runs through a box;
unfolds a folded module by a click and folds it back by its name; clicks
Step through the whole backward pass and checks at every step that the
highlighted node (unfolded if it was folded) and the gradient it shows as
received are nabla's, and that what it shows sent to an input used once is
that input's gradient, and at the end that every leaf is drawn; then clicks
every tensor and checks the gradient the page accumulated from the steps;
counts the cells of a heatmap and of an attention map (the masked ones
too); and clicks every op for "check this op", which must pass, but for the
planted wrong backward of custom_op_silu --check-html, which must fail.
Then trains a 2-layer GPT with nabla-gpt train --diagnostics and checks at
1280x800 that the diagnostics page draws all six plots, each with lines.
Fails on any console error. Screenshots go to BUILD_DIR/browser/.

The default GPT page must carry elkjs and draw module boxes (folded, and
open ones after Unfold all) with no overlaps; the side panel puts the
step's lesson (receives / sends) before "check this op", whose numbers fit
their cells, and a tensor clicked after Run all on top; a page with no
modules has no Fold buttons; every tensor box is named by what it is.

    tools/test/test_browser.py BUILD_DIR
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

# (program, arguments, name): pages as the default build writes them, and
# one in the page's own placement (NB_LAYOUT_JS empty: no elkjs).
CASES = [
    ("examples/teach_backprop", ["--model=lecture"], "lecture"),
    ("examples/teach_backprop", ["--model=lecture"], "lecture-own-layout"),
    ("examples/teach_backprop", ["--model=attention"], "attention"),
    ("examples/teach_backprop", ["--model=gpt"], "gpt"),
    ("examples/teach_backprop", ["--model=qwen3"], "qwen3"),
    ("examples/teach_scalar", [], "neuron"),
    ("examples/custom_op_silu", [], "silu"),
]
CHECKED = {"lecture", "attention", "gpt", "qwen3", "silu-wrong"}  # pages made with a forward to check
GPT_MAX_BYTES = 4 << 20  # "under a few MB"
GPT_MAX_OPEN_S = 2.0
NUM = re.compile(r"-?inf|nan|-?\d+(?:\.\d*)?(?:e[-+]?\d+)?")


def shown(text):
    """The numbers a <pre> shows, up to the summary line of a big tensor."""
    return [float(v) for v in NUM.findall(text.split("\n...")[0])]


def expect_close(what, got, want):
    want = [float(v) for v in want]
    if len(got) != len(want):
        raise AssertionError(f"{what}: shows {len(got)} values, nabla has {len(want)}")
    for g, w in zip(got, want):
        if not (math.isclose(g, w, rel_tol=2e-5, abs_tol=1e-9) or (math.isnan(g) and math.isnan(w))):
            raise AssertionError(f"{what}: shows {got}, nabla has {want}")


def browser(performance_log=False):
    """Headless Chromium; with performance_log, its network events too
    (the playground's test reads the requests from them)."""
    opts = webdriver.ChromeOptions()
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,900",
                 "--user-data-dir=" + tempfile.mkdtemp(prefix="nb-chromium-")):
        opts.add_argument(flag)
    opts.binary_location = "/usr/bin/chromium"
    logs = {"browser": "ALL"}
    if performance_log:
        logs["performance"] = "ALL"
    opts.set_capability("goog:loggingPrefs", logs)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def console_errors(driver):
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def wait_for(driver, what, cond, timeout=20):
    """Polls cond() until it is true; fails naming `what`."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            v = cond()
            if v:
                return v
        except Exception:  # an element replaced by a new layout: try again
            pass
        time.sleep(0.03)
    raise AssertionError(f"timed out waiting for {what}")


def layouts(driver):
    return driver.execute_script(
        "var s = document.getElementById('nb-svg'); return s ? Number(s.getAttribute('data-layout')) : 0;")


def after_layout(driver, before, what):
    """Waits for a layout newer than `before`."""
    wait_for(driver, what, lambda: layouts(driver) > before)


# The layout checks, in the page: node boxes (tensors, ops, folded modules)
# that overlap, labels that stick out of their box, edges (ELK routes them
# orthogonally) through a box, and module boxes whose name sticks out.
LAYOUT_JS = r"""
var out = [], boxes = [];
document.querySelectorAll('#nb-svg g.nb-tensor, #nb-svg g.nb-op, #nb-svg g.nb-module.nb-folded').forEach(function (g) {
  var r = g.querySelector('rect').getBBox();
  boxes.push({ id: g.id, x: r.x, y: r.y, w: r.width, h: r.height });
  g.querySelectorAll('text').forEach(function (t) {
    var b = t.getBBox();
    if (b.x < r.x - 0.5 || b.y < r.y - 0.5 || b.x + b.width > r.x + r.width + 0.5 || b.y + b.height > r.y + r.height + 0.5)
      out.push('label of ' + g.id + ' is clipped: "' + t.textContent + '"');
  });
});
for (var i = 0; i < boxes.length; i++)
  for (var j = i + 1; j < boxes.length; j++) {
    var a = boxes[i], b = boxes[j];
    if (a.x < b.x + b.w - 0.5 && b.x < a.x + a.w - 0.5 && a.y < b.y + b.h - 0.5 && b.y < a.y + a.h - 0.5)
      out.push(a.id + ' overlaps ' + b.id);
  }
// edges: no segment may cross the inside of a node box (2 px in from its
// border, where the edges of its own arrows end)
document.querySelectorAll('#nb-svg path.nb-edge').forEach(function (p, k) {
  var pts = p.getAttribute('d').replace(/[ML]/g, ' ').trim().split(/\s+/).map(function (xy) {
    var v = xy.split(','); return [Number(v[0]), Number(v[1])]; });
  for (var i = 0; i + 1 < pts.length; i++) {
    var a = pts[i], b = pts[i + 1];
    boxes.forEach(function (r) {
      var x0 = r.x + 2, x1 = r.x + r.w - 2, y0 = r.y + 2, y1 = r.y + r.h - 2;
      var lo = Math.min(a[0], b[0]), hi = Math.max(a[0], b[0]), top = Math.min(a[1], b[1]), bot = Math.max(a[1], b[1]);
      var crosses = a[0] === b[0] ? a[0] > x0 && a[0] < x1 && top < y1 && bot > y0
                  : a[1] === b[1] ? a[1] > y0 && a[1] < y1 && lo < x1 && hi > x0 : false;
      if (crosses) out.push('edge ' + k + ' runs through ' + r.id);
    });
  }
});
document.querySelectorAll('#nb-svg g.nb-module.nb-open').forEach(function (g) {
  var r = g.querySelector('rect').getBBox(), t = g.querySelector('text').getBBox();
  if (t.x + t.width > r.x + r.width + 0.5) out.push('module name of ' + g.id + ' is clipped');
});
return { problems: out, boxes: boxes.length };
"""


def check_layout(driver, what):
    res = driver.execute_script(LAYOUT_JS)
    if res["problems"]:
        raise AssertionError(f"{what}: {len(res['problems'])} layout problems: {res['problems'][:5]}")
    return res["boxes"]


def click_js(driver, css):
    """Dispatches a click on the element (SVG rects under others too)."""
    driver.execute_script(
        "document.querySelector(arguments[0]).dispatchEvent(new MouseEvent('click', {bubbles: true}));", css)


def check_page(driver, page, tape, name, shots):
    tensors, nodes = tape["tensors"], tape["nodes"]
    start = time.time()
    driver.get("file://" + page)
    if driver.title != "nabla tape explorer":
        raise AssertionError(f"{page}: title {driver.title!r}")
    wait_for(driver, "the first layout", lambda: layouts(driver) > 0)
    opened = time.time() - start
    boxes = check_layout(driver, "as opened")
    driver.save_screenshot(os.path.join(shots, f"{name}.png"))
    folded = driver.execute_script("return document.querySelectorAll('g.nb-module.nb-folded').length;")
    notes = [f"opened and laid out in {opened:.2f} s, {boxes} boxes, {folded} modules folded"]
    notes += check_page_parts(driver, tensors, nodes, name, shots)
    if folded:
        # unfold one by a click, fold it back by its name
        mods = driver.execute_script("return Array.from(document.querySelectorAll('g.nb-module.nb-folded'))"
                                     ".map(function (g) { return g.getAttribute('data-module'); });")
        mod = max(mods, key=lambda m: sum(1 for n_ in nodes if (n_.get("scope") or "").startswith(m)))
        n = layouts(driver)
        click_js(driver, f'g.nb-module.nb-folded[data-module="{mod}"]')
        after_layout(driver, n, f"unfolding {mod}")
        if not driver.execute_script("return !!document.querySelector('g.nb-module.nb-open[data-module=\"' + arguments[0] + '\"]');", mod):
            raise AssertionError(f"clicking {mod} did not unfold it")
        inside = [n_ for n_ in nodes if n_.get("scope") == mod]  # its own ops, not its submodules''
        if inside and not driver.find_elements(By.ID, f"nb-op{inside[0]['index']}"):
            raise AssertionError(f"unfolded {mod} but its op #{inside[0]['index']} is not drawn")
        check_layout(driver, f"with {mod} unfolded")
        n = layouts(driver)
        click_js(driver, f'g.nb-module.nb-open[data-module="{mod}"] rect.nb-module-name')
        after_layout(driver, n, f"folding {mod}")
        if not driver.execute_script("return !!document.querySelector('g.nb-module.nb-folded[data-module=\"' + arguments[0] + '\"]');", mod):
            raise AssertionError(f"clicking the name of {mod} did not fold it")
        notes.append(f"folded and unfolded {mod}")
    reached = [n for n in reversed(nodes) if tensors[n["out"]]["grad"] is not None]
    count = driver.find_element(By.ID, "nb-step-count")
    if int(count.get_attribute("data-steps")) != len(reached):
        raise AssertionError(f"{page}: {count.get_attribute('data-steps')} steps, nabla ran {len(reached)}")
    uses = {}
    for n in nodes:
        for i in set(n["inputs"]):
            uses[i] = uses.get(i, 0) + 1
    step = driver.find_element(By.ID, "nb-step")
    for k, n in enumerate(reached):
        step.click()
        title = driver.find_element(By.CSS_SELECTOR, "#nb-step-info .nb-node-title")
        if int(title.get_attribute("data-node")) != n["index"]:
            raise AssertionError(f"step {k + 1}: shows node {title.get_attribute('data-node')}, "
                                 f"nabla's tape order has #{n['index']}")
        # the step unfolds what it reaches: the op is drawn, highlighted
        wait_for(driver, f"step {k + 1}: #{n['index']} highlighted", lambda: "nb-current" in
                 driver.find_element(By.ID, f"nb-op{n['index']}").get_attribute("class"))
        problem = check_lesson_first(driver)
        if problem:
            raise AssertionError(f"step {k + 1} (#{n['index']}): {problem}")
        got = shown(driver.find_element(By.CSS_SELECTOR, ".nb-received").text)
        expect_close(f"step {k + 1} (#{n['index']} {n['op']}) receives", got,
                     tensors[n["out"]]["grad"])
        for pre in driver.find_elements(By.CSS_SELECTOR, ".nb-sent"):
            i = int(pre.get_attribute("data-tensor"))
            if uses[i] == 1 and n["inputs"].count(i) == 1:
                expect_close(f"step {k + 1} (#{n['index']} {n['op']}) sends to tensor {i}",
                             shown(pre.text), tensors[i]["grad"])
    # every leaf the backward reached is drawn now, none folded away
    wait_for(driver, "the last layout", lambda: driver.execute_script(
        "return !document.querySelector('g.nb-module.nb-folded');") or not folded)
    leaves = [t for t in tensors if t["node"] < 0 and t["grad"] is not None]
    for t in leaves:
        if not driver.find_elements(By.ID, f"nb-t{t['id']}"):
            raise AssertionError(f"after the whole backward, leaf {t['id']} ({t['name']}) is not drawn")
    notes.append(f"the backward reached all {len(leaves)} leaves")
    if folded:
        check_layout(driver, "unfolded by the backward")
        driver.save_screenshot(os.path.join(shots, f"{name}-unfolded.png"))
    driver.find_element(By.ID, "nb-back").click()
    if int(count.get_attribute("data-step")) != len(reached) - 1:
        raise AssertionError("Back did not go back one step")
    driver.find_element(By.ID, "nb-reset").click()
    if int(count.get_attribute("data-step")) != 0 or driver.find_elements(By.CSS_SELECTOR, ".nb-current"):
        raise AssertionError("Reset did not go back to the start")
    driver.find_element(By.ID, "nb-all").click()
    for t in tensors:
        if t["grad"] is None:
            continue
        click_js(driver, f"#nb-t{t['id']} rect")
        if driver.execute_script("return document.getElementById('nb-side').firstElementChild.id;") != "nb-tensor-info":
            raise AssertionError(f"after Run all, clicked tensor {t['id']}: its panel is not on top")
        acc = driver.find_element(By.CSS_SELECTOR, "#nb-tensor-info .nb-acc")
        expect_close(f"tensor {t['id']} ({t['name']}) after every step", shown(acc.text), t["grad"])
    notes += check_pictures(driver, tensors, nodes, name, shots)
    if name in CHECKED:
        notes += check_ops(driver, tensors, nodes, name)
    errors = console_errors(driver)
    if errors:
        raise AssertionError(f"{page}: console errors: {errors}")
    return len(reached), opened, notes


def check_page_parts(driver, tensors, nodes, name, shots):
    """The legend; Fold buttons only with modules; tensor boxes named by what
    they are; on the default GPT page elkjs, module boxes when folded and
    when unfolded (no overlaps); the step's lesson before its check."""
    notes = []
    if not driver.find_elements(By.CSS_SELECTOR, "#nb-legend .nb-k-current"):
        raise AssertionError("no colour legend")
    has_mods = any(n.get("scope") for n in nodes)
    shown_btn = driver.execute_script("return getComputedStyle(document.getElementById('nb-fold')).display !== 'none';")
    if shown_btn != has_mods:
        raise AssertionError(f"Fold button {'shown' if shown_btn else 'hidden'} on a page "
                             f"{'with' if has_mods else 'without'} modules")
    bad = driver.execute_script(
        "return Array.from(document.querySelectorAll('#nb-svg g.nb-tensor text:first-of-type'))"
        ".map(function (t) { return t.textContent; }).filter(function (s) { return /^#\\d/.test(s); });")
    if bad:
        raise AssertionError(f"tensor boxes named like ops: {bad[:3]}")
    elk = driver.execute_script("return !!window.ELK;")
    if elk != (not name.endswith("-own-layout")):
        raise AssertionError(f"elkjs {'in' if elk else 'missing from'} the page")
    if name in ("gpt", "qwen3"):
        if not driver.find_elements(By.CSS_SELECTOR, "g.nb-module.nb-folded"):
            raise AssertionError(f"the {name} page opens with no module boxes")
        n = layouts(driver)
        driver.find_element(By.ID, "nb-unfold").click()
        after_layout(driver, n, "Unfold all")
        opened = len(driver.find_elements(By.CSS_SELECTOR, "g.nb-module.nb-open"))
        if opened < 5:
            raise AssertionError(f"unfolded, the {name} page draws {opened} module boxes")
        check_layout(driver, "unfolded by Unfold all")
        driver.save_screenshot(os.path.join(shots, f"{name}-unfold-all.png"))
        n = layouts(driver)
        driver.find_element(By.ID, "nb-fold").click()
        after_layout(driver, n, "Fold all")
        notes.append(f"{'elkjs by default' if elk else 'no elkjs'}; {opened} module boxes unfolded, "
                     "none overlapping")
    return notes


def check_own_gpt(driver, build, tmp, shots):
    """The GPT page without elkjs (NB_LAYOUT_JS empty, as with no npm): the
    page's own placement still draws module boxes, folded and after Unfold
    all, and no two node boxes overlap (its edges are straight lines, not
    routed around boxes: that is what elkjs adds)."""
    page = os.path.join(tmp, "gpt-own.html")
    subprocess.run([os.path.join(build, "examples", "teach_backprop"), "--model=gpt", "--html=" + page],
                   check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, NB_LAYOUT_JS=""))
    driver.get("file://" + page)
    wait_for(driver, "the first layout", lambda: layouts(driver) > 0)
    if driver.execute_script("return !!window.ELK;"):
        raise AssertionError("NB_LAYOUT_JS= still inlined elkjs")
    notes = []
    for what in ("as opened", "after Unfold all"):
        if what != "as opened":
            n = layouts(driver)
            driver.find_element(By.ID, "nb-unfold").click()
            after_layout(driver, n, "Unfold all")
        res = driver.execute_script(LAYOUT_JS)
        overlaps = [p for p in res["problems"] if not p.startswith("edge ")]
        if overlaps:
            raise AssertionError(f"{what}: {overlaps[:5]}")
        mods = len(driver.find_elements(By.CSS_SELECTOR, "g.nb-module"))
        if mods < 5:
            raise AssertionError(f"{what}: {mods} module boxes")
        notes.append(f"{what} {res['boxes']} boxes, {mods} module boxes, no overlaps")
    driver.save_screenshot(os.path.join(shots, "gpt-own-layout.png"))
    errors = console_errors(driver)
    if errors:
        raise AssertionError(f"console errors: {errors}")
    return "; ".join(notes)


def check_lesson_first(driver):
    """In a step's panel the lesson (receives / sends to) comes before the
    check, and the check's numbers fit their cells (2.59e-12, one line)."""
    return driver.execute_script("""
      var info = document.getElementById('nb-step-info');
      var rec = info.querySelector('.nb-received'), chk = info.querySelector('.nb-check h3');
      if (rec && chk && (rec.compareDocumentPosition(chk) & Node.DOCUMENT_POSITION_PRECEDING))
        return 'check before the lesson';
      var bad = Array.from(info.querySelectorAll('.nb-check-table td')).filter(function (td) {
        return td.getClientRects().length !== 1 || td.scrollWidth > td.clientWidth + 1 ||
          td.getBoundingClientRect().height > 22 || td.textContent.length > 10; });
      return bad.length ? 'cells that do not fit: ' + bad.slice(0, 3).map(function (td) { return td.textContent; }) : '';
    """)


def check_pictures(driver, tensors, nodes, name, shots):
    """A heatmap has one cell per element; an attention map one per (query,
    key) of each head, the future hatched."""
    notes = []
    pics = [t for t in tensors if len(t["shape"]) >= 2 and t["numel"] <= 2048 and t["node"] >= 0]
    if pics:
        t = pics[-1]
        click_js(driver, f"#nb-t{t['id']} rect")
        cells = driver.execute_script(
            "return document.querySelectorAll('#nb-tensor-info .nb-picture')[0].querySelectorAll('.nb-cell').length;")
        lead = 1
        for d in t["shape"][:-3]:
            lead *= d
        want = t["numel"] // lead
        if cells != want:
            raise AssertionError(f"heatmap of {t['id']} {t['shape']}: {cells} cells, want {want}")
        title = driver.execute_script(
            "return document.querySelector('#nb-tensor-info .nb-picture .nb-cell').getAttribute('title');")
        if not NUM.search(title or ""):
            raise AssertionError(f"heatmap cell has no number on hover: {title!r}")
        notes.append(f"heatmap of tensor {t['id']} {t['shape']}: {cells} cells")
    attn = [n for n in nodes if n["op"] == "softmax" and any(
        nodes[tensors[i]["node"]]["op"] in ("causal_fill", "scale") for i in n["inputs"] if tensors[i]["node"] >= 0)]
    if attn:
        t = tensors[attn[0]["out"]]
        click_js(driver, f"#nb-t{t['id']} rect")
        res = driver.execute_script(
            "var p = document.querySelector('#nb-tensor-info .nb-picture.nb-attn');"
            "return p ? [p.querySelectorAll('.nb-cell').length, p.querySelectorAll('.nb-cell.nb-masked').length] : null;")
        sh = t["shape"]
        T_ = sh[-1]
        heads = sh[-3] if len(sh) >= 3 else 1
        if res != [heads * T_ * T_, heads * T_ * (T_ - 1) // 2]:
            raise AssertionError(f"attention map of {sh}: cells, masked {res}, want "
                                 f"{[heads * T_ * T_, heads * T_ * (T_ - 1) // 2]}")
        caps = driver.execute_script(
            "return Array.from(document.querySelectorAll('#nb-tensor-info .nb-picture.nb-attn .nb-slice > .nb-muted'))"
            ".map(function (c) { return c.textContent; });")
        # the Qwen3 page's 4 query heads read 2 key/value heads (HF's
        # repeat_kv order: heads 0, 1 group 0; 2, 3 group 1); every other
        # page's attention has a key/value head per query head, no group
        want = ([f"head {h} \u00b7 kv group {h // 2}" for h in range(heads)] if name == "qwen3"
                else [f"head {h}" for h in range(heads)] if len(sh) == 4 else None)
        if want is not None and caps != want:
            raise AssertionError(f"attention map captions {caps}, want {want}")
        if name == "qwen3" and not driver.find_elements(By.CSS_SELECTOR, "#nb-tensor-info .nb-picture.nb-attn .nb-gqa"):
            raise AssertionError("the Qwen3 page does not say its query heads share key/value heads")
        driver.find_element(By.CSS_SELECTOR, "#nb-tensor-info .nb-picture.nb-attn").screenshot(
            os.path.join(shots, f"{name}-attention.png"))
        notes.append(f"attention map {sh}: {res[0]} cells, {res[1]} masked" + (f"; captions {caps}" if want else ""))
    return notes


def check_ops(driver, tensors, nodes, name):
    """'check this op' passes for every op but a planted wrong backward."""
    notes, fails = [], []
    reached = [n for n in nodes if tensors[n["out"]]["grad"] is not None]
    for n in reached:
        click_js(driver, f"#nb-op{n['index']} rect")
        box = driver.find_element(By.CSS_SELECTOR, "#nb-step-info .nb-check")
        cls = box.get_attribute("class")
        want_fail = n["op"].endswith("_wrong")
        if ("nb-fail" in cls) != want_fail or ("nb-pass" in cls) == want_fail:
            raise AssertionError(f"check of #{n['index']} {n['op']}: {cls!r}, want "
                                 f"{'a failure' if want_fail else 'a pass'}")
        if want_fail:
            fails.append(n["op"])
    notes.append(f"checked {len(reached)} ops" +
                 (f", {', '.join(fails)} failing as planted" if fails else ", all passing"))
    return notes


PLOTS = ["loss", "update-ratio", "activations", "saturation", "grad-hist", "grad-norm"]


def check_diagnostics(driver, build, tmp, shots):
    """nabla-gpt train --diagnostics on a 2-layer GPT for 60 steps: the page
    at 1280x800 draws every plot, each with its lines."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    page = os.path.join(tmp, "run.html")
    subprocess.run([os.path.join(build, "bin", "nabla-gpt"), "train", "--data=" + os.path.join(repo, "README.md"),
                    "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=4",
                    "--max_iters=60", "--eval_interval=30", "--eval_iters=1", "--warmup_iters=5",
                    "--out_dir=" + os.path.join(tmp, "gpt"), "--diagnostics=" + page],
                   check=True, stdout=subprocess.DEVNULL)
    with open(page + ".jsonl") as f:
        lines = [json.loads(line) for line in f]
    steps = [r for r in lines if "step" in r]
    evals = [r["eval"] for r in lines if "eval" in r]
    if len(steps) != 60 or evals != [0, 30, 60]:
        raise AssertionError(f"{page}.jsonl: {len(steps)} steps, evaluations at {evals}, "
                             "want 60 and [0, 30, 60]")
    driver.set_window_size(1280, 800)
    driver.get("file://" + page)
    got = driver.execute_script(
        "return Array.from(document.querySelectorAll('.nb-plot')).map(function (p) {"
        " return [p.getAttribute('data-plot'), p.querySelectorAll('path.nb-line').length,"
        " p.getBoundingClientRect().width]; });")
    if [g[0] for g in got] != PLOTS:
        raise AssertionError(f"plots {[g[0] for g in got]}, want {PLOTS}")
    empty = [g[0] for g in got if g[1] < 1]
    if empty:
        raise AssertionError(f"plots with no line: {empty}")
    if any(g[2] < 400 for g in got):
        raise AssertionError(f"plots narrower than 400 px at 1280x800: {got}")
    # the val loss line; legends in full (no scroll boxes); axis numbers
    # in 3 digits (5.09e-6, not 0.00000509); saturation from 0 (a share)
    problems = driver.execute_script("""
      var out = [];
      var loss = document.querySelectorAll('#nb-plot-loss path.nb-line');
      if (loss.length !== 2 || !/val/.test(loss[1].getAttribute('data-series'))) out.push('no val loss line');
      document.querySelectorAll('.nb-legend').forEach(function (l) {
        if (l.scrollHeight > l.clientHeight + 1 || getComputedStyle(l).overflowY === 'auto') out.push('legend scrolls');
      });
      document.querySelectorAll('.nb-plot > svg text').forEach(function (t) {
        if (/^-?0\\.000/.test(t.textContent) || t.textContent.replace(/^step /, '').length > 8)
          out.push('axis number ' + t.textContent);
      });
      var sat = Array.from(document.querySelectorAll('#nb-plot-saturation > svg text')).map(function (t) { return t.textContent; });
      if (sat[0] !== '0') out.push('saturation axis starts at ' + sat[0]);
      var dashes = Array.from(document.querySelectorAll('#nb-plot-update-ratio path.nb-line')).map(function (p) {
        return p.getAttribute('stroke') + '|' + (p.getAttribute('stroke-dasharray') || ''); });
      if (new Set(dashes).size !== dashes.length) out.push('update-ratio lines drawn alike: ' + dashes);
      return out;
    """)
    if problems:
        raise AssertionError(f"diagnostics page: {problems[:5]}")
    driver.save_screenshot(os.path.join(shots, "diagnostics.png"))
    for pid in ("update-ratio", "activations"):
        driver.find_element(By.ID, f"nb-plot-{pid}").screenshot(os.path.join(shots, f"diagnostics-{pid}.png"))
    errors = console_errors(driver)
    if errors:
        raise AssertionError(f"{page}: console errors: {errors}")
    moe = check_diagnostics_moe(driver, build, tmp)
    driver.set_window_size(1400, 900)
    return f"{len(got)} plots, " + ", ".join(f"{g[0]} {g[1]} lines" for g in got) + "; " + moe


def check_diagnostics_moe(driver, build, tmp):
    """The same page for a 2-layer Qwen3-MoE (top-2 of 4) over 10 steps: a
    histogram line per RMSNorm, SiLU and gated product, and the saturation
    plot a line per SiLU (one an expert that ran), named by module."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    page = os.path.join(tmp, "moe.html")
    subprocess.run([os.path.join(build, "bin", "nabla-gpt"), "train", "--data=" + os.path.join(repo, "README.md"),
                    "--arch=qwen3", "--n_kv_head=1", "--n_expert=4", "--n_expert_per_tok=2", "--hf_names",
                    "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=4",
                    "--max_iters=10", "--eval_interval=5", "--eval_iters=1", "--warmup_iters=2",
                    "--out_dir=" + os.path.join(tmp, "moe"), "--diagnostics=" + page],
                   check=True, stdout=subprocess.DEVNULL)
    with open(page + ".jsonl") as f:
        last = [r for r in map(json.loads, f) if "activations" in r][-1]["activations"]
    silus = [a["name"] for a in last if a["op"] == "silu"]
    driver.get("file://" + page)
    got = driver.execute_script(
        "function names(id) { return Array.from(document.querySelectorAll('#nb-plot-' + id + ' path.nb-line'))"
        ".map(function (p) { return p.getAttribute('data-series'); }); }"
        " return [names('activations'), names('saturation')];")
    if sorted(got[0]) != sorted(a["name"] for a in last):
        raise AssertionError(f"{page}: activation lines {got[0]}, want {[a['name'] for a in last]}")
    if sorted(got[1]) != sorted(silus) or not any(".mlp.experts." in n for n in silus):
        raise AssertionError(f"{page}: saturation lines {got[1]}, want the SiLUs {silus}")
    errors = console_errors(driver)
    if errors:
        raise AssertionError(f"{page}: console errors: {errors}")
    return f"qwen3-moe {len(got[0])} activation and {len(got[1])} saturation lines"


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
    shots = os.path.join(build, "browser")
    os.makedirs(shots, exist_ok=True)
    start = time.time()
    driver = browser()
    failed = 0
    cases = list(CASES) + [("examples/custom_op_silu", [], "silu-wrong")]
    try:
        with tempfile.TemporaryDirectory(prefix="nb-browser-") as tmp:
            for k, (prog, args, name) in enumerate(cases):
                page, side = os.path.join(tmp, f"{k}.html"), os.path.join(tmp, f"{k}.json")
                label = " ".join([os.path.basename(prog)] + args)
                env = dict(os.environ)
                env.pop("NB_LAYOUT_JS", None)
                if name.endswith("-own-layout"):
                    env["NB_LAYOUT_JS"] = ""
                    label += " (NB_LAYOUT_JS=, no elkjs)"
                if name == "silu-wrong":
                    out = ["--check-html=" + page]
                    label += " --check-html"
                else:
                    out = ["--html=" + page, "--json=" + side]
                subprocess.run([os.path.join(build, prog)] + args + out,
                               check=True, stdout=subprocess.DEVNULL, env=env)
                try:
                    if name == "silu-wrong":
                        with open(page) as f:
                            text = f.read()
                        a = text.index('id="nb-tape">') + len('id="nb-tape">')
                        tape = json.loads(text[a:text.index("</script>", a)])
                    else:
                        with open(side) as f:
                            tape = json.load(f)
                    size = os.path.getsize(page)
                    steps, opened, notes = check_page(driver, page, tape, name, shots)
                    if name == "gpt":
                        if size > GPT_MAX_BYTES:
                            raise AssertionError(f"page is {size} bytes, more than {GPT_MAX_BYTES}")
                        if opened > GPT_MAX_OPEN_S:
                            raise AssertionError(f"page opened in {opened:.2f} s, more than {GPT_MAX_OPEN_S} s")
                    print(f"ok    {label}: {size / 1e6:.2f} MB, {len(tape['tensors'])} tensors, "
                          f"{steps} backward steps; " + "; ".join(notes))
                except Exception as e:  # report every case, then fail
                    failed += 1
                    print(f"FAIL  {label}: {e}")
            try:
                print(f"ok    teach_backprop --model=gpt (NB_LAYOUT_JS=, no elkjs): "
                      f"{check_own_gpt(driver, build, tmp, shots)}")
            except Exception as e:
                failed += 1
                print(f"FAIL  teach_backprop --model=gpt (NB_LAYOUT_JS=, no elkjs): {e}")
            try:
                print(f"ok    nabla-gpt train --diagnostics: {check_diagnostics(driver, build, tmp, shots)}")
            except Exception as e:
                failed += 1
                print(f"FAIL  nabla-gpt train --diagnostics: {e}")
    finally:
        driver.quit()
    print(f"test-browser: {len(cases) + 2 - failed} of {len(cases) + 2} pages passed in {time.time() - start:.1f} s"
          f" (screenshots in {shots})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
