#!/usr/bin/env python3
"""speedrun_svg.py - docs/speedrun.svg from the speedrun runs' log.jsonl.

One panel per target (A: val <= 1.88, B: five minutes): the training loss
(a mean over 25 steps) against the seconds of training (the sum of the
steps' "ms" in log.jsonl; --x iters: against the iteration, for runs timed
on a busy machine), the record's and the AdamW baseline's, with each
run's final val loss as a dot at its end and the target as a dashed line.
Reads build/speedrun/{record,baseline}-{188,5min}-s{SEED}/log.jsonl (as
tools/bench/speedrun.py writes them); a run that is not there is left out.

  speedrun_svg.py --build build --seed 1337 --out docs/speedrun.svg [--x seconds|iters]
"""
import argparse
import json
import os

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 420, 300, 50, 15, 30, 40
TARGETS = [("188", "A: val loss 1.88", 1.88), ("5min", "B: five minutes", 1.55)]
RUNS = [("record", "#1f6feb", "record (Muon)"), ("baseline", "#888888", "AdamW baseline")]
SMOOTH = 25


def read_log(path, by_iter):
    """[(seconds or iteration, smoothed loss)], final val loss, from one log.jsonl."""
    t, pts, losses, val = 0.0, [], [], None
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            if "loss" in j and j.get("ms") is not None and j["loss"] is not None:
                t = j["iter"] + 1 if by_iter else t + j["ms"] / 1e3
                losses.append(j["loss"])
                window = losses[-SMOOTH:]
                pts.append((t, sum(window) / len(window)))
            if j.get("val_loss") is not None:
                val = j["val_loss"]
    return pts, val


def panel(x0, title, target, runs, xlabel):
    xmax = max([p[-1][0] for p, _ in runs.values() if p] + [1.0]) * 1.02
    ymin, ymax = 1.2, 3.0
    sx = lambda x: x0 + PAD_L + (W - PAD_L - PAD_R) * x / xmax
    sy = lambda y: PAD_T + (H - PAD_T - PAD_B) * (ymax - min(max(y, ymin), ymax)) / (ymax - ymin)
    out = [f'<text x="{x0 + W / 2}" y="18" text-anchor="middle" font-weight="bold">{title}</text>',
           f'<rect x="{x0 + PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" '
           f'height="{H - PAD_T - PAD_B}" fill="none" stroke="#000"/>']
    if not runs:  # a target not run (make speedrun --only): say so rather than draw empty axes
        out.append(f'<text x="{x0 + W / 2}" y="{(PAD_T + H - PAD_B) / 2}" text-anchor="middle" '
                   f'fill="#666">not run in this build\'s speedrun/</text>')
        return out
    for k in range(5):
        y = ymin + (ymax - ymin) * k / 4
        out.append(f'<text x="{x0 + PAD_L - 5}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.2f}</text>')
        x = xmax * k / 4
        out.append(f'<text x="{sx(x):.1f}" y="{H - PAD_B + 15}" text-anchor="middle">{x:.0f}</text>')
    out.append(f'<text x="{x0 + W / 2}" y="{H - 8}" text-anchor="middle">{xlabel}</text>')
    out.append(f'<line x1="{sx(0):.1f}" x2="{sx(xmax):.1f}" y1="{sy(target):.1f}" '
               f'y2="{sy(target):.1f}" stroke="#c00" stroke-dasharray="4 3"/>')
    for name, color, _ in RUNS:
        if name not in runs:
            continue
        pts, val = runs[name]
        step = max(1, len(pts) // 400)
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts[::step] + pts[-1:])
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        if val is not None and pts:
            out.append(f'<circle cx="{sx(pts[-1][0]):.1f}" cy="{sy(val):.1f}" r="4" fill="{color}"/>')
            out.append(f'<text x="{sx(pts[-1][0]) - 6:.1f}" y="{sy(val) - 8:.1f}" '
                       f'text-anchor="end" fill="{color}">val {val:.3f}</text>')
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--seed", default="1337")
    ap.add_argument("--out", default="docs/speedrun.svg")
    ap.add_argument("--x", choices=["seconds", "iters"], default="seconds")
    a = ap.parse_args()
    body = []
    for i, (target, title, line) in enumerate(TARGETS):
        runs = {}
        for name, _, _ in RUNS:
            p = os.path.join(a.build, "speedrun", f"{name}-{target}-s{a.seed}", "log.jsonl")
            if os.path.exists(p):
                runs[name] = read_log(p, a.x == "iters")
        xlabel = "seconds of training steps" if a.x == "seconds" else "iteration"
        body += panel(i * W, title, line, runs, xlabel)
    for k, (_, color, label) in enumerate(RUNS):
        body.append(f'<rect x="{PAD_L + 10 + 150 * k}" y="{PAD_T + 8}" width="12" height="3" '
                    f'fill="{color}"/><text x="{PAD_L + 26 + 150 * k}" y="{PAD_T + 13}">{label}'
                    '</text>')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{H}" '
           f'font-family="sans-serif" font-size="11">\n<rect width="100%" height="100%" '
           f'fill="#fff"/>\n' + "\n".join(body) + "\n</svg>\n")
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        f.write(svg)
    os.replace(tmp, a.out)
    print(f"speedrun_svg: wrote {a.out}")


if __name__ == "__main__":
    main()
