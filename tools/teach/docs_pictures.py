#!/usr/bin/python3
"""docs_pictures.py - make docs: the README's and docs/teaching.md's
pictures, taken from the pages themselves in headless Chromium:

  docs/explorer-folded.png  the tape explorer on teach_backprop --model=gpt as
                        the default build writes it (laid out by the
                        build's elkjs), as opened: its modules folded
  docs/explorer.png     the same page stepped back into the first block's
                        attention (the backward unfolds what it reaches),
                        its attention weights selected
  docs/explorer-unfolded.png  the same page after "Unfold all"
  docs/attention-map.png  those weights as the page draws them (query x key
                        per head, the future hatched)
  docs/diagnostics.png  nabla-gpt train --diagnostics on a 2-layer GPT, 1280
                        wide (tall enough for all six plots)
  docs/playground.png   the playground (docs/playground.html) on micrograd's
                        neuron, stepped to the add that receives tanh's 0.5

    tools/teach/docs_pictures.py BUILD_DIR DOCS_DIR"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test"))
from test_browser import browser, click_js, layouts, wait_for  # noqa: E402


def playground_picture(driver, docs):
    """docs/playground.png: the first preset, two backward steps in."""
    driver.set_window_size(1280, 760)
    driver.get("file://" + os.path.join(docs, "playground.html"))
    wait_for(driver, "the playground's first graph",
             lambda: driver.execute_script("return window.pg && pg.shown;"))
    driver.switch_to.frame(driver.find_element("id", "pg-explorer"))
    for _ in range(2):
        driver.find_element("id", "nb-step").click()
    driver.switch_to.default_content()
    time.sleep(0.3)
    driver.save_screenshot(os.path.join(docs, "playground.png"))


def main():
    build, docs = (os.path.abspath(a) for a in sys.argv[1:3])
    repo = os.path.dirname(docs)
    driver = browser()
    try:
        with tempfile.TemporaryDirectory(prefix="nb-docs-") as tmp:
            page = os.path.join(tmp, "gpt.html")
            subprocess.run([os.path.join(build, "examples", "teach_backprop"), "--model=gpt",
                            "--html=" + page], check=True, stdout=subprocess.DEVNULL)
            driver.set_window_size(1400, 900)
            driver.get("file://" + page)
            wait_for(driver, "the layout", lambda: layouts(driver) > 0)
            if not driver.execute_script("return !!window.ELK;"):
                raise SystemExit("docs_pictures: the default page has no elkjs (make installs it)")
            time.sleep(0.5)
            driver.save_screenshot(os.path.join(docs, "explorer-folded.png"))
            # step back to the first block's softmax (#17): the backward unfolds what it reaches
            target = 57 - 17
            for _ in range(target):
                driver.find_element("id", "nb-step").click()
            wait_for(driver, "the op drawn", lambda: driver.find_elements("id", "nb-op17"))
            time.sleep(0.5)
            click_js(driver, "#nb-op17 rect")
            driver.execute_script("document.getElementById('nb-op17').scrollIntoView({block: 'center', inline: 'center'});")
            click_js(driver, "#nb-t" + driver.execute_script(
                "return JSON.parse(document.getElementById('nb-tape').textContent).nodes[17].out;").__str__() + " rect")
            driver.execute_script("document.querySelector('#nb-tensor-info').scrollIntoView();")
            time.sleep(1.0)  # let the scrolled panes repaint
            driver.save_screenshot(os.path.join(docs, "explorer.png"))
            driver.find_element("css selector", "#nb-tensor-info .nb-picture.nb-attn").screenshot(
                os.path.join(docs, "attention-map.png"))
            driver.get("file://" + page)  # afresh: everything unfolded, the top of the graph
            wait_for(driver, "the layout", lambda: layouts(driver) > 0)
            n = layouts(driver)
            driver.find_element("id", "nb-unfold").click()
            wait_for(driver, "the unfolded layout", lambda: layouts(driver) > n)
            time.sleep(0.5)
            driver.save_screenshot(os.path.join(docs, "explorer-unfolded.png"))
            run = os.path.join(tmp, "run.html")
            subprocess.run([os.path.join(build, "bin", "nabla-gpt"), "train",
                            "--data=" + os.path.join(repo, "README.md"), "--n_layer=2", "--n_head=2",
                            "--n_embd=32", "--block_size=16", "--batch_size=4", "--max_iters=300",
                            "--eval_interval=25", "--eval_iters=4", "--warmup_iters=10",
                            "--out_dir=" + os.path.join(tmp, "gpt"), "--diagnostics=" + run],
                           check=True, stdout=subprocess.DEVNULL)
            driver.set_window_size(1280, 1180)  # all six plots
            driver.get("file://" + run)
            wait_for(driver, "the plots", lambda: driver.execute_script(
                "return document.body.getAttribute('data-plots');"))
            driver.save_screenshot(os.path.join(docs, "diagnostics.png"))
            playground_picture(driver, docs)
    finally:
        driver.quit()
    print("wrote docs/explorer-folded.png, explorer.png, explorer-unfolded.png, attention-map.png, "
          "diagnostics.png, playground.png")


if __name__ == "__main__":
    main()
