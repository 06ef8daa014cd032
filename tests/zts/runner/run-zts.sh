#!/usr/bin/env bash
# Runs a subset of OpenZFS's own test suite (ZTS, zfs-tests 2.3) against rzfs.
#
#   run-zts.sh [-g GROUPS] [-x EXCLUDE] [-t SECS] [-c SECS] [-b SECS] [-s SIZE] [-o OUTDIR] [-k]
#              RZFS_BIN_DIR
#
# RZFS_BIN_DIR holds rzpool, rzfs and rzfsd (e.g. target/release). Run as root on Debian bookworm.
# The script installs what ZTS needs from Debian (ksh, sudo, ...), unpacks OpenZFS's zfs-test
# package through ./oracle-setup.sh, builds ZTS's "constrained PATH" with `zpool`/`zfs` shims
# that run rzpool/rzfs against a private rzfsd, and runs ZTS's test-runner once per runfile
# section of the groups in GROUPS -- inside a private mount+pid namespace, chrooted in an overlay
# of / (see sandbox() below), so nothing a test does reaches the host and every FUSE mount and
# daemon of the run goes away with it. See README.md beside this script.
#
#   -g FILE   groups to run, one ZTS runfile section per line   (default: groups.txt beside this)
#   -x FILE   tests left out, 'group/test  # reason'             (default: exclude.txt beside this)
#   -t SECS   cap on each test's timeout (runfiles say 600)      (default: 60)
#   -c SECS   timeout of each group's cleanup script              (default: 15)
#   -b SECS   overall budget: groups not started by then are NOTRUN, a group running past it
#             is stopped and its unreported tests are NOTRUN      (default: 2400)
#   -s SIZE   size of each of the 3 sparse file vdevs (DISKS)    (default: 4G, as zfs-tests.sh)
#   -o DIR    results directory (default: /var/tmp/zts-rzfs-results/<timestamp>)
#   -k        keep the work directory (file vdevs, constrained PATH) for debugging
#   -L        no loop devices in the sandbox (volumes then have no block device)
#
# Prints 'ZTS: P passed, F failed, S skipped of N' last; writes DIR/results.tsv (one line per test:
# group, test, result, seconds, cause, note), DIR/groups.md (counts per group), DIR/causes.md (failures
# classified by cause), DIR/trace.tsv (every zpool/zfs call: test, rc, argv, stderr) and
# DIR/logs/ (test-runner's own logs, per test stdout/stderr).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'; exit 2; }

# ---------------------------------------------------------------------------------------------
# Inner part: runs chrooted in the sandbox (see sandbox() below), in the run's pid+mount
# namespace: builds the constrained PATH, starts rzfsd, runs every runfile, cleans up.
# ---------------------------------------------------------------------------------------------
inner() {
	# OUTDIR here is $WORK/out, a directory that exists only in the overlay (see sandbox()).
	mkdir -p "$OUTDIR/logs"
	cp "$WORK/setup.log" "$OUTDIR/setup.log"
	cp -r "$WORK/runfiles" "$OUTDIR/runfiles"
	: >"$OUTDIR/trace.tsv"
	# The test users (userquota, delegate, ...) call zfs too: their calls are traced as well.
	chmod 666 "$OUTDIR/trace.tsv"
	: >"$OUTDIR/console.log"
	# shellcheck disable=SC1091
	. "$STF_SUITE/include/commands.cfg"
	local SYSTEM_DIRS="/usr/local/bin /usr/local/sbin /usr/bin /usr/sbin /bin /sbin"
	local missing="" f d
	STF_PATH=$WORK/bin
	mkdir -p "$STF_PATH" "$WORK/run" "$WORK/callbacks"
	chmod 755 "$WORK" "$STF_PATH"

	# System utilities, as zfs-tests.sh's constrain_path links them.
	for f in $SYSTEM_FILES_COMMON $SYSTEM_FILES_LINUX; do
		for d in $SYSTEM_DIRS; do
			if [[ -e $d/$f && ! -d $d/$f ]]; then ln -sf "$d/$f" "$STF_PATH/$f"; break; fi
		done
		[[ -e $STF_PATH/$f ]] || missing="$missing $f"
	done
	ln -fs /sbin/fsck.ext4 "$STF_PATH/fsck"
	ln -fs /sbin/mkfs.ext4 "$STF_PATH/newfs"
	ln -fs "$STF_PATH/gzip" "$STF_PATH/compress"
	ln -fs "$STF_PATH/gunzip" "$STF_PATH/uncompress"

	# ZTS's helper programs (zfs-test package), copied: the unpacked tree may lie where the
	# test users (userquota's quser1 runs mkfile) cannot reach. Those linked to
	# libzfs/libzpool get a wrapper that finds OpenZFS's libraries in the unpacked prefix.
	mkdir -p "$WORK/helpers"
	chmod 755 "$WORK/helpers"
	for f in $ZFSTEST_FILES; do
		if [[ ! -e $STF_SUITE/bin/$f ]]; then missing="$missing $f"; continue; fi
		if LD_LIBRARY_PATH= ldd "$STF_SUITE/bin/$f" 2>/dev/null | grep -q 'not found'; then
			cp -f "$STF_SUITE/bin/$f" "$WORK/helpers/$f"
			printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$ORACLE_LIB" \
			    "$WORK/helpers/$f" >"$STF_PATH/$f"
			chmod 755 "$STF_PATH/$f"
		else
			cp -f "$STF_SUITE/bin/$f" "$STF_PATH/$f"
		fi
		chmod a+rx "$STF_PATH/$f"
	done

	# zpool and zfs: rzfs; zinject: rzinject (the subset of zinject's options it shares:
	# -d/-e/-T/-f device faults, -c to clear; other forms fail with its usage error). Each
	# call is traced (test, rc, argv, stderr) for the cause analysis.
	for f in zpool zfs zinject; do
		sed -e "s|@PROG@|$f|g" -e "s|@BIN@|$WORK/rzbin/rz${f#z}|g" -e "s|@SOCK@|$RZFS_SOCKET|g" \
		    -e "s|@TRACE@|$OUTDIR/trace.tsv|g" -e "s|@TMP@|$WORK/run|g" \
		    "$HERE/shim.sh.in" >"$STF_PATH/$f"
		chmod 755 "$STF_PATH/$f"
	done
	# Userspace OpenZFS tools that need no kernel module: OpenZFS's own (zdb reads rzfs pools
	# from their devices; zstream/zhack work on streams and exported pools).
	for f in zdb zhack zstream ztest zgenhostid raidz_test; do
		local src=$ORACLE_ROOT/sbin/$f
		[[ -x $src ]] || src=$ORACLE_ROOT/usr/bin/$f
		if [[ -x $src ]]; then
			printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$ORACLE_LIB" "$src" \
			    >"$STF_PATH/$f"
			chmod 755 "$STF_PATH/$f"
		fi
	done
	# df: rzfs's file systems are FUSE mounts, of type "fuse" where OpenZFS's are "zfs"; the
	# type filter ZTS gives df (`df -F zfs`, GNU df's SysV spelling of -t) selects them.
	if [[ -L $STF_PATH/df ]]; then
		local real_df
		real_df=$(readlink -f "$STF_PATH/df")
		rm -f "$STF_PATH/df"
		cat >"$STF_PATH/df" <<-EOF
			#!/bin/bash
			args=(); prev=
			for a in "\$@"; do
			    if [[ (\$prev == -F || \$prev == -t) && \$a == zfs ]]; then a=fuse; fi
			    [[ \$a == --type=zfs ]] && a=--type=fuse
			    args+=("\$a"); prev=\$a
			done
			exec $real_df "\${args[@]}"
		EOF
		chmod 755 "$STF_PATH/df"
	fi
	for f in $ZFS_FILES; do [[ -e $STF_PATH/$f ]] || missing="$missing $f"; done
	echo "constrained PATH: $STF_PATH; missing:$missing" | tee -a "$OUTDIR/setup.log"

	# Test-fail callback: the new lines of rzfsd's log (in place of zfs_dbgmsg/zfs_dmesg).
	cat >"$WORK/callbacks/rzfsd_log.ksh" <<-EOF
		#!/bin/ksh
		log=$WORK/run/rzfsd.log; pos=$WORK/run/rzfsd.log.pos
		[ -f "\$log" ] || exit 0
		typeset -i from=\$(cat "\$pos" 2>/dev/null || echo 0)
		typeset -i size=\$(stat -c %s "\$log")
		((size > from)) || exit 0
		echo "================ rzfsd log (new lines) ================"
		tail -c +\$((from + 1)) "\$log" | tail -n 40
		echo "\$size" >"\$pos"
	EOF
	chmod 755 "$WORK/callbacks/rzfsd_log.ksh"

	# File vdevs (zfs-tests.sh -f: files, no loop devices).
	FILEDIR=$WORK/files
	mkdir -p "$FILEDIR"
	DISKS="$FILEDIR/file-vdev0 $FILEDIR/file-vdev1 $FILEDIR/file-vdev2"

	export STF_TOOLS STF_SUITE STF_PATH DISKS FILEDIR
	export KEEP="rpool" __ZFS_POOL_EXCLUDE="rpool"
	export TESTFAIL_CALLBACKS="$WORK/callbacks/rzfsd_log.ksh"
	export TMPDIR=$FILEDIR
	export RZFS_SOCKET
	# As zfs-tests.sh does: ZTS's defaults (TESTPOOL, TESTDIR under FILEDIR, ...) are exported
	# to every test from here.
	# shellcheck disable=SC1091
	. "$STF_SUITE/include/default.cfg"
	[[ $TESTPOOL == testpool && $TESTDIR == "$FILEDIR/testdir" ]] ||
	    { echo "run-zts: default.cfg did not set TESTPOOL/TESTDIR as expected" >&2; return 1; }

	local baseline_mounts
	baseline_mounts=$(awk '{print $2}' /proc/self/mounts | sort)
	# Pool mountpoint directories left behind (ZTS's destroy_pool removes them the same way).
	remove_pool_dirs() {
		local d
		for d in /testpool*; do
			[[ -d $d ]] && ! mountpoint -q "$d" && rm -rf --one-file-system "$d"
		done
		return 0
	}

	start_daemon() {
		# zfs_admin_snapshot=1 (mkdir/rmdir/mv in .zfs/snapshot), which the snapshot group's
		# setup sets, is rzfsd's environment; the few tunables rzfsd honours
		# (pool::tunables) it reads from the sandbox's module parameter files. ZTS puts its test
		# users in group root so they can run zfs and zpool (/dev/zfs is 0666 on Linux):
		# that group may run rzfsd's read-only commands (the rest is refused). The daemon's pool
		# cache is OpenZFS's default one (in the sandbox's /etc), which rzfs writes in
		# OpenZFS's format: the cachefile tests look there, and zdb without -e finds the
		# imported pools through it as it would with the kernel module.
		RZFS_CACHEFILE=/etc/zfs/zpool.cache RZFS_READ_GROUP=root \
		RZFS_ADMIN_SNAPSHOT=1 RZFS_VOL_DIR=$RZFS_VOL_DIR RZFS_TUNABLES_DIR=/sys/module/zfs/parameters "$WORK/rzbin/rzfsd" --socket "$RZFS_SOCKET" >>"$WORK/run/rzfsd.log" 2>&1 &
		DAEMON_PID=$!
		echo "$DAEMON_PID" >>"$WORK/run/daemon.pids"
		local i
		for ((i = 0; i < 200; i++)); do
			[[ -S $RZFS_SOCKET ]] && "$STF_PATH/zpool" list >/dev/null 2>&1 && return 0
			sleep 0.05
		done
		echo "rzfsd did not start" | tee -a "$OUTDIR/setup.log"
	}
	# Between groups: no pools, no mounts of ours, fresh zeroed vdevs, a live daemon.
	reset_state() {
		local note="" p m
		if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
			note="rzfsd (pid $DAEMON_PID) had exited"
			umount -l "$RZFS_VOL_DIR" 2>/dev/null
			start_daemon
		fi
		for p in $("$STF_PATH/zpool" list -H -o name 2>/dev/null | grep -v "^no pools available"); do
			[[ $p == rpool ]] && continue
			note="$note; left over pool $p"
			"$STF_PATH/zpool" destroy -f "$p" >/dev/null 2>&1 ||
			    "$STF_PATH/zpool" destroy "$p" >/dev/null 2>&1 ||
			    "$STF_PATH/zpool" export "$p" >/dev/null 2>&1
		done
		if [[ -n $("$STF_PATH/zpool" list -H -o name 2>/dev/null | grep -v "^no pools available") ]]; then
			note="$note; could not drop pools, restarted rzfsd"
			kill "$DAEMON_PID" 2>/dev/null; wait "$DAEMON_PID" 2>/dev/null
			umount -l "$RZFS_VOL_DIR" 2>/dev/null
			# Not the pools it could not drop again.
			rm -f /etc/zfs/zpool.cache
			start_daemon
		fi
		for m in $(awk '$3 ~ /^fuse/ {print $2}' /proc/self/mounts | sort -r); do
			grep -qxF "$m" <<<"$baseline_mounts" && continue
			# The live daemon's own mount, which serves its volumes' loop devices.
			[[ $m == "$RZFS_VOL_DIR" ]] && continue
			note="$note; stale mount $m"
			umount -l "$m" 2>/dev/null
		done
		remove_pool_dirs
		rm -rf "$FILEDIR"/* 2>/dev/null
		for f in $DISKS; do truncate -s "$FILESIZE" "$f"; done
		[[ -n $note ]] && echo "reset before $1:${note#;}" | tee -a "$OUTDIR/setup.log"
		return 0
	}

	start_daemon
	: >"$OUTDIR/notrun.tsv"
	local t0=$SECONDS name group ntests remaining rc
	# The tests get no standard input: the group loop reads its index from it, and a test
	# that runs `script` (zpool_colors) would otherwise eat the rest of the index.
	run_runner() { # runfile logdir
		( cd "$2" && PATH=$STF_PATH timeout --kill-after=20 "$remaining" \
		    "$STF_TOOLS/bin/test-runner.py" -c "$1" -T functional \
		    -i "$STF_SUITE" -I 1 -o "$2" </dev/null ) 2>&1 |
		    tee -a "$OUTDIR/console.log" | sed -n 's|^\(Test.*: \).*tests/functional/|\1|p'
		return "${PIPESTATUS[0]}"
	}
	while IFS=$'\t' read -r name group ntests; do
		remaining=$((BUDGET - (SECONDS - t0)))
		if ((remaining < 30)); then
			printf '%s\t%s\n' "$name" "budget spent before it started" >>"$OUTDIR/notrun.tsv"
			continue
		fi
		reset_state "$name"
		echo "=== $name: $group ($ntests tests; $((SECONDS - t0))s elapsed) ===" |
		    tee -a "$OUTDIR/console.log"
		mkdir -p "$OUTDIR/logs/$name"
		run_runner "$WORK/runfiles/$name.run" "$OUTDIR/logs/$name"
		rc=$?
		if [[ -f $WORK/runfiles/$name.post.run ]]; then
			remaining=$((BUDGET - (SECONDS - t0)))
			((remaining < 20)) && remaining=20
			mkdir -p "$OUTDIR/logs/$name.post"
			run_runner "$WORK/runfiles/$name.post.run" "$OUTDIR/logs/$name.post"
		fi
		if [[ $rc == 124 || $rc == 137 ]]; then
			printf '%s\t%s\n' "$name" "stopped: budget spent while it ran" >>"$OUTDIR/notrun.tsv"
		fi
	done <"$WORK/runfiles/index.tsv"
	echo "total $((SECONDS - t0))s" | tee -a "$OUTDIR/console.log"

	# Clean up: unmount and export what is left, stop the daemons this run started (by pid).
	for p in $("$STF_PATH/zpool" list -H -o name 2>/dev/null | grep -v "^no pools available"); do
		"$STF_PATH/zpool" export "$p" >/dev/null 2>&1 || "$STF_PATH/zpool" destroy -f "$p" >/dev/null 2>&1
	done
	local pid
	for pid in $(cat "$WORK/run/daemon.pids") $(pgrep -f -x "$WORK/rzbin/rzfsd --socket $RZFS_SOCKET"); do
		kill "$pid" 2>/dev/null
	done
	for m in $(awk '$3 ~ /^fuse/ {print $2}' /proc/self/mounts | sort -r); do
		grep -qxF "$m" <<<"$baseline_mounts" || umount -l "$m" 2>/dev/null
	done
	remove_pool_dirs
	cp "$WORK/run/rzfsd.log" "$OUTDIR/rzfsd.log" 2>/dev/null
	return 0
}

# ---------------------------------------------------------------------------------------------
# Sandbox: pid 1 of a private pid+mount namespace. ZTS was written for a disposable VM: its tests
# run as root and some `rm -rf` paths built from variables that are unset when an earlier step
# failed (cli_root/zfs_unmount/zfs_unmount_008_neg's cleanup runs `rm -rf /tmp/$dir` with $dir
# unset, i.e. `rm -rf /tmp/`). So the tests see the host's root file system only through an
# overlay whose upper layer is a tmpfs of this namespace: every write or delete they make lands
# there and vanishes with the run -- except FILEDIR, a directory of the run's work dir bound in
# from the host's disk. /dev is a small tmpfs with the few device nodes needed (and, unless -L,
# the host's loop devices, which rzfs's volumes need),
# /sys is read-only, /proc is this pid namespace's. Results are copied out at the end.
# ---------------------------------------------------------------------------------------------
sandbox() {
	local sb=$WORK/sandbox R
	mkdir -p "$sb"
	mount -t tmpfs -o "size=$SANDBOX_SIZE,mode=755" zts-sandbox "$sb" || return 1
	mkdir -p "$sb/upper" "$sb/work" "$sb/root"
	R=$sb/root
	mount -t overlay zts-root -o "lowerdir=/,upperdir=$sb/upper,workdir=$sb/work" "$R" ||
	    { echo "run-zts: overlay mount failed" >&2; return 1; }
	# ZTS runs some commands as an unprivileged user (user_run) that sources libtest.shlib:
	# every directory above the suite must let others through, and the group too (ZTS adds
	# its users to the group owning the zfs command, root here). Inside the overlay, so the
	# host's modes (a suite unpacked under /root, mode 700) are untouched.
	local up=$STF_SUITE
	while [[ $up != / && -n $up ]]; do
		[[ -d $R$up ]] && chmod go+x "$R$up"
		up=$(dirname "$up")
	done
	# /tmp is a tmpfs of its own, as on a VM, so `rm -rf /tmp/` empties it but cannot remove it.
	mount -t tmpfs -o size=1g,mode=1777 zts-tmp "$R/tmp"
	# FILEDIR (the file vdevs, TESTDIR, ZTS's scratch files) is a directory of this run on the
	# host's disk, bound in: a test that fills its pool writes gigabytes, too much for a tmpfs.
	mkdir -p "$WORK/files" "$R$WORK/files"
	mount --bind "$WORK/files" "$R$WORK/files"
	# OpenZFS's feature-set files where an installed OpenZFS keeps them (ZTS's ZPOOL_COMPAT_DIR,
	# and one of the places rzpool looks for `-o compatibility=`): the unpacked zfsutils copy.
	if [[ ! -e $R/usr/share/zfs/compatibility.d ]]; then
		mkdir -p "$R/usr/share/zfs"
		ln -s "$(dirname "$STF_SUITE")/compatibility.d" "$R/usr/share/zfs/compatibility.d"
	fi
	mount -t proc proc "$R/proc"
	mount -t sysfs -o ro sysfs "$R/sys"
	# The ZFS module's tunables, as files (tunables.txt: OpenZFS's defaults). rzfsd reads the
	# few it honours (RZFS_TUNABLES_DIR, pool::tunables); the rest let the tests that save,
	# set and restore a tunable around their checks run (snapshot/setup.ksh sets
	# zfs_admin_snapshot before anything else), and a test that needs such a tunable's effect
	# fails on its own merits. /sys/module becomes a tmpfs with the
	# host's module directories bound back in (read-only) and a writable zfs/parameters.
	mount -t tmpfs -o mode=755 zts-modules "$R/sys/module"
	local mod
	for mod in /sys/module/*; do
		mkdir "$R/sys/module/${mod##*/}" && mount --bind -o ro "$mod" "$R/sys/module/${mod##*/}"
	done
	mkdir -p "$R/sys/module/zfs/parameters"
	local tname tvalue
	while read -r tname tvalue; do
		[[ -z $tname || $tname == \#* ]] && continue
		printf '%s\n' "$tvalue" >"$R/sys/module/zfs/parameters/$tname"
	done <"$HERE/tunables.txt"
	mount -t tmpfs -o mode=755 zts-dev "$R/dev"
	mknod -m 666 "$R/dev/null" c 1 3
	mknod -m 666 "$R/dev/zero" c 1 5
	mknod -m 666 "$R/dev/full" c 1 7
	mknod -m 666 "$R/dev/random" c 1 8
	mknod -m 666 "$R/dev/urandom" c 1 9
	mknod -m 666 "$R/dev/tty" c 5 0
	mknod -m 666 "$R/dev/fuse" c 10 229
	# Loop devices: rzfs serves a volume as a loop device over a FUSE-served file, and ZTS
	# formats and mounts volumes (mkfs.ext4 /dev/zvol/...). The loop driver is the host's (the
	# devices are global), so the outer part detaches every loop device this run attached.
	if [[ $LOOPDEVS == yes && -c /dev/loop-control ]]; then
		mknod -m 660 "$R/dev/loop-control" c 10 237
		local i
		for ((i = 0; i < 64; i++)); do mknod -m 660 "$R/dev/loop$i" b 7 "$i"; done
	fi
	# zfs_send_004_neg checks that `zfs send` refuses to write a stream to a terminal
	# (>/dev/console); without the node the shell creates a plain file there.
	mknod -m 620 "$R/dev/console" c 5 1
	# libzpool (zhack, ztest) asks the kernel whether a pool is imported by opening /dev/zfs
	# and fails closed without it: an empty file lets zhack work on the exported pools ZTS
	# hands it. libzfs-based helpers then fail at their first ioctl instead of at the open.
	: >"$R/dev/zfs"
	mkdir -p "$R/dev/pts" "$R/dev/shm"
	mount -t devpts -o newinstance,ptmxmode=0666 devpts "$R/dev/pts"
	ln -s pts/ptmx "$R/dev/ptmx"
	mount -t tmpfs -o mode=1777 zts-shm "$R/dev/shm"
	ln -s /proc/self/fd "$R/dev/fd"
	ln -s /proc/self/fd/0 "$R/dev/stdin"
	ln -s /proc/self/fd/1 "$R/dev/stdout"
	ln -s /proc/self/fd/2 "$R/dev/stderr"
	ZTS_STAGE=inner OUTDIR=$WORK/out chroot "$R" /bin/bash "$HERE/run-zts.sh"
	# Results out of the overlay into the host's OUTDIR ($WORK/out exists only in the overlay).
	cp -a "$R$WORK/out/." "$OUTDIR/"
	return 0
}

case ${ZTS_STAGE:-} in
sandbox) sandbox; exit $? ;;
inner) inner; exit $? ;;
esac

# ---------------------------------------------------------------------------------------------
# Outer part: dependencies, ZTS, work directory, then the namespace.
# ---------------------------------------------------------------------------------------------
GROUPS_FILE=$HERE/groups.txt
EXCLUDE_FILE=$HERE/exclude.txt
TIMEOUT=60
CLEANUP_TIMEOUT=15
BUDGET=2400
FILESIZE=4G
SANDBOX_SIZE=2g
OUTDIR=
KEEPWORK=no
LOOPDEVS=yes
while getopts 'g:x:t:c:b:s:o:kLh' opt; do
	case $opt in
	g) GROUPS_FILE=$OPTARG ;;
	x) EXCLUDE_FILE=$OPTARG ;;
	t) TIMEOUT=$OPTARG ;;
	c) CLEANUP_TIMEOUT=$OPTARG ;;
	b) BUDGET=$OPTARG ;;
	s) FILESIZE=$OPTARG ;;
	o) OUTDIR=$OPTARG ;;
	k) KEEPWORK=yes ;;
	L) LOOPDEVS=no ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[[ $# == 1 ]] || usage
RZBIN=$(cd "$1" && pwd) || exit 2
for b in rzpool rzfs rzfsd rzinject; do
	[[ -x $RZBIN/$b ]] || { echo "run-zts: $RZBIN/$b missing" >&2; exit 2; }
done
[[ $(id -u) == 0 ]] || { echo "run-zts: must run as root (FUSE, sudo)" >&2; exit 2; }

# Debian packages ZTS needs (ksh, sudo) or uses in these groups; zfsutils-linux is NOT installed.
need=""
for pair in ksh:ksh sudo:sudo getfacl:acl iostat:sysstat xxh128sum:xxhash parted:parted \
    rsync:rsync pax:pax fio:fio python3:python3 unshare:util-linux losetup:mount \
    truncate:coreutils bc:bc jq:jq file:file cpio:cpio fusermount3:fuse3; do
	command -v "${pair%%:*}" >/dev/null 2>&1 || need="$need ${pair#*:}"
done
if [[ -n $need ]]; then
	echo "run-zts: installing$need"
	apt-get update -qq >/dev/null 2>&1
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null || {
		echo "run-zts: apt-get install$need failed" >&2; exit 1; }
fi

# RZFS_ZTS_ROOT: a tree where those packages are already unpacked (the project's
# scripts/install-test-deps.sh makes one); otherwise oracle-setup.sh unpacks them.
if [[ -n ${RZFS_ZTS_ROOT:-} ]]; then
	ORACLE_ROOT=$RZFS_ZTS_ROOT
else
	PREFIX=$(bash "$HERE/oracle-setup.sh") || { echo "run-zts: oracle-setup.sh failed" >&2; exit 1; }
	ORACLE_ROOT=$PREFIX/root
fi
ORACLE_LIB=$ORACLE_ROOT/lib/x86_64-linux-gnu
ZTS_DIR=$ORACLE_ROOT/usr/share/zfs
STF_SUITE=$ZTS_DIR/zfs-tests
STF_TOOLS=$ZTS_DIR/test-runner
[[ -x $STF_TOOLS/bin/test-runner.py ]] || { echo "run-zts: no ZTS under $ZTS_DIR" >&2; exit 1; }

[[ -n $OUTDIR ]] || OUTDIR=/var/tmp/zts-rzfs-results/$(date +%Y%m%dT%H%M%S)
if [[ -d $OUTDIR && -n $(ls -A "$OUTDIR") ]]; then
	echo "run-zts: $OUTDIR is not empty" >&2; exit 2
fi
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
WORK=$(mktemp -d /var/tmp/zts-rzfs.XXXXXX)
mkdir -p "$WORK/rzbin"
# The sandbox's /tmp is a tmpfs of its own: a checkout under /tmp (a CI clone) is not seen
# from inside, so the stages that run there use a copy of this directory in the work dir.
cp -r "$HERE" "$WORK/runner"
HERE=$WORK/runner
cp "$RZBIN/rzpool" "$RZBIN/rzfs" "$RZBIN/rzfsd" "$RZBIN/rzinject" "$WORK/rzbin/"
RZFS_SOCKET=$WORK/run/rzfsd.sock
RZFS_VOL_DIR=$WORK/run/volumes
{
	echo "rzfs binaries: $RZBIN ($(stat -c %y "$RZBIN/rzpool" | cut -d. -f1))"
	echo "ZTS: $ZTS_DIR"
	echo "groups: $GROUPS_FILE; excluded: $EXCLUDE_FILE; test timeout cap ${TIMEOUT}s, cleanup ${CLEANUP_TIMEOUT}s; budget ${BUDGET}s; vdevs 3 x $FILESIZE files"
} | tee "$WORK/setup.log"

mkdir -p "$WORK/runfiles"
python3 "$HERE/mkrunfile.py" "$ZTS_DIR" "$GROUPS_FILE" "$WORK/runfiles" "$TIMEOUT" \
    "$CLEANUP_TIMEOUT" "$EXCLUDE_FILE" >"$WORK/runfiles/index.tsv.tmp" 2>>"$WORK/setup.log" ||
    { echo "run-zts: mkrunfile failed" >&2; exit 1; }
mv "$WORK/runfiles/index.tsv.tmp" "$WORK/runfiles/index.tsv"

export ZTS_STAGE=sandbox HERE WORK OUTDIR SANDBOX_SIZE STF_SUITE STF_TOOLS ORACLE_ROOT ORACLE_LIB RZFS_SOCKET RZFS_VOL_DIR \
    FILESIZE BUDGET LOOPDEVS
# A private pid+mount namespace: FUSE mounts of the run are invisible outside and vanish with it,
# every process the run leaves behind is killed when its pid 1 (this script) exits, and the tests
# run chrooted in an overlay of the root file system (see sandbox() above).
loops_before=$(losetup -n -O NAME 2>/dev/null | sort)
unshare --mount --propagation private --pid --fork --mount-proc -- bash "$HERE/run-zts.sh"
unset ZTS_STAGE
# Loop devices attached during the run (rzfsd's volumes, tests' own losetup) outlive the
# namespace; detach them. Assumes nothing else on the host attaches loops while ZTS runs.
if [[ $LOOPDEVS == yes ]]; then
	for l in $(comm -13 <(echo "$loops_before") <(losetup -n -O NAME 2>/dev/null | sort)); do
		losetup -d "$l" 2>/dev/null || echo "run-zts: could not detach $l" >&2
	done
fi

python3 "$HERE/summarize.py" "$OUTDIR" "$STF_SUITE" || echo "run-zts: summarize failed" >&2
if [[ $KEEPWORK == no ]]; then rm -rf "$WORK"; else echo "work directory kept: $WORK"; fi
echo "results: $OUTDIR"
tail -n 1 "$OUTDIR/summary.txt" 2>/dev/null
