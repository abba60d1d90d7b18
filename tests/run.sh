#!/usr/bin/env bash
# The shmkeeper test suite in stages, as root on Debian 12.
#   tests/run.sh                 every stage, in order (what CI runs through .ci/run)
#   tests/run.sh unit            only the named stages (always in the order below):
#   tests/run.sh e2e fuzz        ... e.g. tests/run.sh lint, tests/run.sh build unit
# Stages:
#   deps        deploy/install-deps.sh test (asks apt only for missing packages)
#   lint        clang-format --dry-run --Werror on every C/C++ file; clang-tidy
#               (.clang-tidy) on the C/C++ files changed since a base commit:
#               $SHMKEEPER_TIDY_BASE if set ("all": every file), else the
#               merge-base of HEAD with origin/main, else (HEAD is origin/main,
#               as in a fresh clone, or there is no origin/main) HEAD~1, else
#               every file; uncommitted and untracked files count as changed.
#               A changed header is checked through its own .cc/.c or, failing
#               that, a file that includes it. Uses build/compile_commands.json
#               (configures build/ if needed, generates the protobuf headers)
#   rules       promtool check/test of the Prometheus rules
#   build       g++ build in build/ (RelWithDebInfo)
#   unit        ctest on build/
#   build-asan  clang build in build-asan/: AddressSanitizer, UBSan, libFuzzer
#   unit-asan   ctest on build-asan/
#   integration tests/integration (real runc, containerd, ...) on build-asan/
#   fuzz        every target in build-asan/tests/fuzz-targets.txt (one per
#               tests/fuzz/fuzz_<name>.cc) from tests/fuzz/corpus/<name>/,
#               FUZZ_SECONDS each
#   e2e         tests/deploy and tests/e2e (private dockerd, docker-compose,
#               podman, PyTorch) on build/
#   engines     tests/engines: the newer engines (Debian sid's Docker 28 with
#               docker-cli and compose v2, containerd 2.1, podman 5, crun 1.28,
#               runc 1.3) started privately from a sid root (debootstrap,
#               built once by tests/engines/root.sh and cached in
#               /var/cache/shmkeeper-tests/roots), in a private mount+pid+net
#               namespace; the static CLI, runtime and hook inside; the real
#               workloads (PostgreSQL, DataLoader) on Docker 28; on build/.
#               trixie's Docker 26.1 and containerd 1.7 (also as NRI's
#               runtime) run in CI (CI=true) and with SHMKEEPER_ENGINES_TRIXIE=1
#               (=0: not even in CI); a second root: 9-12 minutes the first time, then ~60 s
#   peer        CPython's and numpy's own tests in a Debian image, with and
#               without the preload (image cached in /var/cache/shmkeeper-tests,
#               built with debootstrap when absent), on build/
#   quickstart  deploy/quickstart.sh twice; the second run must change nothing.
#               With no stage named it runs only when CI=true or
#               SHMKEEPER_QUICKSTART=1; named, it always runs
# A stage that needs a build (unit, e2e, engines, peer: build/; unit-asan, integration,
# fuzz: build-asan/) first runs that build's stage when the build dir holds no
# build yet (no tests/shmkeeper_unit_tests in it); an existing build is used as
# it is, so after a change name the build too (tests/run.sh build unit). Both builds use -DSHMKEEPER_WERROR=ON and
# ccache when it is installed (CCACHE_BASEDIR defaults to the checkout, so any
# clone on this machine hits the same cache; SHMKEEPER_CCACHE=0: no ccache).
# Each stage prints its wall time; the end prints a table of them and writes it
# to $SHMKEEPER_CI_TIMINGS (default build/ci-timings.txt), then the test counts.
# Variables: FUZZ_SECONDS (20 per target), SHMKEEPER_QUICKSTART,
# SHMKEEPER_TIDY_BASE, SHMKEEPER_CI_TIMINGS, SHMKEEPER_CCACHE, SHMKEEPER_NO_SKIP
# (default 1 under CI=true: a missing prerequisite fails instead of skipping),
# SHMKEEPER_TEST_TIMEOUT (1800: seconds a pytest test may run, fixtures included,
# before it fails and the run goes on; 0: off; tests/conftest.py).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

all_stages=(deps lint rules build unit build-asan unit-asan integration fuzz e2e engines peer quickstart)
usage() { echo "usage: tests/run.sh [stage...]; stages: ${all_stages[*]}"; }
declare -A wanted=()
if [ $# -eq 0 ]; then
  for s in "${all_stages[@]}"; do wanted[$s]=1; done
  if [ "${CI:-}" != true ] && [ "${SHMKEEPER_QUICKSTART:-0}" != 1 ]; then unset 'wanted[quickstart]'; fi
fi
for arg in "$@"; do
  case " ${all_stages[*]} " in
    *" $arg "*) wanted[$arg]=1 ;;
    *)
      if [ "$arg" = -h ] || [ "$arg" = --help ]; then usage; exit 0; fi
      echo "tests/run.sh: unknown stage '$arg' (stages: ${all_stages[*]})" >&2
      exit 2 ;;
  esac
done
# A stage whose build dir holds no build yet brings its build stage along.
built() { [ -x "$1/tests/shmkeeper_unit_tests" ]; }
if [ -n "${wanted[unit]:-}${wanted[e2e]:-}${wanted[engines]:-}${wanted[peer]:-}" ] && ! built build; then wanted[build]=1; fi
if [ -n "${wanted[unit-asan]:-}${wanted[integration]:-}${wanted[fuzz]:-}" ] && ! built build-asan; then
  wanted[build-asan]=1
fi

results=$(mktemp -d)
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
jobs=$(nproc)
export SHMKEEPER_NO_SKIP=${SHMKEEPER_NO_SKIP:-$([ "${CI:-}" = true ] && echo 1 || echo 0)}
timings=${SHMKEEPER_CI_TIMINGS:-$repo/build/ci-timings.txt}

cmake_args=(-DSHMKEEPER_WERROR=ON)
if [ "${SHMKEEPER_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$repo} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  cmake_args+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
else
  cmake_args+=(-DCMAKE_C_COMPILER_LAUNCHER= -DCMAKE_CXX_COMPILER_LAUNCHER=)
fi
configure_build() { cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cmake_args[@]}" >/dev/null; }

stage_deps() { deploy/install-deps.sh test; }

# tidy_base: the commit the lint stage diffs against ("all": no base).
tidy_base() {
  if [ -n "${SHMKEEPER_TIDY_BASE:-}" ]; then echo "$SHMKEEPER_TIDY_BASE"; return; fi
  local base
  if base=$(git merge-base HEAD origin/main 2>/dev/null) && [ "$base" != "$(git rev-parse HEAD)" ]; then
    echo "$base"
  elif git rev-parse -q --verify 'HEAD~1^{commit}' >/dev/null; then
    echo HEAD~1
  else
    echo all
  fi
}

# tidy_unit <file>: the source file clang-tidy is run on for a changed file
# (a header: its own .cc/.c, else the first tracked file including it).
tidy_unit() {
  local f=$1 stem=${1%.*}
  case "$f" in
    *.h)
      for ext in cc c; do [ -f "$stem.$ext" ] && { echo "$stem.$ext"; return; }; done
      # sed reads all: no SIGPIPE under pipefail; no includer (a header only headers include): none
      { git grep -l -E "#include \"([^\"]*/)?$(basename "$f")\"" -- '*.cc' '*.c' || true; } | sed -n 1p ;;
    *) echo "$f" ;;
  esac
}

stage_lint() {
  git ls-files '*.cc' '*.h' '*.c' | xargs clang-format --dry-run --Werror
  echo "clang-format: $(git ls-files '*.cc' '*.h' '*.c' | wc -l) files formatted"

  local base changed
  base=$(tidy_base)
  if [ "$base" = all ]; then
    changed=$(git ls-files '*.cc' '*.c' '*.h')
  else
    changed=$({ git diff --name-only --diff-filter=d "$base" -- '*.cc' '*.c' '*.h'
                git ls-files --others --exclude-standard -- '*.cc' '*.c' '*.h'; } | sort -u)
  fi
  local -a units=() skipped=()
  local f u
  for f in $changed; do
    u=$(tidy_unit "$f")
    [ -n "$u" ] && units+=("$u") || skipped+=("$f")
  done
  if [ ${#units[@]} -eq 0 ]; then
    echo "clang-tidy: no C/C++ file changed since $base${skipped:+ (no translation unit for: ${skipped[*]})}"
    return
  fi
  [ -f build/CMakeCache.txt ] || configure_build
  # Sources outside build/'s compile database (the fuzz targets: clang only)
  # are checked with build-asan's when there is one.
  local -a in_build=() in_asan=()
  for u in $(printf '%s\n' "${units[@]}" | sort -u); do
    if grep -qF "\"file\": \"$repo/$u\"" build/compile_commands.json; then in_build+=("$u")
    elif [ -f build-asan/compile_commands.json ] && grep -qF "\"file\": \"$repo/$u\"" build-asan/compile_commands.json; then
      in_asan+=("$u")
    else skipped+=("$u"); fi
  done
  # The protobuf headers the agent and CLI include are generated at build time.
  cmake --build build -j"$jobs" --target shmkeeper_proto shmkeeper_cri_proto shmkeeper_nri_proto >/dev/null
  echo "clang-tidy: ${#in_build[@]} + ${#in_asan[@]} files changed since $base"
  local tidy=(clang-tidy --quiet --extra-arg=-Wno-unknown-warning-option)
  local quiet='/^[0-9]+ warnings? generated\.$/d'  # clang-tidy's count of the warnings it did not show
  [ ${#in_build[@]} -eq 0 ] || printf '%s\n' "${in_build[@]}" | xargs -P"$jobs" -n1 "${tidy[@]}" -p build 2>&1 |
    sed -E "$quiet"
  [ ${#in_asan[@]} -eq 0 ] || printf '%s\n' "${in_asan[@]}" | xargs -P"$jobs" -n1 "${tidy[@]}" -p build-asan 2>&1 |
    sed -E "$quiet"
  [ ${#skipped[@]} -eq 0 ] || echo "clang-tidy: not in a compile database, not checked: ${skipped[*]}"
}

stage_rules() {
  promtool check rules deploy/monitoring/shmkeeper-rules.yaml
  (cd tests/monitoring && promtool test rules shmkeeper-rules.test.yaml)
}

stage_build() {
  configure_build
  cmake --build build -j"$jobs"
}

stage_unit() { ctest --test-dir build --output-on-failure -j"$jobs" --output-junit "$results/ctest.xml"; }

stage_build_asan() {
  CC=clang CXX=clang++ cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug \
    -DSHMKEEPER_SANITIZE="address;undefined" -DSHMKEEPER_FUZZ=ON "${cmake_args[@]}" >/dev/null
  cmake --build build-asan -j"$jobs"
}

stage_unit_asan() {
  ctest --test-dir build-asan --output-on-failure -j"$jobs" --output-junit "$results/ctest-asan.xml"
}

pytest_on() {  # pytest_on <build dir> <junit name> <paths...>
  local dir=$1 junit=$2
  shift 2
  SHMKEEPER_BUILD_DIR="$repo/$dir" /usr/bin/python3 -m pytest -q -p no:cacheprovider "$@" \
    --durations=10 --junitxml "$results/$junit.xml"
}

stage_integration() { pytest_on build-asan pytest-integration tests/integration; }

# fuzz_one <target>: one fuzz target for FUZZ_SECONDS on a copy of its corpus.
fuzz_one() {
  local target=$1 corpus
  corpus=$(mktemp -d)
  cp -r "tests/fuzz/corpus/${target#fuzz_}/." "$corpus/"
  if ! build-asan/tests/"$target" -max_total_time="$FUZZ_SECONDS" -max_len=4096 -print_final_stats=0 \
    -artifact_prefix="$results/" "$corpus" 2>"$results/$target.log" </dev/null; then
    tail -40 "$results/$target.log"
    echo "$target: FAILED"
    return 1
  fi
  echo "$target: $(ls "$corpus" | wc -l) corpus entries, no crash in ${FUZZ_SECONDS}s"
  rm -rf "$corpus"
}

# The targets run $jobs at a time, each single-threaded for its full
# FUZZ_SECONDS (the same fuzzing per target as one after the other).
stage_fuzz() {
  [ -s build-asan/tests/fuzz-targets.txt ] || { echo "no build-asan/tests/fuzz-targets.txt" >&2; return 1; }
  export -f fuzz_one
  export FUZZ_SECONDS results
  xargs -a build-asan/tests/fuzz-targets.txt -P"$jobs" -I{} bash -c 'fuzz_one "$1"' _ {}
}

stage_e2e() { pytest_on build pytest-e2e tests/deploy tests/e2e; }
stage_engines() { pytest_on build pytest-engines tests/engines; }
stage_peer() { pytest_on build pytest-peer tests/peer; }
stage_quickstart() { tests/quickstart_check.sh; }

# Timings: each stage's wall time as it ends; the table (and the file) at exit,
# also when a stage failed.
declare -a done_names=() done_secs=() done_results=()
current="" current_start=0
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
print_timings() {
  local i total=0 status=ok
  if [ -n "$current" ]; then
    done_names+=("$current"); done_secs+=("$(elapsed "$current_start")"); done_results+=(FAILED); status=FAILED
  fi
  [ ${#done_names[@]} -gt 0 ] || return 0
  mkdir -p "$(dirname "$timings")"
  {
    printf '%-12s %9s  %s\n' stage seconds result
    for i in "${!done_names[@]}"; do
      printf '%-12s %9s  %s\n' "${done_names[$i]}" "${done_secs[$i]}" "${done_results[$i]}"
      total=$(awk -v a="$total" -v b="${done_secs[$i]}" 'BEGIN { printf "%.1f", a + b }')
    done
    printf '%-12s %9s  %s\n' total "$total" "$status"
  } >"$timings.tmp"
  mv "$timings.tmp" "$timings"
  printf '\n==== stage timings (%s, %s)\n' "$timings" "$(date -u +%FT%TZ)"
  cat "$timings"
}
finish() {
  local rc=$?
  print_timings || true
  if [ "$rc" -ne 0 ] && [ -n "$(ls -A "$results")" ]; then
    echo "tests/run.sh: failed (exit $rc); test reports, fuzz logs and crash inputs kept in $results" >&2
  else
    rm -rf "$results"
  fi
  exit "$rc"
}
trap finish EXIT

for stage in "${all_stages[@]}"; do
  [ -n "${wanted[$stage]:-}" ] || continue
  printf '\n==== %s\n' "$stage"
  current=$stage current_start=$(date +%s.%N)
  "stage_${stage//-/_}"
  done_names+=("$stage"); done_secs+=("$(elapsed "$current_start")"); done_results+=(ok)
  current=""
  printf -- '---- %s: %s s\n' "$stage" "${done_secs[-1]}"
done

printf '\n==== summary\n'
/usr/bin/python3 - "$results" <<'PY'
import sys, glob, xml.etree.ElementTree as ET
p = f = s = 0
for path in glob.glob(sys.argv[1] + "/*.xml"):
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    for su in suites:
        t = int(su.get("tests", 0)); fl = int(su.get("failures", 0)) + int(su.get("errors", 0))
        sk = int(su.get("skipped", 0) or su.get("disabled", 0))
        p += t - fl - sk; f += fl; s += sk
print(f"tests: {p} passed, {f} failed, {s} skipped")
sys.exit(1 if f else 0)
PY
