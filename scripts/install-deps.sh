#!/bin/sh
# install-deps.sh: everything minions needs on Debian 12, installed idempotently.
#   - Debian packages (compiler, autotools, libraries, Criterion, Python with numpy and regex, curl
#     and nginx for the HTTP tests (nginx is only run by tests/nginx.sh, as the current user; the
#     package's own service on port 80 starts at its install, and is not used),
#     qemu-user (tests/cli.sh runs the binaries on an emulated CPU without AVX: the generic kernels), and
#     the public-domain corpora the bundled models were trained on, for the held-out tests);
#   - .venv: a virtual environment over Debian's Python with the PyPI `gguf` package, used by
#     tools/ for the test fixtures and the independent reference implementations, and the HTTP
#     clients the tests drive minionsd with (`openai`, `prometheus_client`).
# Safe to run again: it installs only what is missing. `--train` adds what tools/train needs:
# Debian's python3-torch with libopenblas0-openmp (without it torch falls back to the reference
# BLAS, ~20x slower). `--bench` adds gnuplot-nox, which the benchmark tools draw docs/*.png with.
set -eu
cd "$(dirname "$0")/.."

PKGS="build-essential autoconf automake libtool pkg-config ca-certificates unzip
      libevent-dev libjemalloc-dev libnanomsg-dev libjansson-dev libutf8proc-dev libcriterion-dev
      python3 python3-numpy python3-regex python3-venv python3-yaml curl nginx-light qemu-user
      bible-kjv bible-kjv-text sword-text-web diatheke dict-devil"
for arg in "$@"; do
  case "$arg" in
    --train) PKGS="$PKGS python3-torch libopenblas0-openmp" ;;
    --bench) PKGS="$PKGS gnuplot-nox" ;;
    *) echo "install-deps: unknown option $arg (--train, --bench)" >&2; exit 2 ;;
  esac
done
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if [ -n "$SUDO" ] && ! command -v sudo >/dev/null; then # Debian installed with a root password has no sudo
    echo "install-deps: missing$missing; run this as root once, or install sudo" >&2
    exit 1
  fi
  echo "install-deps: installing$missing"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  case " $missing " in
  *" nginx-light "*) echo "install-deps: Debian's nginx package also started its own service on port 80;" \
    "the tests do not use it ('systemctl disable --now nginx' stops it)" ;;
  esac
fi

# PyPI's packages are for the tests' fixtures and clients: without PyPI (offline) the engine still
# builds and runs, and the tests that need them fail saying what is missing.
if ! .venv/bin/python -c "import gguf, numpy, regex" 2>/dev/null; then
  echo "install-deps: creating .venv (Debian's python3 + PyPI gguf)"
  /usr/bin/python3 -m venv --clear --system-site-packages .venv
  .venv/bin/pip install -q --disable-pip-version-check "gguf==0.19.0" ||
    echo "install-deps: cannot install gguf from PyPI; the test fixtures cannot be made" >&2
fi
if ! .venv/bin/python -c "import openai, prometheus_client" 2>/dev/null; then
  echo "install-deps: the HTTP test clients (PyPI openai, prometheus_client)"
  .venv/bin/pip install -q --disable-pip-version-check "openai==2.8.1" "prometheus_client==0.23.1" ||
    echo "install-deps: cannot install openai and prometheus_client from PyPI; tests/http-clients.sh will fail" >&2
fi
