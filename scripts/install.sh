#!/bin/sh
# Builds rsend, rreceive and rdump and installs them under PREFIX (default
# /usr/local) with their shell completions (bash, zsh, fish) and man pages,
# which each built tool prints itself (--completions SHELL, --man), and with
# rsend the btrfs front (scripts/btrfs-rsend) and the nightly backup command
# (scripts/rsend-nightly).
#
#   scripts/install.sh [--no-build] [PREFIX]
#
#   PREFIX/bin/TOOL
#   PREFIX/share/bash-completion/completions/TOOL
#   PREFIX/share/zsh/site-functions/_TOOL
#   PREFIX/share/fish/vendor_completions.d/TOOL.fish
#   PREFIX/share/man/man1/TOOL.1
#   PREFIX/share/doc/TOOL/TOOL.md             the tool's guide (docs/TOOL.md)
#   PREFIX/share/doc/TOOL/recipes.md          cron, systemd, btrbk, restore
#   PREFIX/bin/rsend-nightly                  with rsend: the nightly backup job
#                                             (cron, systemd); it runs the rsend
#                                             and rreceive beside it
#   PREFIX/share/man/man1/rsend-nightly.1     its man page (rsend-nightly --man)
#   PREFIX/bin/btrfs-rsend                    with rsend: the front: `btrfs send` runs
#                                             rsend, `btrfs receive` rreceive,
#                                             the rest the real btrfs
#   PREFIX/lib/rsend/btrfs -> ../../bin/btrfs-rsend
#   PREFIX/lib/rsend/btrfs-send, btrfs-receive (the same, for btrbk's
#                                             backend btrfs-progs-btrbk)
#
# PREFIX/lib/rsend is a directory to put first in PATH for a tool that runs
# `btrfs send` and `btrfs receive` (btrbk): PATH=/usr/local/lib/rsend:$PATH.
#
# DESTDIR, when set, is put before every installed path (for packaging:
# `DESTDIR=/tmp/pkg scripts/install.sh /usr`). --no-build installs what
# `cargo build --release --locked` already built, so the build need not run
# as root: build as yourself, then `sudo scripts/install.sh --no-build`.
# CARGO_TARGET_DIR is honoured. TOOLS (default "rsend rreceive rdump")
# picks which tools to build and install; the front comes with rsend.
# ZSH_DIR (default share/zsh/site-functions) is where under PREFIX zsh
# completions go (Debian's packages: share/zsh/vendor-completions).
set -eu

build=1
if [ "${1:-}" = "--no-build" ]; then
    build=0
    shift
fi
if [ $# -gt 1 ]; then
    echo "usage: $0 [--no-build] [PREFIX]" >&2
    exit 2
fi
prefix=${1:-/usr/local}
case $prefix in
    /*) ;;
    *) echo "install.sh: PREFIX must be an absolute path, not '$prefix'" >&2; exit 2 ;;
esac
root=${DESTDIR:-}$prefix
tools=${TOOLS:-rsend rreceive rdump}
zsh_dir=${ZSH_DIR:-share/zsh/site-functions}

cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}/release

if [ "$build" = 1 ]; then
    bins=
    for tool in $tools; do
        bins="$bins --bin $tool"
    done
    # shellcheck disable=SC2086 # one word per --bin and name
    cargo build --release --locked $bins
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for tool in $tools; do
    bin=$target/$tool
    if [ ! -x "$bin" ]; then
        echo "install.sh: $bin is not built" >&2
        exit 1
    fi
    # Everything is generated before anything is installed, so a tool that
    # cannot print them leaves no half-installed set behind.
    "$bin" --completions bash >"$tmp/$tool.bash"
    "$bin" --completions zsh >"$tmp/$tool.zsh"
    "$bin" --completions fish >"$tmp/$tool.fish"
    "$bin" --man >"$tmp/$tool.1"
done
case " $tools " in
    *" rsend "*) bash scripts/rsend-nightly --man >"$tmp/rsend-nightly.1" ;;
esac

for tool in $tools; do
    install -D -m 755 "$target/$tool" "$root/bin/$tool"
    install -D -m 644 "$tmp/$tool.bash" "$root/share/bash-completion/completions/$tool"
    install -D -m 644 "$tmp/$tool.zsh" "$root/$zsh_dir/_$tool"
    install -D -m 644 "$tmp/$tool.fish" "$root/share/fish/vendor_completions.d/$tool.fish"
    install -D -m 644 "$tmp/$tool.1" "$root/share/man/man1/$tool.1"
    for doc in "docs/$tool.md" docs/recipes.md; do
        if [ -f "$doc" ]; then
            install -D -m 644 "$doc" "$root/share/doc/$tool/${doc#docs/}"
        fi
    done
    echo "installed $tool in $root"
done

case " $tools " in
    *" rsend "*)
        install -D -m 755 scripts/rsend-nightly "$root/bin/rsend-nightly"
        install -D -m 644 "$tmp/rsend-nightly.1" "$root/share/man/man1/rsend-nightly.1"
        echo "installed rsend-nightly in $root"
        install -D -m 755 scripts/btrfs-rsend "$root/bin/btrfs-rsend"
        mkdir -p "$root/lib/rsend"
        for name in btrfs btrfs-send btrfs-receive; do
            ln -sfn ../../bin/btrfs-rsend "$root/lib/rsend/$name"
        done
        echo "installed btrfs-rsend in $root (put $prefix/lib/rsend first in PATH)"
        ;;
esac
