//! # Rollback, send and receive
//!
//! Through a private rzfsd on file vdevs: `zfs rollback` (latest snapshot; `-r` destroying
//! later ones; a mounted file system comes back with the snapshot's files), checked by
//! OpenZFS's zdb (no leaked or damaged block, space accounting agreeing).
//!
//! Needs FUSE, root and zdb (skipped otherwise).

mod common;

use common::pools::*;
use common::rng::Rng;
use common::tools::*;
use std::collections::BTreeMap;

#[test]
fn rollback() {
    if skip_without_fuse_zdb("rollback") {
        return;
    }
    let dir = scratch("rollback");
    let d = Daemon::new("rollback");
    let (_devs, mnt) = create(&d, &dir, "rb", &SINGLE, 256 << 20);
    let mut rng = Rng::new(7);
    let mut want = BTreeMap::new();
    write_files(&mnt, "a", 20, 1..300_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "rb@one"]);
    let at_one = want.clone();
    // Changes after the snapshot: new files, a rewritten one, a removed one.
    write_files(&mnt, "b", 10, 1..300_000, &mut rng, &mut want);
    std::fs::write(mnt.join("a0"), b"changed").unwrap();
    std::fs::remove_file(mnt.join("a1")).unwrap();
    // Some of them on disk, the rest still in the open txg.
    let f = std::fs::File::open(mnt.join("b0")).unwrap();
    f.sync_all().unwrap();
    std::fs::write(mnt.join("b1"), b"unsynced").unwrap();
    // A busy file system is rolled back under its users, as OpenZFS's suspend/resume
    // does: it stays mounted, a file the snapshot has keeps its handle (and reads the
    // snapshot's bytes, none from the page cache), one it lacks turns stale.
    let mut a0 = std::fs::File::open(mnt.join("a0")).unwrap();
    let mut seen = Vec::new();
    std::io::Read::read_to_end(&mut a0, &mut seen).unwrap();
    assert_eq!(seen, b"changed");
    let cwd = std::fs::File::open(&mnt).unwrap();
    d.ok("rzfs", &["rollback", "rb@one"]);
    check_files(&mnt, &at_one, "after rollback to @one", false);
    let mut again = Vec::new();
    std::io::Seek::seek(&mut a0, std::io::SeekFrom::Start(0)).unwrap();
    std::io::Read::read_to_end(&mut a0, &mut again).unwrap();
    assert_eq!(&again, &at_one["a0"], "an open file of the snapshot reads its bytes");
    let e = std::io::Read::read(&mut &f, &mut [0u8; 16]).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "a file the snapshot lacks: {e}");
    assert!(cwd.metadata().unwrap().is_dir(), "an open directory stays usable");
    drop((f, a0, cwd));
    let mounted = d.ok("rzfs", &["get", "-H", "-o", "value", "mounted", "rb"]);
    assert_eq!(mounted, "yes\n");
    let used = d.ok("rzfs", &["get", "-Hp", "-o", "value", "usedbysnapshots", "rb"]);
    assert!(used.starts_with("0\n"), "the snapshot holds nothing of its own after a rollback: {used}");

    // -r: later snapshots go; without it the rollback is refused and names them.
    write_files(&mnt, "c", 5, 1..100_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "rb@two"]);
    std::fs::write(mnt.join("c0"), b"after two").unwrap();
    d.ok("rzfs", &["snapshot", "rb@three"]);
    let (code, _, err) = d.run("rzfs", &["rollback", "rb@one"]);
    assert!(code != 0 && err.contains("more recent snapshots") && err.contains("rb@three"), "{err}");
    let (code, _, err) = d.run("rzfs", &["rollback", "rb@nosuch"]);
    assert!(code != 0 && err.contains("does not exist"), "{err}");
    // A clone of a later snapshot (with a child and a snapshot): -r refuses and names
    // them, -R destroys them with the snapshots.
    d.ok("rzfs", &["clone", "rb@two", "rb/cl"]);
    d.ok("rzfs", &["create", "rb/cl/kid"]);
    d.ok("rzfs", &["snapshot", "rb/cl@mine"]);
    let (code, _, err) = d.run("rzfs", &["rollback", "-r", "rb@one"]);
    assert!(
        code != 0 && err.contains("clones of previous snapshots exist") && err.contains("rb/cl/kid"),
        "{err}"
    );
    d.ok("rzfs", &["rollback", "-R", "rb@one"]);
    check_files(&mnt, &at_one, "after rollback -R to @one", false);
    let snaps = d.ok("rzfs", &["list", "-H", "-t", "all", "-o", "name", "-r", "rb"]);
    assert_eq!(snaps, "rb\nrb@one\n");
    let freeing = d.ok("rzpool", &["list", "-Hpo", "freeing,leaked", "rb"]);
    assert_eq!(freeing, "0\t0\n", "destroys free at once: nothing left to free");
    // The file system keeps working, and rolls back again.
    std::fs::write(mnt.join("new"), b"new file").unwrap();
    d.ok("rzfs", &["rollback", "rb@one"]);
    assert!(!mnt.join("new").exists());
    d.ok("rzpool", &["export", "rb"]);
    zdb_check(&dir, "rb");
    rzdb_space_check(&dir, "rb");
}

/// `rzfs send ARGS > out`: exit code and stderr.
fn send_to(d: &Daemon, args: &[&str], out: &std::path::Path) -> (i32, String) {
    let f = std::fs::File::create(out).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_rzfs"))
        .arg("send")
        .args(args)
        .env("RZFS_SOCKET", &d.sock)
        .stdout(f)
        .output()
        .unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// OpenZFS's own send of snapshot `snap` of an exported pool in `dir` (`zdb -B POOL/ID
/// FLAGS`, the objset id found by `zdb -d`), written to `out`.
fn openzfs_send(dir: &std::path::Path, snap: &str, flags: &str, out: &std::path::Path) {
    let ds_line = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-d", snap]);
    let id = ds_line
        .split("ID ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap_or_else(|| panic!("no objset id in {ds_line}"))
        .trim()
        .to_string();
    let pool = snap.split(['/', '@']).next().unwrap();
    let (zdb, lib) = zdb().unwrap();
    let mut args = vec![
        "-e".to_string(),
        "-p".into(),
        dir.to_str().unwrap().into(),
        "-B".into(),
        format!("{pool}/{id}"),
    ];
    if !flags.is_empty() {
        args.push(flags.into());
    }
    let o = std::process::Command::new(zdb)
        .args(&args)
        .env("LD_LIBRARY_PATH", lib)
        .stdout(std::fs::File::create(out).unwrap())
        .output()
        .unwrap();
    assert!(o.status.success(), "zdb -B: {}", String::from_utf8_lossy(&o.stderr));
}

/// `rzfs receive ARGS < input`: exit code and stderr.
fn recv_from(d: &Daemon, args: &[&str], input: &std::path::Path) -> (i32, String) {
    let (code, _, err) = recv_output(d, args, input);
    (code, err)
}

/// `rzfs receive ARGS < input`: exit code, stdout and stderr.
fn recv_output(d: &Daemon, args: &[&str], input: &std::path::Path) -> (i32, String, String) {
    let f = std::fs::File::open(input).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_rzfs"))
        .arg("receive")
        .args(args)
        .env("RZFS_SOCKET", &d.sock)
        .stdin(f)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (o.status.code().unwrap_or(-1), text(&o.stdout), text(&o.stderr))
}

/// OpenZFS's `zstream dump -v` of a stream file: asserts it parses with every checksum
/// right, returns its output.
fn zstream_dump(stream: &std::path::Path) -> String {
    let (zdb, lib) = zdb().expect("zdb");
    let zstream = zdb.with_file_name("zstream");
    let o = std::process::Command::new(zstream)
        .args(["dump", "-v"])
        .stdin(std::fs::File::open(stream).unwrap())
        .env("LD_LIBRARY_PATH", lib)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "zstream dump of {}:\n{text}", stream.display());
    assert!(!text.to_lowercase().contains("checksum mismatch") && !text.contains("invalid"), "{text}");
    text
}

/// Every file's contents under `root` (relative path → bytes; symlinks as their target).
fn tree(root: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &std::path::Path, dir: &std::path::Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let md = std::fs::symlink_metadata(&p).unwrap();
            if md.file_type().is_symlink() {
                out.insert(rel, std::fs::read_link(&p).unwrap().to_string_lossy().into_owned().into_bytes());
            } else if md.is_dir() {
                if rel != ".zfs" {
                    out.insert(format!("{rel}/"), Vec::new());
                    walk(root, &p, out);
                }
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn assert_same(a: &BTreeMap<String, Vec<u8>>, b: &BTreeMap<String, Vec<u8>>, what: &str) {
    let ka: Vec<&String> = a.keys().collect();
    let kb: Vec<&String> = b.keys().collect();
    assert_eq!(ka, kb, "{what}: names differ");
    for (k, v) in a {
        assert!(b[k] == *v, "{what}: {k} differs ({} vs {} bytes)", v.len(), b[k].len());
    }
}

#[test]
fn send_receive() {
    if skip_without_fuse_zdb("send_receive") {
        return;
    }
    let dir = scratch("sendrecv");
    let d = Daemon::new("sendrecv");
    let (_devs, _mnt) = create(&d, &dir, "sr", &SINGLE, 512 << 20);
    // The received file systems are read to compare them: with atime on, reading one
    // modifies it and a later incremental receive without -F is refused, as in
    // OpenZFS (backup targets run with atime=off or readonly=on).
    d.ok("rzfs", &["set", "atime=off", "sr"]);
    let src = dir.join("src");
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", src.display()), "sr/src"]);
    let mut rng = Rng::new(11);
    let mut want = BTreeMap::new();
    write_files(&src, "f", 30, 0..200_000, &mut rng, &mut want);
    std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
    std::fs::write(src.join("sub/deeper/big"), rng.data(3 << 20)).unwrap();
    std::fs::write(src.join("sub/big2"), rng.data(3 << 20)).unwrap();
    std::os::unix::fs::symlink("f1", src.join("link")).unwrap();
    // A sparse file: data, a hole, data.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(src.join("sparse")).unwrap();
        f.write_all_at(&rng.data(5000), 0).unwrap();
        f.write_all_at(&rng.data(5000), 2 << 20).unwrap();
    }
    d.ok("rzfs", &["snapshot", "sr/src@a"]);
    let at_a = tree(&src);

    // Full stream: OpenZFS's zstream accepts it; received into a new file system it holds
    // the same files.
    let full = dir.join("full.zs");
    let (code, err) = send_to(&d, &["sr/src@a"], &full);
    assert_eq!(code, 0, "send: {err}");
    let dump = zstream_dump(&full);
    assert!(dump.contains("Total DRR_WRITE records"), "{dump}");
    let est = d.ok("rzfs", &["send", "-nP", "sr/src@a"]);
    assert!(est.ends_with(&format!("size\t{}\n", std::fs::metadata(&full).unwrap().len())), "{est}");
    let dst = dir.join("dst");
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", dst.display()), "sr/backup"]);
    let (code, err) = recv_from(&d, &["-e", "sr/backup"], &full);
    assert_eq!(code, 0, "receive: {err}");
    let dst = dst.join("src");
    assert_same(&at_a, &tree(&dst), "full receive");
    let guids = d.ok("rzfs", &["get", "-H", "-o", "value", "guid", "sr/src@a", "sr/backup/src@a"]);
    let g: Vec<&str> = guids.lines().collect();
    assert_eq!(g[0], g[1], "the received snapshot keeps the sender's guid");

    // Incremental: rewritten, removed, truncated, punched, new files.
    std::fs::write(src.join("f0"), b"rewritten").unwrap();
    std::fs::remove_file(src.join("f2")).unwrap();
    // Truncated, then written past the old end again: the blocks in between are holes
    // punched after @a, which only their hole births tell an incremental send about.
    std::fs::OpenOptions::new().write(true).open(src.join("sub/big2")).unwrap().set_len(1 << 20).unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(src.join("sub/big2")).unwrap();
        f.write_all_at(b"tail after a truncation", 2 << 20).unwrap();
    }
    write_files(&src, "g", 5, 0..100_000, &mut rng, &mut want);
    std::fs::remove_dir_all(src.join("sub/deeper")).ok();
    std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
    std::fs::write(src.join("sub/deeper/again"), b"again").unwrap();
    d.ok("rzfs", &["snapshot", "sr/src@b"]);
    let at_b = tree(&src);
    let inc = dir.join("inc.zs");
    let (code, err) = send_to(&d, &["-i", "@a", "sr/src@b"], &inc);
    assert_eq!(code, 0, "send -i: {err}");
    zstream_dump(&inc);
    assert!(
        std::fs::metadata(&inc).unwrap().len() < std::fs::metadata(&full).unwrap().len(),
        "an incremental stream carries only the changes"
    );
    // A second full copy, then bad streams against it change nothing.
    let (code, err) = recv_from(&d, &["-u", "sr/copy"], &full);
    assert_eq!(code, 0, "receive: {err}");
    let cut = dir.join("cut.zs");
    let bytes = std::fs::read(&inc).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let (code, err) = recv_from(&d, &["sr/copy"], &cut);
    assert!(code != 0 && err.contains("incomplete"), "truncated stream: {err}");
    let mut flipped = bytes.clone();
    let at = flipped.len() / 2;
    flipped[at] ^= 0x10;
    let flip = dir.join("flip.zs");
    std::fs::write(&flip, &flipped).unwrap();
    let (code, err) = recv_from(&d, &["sr/copy"], &flip);
    assert!(code != 0 && err.contains("checksum"), "damaged stream: {err}");
    let snaps = d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name", "sr/copy"]);
    assert_eq!(snaps, "sr/copy@a\n", "failed receives leave no snapshot");
    let (code, err) = recv_from(&d, &["sr/copy"], &full);
    assert!(code != 0 && err.contains("exists"), "a full stream onto an existing file system: {err}");
    let (code, _) = recv_from(&d, &["-u", "sr/fresh"], &inc);
    assert!(code != 0, "an incremental stream needs its source");
    assert!(d.run("rzfs", &["list", "sr/fresh"]).0 != 0);
    let (code, err) = recv_from(&d, &["sr/copy"], &inc);
    assert_eq!(code, 0, "receive -i into the copy after the failures: {err}");

    // The incremental onto the mounted backup.
    let (code, err) = recv_from(&d, &["-e", "sr/backup"], &inc);
    assert_eq!(code, 0, "receive incremental: {err}");
    assert_same(&at_b, &tree(&dst), "incremental receive");
    // Modified since its snapshot: refused without -F, rolled back with it.
    std::fs::write(dst.join("local"), b"local change").unwrap();
    let c = dir.join("c.zs");
    std::fs::write(src.join("h"), b"third").unwrap();
    d.ok("rzfs", &["snapshot", "sr/src@c"]);
    assert_eq!(send_to(&d, &["-i", "sr/src@b", "sr/src@c"], &c).0, 0);
    let (code, err) = recv_from(&d, &["-e", "sr/backup"], &c);
    assert!(code != 0 && err.contains("modified"), "{err}");
    let (code, err) = recv_from(&d, &["-F", "-e", "sr/backup"], &c);
    assert_eq!(code, 0, "receive -F: {err}");
    let at_c = tree(&src);
    assert_same(&at_c, &tree(&dst), "receive -F");

    // -I: every snapshot in between, as a stream package.
    std::fs::write(src.join("d"), b"for @d").unwrap();
    d.ok("rzfs", &["snapshot", "sr/src@d"]);
    std::fs::remove_file(src.join("h")).unwrap();
    d.ok("rzfs", &["snapshot", "sr/src@e"]);
    let pkg = dir.join("pkg.zs");
    let (code, err) = send_to(&d, &["-I", "sr/src@c", "sr/src@e"], &pkg);
    assert_eq!(code, 0, "send -I: {err}");
    let dump = zstream_dump(&pkg);
    assert!(dump.contains("Total DRR_BEGIN records = 3"), "a package header and two substreams:\n{dump}");
    let est = d.ok("rzfs", &["send", "-nvP", "-I", "sr/src@c", "sr/src@e"]);
    assert!(
        est.contains("incremental\tc\tsr/src@d\t") && est.contains("incremental\td\tsr/src@e\t"),
        "{est}"
    );
    let (code, err) = recv_from(&d, &["-e", "sr/backup"], &pkg);
    assert_eq!(code, 0, "receive a package: {err}");
    let at_e = tree(&src);
    assert_same(&at_e, &tree(&dst), "receive -I");
    let g = d.ok("rzfs", &["get", "-H", "-o", "value", "guid", "sr/src@d", "sr/backup/src@d"]);
    let g: Vec<&str> = g.lines().collect();
    assert_eq!(g[0], g[1]);
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "receive_resume_token", "sr/backup/src"]), "-\n");

    d.ok("rzpool", &["export", "sr"]);
    zdb_check(&dir, "sr");
    // OpenZFS's own send of the received file system (zdb -B) is received by rzfs.
    let ozfs = dir.join("openzfs.zs");
    openzfs_send(&dir, "sr/backup/src@e", "", &ozfs);
    zstream_dump(&ozfs);
    let mnt2 = dir.join("mnt");
    import(&d, &dir, "sr", &mnt2, false);
    let (code, err) = recv_from(&d, &["sr/fromzdb@x"], &ozfs);
    assert_eq!(code, 0, "receiving OpenZFS's stream: {err}");
    d.ok("rzfs", &["set", &format!("mountpoint={}", dir.join("z").display()), "sr/fromzdb"]);
    assert_same(&at_e, &tree(&dir.join("z")), "the stream zdb -B wrote");
    d.ok("rzpool", &["export", "sr"]);
    zdb_check(&dir, "sr");
}

/// Holes punched into a file carry their birth txg (`hole_birth`), as OpenZFS writes them:
/// OpenZFS's incremental send relies on it to send frees of ranges that existed in the
/// earlier snapshot. zdb shows the births.
#[test]
fn holes_keep_births() {
    if skip_without_fuse_zdb("holes_keep_births") {
        return;
    }
    let dir = scratch("holebirth");
    let d = Daemon::new("holebirth");
    let (_devs, _) = create(&d, &dir, "hb", &SINGLE, 256 << 20);
    // Not enabled by new pools (pool::feature_table::NOT_BY_DEFAULT); active once enabled.
    d.ok("rzpool", &["set", "feature@hole_birth=enabled", "hb"]);
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value", "feature@hole_birth", "hb"]), "active\n");
    let mnt = dir.join("fs");
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", mnt.display()), "hb/fs"]);
    let mut rng = Rng::new(3);
    std::fs::write(mnt.join("file"), rng.data(4 << 20)).unwrap();
    d.ok("rzfs", &["snapshot", "hb/fs@a"]);
    std::fs::OpenOptions::new().write(true).open(mnt.join("file")).unwrap().set_len(128 << 10).unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(mnt.join("file")).unwrap();
        f.write_all_at(b"end", (4 << 20) - 3).unwrap();
    }
    d.ok("rzpool", &["export", "hb"]);
    zdb_check(&dir, "hb");
    // zdb prints a hole with a birth as "OFFSET L0 LSIZE B=TXG" (no DVA, no checksum) and
    // skips holes without one. The file's 32 blocks: the first, 30 punched, the last (mostly
    // zeros: embedded in its pointer, which zdb prints without a checksum too).
    let out = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-dddddd", "hb/fs"]);
    let holes: Vec<&str> = out
        .lines()
        .filter(|l| {
            l.contains(" L0 ") && !l.contains("cksum=") && !l.contains("EMBEDDED") && l.contains(" B=")
        })
        .collect();
    assert_eq!(holes.len(), 30, "zdb shows the 30 punched holes with their birth:\n{out}");
    assert!(holes.iter().all(|l| !l.ends_with(" B=0")), "{}", holes.join("\n"));
}

/// Toggling `send -L` between a full and an incremental stream (ZTS `send-L_toggle`): a
/// file received from 128 KiB pieces has 128 KiB blocks; an incremental -L stream then
/// carries only its changed 1 MiB blocks, so the file must keep its block size and the
/// blocks the stream does not carry (they were dropped: holes where data was). The other
/// way round (-L first, then without) is refused, as OpenZFS refuses it.
#[test]
fn large_block_toggle() {
    if skip_without_fuse_zdb("large_block_toggle") {
        return;
    }
    let dir = scratch("ltoggle");
    let d = Daemon::new("ltoggle");
    let (_devs, pool_mnt) = create(&d, &dir, "lt", &SINGLE, 512 << 20);
    let mnt = dir.join("fs");
    let m = format!("mountpoint={}", mnt.display());
    d.ok("rzfs", &["create", "-o", &m, "-o", "compression=on", "-o", "recordsize=1m", "lt/fs"]);
    let mut rng = Rng::new(17);
    let file = mnt.join("file");
    std::fs::write(&file, rng.data(1500 << 10)).unwrap();
    // A small file too: a single block whose size changes starts over.
    std::fs::write(mnt.join("small"), rng.data(3000)).unwrap();
    d.ok("rzfs", &["snapshot", "lt/fs@snap"]);
    let first = std::fs::read(&file).unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        f.write_all_at(&rng.data(1500 << 10), 2048 << 10).unwrap();
    }
    std::fs::write(mnt.join("small"), rng.data(200_000)).unwrap();
    d.ok("rzfs", &["snapshot", "lt/fs@snap2"]);
    let want = tree(&mnt);
    let s = |name: &str| dir.join(name);
    for (full, inc, name) in [("-c", "-c", "noL-noL"), ("-cL", "-cL", "L-L"), ("-c", "-cL", "noL-L")] {
        assert_eq!(send_to(&d, &[full, "lt/fs@snap"], &s("full")).0, 0);
        assert_eq!(send_to(&d, &[inc, "-i", "@snap", "lt/fs@snap2"], &s("inc")).0, 0);
        let target = format!("lt/recv-{name}");
        let (c, e) = recv_from(&d, &[&target], &s("full"));
        assert_eq!(c, 0, "{name} full: {e}");
        let (c, e) = recv_from(&d, &[&target], &s("inc"));
        assert_eq!(c, 0, "{name} incremental: {e}");
        let got = tree(&pool_mnt.join(format!("recv-{name}")));
        assert_same(&want, &got, name);
    }
    // -L first, then an incremental without it: refused, the target as it was.
    assert_eq!(send_to(&d, &["-cL", "lt/fs@snap"], &s("full")).0, 0);
    assert_eq!(send_to(&d, &["-c", "-i", "@snap", "lt/fs@snap2"], &s("inc")).0, 0);
    assert_eq!(recv_from(&d, &["lt/recv-L-noL"], &s("full")).0, 0);
    let (c, e) = recv_from(&d, &["lt/recv-L-noL"], &s("inc"));
    assert_ne!(c, 0);
    assert!(
        e.contains("incremental send stream requires -L (--large-block), to match previous receive."),
        "{e}"
    );
    let got = std::fs::read(pool_mnt.join("recv-L-noL/file")).unwrap();
    assert!(got == first, "the refused incremental left the file as the full stream made it");
    d.ok("rzpool", &["export", "lt"]);
    zdb_check(&dir, "lt");
}

/// Blocks that compress to 112 bytes or less live in their block pointers (embedded_data,
/// as OpenZFS writes them; ZTS `send-c_embedded_blocks`): zdb sees them EMBEDDED, `send -e`
/// carries them as WRITE_EMBEDDED and a plain send as WRITE, both receive to the same
/// files (embedded again), and overwriting, deleting and a destroyed snapshot keep the
/// space accounting right (zdb -bcc, rzdb -b).
#[test]
fn embedded_blocks() {
    if skip_without_fuse_zdb("embedded_blocks") {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let dir = scratch("embedded");
    let d = Daemon::new("embedded");
    let (_devs, pool_mnt) = create(&d, &dir, "em", &SINGLE, 256 << 20);
    let mnt = dir.join("fs");
    let m = format!("mountpoint={}", mnt.display());
    d.ok("rzfs", &["create", "-o", &m, "-o", "compression=lz4", "em/fs"]);
    let mut rng = Rng::new(29);
    let sizes = [512usize, 1024, 2048, 4096, 8192, 16384];
    for n in sizes {
        let mut b = vec![0u8; n];
        b[n - 8..].copy_from_slice(&rng.data(8));
        std::fs::write(mnt.join(n.to_string()), b).unwrap();
    }
    std::fs::write(mnt.join("big"), rng.data(300_000)).unwrap();
    d.ok("rzfs", &["snapshot", "em/fs@now"]);
    d.ok("rzpool", &["sync", "em"]);
    let obj = mnt.join("4096").metadata().unwrap().ino().to_string();
    let out = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-ddddd", "em/fs", &obj]);
    assert!(out.contains("EMBEDDED"), "object {obj} is embedded:\n{out}");
    let want = tree(&mnt);
    let (plain, embed) = (dir.join("plain"), dir.join("embed"));
    let (c, e) = send_to(&d, &["-c", "em/fs@now"], &plain);
    assert_eq!(c, 0, "{e}");
    assert_eq!(send_to(&d, &["-c", "-e", "em/fs@now"], &embed).0, 0);
    let dp = zstream_dump(&plain);
    let de = zstream_dump(&embed);
    assert!(!dp.contains("WRITE_EMBEDDED object"), "no -e, no WRITE_EMBEDDED:\n{dp}");
    assert!(de.contains(&format!("WRITE_EMBEDDED object = {obj} offset = 0")), "{de}");
    // The received copies compress too (they inherit from the pool's root).
    d.ok("rzfs", &["set", "compression=lz4", "em"]);
    for (s, name) in [(&plain, "plain"), (&embed, "embed")] {
        let (c, e) = recv_from(&d, &[&format!("em/{name}")], s);
        assert_eq!(c, 0, "{name}: {e}");
        assert_same(&want, &tree(&pool_mnt.join(name)), name);
        let robj = pool_mnt.join(name).join("4096").metadata().unwrap().ino().to_string();
        d.ok("rzpool", &["sync", "em"]);
        let out = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-ddddd", &format!("em/{name}"), &robj]);
        assert!(out.contains("EMBEDDED"), "received object {robj} is embedded again:\n{out}");
    }
    // Overwritten while a snapshot holds them (deadlist), deleted, then born and freed in
    // one snapshot interval.
    std::fs::write(mnt.join("512"), b"now a different tiny file").unwrap();
    std::fs::remove_file(mnt.join("1024")).unwrap();
    std::fs::write(mnt.join("short-lived"), vec![0u8; 4000]).unwrap();
    d.ok("rzpool", &["sync", "em"]);
    std::fs::write(mnt.join("short-lived"), [1u8; 3000]).unwrap();
    d.ok("rzpool", &["sync", "em"]);
    std::fs::remove_file(mnt.join("short-lived")).unwrap();
    assert_eq!(std::fs::read(mnt.join("512")).unwrap(), b"now a different tiny file");
    d.ok("rzfs", &["snapshot", "em/fs@later"]);
    d.ok("rzfs", &["destroy", "em/fs@now"]);
    d.ok("rzpool", &["export", "em"]);
    zdb_check(&dir, "em");
    rzdb_space_check(&dir, "em");
}

/// The `<lsize>L/<psize>P` of each level-0 block of object `obj` of `ds` (zdb -ddddd).
fn zdb_block_sizes(dir: &std::path::Path, ds: &str, obj: u64) -> Vec<String> {
    let out = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-ddddd", ds, &obj.to_string()]);
    out.lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("L0"))
        .map(|l| {
            l.split_whitespace().find(|w| w.ends_with('P') && w.contains("L/")).unwrap_or("?").to_string()
        })
        .collect()
}

/// A `send -c -e` stream is received as it came: every block keeps the sender's compression
/// (lz4, gzip, zstd, zle, lzjb) and size, and embedded blocks stay embedded, whatever the
/// receiving file system's `compression` (here off), as OpenZFS writes them; a block
/// changed after the receive is written by the receiver's own properties. A stream
/// without -c is compressed by the receiver's properties.
#[test]
fn compressed_stream_kept() {
    if skip_without_fuse_zdb("compressed_stream_kept") {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let dir = scratch("rawcomp");
    let d = Daemon::new("rawcomp");
    let (_devs, pool_mnt) = create(&d, &dir, "rc", &SINGLE, 256 << 20);
    d.ok("rzfs", &["set", "compression=off", "rc"]);
    let mnt = dir.join("fs");
    let m = format!("mountpoint={}", mnt.display());
    d.ok("rzfs", &["create", "-o", &m, "rc/fs"]);
    let mut rng = Rng::new(53);
    let algos = ["lz4", "gzip-3", "zstd", "zle", "lzjb"];
    for a in algos {
        d.ok("rzfs", &["set", &format!("compression={a}"), "rc/fs"]);
        std::fs::write(mnt.join(a), rng.data(700_000)).unwrap();
        d.ok("rzpool", &["sync", "rc"]);
    }
    d.ok("rzfs", &["set", "compression=lz4", "rc/fs"]);
    let mut tiny = vec![0u8; 4096];
    tiny[4000..4008].copy_from_slice(&rng.data(8));
    std::fs::write(mnt.join("tiny"), &tiny).unwrap();
    d.ok("rzfs", &["set", "compression=off", "rc/fs"]);
    std::fs::write(mnt.join("plain"), rng.data(300_000)).unwrap();
    // Before the sync, st_blocks counts the new data (as OpenZFS's, never 0 for a file
    // with data: cp and mv would copy it as a sparse file), and an empty file has the
    // one block of its dnode (`dmu_object_size_from_db`).
    assert!(mnt.join("plain").metadata().unwrap().blocks() >= 300_000 / 512);
    std::fs::write(mnt.join("empty"), b"").unwrap();
    assert_eq!(mnt.join("empty").metadata().unwrap().blocks(), 1);
    // ... once per copy: the kernel may keep that answer past the sync (ZTS zfs_copies_002
    // runs `ls -s` right after `zpool sync`).
    d.ok("rzfs", &["set", "copies=2", "rc/fs"]);
    std::fs::write(mnt.join("two"), rng.data(300_000)).unwrap();
    let b = mnt.join("two").metadata().unwrap().blocks();
    assert!(b >= 2 * 300_000 / 512, "copies=2: {b} blocks before the sync");
    std::fs::remove_file(mnt.join("two")).unwrap();
    d.ok("rzfs", &["set", "copies=1", "rc/fs"]);
    d.ok("rzfs", &["snapshot", "rc/fs@s"]);
    let want = tree(&mnt);
    let (comp, plain) = (dir.join("comp"), dir.join("plain"));
    let (c, e) = send_to(&d, &["-c", "-e", "rc/fs@s"], &comp);
    assert_eq!(c, 0, "{e}");
    assert_eq!(send_to(&d, &["rc/fs@s"], &plain).0, 0);
    let off = d.ok("rzfs", &["get", "-H", "-o", "value", "compression", "rc"]);
    assert_eq!(off.trim(), "off", "the receivers inherit compression=off (set on the pool)");
    assert_eq!(recv_from(&d, &["rc/comp"], &comp).0, 0);
    assert_eq!(recv_from(&d, &["rc/plain"], &plain).0, 0);
    assert_same(&want, &tree(&pool_mnt.join("comp")), "comp");
    assert_same(&want, &tree(&pool_mnt.join("plain")), "plain");
    d.ok("rzpool", &["sync", "rc"]);
    let dirs = dir.to_str().unwrap();
    for f in algos.iter().chain(&["tiny", "plain"]) {
        let src = zdb_block_sizes(&dir, "rc/fs", mnt.join(f).metadata().unwrap().ino());
        let got = zdb_block_sizes(&dir, "rc/comp", pool_mnt.join("comp").join(f).metadata().unwrap().ino());
        assert!(!src.is_empty(), "{f}");
        assert_eq!(src, got, "{f}: blocks of the -c copy as the source's");
        let unc = zdb_block_sizes(&dir, "rc/plain", pool_mnt.join("plain").join(f).metadata().unwrap().ino());
        if *f != "plain" && *f != "tiny" {
            assert_ne!(src, unc, "{f}: the copy from a stream without -c is not compressed");
        }
    }
    let tiny_obj = pool_mnt.join("comp/tiny").metadata().unwrap().ino().to_string();
    let out = run_zdb(&["-e", "-p", dirs, "-ddddd", "rc/comp", &tiny_obj]);
    assert!(out.contains("EMBEDDED"), "the embedded block stays embedded:\n{out}");
    let refer = |ds: &str| -> u64 {
        d.ok("rzfs", &["get", "-Hp", "-o", "value", "referenced", ds]).trim().parse().unwrap()
    };
    let (s, r) = (refer("rc/fs@s"), refer("rc/comp"));
    assert!(r.abs_diff(s) * 50 < s, "referenced {r} of the -c copy, {s} of the source");
    assert!(refer("rc/plain") > s + s / 4, "the copy from a plain stream takes more space");
    // Changed after the receive: written by the receiver's properties (compression off).
    let lz4 = pool_mnt.join("comp/lz4");
    let mut data = std::fs::read(&lz4).unwrap();
    data[..131072].fill(7);
    std::fs::write(&lz4, &data).unwrap();
    d.ok("rzpool", &["sync", "rc"]);
    let sizes = zdb_block_sizes(&dir, "rc/comp", lz4.metadata().unwrap().ino());
    assert_eq!(sizes[0], "20000L/20000P", "{sizes:?}");
    assert_eq!(std::fs::read(&lz4).unwrap(), data);
    d.ok("rzpool", &["export", "rc"]);
    zdb_check(&dir, "rc");
}

/// A stream's LARGE_BLOCKS flag follows the sent dataset, not the pool (as
/// `setup_featureflags`): `send -L` of a file system that never had a block above 128 KiB
/// is received by a pool without large_blocks. A received property the pool cannot hold
/// (`recordsize=1M` there) is left out with a warning, and the data is received all the
/// same, in 128 KiB blocks.
#[test]
fn stream_features_follow_the_dataset() {
    if skip_without_fuse_zdb("stream_features_follow_the_dataset") {
        return;
    }
    let dir = scratch("dsfeat");
    let d = Daemon::new("dsfeat");
    let (_devs, pool_mnt) = create(&d, &dir, "lb", &SINGLE, 256 << 20);
    let mut rng = Rng::new(61);
    d.ok("rzfs", &["create", "-o", "recordsize=1M", "lb/big"]);
    d.ok("rzfs", &["create", "lb/small"]);
    for fs in ["big", "small"] {
        std::fs::write(pool_mnt.join(fs).join("f"), rng.data(3 << 20)).unwrap();
        d.ok("rzfs", &["snapshot", &format!("lb/{fs}@s")]);
    }
    let dir2 = scratch("dsfeat2");
    let devs2 = files(&dir2, 1, 128 << 20);
    d.ok("rzpool", &["create", "-o", "feature@large_blocks=disabled", "-m", "none", "nolb", &devs2[0]]);
    let (small, big) = (dir.join("small"), dir.join("big"));
    assert_eq!(send_to(&d, &["-L", "lb/small@s"], &small).0, 0);
    assert!(!zstream_dump(&small).contains("LARGE_BLOCKS"));
    let (c, e) = recv_from(&d, &["nolb/small"], &small);
    assert_eq!(c, 0, "{e}");
    // -L of the 1 MiB dataset needs large_blocks; without -L its blocks are split.
    assert_eq!(send_to(&d, &["-L", "lb/big@s"], &big).0, 0);
    let (c, e) = recv_from(&d, &["nolb/big"], &big);
    assert_ne!(c, 0);
    assert!(e.contains("large_blocks"), "{e}");
    assert_eq!(send_to(&d, &["-p", "lb/big@s"], &big).0, 0);
    let (c, e) = recv_from(&d, &["nolb/big"], &big);
    assert_eq!(c, 0, "{e}");
    assert!(e.contains("cannot receive recordsize property on nolb/big"), "{e}");
    let rs = d.ok("rzfs", &["get", "-Hp", "-o", "value,source", "recordsize", "nolb/big"]);
    assert_eq!(rs.trim(), "131072\tdefault");
    let m = dir2.join("m");
    d.ok("rzfs", &["set", &format!("mountpoint={}", m.display()), "nolb/big"]);
    assert_eq!(
        std::fs::read(m.join("f")).unwrap(),
        std::fs::read(pool_mnt.join("big/f")).unwrap(),
        "received in 128 KiB blocks"
    );
    d.ok("rzpool", &["export", "lb"]);
    zdb_check(&dir, "lb");
    d.ok("rzpool", &["export", "nolb"]);
    zdb_check(&dir2, "nolb");
}

/// `zfs send FS` sends a file system's own state while it is unmounted, named
/// `FS@--head--` (as OpenZFS names it), full or from a snapshot, and resumably; a mounted
/// one is busy; -R and -p need a snapshot.
#[test]
fn send_file_system() {
    if skip_without_fuse_zdb("send_file_system") {
        return;
    }
    let dir = scratch("sendhead");
    let d = Daemon::new("sendhead");
    let (_devs, pool_mnt) = create(&d, &dir, "sh", &SINGLE, 256 << 20);
    let src = dir.join("src");
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", src.display()), "sh/src"]);
    let mut rng = Rng::new(71);
    for i in 0..20 {
        std::fs::write(src.join(format!("a{i}")), rng.data_in(1, 300_000)).unwrap();
    }
    d.ok("rzfs", &["snapshot", "sh/src@s"]);
    for i in 0..10 {
        std::fs::write(src.join(format!("b{i}")), rng.data_in(1, 300_000)).unwrap();
    }
    std::fs::remove_file(src.join("a3")).unwrap();
    let want = tree(&src);
    let full = dir.join("full");
    let (c, e) = send_to(&d, &["sh/src"], &full);
    assert!(c != 0 && e.contains("busy"), "a mounted file system is busy: {e}");
    for bad in [&["-R", "sh/src"][..], &["-p", "sh/src"]] {
        let (c, e) = send_to(&d, bad, &full);
        assert!(c != 0 && e.contains("need a snapshot"), "{bad:?}: {e}");
    }
    d.ok("rzfs", &["unmount", "sh/src"]);
    let (c, e) = send_to(&d, &["sh/src"], &full);
    assert_eq!(c, 0, "{e}");
    assert!(zstream_dump(&full).contains("toname = sh/src@--head--"));
    let inc = dir.join("inc");
    assert_eq!(send_to(&d, &["-i", "@s", "sh/src"], &inc).0, 0);
    // Full, into a new file system; resumed after a cut.
    let bytes = std::fs::read(&full).unwrap();
    let cut = dir.join("cut");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (c, e) = recv_from(&d, &["-s", "sh/full"], &cut);
    assert!(c != 0 && e.contains("partially-complete state"), "{e}");
    let token = d.ok("rzfs", &["get", "-H", "-o", "value", "receive_resume_token", "sh/full"]);
    let rest = dir.join("rest");
    let (c, e) = send_to(&d, &["-t", token.trim()], &rest);
    assert_eq!(c, 0, "send -t of a file system: {e}");
    let (c, e) = recv_from(&d, &["-s", "sh/full"], &rest);
    assert_eq!(c, 0, "{e}");
    assert_same(&want, &tree(&pool_mnt.join("full")), "full");
    d.ok("rzfs", &["list", "sh/full@--head--"]);
    // Incremental, onto a copy of @s.
    let snap = dir.join("snap");
    assert_eq!(send_to(&d, &["sh/src@s"], &snap).0, 0);
    assert_eq!(recv_from(&d, &["sh/inc"], &snap).0, 0);
    let (c, e) = recv_from(&d, &["sh/inc"], &inc);
    assert_eq!(c, 0, "{e}");
    assert_same(&want, &tree(&pool_mnt.join("inc")), "incremental");
    d.ok("rzfs", &["mount", "sh/src"]);
    assert_same(&want, &tree(&src), "the source, mounted again");
    // A destroyed file system's inherited mount point goes with it; one set locally stays
    // (libzfs `remove_mountpoint`).
    d.ok("rzfs", &["destroy", "-r", "sh/full"]);
    assert!(!pool_mnt.join("full").exists(), "the inherited mount point is removed");
    d.ok("rzfs", &["destroy", "-r", "sh/src"]);
    assert!(src.is_dir(), "a local mount point stays");
    d.ok("rzpool", &["export", "sh"]);
    zdb_check(&dir, "sh");
}

/// The xattrs of every file under `root` (getfattr, hex values), by relative path.
fn xattr_tree(root: &std::path::Path) -> BTreeMap<String, String> {
    let o = std::process::Command::new("getfattr")
        .args(["-R", "-d", "-h", "-e", "hex", "-m", "^user\\.", "--absolute-names"])
        .arg(root)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let prefix = format!("# file: {}/", root.display());
    let mut out = BTreeMap::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut lines = block.lines();
        let name = lines.next().unwrap_or("").trim_start_matches(&prefix).to_string();
        out.insert(name, lines.collect::<Vec<_>>().join("\n"));
    }
    out
}

/// The dnode size zdb shows for object `obj` of dataset `ds` (`zdb -dd`'s dnsize column).
fn zdb_dnsize(dir: &std::path::Path, ds: &str, obj: u64) -> String {
    let out = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-dd", ds, &obj.to_string()]);
    let line = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&obj.to_string()))
        .unwrap_or_else(|| panic!("no object {obj} in zdb -dd {ds}:\n{out}"));
    // Object lvl iblk dblk dsize dnsize lsize %full type
    line.split_whitespace().nth(5).unwrap_or_else(|| panic!("{line}")).to_string()
}

/// Large dnodes (`dnodesize=auto`, 1 KiB): new files and directories take two slots, which
/// OpenZFS's zdb reads (dnsize 1K, -bcc clean, large_dnode's refcount counts the
/// dataset); they hold what a 512-byte dnode cannot (a 600-byte symlink target). Files
/// deleted and created in turn, then with `dnodesize=legacy` again, mix 1 KiB and 512-byte
/// dnodes in the same dnode blocks: the slots inside a large dnode are never handed out as
/// objects, and a freed large dnode leaves no bytes behind. Full and incremental streams
/// carry the dnode sizes (zstream dump: dn_slots) and are received with the same contents,
/// dnode sizes and xattrs; a pool without large_dnode refuses such a stream unchanged.
#[test]
fn large_dnodes() {
    if skip_without_fuse_zdb("large_dnodes") {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let dir = scratch("largedn");
    let d = Daemon::new("largedn");
    let (_devs, pool_mnt) = create(&d, &dir, "ld", &SINGLE, 256 << 20);
    let mnt = dir.join("fs");
    let m = format!("mountpoint={}", mnt.display());
    d.ok("rzfs", &["create", "-o", &m, "-o", "dnodesize=auto", "ld/fs"]);
    let got = d.ok("rzfs", &["get", "-H", "-o", "value,source", "dnodesize", "ld/fs"]);
    assert_eq!(got.trim(), "auto\tlocal");
    let mut rng = Rng::new(41);
    let target = "t".repeat(600);
    for i in 0..60 {
        std::fs::write(mnt.join(format!("f{i}")), rng.data_in(1, 20_000)).unwrap();
        if i % 10 == 0 {
            std::fs::create_dir(mnt.join(format!("d{i}"))).unwrap();
            std::fs::write(mnt.join(format!("d{i}/inner")), rng.data(3000)).unwrap();
        }
    }
    std::os::unix::fs::symlink(&target, mnt.join("longlink")).unwrap();
    let value = format!("0x{}", "ab".repeat(200));
    let o = std::process::Command::new("setfattr")
        .args(["-n", "user.big", "-v", &value])
        .arg(mnt.join("f7"))
        .status()
        .unwrap();
    assert!(o.success());
    d.ok("rzpool", &["sync", "ld"]);
    let ino = |p: &str| mnt.join(p).symlink_metadata().unwrap().ino();
    for p in ["f3", "d10", "longlink"] {
        assert_eq!(zdb_dnsize(&dir, "ld/fs", ino(p)), "1K", "{p}");
    }
    d.ok("rzfs", &["snapshot", "ld/fs@a"]);
    // Deleted and created in turn: new files take freed slots, never a large dnode's inside.
    for i in (0..60).step_by(3) {
        std::fs::remove_file(mnt.join(format!("f{i}"))).unwrap();
    }
    d.ok("rzpool", &["sync", "ld"]);
    for i in 0..30 {
        std::fs::write(mnt.join(format!("g{i}")), rng.data_in(1, 5000)).unwrap();
    }
    d.ok("rzfs", &["set", "dnodesize=legacy", "ld/fs"]);
    for i in 0..30 {
        std::fs::write(mnt.join(format!("h{i}")), rng.data_in(1, 5000)).unwrap();
    }
    for i in (1..60).step_by(3) {
        std::fs::remove_file(mnt.join(format!("f{i}"))).unwrap();
    }
    d.ok("rzpool", &["sync", "ld"]);
    for i in 0..20 {
        std::fs::write(mnt.join(format!("k{i}")), rng.data_in(1, 5000)).unwrap();
    }
    // In one txg: 512-byte dnodes freed, 1 KiB ones created (they may lie over the freed).
    d.ok("rzfs", &["set", "dnodesize=auto", "ld/fs"]);
    for i in 0..15 {
        std::fs::remove_file(mnt.join(format!("h{i}"))).unwrap();
        std::fs::write(mnt.join(format!("m{i}")), rng.data_in(1, 5000)).unwrap();
    }
    d.ok("rzfs", &["set", "dnodesize=2k", "ld/fs"]);
    std::fs::write(mnt.join("two-k"), b"4 slots").unwrap();
    d.ok("rzpool", &["sync", "ld"]);
    assert_eq!(zdb_dnsize(&dir, "ld/fs", ino("g5")), "1K");
    assert_eq!(zdb_dnsize(&dir, "ld/fs", ino("h20")), "512");
    assert_eq!(zdb_dnsize(&dir, "ld/fs", ino("m3")), "1K");
    assert_eq!(zdb_dnsize(&dir, "ld/fs", ino("two-k")), "2K");
    let want = tree(&mnt);
    assert_eq!(want["longlink"], target.as_bytes());
    d.ok("rzfs", &["snapshot", "ld/fs@b"]);
    let feat = d.ok("rzpool", &["get", "-H", "-o", "value", "feature@large_dnode", "ld"]);
    assert_eq!(feat.trim(), "active");

    // Full and incremental streams keep the dnode sizes.
    let (full, inc) = (dir.join("full"), dir.join("inc"));
    let (c, e) = send_to(&d, &["ld/fs@a"], &full);
    assert_eq!(c, 0, "{e}");
    assert_eq!(send_to(&d, &["-i", "@a", "ld/fs@b"], &inc).0, 0);
    let dump = zstream_dump(&full);
    assert!(dump.contains("dn_slots = 2"), "{dump}");
    assert!(zstream_dump(&inc).contains("dn_slots = 4"));
    assert_eq!(recv_from(&d, &["ld/copy"], &full).0, 0);
    let (c, e) = recv_from(&d, &["ld/copy"], &inc);
    assert_eq!(c, 0, "{e}");
    let copy = pool_mnt.join("copy");
    assert_same(&want, &tree(&copy), "received");
    assert_eq!(xattr_tree(&mnt), xattr_tree(&copy));
    d.ok("rzpool", &["sync", "ld"]);
    for p in ["g5", "h20", "m3", "two-k", "longlink", "d10"] {
        let obj = copy.join(p).symlink_metadata().unwrap().ino();
        assert_eq!(zdb_dnsize(&dir, "ld/copy", obj), zdb_dnsize(&dir, "ld/fs", ino(p)), "{p}");
    }

    // A pool without large_dnode refuses the stream, and has nothing of it after.
    let dir2 = scratch("largedn2");
    let devs2 = files(&dir2, 1, 128 << 20);
    d.ok("rzpool", &["create", "-o", "feature@large_dnode=disabled", "-m", "none", "nold", &devs2[0]]);
    let (c, e) = recv_from(&d, &["nold/copy"], &full);
    assert_ne!(c, 0);
    assert!(e.contains("large_dnode"), "{e}");
    let (c, _, _) = d.run("rzfs", &["list", "nold/copy"]);
    assert_ne!(c, 0, "nothing received");
    d.ok("rzpool", &["export", "nold"]);
    zdb_check(&dir2, "nold");

    d.ok("rzfs", &["destroy", "-r", "ld/fs"]);
    d.ok("rzpool", &["export", "ld"]);
    let out = zdb_check(&dir, "ld");
    assert!(!out.is_empty());
}

/// `send -h` carries the snapshots' user holds in a package (the HOLDS flag in its BEGIN,
/// `snapholds` in its header, which zstream dump reads); receive places them on the
/// snapshots it creates, full and incremental, and `receive -h` leaves them out.
#[test]
fn holds_travel() {
    if skip_without_fuse_zdb("holds_travel") {
        return;
    }
    let dir = scratch("holdsend");
    let d = Daemon::new("holdsend");
    let (_devs, pool_mnt) = create(&d, &dir, "hs", &SINGLE, 256 << 20);
    d.ok("rzfs", &["create", "hs/fs"]);
    std::fs::write(pool_mnt.join("fs/a"), b"first").unwrap();
    d.ok("rzfs", &["snapshot", "hs/fs@s1"]);
    d.ok("rzfs", &["hold", "keep-1", "hs/fs@s1"]);
    d.ok("rzfs", &["hold", "keep-2", "hs/fs@s1"]);
    std::fs::write(pool_mnt.join("fs/b"), b"second").unwrap();
    d.ok("rzfs", &["snapshot", "hs/fs@s2"]);
    d.ok("rzfs", &["hold", "keep-3", "hs/fs@s2"]);
    let (full, inc) = (dir.join("full"), dir.join("inc"));
    let (c, e) = send_to(&d, &["-h", "hs/fs@s1"], &full);
    assert_eq!(c, 0, "{e}");
    assert_eq!(send_to(&d, &["-h", "-i", "@s1", "hs/fs@s2"], &inc).0, 0);
    let dump = zstream_dump(&full);
    assert!(dump.contains("snapholds") && dump.contains("keep-2"), "{dump}");
    d.ok("rzfs", &["create", "hs/r"]);
    let (c, e) = recv_from(&d, &["-F", "hs/r/fs@s1"], &full);
    assert_eq!(c, 0, "{e}");
    assert_eq!(recv_from(&d, &["hs/r/fs"], &inc).0, 0);
    let holds = d.ok("rzfs", &["holds", "-H", "hs/r/fs@s1", "hs/r/fs@s2"]);
    let tags: Vec<(&str, &str)> = holds
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0], f[1])
        })
        .collect();
    assert_eq!(tags, [("hs/r/fs@s1", "keep-1"), ("hs/r/fs@s1", "keep-2"), ("hs/r/fs@s2", "keep-3")]);
    // A held snapshot is not destroyed.
    let (c, _, _) = d.run("rzfs", &["destroy", "hs/r/fs@s2"]);
    assert_ne!(c, 0);
    // receive -h: no holds.
    assert_eq!(recv_from(&d, &["-h", "hs/r2"], &full).0, 0);
    assert_eq!(d.ok("rzfs", &["holds", "-H", "hs/r2@s1"]).trim(), "");
    for (t, s) in [("keep-1", "hs/r/fs@s1"), ("keep-2", "hs/r/fs@s1"), ("keep-3", "hs/r/fs@s2")] {
        d.ok("rzfs", &["release", t, s]);
    }
    d.ok("rzfs", &["destroy", "hs/r/fs@s2"]);
    assert!(d.ok("rzfs", &["send", "--help"]).contains("--holds"));
    d.ok("rzpool", &["export", "hs"]);
    zdb_check(&dir, "hs");
}

/// Bookmarks: made from a snapshot or another bookmark, listed with the snapshot's guid and
/// txg, outliving their snapshot, and the source of an incremental send; destroyed one by
/// one and with their file system. zdb checks the `bookmarks` feature's refcount and the
/// zapified dataset objects.
#[test]
fn bookmarks() {
    if skip_without_fuse_zdb("bookmarks") {
        return;
    }
    let dir = scratch("bookmarks");
    let d = Daemon::new("bookmarks");
    // New pools have the feature (enabled); this one is made without any.
    let devs = files(&dir, 1, 256 << 20);
    d.ok("rzpool", &["create", "-d", "-m", dir.join("mnt").to_str().unwrap(), "bm", &devs[0]]);
    // Without the feature, bookmark refuses and says how to enable it.
    let (code, _, err) = d.run("rzfs", &["bookmark", "bm@none", "bm#none"]);
    assert!(code != 0, "{err}");
    d.ok("rzfs", &["snapshot", "bm@first"]);
    let (code, _, err) = d.run("rzfs", &["bookmark", "bm@first", "bm#first"]);
    assert!(code != 0 && err.contains("feature@bookmarks=enabled"), "{err}");
    d.ok("rzpool", &["set", "feature@bookmarks=enabled", "bm"]);
    let src = dir.join("src");
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", src.display()), "bm/src"]);
    let mut rng = Rng::new(9);
    let mut want = BTreeMap::new();
    write_files(&src, "f", 10, 0..100_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "bm/src@a"]);
    d.ok("rzfs", &["bookmark", "bm/src@a", "bm/src#a"]);
    // `#NAME` alone: a bookmark of the source's file system.
    d.ok("rzfs", &["bookmark", "bm/src#a", "#copy"]);
    // And a source named without its file system: the bookmark's.
    d.ok("rzfs", &["bookmark", "@a", "bm/src#short"]);
    d.ok("rzfs", &["destroy", "bm/src#short"]);
    // In a clone, snapshots and bookmarks of its history are ancestors; not in another
    // file system.
    d.ok("rzfs", &["clone", "-o", "mountpoint=none", "bm/src@a", "bm/cl"]);
    d.ok("rzfs", &["bookmark", "bm/src@a", "bm/cl#a"]);
    d.ok("rzfs", &["bookmark", "bm/src#a", "bm/cl#acopy"]);
    d.ok("rzfs", &["create", "-o", "mountpoint=none", "bm/other"]);
    for src in ["bm/src@a", "bm/src#a"] {
        let (code, _, err) = d.run("rzfs", &["bookmark", src, "bm/other#x"]);
        assert!(code != 0 && err.contains("not an ancestor"), "{err}");
    }
    assert_eq!(
        d.ok("rzfs", &["get", "-H", "-o", "value", "guid", "bm/cl#a"]),
        d.ok("rzfs", &["get", "-H", "-o", "value", "guid", "bm/src@a"])
    );
    // Named in a walk (-r, -d), a bookmark is shown all the same (ZTS zfs_get_001).
    for walk in ["-r", "-d1"] {
        assert_eq!(
            d.ok("rzfs", &["get", walk, "-H", "-o", "name", "guid", "bm/cl#a"]),
            "bm/cl#a\n",
            "{walk}"
        );
    }
    d.ok("rzfs", &["destroy", "-r", "bm/cl"]);
    d.ok("rzfs", &["destroy", "bm/other"]);
    let (code, _, err) = d.run("rzfs", &["bookmark", "bm/src@a", "bm/src#a"]);
    assert!(code != 0 && err.contains("exists"), "{err}");
    let list = d.ok("rzfs", &["list", "-H", "-t", "bookmark", "-o", "name,guid,createtxg"]);
    let snap = d.ok("rzfs", &["get", "-H", "-o", "value", "guid,createtxg", "bm/src@a"]);
    let sv: Vec<&str> = snap.lines().collect();
    assert_eq!(list, format!("bm/src#a\t{}\t{}\nbm/src#copy\t{}\t{}\n", sv[0], sv[1], sv[0], sv[1]));
    // syncoid's query of bookmarks.
    let got = d.ok("rzfs", &["get", "-Hpd", "1", "-t", "bookmark", "guid,creation", "bm/src"]);
    assert_eq!(got.lines().count(), 4, "{got}");
    let full = dir.join("full.zs");
    assert_eq!(send_to(&d, &["bm/src@a"], &full).0, 0);
    let (code, err) = recv_from(&d, &["-u", "bm/dst"], &full);
    assert_eq!(code, 0, "{err}");
    // The snapshot goes; its bookmark still names the point to send from.
    write_files(&src, "g", 5, 0..100_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "bm/src@b"]);
    d.ok("rzfs", &["destroy", "bm/src@a"]);
    let inc = dir.join("inc.zs");
    let (code, err) = send_to(&d, &["-i", "bm/src#a", "bm/src@b"], &inc);
    assert_eq!(code, 0, "send -i from a bookmark: {err}");
    zstream_dump(&inc);
    let (code, err) = recv_from(&d, &["bm/dst"], &inc);
    assert_eq!(code, 0, "receive from a bookmark's stream: {err}");
    d.ok("rzfs", &["set", &format!("mountpoint={}", dir.join("dst").display()), "bm/dst"]);
    assert_same(&tree(&src), &tree(&dir.join("dst")), "after the bookmark's incremental");
    d.ok("rzfs", &["destroy", "bm/src#copy"]);
    assert_eq!(d.ok("rzfs", &["list", "-H", "-t", "bookmark", "-o", "name"]), "bm/src#a\n");
    d.ok("rzpool", &["export", "bm"]);
    zdb_check(&dir, "bm");
    import(&d, &dir, "bm", &dir.join("mnt"), false);
    assert_eq!(d.ok("rzfs", &["list", "-H", "-t", "bookmark", "-o", "name"]), "bm/src#a\n");
    d.ok("rzfs", &["destroy", "-r", "bm/src"]);
    assert_eq!(d.ok("rzfs", &["list", "-H", "-t", "bookmark", "-o", "name"]), "");
    d.ok("rzfs", &["create", "bm/again"]);
    d.ok("rzfs", &["snapshot", "bm/again@x"]);
    d.ok("rzfs", &["bookmark", "bm/again@x", "bm/again#x"]);
    d.ok("rzfs", &["destroy", "bm/again#x"]);
    d.ok("rzpool", &["export", "bm"]);
    zdb_check(&dir, "bm");
}

/// OpenZFS's own test stream (ZTS `rsend/recv_dedup`): `dedup.zsend.bz2`, a stream package
/// written by the kernel's `zfs send -D`, made receivable by `zstream redup`, received with
/// `-d` and compared file by file with the tarball ZTS compares it with.
#[test]
fn receive_openzfs_fixture() {
    if skip_without_fuse_zdb("receive_openzfs_fixture") {
        return;
    }
    let rsend =
        std::path::Path::new("/opt/rzfs-oracles/openzfs/usr/share/zfs/zfs-tests/tests/functional/rsend");
    if !rsend.join("dedup.zsend.bz2").exists() {
        eprintln!("receive_openzfs_fixture: the zfs-test package is missing; skipped");
        return;
    }
    let dir = scratch("rsendfix");
    let d = Daemon::new("rsendfix");
    let (_devs, mnt) = create(&d, &dir, "testpool", &SINGLE, 256 << 20);
    let (zdb, lib) = zdb().unwrap();
    let zstream = zdb.with_file_name("zstream");
    let raw = dir.join("dedup.zsend");
    let o = std::process::Command::new("bzip2")
        .args(["-dc"])
        .stdin(std::fs::File::open(rsend.join("dedup.zsend.bz2")).unwrap())
        .stdout(std::fs::File::create(&raw).unwrap())
        .status()
        .unwrap();
    assert!(o.success());
    let redup = dir.join("redup.zsend");
    let o = std::process::Command::new(&zstream)
        .arg("redup")
        .arg(&raw)
        .env("LD_LIBRARY_PATH", &lib)
        .stdout(std::fs::File::create(&redup).unwrap())
        .status()
        .unwrap();
    assert!(o.success(), "zstream redup");
    // The dedup stream itself is refused with the way out named.
    d.ok("rzfs", &["create", "testpool/recv"]);
    let (code, err) = recv_from(&d, &["-d", "testpool/recv"], &raw);
    assert!(code != 0 && err.contains("zstream redup"), "{err}");
    assert_eq!(d.ok("rzfs", &["list", "-H", "-r", "-o", "name", "testpool/recv"]), "testpool/recv\n");
    let (code, err) = recv_from(&d, &["-d", "testpool/recv"], &redup);
    assert_eq!(code, 0, "receive of OpenZFS's stream: {err}");
    let tar = dir.join("tar");
    std::fs::create_dir_all(&tar).unwrap();
    let o = std::process::Command::new("tar")
        .args(["--directory", tar.to_str().unwrap(), "-xzf", rsend.join("fs.tar.gz").to_str().unwrap()])
        .status()
        .unwrap();
    assert!(o.success());
    assert_same(&tree(&tar.join("fs")), &tree(&mnt.join("recv/fs")), "dedup.zsend after zstream redup");
    // A replication stream: the child file system came too, and the properties it carried.
    let names = d.ok("rzfs", &["list", "-H", "-r", "-t", "all", "-o", "name", "testpool/recv"]);
    assert_eq!(names, "testpool/recv\ntestpool/recv/fs\ntestpool/recv/fs@snap\ntestpool/recv/fs/subfs\ntestpool/recv/fs/subfs@snap\n");
    let props = d.ok("rzfs", &["get", "-H", "-o", "value", "recordsize,compression", "testpool/recv/fs"]);
    assert_eq!(props, "16K\non\n");
    d.ok("rzpool", &["export", "testpool"]);
    zdb_check(&dir, "testpool");
}

/// `rzfs receive < PIPE` fed half of `stream`, then the daemon is killed (-9) while the
/// receive waits for the rest.
fn receive_killed(d: &Daemon, args: &[&str], stream: &[u8]) {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rzfs"))
        .arg("receive")
        .args(args)
        .env("RZFS_SOCKET", &d.sock)
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Err(e) = input.write_all(&stream[..stream.len() / 2]).and_then(|_| input.flush()) {
        drop(input);
        let out = child.wait_with_output().unwrap();
        panic!("the receive stopped reading ({e}): {}", String::from_utf8_lossy(&out.stderr));
    }
    // Long enough for a txg or two to commit part of the stream (txg timeout 1 s here).
    std::thread::sleep(std::time::Duration::from_secs(3));
    d.kill9();
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "the receive cannot have succeeded");
}

/// A daemon killed in the middle of a receive: at the next import the half-received file
/// system is destroyed (a full stream) or rolled back to the stream's source (an
/// incremental one), as OpenZFS undoes inconsistent datasets; nothing half-received is ever
/// mounted, and zdb finds the pool clean.
#[test]
fn receive_interrupted() {
    if skip_without_fuse_zdb("receive_interrupted") {
        return;
    }
    let dir = scratch("recvkill");
    let d = Daemon::with_env("recvkill", &[("RZFS_TXG_TIMEOUT", "1")]);
    let (_devs, mnt) = create(&d, &dir, "rk", &SINGLE, 512 << 20);
    // The received file systems are read to compare them: with atime on, reading one
    // modifies it and a later incremental receive without -F is refused, as in
    // OpenZFS (backup targets run with atime=off or readonly=on).
    d.ok("rzfs", &["set", "atime=off", "rk"]);
    let src = dir.join("src");
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", src.display()), "rk/src"]);
    let mut rng = Rng::new(21);
    let mut want = BTreeMap::new();
    write_files(&src, "f", 40, 100_000..400_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "rk/src@a"]);
    let at_a = tree(&src);
    let full = dir.join("full.zs");
    assert_eq!(send_to(&d, &["rk/src@a"], &full).0, 0);
    let full_bytes = std::fs::read(&full).unwrap();

    receive_killed(&d, &["-u", "rk/half"], &full_bytes);
    lazy_unmount(&mnt);
    lazy_unmount(&src);
    import(&d, &dir, "rk", &mnt, false);
    let names = d.ok("rzfs", &["list", "-H", "-o", "name", "-r", "rk"]);
    assert!(!names.contains("rk/half"), "the half-received file system is gone: {names}");

    // An incremental cut short: the target returns to its source snapshot.
    let (code, err) = recv_from(&d, &["-u", "rk/copy"], &full);
    assert_eq!(code, 0, "{err}");
    if mounts_under(&src).is_empty() {
        d.ok("rzfs", &["mount", "rk/src"]);
    }
    write_files(&src, "g", 40, 100_000..400_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "rk/src@b"]);
    let inc = dir.join("inc.zs");
    assert_eq!(send_to(&d, &["-i", "@a", "rk/src@b"], &inc).0, 0);
    receive_killed(&d, &["rk/copy"], &std::fs::read(&inc).unwrap());
    lazy_unmount(&mnt);
    lazy_unmount(&src);
    import(&d, &dir, "rk", &mnt, false);
    let snaps = d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name", "rk/copy"]);
    assert_eq!(snaps, "rk/copy@a\n");
    let copy = dir.join("copy");
    d.ok("rzfs", &["mount", "rk/copy", copy.to_str().unwrap()]);
    assert_same(&at_a, &tree(&copy), "rolled back to @a");
    // The stream received again, whole, this time.
    d.ok("rzfs", &["unmount", "rk/copy"]);
    let (code, err) = recv_from(&d, &["rk/copy"], &inc);
    assert_eq!(code, 0, "{err}");

    // receive -F of an incremental over a later snapshot and changes, cut short: the stream
    // was going into the clone rk/copy/%recv, which the import destroys; rk/copy keeps its
    // snapshot and its changes.
    d.ok("rzfs", &["mount", "rk/copy", copy.to_str().unwrap()]);
    let mut mine = BTreeMap::new();
    write_files(&copy, "mine", 6, 10_000..100_000, &mut rng, &mut mine);
    d.ok("rzfs", &["snapshot", "rk/copy@local"]);
    write_files(&copy, "more", 3, 10_000..100_000, &mut rng, &mut mine);
    d.ok("rzpool", &["sync", "rk"]);
    let changed = tree(&copy);
    write_files(&src, "h", 30, 100_000..400_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "rk/src@c"]);
    let inc_c = dir.join("inc-c.zs");
    assert_eq!(send_to(&d, &["-i", "@b", "rk/src@c"], &inc_c).0, 0);
    receive_killed(&d, &["-F", "rk/copy"], &std::fs::read(&inc_c).unwrap());
    lazy_unmount(&mnt);
    lazy_unmount(&src);
    lazy_unmount(&copy);
    import(&d, &dir, "rk", &mnt, false);
    let all = d.ok("rzfs", &["list", "-H", "-t", "all", "-o", "name", "-r", "rk/copy"]);
    assert_eq!(all, "rk/copy\nrk/copy@a\nrk/copy@b\nrk/copy@local\n");
    if mounts_under(&copy).is_empty() {
        d.ok("rzfs", &["mount", "rk/copy", copy.to_str().unwrap()]);
    }
    assert_same(&changed, &tree(&copy), "the changes kept after a receive -F cut short");
    d.ok("rzfs", &["unmount", "rk/copy"]);
    let (code, err) = recv_from(&d, &["-F", "rk/copy"], &inc_c);
    assert_eq!(code, 0, "{err}");
    d.ok("rzpool", &["export", "rk"]);
    zdb_check(&dir, "rk");
}

/// A randomized workload (the POSIX model: files, hard links, renames, truncations,
/// symlinks, xattrs) between snapshots; each snapshot replicated by a full, incremental
/// (`-i`) or package (`-I`, skipping a round) stream into a second file system, which must
/// then equal the model as of that snapshot. The seed is printed; `RZFS_SENDMODEL_SEED`
/// replays, `RZFS_SENDMODEL_ROUNDS` lengthens.
#[test]
fn replication_matches_model() {
    use common::model::{compare_mount, step, Model};
    if skip_without_fuse_zdb("replication_matches_model") {
        return;
    }
    let seed = common::rng::env_seed("RZFS_SENDMODEL_SEED", "replication_matches_model");
    let rounds: usize =
        std::env::var("RZFS_SENDMODEL_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let dir = scratch("sendmodel");
    let d = Daemon::new("sendmodel");
    let (_devs, _) = create(&d, &dir, "sm", &SINGLE, 1 << 30);
    // The received file systems are read to compare them: with atime on, reading one
    // modifies it and a later incremental receive without -F is refused, as in
    // OpenZFS (backup targets run with atime=off or readonly=on).
    d.ok("rzfs", &["set", "atime=off", "sm"]);
    let src = dir.join("src");
    let dst = dir.join("dst");
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", src.display()), "sm/src"]);
    let mut rng = common::model::Rng(seed | 1);
    let mut m = Model::default();
    let mut received: Option<usize> = None;
    for round in 0..rounds {
        for _ in 0..150 {
            step(&mut rng, &mut m, &src);
        }
        d.ok("rzfs", &["snapshot", &format!("sm/src@r{round}")]);
        let stream = dir.join(format!("r{round}.zs"));
        let to = format!("sm/src@r{round}");
        let args: Vec<String> = match received {
            None => vec![to.clone()],
            // Every third round waits, and the next sends both rounds as one package.
            Some(_) if round % 3 == 1 && round + 1 < rounds => continue,
            Some(prev) if round - prev > 1 => vec!["-I".into(), format!("@r{prev}"), to.clone()],
            Some(prev) => vec!["-i".into(), format!("sm/src@r{prev}"), to.clone()],
        };
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, err) = send_to(&d, &argv, &stream);
        assert_eq!(code, 0, "seed {seed} round {round}: send {args:?}: {err}");
        if received.is_some() {
            d.ok("rzfs", &["unmount", "sm/dst"]);
        }
        let (code, err) = recv_from(&d, &["-u", "sm/dst"], &stream);
        assert_eq!(code, 0, "seed {seed} round {round}: receive {args:?}: {err}");
        d.ok("rzfs", &["mount", "sm/dst", dst.to_str().unwrap()]);
        compare_mount(&m, &dst);
        received = Some(round);
    }
    let snaps = |fs: &str| -> Vec<String> {
        d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "guid", "-s", "createtxg", fs])
            .lines()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(snaps("sm/src"), snaps("sm/dst"), "seed {seed}: the same snapshots on both sides");
    d.ok("rzpool", &["export", "sm"]);
    zdb_check(&dir, "sm");
}

/// A resume token decoded independently of rzfs (OpenZFS's `zstream token` needs the
/// kernel module): `VERSION-CKSUM-LEN-HEX`, HEX a zlib stream of LEN bytes whose first
/// fletcher-4 word is CKSUM; returns the packed nvlist's bytes (NV_ENCODE_NATIVE: names and
/// strings readable in it).
fn decode_token(token: &str) -> Vec<u8> {
    let script = r#"
import sys, zlib, struct
v, ck, ln, hx = sys.argv[1].split('-', 3)
assert v == '1', 'version'
z = bytes.fromhex(hx)
a = b = c = d = 0
for (w,) in struct.iter_unpack('<I', z[:len(z) // 4 * 4]):
    a = (a + w) & (2**64 - 1); b = (b + a) & (2**64 - 1); c = (c + b) & (2**64 - 1); d = (d + c) & (2**64 - 1)
assert a == int(ck, 16), 'checksum'
p = zlib.decompress(z)
assert len(p) == int(ln, 16), 'length'
sys.stdout.buffer.write(p)
"#;
    let o = std::process::Command::new("python3").args(["-c", script, token]).output().unwrap();
    assert!(o.status.success(), "token {token}: {}", String::from_utf8_lossy(&o.stderr));
    o.stdout
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Resumable receives: `receive -s` of a stream cut short keeps the partial state (not
/// undone at import, not mounted), `receive_resume_token` names it (decoded by OpenZFS's
/// `zstream token`), `send -t TOKEN` sends the rest (a stream zstream accepts), which
/// completes the receive with the files of the snapshot; `receive -A` discards such a state;
/// a fresh stream into it is refused. Full and incremental.
#[test]
fn resumable_receive() {
    if skip_without_fuse_zdb("resumable_receive") {
        return;
    }
    let dir = scratch("resume");
    let d = Daemon::new("resume");
    let (_devs, mnt) = create(&d, &dir, "rs", &SINGLE, 512 << 20);
    // The received file systems are read to compare them: with atime on, reading one
    // modifies it and a later incremental receive without -F is refused, as in
    // OpenZFS (backup targets run with atime=off or readonly=on).
    d.ok("rzfs", &["set", "atime=off", "rs"]);
    let src = dir.join("src");
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", src.display()), "rs/src"]);
    let mut rng = Rng::new(33);
    let mut want = BTreeMap::new();
    write_files(&src, "f", 30, 50_000..400_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "rs/src@a"]);
    let at_a = tree(&src);
    let full = dir.join("full.zs");
    assert_eq!(send_to(&d, &["rs/src@a"], &full).0, 0);
    let bytes = std::fs::read(&full).unwrap();
    let cut = dir.join("cut.zs");
    std::fs::write(&cut, &bytes[..bytes.len() * 3 / 5]).unwrap();

    let (code, err) = recv_from(&d, &["-s", "-u", "rs/dst"], &cut);
    assert!(code != 0 && err.contains("partially-complete state"), "{err}");
    let token = d.ok("rzfs", &["get", "-H", "-o", "value", "receive_resume_token", "rs/dst"]);
    let token = token.trim().to_string();
    assert!(token.starts_with("1-"), "a token: {token}");
    let decoded = decode_token(&token);
    assert!(contains(&decoded, "rs/src@a") && contains(&decoded, "object") && contains(&decoded, "toguid"));
    // Kept across export and import, and never mounted.
    d.ok("rzpool", &["export", "rs"]);
    import(&d, &dir, "rs", &mnt, false);
    if mounts_under(&src).is_empty() {
        d.ok("rzfs", &["mount", "rs/src"]);
    }
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "receive_resume_token", "rs/dst"]).trim(), token);
    let (code, _, err) = d.run("rzfs", &["mount", "rs/dst", dir.join("x").to_str().unwrap()]);
    assert!(code != 0 && err.contains("inconsistent"), "{err}");
    let (code, err) = recv_from(&d, &["-u", "rs/dst"], &full);
    assert!(code != 0 && err.contains("partially-complete state"), "a fresh stream is refused: {err}");
    let rest = dir.join("rest.zs");
    let (code, err) = send_to(&d, &["-t", &token], &rest);
    assert_eq!(code, 0, "send -t: {err}");
    let dump = zstream_dump(&rest);
    assert!(dump.contains("resume_object"), "the BEGIN payload names the resume point:\n{dump}");
    assert!(std::fs::metadata(&rest).unwrap().len() < bytes.len() as u64, "the rest only");
    let (code, err) = recv_from(&d, &["-s", "rs/dst"], &rest);
    assert_eq!(code, 0, "the resumed receive: {err}");
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "receive_resume_token", "rs/dst"]), "-\n");
    let dst = dir.join("dst");
    d.ok("rzfs", &["set", &format!("mountpoint={}", dst.display()), "rs/dst"]);
    assert_same(&at_a, &tree(&dst), "after the resumed full receive");
    let g = d.ok("rzfs", &["get", "-H", "-o", "value", "guid", "rs/src@a", "rs/dst@a"]);
    let g: Vec<&str> = g.lines().collect();
    assert_eq!(g[0], g[1]);

    // Incremental, cut short, resumed.
    write_files(&src, "g", 30, 50_000..400_000, &mut rng, &mut want);
    std::fs::remove_file(src.join("f3")).unwrap();
    d.ok("rzfs", &["snapshot", "rs/src@b"]);
    let at_b = tree(&src);
    let inc = dir.join("inc.zs");
    assert_eq!(send_to(&d, &["-i", "@a", "rs/src@b"], &inc).0, 0);
    let ib = std::fs::read(&inc).unwrap();
    std::fs::write(&cut, &ib[..ib.len() / 2]).unwrap();
    // The target is mounted and busy throughout: an open file and directory.
    let kept = std::fs::File::open(dst.join("f0")).unwrap();
    let cwd = std::fs::File::open(&dst).unwrap();
    let (code, err) = recv_from(&d, &["-s", "rs/dst"], &cut);
    assert!(code != 0 && err.contains("partially-complete state of 'rs/dst'"), "{err}");
    // As OpenZFS: the partial state is in the hidden clone rs/dst/%recv, rs/dst unchanged.
    assert_eq!(d.ok("rzfs", &["get", "-Hpo", "value", "inconsistent", "rs/dst/%recv"]), "1\n");
    assert_eq!(d.ok("rzfs", &["get", "-Hpo", "value", "inconsistent", "rs/dst"]), "0\n");
    let names = d.ok("rzfs", &["list", "-H", "-o", "name", "-r", "rs"]);
    assert!(!names.contains('%'), "hidden from walks: {names}");
    for args in [
        &["rename", "rs/dst/%recv", "rs/other"][..],
        &["promote", "rs/dst/%recv"],
        &["snapshot", "rs/dst/%recv@x"],
    ] {
        let (code, _, err) = d.run("rzfs", args);
        assert!(code != 0 && err.contains("invalid character '%'"), "{args:?}: {err}");
    }
    assert_same(&at_a, &tree(&dst), "the target while a partial incremental waits");
    let token =
        d.ok("rzfs", &["get", "-H", "-o", "value", "receive_resume_token", "rs/dst"]).trim().to_string();
    assert!(contains(&decode_token(&token), "fromguid"), "an incremental token names its source");
    let est = d.ok("rzfs", &["send", "-nvP", "-t", &token]);
    assert!(est.contains("size\t"), "{est}");
    assert_eq!(send_to(&d, &["-t", &token], &rest).0, 0);
    zstream_dump(&rest);
    // No -F: only a full stream resumed over an existing file system needs it.
    let (code, err) = recv_from(&d, &["-s", "rs/dst"], &rest);
    assert_eq!(code, 0, "the resumed incremental: {err}");
    assert_same(&at_b, &tree(&dst), "after the resumed incremental");
    let mut again = Vec::new();
    std::io::Read::read_to_end(&mut &kept, &mut again).unwrap();
    assert_eq!(again, at_a["f0"], "a file open across the swap reads on");
    assert!(cwd.metadata().unwrap().is_dir());
    drop((kept, cwd));
    assert!(d.run("rzfs", &["get", "name", "rs/dst/%recv"]).0 != 0, "the clone is gone");

    // A damaged stream (two bytes of a payload changed, as ZTS's mess_send_file does): the
    // damaged record is not applied, the partial state before it is kept, and the resumed
    // file system holds the snapshot's files exactly.
    let mut bad = bytes.clone();
    let at = bad.len() * 3 / 5;
    bad[at] ^= 0x5a;
    bad[at + 1] ^= 0xa5;
    std::fs::write(&cut, &bad).unwrap();
    let (code, err) = recv_from(&d, &["-s", "-u", "rs/flip"], &cut);
    assert!(code != 0 && err.contains("checksum mismatch") && err.contains("partially-complete"), "{err}");
    let token =
        d.ok("rzfs", &["get", "-H", "-o", "value", "receive_resume_token", "rs/flip"]).trim().to_string();
    assert!(token.starts_with("1-"), "a damaged stream leaves a token: {token}");
    assert_eq!(send_to(&d, &["-t", &token], &rest).0, 0);
    let (code, err) = recv_from(&d, &["-s", "rs/flip"], &rest);
    assert_eq!(code, 0, "the receive resumed after damage: {err}");
    let flipdir = dir.join("flip");
    d.ok("rzfs", &["set", &format!("mountpoint={}", flipdir.display()), "rs/flip"]);
    assert_same(&at_a, &tree(&flipdir), "after the receive resumed past the damage");

    // A record header made unreadable (its type overwritten, as a damaged byte can do
    // before any checksum covers it): the partial state is kept all the same (OpenZFS keeps
    // it once the stream has begun), and the resumed receive completes.
    let mut starts = Vec::new();
    let mut rd = send::stream::StreamReader::new(&bytes[..]);
    loop {
        let at = rd.offset();
        match rd.next() {
            Ok(Some((send::stream::Record::Write(_), _))) => starts.push(at as usize),
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    let mut bad = bytes.clone();
    let at = starts[starts.len() * 3 / 5];
    bad[at..at + 4].copy_from_slice(&0xdead_beefu32.to_le_bytes());
    std::fs::write(&cut, &bad).unwrap();
    let (code, err) = recv_from(&d, &["-s", "-u", "rs/hdr"], &cut);
    assert!(code != 0 && err.contains("unknown record type") && err.contains("partially-complete"), "{err}");
    let token =
        d.ok("rzfs", &["get", "-H", "-o", "value", "receive_resume_token", "rs/hdr"]).trim().to_string();
    assert!(token.starts_with("1-"), "a bad header leaves a token: {token}");
    assert_eq!(send_to(&d, &["-t", &token], &rest).0, 0);
    let (code, err) = recv_from(&d, &["-s", "rs/hdr"], &rest);
    assert_eq!(code, 0, "the receive resumed after a bad header: {err}");
    let hdrdir = dir.join("hdr");
    d.ok("rzfs", &["set", &format!("mountpoint={}", hdrdir.display()), "rs/hdr"]);
    assert_same(&at_a, &tree(&hdrdir), "after the receive resumed past the bad header");

    // -A: a partial state discarded (a full one: the file system goes).
    let (code, _) = recv_from(&d, &["-s", "-u", "rs/gone"], &cut);
    assert!(code != 0);
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (code, _) = recv_from(&d, &["-s", "-u", "rs/gone"], &cut);
    assert!(code != 0);
    d.ok("rzfs", &["receive", "-A", "rs/gone"]);
    assert!(d.run("rzfs", &["list", "rs/gone"]).0 != 0, "-A destroyed the partial file system");
    d.ok("rzpool", &["export", "rs"]);
    zdb_check(&dir, "rs");
}

/// `receive -F` of a full stream over an existing file system (OpenZFS receives it into
/// `FS/%recv` and swaps the two at the end): refused without -F, over snapshots and over
/// a clone; a stream that fails leaves the file system as it was; one that completes
/// replaces its files with the snapshot's and keeps its children; an incremental follows.
/// zdb and the DSL space recount check the pool.
#[test]
fn receive_force_replaces_file_system() {
    if skip_without_fuse_zdb("receive_force_replaces_file_system") {
        return;
    }
    let dir = scratch("recv-force");
    let d = Daemon::new("recv-force");
    let (_devs, _mnt) = create(&d, &dir, "rf", &SINGLE, 512 << 20);
    // The received file systems are read to compare them: with atime on, reading one
    // modifies it and a later incremental receive without -F is refused, as in
    // OpenZFS (backup targets run with atime=off or readonly=on).
    d.ok("rzfs", &["set", "atime=off", "rf"]);
    let (src, dst) = (dir.join("src"), dir.join("dst"));
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", src.display()), "rf/src"]);
    let mut rng = Rng::new(61);
    let mut want = BTreeMap::new();
    write_files(&src, "s", 25, 1..300_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "rf/src@a"]);
    let at_a = tree(&src);
    let full = dir.join("full.zs");
    assert_eq!(send_to(&d, &["rf/src@a"], &full).0, 0);

    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", dst.display()), "rf/dst"]);
    let mut old = BTreeMap::new();
    write_files(&dst, "old", 15, 1..200_000, &mut rng, &mut old);
    // (Mounted outside: a mountpoint inside would be made again in the received contents,
    // a change that an incremental then needs -F for, as with OpenZFS.)
    let kid = dir.join("kid");
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", kid.display()), "rf/dst/kid"]);
    std::fs::write(kid.join("k"), b"the child's file").unwrap();
    let before = tree(&dst);
    let (code, err) = recv_from(&d, &["rf/dst"], &full);
    assert!(code != 0 && err.contains("must specify -F"), "{err}");
    for flag in ["-d", "-e"] {
        let (code, err) = recv_from(&d, &[flag, "rf/nosuch"], &full);
        assert!(code != 0 && err.contains("specified fs (rf/nosuch) does not exist"), "{flag}: {err}");
    }
    // A stream that breaks off: the file system keeps its files, no %recv is left.
    let bytes = std::fs::read(&full).unwrap();
    let cut = dir.join("cut.zs");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (code, err) = recv_from(&d, &["-F", "rf/dst"], &cut);
    assert!(code != 0 && err.contains("incomplete"), "{err}");
    assert_same(&before, &tree(&dst), "after a failed receive -F");
    let names = d.ok("rzfs", &["list", "-H", "-r", "-o", "name", "rf/dst"]);
    assert_eq!(names, "rf/dst\nrf/dst/kid\n");

    let (code, err) = recv_from(&d, &["-F", "rf/dst"], &full);
    assert_eq!(code, 0, "receive -F over a file system without snapshots: {err}");
    assert_eq!(std::fs::read(kid.join("k")).unwrap(), b"the child's file", "the child stays");
    assert_same(&at_a, &tree(&dst), "after receive -F");
    let g = d.ok("rzfs", &["get", "-H", "-o", "value", "guid", "rf/src@a", "rf/dst@a"]);
    let g: Vec<&str> = g.lines().collect();
    assert_eq!(g[0], g[1], "the received snapshot has the sender's guid");
    let names = d.ok("rzfs", &["list", "-H", "-r", "-t", "all", "-o", "name", "rf/dst"]);
    assert_eq!(names, "rf/dst\nrf/dst@a\nrf/dst/kid\n");

    // Resumable (-s): the partial state is kept in FS/%recv, FS keeps its files, its
    // token resumes the stream, which then needs -F again.
    let d4 = dir.join("d4");
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", d4.display()), "rf/d4"]);
    std::fs::write(d4.join("mine"), b"kept until the end").unwrap();
    let (code, err) = recv_from(&d, &["-s", "-F", "rf/d4"], &cut);
    assert!(code != 0 && err.contains("partially-complete"), "{err}");
    assert_eq!(std::fs::read(d4.join("mine")).unwrap(), b"kept until the end");
    let token =
        d.ok("rzfs", &["get", "-H", "-o", "value", "receive_resume_token", "rf/d4"]).trim().to_string();
    assert!(token.starts_with("1-"), "{token}");
    let rest = dir.join("rest.zs");
    assert_eq!(send_to(&d, &["-t", &token], &rest).0, 0);
    let (code, err) = recv_from(&d, &["-s", "rf/d4"], &rest);
    assert!(code != 0 && err.contains("must specify -F"), "{err}");
    let (code, err) = recv_from(&d, &["-s", "-F", "rf/d4"], &rest);
    assert_eq!(code, 0, "{err}");
    assert_same(&at_a, &tree(&d4), "after the resumed receive -F");
    assert_eq!(d.ok("rzfs", &["list", "-H", "-r", "-o", "name", "rf/d4"]), "rf/d4\n");
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "receive_resume_token", "rf/d4"]), "-\n");

    // Refused over a clone (and below, over snapshots), changing nothing.
    d.ok("rzfs", &["clone", "rf/src@a", "rf/cl"]);
    let (code, err) = recv_from(&d, &["-F", "rf/cl"], &full);
    assert!(code != 0 && err.contains("is a clone"), "{err}");

    // An incremental follows the received snapshot.
    write_files(&src, "t", 10, 1..200_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "rf/src@b"]);
    let inc = dir.join("inc.zs");
    assert_eq!(send_to(&d, &["-i", "@a", "rf/src@b"], &inc).0, 0);
    let (code, err) = recv_from(&d, &["rf/dst"], &inc);
    assert_eq!(code, 0, "the incremental after receive -F: {err}");
    assert_same(&tree(&src), &tree(&dst), "after the incremental");

    // An incremental -F over a snapshot and changes made since the source: nothing goes
    // before the stream has arrived whole (it is received into a clone of @b and swapped in),
    // so a stream that breaks off leaves rf/dst, its snapshot and its changes as they were.
    let reference = dir.join("ref");
    let r_args = ["-o", &format!("mountpoint={}", reference.display())];
    let (code, err) = recv_from(&d, &[r_args[0], r_args[1], "rf/ref"], &full);
    assert_eq!(code, 0, "{err}");
    assert_eq!(recv_from(&d, &["rf/ref"], &inc).0, 0);
    write_files(&src, "u", 8, 1..250_000, &mut rng, &mut want);
    std::fs::remove_file(src.join("s3")).unwrap();
    d.ok("rzfs", &["snapshot", "rf/src@c"]);
    let inc_c = dir.join("inc-c.zs");
    assert_eq!(send_to(&d, &["-i", "@b", "rf/src@c"], &inc_c).0, 0);
    let mut local = BTreeMap::new();
    write_files(&dst, "local", 6, 1..150_000, &mut rng, &mut local);
    std::fs::remove_file(dst.join("s1")).unwrap();
    d.ok("rzfs", &["snapshot", "rf/dst@local"]);
    write_files(&dst, "later", 4, 1..150_000, &mut rng, &mut local);
    std::fs::remove_file(dst.join("s2")).unwrap();
    let changed = tree(&dst);
    let snaps =
        |fs: &str| d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name", "-s", "createtxg", "-r", fs]);
    let bytes = std::fs::read(&inc_c).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let (code, err) = recv_from(&d, &["rf/dst"], &inc_c);
    assert!(code != 0 && err.contains("destination rf/dst has snapshots"), "{err}");
    let (code, err) = recv_from(&d, &["-F", "rf/dst"], &cut);
    assert!(code != 0 && err.contains("incomplete"), "{err}");
    assert_same(&changed, &tree(&dst), "after a failed incremental receive -F");
    assert_eq!(snaps("rf/dst"), "rf/dst@a\nrf/dst@b\nrf/dst@local\n");
    assert_eq!(d.ok("rzfs", &["list", "-H", "-r", "-o", "name", "rf/dst"]), "rf/dst\nrf/dst/kid\n");
    let (code, err) = recv_from(&d, &["-F", "rf/dst"], &inc_c);
    assert_eq!(code, 0, "incremental receive -F over a snapshot and changes: {err}");
    assert_same(&tree(&src), &tree(&dst), "after the incremental receive -F");
    assert_eq!(snaps("rf/dst"), "rf/dst@a\nrf/dst@b\nrf/dst@c\n");
    assert_eq!(std::fs::read(kid.join("k")).unwrap(), b"the child's file", "the child stays");
    // Its space is what the same history received plainly has (the clone swap moves the
    // deadlists and the snapshot's unique space with the contents).
    assert_eq!(recv_from(&d, &["rf/ref"], &inc_c).0, 0);
    let space = |fs: &str| {
        d.ok("rzfs", &["get", "-Hp", "-o", "value", "referenced,usedbydataset,usedbysnapshots,written", fs])
    };
    assert_eq!(space("rf/dst"), space("rf/ref"), "referenced, usedbydataset, usedbysnapshots, written");
    let snap_space = |s: &str| d.ok("rzfs", &["get", "-Hp", "-o", "value", "used,referenced", s]);
    for s in ["b", "c"] {
        assert_eq!(snap_space(&format!("rf/dst@{s}")), snap_space(&format!("rf/ref@{s}")), "@{s}");
    }
    d.ok("rzfs", &["destroy", "rf/dst@c"]);

    let full_b = dir.join("full-b.zs");
    assert_eq!(send_to(&d, &["rf/src@b"], &full_b).0, 0);
    d.ok("rzfs", &["destroy", "rf/dst@b"]);
    let (code, err) = recv_from(&d, &["-F", "rf/dst"], &full_b);
    assert!(code != 0 && err.contains("destination has snapshots (eg. rf/dst@a)"), "{err}");
    d.ok("rzpool", &["export", "rf"]);
    zdb_check(&dir, "rf");
}

/// Corrective receive (`zfs receive -c FS@SNAP`): blocks of a snapshot that every copy of
/// has lost are rewritten in place from a stream of that snapshot — from a plain stream
/// (the data compressed again as each pointer says), from a compressed one (its payload
/// as stored) and from OpenZFS's own compressed send of it (`zdb -B`). Reads of the lost blocks fail and put the files in `status -v`'s list; after
/// the heal the files read back whole, `status -v` no longer lists them, a scrub finds
/// nothing and zdb -bcc verifies every block. Healthy blocks are left alone; a stream of
/// another snapshot, a missing snapshot and the flags libzfs refuses with -c are refused.
#[test]
fn corrective_receive_heals() {
    if skip_without_fuse_zdb("corrective_receive_heals") {
        return;
    }
    let mut rng = Rng::new(29);
    let dir = scratch("heal");
    let d = Daemon::new("heal");
    // A mirror: both sides lose the blocks, and the heal writes both.
    let (devs, mnt) = create(&d, &dir, "cr", &MIRROR2, 256 << 20);
    d.ok("rzfs", &["set", "compression=lz4", "cr"]);
    // Compressible (stored lz4) and incompressible (stored as is).
    let text: Vec<u8> = (0..40_000)
        .flat_map(|i| format!("line {i} of the victim {}\n", rng.below(10)).into_bytes())
        .collect();
    let raw = rng.data(1 << 20);
    std::fs::write(mnt.join("victim"), &text).unwrap();
    std::fs::write(mnt.join("victim2"), &raw).unwrap();
    std::fs::write(mnt.join("bystander"), rng.data(300_000)).unwrap();
    let ino = |n: &str| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(mnt.join(n)).unwrap().ino()
    };
    let objs = [ino("victim"), ino("victim2")];
    d.ok("rzfs", &["snapshot", "cr@s"]);
    let plain = dir.join("plain.zs");
    let compressed = dir.join("compressed.zs");
    assert_eq!(send_to(&d, &["cr@s"], &plain).0, 0);
    assert_eq!(send_to(&d, &["-c", "cr@s"], &compressed).0, 0);
    // Nothing to heal in a healthy pool.
    let (code, out, err) = recv_output(&d, &["-c", "cr@s"], &plain);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("healed 0 block(s)"), "{out}");
    // OpenZFS's own compressed send of the snapshot (zdb -B with flag c), for a third round.
    d.ok("rzpool", &["export", "cr"]);
    let openzfs = dir.join("openzfs.zs");
    openzfs_send(&dir, "cr@s", "c", &openzfs);
    import(&d, &dir, "cr", &mnt, false);

    for stream in [&plain, &compressed, &openzfs] {
        d.ok("rzpool", &["export", "cr"]);
        for &obj in &objs {
            let (offset, asize) = first_l0_dva(&dir, "cr/", obj);
            for dev in &devs {
                noise(std::path::Path::new(dev), (4 << 20) + offset, asize as usize, &mut rng);
            }
        }
        import(&d, &dir, "cr", &mnt, false);
        assert!(std::fs::read(mnt.join("victim")).is_err(), "the lost block must not read");
        assert!(std::fs::read(mnt.join("victim2")).is_err(), "the lost block must not read");
        // The failed reads are in the pool's error list, as OpenZFS logs every one.
        let st = d.ok("rzpool", &["status", "-v", "cr"]);
        assert!(st.contains("/victim") && st.contains("/victim2"), "reads' errors listed: {st}");
        d.ok("rzpool", &["scrub", "-w", "cr"]);
        let st = d.ok("rzpool", &["status", "-v", "cr"]);
        assert!(st.contains("/victim") && st.contains("with 2 errors"), "{st}");

        // Refusals, before anything is written.
        d.ok("rzfs", &["snapshot", "cr@other"]);
        let (code, err) = recv_from(&d, &["-c", "cr@other"], stream);
        assert!(
            code != 0 && err.contains("local snapshot doesn't match the snapshot in the provided stream"),
            "{err}"
        );
        let (code, err) = recv_from(&d, &["-c", "cr@missing"], stream);
        assert!(code != 0 && err.contains("must specify an existing snapshot"), "{err}");
        let (code, err) = recv_from(&d, &["-c", "-F", "cr@s"], stream);
        assert!(code != 0 && err.contains("can not be used when combined with this flag"), "{err}");
        d.ok("rzfs", &["destroy", "cr@other"]);

        let (code, out, err) = recv_output(&d, &["-c", "cr@s"], stream);
        assert_eq!(code, 0, "{}: {err}", stream.display());
        assert!(out.contains("healed 2 block(s)"), "{}: {out}", stream.display());
        assert_eq!(std::fs::read(mnt.join("victim")).unwrap(), text);
        assert_eq!(std::fs::read(mnt.join("victim2")).unwrap(), raw);
        let st = d.ok("rzpool", &["status", "-v", "cr"]);
        assert!(!st.contains("/victim"), "healed errors must go: {st}");
        d.ok("rzpool", &["scrub", "-w", "cr"]);
        let st = d.ok("rzpool", &["status", "cr"]);
        assert!(st.contains("repaired 0B") && st.contains("with 0 errors"), "{st}");
        d.ok("rzpool", &["export", "cr"]);
        zdb_check(&dir, "cr");
        import(&d, &dir, "cr", &mnt, false);
    }
    d.ok("rzpool", &["export", "cr"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a replication receive mounts, as libzfs: the package's top file system and, below
/// it, those whose mountpoint is default or inherited; a file system whose mountpoint came
/// in the stream (the sender's path) stays unmounted with everything below it, so it cannot
/// cover the sender's own mounts. `zfs mount` mounts it when asked.
#[test]
fn replication_receive_mounts_as_libzfs() {
    if skip_without_fuse_zdb("replication_receive_mounts_as_libzfs") {
        return;
    }
    let dir = scratch("recv-mounts");
    let d = Daemon::new("recv-mounts");
    let (_devs, mnt) = create(&d, &dir, "rm", &SINGLE, 256 << 20);
    let own = dir.join("own-mnt");
    d.ok("rzfs", &["create", "rm/src"]);
    d.ok("rzfs", &["create", "rm/src/a"]);
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", own.display()), "rm/src/b"]);
    d.ok("rzfs", &["create", "rm/src/b/c"]);
    std::fs::write(own.join("c").join("file"), b"below a local mountpoint").unwrap();
    d.ok("rzfs", &["snapshot", "-r", "rm/src@1"]);
    let full = dir.join("full.zs");
    assert_eq!(send_to(&d, &["-R", "rm/src@1"], &full).0, 0);
    let (code, err) = recv_from(&d, &["rm/dst"], &full);
    assert_eq!(code, 0, "{err}");
    let mounted = |n: &str| d.ok("rzfs", &["get", "-H", "-o", "value", "mounted", n]).trim().to_string();
    assert_eq!(mounted("rm/dst"), "yes");
    assert_eq!(mounted("rm/dst/a"), "yes");
    assert_eq!(mounted("rm/dst/b"), "no", "its mountpoint was received");
    assert_eq!(mounted("rm/dst/b/c"), "no", "below one with a received mountpoint");
    assert!(mnt.join("dst").join("a").is_dir());
    // The sender's mounts are untouched and still hold its files.
    assert_eq!(std::fs::read(own.join("c").join("file")).unwrap(), b"below a local mountpoint");
    assert_eq!(mounted("rm/src/b/c"), "yes");
    // `zfs mount` mounts one when asked; a new mountpoint mounts the rest of the tree there
    // (as libzfs's changelist does for a mountpoint change).
    d.ok("rzfs", &["unmount", "rm/src/b"]);
    d.ok("rzfs", &["mount", "rm/dst/b"]);
    assert_eq!(mounted("rm/dst/b"), "yes");
    d.ok("rzfs", &["unmount", "rm/dst/b"]);
    d.ok("rzfs", &["mount", "rm/src/b"]);
    let moved = dir.join("moved");
    d.ok("rzfs", &["set", &format!("mountpoint={}", moved.display()), "rm/dst/b"]);
    assert_eq!(mounted("rm/dst/b/c"), "yes");
    assert_eq!(std::fs::read(moved.join("c").join("file")).unwrap(), b"below a local mountpoint");
    d.ok("rzpool", &["export", "rm"]);
    zdb_check(&dir, "rm");
}

/// Received properties (OpenZFS's `P$recvd`): a replication stream's properties are
/// stored as received (source `received`, `get -o received`), local values override them,
/// `inherit` hides them and `inherit -S` brings them back; snapshots' own properties arrive
/// too; an incremental replaces the received set. `receive -o` sets locally, `-x` hides a
/// received value; bad `-o`/`-x` arguments are refused before the stream is read.
#[test]
fn received_properties() {
    if skip_without_fuse_zdb("received_properties") {
        return;
    }
    let dir = scratch("recv-props");
    let d = Daemon::new("recv-props");
    let (_devs, mnt) = create(&d, &dir, "rp", &SINGLE, 256 << 20);
    let get = |what: &str, name: &str| d.ok("rzfs", &["get", "-H", "-o", "value,source", what, name]);
    d.ok("rzfs", &["create", "-o", "compression=gzip", "-o", "my:prop=a", "rp/src"]);
    d.ok("rzfs", &["create", "rp/src/kid"]);
    d.ok("rzfs", &["snapshot", "-r", "rp/src@1"]);
    d.ok("rzfs", &["set", "my:snap=s", "rp/src@1"]);
    let full = dir.join("full.zs");
    assert_eq!(send_to(&d, &["-R", "rp/src@1"], &full).0, 0);
    let (code, err) = recv_from(&d, &["rp/dst"], &full);
    assert_eq!(code, 0, "{err}");
    assert_eq!(get("compression", "rp/dst"), "gzip\treceived\n");
    assert_eq!(get("my:prop", "rp/dst"), "a\treceived\n");
    assert_eq!(get("compression", "rp/dst/kid"), "gzip\tinherited from rp/dst\n");
    assert_eq!(get("my:snap", "rp/dst@1"), "s\treceived\n");
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "received", "compression", "rp/dst"]), "gzip\n");
    assert_eq!(
        d.ok("rzfs", &["get", "-H", "-s", "received", "-o", "property", "compression", "rp/dst"]),
        "compression\n"
    );
    // Local beats received; inherit hides it; inherit -S brings it back.
    d.ok("rzfs", &["set", "compression=lz4", "rp/dst"]);
    assert_eq!(get("compression", "rp/dst"), "lz4\tlocal\n");
    d.ok("rzfs", &["inherit", "compression", "rp/dst"]);
    assert!(get("compression", "rp/dst").ends_with("\tdefault\n"), "{}", get("compression", "rp/dst"));
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "received", "compression", "rp/dst"]), "gzip\n");
    d.ok("rzfs", &["inherit", "-S", "compression", "rp/dst"]);
    assert_eq!(get("compression", "rp/dst"), "gzip\treceived\n");
    // inherit -r: every descendant.
    d.ok("rzfs", &["set", "my:x=1", "rp/dst", "rp/dst/kid"]);
    d.ok("rzfs", &["inherit", "-r", "my:x", "rp/dst"]);
    assert_eq!(get("my:x", "rp/dst/kid"), "-\t-\n");

    // An incremental replaces the received set.
    d.ok("rzfs", &["inherit", "my:prop", "rp/src"]);
    d.ok("rzfs", &["set", "my:new=n", "rp/src"]);
    d.ok("rzfs", &["snapshot", "-r", "rp/src@2"]);
    let inc = dir.join("inc.zs");
    assert_eq!(send_to(&d, &["-R", "-I", "@1", "rp/src@2"], &inc).0, 0);
    let (code, err) = recv_from(&d, &["-F", "rp/dst"], &inc);
    assert_eq!(code, 0, "{err}");
    assert_eq!(get("my:prop", "rp/dst"), "-\t-\n");
    assert_eq!(get("my:new", "rp/dst"), "n\treceived\n");
    // A package overlapping what was received before: the snapshots already there (same
    // guid) are passed over, the new ones received.
    d.ok("rzfs", &["snapshot", "-r", "rp/src@3"]);
    assert_eq!(send_to(&d, &["-R", "-I", "@1", "rp/src@3"], &inc).0, 0);
    let (code, err) = recv_from(&d, &["-F", "rp/dst"], &inc);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name", "-r", "rp/dst"]),
        "rp/dst@1\nrp/dst@2\nrp/dst@3\nrp/dst/kid@1\nrp/dst/kid@2\nrp/dst/kid@3\n"
    );

    // -o and -x.
    let (code, err) =
        recv_from(&d, &["-o", "atime=off", "-x", "compression", "-x", "my:prop", "rp/dst2"], &full);
    assert_eq!(code, 0, "{err}");
    assert_eq!(get("atime", "rp/dst2"), "off\tlocal\n");
    assert_eq!(get("atime", "rp/dst2/kid"), "off\tinherited from rp/dst2\n");
    assert!(get("compression", "rp/dst2").ends_with("\tdefault\n"), "{}", get("compression", "rp/dst2"));
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "received", "compression", "rp/dst2"]), "gzip\n");
    assert_eq!(get("my:prop", "rp/dst2"), "-\t-\n");
    for (args, want) in [
        (vec!["-o", "atime"], "missing '='"),
        (vec!["-x", "atime=off"], "invalid character '='"),
        (vec!["-o", "atime=off", "-x", "atime"], "specified multiple times"),
        (vec!["-x", "atime", "-x", "atime"], "specified multiple times"),
        (vec!["-x", "version"], "invalid property 'version'"),
        (vec!["-x", "nosuch"], "invalid property 'nosuch'"),
        (vec!["-o", "atime=maybe"], "atime"),
    ] {
        let mut a = args.clone();
        a.push("rp/dst3");
        let (code, err) = recv_from(&d, &a, &full);
        assert!(code != 0 && err.contains(want), "{args:?}: {err}");
    }
    assert!(d.run("rzfs", &["list", "rp/dst3"]).0 != 0, "a refused receive creates nothing");
    // A stream is never written to or read from a terminal (zfs_main's isatty checks).
    if std::path::Path::new("/usr/bin/script").exists() {
        for (cmd, want) in
            [("send rp/src@1", "written to a terminal"), ("receive rp/dst4", "read from a terminal")]
        {
            let o = std::process::Command::new("/usr/bin/script")
                .args(["-qec", &format!("{} {cmd}", env!("CARGO_BIN_EXE_rzfs")), "/dev/null"])
                .env("RZFS_SOCKET", &d.sock)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(!o.status.success() && out.contains(want), "{cmd}: {out}");
        }
        assert!(d.run("rzfs", &["list", "rp/dst4"]).0 != 0);
    }

    // A failed incremental leaves the file system as it was: its received properties
    // back, mounted, its files as at the source snapshot (ZTS zfs_receive_014_pos).
    d.ok("rzfs", &["create", "-o", "compression=gzip-1", "-o", "my:u=v", "rp/p1"]);
    d.ok("rzfs", &["snapshot", "rp/p1@1"]);
    let p1 = dir.join("p1.zs");
    assert_eq!(send_to(&d, &["-p", "rp/p1@1"], &p1).0, 0);
    let (code, err) = recv_from(&d, &["rp/p2"], &p1);
    assert_eq!(code, 0, "{err}");
    d.ok("rzfs", &["set", "compression=gzip-2", "rp/p1"]);
    d.ok("rzfs", &["inherit", "my:u", "rp/p1"]);
    std::fs::write(mnt.join("p1/big"), vec![9u8; 3 << 20]).unwrap();
    d.ok("rzfs", &["snapshot", "rp/p1@2"]);
    let inc = dir.join("p1i.zs");
    assert_eq!(send_to(&d, &["-p", "-i", "@1", "rp/p1@2"], &inc).0, 0);
    let bytes = std::fs::read(&inc).unwrap();
    let cut = dir.join("p1c.zs");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (code, _) = recv_from(&d, &["-F", "rp/p2"], &cut);
    assert!(code != 0);
    assert_eq!(get("compression", "rp/p2"), "gzip-1\treceived\n");
    assert_eq!(get("my:u", "rp/p2"), "v\treceived\n");
    assert!(d.ok("rzfs", &["mount"]).contains("rp/p2\t"), "still mounted");
    assert!(!mnt.join("p2/big").exists());
    let (code, err) = recv_from(&d, &["-F", "rp/p2"], &inc);
    assert_eq!(code, 0, "{err}");
    assert_eq!(get("compression", "rp/p2"), "gzip-2\treceived\n");
    assert_eq!(get("my:u", "rp/p2"), "-\t-\n");
    assert_eq!(std::fs::read(mnt.join("p2/big")).unwrap(), vec![9u8; 3 << 20]);

    // send -b: only what was received travels on, whatever overrides it locally; -w of a
    // dataset that is not encrypted is -Lec.
    let (code, err) = recv_from(&d, &["rp/bk"], &full);
    assert_eq!(code, 0, "{err}");
    for (p, n) in [("compression=lz4", "rp/bk"), ("exec=off", "rp/bk"), ("my:prop=new", "rp/bk")] {
        d.ok("rzfs", &["set", p, n]);
    }
    d.ok("rzfs", &["set", "my:newprop=x", "rp/bk"]);
    d.ok("rzfs", &["set", "my:snap=new", "rp/bk@1"]);
    d.ok("rzfs", &["set", "my:newsnap=y", "rp/bk@1"]);
    let b = dir.join("b.zs");
    let (code, err) = send_to(&d, &["-bw", "rp/bk@1"], &b);
    assert_eq!(code, 0, "{err}");
    let (code, err) = recv_from(&d, &["rp/rs"], &b);
    assert_eq!(code, 0, "{err}");
    assert_eq!(get("compression", "rp/rs"), "gzip\treceived\n");
    assert_eq!(get("my:prop", "rp/rs"), "a\treceived\n");
    assert!(get("exec", "rp/rs").ends_with("\tdefault\n"), "{}", get("exec", "rp/rs"));
    assert_eq!(get("my:newprop", "rp/rs"), "-\t-\n");
    assert_eq!(get("my:snap", "rp/rs@1"), "s\treceived\n");
    assert_eq!(get("my:newsnap", "rp/rs@1"), "-\t-\n");
    for bad in ["rp/bk", "rp/bk#nope"] {
        assert!(send_to(&d, &["-b", bad], &b).0 != 0, "send -b {bad}");
    }
    d.ok("rzfs", &["destroy", "-r", "rp/rs"]);
    d.ok("rzfs", &["destroy", "-r", "rp/bk"]);

    // A received refquota is set after each snapshot's data (OpenZFS's delayed
    // properties): an earlier snapshot referencing more than it still arrives.
    d.ok("rzfs", &["create", "rp/rq"]);
    std::fs::write(mnt.join("rq/f1"), vec![1u8; 3 << 20]).unwrap();
    std::fs::write(mnt.join("rq/f2"), vec![2u8; 3 << 20]).unwrap();
    d.ok("rzfs", &["snapshot", "rp/rq@1"]);
    std::fs::remove_file(mnt.join("rq/f2")).unwrap();
    d.ok("rzpool", &["sync", "rp"]);
    d.ok("rzfs", &["set", "refquota=5M", "rp/rq"]);
    d.ok("rzfs", &["snapshot", "rp/rq@2"]);
    let rq = dir.join("rq.zs");
    assert_eq!(send_to(&d, &["-R", "rp/rq@2"], &rq).0, 0);
    let (code, err) = recv_from(&d, &["rp/rq2"], &rq);
    assert_eq!(code, 0, "{err}");
    assert_eq!(get("refquota", "rp/rq2"), "5M\treceived\n");
    assert_eq!(std::fs::read(mnt.join("rq2/f1")).unwrap(), vec![1u8; 3 << 20]);
    assert_eq!(
        d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name", "rp/rq2"]),
        "rp/rq2@1\nrp/rq2@2\n"
    );

    // A stream whose blocks need a pool feature (send -c of lz4 data) is refused by a pool
    // without it, until the feature is enabled.
    d.ok("rzfs", &["create", "-o", "compression=lz4", "rp/lz"]);
    d.ok("rzfs", &["snapshot", "rp/lz@1"]);
    let c = dir.join("c.zs");
    assert_eq!(send_to(&d, &["-c", "rp/lz@1"], &c).0, 0);
    let bare = dir.join("bare");
    std::fs::File::create(&bare).unwrap().set_len(128 << 20).unwrap();
    d.ok("rzpool", &["create", "-d", "-m", "none", "bare", bare.to_str().unwrap()]);
    let (code, err) = recv_from(&d, &["bare/lz"], &c);
    assert!(code != 0 && err.contains("feature lz4_compress"), "{err}");
    d.ok("rzpool", &["set", "feature@lz4_compress=enabled", "bare"]);
    let (code, err) = recv_from(&d, &["bare/lz"], &c);
    assert_eq!(code, 0, "{err}");
    d.ok("rzpool", &["export", "bare"]);
    d.ok("rzpool", &["export", "rp"]);
    zdb_check(&dir, "rp");
}

/// `zfs send -R`: a tree of file systems with properties and snapshots, full and then
/// incremental (`-I`, `-i`), received into another pool as OpenZFS places it (below the
/// target as below the package's top file system); a descendant created after the
/// snapshot is left out, one created later comes in full with the incremental package.
/// `zstream dump` checks the streams, zdb and the space recount both pools.
#[test]
fn replication_streams() {
    if skip_without_fuse_zdb("replication_streams") {
        return;
    }
    let dir = scratch("replicate");
    let dir2 = scratch("replicate-b");
    let d = Daemon::new("replicate");
    let (_devs, mnt) = create(&d, &dir, "rp", &SINGLE, 256 << 20);
    let (_devs2, mnt2) = create(&d, &dir2, "rq", &SINGLE, 256 << 20);
    let mut rng = Rng::new(21);
    d.ok("rzfs", &["create", "-o", "compression=lz4", "rp/a"]);
    d.ok("rzfs", &["create", "-o", "com.example:x=1", "rp/a/b"]);
    d.ok("rzfs", &["create", "rp/a/b/c"]);
    for fs in ["a", "a/b", "a/b/c"] {
        write_files(&mnt.join(fs), "f", 5, 1..150_000, &mut rng, &mut BTreeMap::new());
    }
    d.ok("rzfs", &["snapshot", "-r", "rp/a@s1"]);
    // A clone inside the tree: sent from its origin, received as a clone of the copy's.
    d.ok("rzfs", &["clone", "rp/a/b@s1", "rp/a/k"]);
    std::fs::write(mnt.join("a/k/f4"), b"the clone's own").unwrap();
    std::fs::write(mnt.join("a/b/f0"), b"changed after s1").unwrap();
    std::fs::remove_file(mnt.join("a/b/c/f1")).unwrap();
    d.ok("rzfs", &["snapshot", "-r", "rp/a@s2"]);
    // Created after @s2: not part of a stream up to @s2.
    d.ok("rzfs", &["create", "rp/a/late"]);
    std::fs::write(mnt.join("a/late/x"), b"late").unwrap();

    let est = d.ok("rzfs", &["send", "-R", "-nP", "rp/a@s2"]);
    for line in ["full\trp/a@s1\t", "incremental\ts1\trp/a@s2\t", "full\trp/a/b/c@s1\t"] {
        assert!(est.contains(line), "{line:?} missing from:\n{est}");
    }
    assert!(!est.contains("late"), "{est}");
    let full = dir.join("full.zs");
    let (code, err) = send_to(&d, &["-R", "rp/a@s2"], &full);
    assert_eq!(code, 0, "send -R: {err}");
    let dump = zstream_dump(&full);
    assert!(dump.contains("rp/a/b/c@s2") && dump.contains("com.example:x"), "{dump}");
    let (code, err) = recv_from(&d, &["rq/copy"], &full);
    assert_eq!(code, 0, "receive: {err}");
    let snaps =
        d.ok("rzfs", &["list", "-H", "-r", "-t", "snapshot", "-o", "name,guid", "-s", "name", "rq/copy"]);
    let src_snaps =
        d.ok("rzfs", &["list", "-H", "-r", "-t", "snapshot", "-o", "name,guid", "-s", "name", "rp/a"]);
    assert_eq!(snaps.replace("rq/copy", "rp/a"), src_snaps, "snapshots and guids");
    // Each file system's own files (its children are mounted below it: left out).
    let own = |root: &std::path::Path| {
        let mut t = tree(root);
        t.retain(|k, _| {
            !["b", "c", "late"].iter().any(|c| k == &format!("{c}/") || k.starts_with(&format!("{c}/")))
        });
        t
    };
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "origin", "rq/copy/k"]), "rq/copy/b@s1\n");
    for fs in ["", "/b", "/b/c", "/k"] {
        let a = own(&mnt.join(format!("a{fs}")));
        let b = own(&mnt2.join(format!("copy{fs}")));
        assert_same(&a, &b, &format!("rq/copy{fs} after the full package"));
    }
    assert_eq!(
        d.ok("rzfs", &["get", "-H", "-o", "value,source", "compression", "rq/copy"]),
        "lz4\treceived\n"
    );
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "com.example:x", "rq/copy/b"]), "1\n");
    assert!(d.run("rzfs", &["list", "rq/copy/late"]).0 != 0, "rp/a/late has no @s2");

    // Incremental: changes everywhere, and rp/a/late (which has no @s2) comes in full.
    std::fs::write(mnt.join("a/f2"), b"changed after s2").unwrap();
    write_files(&mnt.join("a/b/c"), "g", 3, 1..100_000, &mut rng, &mut BTreeMap::new());
    d.ok("rzfs", &["snapshot", "-r", "rp/a@s3"]);
    std::fs::write(mnt.join("a/b/f3"), b"changed after s3").unwrap();
    d.ok("rzfs", &["snapshot", "-r", "rp/a@s4"]);
    let inc = dir.join("inc.zs");
    let (code, err) = send_to(&d, &["-R", "-I", "@s2", "rp/a@s4"], &inc);
    assert_eq!(code, 0, "send -R -I: {err}");
    zstream_dump(&inc);
    let (code, err) = recv_from(&d, &["-F", "rq/copy"], &inc);
    assert_eq!(code, 0, "receive of the incremental package: {err}");
    for fs in ["", "/b", "/b/c", "/k", "/late"] {
        assert_same(
            &own(&mnt.join(format!("a{fs}"))),
            &own(&mnt2.join(format!("copy{fs}"))),
            &format!("rq/copy{fs} after the incremental package"),
        );
    }
    let snaps =
        d.ok("rzfs", &["list", "-H", "-r", "-t", "snapshot", "-o", "name,guid", "-s", "name", "rq/copy"]);
    let src_snaps =
        d.ok("rzfs", &["list", "-H", "-r", "-t", "snapshot", "-o", "name,guid", "-s", "name", "rp/a"]);
    assert_eq!(snaps.replace("rq/copy", "rp/a"), src_snaps, "snapshots and guids after -I");
    // A truncated package fails; the tree is mounted again as it was.
    d.ok("rzfs", &["snapshot", "-r", "rp/a@s4b"]);
    let inc2 = dir.join("inc2.zs");
    let (code, err) = send_to(&d, &["-R", "-i", "@s4", "rp/a@s4b"], &inc2);
    assert_eq!(code, 0, "send -R -i: {err}");
    // From a snapshot to itself: libzfs's warning (ZTS rsend_016_neg greps for it).
    let (code, err) = send_to(&d, &["-R", "-i", "s4b", "rp/a@s4b"], &dir.join("none.zs"));
    assert!(code != 0 && err.contains("WARNING: could not send rp/a@s4b:"), "{err}");
    let cut = dir.join("cut.zs");
    let bytes = std::fs::read(&inc2).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() - 400]).unwrap();
    let (code, err) = recv_from(&d, &["-F", "rq/copy"], &cut);
    assert!(code != 0 && !err.contains("exists"), "a truncated package is refused at the cut: {err}");
    for fs in ["", "/b", "/b/c", "/k", "/late"] {
        assert_same(
            &own(&mnt.join(format!("a{fs}"))),
            &own(&mnt2.join(format!("copy{fs}"))),
            &format!("rq/copy{fs} after a truncated package"),
        );
    }
    // Rolling back a parent whose children are mounted inside it keeps them reachable.
    std::fs::write(mnt2.join("copy/extra"), b"to be rolled back").unwrap();
    d.ok("rzfs", &["rollback", "-r", "rq/copy@s4"]);
    assert!(!mnt2.join("copy/extra").exists());
    assert_same(
        &own(&mnt.join("a/b")),
        &own(&mnt2.join("copy/b")),
        "rq/copy/b after rolling its parent back",
    );
    // -i: only the named pair per file system.
    std::fs::write(mnt.join("a/b/c/g0"), b"changed after s4").unwrap();
    d.ok("rzfs", &["snapshot", "-r", "rp/a@s5"]);
    d.ok("rzfs", &["snapshot", "-r", "rp/a@s6"]);
    let est = d.ok("rzfs", &["send", "-R", "-nP", "-i", "@s4", "rp/a@s6"]);
    assert!(est.contains("incremental\ts4\trp/a/b/c@s6\t") && !est.contains("@s5"), "{est}");
    // A snapshot that some descendant lacks is an error naming it.
    d.ok("rzfs", &["snapshot", "rp/a@only"]);
    let (code, _, err) = d.run("rzfs", &["send", "-R", "-nP", "rp/a@only"]);
    assert!(code != 0 && err.contains("rp/a/b@only does not exist"), "{err}");
    // -I from a clone's origin: the clone's first snapshot comes as a clone incremental,
    // the rest after it; received as a clone of the same origin.
    let ki = dir2.join("ki.zs");
    let (code, err) = send_to(&d, &["-I", "rp/a/b@s1", "rp/a/k@s6"], &ki);
    assert_eq!(code, 0, "{err}");
    let dump = zstream_dump(&ki);
    assert!(dump.contains("rp/a/k@s2") && dump.contains("rp/a/k@s6"), "{dump}");
    let (code, err) = recv_from(&d, &["-u", "rp/kk"], &ki);
    assert_eq!(code, 0, "{err}");
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "origin", "rp/kk"]), "rp/a/b@s1\n");
    let guids =
        |fs: &str| d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "guid", "-s", "createtxg", fs]);
    assert_eq!(guids("rp/kk"), guids("rp/a/k"));
    d.ok("rzfs", &["destroy", "-r", "rp/kk"]);
    // -s: those lacking it are left out with their descendants, with a warning.
    let (code, out, err) = d.run("rzfs", &["send", "-Rs", "-nP", "rp/a@only"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("WARNING: skipping dataset rp/a/b and its children"), "{err}");
    assert!(out.contains("\trp/a@only\t") && !out.contains("rp/a/b"), "{out}");
    let only = dir2.join("only.zs");
    let (code, err) = send_to(&d, &["-Rs", "rp/a@only"], &only);
    assert!(code == 0 && err.contains("WARNING: skipping"), "{err}");
    // -X: a file system left out with its descendants (the clone of one of them stays:
    // its origin is sent as an incremental it cannot take, so it is left out here too).
    let est = d.ok("rzfs", &["send", "-R", "-nP", "-X", "rp/a/b,rp/a/k", "rp/a@s6"]);
    assert!(est.contains("rp/a@s6") && !est.contains("rp/a/b") && !est.contains("rp/a/k"), "{est}");
    let x = dir2.join("x.zs");
    assert_eq!(send_to(&d, &["-R", "-X", "rp/a/b", "-X", "rp/a/k", "rp/a@s6"], &x).0, 0);
    let (code, err) = recv_from(&d, &["-u", "rq/x"], &x);
    assert_eq!(code, 0, "{err}");
    assert_eq!(d.ok("rzfs", &["list", "-H", "-r", "-o", "name", "rq/x"]), "rq/x\nrq/x/late\n");
    // -e with a replication stream: the top's last element, the descendants below it.
    d.ok("rzfs", &["create", "rq/e"]);
    let full6 = dir2.join("full6.zs");
    assert_eq!(send_to(&d, &["-R", "rp/a@s6"], &full6).0, 0);
    let (code, err) = recv_from(&d, &["-u", "-e", "rq/e"], &full6);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        d.ok("rzfs", &["list", "-H", "-r", "-o", "name", "rq/e"]),
        "rq/e\nrq/e/a\nrq/e/a/b\nrq/e/a/b/c\nrq/e/a/k\nrq/e/a/late\n"
    );
    for (args, want) in [
        (vec!["-X", "rp/a/b", "rp/a@s6"], "-R"),
        (vec!["-R", "-X", "rp/a", "rp/a@s6"], "excludes the file system sent"),
        (vec!["-R", "-X", "rp/da%set", "rp/a@s6"], "invalid dataset name"),
    ] {
        let (code, _, err) = d.run("rzfs", &[&["send", "-nP"][..], &args].concat());
        assert!(code != 0 && err.contains(want), "{args:?}: {err}");
    }

    for (p, dir) in [("rp", &dir), ("rq", &dir2)] {
        d.ok("rzpool", &["export", p]);
        zdb_check(dir, p);
        common::space::dsl_space_check(dir, p);
    }
}

/// A receive that fails leaves the target's properties as they were: the `-o` values it
/// set locally and the `-x` markers go, a local value it overrode comes back, and the
/// received values of a `-p` stream are put back too (`zfs_ioc_recv_impl` restores
/// `origprops` and `origrecvd`); the same receive, whole, then applies them. A `-o` that
/// does not apply to the stream's dataset type is refused up front.
#[test]
fn failed_receive_restores_properties() {
    if skip_without_fuse_zdb("failed_receive_restores_properties") {
        return;
    }
    let dir = scratch("recvprops");
    let d = Daemon::new("recvprops");
    let (_devs, pool_mnt) = create(&d, &dir, "rp", &SINGLE, 256 << 20);
    d.ok("rzfs", &["create", "-o", "user:tag=one", "rp/src"]);
    std::fs::write(pool_mnt.join("src/a"), b"first").unwrap();
    d.ok("rzfs", &["snapshot", "rp/src@s1"]);
    let full = dir.join("full");
    assert_eq!(send_to(&d, &["-p", "rp/src@s1"], &full).0, 0);
    assert_eq!(recv_from(&d, &["rp/dst"], &full).0, 0);
    d.ok("rzfs", &["set", "atime=off", "rp/dst"]);
    let mut rng = Rng::new(71);
    std::fs::write(pool_mnt.join("src/b"), rng.data(3 << 20)).unwrap();
    d.ok("rzfs", &["set", "user:tag=two", "rp/src"]);
    d.ok("rzfs", &["snapshot", "rp/src@s2"]);
    let inc = dir.join("inc");
    assert_eq!(send_to(&d, &["-p", "-i", "@s1", "rp/src@s2"], &inc).0, 0);
    let bytes = std::fs::read(&inc).unwrap();
    let cut = dir.join("cut");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let props = "copies,atime,compression,user:tag";
    let show = || d.ok("rzfs", &["get", "-H", "-o", "property,value,source", props, "rp/dst"]);
    let before = show();
    let args = ["-F", "-o", "copies=3", "-o", "atime=on", "-x", "compression", "rp/dst"];
    let (code, err) = recv_from(&d, &args, &cut);
    assert_ne!(code, 0, "a cut stream is refused");
    assert!(!err.contains("could not be restored"), "{err}");
    assert_eq!(show(), before, "properties after the failed receive");
    assert!(!pool_mnt.join("dst/b").exists());
    // A mount `-o mountpoint=` moved goes back when the stream fails.
    let elsewhere = dir.join("elsewhere");
    let mp = format!("mountpoint={}", elsewhere.display());
    let (code, _) = recv_from(&d, &["-F", "-o", &mp, "rp/dst"], &cut);
    assert_ne!(code, 0, "a cut stream is refused");
    assert!(mounts_under(&elsewhere).is_empty(), "not left at the -o mountpoint");
    assert_eq!(mounts_under(&pool_mnt.join("dst")).len(), 1, "mounted where it was");
    assert_eq!(std::fs::read(pool_mnt.join("dst/a")).unwrap(), b"first");
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "source", "mountpoint", "rp/dst"]), "inherited from rp\n");
    let (code, err) = recv_from(&d, &args, &inc);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        show(),
        "copies\t3\tlocal\natime\ton\tlocal\ncompression\ton\tdefault\nuser:tag\ttwo\treceived\n"
    );
    assert_eq!(
        std::fs::read(pool_mnt.join("dst/b")).unwrap(),
        std::fs::read(pool_mnt.join("src/b")).unwrap()
    );
    // A `-o` that does not apply to what the stream makes is refused before anything is
    // received; `-x` of it is not (ZTS receive-o-x_props_override, part 3.7).
    d.ok("rzfs", &["create", "-s", "-V", "8M", "rp/vol"]);
    d.ok("rzfs", &["snapshot", "rp/vol@s"]);
    let vol = dir.join("vol");
    assert_eq!(send_to(&d, &["rp/vol@s"], &vol).0, 0);
    let (code, err) = recv_from(&d, &["-o", "atime=off", "rp/vol2"], &vol);
    assert!(code != 0 && err.contains("'atime' does not apply to datasets of this type"), "{err}");
    let (code, _, _) = d.run("rzfs", &["list", "rp/vol2"]);
    assert_ne!(code, 0, "nothing was received");
    let (code, err) = recv_from(&d, &["-x", "atime", "-x", "canmount", "rp/vol2"], &vol);
    assert_eq!(code, 0, "{err}");
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "type", "rp/vol2"]), "volume\n");
    // With -d every substream is received "into" the same target: `-o` is still local on
    // the top file system only, its descendants inherit it (receive-o-x_props_override 3.8).
    d.ok("rzfs", &["create", "-p", "rp/t/a/b"]);
    d.ok("rzfs", &["snapshot", "-r", "rp/t/a@r"]);
    let tree_stream = dir.join("tree");
    assert_eq!(send_to(&d, &["-R", "rp/t/a@r"], &tree_stream).0, 0);
    d.ok("rzfs", &["create", "rp/d"]);
    let (code, err) = recv_from(&d, &["-d", "-o", "copies=2", "rp/d"], &tree_stream);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        d.ok("rzfs", &["get", "-H", "-o", "name,value,source", "copies", "rp/d/t/a", "rp/d/t/a/b"]),
        "rp/d/t/a\t2\tlocal\nrp/d/t/a/b\t2\tinherited from rp/d/t/a\n"
    );
    d.ok("rzpool", &["export", "rp"]);
    zdb_check(&dir, "rp");
}

/// `receive -F` of an incremental replication stream mirrors the sender's deletions (libzfs
/// `recv_incremental_replication`): a file system the sender destroyed, a snapshot it
/// destroyed (older than the stream's source too) and a snapshot made only on the receiver
/// go; without -F they stay. `-v` names each ("attempting destroy").
#[test]
fn receive_force_replication_mirrors_deletions() {
    if skip_without_fuse_zdb("receive_force_replication_mirrors_deletions") {
        return;
    }
    let dir = scratch("recv-mirror");
    let d = Daemon::new("recv-mirror");
    let (_devs, mnt) = create(&d, &dir, "rm", &SINGLE, 256 << 20);
    for fs in ["rm/t", "rm/t/x", "rm/t/y", "rm/t/y/z"] {
        d.ok("rzfs", &["create", fs]);
    }
    std::fs::write(mnt.join("t/x/f"), b"one").unwrap();
    d.ok("rzfs", &["snapshot", "-r", "rm/t@1"]);
    std::fs::write(mnt.join("t/x/f"), b"two").unwrap();
    d.ok("rzfs", &["snapshot", "-r", "rm/t@2"]);
    let full = dir.join("full.zs");
    assert_eq!(send_to(&d, &["-R", "rm/t@2"], &full).0, 0);
    assert_eq!(recv_from(&d, &["-u", "rm/copy"], &full).0, 0);
    let names = |fs: &str| {
        d.ok("rzfs", &["list", "-H", "-r", "-t", "all", "-o", "name", "-s", "name", fs]).replace(fs, "TOP")
    };
    assert_eq!(names("rm/copy"), names("rm/t"));
    // The sender drops y (and z below it) and @1; the receiver made a snapshot of its own.
    d.ok("rzfs", &["destroy", "-r", "rm/t/y"]);
    d.ok("rzfs", &["destroy", "-r", "rm/t@1"]);
    std::fs::write(mnt.join("t/x/f"), b"three").unwrap();
    d.ok("rzfs", &["snapshot", "-r", "rm/t@3"]);
    d.ok("rzfs", &["snapshot", "rm/copy/x@mine"]);
    let inc = dir.join("inc.zs");
    assert_eq!(send_to(&d, &["-R", "-I", "@2", "rm/t@3"], &inc).0, 0);
    // Without -F nothing goes (and the receiver's own later snapshot refuses the stream).
    let (code, _) = recv_from(&d, &["-u", "rm/copy"], &inc);
    assert_ne!(code, 0);
    assert!(names("rm/copy").contains("TOP/y/z@2"), "{}", names("rm/copy"));
    // A held snapshot cannot go: it is reported and kept, and the receive goes on.
    d.ok("rzfs", &["hold", "keep", "rm/copy/x@1"]);
    let (code, out, err) = recv_output(&d, &["-v", "-u", "-F", "rm/copy"], &inc);
    assert_eq!(code, 0, "{err}");
    for gone in ["rm/copy/y", "rm/copy@1", "rm/copy/x@mine", "rm/copy/x@1"] {
        assert!(out.contains(&format!("attempting destroy {gone}")), "{gone}: {out}");
    }
    assert!(out.contains("failed ("), "the held snapshot's destroy fails: {out}");
    assert!(names("rm/copy").contains("TOP/x@1\n"), "held, kept");
    d.ok("rzfs", &["release", "keep", "rm/copy/x@1"]);
    d.ok("rzfs", &["destroy", "rm/copy/x@1"]);
    assert_eq!(names("rm/copy"), names("rm/t"), "the receiver mirrors the sender");
    d.ok("rzfs", &["mount", "rm/copy/x"]);
    assert_eq!(std::fs::read(mnt.join("copy/x/f")).unwrap(), b"three");
    d.ok("rzpool", &["export", "rm"]);
    zdb_check(&dir, "rm");
}

/// An incremental replication stream follows the sender's renames (libzfs
/// `recv_incremental_replication`, with or without -F): a snapshot renamed, a file system
/// renamed with its children, another moved under it; `-v` names each ("attempting
/// rename"). The receiver ends as the sender, files included.
#[test]
fn receive_replication_follows_renames() {
    if skip_without_fuse_zdb("receive_replication_follows_renames") {
        return;
    }
    let dir = scratch("recv-rename");
    let d = Daemon::new("recv-rename");
    let (_devs, mnt) = create(&d, &dir, "rr", &SINGLE, 256 << 20);
    for fs in ["rr/t", "rr/t/a", "rr/t/a/b", "rr/t/c"] {
        d.ok("rzfs", &["create", fs]);
    }
    std::fs::write(mnt.join("t/a/b/f"), b"one").unwrap();
    d.ok("rzfs", &["snapshot", "-r", "rr/t@1"]);
    d.ok("rzfs", &["snapshot", "-r", "rr/t@2"]);
    let full = dir.join("full.zs");
    assert_eq!(send_to(&d, &["-R", "rr/t@2"], &full).0, 0);
    assert_eq!(recv_from(&d, &["-u", "rr/copy"], &full).0, 0);
    d.ok("rzfs", &["rename", "rr/t/a/b@1", "rr/t/a/b@first"]);
    d.ok("rzfs", &["rename", "rr/t/a", "rr/t/aa"]);
    d.ok("rzfs", &["rename", "rr/t/c", "rr/t/aa/c"]);
    std::fs::write(mnt.join("t/aa/b/f"), b"two").unwrap();
    d.ok("rzfs", &["snapshot", "-r", "rr/t@3"]);
    let inc = dir.join("inc.zs");
    assert_eq!(send_to(&d, &["-R", "-I", "@2", "rr/t@3"], &inc).0, 0);
    let (code, out, err) = recv_output(&d, &["-v", "-u", "rr/copy"], &inc);
    assert_eq!(code, 0, "{err}");
    for (a, b) in
        [("rr/copy/a/b@1", "rr/copy/a/b@first"), ("rr/copy/a", "rr/copy/aa"), ("rr/copy/c", "rr/copy/aa/c")]
    {
        assert!(out.contains(&format!("attempting rename {a} to {b}\n")), "{a}: {out}");
    }
    let names = |fs: &str| {
        d.ok("rzfs", &["list", "-H", "-r", "-t", "all", "-o", "name", "-s", "name", fs]).replace(fs, "TOP")
    };
    assert_eq!(names("rr/copy"), names("rr/t"));
    d.ok("rzfs", &["mount", "rr/copy/aa/b"]);
    assert_eq!(std::fs::read(mnt.join("copy/aa/b/f")).unwrap(), b"two");
    d.ok("rzpool", &["export", "rr"]);
    zdb_check(&dir, "rr");
}

/// `receive -o origin=SNAP` of a full stream (ZTS zfs_receive_010_pos): the file system is
/// made a clone of SNAP and the stream applied over SNAP's objects, whatever they were
/// (a file onto a directory, holes onto data, a missing object onto a file, a new record
/// size), so the result is exactly the sent file system; blocks the origin already holds
/// are kept by nop-write (sha256 + compression), so a stream received as a clone of its
/// own snapshot takes almost no space. A plain rewrite of a file with its own bytes is a
/// nop-write too. zdb finds no leak or damage.
#[test]
fn receive_full_stream_as_clone() {
    if skip_without_fuse_zdb("recv_origin") {
        return;
    }
    let dir = scratch("recv_origin");
    let d = Daemon::new("recv_origin");
    let (_devs, mnt) = create(&d, &dir, "ro", &SINGLE, 256 << 20);
    d.ok(
        "rzfs",
        &["create", "-o", "checksum=sha256", "-o", "compression=gzip", "-o", "recordsize=512", "ro/base"],
    );
    d.ok("rzfs", &["create", "ro/base/a"]);
    d.ok("rzfs", &["create", "ro/base/b"]);
    let (ma, mb) = (mnt.join("base/a"), mnt.join("base/b"));
    let mut rng = Rng::new(10);
    let mut random = |n: usize| rng.data(n);
    // Zeros written with compression on are holes.
    let holes = |n: usize| vec![0u8; n];
    // The same object numbers hold different kinds of things in a and b.
    std::fs::write(ma.join("f8"), random(8192)).unwrap();
    std::fs::write(mb.join("f8"), random(8192)).unwrap();
    std::fs::write(ma.join("f9"), random(8192)).unwrap();
    std::fs::write(mb.join("h9"), holes(4608)).unwrap();
    std::fs::write(ma.join("f10"), random(8192)).unwrap();
    std::fs::create_dir(mb.join("d10")).unwrap();
    std::fs::create_dir(ma.join("d11")).unwrap();
    std::fs::write(mb.join("x11"), b"").unwrap();
    std::fs::write(ma.join("h12"), holes(4608)).unwrap();
    std::fs::write(mb.join("f12"), random(3000)).unwrap();
    d.ok("rzfs", &["set", "recordsize=128k", "ro/base/a"]);
    std::fs::write(ma.join("big"), random(8 << 20)).unwrap();
    std::fs::write(mb.join("big"), b"").unwrap();
    std::fs::remove_file(mb.join("x11")).unwrap();
    for i in 0..50 {
        std::fs::write(ma.join(format!("e{i}")), b"").unwrap();
    }
    d.ok("rzfs", &["snapshot", "ro/base/a@s1"]);
    d.ok("rzfs", &["snapshot", "ro/base/b@s1"]);
    let (sa, sb) = (dir.join("a.zs"), dir.join("b.zs"));
    assert_eq!(send_to(&d, &["ro/base/a@s1"], &sa).0, 0);
    assert_eq!(send_to(&d, &["ro/base/b@s1"], &sb).0, 0);
    let (ta, tb) = (tree(&ma), tree(&mb));

    // Received as a clone of its own snapshot: nop-write keeps every data block.
    let (code, err) = recv_from(&d, &["-o", "origin=ro/base/a@s1", "ro/base/r"], &sa);
    assert_eq!(code, 0, "{err}");
    assert_same(&ta, &tree(&mnt.join("base/r")), "a received onto a clone of a");
    let used = |ds: &str| -> u64 {
        d.ok("rzfs", &["get", "-Hp", "-o", "value", "used", ds]).trim().parse().unwrap()
    };
    let (ur, ua) = (used("ro/base/r"), used("ro/base/a"));
    assert!(ur < ua / 10, "nop-write: the clone uses {ur} bytes, its origin {ua}");
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "origin", "ro/base/r"]).trim(), "ro/base/a@s1");
    d.ok("rzfs", &["destroy", "-r", "ro/base/r"]);
    // Each received as a clone of the other: every object becomes what the stream says.
    let (code, err) = recv_from(&d, &["-o", "origin=ro/base/b@s1", "ro/base/r"], &sa);
    assert_eq!(code, 0, "{err}");
    assert_same(&ta, &tree(&mnt.join("base/r")), "a received onto a clone of b");
    d.ok("rzfs", &["destroy", "-r", "ro/base/r"]);
    let (code, err) = recv_from(&d, &["-o", "origin=ro/base/a@s1", "ro/base/r"], &sb);
    assert_eq!(code, 0, "{err}");
    assert_same(&tb, &tree(&mnt.join("base/r")), "b received onto a clone of a");

    // Refused, nothing made: an origin that is no snapshot or does not exist, a target
    // that exists.
    for (args, want) in [
        (&["-o", "origin=ro/base/a", "ro/base/n"][..], "not a snapshot"),
        (&["-o", "origin=ro/base/a@nosuch", "ro/base/n"][..], "does not exist"),
        (&["-o", "origin=ro/base/a@s1", "ro/base/r"][..], "exists"),
    ] {
        let (code, err) = recv_from(&d, args, &sa);
        assert!(code != 0 && err.contains(want), "{args:?}: {err}");
    }
    assert!(d.run("rzfs", &["list", "ro/base/n"]).0 != 0, "a refused receive made ro/base/n");
    // A stream that breaks off leaves no clone behind.
    let bytes = std::fs::read(&sa).unwrap();
    let cut = dir.join("cut.zs");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (code, _) = recv_from(&d, &["-o", "origin=ro/base/b@s1", "ro/base/n"], &cut);
    assert!(code != 0, "a cut stream was received");
    assert!(d.run("rzfs", &["list", "ro/base/n"]).0 != 0, "a failed receive left ro/base/n");
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "clones", "ro/base/b@s1"]).trim(), "-");

    // A rewrite of a file in place with the bytes it holds writes nothing new (not after a
    // truncate: the blocks are freed first, in OpenZFS too).
    let big = std::fs::read(ma.join("big")).unwrap();
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().write(true).open(ma.join("big")).unwrap();
        f.write_all(&big).unwrap();
    }
    d.ok("rzpool", &["sync", "ro"]);
    let written: u64 =
        d.ok("rzfs", &["get", "-Hp", "-o", "value", "written", "ro/base/a"]).trim().parse().unwrap();
    assert!(written < 1 << 20, "a rewrite of 8 MiB with the same bytes wrote {written} bytes");
    d.ok("rzpool", &["export", "ro"]);
    zdb_check(&dir, "ro");
}

/// `send --saved FS` (ZTS send_partial_dataset): what a resumable receive kept of a stream
/// that broke off is sent again, full and incremental, as a stream without its END; a
/// `receive -s` of it keeps it partial in turn, and `send -t` of that token finishes it
/// with the sent file system's exact contents. Refused: a snapshot, a file system holding
/// no partial stream, and -i/-R/-p/-h.
#[test]
fn send_saved_partial_stream() {
    if skip_without_fuse_zdb("send_saved") {
        return;
    }
    let dir = scratch("send_saved");
    let d = Daemon::new("send_saved");
    let (_devs, _mnt) = create(&d, &dir, "sv", &SINGLE, 512 << 20);
    let src = dir.join("src");
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", src.display()), "sv/src"]);
    let mut rng = Rng::new(41);
    let mut want = BTreeMap::new();
    write_files(&src, "f", 20, 50_000..300_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "sv/src@a"]);
    let at_a = tree(&src);
    write_files(&src, "g", 20, 50_000..300_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "sv/src@b"]);
    let at_b = tree(&src);
    let (full, inc, cut, saved) = (dir.join("full"), dir.join("inc"), dir.join("cut"), dir.join("saved"));
    assert_eq!(send_to(&d, &["sv/src@b"], &full).0, 0);
    assert_eq!(send_to(&d, &["-i", "@a", "sv/src@b"], &inc).0, 0);
    let a_stream = dir.join("a");
    assert_eq!(send_to(&d, &["sv/src@a"], &a_stream).0, 0);
    let token_of =
        |fs: &str| d.ok("rzfs", &["get", "-H", "-o", "value", "receive_resume_token", fs]).trim().to_string();
    let finish = |fs: &str| {
        let token = token_of(fs);
        assert!(token.starts_with("1-"), "{fs}: a token: {token}");
        let rest = dir.join("rest");
        let (code, err) = send_to(&d, &["-t", &token], &rest);
        assert_eq!(code, 0, "{fs}: send -t: {err}");
        let (code, err) = recv_from(&d, &["-s", fs], &rest);
        assert_eq!(code, 0, "{fs}: the resumed receive: {err}");
    };
    let check = |fs: &str, want: &BTreeMap<String, Vec<u8>>| {
        let m = dir.join(format!("m-{}", fs.replace('/', "-")));
        d.ok("rzfs", &["set", &format!("mountpoint={}", m.display()), fs]);
        // (Mounted by the set when the finishing receive mounted it.)
        let _ = d.run("rzfs", &["mount", fs]);
        assert_same(want, &tree(&m), fs);
        d.ok("rzfs", &["unmount", fs]);
    };

    // Full: a receive broken off into a new file system, its saved part sent on.
    let bytes = std::fs::read(&full).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    assert!(recv_from(&d, &["-s", "-u", "sv/fullpart"], &cut).0 != 0);
    let (code, err) = send_to(&d, &["--saved", "sv/fullpart"], &saved);
    assert_eq!(code, 0, "{err}");
    let dump = zstream_dump(&saved);
    assert!(
        !dump.contains("END checksum"),
        "a saved stream has no END:\n{}",
        &dump[dump.len().saturating_sub(600)..]
    );
    let (code, err) = recv_from(&d, &["-s", "-u", "sv/copy"], &saved);
    assert!(code != 0 && err.contains("partially-complete state"), "{err}");
    finish("sv/copy");
    check("sv/copy", &at_b);

    // Incremental: kept in the target itself, sent on from the same source.
    assert_eq!(recv_from(&d, &["-u", "sv/incpart"], &a_stream).0, 0);
    assert_eq!(recv_from(&d, &["-u", "sv/copy2"], &a_stream).0, 0);
    let ib = std::fs::read(&inc).unwrap();
    std::fs::write(&cut, &ib[..ib.len() / 2]).unwrap();
    assert!(recv_from(&d, &["-s", "-u", "sv/incpart"], &cut).0 != 0);
    assert_eq!(send_to(&d, &["--saved", "sv/incpart"], &saved).0, 0);
    let (code, err) = recv_from(&d, &["-s", "-u", "sv/copy2"], &saved);
    assert!(code != 0 && err.contains("partially-complete state"), "{err}");
    finish("sv/copy2");
    check("sv/copy2", &at_b);
    // The partial targets themselves finish too.
    finish("sv/incpart");
    check("sv/incpart", &at_b);
    let _ = at_a;

    for args in [
        &["--saved"][..],
        &["--saved", "sv/src@a"][..],
        &["--saved", "sv/src"][..],
        &["--saved", "-i", "@a", "sv/fullpart"][..],
        &["--saved", "-R", "sv/fullpart"][..],
        &["--saved", "-p", "sv/fullpart"][..],
        &["--saved", "-h", "sv/fullpart"][..],
    ] {
        let (code, err) = send_to(&d, args, &saved);
        assert!(code != 0, "{args:?} was accepted: {err}");
    }
    d.ok("rzpool", &["export", "sv"]);
    zdb_check(&dir, "sv");
}

/// A `refquota` holds against rollback and receive (`dsl_dataset_rollback_check`,
/// `dsl_dataset_clone_swap_check_impl`): rolling back to a snapshot that references more
/// than the refquota is refused with EDQUOT, and so is `receive -F` of a file system that
/// references more than it allows plus one change's overshoot (64 MiB); both leave the
/// datasets as they were, and zdb finds the pool clean.
#[test]
fn refquota_holds_against_rollback_and_receive() {
    if skip_without_fuse_zdb("refquota_holds_against_rollback_and_receive") {
        return;
    }
    let dir = scratch("refquota_rr");
    let d = Daemon::new("refquota_rr");
    let (_devs, mnt) = create(&d, &dir, "rq", &SINGLE, 512 << 20);
    d.ok("rzfs", &["create", "rq/src"]);
    d.ok("rzfs", &["create", "rq/dst"]);
    // Incompressible data, so what is referenced is what was written.
    let mut rng = Rng::new(0x7ef);
    let mut noise = |n: usize| -> Vec<u8> { (0..n / 8).flat_map(|_| rng.next().to_le_bytes()).collect() };
    std::fs::write(mnt.join("src/big"), noise(80 << 20)).unwrap();
    std::fs::write(mnt.join("dst/keep"), b"kept").unwrap();
    d.ok("rzfs", &["snapshot", "rq/src@s"]);
    // Rollback: the snapshot references 80 MiB, the refquota allows 40.
    std::fs::remove_file(mnt.join("src/big")).unwrap();
    d.ok("rzpool", &["sync", "rq"]);
    d.ok("rzfs", &["set", "refquota=40M", "rq/src"]);
    let (code, _, err) = d.run("rzfs", &["rollback", "rq/src@s"]);
    assert!(code != 0 && err.contains("quota exceeded"), "rollback over the refquota: {err}");
    assert!(!mnt.join("src/big").exists(), "the refused rollback changed nothing");
    d.ok("rzfs", &["set", "refquota=none", "rq/src"]);
    d.ok("rzfs", &["rollback", "rq/src@s"]);
    assert_eq!(std::fs::metadata(mnt.join("src/big")).unwrap().len(), 80 << 20);
    // Receive -F over a file system whose refquota is 10 MiB: 80 MiB > 10 + 64.
    let stream = dir.join("s.zstream");
    let (code, err) = send_to(&d, &["rq/src@s"], &stream);
    assert_eq!(code, 0, "{err}");
    d.ok("rzfs", &["set", "refquota=10M", "rq/dst"]);
    let (code, err) = recv_from(&d, &["-F", "rq/dst"], &stream);
    assert!(code != 0 && err.contains("refquota"), "receive over the refquota: {err}");
    assert_eq!(std::fs::read(mnt.join("dst/keep")).unwrap(), b"kept", "the refused receive changed nothing");
    let names = d.ok("rzfs", &["list", "-H", "-t", "all", "-o", "name", "-r", "rq"]);
    assert_eq!(names, "rq\nrq/dst\nrq/src\nrq/src@s\n", "nothing of the refused receive is left");
    // Within the refquota plus the slack it is received.
    d.ok("rzfs", &["set", "refquota=20M", "rq/dst"]);
    let (code, err) = recv_from(&d, &["-F", "rq/dst"], &stream);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::metadata(mnt.join("dst/big")).unwrap().len(), 80 << 20);
    d.ok("rzpool", &["export", "rq"]);
    zdb_check(&dir, "rq");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Corrective receive on RAID-Z: a raidz1 of three whose lz4 block and uncompressed block
/// lost every sector (data, parity and padding, on all three devices: beyond what parity
/// rebuilds) is healed from a plain and then from a compressed stream. The heal writes
/// the block through the RAID-Z vdev (parity recomputed); afterwards the files read back,
/// a scrub repairs nothing, and with any one device wiped every file still reads (the
/// parity written is right), zdb -bcc is clean.
#[test]
fn corrective_receive_heals_raidz() {
    if skip_without_fuse_zdb("corrective_receive_heals_raidz") {
        return;
    }
    let mut rng = Rng::new(31);
    let dir = scratch("heal-rz");
    let d = Daemon::new("heal-rz");
    let (devs, mnt) = create(&d, &dir, "crz", &RAIDZ1, 256 << 20);
    d.ok("rzfs", &["set", "compression=lz4", "crz"]);
    let text: Vec<u8> = (0..40_000)
        .flat_map(|i| format!("row {i} of the raidz victim {}\n", rng.below(10)).into_bytes())
        .collect();
    let raw = rng.data(1 << 20);
    std::fs::write(mnt.join("victim"), &text).unwrap();
    std::fs::write(mnt.join("victim2"), &raw).unwrap();
    let ino = |n: &str| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(mnt.join(n)).unwrap().ino()
    };
    let objs = [ino("victim"), ino("victim2")];
    d.ok("rzfs", &["snapshot", "crz@s"]);
    let plain = dir.join("plain.zs");
    let compressed = dir.join("compressed.zs");
    assert_eq!(send_to(&d, &["crz@s"], &plain).0, 0);
    assert_eq!(send_to(&d, &["-c", "crz@s"], &compressed).0, 0);
    d.ok("rzpool", &["export", "crz"]);
    let cfg = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-C", "crz"]);
    let ashift: u64 = cfg
        .lines()
        .find_map(|l| l.trim().strip_prefix("ashift: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no ashift in:\n{cfg}"));
    import(&d, &dir, "crz", &mnt, false);
    for stream in [&plain, &compressed] {
        d.ok("rzpool", &["export", "crz"]);
        for &obj in &objs {
            // RAID-Z lays a block's sectors (data, parity, skip) out in sector order across
            // the devices: sector s of the vdev is on device s % n at row s / n.
            let (offset, asize) = first_l0_dva(&dir, "crz/", obj);
            let n = devs.len() as u64;
            for s in (offset >> ashift)..((offset + asize) >> ashift) {
                let dev = std::path::Path::new(&devs[(s % n) as usize]);
                noise(dev, (4 << 20) + ((s / n) << ashift), 1 << ashift, &mut rng);
            }
        }
        import(&d, &dir, "crz", &mnt, false);
        assert!(std::fs::read(mnt.join("victim")).is_err(), "the lost block must not read");
        assert!(std::fs::read(mnt.join("victim2")).is_err(), "the lost block must not read");
        let (code, out, err) = recv_output(&d, &["-c", "crz@s"], stream);
        assert_eq!(code, 0, "{}: {err}", stream.display());
        assert!(out.contains("healed 2 block(s)"), "{}: {out}", stream.display());
        assert_eq!(std::fs::read(mnt.join("victim")).unwrap(), text);
        assert_eq!(std::fs::read(mnt.join("victim2")).unwrap(), raw);
        d.ok("rzpool", &["scrub", "-w", "crz"]);
        let st = d.ok("rzpool", &["status", "crz"]);
        assert!(st.contains("repaired 0B") && st.contains("with 0 errors"), "{st}");
        d.ok("rzpool", &["export", "crz"]);
        zdb_check(&dir, "crz");
        import(&d, &dir, "crz", &mnt, false);
    }
    d.ok("rzpool", &["export", "crz"]);
    // The parity the heal wrote rebuilds the data: each device in turn wiped, read-only.
    for (i, dev) in devs.iter().enumerate() {
        let keep = std::fs::read(dev).unwrap();
        noise(std::path::Path::new(dev), 4 << 20, 64 << 20, &mut rng);
        import(&d, &dir, "crz", &mnt, true);
        assert_eq!(std::fs::read(mnt.join("victim")).unwrap(), text, "device {i} wiped");
        assert_eq!(std::fs::read(mnt.join("victim2")).unwrap(), raw, "device {i} wiped");
        d.ok("rzpool", &["export", "crz"]);
        std::fs::write(dev, keep).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
