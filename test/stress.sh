#!/usr/bin/env bash
# Runs chosen tests many times over on a loaded machine, to find the ones that
# fail only now and then before CI does.
#
#   test/stress.sh BUILD N BUSY "TESTS..."
#
# Each word of TESTS names an ERT file by its middle (`call-process' is
# test/lisp/fastrevert-call-process-test.el) or, failing that, is a ctest
# regular expression (`native\.run_call'). Each runs N times, one run after
# the other, in the build BUILD, while BUSY busy loops keep the CPUs taken.
# Every run gets a seed of its own in FASTREVERT_TEST_SEED, which the seeded
# tests use and print; a failure is reported with that seed and its log,
# kept in BUILD/stress/.  To run a failure again with its seed:
#
#   FASTREVERT_TEST_SEED=SEED ctest --test-dir BUILD -R REGEX --output-on-failure
set -uo pipefail

[ $# -eq 4 ] || { echo "usage: $0 BUILD N BUSY \"TESTS...\"" >&2; exit 2; }
build=$(realpath "$1")
runs=$2
busy=$3
read -r -a tests <<<"$4"
source_dir=$(realpath "$(dirname "$0")/..")
logs=$build/stress
mkdir -p "$logs"

[ ${#tests[@]} -gt 0 ] || { echo "stress: TESTS names no test" >&2; exit 2; }

loops=()
stop_loops() {
  local pid
  for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null; done
  wait 2>/dev/null
}
trap stop_loops EXIT
trap 'exit 130' INT TERM
for ((i = 0; i < busy; i++)); do
  sh -c 'while :; do :; done' &
  loops+=($!)
done

# The ctest expression for one word of TESTS.
regex_for() {
  if [ -f "$source_dir/test/lisp/fastrevert-$1-test.el" ]; then
    echo "^ert\\.fastrevert-$1-test\$"
  else
    echo "$1"
  fi
}

total_failed=0
report=()
for test in "${tests[@]}"; do
  regex=$(regex_for "$test")
  count=$(cd "$build" && ctest -N -R "$regex" | sed -n 's/^Total Tests: //p')
  if [ "${count:-0}" -eq 0 ]; then
    echo "stress: no test of $build matches $regex" >&2
    exit 2
  fi
  name=${test//[^A-Za-z0-9_.-]/_}
  passed=0
  failures=()
  for ((run = 1; run <= runs; run++)); do
    seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
    log=$logs/$name.$run.log
    started=$(date +%s)
    if (cd "$build" && FASTREVERT_TEST_SEED=$seed \
          ctest -R "$regex" --output-on-failure --no-tests=error >"$log" 2>&1); then
      passed=$((passed + 1))
      outcome=passed
    else
      failures+=("run $run, seed $seed: $log")
      outcome=FAILED
    fi
    echo "stress: $test run $run/$runs (seed $seed): $outcome in $(($(date +%s) - started)) s"
  done
  report+=("$test: $passed/$runs passed ($count ctest tests per run, $busy busy loops)")
  for failure in "${failures[@]}"; do report+=("  failed $failure"); done
  total_failed=$((total_failed + runs - passed))
done

echo
echo "stress summary"
printf '%s\n' "${report[@]}"
[ "$total_failed" -eq 0 ]
