#!/bin/bash
# peers-ab.sh: run benchmark drivers side by side, alternating them in every
# round, and print each one's median and its ratio to the first.
#
# Running one driver's runs after another's lets a quiet or busy minute on a
# shared, noisy machine land on one driver only; alternating within each
# round spreads the noise over all of them. (go run ./bench/matrix does the
# same for every lock and cell at once, and writes the results.)
#
# usage: [ROUNDS=6] [P=2] [ITERS=2e7] [WL=counter] scripts/peers-ab.sh NAME=CMD ...
#   NAME=CMD   a label and a driver command line (the driver contract of
#              bench/README.md), which may start with VAR=value environment
#              settings, e.g., from the repository's root:
#   scripts/peers-ab.sh "pthread=bench/bin/pthread_mutex_robust" \
#                       "shmlock=bench/bin/shmctl bench --lock spin"
# The script first builds the drivers (make -C bench) and shmctl into
# bench/bin. LINERT=1 prints, before each round, the cache-line round trip
# between the two CPUs (scripts/linert): the host's placement of the vCPUs,
# on which 2-process results depend.
# The drivers get --workload WL --procs P --iters ITERS --path /dev/shm/ab-PID.
set -euo pipefail
ROUNDS=${ROUNDS:-6}; P=${P:-2}; ITERS=${ITERS:-2e7}; WL=${WL:-counter}
[ $# -gt 0 ] || { sed -n '2,20p' "$0" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
make -s -C "$root/bench" >&2 || echo "peers-ab: WARNING: some drivers did not build (see above)" >&2
(cd "$root" && go build -o bench/bin/shmctl ./cmd/shmctl)
out=$(mktemp)
linert=
trap 'rm -f "$out" "$linert" /dev/shm/ab-$$*' EXIT
if [ -n "${LINERT:-}" ]; then
    linert=$(mktemp)
    (cd "$(dirname "$0")/linert" && go build -o "$linert" .)
fi
for r in $(seq "$ROUNDS"); do
    if [ -n "${LINERT:-}" ]; then echo "round $r: $("$linert" -n 500000)" >&2; fi
    for spec in "$@"; do
        name=${spec%%=*}; cmd=${spec#*=}
        # shellcheck disable=SC2086 # cmd is a command line on purpose
        v=$(env $cmd --workload "$WL" --procs "$P" --iters "$ITERS" --path /dev/shm/ab-$$ 2>&1 |
            sed -nE 's/.*"ops_per_sec":([0-9.e+]+).*/\1/p' || true)
        echo "$name ${v:-nan}" >> "$out"
    done
done
python3 - "$out" "$@" <<'PY'
import math, statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
names = [a.split('=')[0] for a in sys.argv[2:]]
runs = {n: [float(v) for k, v in rows if k == n and not math.isnan(float(v))] for n in names}
base = statistics.median(runs[names[0]]) if runs[names[0]] else float('nan')
for n in names:
    xs = runs[n]
    if not xs:
        print(f"{n:12s} no result (did the driver fail?)")
        continue
    m = statistics.median(xs)
    print(f"{n:12s} median {m/1e6:9.3f}M ops/s  {m/base:5.2f}x {names[0]}  runs " +
          " ".join(f"{x/1e6:.3f}" for x in xs))
PY
