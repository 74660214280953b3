#!/usr/bin/env bash
# Runs every fuzz target for N seconds (default 20), one after another:
#   scripts/fuzz.sh [seconds]
# Each target starts from its seed corpus (the f.Add calls, plus
# testdata/fuzz/<Target> when present); a failure leaves the crashing input
# there and fails the script. List kept in step with `grep -rn 'func Fuzz'`.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-20}"
targets=(
  "./ingest FuzzReader"
  "./stages FuzzClean"
  "./stages FuzzClassifyResponse"
  "./store/postgres FuzzDecodeRecord"
  "./store/postgres FuzzObjectKeys"
  "./store/postgres FuzzUnpack"
  "./store/postgres FuzzBinaryRecord"
  "./internal/jsonscan FuzzValue"
  "./report FuzzWriteFlat_SameAsBefore"
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
  echo "== $name ($pkg, ${secs}s)"
  # -parallel bounds the fuzzing workers: CI has 2 cores.
  go test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "${secs}s" -parallel 2
done
