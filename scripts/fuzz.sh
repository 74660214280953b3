#!/usr/bin/env bash
# Runs every fuzz target for a budget (default 20 s), one after another:
#   scripts/fuzz.sh [seconds | Nx]
# A budget of Nx runs N inputs per target instead of a time. CI uses a count:
# a time budget goes through Go 1.26's coordinator race at the deadline
# (go.dev/issue/75804, fixed in Go 1.27), which on a loaded machine fails a
# target with a bare "context deadline exceeded" and no crashing input. A
# count sets no deadline, so load only makes it slower.
# Each target starts from its seed corpus (the f.Add calls, plus
# testdata/fuzz/<Target> when present); a failure leaves the crashing input
# there and fails the script. List kept in step with `grep -rn 'func Fuzz'`.
set -euo pipefail
cd "$(dirname "$0")/.."

budget="${1:-20}"
case "$budget" in
  *[!0-9]*x | x) echo "budget $budget: want seconds (20) or a count of inputs (20000x)"; exit 2 ;;
  *x) fuzztime="$budget" minimize="1000x" ;;
  ''|*[!0-9]*) echo "budget $budget: want seconds (20) or a count of inputs (20000x)"; exit 2 ;;
  *) fuzztime="${budget}s" minimize="60s" ;;
esac
targets=(
  "./ingest FuzzReader"
  "./ingest FuzzPlainObject"
  "./stages FuzzClean"
  "./stages FuzzClassifyResponse"
  "./store/postgres FuzzDecodeRecord"
  "./store/postgres FuzzObjectKeys"
  "./store/postgres FuzzUnpack"
  "./store/postgres FuzzBinaryRecord"
  "./store/postgres FuzzNamedRecord"
  "./internal/jsonscan FuzzValue"
  "./internal/jsonquote FuzzPlainLen"
  "./internal/jsonquote FuzzAppend_AsMarshal"
  "./report FuzzWriteFlat_SameAsBefore"
  "./report FuzzAppendCanonical"
)

# Fail if a fuzz target exists that this list does not run.
found=$(grep -rhoE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' . | sed 's/^func //' | sort)
listed=$(for t in "${targets[@]}"; do echo "${t#* }"; done | sort)
if [ "$found" != "$listed" ]; then
  echo "fuzz targets in the code and in $0 differ:"; diff <(echo "$listed") <(echo "$found") || true
  exit 1
fi

for t in "${targets[@]}"; do
  pkg="${t% *}" name="${t#* }"
  echo "== $name ($pkg, $fuzztime)"
  # -parallel bounds the fuzzing workers: CI has 2 cores. A count budget
  # minimizes by count too, for the same reason as above.
  go test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" -parallel 2
done
