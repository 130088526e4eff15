#!/bin/sh
# Installs mirror from an unpacked mirror-tool-VERSION/ directory, offline:
#   - checks every file against SHA256SUMS (and its signature with --key transfer.pub)
#   - a virtualenv in PREFIX (default /opt/mirror), filled with `pip install --no-index`
#     from wheels/ (nothing is fetched), its wheelhouse kept in PREFIX/share/mirror
#   - the link BINDIR/mirror (default /usr/local/bin/mirror), where the units expect it
#   - the systemd units in /etc/systemd/system (not enabled) and
#     /etc/mirror/config.example.toml; an existing /etc/mirror/config.toml is left alone
#   - the documentation (doc/: README.md, docs/, ...) in /usr/share/doc/mirror, where the
#     units' Documentation= points
#   - then says which features this host got (some need a wheel PyPI has for x86_64 only)
# Needs Python 3.11 or 3.12 (python3-venv on Debian/Ubuntu), sha256sum, and openssl
# for --key. Run again to upgrade in place. Without --key the signature is NOT checked
# (anyone could have rebuilt and re-signed the artefact): it installs, and says so on stderr.
#
# Usage: ./install.sh [--key transfer.pub] [--prefix /opt/mirror] [--bindir /usr/local/bin]
#                     [--python python3.11] [--no-systemd] [--root DIR]
#        ./install.sh --check-only --key transfer.pub   (check files and signature, install nothing)
# --root installs under DIR (paths inside stay as given; for tests and image builds).
# Before installing, read doc/README.md#install (the steps on each host).
set -eu

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
root=""
prefix=/opt/mirror
bindir=/usr/local/bin
python=""
key=""
systemd=yes
check_only=no

fail() { echo "install.sh: error: $*" >&2; exit 1; }
# Said before installing and again as the last words: an unchecked signature is never quiet.
# The check it prints uses standard tools only: whoever re-signed the artefact could have
# changed this script (and its --check-only) too.
unchecked() {
    echo "install.sh: WARNING: the signature of SHA256SUMS was NOT checked (no --key): a" \
        "rebuilt or re-signed artefact installs just the same." >&2
    echo "install.sh: check it with the connected side's transfer.pub and standard tools," \
        "not with this artefact's own install.sh (a re-signer could change it too):" >&2
    {
        printf "  cd '%s' && " "$here"
        cat <<'CHECK'
sed -n 's/^ *"signature": "\([^"]*\)".*/\1/p' SHA256SUMS.sig | base64 -d >/tmp/SHA256SUMS.sig.bin && openssl pkeyutl -verify -pubin -inkey /etc/mirror/transfer.pub -rawin -in SHA256SUMS -sigfile /tmp/SHA256SUMS.sig.bin && sha256sum -c --quiet SHA256SUMS
CHECK
    } >&2
}

while [ $# -gt 0 ]; do
    case "$1" in
        --root) root=${2%/}; shift 2 ;;
        --prefix) prefix=$2; shift 2 ;;
        --bindir) bindir=$2; shift 2 ;;
        --python) python=$2; shift 2 ;;
        --key) key=$2; shift 2 ;;
        --no-systemd) systemd=no; shift ;;
        --check-only) check_only=yes; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

if [ "$check_only" = yes ] && [ -z "$key" ]; then
    echo "install.sh: --check-only needs --key transfer.pub (see --help)" >&2
    exit 2
fi
if [ -n "$key" ]; then
    if [ ! -f "$key" ] || [ ! -r "$key" ]; then
        echo "install.sh: --key $key: no such readable file (the connected side's transfer.pub)" >&2
        exit 2
    fi
    case $key in /*) ;; *) key="$PWD/$key" ;; esac  # read after the cd below
fi
cd "$here"
command -v sha256sum >/dev/null || fail "sha256sum is needed (coreutils)"
sha256sum --quiet --strict -c SHA256SUMS || fail "a file does not match SHA256SUMS"
# pip takes the newest wheel it finds in wheels/, listed or not: a file the signed list does
# not name (an added wheel, a link) is refused before anything is installed.
listed=$(mktemp)
sed 's/^[0-9a-f]\{64\} [ *]//' SHA256SUMS | LC_ALL=C sort >"$listed"
unlisted=$(find . ! -type d ! -path ./SHA256SUMS ! -path ./SHA256SUMS.sig | sed 's#^\./##' \
    | LC_ALL=C sort | LC_ALL=C comm -23 - "$listed")
rm -f "$listed"
[ -z "$unlisted" ] || fail "not listed in SHA256SUMS, so nothing was installed: $(echo $unlisted)"
if [ -n "$key" ]; then
    command -v openssl >/dev/null || fail "--key needs openssl (3.0 or newer)"
    signature=$(mktemp)
    trap 'rm -f "$signature"' EXIT
    sed -n 's/^ *"signature": "\([^"]*\)".*/\1/p' SHA256SUMS.sig | base64 -d >"$signature"
    openssl pkeyutl -verify -pubin -inkey "$key" -rawin -in SHA256SUMS -sigfile "$signature" \
        >/dev/null || fail "SHA256SUMS.sig is not a signature by $key"
    echo "signature of SHA256SUMS checked with $key"
fi
if [ "$check_only" = yes ]; then
    echo "checked: every file matches SHA256SUMS, signed by $key; nothing was installed"
    exit 0
fi
[ -n "$key" ] || unchecked

if [ -z "$python" ]; then
    for candidate in python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null \
            && "$candidate" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 12))'
        then
            python=$candidate
            break
        fi
    done
    [ -n "$python" ] || fail "Python 3.11 or 3.12 is needed (apt install python3 python3-venv)"
fi

venv=$root$prefix
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv" || fail "cannot create the virtualenv $venv (python3-venv?)"
fi
PIP_CONFIG_FILE=/dev/null "$venv/bin/python" -m pip install --quiet --no-index \
    --disable-pip-version-check --find-links "$here/wheels" --upgrade mirror \
    || fail "pip install from $here/wheels failed (a wheel for this platform missing?)"

share=$venv/share/mirror
rm -rf "$share"
mkdir -p "$share/systemd" "$share/wheels"
cp -p wheels/*.whl "$share/wheels/"
cp -p install.sh config.example.toml SHA256SUMS SHA256SUMS.sig "$share/"
[ ! -f requirements.lock ] || cp -p requirements.lock "$share/"
[ ! -d doc ] || cp -pR doc "$share/doc"
cp -p systemd/* "$share/systemd/"

docs=$root/usr/share/doc/mirror
if [ -d doc ]; then
    rm -rf "$docs"
    mkdir -p "$docs"
    cp -pR doc/. "$docs/"
    chmod -R u=rwX,go=rX "$docs"
fi

mkdir -p "$root$bindir"
ln -sfn "$venv/bin/mirror" "$root$bindir/mirror"

install -d -m 0755 "$root/etc/mirror"
install -m 0644 config.example.toml "$root/etc/mirror/config.example.toml"
if [ "$systemd" = yes ]; then
    install -d -m 0755 "$root/etc/systemd/system"
    install -m 0644 systemd/* "$root/etc/systemd/system/"
fi

"$root$bindir/mirror" --version
"$venv/bin/python" -m mirror.features || fail "the installed tool does not start"
echo "installed: $venv, link $bindir/mirror, documentation /usr/share/doc/mirror"
echo "next: /etc/mirror/config.toml (mode 0644, no secrets), keys:" \
    "/usr/share/doc/mirror/README.md#install"
[ -n "$key" ] || unchecked
