#!/bin/sh
# bench-transforms.sh BUILD_DIR - forward mode and the transforms against
# what they replace (nabla-bench-transforms: JVP / forward, forward-over-
# reverse / reverse-over-reverse HVP, per-sample / batch gradient) and
# against functorch at its best thread mode (bench_torch_transforms.py),
# then one line per row with both ratios:
#
#   row=jvp_gpt nabla_ms=X vs_nabla_base=R1 functorch_ms=Y vs_functorch=R2
set -e
B=${1:-build}
nabla=$("$B/bin/nabla-bench-transforms")
echo "$nabla"
torch=$(/usr/bin/python3 tools/bench/bench_torch_transforms.py)
echo "$torch"
printf '%s\n%s\n' "$nabla" "$torch" | awk '
    /^transforms / { for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
                     row = f["row"]; ms[row] = f["ms"]; ratio[row] = f["ratio"]; order[n++] = row }
    /^torch_best / { for (i = 2; i <= NF; i++) { split($i, kv, "="); g[kv[1]] = kv[2] }
                     tms[g["row"]] = g["ms"] }
    END { for (i = 0; i < n; i++) { r = order[i]
              line = sprintf("row=%s nabla_ms=%s vs_nabla_base=%s", r, ms[r], ratio[r])
              if (r in tms) line = line sprintf(" functorch_ms=%s vs_functorch=%.2f", tms[r],
                                                 ms[r] / tms[r])
              print line } }'
