#!/usr/bin/env bash
# The whole shmkeeper test suite, as root on Debian 12:
#   1. installs what the tests need (Debian packages only), checks formatting and
#      unit-tests the Prometheus rules with promtool
#   2. builds with g++ and runs the unit tests (ctest)
#   3. builds with clang + AddressSanitizer/UBSan + libFuzzer, runs the unit
#      tests and the real-runc integration tests on that build, and runs every
#      fuzz target for a bounded time
#   4. runs integration and end-to-end tests (real runc, a private dockerd,
#      docker-compose, PyTorch) on the g++ build
#   5. runs peer suites (CPython's and numpy's own tests in a Debian image,
#      with and without the preload; the image tarball is cached in
#      /var/cache/shmkeeper-tests, built with debootstrap when absent)
#   6. with CI=true (or SHMKEEPER_QUICKSTART=1): runs deploy/quickstart.sh twice
#      and checks that the second run changes nothing
# Variables: FUZZ_SECONDS (20 per target), SHMKEEPER_QUICKSTART.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
jobs=$(nproc)
stage() { printf '\n==== %s\n' "$*"; }

stage "dependencies"
deploy/install-deps.sh test

stage "format (clang-format --dry-run --Werror, .clang-format)"
git ls-files '*.cc' '*.h' '*.c' | xargs clang-format --dry-run --Werror
echo "formatted: $(git ls-files '*.cc' '*.h' '*.c' | wc -l) files"

stage "Prometheus rules (promtool check rules, promtool test rules)"
promtool check rules deploy/monitoring/shmkeeper-rules.yaml
(cd tests/monitoring && promtool test rules shmkeeper-rules.test.yaml)

stage "build (g++)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"

stage "unit tests (g++)"
ctest --test-dir build --output-on-failure -j"$jobs" --output-junit "$results/ctest.xml"

stage "build (clang, address;undefined, libFuzzer)"
CC=clang CXX=clang++ cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug \
  -DSHMKEEPER_SANITIZE="address;undefined" -DSHMKEEPER_FUZZ=ON >/dev/null
cmake --build build-asan -j"$jobs"

stage "unit tests (sanitizers)"
ctest --test-dir build-asan --output-on-failure -j"$jobs" --output-junit "$results/ctest-asan.xml"

stage "integration tests (sanitizers, real runc)"
export SHMKEEPER_NO_SKIP=${SHMKEEPER_NO_SKIP:-$([ "${CI:-}" = true ] && echo 1 || echo 0)}
SHMKEEPER_BUILD_DIR="$repo/build-asan" /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration \
  --junitxml "$results/pytest-asan.xml"

stage "fuzz (${FUZZ_SECONDS}s per target)"
for target in size config spec runtime_args selector procfs compose containerd_config datagram sandbox_info; do
  corpus=$(mktemp -d)
  cp -r "tests/fuzz/corpus/$target/." "$corpus/"
  build-asan/tests/fuzz_$target -max_total_time="$FUZZ_SECONDS" -max_len=4096 -print_final_stats=0 -artifact_prefix="$results/" \
    "$corpus" 2>"$results/fuzz_$target.log" || { tail -40 "$results/fuzz_$target.log"; exit 1; }
  echo "fuzz_$target: $(ls "$corpus" | wc -l) corpus entries, no crash"
  rm -rf "$corpus"
done

stage "integration and end-to-end tests (real runc, dockerd, docker-compose, PyTorch)"
SHMKEEPER_BUILD_DIR="$repo/build" /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration tests/deploy tests/e2e \
  --junitxml "$results/pytest.xml"

stage "peer suites: CPython and numpy tests with and without the preload (debootstrap'd Debian, cached)"
SHMKEEPER_BUILD_DIR="$repo/build" /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/peer \
  --junitxml "$results/pytest-peer.xml"

if [ "${CI:-}" = true ] || [ "${SHMKEEPER_QUICKSTART:-0}" = 1 ]; then
  stage "quickstart, twice (idempotent)"
  tests/quickstart_check.sh
fi

stage "summary"
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
