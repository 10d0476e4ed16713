#!/usr/bin/python3
"""make test-browser: the tape explorer page driven in headless Chromium.

For each teaching program and model, writes the page (--html) and the tape's
JSON (--json, nabla's own gradients), then, as a user would: loads the page,
clicks Step through the whole backward pass and checks at every step that
the highlighted node and the gradient it shows as received are nabla's, and
that what it shows sent to an input used once is that input's gradient;
then clicks every tensor and checks the gradient the page accumulated from
the steps. Fails on any console error.

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

CASES = [
    ("examples/teach_backprop", ["--model=lecture"]),
    ("examples/teach_backprop", ["--model=attention"]),
    ("examples/teach_backprop", ["--model=gpt"]),
    ("examples/teach_scalar", []),
    ("examples/custom_op_silu", []),
]
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


def browser():
    opts = webdriver.ChromeOptions()
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,900",
                 "--user-data-dir=" + tempfile.mkdtemp(prefix="nb-chromium-")):
        opts.add_argument(flag)
    opts.binary_location = "/usr/bin/chromium"
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def console_errors(driver):
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def check_page(driver, page, tape):
    tensors, nodes = tape["tensors"], tape["nodes"]
    driver.get("file://" + page)
    if driver.title != "nabla tape explorer":
        raise AssertionError(f"{page}: title {driver.title!r}")
    for t in tensors:
        driver.find_element(By.ID, f"nb-t{t['id']}")
    for n in nodes:
        driver.find_element(By.ID, f"nb-op{n['index']}")
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
        op = driver.find_element(By.ID, f"nb-op{n['index']}")
        if "nb-current" not in op.get_attribute("class"):
            raise AssertionError(f"step {k + 1}: #{n['index']} is not highlighted")
        got = shown(driver.find_element(By.CSS_SELECTOR, ".nb-received").text)
        expect_close(f"step {k + 1} (#{n['index']} {n['op']}) receives", got,
                     tensors[n["out"]]["grad"])
        for pre in driver.find_elements(By.CSS_SELECTOR, ".nb-sent"):
            i = int(pre.get_attribute("data-tensor"))
            if uses[i] == 1 and n["inputs"].count(i) == 1:
                expect_close(f"step {k + 1} (#{n['index']} {n['op']}) sends to tensor {i}",
                             shown(pre.text), tensors[i]["grad"])
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
        driver.find_element(By.CSS_SELECTOR, f"#nb-t{t['id']} rect").click()
        acc = driver.find_element(By.CSS_SELECTOR, "#nb-tensor-info .nb-acc")
        expect_close(f"tensor {t['id']} ({t['name']}) after every step", shown(acc.text), t["grad"])
    errors = console_errors(driver)
    if errors:
        raise AssertionError(f"{page}: console errors: {errors}")
    return len(reached)


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
    start = time.time()
    driver = browser()
    failed = 0
    try:
        with tempfile.TemporaryDirectory(prefix="nb-browser-") as tmp:
            for k, (prog, args) in enumerate(CASES):
                page, side = os.path.join(tmp, f"{k}.html"), os.path.join(tmp, f"{k}.json")
                name = " ".join([os.path.basename(prog)] + args)
                subprocess.run([os.path.join(build, prog)] + args + ["--html=" + page, "--json=" + side],
                               check=True, stdout=subprocess.DEVNULL)
                with open(side) as f:
                    tape = json.load(f)
                try:
                    steps = check_page(driver, page, tape)
                    print(f"ok    {name}: {len(tape['tensors'])} tensors, {steps} backward steps")
                except Exception as e:  # report every case, then fail
                    failed += 1
                    print(f"FAIL  {name}: {e}")
    finally:
        driver.quit()
    print(f"test-browser: {len(CASES) - failed} of {len(CASES)} pages passed in {time.time() - start:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
