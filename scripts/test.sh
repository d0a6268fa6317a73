#!/bin/sh
# test.sh: install, build and run every test (README's command 2; .ci/run calls exactly this).
#   1. dependencies (scripts/install-deps.sh) and the real SmolLM2 model (skipped tests if offline)
#   2. build/       -Werror build: every Criterion suite (fixtures built once, here)
#   3. build-asan/  ASan + UBSan build: every suite again
#   4. build-tsan/  TSan build: tests/stress_threads (pool, multi-threaded batched forward, actor
#                   mailbox with 4 producers x 1M messages on a libevent loop, compute worker), and
#                   the server suites and the short soak of the OpenAI API driving the TSan
#                   minionsd; the Criterion suites themselves cannot start under TSan
#                   (Snaipe/Criterion#274)
# The sanitizer builds' daemons run their model work in kernels built without the sanitizer
# (Makefile.am's PROGRAM_KERNELS); the suites' own forward passes use the checked ones.
# Ends with one line "tests: N passed, N failed, N skipped", summed over every suite's own summary
# (skips from Criterion's [SKIP] lines, each suite's reasons beside its log's line); a suite
# that printed no summary (it crashed or never started), or that failed after it (its .trs says
# so: a sanitizer's report at exit), counts as one failure, and so does a build or a make check
# that failed before its suites ran.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
case "$top" in
*[[:space:]]*) echo "test: the checkout's path has a space ('$top'): autotools cannot build there" >&2; exit 2 ;;
esac
jobs=$(nproc 2>/dev/null || echo 2)
export CRITERION_VERBOSITY_LEVEL=1 # a [SKIP] line per skipped test (the summary does not count them)

sh scripts/install-deps.sh
tools/fetch-smollm2.sh || echo "test: SmolLM2 unavailable; its tests will be skipped"
# fixtures made while the model was missing lack its references: make them again now it is here
if [ -f models/cache/SmolLM2-135M-Instruct.Q4_1.gguf ] && [ ! -f build/tests/data/smollm2.top2 ]; then
  rm -f build/tests/data/.stamp
fi
[ -x configure ] || ./autogen.sh

# A step that fails without a suite's log to say so (a build, a harness that stopped before its
# tests ran, a suite that exited non-zero after its summary) is one failure of its own: "broken".
broken=0
fail() { # what failed
  echo "test: $*"
  broken=$((broken + 1))
  status=1
}

build() { # dir, configure flags...
  dir=$1
  shift
  mkdir -p "$dir"
  if [ ! -f "$dir/Makefile" ] || [ configure -nt "$dir/Makefile" ]; then
    (cd "$dir" && "$top/configure" -q "$@") || return 1
  fi
  make -s -C "$dir" -j"$jobs" all ${kernels:+"PROGRAM_KERNELS=$kernels"}
}

rm -f build/tests/*.log build/tests/*.trs build-asan/tests/*.log build-asan/tests/*.trs \
  build-tsan/tests/*.log build-tsan/tests/*.trs # count this run only
status=0
kernels=
if build build --enable-werror --with-criterion; then
  make -s -C build -j"$jobs" check || status=1
else
  fail "the -Werror build failed"
fi
# The sanitizer builds' programs (minionsd, minions-generate) link the normal build's kernels: the
# code they would compile for themselves without the sanitizer (Makefile.am's PROGRAM_KERNELS).
kernels="$top/build/libminions_kernels.a"
if build build-asan --enable-werror --enable-asan --with-criterion; then
  make -s -C build-asan -j"$jobs" check FIXTURE_DIR="$top/build/tests/data" PROGRAM_KERNELS="$kernels" || status=1
else
  fail "the ASan + UBSan build failed"
fi
if build build-tsan --enable-werror --enable-tsan; then
  # (only stress_threads is built of the test programs: the Criterion suites cannot start under TSan)
  make -s -C build-tsan -j"$jobs" check FIXTURE_DIR="$top/build/tests/data" PROGRAM_KERNELS="$kernels" \
    TESTS="tests/stress_threads" check_PROGRAMS="tests/stress_threads" || status=1
else
  fail "the TSan build failed"
fi
# The server suites once more against the TSan minionsd: the Criterion runner is the normal build's
# (it cannot start under TSan), the daemon it starts is TSan's, and a race report makes the daemon
# exit non-zero, which the suites check at every shutdown. Every test runs there but the SmolLM2
# drafts' (a minute under TSan, for the code paths of the bundled drafts' tests on a larger target).
# A hung run is killed after 10 minutes (here each takes under 2).
hang="timeout --kill-after=30 600"
tsan_run() { # log name, command...: its exit status beside its log, as automake's .trs would be
  log="$top/build-tsan/tests/$1.log"
  shift
  "$@" >"$log" 2>&1
  rc=$?
  [ $rc = 0 ] && echo ":test-result: PASS" >"${log%.log}.trs" || echo ":test-result: FAIL (exit $rc)" >"${log%.log}.trs"
  return $rc
}
mkdir -p build-tsan/tests
tsan_env="MINIONS_BIN_DIR=$top/build-tsan MINIONS_SRCDIR=$top MINIONS_TEST_DATA=$top/build/tests/data CRITERION_JOBS=2"
(cd build && tsan_run test_server env $tsan_env $hang ./tests/test_server) || status=1
(cd build && tsan_run test_speculate env $tsan_env $hang ./tests/test_speculate --filter 'speculate/!(smollm2*)') ||
  status=1
# The HTTP front end's threads under TSan: 300 requests of tests/soak-http-short.sh (about 5 s).
tsan_run soak-http-short env $tsan_env SOAK_REQUESTS=300 $hang sh tests/soak-http-short.sh || status=1

passed=0
failed=0
skipped=0
for log in build/tests/*.log build-asan/tests/*.log build-tsan/tests/*.log; do
  [ -f "$log" ] || continue
  line=$(grep -a -E 'Synthesis:|^[a-z_-]+: [0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1) || true
  case "$line" in
    *Synthesis:*)
      p=$(echo "$line" | sed -n 's/.*Passing: \([0-9]*\).*/\1/p')
      f1=$(echo "$line" | sed -n 's/.*Failing: \([0-9]*\).*/\1/p')
      f2=$(echo "$line" | sed -n 's/.*Crashing: \([0-9]*\).*/\1/p')
      f=$((f1 + f2)) ;;
    *passed*)
      p=$(echo "$line" | sed -n 's/.*: \([0-9]*\) passed.*/\1/p')
      f=$(echo "$line" | sed -n 's/.* \([0-9]*\) failed.*/\1/p') ;;
    *)
      p=0
      f=1
      line="no summary: the suite crashed, hung (killed by its timeout) or did not start" ;;
  esac
  # the harness's verdict too: a suite may print its summary and then fail (a sanitizer's report at
  # exit, a leak), or be killed after a partial one
  trs=${log%.log}.trs
  if [ "$f" = 0 ] && [ -f "$trs" ] && grep -q -E '^:test-result: (FAIL|ERROR)' "$trs"; then
    f=1
    line="$line; then it failed: $(grep -E '^:test-result:' "$trs" | head -n 1 | cut -c15-)"
  fi
  # skipped tests and why (a missing model, no CUDA device, not root): one line per reason
  k=$(grep -a -c '^\[SKIP\]' "$log") || true
  if [ "$k" != 0 ]; then
    line="$line; $k skipped: $(grep -a '^\[SKIP\]' "$log" | sed 's/^[^:]*::[^:]*: //' | sort | uniq -c |
      sed 's/^ *\([0-9]*\) \(.*\)/\2 (\1)/' | paste -s -d ';' -)"
  fi
  passed=$((passed + p))
  failed=$((failed + f))
  skipped=$((skipped + k))
  echo "$log: $line"
  if [ "$f" != 0 ]; then # say which test failed and why: CI shows only this output
    grep -a -E '\[(----|FAIL)\]|^FAIL|: FAIL |violation|kept /|without its summary|did not start|CRASH|Timed out|ERROR: |WARNING: ThreadSanitizer' "$log" |
      head -n 40 | sed 's/^/    /'
  fi
done
# a make check that failed with every log it left clean stopped before some suite ran (fixtures,
# a test program that did not build): that is a failure no log counts
[ "$status" = 0 ] || [ "$failed" != 0 ] || [ "$broken" != 0 ] || fail "a step failed before its suites ran (see above)"
failed=$((failed + broken))
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ] || status=1
exit $status
