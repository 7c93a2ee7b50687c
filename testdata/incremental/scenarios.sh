# shellcheck shell=bash
# Incremental-send scenarios: one place for every parent/child pair that the
# incremental tests (crates/send/tests/incremental_*.rs) and the fixture
# generator (testdata/make-incremental.sh) use.  Source it; it defines
# functions only (and a few constants), runs nothing.
#
# A scenario NAME is registered with `scenario NAME "what it covers"` and is
# a pair of functions, both run with the working directory at DIR, a fresh
# btrfs subvolume (the first inode made in it is 257):
#
#   setup_NAME DIR    builds the parent state
#   change_NAME DIR   mutates it into the child state
#
# and, optionally:
#
#   change_NAME_after_remount DIR   more changes after the filesystem was
#                                   unmounted and mounted again, so that btrfs
#                                   hands out inode numbers freed by
#                                   change_NAME once more (the per-subvolume
#                                   counter restarts at highest inode + 1 when
#                                   a subvolume is first read after mount)
#   in_parent_snapshot_NAME SNAP    run in the parent snapshot right after it
#   in_child_snapshot_NAME SNAP     was taken, made writable for the call and
#                                   read-only again after it: to leave inodes
#                                   with no links in a read-only snapshot (a
#                                   file unlinked or an O_TMPFILE made while
#                                   held open, see hold).  Taking a snapshot
#                                   drops such inodes of the source, so this is
#                                   the only way to get them.
#   check_NAME PARENT CHILD         run after both snapshots exist (paths of
#                                   the two read-only snapshots); fails the
#                                   build when the scenario did not come out as
#                                   intended, prints notes on stdout
#
# Names of scenarios taken from fstests (tests/btrfs/NNN, group "send"; the
# project's notes on them are section 5 of ../shared/reference/send-stream.md
# beside the repository) start with btrfs_NNN_.  They do what those tests do
# to the filesystem (names and the order of creation matter there: they fix
# the inode numbers), written anew here; sizes are scaled down where only the
# shape matters.  Tests of full sends become incrementals from a parent that
# has part of the tree.  Not here, because they are not about the difference
# of two snapshots of one filesystem or need more than protocol v1 and -p:
# 033's 51 snapshots and 036 (snapshots made during the send), 038 (-c clone
# sources), 110/111 (streams sent again from the receiving filesystem), 152
# (quotas, parallel sends), 186 (delalloc flushed by send), 187/252 (balance
# and dedupe during the send), 191 (dedupe into read-only snapshots), 277
# (protocol v3, fs-verity), 281/284 (protocol v2 compressed data), 314
# (temp-fsid), 339 (receive --dump as a user).
#
# scenario_build TOP NAME (at the end) turns one scenario into the subvolume
# TOP/NAME and its read-only snapshots TOP/NAME.p (parent) and TOP/NAME.c
# (child).  chain_build TOP does the same for the five-step chain:
# TOP/chain and TOP/chain.0 ... TOP/chain.5.  scenario_build_all builds them
# all; then scenario_image_copy copies the image file while the files the
# snapshot hooks hold open are still open (an unmount would close them, and
# closing deletes their inodes even from a read-only snapshot).
#
# Needs: btrfs-progs, python3, xfs_io (xfsprogs), attr, acl, libcap2-bin
# (setcap), e2fsprogs (lsattr), util-linux, coreutils; root.

SCENARIOS=()
declare -A SCENARIO_DOC=()

# scenario NAME DESCRIPTION: registers NAME.
scenario() {
    SCENARIOS+=("$1")
    SCENARIO_DOC[$1]=$2
}

# Times given to everything the parent's setup made (T1) and to everything
# the change touched (T2), so manifests do not depend on when they were made.
T1="2021-01-02 03:04:05.123456789 UTC"
T2="2022-02-03 04:05:06.987654321 UTC"
T_OLD="1965-06-15 12:00:00.25 UTC"
T_FUTURE="2100-01-01 00:00:00.5 UTC"

# Mount options used again when a scenario asks for a remount.
SCENARIO_MOUNT_OPTS=${SCENARIO_MOUNT_OPTS:-noatime}

# ---------------------------------------------------------------------------
# helpers

# fill FILE OFFSET LENGTH [TAG]: writes LENGTH bytes at OFFSET of FILE (made
# when missing, never truncated).  The bytes are 32-byte records naming TAG
# and their own file offset, so data at a wrong offset is told apart and
# zstd still compresses it well.
fill() {
    python3 -c '
import os, sys
path, off, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tag = (sys.argv[4] if len(sys.argv) > 4 else "data").encode()
start = off - off % 32
out = bytearray()
pos = start
while len(out) < off - start + length:
    out += (b"%s@%d" % (tag, pos))[:31].ljust(31, b".") + b"\n"
    pos += 32
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
os.pwrite(fd, bytes(out[off - start:off - start + length]), off)
os.close(fd)
' "$@"
}

# bytes LENGTH BYTE FILE OFFSET: LENGTH copies of BYTE (0xNN) at OFFSET.
bytes() {
    xfs_io -f -c "pwrite -q -S $2 -b 1M $4 $1" "$3"
}

# prealloc FILE OFFSET LENGTH: a keep-size preallocation (FILE made when missing).
prealloc() {
    xfs_io -f -c "falloc -k $2 $3" "$1"
}

# many_files DIR COUNT PREFIX SIZE: COUNT files PREFIX00000... of SIZE bytes.
many_files() {
    python3 -c '
import os, sys
d, n, prefix, size = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
os.makedirs(d, exist_ok=True)
for i in range(n):
    with open(os.path.join(d, "%s%05d" % (prefix, i)), "wb") as f:
        f.write((b"%s%05d\n" % (prefix.encode(), i)) * (size // 7 + 1))
        f.truncate(size)
' "$@"
}

# mksock PATH: a unix socket node.
mksock() {
    python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.close()' "$1"
}

# Background processes that keep files open (so a read-only snapshot keeps
# inodes with no links); released by release_held, after the image was
# copied.  No remount is possible while any is held.
HELD_PIDS=()

# hold PATH...: keeps every PATH open (files and directories) until
# release_held; unlink or rmdir them afterwards to leave nlink-0 inodes.
hold() {
    local ready
    ready=$(mktemp -u /tmp/scenario-hold.XXXXXX)
    local abs=() p
    for p in "$@"; do abs+=("$(realpath -s "$p")"); done
    (cd / && exec python3 -c '
import os, sys, time
fds = [os.open(p, os.O_RDONLY) for p in sys.argv[2:]]
open(sys.argv[1], "w").close()
time.sleep(86400)
' "$ready" "${abs[@]}") &
    HELD_PIDS+=($!)
    while [[ ! -e $ready ]]; do sleep 0.05; done
    rm -f "$ready"
}

# hold_tmpfile DIR SIZE: an O_TMPFILE file in DIR with SIZE bytes written,
# open (and never linked) until release_held.
hold_tmpfile() {
    local ready dir
    ready=$(mktemp -u /tmp/scenario-hold.XXXXXX)
    dir=$(realpath -s "$1")
    (cd / && exec python3 -c '
import os, sys, time
fd = os.open(sys.argv[2], os.O_TMPFILE | os.O_RDWR, 0o600)
os.write(fd, b"tmpfile data\n" * (int(sys.argv[3]) // 13 + 1))
os.ftruncate(fd, int(sys.argv[3]))
os.fsync(fd)
open(sys.argv[1], "w").close()
time.sleep(86400)
' "$ready" "$dir" "$2") &
    HELD_PIDS+=($!)
    while [[ ! -e $ready ]]; do sleep 0.05; done
    rm -f "$ready"
}

release_held() {
    local pid
    for pid in "${HELD_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    HELD_PIDS=()
}

# ino_gen PATH: "INODE GENERATION" (generation from FS_IOC_GETVERSION).
ino_gen() {
    echo "$(stat -c %i "$1") $(lsattr -vd "$1" | awk '{print $1}')"
}

# expect_reused OLD NEW: OLD (in the parent snapshot) and NEW (in the child)
# have the same inode number and different generations; prints a note.
expect_reused() {
    local a b
    read -r -a a <<<"$(ino_gen "$1")"
    read -r -a b <<<"$(ino_gen "$2")"
    if [[ ${a[0]} != "${b[0]}" ]]; then
        echo "inode number not reused: $1 is ${a[0]}, $2 is ${b[0]}" >&2
        return 1
    fi
    if [[ ${a[1]} == "${b[1]}" ]]; then
        echo "inode ${a[0]} reused with the same generation ${a[1]}" >&2
        return 1
    fi
    echo "reused ino ${a[0]}: generation ${a[1]} -> ${b[1]} (${1##*/} -> ${2##*/})"
}

# expect_ino PATH N: PATH has inode number N (the scenario depends on it).
expect_ino() {
    local i
    i=$(stat -c %i "$1")
    if [[ $i != "$2" ]]; then
        echo "$1: inode $i, the scenario needs $2" >&2
        return 1
    fi
}

# ---------------------------------------------------------------------------
# New, deleted and changed files

scenario new_files "new files of every size class, a new directory tree, symlink, fifo and a new hardlinked pair"
setup_new_files() {
    mkdir old
    echo "existing" >old/keep
}
change_new_files() {
    : >empty
    printf x >one-byte
    fill inline 0 2000 inline
    fill aligned 0 12288 aligned
    fill big 0 100000 big
    fill unaligned 0 70001 unaligned
    mkdir -p new/sub/deeper
    fill new/sub/deeper/f 0 5000 deep
    echo "in old" >old/added
    ln -s ../keep new/link
    mkfifo new/fifo
    echo "pair" >pair1
    ln pair1 new/pair2
}

scenario deleted_files "files of every size class, a symlink, a fifo, one of two hardlinks and a whole tree deleted"
setup_deleted_files() {
    mkdir -p tree/a/b tree/c keep
    : >empty
    fill inline 0 1500 inline
    fill big 0 200000 big
    fill tree/a/b/f 0 9000 tf
    fill tree/c/g 0 100 tg
    ln -s big link
    mkfifo fifo
    echo "linked" >keep/l1
    ln keep/l1 l2
}
change_deleted_files() {
    rm empty inline big link fifo l2
    rm -r tree
}

scenario changed_files "overwrites inside files: middle of a big file, start of an inline file, a whole rewrite of the same size, a single byte"
setup_changed_files() {
    fill big 0 300000 big
    fill inline 0 800 inline
    fill whole 0 65536 whole
    fill onebyte 0 40000 one
}
change_changed_files() {
    fill big 100000 20000 new
    fill inline 0 10 changed
    fill whole 0 65536 rewritten
    printf Z | dd of=onebyte bs=1 seek=20000 conv=notrunc status=none
}

scenario empty_parent_full_tree "empty parent, the child has a whole tree (every kind of inode, hardlinks, xattrs)"
setup_empty_parent_full_tree() {
    :
}
change_empty_parent_full_tree() {
    mkdir -p a/b/c d
    fill a/b/c/f 0 50000 f
    fill a/small 0 10 s
    ln a/small d/small-link
    ln -s a/b/c/f d/sym
    mkfifo d/fifo
    mknod d/chr c 1 3
    mknod d/blk b 7 12
    mksock d/sock
    setfattr -n user.x -v 1 a/small
    chmod 0750 a/b
    chown 1000:1000 a/b/c/f
}

scenario everything_deleted "a full tree in the parent, nothing left in the child but the root"
setup_everything_deleted() {
    mkdir -p a/b/c d e/f
    fill a/b/c/f 0 50000 f
    fill a/small 0 10 s
    ln a/small d/small-link
    ln -s a/b/c/f d/sym
    mkfifo e/fifo
    mknod e/f/chr c 1 3
    setfattr -n user.x -v 1 a/small
}
change_everything_deleted() {
    rm -rf ./*
}

# ---------------------------------------------------------------------------
# Inode numbers reused with a new generation

scenario inode_reuse_same_name "a file deleted, and after a remount a new file of the same name gets its inode number"
setup_inode_reuse_same_name() {
    echo one >f1
    echo two >f2
    fill f3 0 10000 old
}
change_inode_reuse_same_name() {
    rm f3
}
change_inode_reuse_same_name_after_remount() {
    fill f3 0 5000 new
}
check_inode_reuse_same_name() {
    expect_reused "$1/f3" "$2/f3"
}

scenario inode_reuse_other_name "a deleted file's inode number comes back as a file with another name, while the old name stays gone"
setup_inode_reuse_other_name() {
    echo a >a
    echo b >b
    fill victim 0 3000 victim
}
change_inode_reuse_other_name() {
    rm victim
}
change_inode_reuse_other_name_after_remount() {
    fill newcomer 0 7000 newcomer
}
check_inode_reuse_other_name() {
    expect_reused "$1/victim" "$2/newcomer"
}

scenario inode_reuse_file_becomes_dir "a file deleted, after a remount a directory of the same name gets its inode number"
setup_inode_reuse_file_becomes_dir() {
    echo a >a
    fill thing 0 3000 thing
}
change_inode_reuse_file_becomes_dir() {
    rm thing
}
change_inode_reuse_file_becomes_dir_after_remount() {
    mkdir thing
    echo inside >thing/inner
}
check_inode_reuse_file_becomes_dir() {
    expect_reused "$1/thing" "$2/thing"
}

scenario inode_reuse_swapped_names "two files deleted and recreated after a remount in the other order: each name's inode number now belongs to the other name"
setup_inode_reuse_swapped_names() {
    fill a 0 4000 a-old
    fill b 0 5000 b-old
}
change_inode_reuse_swapped_names() {
    rm a b
}
change_inode_reuse_swapped_names_after_remount() {
    fill b 0 6000 b-new
    fill a 0 7000 a-new
}
check_inode_reuse_swapped_names() {
    expect_reused "$1/a" "$2/b"
    expect_reused "$1/b" "$2/a"
}

scenario inode_reuse_dir_recreated "a directory tree deleted and after a remount made again with the same names and inode numbers, different contents"
setup_inode_reuse_dir_recreated() {
    mkdir -p d/e
    echo one >d/e/f
    echo two >d/g
}
change_inode_reuse_dir_recreated() {
    rm -r d
}
change_inode_reuse_dir_recreated_after_remount() {
    mkdir -p d/e
    echo three >d/e/f
    echo four >d/h
}
check_inode_reuse_dir_recreated() {
    expect_reused "$1/d" "$2/d"
    expect_reused "$1/d/e" "$2/d/e"
}

# ---------------------------------------------------------------------------
# Renames and moves

scenario renames_in_place "files and a directory renamed inside their directory, one rename over an existing file"
setup_renames_in_place() {
    mkdir d
    echo a >d/a
    echo b >d/b
    echo victim >d/victim
    mkdir d/sub
    echo s >d/sub/s
}
change_renames_in_place() {
    mv d/a d/a2
    mv d/sub d/sub2
    mv d/b d/victim
}

scenario moves_across_dirs "files and directories moved between directories, up and down the tree"
setup_moves_across_dirs() {
    mkdir -p x/y/z w
    echo 1 >x/y/z/deep
    echo 2 >x/top
    echo 3 >w/file
}
change_moves_across_dirs() {
    mv x/y/z/deep w/deep
    mv w/file x/y/z/file
    mv x/top x/y/top
    mv x/y/z w/z
}

scenario dir_moves_any_order "directories moved where a lower inode moves under a higher one and a higher under a lower, plus renames of both"
setup_dir_moves_any_order() {
    mkdir lo mid hi
    echo lo >lo/f
    echo hi >hi/f
    mkdir mid/inner
}
change_dir_moves_any_order() {
    mv lo hi/lo-moved
    mv mid/inner inner
    mv mid inner/mid
    mv hi high
}

scenario pending_move_under_renamed_higher_ino "a directory moves under a directory with a higher inode number that is itself renamed (the move must wait for the rename)"
setup_pending_move_under_renamed_higher_ino() {
    mkdir d1 d2
    echo in-d1 >d1/f
    mkdir d2/sub
}
change_pending_move_under_renamed_higher_ino() {
    mv d2 d2new
    mv d1 d2new/sub/d1
}
check_pending_move_under_renamed_higher_ino() {
    expect_ino "$1/d1" 257
}

scenario pending_move_chain "a chain of directories each moving under the next higher one, which moves too"
setup_pending_move_chain() {
    mkdir a b c d
    echo a >a/fa
    echo d >d/fd
}
change_pending_move_chain() {
    mv d top
    mv c top/c
    mv b top/c/b
    mv a top/c/b/a
}

scenario orphanize_new_file_takes_moved_name "a file moves away and a new file takes its name; a directory likewise"
setup_orphanize_new_file_takes_moved_name() {
    echo original >a
    mkdir d
    mkdir olddir
    echo x >olddir/x
}
change_orphanize_new_file_takes_moved_name() {
    mv a d/a
    echo newcomer >a
    mv olddir d/olddir
    mkdir olddir
    echo y >olddir/y
}

scenario orphanize_lower_takes_higher_name "a lower inode is renamed to the name a higher inode had, that one renamed elsewhere (orphanized first)"
setup_orphanize_lower_takes_higher_name() {
    echo first >f1
    echo second >f2
    mkdir d1 d2
    echo in1 >d1/x
    echo in2 >d2/x
}
change_orphanize_lower_takes_higher_name() {
    mv f2 f3
    mv f1 f2
    mv d2 d3
    mv d1 d2
}

scenario orphan_name_collision "a new file's orphan name o<ino>-<gen>-0 is taken by a real entry, so the sender must pick the next index"
setup_orphan_name_collision() {
    echo keep >keep
}
change_orphan_name_collision() {
    echo victim >victim
    echo taken >"o$(stat -c %i victim)-$(lsattr -vd victim | awk '{print $1}')-0"
}

scenario dir_swap "two directories with contents swap names (a <-> b), and two files swap too"
setup_dir_swap() {
    mkdir a b
    echo in-a >a/fa
    echo in-b >b/fb
    echo x >x
    echo y >y
}
change_dir_swap() {
    mv a tmp
    mv b a
    mv tmp b
    mv x tmp
    mv y x
    mv tmp y
}

scenario dir_moved_under_former_child "a directory moved under what was its child and the child moved up; also under a former grandchild"
setup_dir_moved_under_former_child() {
    mkdir -p p/c/gc q/r/s
    echo p >p/fp
    echo c >p/c/fc
    echo s >q/r/s/fs
}
change_dir_moved_under_former_child() {
    mv p/c c
    mv p c/p
    mv q/r/s s
    mv q s/q
}

scenario rename_cycle_files "three files rotate names: a->b, b->c, c->a"
setup_rename_cycle_files() {
    echo A >a
    echo B >b
    echo C >c
}
change_rename_cycle_files() {
    mv a tmp
    mv c a
    mv b c
    mv tmp b
}

scenario rename_cycle_dirs "three non-empty directories rotate names: a->b, b->c, c->a, one of them also nested"
setup_rename_cycle_dirs() {
    mkdir a b c
    echo A >a/f
    echo B >b/f
    echo C >c/f
    mkdir c/inner
}
change_rename_cycle_dirs() {
    mv a tmp
    mv c a
    mv b c
    mv tmp b
    mv a/inner b/inner
}

scenario rmdir_after_children_move_out "directories that only become empty once children with higher inode numbers moved out are removed"
setup_rmdir_after_children_move_out() {
    mkdir -p old/sub
    echo x >old/x
    echo y >old/y
    echo z >old/sub/z
    mkdir -p gone/a/b
    echo keep >gone/a/b/keep
}
change_rmdir_after_children_move_out() {
    mv old/x x
    mv old/sub sub
    mv old/y sub/y
    rmdir old
    mv gone/a/b/keep keep
    rm -r gone
}

scenario names_odd_renamed "entries with spaces, newlines, tabs, non-UTF-8 bytes and 255-byte names renamed and moved"
setup_names_odd_renamed() {
    mkdir 'dir with space'
    echo a >'dir with space/new
line'
    echo b >$'tab\there'
    echo c >$'bad\xff\xfe'
    echo d >"$(printf 'L%.0s' {1..255})"
}
change_names_odd_renamed() {
    mv 'dir with space/new
line' $'bad\xff\xfe-moved'
    mv $'tab\there' 'dir with space/tab moved'
    mv $'bad\xff\xfe' "$(printf 'M%.0s' {1..255})"
    mv "$(printf 'L%.0s' {1..255})" "dir with space/$(printf 'N%.0s' {1..255})"
    mv 'dir with space' $'dir\nnewline'
}

scenario file_moved_into_new_dir "existing files and a directory moved into directories made after the parent snapshot (higher inode numbers)"
setup_file_moved_into_new_dir() {
    echo a >a
    mkdir d
    echo b >d/b
}
change_file_moved_into_new_dir() {
    mkdir -p new1/new2
    mv a new1/new2/a
    mv d new1/d
    mkdir new3
    mv new1 new3/new1
}

scenario large_dir_renamed "a directory of 400 files renamed and moved under a new directory, a few entries changed"
setup_large_dir_renamed() {
    many_files big 400 e 20
}
change_large_dir_renamed() {
    mkdir new
    mv big new/renamed
    rm new/renamed/e00007
    mv new/renamed/e00100 new/renamed/e00100-renamed
    echo added >new/renamed/added
}

# ---------------------------------------------------------------------------
# Hard links

scenario hardlinks_added "links added to an existing file in the same and other directories, and a new file born with two links"
setup_hardlinks_added() {
    mkdir d
    fill f 0 5000 f
}
change_hardlinks_added() {
    ln f f2
    ln f d/f3
    echo new >d/n1
    ln d/n1 n2
}

scenario hardlinks_removed "links removed: down to one name in another directory, and the original name removed"
setup_hardlinks_removed() {
    mkdir d1 d2
    fill f 0 5000 f
    ln f d1/l1
    ln f d1/l2
    ln f d2/l3
    echo g >g
    ln g d2/g2
}
change_hardlinks_removed() {
    rm d1/l1 d1/l2 f
    rm g
}

scenario hardlinks_renamed_across_dirs "links of one inode renamed and moved between directories, the first name included, plus a new link"
setup_hardlinks_renamed_across_dirs() {
    mkdir d1 d2
    fill f 0 3000 f
    ln f d1/l
    ln f d2/l
}
change_hardlinks_renamed_across_dirs() {
    mv d1/l d2/l-from-d1
    mv f d1/f
    mv d2/l d1/l
    ln d1/f new-link
    mv d2 d3
}

scenario hardlink_replaces_name "a name removed and then given to a link of another inode"
setup_hardlink_replaces_name() {
    echo a >a
    echo b >b
}
change_hardlink_replaces_name() {
    rm a
    ln b a
}

# ---------------------------------------------------------------------------
# Xattrs and ACLs

scenario xattrs_set_changed_removed "xattrs set, changed and removed on a file, a directory and a symlink; empty and 3000-byte values"
setup_xattrs_set_changed_removed() {
    echo f >f
    mkdir d
    ln -s f link
    setfattr -n user.keep -v same f
    setfattr -n user.change -v before f
    setfattr -n user.remove -v gone f
    setfattr -n user.dir -v d d
    setfattr -h -n trusted.link -v before link
}
change_xattrs_set_changed_removed() {
    setfattr -n user.change -v after f
    setfattr -x user.remove f
    setfattr -n user.new -v new f
    setfattr -n user.empty f
    setfattr -n user.big -v "0s$(head -c 3000 /dev/zero | tr '\0' 'B' | base64 -w0)" f
    setfattr -x user.dir d
    setfattr -n user.dir2 -v 2 d
    setfattr -h -n trusted.link -v after link
}

scenario acls_changed "POSIX access ACLs added, changed and removed; a default ACL added to a directory and removed from another"
setup_acls_changed() {
    echo a >a
    echo b >b
    mkdir d1 d2
    setfacl -m u:1000:rw,m::rw a
    setfacl -d -m u:1000:rwx d2
}
change_acls_changed() {
    setfacl -m u:1001:r b
    setfacl -m u:1000:r a
    setfacl -d -m g:100:rx d1
    setfacl -k d2
    setfacl -b a
    echo inherits >d1/inherits
}

scenario capabilities_changed "file capabilities added, changed and removed, with chown in between"
setup_capabilities_changed() {
    echo a >a
    echo b >b
    echo c >c
    setcap cap_net_raw+ep b
    setcap cap_sys_nice+ep c
}
change_capabilities_changed() {
    setcap cap_net_raw+ep a
    chown 1000:1000 b
    setcap cap_net_raw,cap_sys_time+ep b
    setcap -r c
}

# ---------------------------------------------------------------------------
# Metadata only

scenario metadata_only "chmod, chown and utimes only (no data changes): files, a directory, a symlink, setuid/sticky bits, old and future times"
setup_metadata_only() {
    fill f 0 10000 f
    echo g >g
    mkdir d
    ln -s f link
    touch -h -d "$T_OLD" g
}
change_metadata_only() {
    chmod 0600 f
    chmod 4755 g
    chown 1234:5678 f
    chown -h 4321:8765 link
    chmod 1777 d
    chown 99:99 d
    touch -h -d "$T_FUTURE" f
    touch -h -d "$T_OLD" link
    touch -h -d "2020-02-02 02:02:02.5 UTC" d
}

# ---------------------------------------------------------------------------
# Sizes, truncation and holes

scenario truncate_same_size_overwrite "data overwritten at the same size (no TRUNCATE needed), inline and regular"
setup_truncate_same_size_overwrite() {
    fill reg 0 81920 old
    fill odd 0 70001 old
    fill inline 0 900 old
}
change_truncate_same_size_overwrite() {
    fill reg 40960 4096 new
    fill odd 69000 1001 new
    fill inline 0 900 new
}

scenario truncate_grow_write_ends_at_size "files grow by appends, the last write ends at the new size (no TRUNCATE needed)"
setup_truncate_grow_write_ends_at_size() {
    fill aligned 0 8192 a
    fill unaligned 0 5000 u
    fill inline 0 300 i
}
change_truncate_grow_write_ends_at_size() {
    fill aligned 8192 8192 a2
    fill unaligned 5000 12345 u2
    fill inline 300 500 i2
}

scenario truncate_grow_trailing_hole "files grow with a hole at the end (truncate up): the new size needs a TRUNCATE"
setup_truncate_grow_trailing_hole() {
    fill a 0 10000 a
    fill b 0 4096 b
}
change_truncate_grow_trailing_hole() {
    truncate -s 1M a
    fill b 8192 100 b2
    truncate -s 300000 b
}

scenario truncate_shrink "files shrink: to an unaligned size, to a sector boundary, to inline size and to zero"
setup_truncate_shrink() {
    fill a 0 200000 a
    fill b 0 100000 b
    fill c 0 50000 c
    fill d 0 3000 d
}
change_truncate_shrink() {
    truncate -s 123457 a
    truncate -s 8192 b
    truncate -s 100 c
    truncate -s 0 d
}

scenario truncate_shrink_then_grow "a file shrinks and grows again past its old size: the tail is zeros, not old data"
setup_truncate_shrink_then_grow() {
    fill a 0 100000 a
    fill b 0 100000 b
}
change_truncate_shrink_then_grow() {
    truncate -s 10000 a
    truncate -s 150000 a
    truncate -s 20000 b
    fill b 60000 1000 b2
}

scenario punch_holes_where_parent_had_data "holes punched (fallocate -p) where the parent had data: start, middle, unaligned, the end"
setup_punch_holes_where_parent_had_data() {
    fill f 0 524288 f
    fill g 0 100000 g
}
change_punch_holes_where_parent_had_data() {
    fallocate -p -o 0 -l 65536 f
    fallocate -p -o 131072 -l 131072 f
    fallocate -p -o 300001 -l 9999 f
    fallocate -p -o 458752 -l 65536 f
    fallocate -p -o 4096 -l 95904 g
}

scenario sparse_files "sparse files: holes filled in, data written into a hole beyond the old data, a new sparse file, a hole-only file"
setup_sparse_files() {
    fill s 1048576 5000 s
    truncate -s 4M s
    truncate -s 2M hole-only
}
change_sparse_files() {
    fill s 0 4096 head
    fill s 2097152 10000 middle
    fill new 3145728 100 new
    truncate -s 8M new
    truncate -s 3M hole-only
}

# ---------------------------------------------------------------------------
# Symlinks, special files, type changes

scenario symlinks_retargeted "symlinks retargeted (relative, absolute, dangling, 1000 bytes), one replaced by a file"
setup_symlinks_retargeted() {
    echo t >target
    ln -s target rel
    ln -s /abs/path abs
    ln -s nowhere dangling
    ln -s target becomes-file
}
change_symlinks_retargeted() {
    ln -sfn /new/abs rel
    ln -sfn target abs
    ln -sfn "$(printf 'x%.0s' {1..1000})" dangling
    rm becomes-file
    echo file >becomes-file
}

scenario special_files_replaced "a fifo becomes a char device, a char device changes its rdev, a block device becomes a fifo, a socket becomes a file"
setup_special_files_replaced() {
    mkfifo fifo
    mknod chr c 1 3
    mknod blk b 7 200
    mksock sock
}
change_special_files_replaced() {
    rm fifo chr blk sock
    mknod fifo c 1 5
    mknod chr c 250 300
    mkfifo blk
    echo now-a-file >sock
}

scenario file_replaced_by_dir "a file replaced by a directory of the same name, and a directory by a file"
setup_file_replaced_by_dir() {
    echo f >f
    mkdir d
    echo x >d/x
}
change_file_replaced_by_dir() {
    rm f
    mkdir f
    echo inside >f/inside
    rm -r d
    echo now-a-file >d
}

# ---------------------------------------------------------------------------
# Shapes

scenario deep_tree "a tree 60 directories deep: a middle component renamed, the bottom half moved up, files at the bottom"
setup_deep_tree() {
    local p=. i
    for i in $(seq 1 60); do p=$p/d$i; done
    mkdir -p "$p"
    echo bottom >"$p/bottom"
}
change_deep_tree() {
    local p=. i
    for i in $(seq 1 30); do p=$p/d$i; done
    mv "$p/d31" d31-up
    mv d1/d2 d1/d2-renamed
    p=d31-up
    for i in $(seq 32 60); do p=$p/d$i; done
    echo new >"$p/new-bottom"
}

scenario many_files_one_dir "2000 files in one directory: 200 deleted, 200 renamed, 200 added, 50 changed"
setup_many_files_one_dir() {
    many_files many 2000 f 0
}
change_many_files_one_dir() {
    python3 -c '
import os
os.chdir("many")
for i in range(0, 2000, 10):
    os.unlink("f%05d" % i)
for i in range(1, 2000, 10):
    os.rename("f%05d" % i, "r%05d" % i)
for i in range(200):
    with open("n%05d" % i, "wb") as f:
        f.write(b"n")
for i in range(2, 2000, 40):
    with open("f%05d" % i, "wb") as f:
        f.write(b"changed\n")
'
}

scenario btrfs_007_seeded_random_ops "fstests btrfs/007 with a seeded generator for fsstress: 300 operations for the parent and 300 more for the child (creates, writes, truncates, renames, links, unlinks, xattrs)"
random_ops() {
    python3 -c '
import os, random, sys
r = random.Random(int(sys.argv[1]))
def walk():
    files, dirs = [], ["."]
    for root, ds, fs in os.walk("."):
        dirs += [os.path.join(root, d) for d in ds]
        files += [os.path.join(root, f) for f in fs]
    return sorted(files), sorted(dirs)
n = 0
for step in range(300):
    files, dirs = walk()
    op = r.choice(["creat", "creat", "mkdir", "write", "write", "trunc", "rename", "rename",
                   "link", "unlink", "rmdir", "xattr", "chmod"])
    name = "n%d_%d" % (int(sys.argv[1]), step)
    try:
        if op == "creat":
            with open(os.path.join(r.choice(dirs), name), "wb") as f:
                f.write(bytes([r.randrange(256)]) * r.choice([0, 10, 3000, 5000, 70000]))
        elif op == "mkdir":
            os.mkdir(os.path.join(r.choice(dirs), name))
        elif op == "write" and files:
            with open(r.choice(files), "r+b") as f:
                f.seek(r.randrange(0, 100000))
                f.write(bytes([r.randrange(256)]) * r.randrange(1, 20000))
        elif op == "trunc" and files:
            os.truncate(r.choice(files), r.randrange(0, 120000))
        elif op == "rename" and len(dirs) > 1:
            src = r.choice(files + dirs[1:])
            dst = os.path.join(r.choice(dirs), name)
            if not os.path.isdir(src) or not (dst + "/").startswith(src + "/"):
                os.rename(src, dst)
        elif op == "link" and files:
            os.link(r.choice(files), os.path.join(r.choice(dirs), name))
        elif op == "unlink" and files:
            os.unlink(r.choice(files))
        elif op == "rmdir" and len(dirs) > 1:
            d = r.choice(dirs[1:])
            if not os.listdir(d):
                os.rmdir(d)
        elif op == "xattr" and files:
            os.setxattr(r.choice(files), "user.r%d" % r.randrange(4), b"v%d" % step)
        elif op == "chmod" and files:
            os.chmod(r.choice(files), r.choice([0o600, 0o644, 0o755, 0o640]))
    except FileNotFoundError:
        pass
' "$1"
}
setup_btrfs_007_seeded_random_ops() { random_ops 1; }
change_btrfs_007_seeded_random_ops() { random_ops 2; }

scenario unchanged_tree_with_data "parent and child identical: a mixed tree with data, so the incremental stream holds nothing but the root's times"
setup_unchanged_tree_with_data() {
    mkdir -p a/b
    fill a/b/f 0 40000 f
    ln -s f a/link
    setfattr -n user.x -v y a/b/f
}
change_unchanged_tree_with_data() {
    :
}

# ---------------------------------------------------------------------------
# fstests (tests/btrfs/NNN)

scenario btrfs_008_identical_snapshots "fstests btrfs/008: dirs testdir/1, testdir/2 and 8 KiB files; the child is the same tree"
setup_btrfs_008_identical_snapshots() {
    mkdir -p testdir/1 testdir/2
    bytes 8192 0xaa testdir/aa 0
    bytes 8192 0xbb testdir/bb 0
}
change_btrfs_008_identical_snapshots() {
    :
}

scenario btrfs_016_punch_hole "fstests btrfs/016: a hole punched in the middle of a big file (2 MiB file, [512K, 1M) punched)"
setup_btrfs_016_punch_hole() {
    fill foo 0 2097152 foo
}
change_btrfs_016_punch_hole() {
    fallocate -p -o 524288 -l 524288 foo
}

scenario btrfs_019_tree_recreated_in_other_order "fstests btrfs/019: test/{baz,blah,foo/bar} removed and made again with the same names in another order (new inodes)"
setup_btrfs_019_tree_recreated_in_other_order() {
    mkdir test
    touch test/baz test/blah
    mkdir test/foo
    touch test/foo/bar
}
change_btrfs_019_tree_recreated_in_other_order() {
    rm -rf test
    mkdir test
    touch test/baz
    mkdir test/foo
    touch test/foo/bar test/blah
}

scenario btrfs_025_truncate_prealloc_unaligned "fstests btrfs/025: truncate, preallocate beyond EOF, write past it; the child truncates to an unaligned size"
setup_btrfs_025_truncate_prealloc_unaligned() {
    truncate -s 819200 foo
    btrfs filesystem sync . >/dev/null
    prealloc foo 819200 667648
    btrfs filesystem sync . >/dev/null
    fill foo 1482752 2978 foo
}
change_btrfs_025_truncate_prealloc_unaligned() {
    truncate -s 883305 foo
}

scenario btrfs_030_dir_moved_under_child "fstests btrfs/030: a deep tree where directories move under their former children and a parent/child chain inverts (bar1..bar4)"
setup_btrfs_030_dir_moved_under_child() {
    mkdir -p a/b/c
    echo hello >a/b/c/file.txt
    mkdir a/b/c/d a/b/c2 a/b/www
    echo hey >a/b/foobar.txt
    mkdir -p a/b/c3/x/y a/b/foo1/foo2
    echo hey >a/b/foo1/foo2/f.txt
    mkdir a/b/foo3
    mkdir -p a/b/bar1/bar2/bar3/bar4
    echo ola >a/b/bar1/bar2/bar3/bar4/hello.txt
}
change_btrfs_030_dir_moved_under_child() {
    cd a/b
    echo " world" >>c/file.txt
    mv c/d c2/d2
    mv c c2/d2/cc
    mv c3/x/y c2/y2
    mv c3/x c2/y2/x2
    mv c3 c2/y2/x2/Z
    mv www c2/y2/x2/WWW
    mv foobar.txt c2/y2/x2/qwerty.txt
    ln c2/d2/cc/file.txt c2/y2/x2/Z/file_link.txt
    mv c2/d2/cc/file.txt c2/y2/x2
    mv foo3 foo1/foo33
    mv foo1/foo2 foo1/foo33/foo22
    mv foo1/foo33/foo22/f.txt foo1/foo33/foo22/fff.txt
    echo " hello" >>bar1/bar2/bar3/bar4/hello.txt
    mv bar1/bar2/bar3/bar4/hello.txt bar1/bar2/bar3/bar4/hello2.txt
    mv bar1/bar2/bar3/bar4 k44
    mv bar1/bar2/bar3 k44
    mv bar1/bar2 k44/bar3
    mv bar1 k44/bar3/bar2/k11
}

scenario btrfs_033_backwards_direct_writes "fstests btrfs/033: a file written backwards in 512 O_DIRECT writes of 4 KiB (one extent each); the child overwrites every eighth block, backwards too"
backwards_writes() {
    local args=() i
    for ((i = $2 - 1; i >= 0; i -= $3)); do
        args+=(-c "pwrite -q -S $((i % 251 + 1)) $((i * 4096)) 4096")
    done
    xfs_io -f -d "${args[@]}" "$1"
}
setup_btrfs_033_backwards_direct_writes() {
    backwards_writes foo 512 1
}
change_btrfs_033_backwards_direct_writes() {
    backwards_writes foo 512 8
}

scenario btrfs_034_holes_across_leaves "fstests btrfs/034: a sparse file of 640 preallocated ranges each with a 4 KiB write (extent items over several leaves), truncated in the child"
setup_btrfs_034_holes_across_leaves() {
    truncate -s 16M foo
    python3 -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
fd = os.open("foo", os.O_WRONLY)
for i in range(640):
    off = 32768 + i * 8192
    if libc.fallocate(fd, 1, off, 8192) != 0:  # FALLOC_FL_KEEP_SIZE
        raise OSError(ctypes.get_errno(), "fallocate")
    os.pwrite(fd, (b"%07d " % i) * 512, off)
os.close(fd)
'
}
change_btrfs_034_holes_across_leaves() {
    truncate -s 3882008 foo
}

scenario btrfs_039_child_ino_below_parent_moves "fstests btrfs/039: directories whose inode is lower than their parent's are renamed along with those parents"
setup_btrfs_039_child_ino_below_parent_moves() {
    mkdir -p a/b
    mkdir d
    mkdir a/b/c
    mv d a/b/c
    mkdir e
    mkdir -p a/b/f/g
    mv e a/b/f/g
}
change_btrfs_039_child_ino_below_parent_moves() {
    mv a/b/c a/b/x
    mv a/b/x/d a/b/x/y
    mv a/b/f a/b/w
    mv a/b/w/g/e a/b/w/g/z
}

scenario btrfs_040_rmdir_after_links_removed "fstests btrfs/040: a directory whose files (some hardlinked elsewhere) are all removed, then the directory itself"
setup_btrfs_040_rmdir_after_links_removed() {
    mkdir -p a/b/c
    echo 'hello world' >a/b/c/hel.txt
    echo 'ola mundo' >a/b/c/foo.txt
    ln a/b/c/foo.txt a/b/c/bar.txt
    ln a/b/c/foo.txt a/b/baz.txt
}
change_btrfs_040_rmdir_after_links_removed() {
    rm a/b/c/foo.txt a/b/c/bar.txt a/b/c/hel.txt
    rmdir a/b/c
}

scenario btrfs_043_rmdir_orphan_dir "fstests btrfs/043: a directory emptied by moves to many places and removed; another emptied by a deep move"
setup_btrfs_043_rmdir_orphan_dir() {
    mkdir -p a/b
    mkdir 0 1
    mkdir a/b/c
    mv 0 a/b/c
    mv 1 a/b/c
    echo 'ola mundo' >a/b/c/foo.txt
    mkdir a/b/c/x a/b/c/x2 a/b/y a/b/z
    mkdir -p a/b/d1/d2/d3
    mkdir a/b/d4
}
change_btrfs_043_rmdir_orphan_dir() {
    rm -f a/b/c/foo.txt
    mv a/b/y a/b/YY
    mv a/b/z a
    mv a/b/c/x a/b/YY
    mv a/b/c/0 a/b/YY/00
    mv a/b/c/x2 a/z/X_2
    mv a/b/c/1 a/z/X_2
    rmdir a/b/c
    mv a/b/d4 a/d44
    mv a/b/d1/d2 a/d44
    rmdir a/b/d1
}

scenario btrfs_044_chmod_delayed_move_dir "fstests btrfs/044: a directory whose move is delayed is chmod'ed, its file grows and is renamed"
setup_btrfs_044_chmod_delayed_move_dir() {
    (
        umask 0
        mkdir -p a/b/c/d/e
        mkdir a/b/c/f
        echo 'ola ' >a/b/c/d/e/file.txt
        chmod 0777 a/b/c/d/e
    )
}
change_btrfs_044_chmod_delayed_move_dir() {
    echo 'mundo' >>a/b/c/d/e/file.txt
    mv a/b/c/d/e/file.txt a/b/c/d/e/file2.txt
    mv a/b/c/f a/b/f2
    mv a/b/c/d/e a/b/f2/e2
    mv a/b/c a/b/c2
    mv a/b/c2/d a/b/c2/d2
    chmod 0700 a/b/f2/e2
}

scenario btrfs_045_nested_moves_many_subtrees "fstests btrfs/045: seven subtrees (a, _a, za, y_a, w_a, xa, %a) with nested renames, links and moves into newer directories"
setup_btrfs_045_nested_moves_many_subtrees() {
    mkdir -p a/b
    mkdir a/c a/b/d
    touch a/file1 a/b/file2
    mv a/file1 a/b/d/file3
    ln a/b/d/file3 a/b/file4
    mkdir a/b/f
    mv a/b a/c/b2
    touch a/c/b2/d/file5
    mkdir -p a/x1/x2
    mkdir a/Z
    mkdir -p a/x1/x2/x3/x4/x5

    mkdir -p _a/_b/_c/_d
    mkdir _a/_b/_c/_d/_e _a/_b/_c/_d/_f
    mv _a/_b/_c/_d/_e _a/_b/_c/_d/_f/_E2
    mkdir _a/_b/_c/_g
    mv _a/_b/_c/_d _a/_b/_D2

    mkdir -p za/zb/zc/zd
    mkdir za/zb/ze
    mv za/zb/zc za/zb/ze/zCC
    mkdir za/zb/ze/zCC/zd/zf
    mkdir za/zg

    mkdir -p y_a/y_b y_a/y_c/y_d
    mkdir y_a/y_b/y_e y_a/y_c/y_d/y_f
    mv y_a/y_b y_a/y_c/y_d/y_2b
    mkdir y_a/y_x y_a/y_y

    mkdir -p w_a/w_b w_a/w_c/w_d
    mkdir w_a/w_b/w_e w_a/w_c/w_d/w_f
    mv w_a/w_b w_a/w_c/w_d/w_2b

    mkdir -p xa/xb
    mkdir xa/xc
    mv xa/xb xa/xc/xb2
    mkdir xa/xe

    mkdir -p %a/%b
    mkdir %a/%c %a/%b/%d %a/%c/%e
}
change_btrfs_045_nested_moves_many_subtrees() {
    ln a/c/b2/file4 a/c/b2/f/file6
    mv a/c/b2/d/file5 a/c/file7
    touch a/c/b2/d/file8 a/c/b2/file9
    ln a/c/b2/file9 a/c/b2/file10
    mv a/c/b2/f a/f2
    mv a/c a/c2
    mv a/c2/b2 a/f2/b3
    mv a/c2 a/f2/b3/c3
    touch a/f2/b3/c3/file11
    mv a a2
    mv a2/x1/x2/x3 a2/Z/X33
    mv a2/x1/x2 a2/Z/X33/x4/x5/X22

    mkdir _a/_o
    mv _a/_b/_c/_g _a/_b/_D2/_f/_G2
    mv _a/_b/_D2 _a/_b/_dd
    mv _a/_b/_c _a/_C2
    mv _a/_b/_dd/_f _a/_o/_FF
    mv _a/_b _a/_o/_FF/_E2/_BB

    mkdir za/zg/zh
    mv za/zb/ze za/zg/zh/zEE
    mv za/zg/zh/zEE/zCC/zd za/zg/zh/zEE/zDD
    mv za/zg/zh/zEE/zDD/zf za/zg/zh/zEE/zDD/zFF

    mv y_a/y_x y_a/y_y
    mv y_a/y_c/y_d/y_2b/y_e y_a/y_c/y_d/y_2b/y_2e
    mv y_a/y_c/y_d y_a/y_y/y_x/y_2d
    mv y_a/y_c y_a/y_y/y_x/y_2d/y_2b/y_2c

    mv w_a/w_c/w_d/w_2b/w_e w_a/w_c/w_d/w_2b/w_2e
    mkdir w_a/w_h
    mv w_a/w_c/w_d w_a/w_h/w_2d
    mv w_a/w_c w_a/w_h/w_2d/w_2b/w_2c

    mv xa/xc/xb2 xa/xe/xb3
    mkdir xa/xe/xb3/xf xa/xh
    mv xa/xc xa/xe/xb3/xf/xc2
    mv xa/xe xa/xh/xe2

    echo hello >%a/foo
    mkdir %a/%b/%d/%f %a/%b/%g
    mv %a/%c/%e %a/%b/%g/%e2
    mv %a/%c %a/%b/%d/%f/%c2
    mv %a/%b/%d/%f %a/%b/%g/%e2/%f2
    mv %a/foo %a/%b/%g/%e2/%f2
}

scenario btrfs_046_prealloc_scattered_writes "fstests btrfs/046: a 32 MiB keep-size preallocation with 60 scattered writes of 11 B to 126 KiB; the child adds a 10-byte write"
setup_btrfs_046_prealloc_scattered_writes() {
    prealloc foo 0 33554432
    python3 -c '
import os, random
r = random.Random(46)
fd = os.open("foo", os.O_WRONLY)
for i in range(60):
    size = r.choice([11, 123, 1121, 7000, 9216, 17408, 23552, 33792, 39936, 67584, 113664, 125952])
    off = r.randrange(0, 33554432 - size)
    os.pwrite(fd, bytes([i + 1]) * size, off)
os.close(fd)
'
}
change_btrfs_046_prealloc_scattered_writes() {
    bytes 10 0xee foo 16190218
}

scenario btrfs_048_compression_property "fstests btrfs/048: the compression property (btrfs.compression xattr) set on directories travels with them"
setup_btrfs_048_compression_property() {
    mkdir -p testdir/subdir1
    btrfs property set testdir/subdir1 compression lzo
    touch foobar
}
change_btrfs_048_compression_property() {
    touch foobar2
    btrfs property set testdir compression zstd
    fill testdir/subdir1/compressed 0 100000 c
}

scenario btrfs_050_extref_hardlinks "fstests btrfs/050 as an incremental: a file gains 300 links of 100-byte names (extended refs), 150 go again and its first name is renamed"
setup_btrfs_050_extref_hardlinks() {
    mkdir testdir
    echo hi >testdir/foobar
}
change_btrfs_050_extref_hardlinks() {
    python3 -c '
import os
os.chdir("testdir")
for i in range(300):
    os.link("foobar", ("%04d-" % i) + "x" * 95)
for i in range(0, 300, 2):
    os.unlink(("%04d-" % i) + "x" * 95)
'
    mv testdir/foobar testdir/final_foobar_name
}

scenario btrfs_051_long_path_odd_chars "fstests btrfs/051: a path of more than 230 bytes through ten directories named with #, [ and ]; the child renames a middle one and adds a file at the bottom"
setup_btrfs_051_long_path_odd_chars() {
    local p=. i
    for i in $(seq 0 9); do p="$p/dir#[$i]_with_odd_chars"; done
    mkdir -p "$p"
    echo bottom >"$p/file#[x]"
}
change_btrfs_051_long_path_odd_chars() {
    local p=. i
    for i in $(seq 0 4); do p="$p/dir#[$i]_with_odd_chars"; done
    mv "$p/dir#[5]_with_odd_chars" "$p/renamed#[5]"
    p="$p/renamed#[5]"
    for i in $(seq 6 9); do p="$p/dir#[$i]_with_odd_chars"; done
    echo new >"$p/new#[y]"
}

scenario btrfs_053_xattrs_larger_than_path_max "fstests btrfs/053: an xattr of 6000 bytes changed to 6666, another of 5555 bytes added"
setup_btrfs_053_xattrs_larger_than_path_max() {
    touch foobar
    setfattr -n user.xattr_name_1 -v "$(head -c 6000 /dev/zero | tr '\0' A)" foobar
}
change_btrfs_053_xattrs_larger_than_path_max() {
    setfattr -n user.xattr_name_1 -v "$(head -c 6666 /dev/zero | tr '\0' Z)" foobar
    setfattr -n user.xattr_name_2 -v "$(head -c 5555 /dev/zero | tr '\0' U)" foobar
}

scenario btrfs_054_nested_subvolumes_ignored "fstests btrfs/054: nested subvolumes are left out: a dir replaced by a subvolume, a subvolume by a dir"
setup_btrfs_054_nested_subvolumes_ignored() {
    mkdir testdir
    echo in-dir >testdir/f
    btrfs -q subvolume create first_subvol
    echo in-subvol >first_subvol/g
}
change_btrfs_054_nested_subvolumes_ignored() {
    rm -r testdir
    btrfs -q subvolume create testdir
    echo in-new-subvol >testdir/h
    btrfs -q subvolume delete first_subvol
    mkdir first_subvol
    echo in-dir-now >first_subvol/i
}

scenario btrfs_058_tmpfile_in_snapshots "fstests btrfs/058: an O_TMPFILE file open in each read-only snapshot (an inode with no links and an orphan item in both)"
setup_btrfs_058_tmpfile_in_snapshots() {
    echo visible >visible
}
in_parent_snapshot_btrfs_058_tmpfile_in_snapshots() {
    hold_tmpfile . 10000
}
change_btrfs_058_tmpfile_in_snapshots() {
    echo more >>visible
}
in_child_snapshot_btrfs_058_tmpfile_in_snapshots() {
    hold_tmpfile . 20000
}

scenario btrfs_077_new_dir_takes_moved_dir_name "fstests btrfs/077: a new directory takes the name of one that moved into it"
setup_btrfs_077_new_dir_takes_moved_dir_name() {
    mkdir -p merlin/RC/OSD/Source fdm/RCz/OSDz/Sourcez Z/Z2
}
change_btrfs_077_new_dir_takes_moved_dir_name() {
    mkdir OSD
    mv merlin/RC/OSD OSD/OSD-Plane_788
    mv OSD merlin/RC
    mkdir OSDz
    mv Z/Z2 OSDz/xz2
    mv Z OSDz/xz2/xz
    mv fdm/RCz/OSDz OSDz/xz2/xz/OSD-Plane_788z
    mv OSDz fdm/RCz
}

scenario btrfs_083_dirs_renamed_over_each_other "fstests btrfs/083: directories take each other's names while moving (c->x, a->x/y, b->a, e->f2/e2, d->e)"
setup_btrfs_083_dirs_renamed_over_each_other() {
    mkdir a b c
    touch a/file
    mkdir d e
    touch e/file2
    mkdir f
}
change_btrfs_083_dirs_renamed_over_each_other() {
    mv c x
    mv a x/y
    mv b a
    mv f f2
    mv e f2/e2
    mv d e
}

scenario btrfs_084_subtree_swap "fstests btrfs/084: the p1/p2 subtrees of two branches swap places"
setup_btrfs_084_subtree_swap() {
    mkdir -p data/n1/n2/p1/p2 data/n4 data/p1/p2
}
change_btrfs_084_subtree_swap() {
    cd data
    mv p1/p2 .
    mv n1/n2/p1/p2 p1
    mv p2 n1/n2/p1
    mv n1/n2 p1
    mv p1 n4
    mv n4/p1/n2/p1 .
}

scenario btrfs_087_deep_parent_child_inversions "fstests btrfs/087: a large hierarchy with many parent/child inversions in both snapshots"
setup_btrfs_087_deep_parent_child_inversions() {
    mkdir data
    cd data
    mkdir n1 n1/n2 n4 n1/n2/p1 n1/n2/p1/p2 t6 t7
    mkdir -p t5/t7
    mkdir t2 t4
    mkdir -p t1/t3
    mkdir p1
    mv t1 p1
    mkdir -p p1/p2
    mv t4 p1/p2/t1
    mv t5 n4/t5
    mv n1/n2/p1/p2 n4/t5/p2
    mv t7 n4/t5/p2/t7
    mv t2 n4/t1
    mv p1 n4/t5/p2/p1
    mv n1/n2 n4/t5/p2/p1/p2/n2
    mv n4/t5/p2/p1/p2/t1 n4/t5/p2/p1/p2/n2/t1
    mv n4/t5/t7 n4/t5/p2/p1/p2/n2/t1/t7
    mv n4/t5/p2/p1/t1/t3 n4/t5/p2/p1/p2/n2/t1/t3
    mv n4/t5/p2/p1/p2/n2/p1 n4/t5/p2/p1/p2/n2/t1/t7/p1
    mv t6 n4/t5/p2/p1/p2/n2/t1/t3/t5
    mv n4/t5/p2/p1/t1 n4/t5/p2/p1/p2/n2/t1/t3/t1
    mv n1 n4/t5/p2/p1/p2/n2/t1/t7/p1/n1
}
change_btrfs_087_deep_parent_child_inversions() {
    cd data/n4
    mv t1 t5/p2/p1/p2/n2/t1/t7/p1/t1
    mv t5/p2/p1/p2/n2/t1 .
    mv t5/p2/p1/p2/n2 t1/n2
    mv t1/t7/p1 t1/n2/p1
    mv t1/t3/t1 t1/n2/t1
    mv t1/t3 t1/n2/t1/t3
    mv t5/p2/p1/p2 t1/n2/p1/p2
    mv t1/t7 t1/n2/p1/t7
    mv t5/p2/p1 t1/n2/p1/p2/p1
    mv t1/n2/t1/t3/t5 t1/n2/p1/p2/t5
    mv t5 t1/n2/p1/p2/p1/t5
    mv t1/n2/p1/p2/p1/t5/p2 t1/n2/p1/p2/p1/p2
    mv t1/n2/p1/p2/p1/p2/t7 t1/t7
}

scenario btrfs_092_same_names_other_inodes "fstests btrfs/092: a hierarchy where the same names point to different directories in the two snapshots"
setup_btrfs_092_same_names_other_inodes() {
    mkdir -p data/n1/n2
    cd data
    mkdir n4
    mkdir -p t6/t7
    mkdir t5 t7 n4/t2 t4 t3
    mv t7 n4/t2
    mv t4 n4/t2/t7
    mv t5 n4/t2/t7/t4
    mv t6 n4/t2/t7/t4/t5
    mv n1/n2 n4/t2/t7/t4/t5/t6
    mv n1 n4/t2/t7/t4/t5/t6
    mv n4/t2/t7/t4/t5/t6/t7 n4/t2/t7/t4/t5/t6/n2
    mv t3 n4/t2/t7/t4/t5/t6/n2/t7
}
change_btrfs_092_same_names_other_inodes() {
    cd data/n4
    mv t2/t7/t4/t5/t6/n1 .
    mv t2 n1
    mv n1/t2/t7/t4/t5/t6/n2 n1/t2
    mv n1/t2/n2/t7/t3 n1/t2
    mv n1/t2/t7/t4/t5/t6 n1/t2
    mv n1/t2/t7/t4 n1/t2/t6
    mv n1/t2/t7 n1/t2/t3
    mv n1/t2/n2/t7 n1/t2
}

scenario btrfs_094_clone_into_new_file "fstests btrfs/094: compressed overlapping writes; the child adds a file with one block cloned from the first"
setup_btrfs_094_clone_into_new_file() {
    btrfs property set . compression zlib
    bytes 131072 0xaa foo 65536
    btrfs filesystem sync . >/dev/null
    bytes 114688 0xbb foo 65536
    btrfs filesystem sync . >/dev/null
    bytes 12288 0xcc foo 184320
}
change_btrfs_094_clone_into_new_file() {
    touch bar
    xfs_io -c "reflink foo 180224 180224 4096" bar >/dev/null
}

scenario btrfs_097_clone_to_lower_offset "fstests btrfs/097: ranges of a file cloned into lower offsets of the same file"
setup_btrfs_097_clone_to_lower_offset() {
    bytes 65536 0xaa foo 131072
}
change_btrfs_097_clone_to_lower_offset() {
    xfs_io -c "reflink foo 147456 0 16384" -c "reflink foo 180224 16384 16384" foo >/dev/null
}

scenario btrfs_105_file_recreated_in_child "fstests btrfs/105: foo/bar deleted and written again larger in the child (a new inode with the old name)"
setup_btrfs_105_file_recreated_in_child() {
    mkdir foo
    bytes 65536 0xaa foo/bar 0
}
change_btrfs_105_file_recreated_in_child() {
    rm -f foo/bar
    bytes 98304 0xbb foo/bar 0
}

scenario btrfs_108_reflink_then_overwrite_and_punch "fstests btrfs/108 as an incremental: a 100 KiB file reflinked whole in the child, the original then overwritten at two places and punched at a third"
setup_btrfs_108_reflink_then_overwrite_and_punch() {
    fill foo 0 102400 foo
}
change_btrfs_108_reflink_then_overwrite_and_punch() {
    cp --reflink=always foo bar
    fill foo 51200 10240 w1
    fill foo 92160 10240 w2
    fallocate -p -o 71680 -l 10240 foo
}

scenario btrfs_109_compressed_reflink "fstests btrfs/109 as an incremental: a compressed file overwritten at its start and extended, then reflinked whole"
setup_btrfs_109_compressed_reflink() {
    btrfs property set . compression zlib
    fill foo 0 102400 foo
}
change_btrfs_109_compressed_reflink() {
    fill foo 0 40960 head
    fill foo 102400 102400 tail
    btrfs filesystem sync . >/dev/null
    cp --reflink=always foo bar
}

scenario btrfs_117_reflink_deep_path "fstests btrfs/117: 300 new files next to a file reflinked and partly overwritten, at a path of several components"
setup_btrfs_117_reflink_deep_path() {
    mkdir -p a/b/c
    fill a/b/c/x 0 131072 x
}
change_btrfs_117_reflink_deep_path() {
    many_files a/b/c 300 z_ 0
    cp --reflink=always a/b/c/x a/b/c/y
    fill a/b/c/y 32768 16384 y
}

scenario btrfs_127_waiting_dir_cases "fstests btrfs/127: four cases of directory moves waiting on ancestors and descendants (ance, waiting_dir, pre, desc)"
setup_btrfs_127_waiting_dir_cases() {
    mkdir -p case_1/d/p1
    mkdir case_1/p1
    mkdir -p case_2/a
    mkdir case_2/d case_2/e case_2/f case_2/ance case_2/d/ance case_2/a/c
    mv case_2/e case_2/d/ance
    mv case_2/f case_2/d/ance
    mv case_2/ance case_2/d/ance
    mkdir -p case_3/d
    mkdir case_3/a case_3/waiting_dir
    mkdir -p case_3/pre/ance
    mkdir case_3/d/ance case_3/a/c
    mv case_3/waiting_dir case_3/d/ance
    mkdir -p case_4/tmp
    mkdir case_4/below_ance
    mkdir -p case_4/pre/wait_dir
    mkdir case_4/desc case_4/ance
    mv case_4/below_ance case_4/ance
    mkdir case_4/other_dir
}
change_btrfs_127_waiting_dir_cases() {
    mv case_1/d/p1 case_1/p1
    mv case_1/p1 case_1/d
    mv case_2/a/c case_2
    mv case_2/d/ance case_2/c
    mv case_2/c/ance/ance case_2/d
    mv case_2/c/ance/f case_2
    mv case_2/c/ance/e case_2/f
    mv case_3/d/ance case_3/a
    mv case_3/a/c case_3
    mv case_3/a/ance/waiting_dir case_3/c
    mv case_3/pre/ance case_3/d
    mv case_3/pre case_3/c/waiting_dir
    mv case_4/other_dir case_4/tmp
    mv case_4/ance/below_ance case_4/tmp/other_dir
    mv case_4/pre/wait_dir case_4/tmp/other_dir
    mv case_4/pre case_4/tmp/other_dir/below_ance
    mv case_4/desc case_4/tmp/other_dir/wait_dir
    mv case_4/ance case_4/tmp/other_dir/wait_dir/desc
}

scenario btrfs_128_no_premature_rmdir "fstests btrfs/128: a directory removed only after all of its children (two moved to a/, one to a moved dir) are out"
setup_btrfs_128_no_premature_rmdir() {
    mkdir a tmp del
    mv tmp del
    mkdir a/c del/x del/y
}
change_btrfs_128_no_premature_rmdir() {
    mv a/c .
    mv del/x a
    mv del/y a
    mv del/tmp c
    rmdir del
}

scenario btrfs_129_no_premature_rmdir_one_child "fstests btrfs/129: like 128 with one child moved to a/"
setup_btrfs_129_no_premature_rmdir_one_child() {
    mkdir a tmp del
    mv tmp del
    mkdir a/c del/x
}
change_btrfs_129_no_premature_rmdir_one_child() {
    mv a/c .
    mv del/x a
    mv del/tmp c
    rmdir del
}

scenario btrfs_130_one_extent_many_refs "fstests btrfs/130 as an incremental: a new file made of 256 references to one 128 KiB extent"
setup_btrfs_130_one_extent_many_refs() {
    bytes 131072 0xab foo 0
}
change_btrfs_130_one_extent_many_refs() {
    local args=() i
    for ((i = 0; i < 256; i++)); do
        args+=(-c "reflink foo 0 $((i * 131072)) 131072")
    done
    xfs_io -f "${args[@]}" bar >/dev/null
}

scenario btrfs_133_dir_inos_reused_by_file "fstests btrfs/133: dirs a1 (257), a2 (258) gone; after a remount a file a2 gets inode 257"
setup_btrfs_133_dir_inos_reused_by_file() {
    mkdir a1 a2
}
change_btrfs_133_dir_inos_reused_by_file() {
    rmdir a1 a2
}
change_btrfs_133_dir_inos_reused_by_file_after_remount() {
    touch a2
}
check_btrfs_133_dir_inos_reused_by_file() {
    expect_reused "$1/a1" "$2/a2"
}

scenario btrfs_134_dir_inos_reused_after_remount "fstests btrfs/134: dir257 moved back, dir258/dir259 removed, after a remount file258 and new_dir259 reuse their numbers"
setup_btrfs_134_dir_inos_reused_after_remount() {
    mkdir dir257 dir258 dir259
    mv dir257 dir258/dir257
}
change_btrfs_134_dir_inos_reused_after_remount() {
    mv dir258/dir257 dir257
    rmdir dir258 dir259
}
change_btrfs_134_dir_inos_reused_after_remount_after_remount() {
    touch file258
    mkdir new_dir259
    mv dir257 new_dir259/dir257
}
check_btrfs_134_dir_inos_reused_after_remount() {
    expect_reused "$1/dir258" "$2/file258"
    expect_reused "$1/dir259" "$2/new_dir259"
}

scenario btrfs_135_reused_dir_ino_same_child_name "fstests btrfs/135: a directory inode number reused by a different directory holding a child of the same name"
setup_btrfs_135_reused_dir_ino_same_child_name() {
    touch f
    mkdir d1 d259_old
    mv d1 d259_old/d1
}
change_btrfs_135_reused_dir_ino_same_child_name() {
    rm -r f d259_old
}
change_btrfs_135_reused_dir_ino_same_child_name_after_remount() {
    mkdir d1 dir258 dir259
    mv d1 dir259/d1
}
check_btrfs_135_reused_dir_ino_same_child_name() {
    expect_reused "$1/d259_old" "$2/dir259"
    expect_reused "$1/d259_old/d1" "$2/dir258"
}

scenario btrfs_137_holes_preserved "fstests btrfs/137: writes into and after holes of two sparse files; the holes must stay holes"
setup_btrfs_137_holes_preserved() {
    bytes 65536 0xaa foo 0
    bytes 65536 0xbb bar 0
    bytes 65536 0xcc bar 1114112
}
change_btrfs_137_holes_preserved() {
    bytes 65536 0xdd foo 1114112
    bytes 65536 0xee bar 1114112
}

scenario btrfs_144_rename_chain_with_link "fstests btrfs/144: f3->f4, link f2 as f5, f2->f3, f1->f2"
setup_btrfs_144_rename_chain_with_link() {
    touch f1 f2 f3
}
change_btrfs_144_rename_chain_with_link() {
    mv f3 f4
    ln f2 f5
    mv f2 f3
    mv f1 f2
}

scenario btrfs_145_dir_renamed_to_moved_file_name "fstests btrfs/145: a directory takes the name of a file that moved into it"
setup_btrfs_145_dir_renamed_to_moved_file_name() {
    mkdir dir1 dir1/dir2
    touch dir1/dir2/file1 dir1/dir2/file2 dir1/dir2/file3
    mkdir dir1/dir3
    mv dir1/dir2/file2 dir1/dir3/file22
    mkdir dir1/dir3/dir4
}
change_btrfs_145_dir_renamed_to_moved_file_name() {
    mv dir1/dir2/file3 dir1/dir3/dir4/file33
    mv dir1/dir2/file1 dir1/dir3/dir4/file11
    mv dir1/dir3 dir1/file3
    mv dir1/file3/file22 dir1/dir3
}

scenario btrfs_147_link_into_moved_dir "fstests btrfs/147: a link made inside a directory that moves into a new one, the file moving to the old dir's name"
setup_btrfs_147_link_into_moved_dir() {
    mkdir dir1 dir1/dir2 dir1/dir2/dir3 dir5
    touch dir1/dir2/dir3/file1
    mkdir dir1/dir2/dir3/dir4
}
change_btrfs_147_link_into_moved_dir() {
    mkdir dir1/dir6
    mv dir5 dir1/dir2/dir3/dir4/dir55
    ln dir1/dir2/dir3/file1 dir1/dir2/dir3/dir4/file11
    mv dir1/dir2/dir3/dir4 dir1/dir6/dir44
    mv dir1/dir2/dir3/file1 dir1/dir2/dir3/dir4
}

scenario btrfs_149_clone_one_sector "fstests btrfs/149: a one-sector O_DIRECT file on a compressed directory; the child clones it within the file"
setup_btrfs_149_clone_one_sector() {
    btrfs property set . compression zlib
    xfs_io -f -d -c "pwrite -q -S 0xab 0 4096" foobar
}
change_btrfs_149_clone_one_sector() {
    xfs_io -c "reflink foobar 0 8192 4096" foobar >/dev/null
}

scenario btrfs_155_links_moves_and_new_dir "fstests btrfs/155: hardlinks, moves, and a new directory that takes a link's name"
setup_btrfs_155_links_moves_and_new_dir() {
    mkdir a
    touch a/f1
    mkdir -p a/b/c
    ln a/f1 a/b/c/f1l1
    touch a/b/f2
    mkdir d
    mv a/b/c/f1l1 d/f1l1_2
    ln a/b/f2 a/f2l1
    ln a/b/f2 d/f2l2
    mv a/f1 d/f1_2
}
change_btrfs_155_links_moves_and_new_dir() {
    mv d a/b/d2
    mv a/f2l1 d
    mkdir a/f2l1
    ln a/b/d2/f1_2 a/b/f1l2
    mv a/b a/f2l1/b2
    mv a/f2l1/b2/d2 a/f2l1/b2/c/d3
    mv a/f2l1/b2/c/d3/f2l2 a/f2l1/b2/c/d3/f2l2_2
}

scenario btrfs_168_unlinked_open_files "fstests btrfs/168: a file unlinked while open in each read-only snapshot (nlink-0 inodes): one the child no longer has, one the child changed and one it kept"
setup_btrfs_168_unlinked_open_files() {
    bytes 65536 0xf1 foo 0
    bytes 92160 0x7b bar 0
    bytes 262144 0xea baz 0
}
in_parent_snapshot_btrfs_168_unlinked_open_files() {
    hold bar
    rm bar
}
change_btrfs_168_unlinked_open_files() {
    rm bar
    bytes 8192 0x19 baz 4096
}
in_child_snapshot_btrfs_168_unlinked_open_files() {
    hold foo baz
    rm foo baz
}

scenario btrfs_169_punch_prealloc "fstests btrfs/169: a preallocated 4 MiB file with 1 MiB written; the child punches [1M, 3M)"
setup_btrfs_169_punch_prealloc() {
    prealloc foo 0 4194304
    bytes 1048576 0xea foo 0
}
change_btrfs_169_punch_prealloc() {
    fallocate -p -o 1M -l 2M foo
}

scenario btrfs_178_dirs_named_by_ino_inversions "fstests btrfs/178: directories named after their inode numbers in a nest of inversions, rearranged"
setup_btrfs_178_dirs_named_by_ino_inversions() {
    mkdir 257 258
    mv 257 258/257
    mkdir 259 260 261 262 263 264
    mv 258 264/258
    mkdir 265 266
    mv 259 266/259
    mv 260 266/260
    mv 264 266/264
    mv 265 266/265
    mkdir 266/260/267 266/268 266/269
    mv 262 266/269/262
    mkdir 266/270 271
    mv 266 271/266
    mkdir 271/266/272
    mv 263 271/266/272/263
    mkdir 273 271/266/274
    mv 273 271/266/274/273
    mkdir 271/266/272/275
    mv 271 261/271
}
change_btrfs_178_dirs_named_by_ino_inversions() {
    local r=275/274/273/262/269/258/271
    mv 261/271/266/272/275 275
    mv 261/271/266/274 275/274
    mv 261/271/266/269/262 275/274/273/262
    mv 261/271/266/269 275/274/273/262/269
    mv 261/271/266/264/258/257 261/271/266/272
    mv 261/271/266/264/258 275/274/273/262/269/258
    mv 261/271 $r
    mv $r/266/268 $r/268
    mv $r/266/260/267 $r/268/267
    mv $r/266/270 $r/268/267/270
    mv $r/266/265 $r/266/259/265
    mv $r/266/259 $r/268/267/270/259
    mv $r/266/272/263 $r/266/264/263
    mv $r/266/272 $r/268/267/270/272
    mv $r/266/260 $r/268/267/270/272/257/260
    mv $r/266/264 $r/268/267/270/272/257/264
    mv 261 $r/268/267/270/272/257/264/263/261
    mv $r/266 $r/268/267/270/272/257/264/263/261/266
}
check_btrfs_178_dirs_named_by_ino_inversions() {
    expect_ino "$1/261/271/266/272/275" 275
}

scenario btrfs_188_punch_start_with_prealloc_tail "fstests btrfs/188: 500 KiB of data and a keep-size preallocation past EOF; the child punches the data away"
setup_btrfs_188_punch_start_with_prealloc_tail() {
    bytes 512000 0xab foobar 0
    prealloc foobar 1228800 819200
}
change_btrfs_188_punch_start_with_prealloc_tail() {
    fallocate -p -o 0 -l 512000 foobar
}

scenario btrfs_189_clone_unaligned_eof "fstests btrfs/189: clones within and across files ending at an unaligned EOF after a truncate"
setup_btrfs_189_clone_unaligned_eof() {
    bytes 2097152 0xb1 foo 0
    bytes 2097152 0xc7 bar 0
    bytes 2097152 0x4d baz 0
    bytes 2097152 0xe2 zoo 0
}
change_btrfs_189_clone_unaligned_eof() {
    xfs_io -c "reflink bar 1638400 655360 131072" bar >/dev/null
    xfs_io -c "reflink bar 1638400 0 131072" zoo >/dev/null
    truncate -s 727040 bar
}

scenario btrfs_200_intra_file_clone "fstests btrfs/200: files sharing extents within themselves; the child adds a second self-clone"
setup_btrfs_200_intra_file_clone() {
    bytes 131072 0xab foo 0
    xfs_io -c "reflink foo 0 131072 131072" foo >/dev/null
    bytes 131072 0xcd bar 0
}
change_btrfs_200_intra_file_clone() {
    xfs_io -c "reflink bar 0 131072 131072" bar >/dev/null
}

scenario btrfs_203_self_clone_grown_file "fstests btrfs/203: a file grown by writes far past its end, then a self-clone over the hole"
setup_btrfs_203_self_clone_grown_file() {
    bytes 65536 0xab foobar 0
}
change_btrfs_203_self_clone_grown_file() {
    bytes 65536 0xcd foobar 524288
    bytes 65536 0xef foobar 589824
    bytes 65536 0x1f foobar 655360
    bytes 65536 0x7a foobar 720896
    bytes 65536 0x4d foobar 786432
    xfs_io -c "reflink foobar 458752 196608 196608" foobar >/dev/null
}

scenario btrfs_214_capability_after_chgrp "fstests btrfs/214: a capability added in the child; another file's group changed and its capability set again"
setup_btrfs_214_capability_after_chgrp() {
    touch foo1 foo.bar foo3 plain
    setcap "cap_sys_ptrace+ep cap_sys_nice+ep" foo.bar
}
change_btrfs_214_capability_after_chgrp() {
    chgrp 100 foo.bar
    setcap "cap_sys_ptrace+ep cap_sys_nice+ep" foo.bar
    setcap "cap_sys_time+ep cap_syslog+ep" plain
}

scenario btrfs_221_orphan_refresh "fstests btrfs/221: a/testdir/a moves, a new file takes its name, links and directory renames interleave"
setup_btrfs_221_orphan_refresh() {
    touch a b
    mkdir testdir
    mv a testdir/a
}
change_btrfs_221_orphan_refresh() {
    mv testdir/a a2
    touch testdir/a
    mv b b2
    ln a2 b
    mv testdir testdir_2
    mv a2 testdir
}

scenario btrfs_222_dir_file_swaps_with_link "fstests btrfs/222: a file and a directory swap names repeatedly with a hardlink in between"
setup_btrfs_222_dir_file_swaps_with_link() {
    touch f1 f2
    mkdir d1 d1/d2
}
change_btrfs_222_dir_file_swaps_with_link() {
    ln f2 d1/f2_link
    mv f1 d1/d2/f1
    mv d1 tmp
    mv f2 d1
    mv tmp f2
    mv f2/d2 tmp
    mv f2/f2_link f2/d2
    mv tmp f2/f2_link
}

scenario btrfs_227_dir_ino_reused_by_file "fstests btrfs/227: dir with three files removed; after a remount newfile gets the dir's inode number"
setup_btrfs_227_dir_ino_reused_by_file() {
    mkdir dir
    touch dir/file1 dir/file2 dir/file3
}
change_btrfs_227_dir_ino_reused_by_file() {
    rm -fr dir
}
change_btrfs_227_dir_ino_reused_by_file_after_remount() {
    touch newfile
}
check_btrfs_227_dir_ino_reused_by_file() {
    expect_reused "$1/dir" "$2/newfile"
}

scenario btrfs_229_overlapping_self_clones "fstests btrfs/229: a 1 MiB file of four extents cloned onto itself in overlapping ranges, then overwritten"
setup_btrfs_229_overlapping_self_clones() {
    bytes 131072 0xab foobar 0
    sync
    bytes 131072 0xcd foobar 131072
    sync
    bytes 262144 0xef foobar 262144
    sync
    bytes 524288 0x73 foobar 524288
}
change_btrfs_229_overlapping_self_clones() {
    xfs_io -c "reflink foobar 65536 1048576 983040" \
        -c "reflink foobar 0 524288 262144" \
        -c "reflink foobar 524288 131072 262144" foobar >/dev/null
    bytes 655360 0x1d foobar 393216
}

scenario btrfs_235_capabilities_not_leaked "fstests btrfs/235: capabilities on some new and old files must not appear on the others"
setup_btrfs_235_capabilities_not_leaked() {
    touch foo bar baz
    setcap cap_net_raw=p foo
}
change_btrfs_235_capabilities_not_leaked() {
    touch foo2 bar2 baz2
    setcap cap_net_raw=p bar
    setcap cap_sys_nice=ep foo2
}

scenario btrfs_241_link_to_moved_name "fstests btrfs/241: a hardlink name taken by another file, its directory renamed and linked back"
setup_btrfs_241_link_to_moved_name() {
    touch file1 file2 file3
    mkdir A
    ln file3 A/hard_link
}
change_btrfs_241_link_to_moved_name() {
    mv file1 A/file1
    mv A/hard_link tmp
    mv file2 A/hard_link
    mv A B
    ln B/hard_link A
}

scenario btrfs_272_hardlinks_removed_and_readded "fstests btrfs/272: a file with 400 links loses all, then links 201..400 are made again"
setup_btrfs_272_hardlinks_removed_and_readded() {
    mkdir vol
    touch vol/foo
    python3 -c '
import os
for i in range(1, 401):
    os.link("vol/foo", "vol/%d" % i)
'
}
change_btrfs_272_hardlinks_removed_and_readded() {
    python3 -c '
import os
for i in range(1, 401):
    os.unlink("vol/%d" % i)
for i in range(201, 401):
    os.link("vol/foo", "vol/%d" % i)
'
}

scenario btrfs_278_nlink_zero_both_snapshots "fstests btrfs/278: files and directories deleted, changed and made, and in both snapshots files and directories unlinked while open (old, changed and new inodes)"
setup_btrfs_278_nlink_zero_both_snapshots() {
    mkdir -p d1 d2 gone-dir
    fill d1/f 0 5000 f
    fill g 0 3000 g
    fill open-file 0 4000 open
}
in_parent_snapshot_btrfs_278_nlink_zero_both_snapshots() {
    hold open-file gone-dir
    rm open-file
    rmdir gone-dir
}
change_btrfs_278_nlink_zero_both_snapshots() {
    rm g open-file
    rmdir gone-dir
    fill d1/f 1000 100 f2
    mkdir d3
    fill d3/new 0 100 new
    rmdir d2
}
in_child_snapshot_btrfs_278_nlink_zero_both_snapshots() {
    mkdir open-dir2
    fill open-file2 0 6000 open2
    hold open-file2 open-dir2 d1/f d3
    rm open-file2 d1/f d3/new
    rmdir open-dir2 d3
}

scenario btrfs_283_reflinks_share_best_source "fstests btrfs/283 as an incremental: two whole reflinks of a one-extent file whose original is then half overwritten (the best clone source covers the whole extent)"
setup_btrfs_283_reflinks_share_best_source() {
    bytes 131072 0xab foo 0
}
change_btrfs_283_reflinks_share_best_source() {
    cp --reflink=always foo bar
    cp --reflink=always foo baz
    bytes 65536 0xcd foo 65536
}

scenario btrfs_303_trailing_hole_not_written "fstests btrfs/303: a 64 MiB file of holes gets 64 KiB at 0 and at 32 MiB; the trailing hole must not be written"
setup_btrfs_303_trailing_hole_not_written() {
    truncate -s 64M foo
}
change_btrfs_303_trailing_hole_not_written() {
    bytes 65536 0xab foo 0
    bytes 65536 0xcd foo 33554432
}

scenario btrfs_312_writes_inside_compressed_extent "fstests btrfs/312: small writes into and after a compressed extent"
setup_btrfs_312_writes_inside_compressed_extent() {
    btrfs property set . compression zstd
    bytes 30720 0xab foo 113664
}
change_btrfs_312_writes_inside_compressed_extent() {
    bytes 8192 0xcd foo 122880
    bytes 4096 0xef foo 163840
}

scenario btrfs_319_reflink_unaligned_eof "fstests btrfs/319 as an incremental: a file of 1 MiB + 5 bytes reflinked whole (the clone ends at an unaligned EOF)"
setup_btrfs_319_reflink_unaligned_eof() {
    xfs_io -f -d -c "pwrite -q -S 0xab -b 1M 0 1M" foo
    bytes 5 0xcd foo 1048576
}
change_btrfs_319_reflink_unaligned_eof() {
    cp --reflink=always foo bar
}

scenario btrfs_322_truncate_to_zero_then_reflink "fstests btrfs/322: a file truncated to zero and then given every extent of another, ending unaligned"
setup_btrfs_322_truncate_to_zero_then_reflink() {
    xfs_io -f -d -c "pwrite -q -S 0xab -b 128K 0 128K" foo
    bytes 131077 0xcd foo 131072
    bytes 1048576 0x11 bar 0
}
change_btrfs_322_truncate_to_zero_then_reflink() {
    truncate -s 0 bar
    xfs_io -c "reflink foo 0 0 262149" bar >/dev/null
}

scenario btrfs_338_extrefs_all_deleted "fstests btrfs/338: a file with 200 links in a/ and 200 in b/ of 100-byte names (extended refs); both directories removed"
setup_btrfs_338_extrefs_all_deleted() {
    mkdir a b
    touch a/foo
    python3 -c '
import os
for i in range(200):
    os.link("a/foo", "a/%03d%s" % (i, "l" * 97))
    os.link("a/foo", "b/%03d%s" % (i, "m" * 97))
'
    echo keep >keep
}
change_btrfs_338_extrefs_all_deleted() {
    rm -rf a b
}

# ---------------------------------------------------------------------------
# The chain: five incrementals in a row (chain.0 -> chain.1 -> ... -> chain.5)

chain_0() {
    mkdir -p docs/old src/lib empty
    fill docs/readme 0 5000 readme
    fill docs/old/notes 0 20000 notes
    fill src/main 0 70000 main
    fill src/lib/util 0 3000 util
    ln src/lib/util util-link
    ln -s docs/readme readme-link
    mkfifo pipe
    setfattr -n user.tag -v zero src/main
}
chain_1() {
    mv docs documentation
    mv src/lib lib
    mv lib src/lib2
    fill src/main 10000 5000 main1
    echo new >documentation/new
    rm util-link
    setfattr -n user.tag -v one src/main
    chmod 0600 documentation/readme
}
chain_2() {
    rm -r documentation/old
    mv src/lib2/util src/util
    rmdir src/lib2
    mv empty src/empty
    truncate -s 1000 src/main
    ln src/util src/empty/util-again
    rm documentation/new
}
chain_2_after_remount() {
    # documentation/new was the highest inode number: this file takes it
    fill reused 0 1234 reused
}
chain_3() {
    mv src tmp
    mkdir src
    mv tmp src/old-src
    mv documentation src/old-src/empty/documentation
    fallocate -p -o 0 -l 4096 src/old-src/util
    ln -sfn src/old-src/empty/documentation/readme readme-link
}
chain_4() {
    mv src/old-src/empty/documentation documentation
    mv src/old-src src/old-src-renamed
    mv src/old-src-renamed/empty documentation/empty
    setfattr -x user.tag src/old-src-renamed/main
    chown 1000:1000 documentation/empty/util-again
    fill big 0 100000 big
}
chain_5() {
    rm -r src
    mv documentation/empty/util-again util
    mv documentation docs
    rm big pipe
    echo final >docs/final
}
check_chain() {
    expect_reused "$1/chain.1/documentation/new" "$1/chain.2/reused"
}

# ---------------------------------------------------------------------------
# Drivers

# restamp DIR TIME: every entry under DIR whose mtime is within an hour of
# now gets TIME as atime and mtime; times set on purpose far from now stay.
restamp() {
    local now
    now=$(date +%s)
    find "$1" -xdev -depth -newermt "@$((now - 3600))" ! -newermt "@$((now + 3600))" \
        -exec touch -h -d "$2" -- {} +
}

# remount TOP: unmounts and mounts TOP again (the same device and
# $SCENARIO_MOUNT_OPTS).
remount() {
    local dev
    if [[ ${#HELD_PIDS[@]} -gt 0 ]]; then
        echo "remount: files are held open (build scenarios with snapshot hooks last)" >&2
        return 1
    fi
    dev=$(findmnt -n -o SOURCE --target "$1")
    cd /
    umount "$1"
    mount -o "$SCENARIO_MOUNT_OPTS" "$dev" "$1"
}

# in_dir DIR FUNCTION: runs FUNCTION DIR with DIR as working directory.
in_dir() {
    cd "$1"
    "$2" "$1"
    cd /
}

# snapshot SRC DST [HOOK TIME]: commits, then a read-only snapshot; HOOK (a
# function name) runs in it, made writable for the time, and what it
# touched gets TIME.
snapshot() {
    btrfs filesystem sync "$1" >/dev/null
    btrfs -q subvolume snapshot -r "$1" "$2"
    if [[ -n ${3:-} ]] && declare -F "$3" >/dev/null; then
        btrfs property set "$2" ro false
        in_dir "$2" "$3"
        restamp "$2" "$4"
        btrfs filesystem sync "$2" >/dev/null
        btrfs property set "$2" ro true
    fi
}

# has_snapshot_hooks NAME: whether NAME runs anything in its snapshots.
has_snapshot_hooks() {
    declare -F "in_parent_snapshot_$1" >/dev/null || declare -F "in_child_snapshot_$1" >/dev/null
}

scenario_list() {
    printf '%s\n' "${SCENARIOS[@]}"
}

# scenario_build TOP NAME: TOP/NAME, TOP/NAME.p and TOP/NAME.c.
scenario_build() {
    local top=$1 name=$2 dir=$1/$2
    btrfs -q subvolume create "$dir"
    in_dir "$dir" "setup_$name"
    restamp "$dir" "$T1"
    snapshot "$dir" "$top/$name.p" "in_parent_snapshot_$name" "$T1"
    in_dir "$dir" "change_$name"
    if declare -F "change_${name}_after_remount" >/dev/null; then
        btrfs filesystem sync "$dir" >/dev/null
        remount "$top"
        in_dir "$dir" "change_${name}_after_remount"
    fi
    restamp "$dir" "$T2"
    snapshot "$dir" "$top/$name.c" "in_child_snapshot_$name" "$T2"
    if declare -F "check_$name" >/dev/null; then
        "check_$name" "$top/$name.p" "$top/$name.c"
    fi
}

# chain_build TOP: TOP/chain and its read-only snapshots TOP/chain.0..5,
# each step's changes stamped with its own time.
chain_build() {
    local top=$1 dir=$1/chain step
    btrfs -q subvolume create "$dir"
    for step in 0 1 2 3 4 5; do
        in_dir "$dir" "chain_$step"
        if declare -F "chain_${step}_after_remount" >/dev/null; then
            btrfs filesystem sync "$dir" >/dev/null
            remount "$top"
            in_dir "$dir" "chain_${step}_after_remount"
        fi
        restamp "$dir" "202$step-0$((step + 1))-0$((step + 2)) 0$step:1$step:2$step.$step$step$step UTC"
        snapshot "$dir" "$top/chain.$step"
    done
    check_chain "$top"
}

# scenario_build_all TOP [NAME...]: every scenario (or those named), and the
# chain unless names were given; scenarios with snapshot hooks last, since
# no remount is possible after them.  With SCENARIO_NOTES=DIR set, what
# scenario NAME printed goes to DIR/NAME (the chain's to DIR/chain).  Files
# stay held open: see scenario_image_copy.
scenario_build_all() {
    local top=$1 name names=()
    shift
    if [[ $# -gt 0 ]]; then names=("$@"); else names=("${SCENARIOS[@]}"); fi
    local out=/dev/stdout
    for name in "${names[@]}"; do
        has_snapshot_hooks "$name" && continue
        [[ -z ${SCENARIO_NOTES:-} ]] || out=$SCENARIO_NOTES/$name
        scenario_build "$top" "$name" >"$out"
    done
    if [[ $# -eq 0 ]]; then
        [[ -z ${SCENARIO_NOTES:-} ]] || out=$SCENARIO_NOTES/chain
        chain_build "$top" >"$out"
    fi
    for name in "${names[@]}"; do
        has_snapshot_hooks "$name" || continue
        [[ -z ${SCENARIO_NOTES:-} ]] || out=$SCENARIO_NOTES/$name
        scenario_build "$top" "$name" >"$out"
    done
}

# scenario_image_copy TOP IMAGE COPY: a consistent copy of the image file
# IMAGE of the filesystem mounted at TOP, taken frozen while the held files
# are open (so the copy keeps their inodes, with no links, in the read-only
# snapshots), then releases them.
scenario_image_copy() {
    btrfs subvolume sync "$1" >/dev/null
    btrfs filesystem sync "$1" >/dev/null
    fsfreeze -f "$1"
    cp --sparse=always "$2" "$3" || { fsfreeze -u "$1"; return 1; }
    fsfreeze -u "$1"
    release_held
}
