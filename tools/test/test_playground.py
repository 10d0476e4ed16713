#!/usr/bin/python3
"""make test-browser, second part: the playground (docs/playground.html)
driven in headless Chromium from file://, as a student would:

- each preset runs and shows its numbers: micrograd's neuron (o and the
  gradients, to 1e-12, each op at the line of the code that made it), the seed's attention weights, context vectors and
  SelfAttention_v1 output, the causal head's weights, the MLP's loss going
  down, the tiny GPT's loss near log(11); the explorer beside the code shows
  each one's graph (its op boxes) and, where checked, every op's check passes;
- an edited expression (tanh -> relu) updates the graph and the numbers;
- a syntax error and a shape error show a readable message in the page, and
  a Run after each works;
- live training (the reverse-digits preset) lowers the loss, the
  diagnostics page appears with its plots, and Stop stops it;
- 1000 Run clicks leave the wasm heap where it was;
- Run on a 199-op graph shows the new graph (all 9 times printed, and the
  best against the issue's target of 100 ms); the test fails only past
  TEST_MAX_MS, a graph that takes seconds: the 100 ms target is a speed
  figure, so it lives in `make bench-playground` (--speed), which fails past
  it, never in make test's pass or fail on a busy machine;
- an explorer page's "open this in the playground" link rebuilds its tape
  in the playground, op for op;
- nothing is fetched from the network (the browser's own request log has no
  http(s) URL) and the page's size is printed (target <= 3 MB).
Screenshots go to BUILD_DIR/browser/playground-*.png.

    tools/test/test_playground.py BUILD_DIR [PAGE]
    tools/test/test_playground.py --speed BUILD_DIR [PAGE]   (make bench-playground)"""
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_browser import browser, console_errors, wait_for  # noqa: E402

MAX_BYTES = 3 << 20
MAX_SHOW_MS = 100.0  # the target, checked by --speed (make bench-playground)
TEST_MAX_MS = 1000.0  # what make test-browser fails past
SPEED_RUNS = 9  # the best of these: on a shared machine, the least disturbed
R = ",\n        "  # PyTorch's row break in a printed matrix


def state(d):
    return d.execute_script(
        "return {runs: pg.runs, shown: pg.shown, ops: pg.ops, ms: pg.lastShownMs,"
        " out: document.getElementById('pg-out').textContent,"
        " error: document.getElementById('pg-error').textContent,"
        " errorShown: document.getElementById('pg-error').className === 'pg-shown',"
        " status: document.getElementById('pg-status').textContent,"
        " steps: pg.trainSteps, losses: pg.losses.slice(), diag: pg.diagPages,"
        " heap: pg.nb.heapBytes()};")


def run_code(d, code):
    """Puts code in the box, presses Ctrl-Enter's Run; waits for the graph."""
    shown = d.execute_script("return pg.shown;")
    d.execute_script("document.getElementById('pg-code').value = arguments[0];"
                     "document.getElementById('pg-run').click();", code)
    s = state(d)
    if not s["errorShown"]:
        wait_for(d, "the new graph", lambda: d.execute_script("return pg.shown;") > shown)
    return state(d)


def preset(d, name):
    shown = d.execute_script("return pg.shown;")
    k = d.execute_script("return pg.presets.indexOf(arguments[0]);", name)
    assert k >= 0, f"no preset {name!r}"
    d.execute_script("var s = document.getElementById('pg-preset'); s.value = arguments[0];"
                     " s.dispatchEvent(new Event('change'));", str(k))
    if "live training" not in name:
        wait_for(d, name + "'s graph", lambda: d.execute_script("return pg.shown;") > shown)
    return state(d)


def explorer_model(d):
    """The model the explorer beside the code shows, and its op boxes."""
    d.switch_to.frame(d.find_element("id", "pg-explorer"))
    try:
        wait_for(d, "the explorer's layout", lambda: d.execute_script(
            "var s = document.getElementById('nb-svg'); return s && s.getAttribute('data-layout');"))
        model = json.loads(d.execute_script("return document.getElementById('nb-tape').textContent;"))
        boxes = d.execute_script("return document.querySelectorAll('#nb-svg .nb-op').length;")
        modules = d.execute_script("return document.querySelectorAll('#nb-svg .nb-module').length;")
    finally:
        d.switch_to.default_content()
    return model, boxes, modules


def expect_graph(d, s, what, checked):
    model, boxes, modules = explorer_model(d)
    ops = len(model["nodes"])
    assert ops == s["ops"], f"{what}: the explorer has {ops} ops, the run {s['ops']}"
    assert boxes == ops or modules, f"{what}: {boxes} op boxes drawn for {ops} ops"
    if checked:
        checks = [n for n in model["nodes"] if "check" in n]
        assert checks, f"{what}: no op was checked"
        bad = [n["op"] for n in checks if not n["check"]["passed"]]
        assert not bad, f"{what}: the checks of {bad} failed"
    return model


def numbers_after(text, label):
    m = re.search(re.escape(label) + r"\s+(\S+)", text)
    assert m, f"no {label!r} in the output:\n{text}"
    return float(m.group(1))


def check_presets(d, shots):
    s = preset(d, "micrograd's neuron")
    want = {"o": 0.7071067811865476, "x1.grad": -1.5, "w1.grad": 1.0, "x2.grad": 0.5, "w2.grad": 0.0}
    for k, v in want.items():
        got = numbers_after(s["out"], k)
        assert abs(got - v) <= 1e-12, f"neuron: {k} shows {got}, micrograd has {v}"
    m = expect_graph(d, s, "neuron", True)
    assert [n["op"] for n in m["nodes"]] == ["mul", "mul", "add", "add", "tanh"], m["nodes"]
    sites = [n["site"] for n in m["nodes"]]  # the code box's lines that made them
    assert sites == ["code:6"] * 4 + ["code:7"], f"neuron: the ops' sites are {sites}"
    d.save_screenshot(os.path.join(shots, "playground-neuron.png"))

    s = preset(d, "self-attention (seed 001)")
    for text in ("[0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]",
                 "tensor([[0.4421, 0.5931, 0.5790]" + R + "[0.4419, 0.6515, 0.5683]" + R +
                 "[0.4431, 0.6496, 0.5671]" + R + "[0.4304, 0.6298, 0.5510]" + R +
                 "[0.4671, 0.5910, 0.5266]" + R + "[0.4177, 0.6503, 0.5645]]",
                 "tensor([[0.2996, 0.8053]" + R + "[0.3061, 0.8210]" + R + "[0.3058, 0.8203]" + R +
                 "[0.2948, 0.7939]" + R + "[0.2927, 0.7891]" + R + "[0.2990, 0.8040]]"):
        assert text in s["out"], f"self-attention: the output lacks\n{text}\nit is\n{s['out']}"
    expect_graph(d, s, "self-attention", True)

    s = preset(d, "causal attention head with dropout")
    assert "[0.3986, 0.6014, 0.0000, 0.0000, 0.0000, 0.0000]" in s["out"], s["out"]
    after = s["out"].split("after dropout")[1].split("context vectors")[0]
    vals = [float(v) for v in re.findall(r"\d+\.\d+", after)]
    assert any(v == 0 for v in vals) and any(v > 0.5 for v in vals), f"dropout: {after}"
    expect_graph(d, s, "causal head", True)

    s = preset(d, "two-layer MLP on a toy dataset")
    losses = [float(v) for v in re.findall(r"loss (\d+\.\d+)", s["out"])]
    assert len(losses) == 4 and losses[-1] < losses[0] / 10, f"MLP: losses {losses}"
    expect_graph(d, s, "MLP", True)

    s = preset(d, "tiny GPT")
    loss = numbers_after(s["out"], "loss")
    assert abs(loss - math.log(11)) < 0.6, f"tiny GPT: loss {loss}, log(11) {math.log(11)}"
    expect_graph(d, s, "tiny GPT", True)
    d.save_screenshot(os.path.join(shots, "playground-gpt.png"))
    return "5 presets: their numbers, graphs and op checks"


def check_edits_and_errors(d, shots):
    neuron = d.execute_script("return pg.presetCode(\"micrograd's neuron\");")
    s = run_code(d, neuron.replace("n.tanh()", "n.relu()"))
    assert not s["errorShown"], s["error"]
    o = numbers_after(s["out"], "o")
    assert abs(o - 0.8813735870195432) < 1e-12, f"relu: o shows {o}"
    m = expect_graph(d, s, "edited neuron", True)
    assert m["nodes"][-1]["op"] == "relu", [n["op"] for n in m["nodes"]]

    s = run_code(d, "const x = nb.tensor([1, 2]);\nconst y = x.add(;\nreturn y;")
    assert s["errorShown"] and s["error"].startswith("SyntaxError"), s["error"]
    d.save_screenshot(os.path.join(shots, "playground-syntax-error.png"))
    s = run_code(d, neuron)
    assert not s["errorShown"] and abs(numbers_after(s["out"], "o") - 0.7071067811865476) < 1e-12

    s = run_code(d, "const a = nb.ones([2, 3]), b = nb.ones([2, 3]);\nreturn a.matmul(b).sum();")
    assert s["errorShown"], s
    assert s["error"].startswith("nabla: matmul: (2, 3) @ (2, 3): inner dims 3 and 2 differ"), s["error"]
    d.save_screenshot(os.path.join(shots, "playground-shape-error.png"))
    s = run_code(d, neuron)
    assert not s["errorShown"], s["error"]
    return "an edit (tanh -> relu) redrew the graph; syntax and shape errors shown, the page usable after each"


def check_training(d, shots):
    preset(d, "live training: reverse digits")
    wait_for(d, "120 training steps", lambda: d.execute_script("return pg.trainSteps;") >= 120, 90)
    # the page stays responsive while it trains: a click reaches it
    t = time.time()
    d.execute_script("document.getElementById('pg-check').click();"
                     "document.getElementById('pg-check').click();")
    click_s = time.time() - t
    wait_for(d, "a diagnostics page", lambda: d.execute_script("return pg.diagPages;") >= 2, 30)
    d.find_element("id", "pg-stop").click()  # then no new diagnostics page replaces this one
    s1 = state(d)
    d.switch_to.frame(d.find_element("id", "pg-diag"))
    try:
        wait_for(d, "the plots", lambda: d.execute_script(
            "return document.body.getAttribute('data-plots');"))
        plots = d.execute_script("return document.querySelectorAll('.nb-plot').length;")
    finally:
        d.switch_to.default_content()
    assert plots >= 6, f"the diagnostics page draws {plots} plots"
    d.save_screenshot(os.path.join(shots, "playground-training.png"))
    time.sleep(0.5)
    s2 = state(d)
    assert s2["steps"] == s1["steps"], f"Stop: training went on from {s1['steps']} to {s2['steps']} steps"
    losses = s2["losses"]
    first, last = statistics.mean(losses[:10]), statistics.mean(losses[-10:])
    assert last < first * 0.8, f"training: the loss went from {first:.3f} to {last:.3f}"
    return (f"{len(losses)} steps, loss {first:.3f} -> {last:.3f} (means of the first and last 10), "
            f"{plots} diagnostics plots, a click answered in {click_s * 1000:.0f} ms, Stop stopped it")


def check_heap(d):
    neuron = d.execute_script("return pg.presetCode(\"micrograd's neuron\");")
    d.execute_script("document.getElementById('pg-code').value = arguments[0];", neuron)
    heap = d.execute_script(
        "var b = document.getElementById('pg-run');"
        "for (var i = 0; i < 20; i++) b.click();"
        "var h0 = pg.nb.heapBytes(), m0 = pg.nb.memoryBytes(), r0 = pg.runs;"
        "for (var i = 0; i < 1000; i++) b.click();"
        "return [h0, pg.nb.heapBytes(), m0, pg.nb.memoryBytes(), pg.runs - r0];")
    h0, h1, m0, m1, runs = heap
    assert runs == 1000, f"{runs} runs"
    assert h1 == h0, f"1000 Runs: the heap in use went from {h0} to {h1} bytes"
    assert m1 == m0, f"1000 Runs: the wasm memory went from {m0} to {m1} bytes"
    s = state(d)
    assert not s["errorShown"], s["error"]
    return f"1000 Runs (checks on): heap {h0} -> {h1} bytes, wasm memory {m0} -> {m1}"


BIG = """// 199 ops
let h = nb.tensor([[0.1, 0.2, 0.3, 0.4]], {requiresGrad: true, name: 'x'});
const w = nb.randn([4, 4], 1, {requiresGrad: true, name: 'w'});
for (let i = 0; i < 66; i++) h = h.matmul(w).tanh().mul(0.9);
return h.sum();"""


def check_speed(d, shots, limit=TEST_MAX_MS):
    times = []
    for _ in range(SPEED_RUNS):
        s = run_code(d, BIG)
        assert not s["errorShown"], s["error"]
        times.append(s["ms"])
    model, boxes, _ = explorer_model(d)
    assert len(model["nodes"]) == 199 and boxes == 199, f"{len(model['nodes'])} ops, {boxes} boxes"
    d.save_screenshot(os.path.join(shots, "playground-199-ops.png"))
    best, med = min(times), statistics.median(times)
    shown = ", ".join(f"{t:.0f}" for t in times)
    assert best < limit, f"Run on 199 ops showed the graph in {best:.0f} ms at best ({shown}), over {limit:.0f}"
    met = "met" if best < MAX_SHOW_MS else "not met"
    return (f"Run on 199 ops: the new graph shown in {best:.0f} ms at best, {med:.0f} median ({shown} ms; "
            f"target < {MAX_SHOW_MS:.0f} ms: {met})")


def check_explorer_link(d, build):
    """An explorer page's "open this in the playground": the attention
    tape written out as code runs in the playground with the same ops."""
    with tempfile.TemporaryDirectory(prefix="nb-playground-") as tmp:
        page, side = os.path.join(tmp, "attention.html"), os.path.join(tmp, "attention.json")
        subprocess.run([os.path.join(build, "examples", "teach_backprop"), "--model=attention",
                        "--html=" + page, "--json=" + side], check=True, stdout=subprocess.DEVNULL)
        with open(side) as f:
            tape = json.load(f)
        d.get("file://" + page)
        href = wait_for(d, "the playground link", lambda: d.execute_script(
            "var a = document.getElementById('nb-playground'); return a && !a.hidden && a.href;"))
    assert "#code=" in href, href
    d.get(href)
    wait_for(d, "the playground's graph", lambda: d.execute_script("return window.pg && pg.shown;"))
    s = state(d)
    assert not s["errorShown"], s["error"]
    model, _, _ = explorer_model(d)
    want, got = [n["op"] for n in tape["nodes"]], [n["op"] for n in model["nodes"]]
    assert got == want, f"the playground rebuilt {got}, the page had {want}"
    return f"teach_backprop --model=attention's page opened in the playground: its {len(got)} ops rebuilt"


def network_urls(d):
    urls = []
    for e in d.get_log("performance"):
        msg = json.loads(e["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return [u for u in urls if re.match(r"(?i)(https?|wss?|ftp)://", u)]


def bench_speed(page, shots):
    """--speed: only the 199-op Run, failing past the 100 ms target."""
    driver = browser()
    try:
        driver.get("file://" + page)
        wait_for(driver, "the first Run", lambda: driver.execute_script("return window.pg && pg.shown;"))
        print(f"bench-playground: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
              f"load {os.getloadavg()[0]:.2f}")
        print(f"bench-playground: {check_speed(driver, shots, MAX_SHOW_MS)}")
        return 0
    except AssertionError as e:
        print(f"bench-playground: FAIL {e}")
        return 1
    finally:
        driver.quit()


def main():
    args = sys.argv[1:]
    speed_only = bool(args) and args[0] == "--speed"
    if speed_only:
        args = args[1:]
    build = os.path.abspath(args[0] if args else "build")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    page = os.path.abspath(args[1]) if len(args) > 1 else os.path.join(repo, "docs", "playground.html")
    shots = os.path.join(build, "browser")
    os.makedirs(shots, exist_ok=True)
    if speed_only:
        return bench_speed(page, shots)
    start = time.time()
    size = os.path.getsize(page)
    driver = browser(performance_log=True)
    failed, parts = 0, [("presets", check_presets), ("edits and errors", check_edits_and_errors),
                        ("live training", check_training), ("heap", check_heap),
                        ("speed", lambda d, shots: check_speed(d, shots)), ("explorer link", check_explorer_link)]
    try:
        t = time.time()
        driver.get("file://" + page)
        wait_for(driver, "the first Run", lambda: driver.execute_script("return window.pg && pg.shown;"))
        print(f"ok    playground: {size} bytes ({size / 2**20:.2f} MB, target <= 3 MB), "
              f"first graph {time.time() - t:.2f} s after opening")
        if size > MAX_BYTES:
            failed += 1
            print(f"FAIL  playground: {size} bytes, more than {MAX_BYTES}")
        for name, fn in parts:
            try:
                note = fn(driver, build) if fn is check_explorer_link else \
                    fn(driver, shots) if fn.__code__.co_argcount == 2 else fn(driver)
                print(f"ok    playground {name}: {note}")
            except Exception as e:  # report every part, then fail
                failed += 1
                print(f"FAIL  playground {name}: {e}")
                driver.switch_to.default_content()
        errors = console_errors(driver)
        if errors:
            failed += 1
            print(f"FAIL  playground: console errors {errors}")
        fetched = network_urls(driver)
        if fetched:
            failed += 1
            print(f"FAIL  playground: fetched from the network: {fetched}")
        else:
            print("ok    playground: nothing fetched from the network (no http(s) request in the log)")
    finally:
        driver.quit()
    print(f"test-browser: playground {len(parts) - failed} of {len(parts)} parts passed in "
          f"{time.time() - start:.1f} s (screenshots in {shots})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
