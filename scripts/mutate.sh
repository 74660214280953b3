#!/usr/bin/env bash
# Mutation check: applies one-line mutations to pipeline/ and store/, one at
# a time, in a scratch copy of the module, runs both packages' tests and
# reports which mutations no test noticed ("survived"):
#   scripts/mutate.sh            # every mutation; exit 1 if one survives
#   scripts/mutate.sh outage     # only the ones whose name contains "outage"
#   scripts/mutate.sh --check    # only that every mutation still applies (seconds)
# Each mutation is a block of three lines below: "file: what it breaks",
# "- text" that must occur exactly once in the file, "+ text" to put there.
# A mutation whose text is gone from the code is reported STALE, one that
# does not compile NO-BUILD: either fails the script (exit 1, with the
# list), since it checks nothing until the list is fixed, and a green run
# must mean every mutation was tried and killed.
set -euo pipefail
cd "$(dirname "$0")/.."
check_only=false
if [ "${1:-}" = --check ]; then
  check_only=true
  shift
fi
filter="${1:-}"

mutations=$(cat <<'EOF'
pipeline/policy.go: a per-day 429 does not park at once
- case rl.Daily:
+ case false && rl.Daily:

pipeline/policy.go: a retryDelay over --max-wait does not park
- case rl.RetryAfter > cfg.MaxWait:
+ case false && rl.RetryAfter > cfg.MaxWait:

pipeline/policy.go: the 200-refusals-in-a-row park is gone
- case cfg.MaxRefused > 0 && f.refusedInARow >= int64(cfg.MaxRateLimited):
+ case false:

pipeline/policy.go: the 30 s first-contact outage limit is dropped
- if !f.contacted && firstContactOutage < limit {
+ if false {

pipeline/policy.go: the outage limit is off by one check (> instead of >=)
- if down := now.Sub(f.outageSince); down >= limit {
+ if down := now.Sub(f.outageSince); down > limit {

pipeline/policy.go: a canceled call falls through and is dead-lettered
- return action{kind: requeue}
+ return action{kind: deadLetter, message: f.err.Error()}

pipeline/policy.go: a bare 429 gets no pause from a limiter that does not back it off itself (a fixed pool)
- case rl.RetryAfter > 0 && cfg.Limiter != nil, holdsRefusals(cfg.Limiter):
+ case cfg.Limiter != nil:

pipeline/policy.go: the transient budget allows one attempt too many
- if f.attempts < cfg.MaxAttempts {
+ if f.attempts <= cfg.MaxAttempts {

pipeline/policy.go: refusals spend attempts
- case ClassRateLimited, ClassUnavailable, ClassOverloaded, ClassCanceled, ClassFatal, ClassShed:
+ case ClassUnavailable, ClassOverloaded, ClassCanceled, ClassFatal, ClassShed:

pipeline/commit.go: outcomes counted although the commit failed
- if committed {
+ if true {

pipeline/commit.go: a failed commit is not retried
- attempts := r.CommitAttempts
+ attempts := 1

pipeline/commit.go: results of a failed commit get no last try
- carried = r.commitBatch(carried, true)
+ _ = carried

pipeline/commit.go: no backlog bound: calls start whatever waits for its commit
- full := n >= maxCount || (n > 0 && clock.Now().Sub(b.arrived[0]) >= maxAge)
+ full := n >= maxCount

pipeline/health.go: the outage clock is read back apart from its update (the old race)
- h.outageSince = now
+ h.outageSince = now; h.mu.Unlock(); for range 100 { _ = now.String() }; h.mu.Lock()

pipeline/health.go: a 429 does not end an outage
- h.outageSince, h.contacted = time.Time{}, true
+ h.contacted = true

pipeline/health.go: a success does not end a run of refusals
- h.refusedInARow, h.outageSince, h.contacted, h.worked = 0, time.Time{}, true, true
+ h.outageSince, h.contacted, h.worked = time.Time{}, true, true

pipeline/process.go: unavailable calls counted as transient
- c.unavailable.Add(1)
+ c.transient.Add(1)

pipeline/process.go: a verdict counts toward the same-failure stop
- if isVerdict(o.err) || o.res.Usage != (Usage{}) {
+ if false {

pipeline/process.go: only the last call's usage travels with the outcome
- it.paid = it.paid.Add(res.Usage)
+ it.paid = res.Usage

pipeline/park.go: the same-failure stop does not count what it dead-lettered
- same.DeadLettered = c.deadReasons[same.key]
+ same.DeadLettered = 0

pipeline/run.go: no grace period after Ctrl-C
- if sleep(workCtx, clock, r.Grace) {
+ if sleep(workCtx, clock, 0) {

pipeline/errors.go: a connect timeout is transient
- case errors.As(err, &ue), isDialError(err):
+ case errors.As(err, &ue):

store/transitions.go: the stale-transition guard ignores the queue sequence
- if !ok || s.Status != pipeline.StatusQueued || s.Stage != si || s.Seq != t.Seq {
+ if !ok || s.Status != pipeline.StatusQueued || s.Stage != si {

store/read.go: Check() reports nothing
- if len(problems) < 100 {
+ if false {
EOF
)

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
$check_only || tar --exclude=.git -cf - . | tar -xf - -C "$scratch"

printf '| # | mutation | file | result | failing tests |\n|---|---|---|---|---|\n'
n=0 survived=0 broken=()
while IFS= read -r head && IFS= read -r minus && IFS= read -r plus; do
  IFS= read -r _ || true # the blank line between blocks
  file="${head%%: *}" what="${head#*: }"
  orig="${minus#- }" repl="${plus#+ }"
  if [ -n "$filter" ] && [[ "$what" != *"$filter"* ]]; then continue; fi
  n=$((n + 1))
  result="" killer=""
  if [ "$(grep -cF -- "$orig" "$file" 2>/dev/null || true)" != 1 ]; then
    result="STALE"
    broken+=("STALE $file: $what (\"$orig\" is not in the file exactly once)")
  elif $check_only; then
    result="applies"
  else
    ORIG="$orig" REPL="$repl" awk 'BEGIN { o = ENVIRON["ORIG"]; r = ENVIRON["REPL"] }
      { i = index($0, o); if (i > 0) $0 = substr($0, 1, i - 1) r substr($0, i + length(o)); print }' \
      "$file" >"$scratch/$file"
    if ! (cd "$scratch" && go vet ./pipeline/ ./store/ >"$scratch/log" 2>&1); then
      result="NO-BUILD"
      broken+=("NO-BUILD $file: $what")
    elif (cd "$scratch" && go test -count=1 -timeout 120s ./pipeline/ ./store/ >"$scratch/log" 2>&1); then
      result="SURVIVED"
      survived=$((survived + 1))
    else
      result="killed"
      killer=$(grep -oE -- '^--- FAIL: [^ ]+' "$scratch/log" | sed 's/^--- FAIL: //' | sort -u | paste -sd, - | sed 's/,/, /g' || true)
      [ -n "$killer" ] || killer=$(grep -m1 -E 'panic|FAIL' "$scratch/log" || true)
    fi
    cp "$file" "$scratch/$file"
  fi
  printf '| %d | %s | %s | %s | %s |\n' "$n" "$what" "$file" "$result" "$killer"
done <<<"$mutations"
echo
echo "$n mutations, $survived survived, ${#broken[@]} stale or not building"
if [ "${#broken[@]}" -gt 0 ]; then
  echo "mutate.sh: these mutations no longer apply to the code: update their text in scripts/mutate.sh" >&2
  printf '  %s\n' "${broken[@]}" >&2
  exit 1
fi
[ "$survived" = 0 ]
