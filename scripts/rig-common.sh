# Shared by the rig's scripts (sourced, not run): messages, root, apt and the cache.
say()  { printf '[rig] %s\n' "$*" >&2; }
die()  { printf '[rig] ERROR: %s\n' "$*" >&2; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# docker.io recommends needrestart, whose apt hook would print Perl warnings here
# and may restart the operator's services: suspend it for our installs.
apt_get() {
  as_root env DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes NEEDRESTART_SUSPEND=1 \
    apt-get "$@"
}
apt_install() {
  command -v apt-get >/dev/null || die "apt-get not found: install $* by hand"
  # Try the package lists as they are; refresh them only when that fails (a
  # fresh machine's lists may be missing, or stale and pointing at removed files).
  apt_get install -y -qq "$@" >/dev/null 2>&1 && return 0
  say "apt-get install $* failed with the current package lists: running apt-get update"
  apt_get update -qq || die "apt-get update failed (no network to Debian's mirrors?)"
  apt_get install -y -qq "$@" >/dev/null || die "apt-get install $* failed"
}
CACHE="${INFER_TOP_RIG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/infer-top-rig}"
mkdir -p "$CACHE"
