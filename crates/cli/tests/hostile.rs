//! Hostile pools: small pools written by rzfs's own library writer and then given crafted
//! contents through the same writer (so every checksum is valid and the parsers, not the
//! checksum layer, meet the damage): directory entries named `..`, `a/b` or with NUL, a
//! symlink that a later entry would be written through, setuid files, a directory cycle,
//! a directory linked under two names at every level (2^40 paths), a fat ZAP whose
//! `maxblkid` claims 2^24 blocks or whose pointer table claims 2^24 blocks, a leaf whose
//! entries share one looping array chain (a memory bomb), a file whose size and `maxblkid`
//! claim terabytes, a bpobj claiming 4 GiB of block pointers, a short meta-dnode block.
//!
//! Each pool is then read by `rzdb -b`, `rzdb -R` (default and `--same-owner`), a read-only
//! and a read-write import through `rzfsd`, and the read-only FUSE mount: every run must end
//! with a clear result (no panic, no signal), `rzdb -R` must write nothing outside DEST and
//! no setuid/setgid file, and the peak RSS of every process must stay under 256 MiB.
//!
//! The space-check test writes pools with a leak (space allocated, owned by no block) and a
//! live block whose space is freed in the space map, and checks that `rzdb -b` and OpenZFS's
//! `zdb -bcc` both report them, and both report a clean pool clean.

mod common;

use common::tools::{self, Daemon};
use pool::create::{CreateSpec, NewLeaf, NewTop};
use pool::writer::{Policy, PoolWriter};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use zap::write::ZapVal;
use zpl::write::ZplWriter;

/// Peak RSS allowed to any process reading a hostile pool.
const RSS_LIMIT_KIB: u64 = 256 << 10;
const T0: (u64, u64) = (1_700_000_000, 0);

fn policy() -> Policy {
    Policy::dataset(7, 2, 1)
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rzfs-hostile-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A pool being written: the writer and its root file system.
struct Lab {
    w: PoolWriter,
    ds: u64,
    z: ZplWriter,
    /// A size to put in the MOS config object's bonus after the last config write.
    config_size: Option<u64>,
}

impl Lab {
    /// Creates pool `name` on one 64 MiB file in `dir` (ashift 9, default features).
    fn create(dir: &Path, name: &str) -> Lab {
        let img = dir.join(format!("{name}.img"));
        std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
        let dev = Arc::new(vdev::device::FileDevice::open(&img, true).unwrap());
        let leaf = NewLeaf { path: img.to_string_lossy().into_owned(), device: dev, is_disk: false };
        let none: [&str; 0] = [];
        let (set, _) =
            pool::feature_table::resolve_create(&pool::compat::CompatSet::Off, &none, &none).unwrap();
        let features = set.iter().filter_map(|n| pool::feature_table::by_name(n)).collect();
        let init = |os: &mut dmu::tx::DirtyObjset, z: &mut zap::write::ZapCache| {
            ZplWriter::create_fs(os, z, T0, 0, 0)
                .map(|_| ())
                .map_err(|e| pool::PoolError::Invalid(e.to_string()))
        };
        let spec = CreateSpec {
            name: name.into(),
            tops: vec![NewTop::Single(leaf)],
            log: Vec::new(),
            ashift: 9,
            features,
            root_props: vec![("compression".into(), ZapVal::u64(2))],
            pool_props: vec![],
            init_root: &init,
            root_policy: policy(),
            cache_bytes: 16 << 20,
            label_name: None,
        };
        let mut w = pool::create::create(&spec).expect("create");
        let root_dir = w.mos_zaps.lookup_u64(&w.mos, 1, "root_dataset").unwrap().unwrap();
        let ds = dsl::write::dir_phys(&w.mos, root_dir).unwrap().head_dataset_obj;
        w.open_dataset(ds, policy()).unwrap();
        let d = w.dataset(ds).unwrap();
        let z = ZplWriter::open(&d.os, &mut d.zaps).unwrap();
        Lab { w, ds, z, config_size: None }
    }

    fn root(&self) -> u64 {
        self.z.root()
    }

    fn d(&mut self) -> &mut pool::writer::DatasetWriter {
        self.w.dataset(self.ds).unwrap()
    }

    fn file(&mut self, dir: u64, name: &str, mode: u32, uid: u32, data: &[u8]) -> u64 {
        let d = self.w.dataset(self.ds).unwrap();
        let obj = self.z.create(&mut d.os, &mut d.zaps, dir, name.as_bytes(), mode, uid, uid, 0, T0).unwrap();
        self.z.write(&mut d.os, &mut d.zaps, obj, 0, data, 128 << 10, T0).unwrap();
        obj
    }

    fn mkdir(&mut self, dir: u64, name: &str, mode: u32) -> u64 {
        let d = self.w.dataset(self.ds).unwrap();
        self.z.mkdir(&mut d.os, &mut d.zaps, dir, name.as_bytes(), mode, 0, 0, T0).unwrap()
    }

    fn symlink(&mut self, dir: u64, name: &str, target: &str) -> u64 {
        let d = self.w.dataset(self.ds).unwrap();
        self.z.symlink(&mut d.os, &mut d.zaps, dir, name.as_bytes(), target.as_bytes(), 0, 0, T0).unwrap()
    }

    /// Adds a raw directory entry (`dtype` 4 = directory, 8 = file, 10 = symlink).
    fn raw_entry(&mut self, dir: u64, name: &[u8], obj: u64, dtype: u64) {
        let d = self.w.dataset(self.ds).unwrap();
        d.zaps.update(&d.os, dir, name, ZapVal::u64((dtype << 60) | obj)).unwrap();
    }

    fn sync(&mut self) {
        self.w.sync().unwrap();
    }

    /// The committed contents of block `blkid` of dataset object `obj`.
    fn committed_block(&mut self, obj: u64, blkid: u64) -> Vec<u8> {
        let d = self.w.dataset(self.ds).unwrap();
        let os = d.os.committed().unwrap();
        let dn = os.dnode(obj).unwrap();
        os.read_block(&dn, blkid).unwrap().to_vec()
    }

    fn export(mut self) {
        let Some(size) = self.config_size else {
            return self.w.close(ondisk::label::PoolState::Exported).unwrap();
        };
        // What `close` does, then one more txg whose only change is the config object's
        // bonus (the packed nvlist's length): no later config write repairs it.
        self.w.sync().unwrap();
        self.w.state = ondisk::label::PoolState::Exported;
        self.w.config_dirty = true;
        self.w.sync().unwrap();
        let obj = self.w.config_obj;
        self.w.mos.set_bonus(obj, size.to_le_bytes().to_vec()).unwrap();
        self.w.sync().unwrap();
    }
}

/// What a finished child process did.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    out: String,
    err: String,
    /// Peak resident set in KiB (GNU time's %M).
    maxrss: u64,
}

impl Run {
    fn text(&self) -> String {
        format!(
            "exit {:?}, peak {} KiB\nstdout:\n{}\nstderr:\n{}",
            self.code, self.maxrss, self.out, self.err
        )
    }
}

/// Runs `rzdb ARGS` under GNU time, which reports the peak RSS (`/usr/bin/time`, package
/// `time`, installed by scripts/install-test-deps.sh).
fn rzdb(args: &[&str]) -> Run {
    let rss = scratch_file("rss");
    let out = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(&rss)
        .arg(env!("CARGO_BIN_EXE_rzdb"))
        .args(args)
        .output()
        .expect("run rzdb under /usr/bin/time");
    let text = std::fs::read_to_string(&rss).unwrap_or_default();
    let _ = std::fs::remove_file(&rss);
    // "Command terminated by signal N" precedes the number when the child was killed.
    let maxrss = text.lines().last().and_then(|l| l.trim().parse().ok()).unwrap_or(u64::MAX);
    Run {
        code: if text.contains("terminated by signal") { None } else { out.status.code() },
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
        maxrss,
    }
}

fn scratch_file(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "rzfs-hostile-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// A run ended by itself, with 0 or 1, without a panic, within the memory bound.
fn assert_clean_end(what: &str, r: &Run) {
    assert!(matches!(r.code, Some(0) | Some(1)), "{what}: {}", r.text());
    assert!(!r.err.contains("panicked"), "{what} panicked: {}", r.text());
    assert!(
        r.maxrss < RSS_LIMIT_KIB,
        "{what}: peak RSS {} KiB >= {RSS_LIMIT_KIB} KiB\n{}",
        r.maxrss,
        r.text()
    );
}

// ------------------------------------------------------------------------------------------
// Space check: rzdb -b against zdb -bcc.

/// A pool with a few files, for the space checks.
fn space_pool(dir: &Path, name: &str) -> Lab {
    let mut l = Lab::create(dir, name);
    let root = l.root();
    for i in 0..4u8 {
        l.file(root, &format!("f{i}"), 0o644, 0, &vec![i + 1; 200_000]);
    }
    l.sync();
    l
}

/// The first DVA and birth of block 0 of file `name` in the root directory.
fn file_block(l: &mut Lab, name: &str) -> (ondisk::blkptr::Dva, u64) {
    let root = l.root();
    let d = l.d();
    let os = d.os.committed().unwrap().clone();
    let e = zap::lookup(&os, root, name).unwrap().unwrap();
    let obj = e.first_u64().unwrap() & ((1 << 48) - 1);
    let dn = os.dnode(obj).unwrap();
    let bp = os.block_pointer(&dn, 0, 0).unwrap().unwrap();
    (bp.dva[0], bp.birth)
}

fn zdb_b(dir: &Path, pool: &str) -> Option<String> {
    tools::zdb()?;
    Some(tools::run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-bcc", pool]))
}

#[test]
fn space_check_agrees_with_zdb() {
    let dir = scratch("space");
    let d = dir.to_str().unwrap();

    // A clean pool: both say so.
    space_pool(&dir, "sclean").export();
    let r = rzdb(&["-e", "-p", d, "-b", "sclean"]);
    assert_eq!(r.code, Some(0), "{}", r.text());
    assert!(r.out.contains("No leaks (block sum matches space maps exactly)"), "{}", r.text());
    if let Some(z) = zdb_b(&dir, "sclean") {
        assert!(z.contains("No leaks"), "zdb on the clean pool:\n{z}");
    }

    // A leak: 64 KiB allocated in the space map, referenced by nothing.
    let mut l = space_pool(&dir, "sleak");
    let zio = l.w.reader.zio.clone();
    let txg = l.w.txg;
    let dvas = zio::Allocate::allocate(&l.w.alloc, &zio, 64 << 10, 1, txg).unwrap();
    let leaked = dvas[0];
    l.sync();
    l.export();
    let r = rzdb(&["-e", "-p", d, "-b", "sleak"]);
    assert_eq!(r.code, Some(1), "{}", r.text());
    let want = format!("leaked space: vdev 0, offset {:#x}, size {}", leaked.offset(), leaked.asize());
    assert!(r.out.contains(&want), "want '{want}':\n{}", r.text());
    if let Some(z) = zdb_b(&dir, "sleak") {
        assert!(z.contains(&want), "zdb on the leaking pool, want '{want}':\n{z}");
    }

    // A live block freed in the space map: referenced but free.
    let mut l = space_pool(&dir, "sfree");
    let (dva, birth) = file_block(&mut l, "f2");
    let txg = l.w.txg;
    l.w.alloc.free_dva(&dva, birth, txg).unwrap();
    l.sync();
    l.export();
    let r = rzdb(&["-e", "-p", d, "-b", "sfree"]);
    assert_eq!(r.code, Some(1), "{}", r.text());
    let want = format!("referenced but free: vdev 0, offset {:#x}, size {}", dva.offset(), dva.asize());
    assert!(r.out.contains(&want), "want '{want}':\n{}", r.text());
    if let Some(z) = zdb_b(&dir, "sfree") {
        // zdb's claim of the block fails (ENOENT) and it stops on an assertion there.
        assert!(
            z.contains("zio_claim(") && !z.contains("No leaks"),
            "zdb must fail to claim the freed live block:\n{z}"
        );
    }
    if std::env::var_os("RZFS_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

// ------------------------------------------------------------------------------------------
// The hostile corpus.

const LE: ondisk::ByteOrder = ondisk::ByteOrder::Little;

/// Names that must never become paths: `..`, `.`, a path through a symlink, `/`, NUL.
/// A pool whose root file system's ZIL header names a block that is not a log block (a
/// damaged or hostile image). The import reads the chain as OpenZFS does (it ends at once:
/// the block does not verify as a log block), has nothing to replay, and clears the header
/// without freeing the block, which belongs to the objset: the files read, zdb finds no
/// leak and no double allocation.
#[test]
fn intent_log_header_naming_a_live_block_frees_nothing() {
    let dir = scratch("zil");
    let mut l = Lab::create(&dir, "zil");
    let root = l.root();
    l.file(root, "kept", 0o644, 0, b"synced before the log");
    l.sync();
    let d = l.d();
    let some_bp = d.os.committed().unwrap().phys.meta_dnode.blkptr[0];
    d.os.phys.zil.log = some_bp;
    l.file(root, "more", 0o644, 0, b"x");
    l.export();
    let dm = Daemon::new("hostile-zil");
    let dirs = dir.to_string_lossy().into_owned();
    dm.ok("rzpool", &["import", "-N", "-d", &dirs, "zil"]);
    let mnt = dm.sock.parent().unwrap().join("mnt");
    dm.ok("rzfs", &["mount", "zil", mnt.to_str().unwrap()]);
    assert_eq!(std::fs::read(mnt.join("kept")).unwrap(), b"synced before the log");
    std::fs::write(mnt.join("after"), vec![7u8; 300_000]).unwrap();
    dm.ok("rzpool", &["export", "zil"]);
    if tools::zdb().is_some() {
        tools::zdb_check(&dir, "zil");
    }
}

fn craft_names(l: &mut Lab, outside: &Path) {
    let root = l.root();
    let f = l.file(root, "good", 0o644, 0, b"good data\n");
    l.symlink(root, "lnk", outside.to_str().unwrap());
    for name in [&b".."[..], b".", b"../outside/pwned-dotdot", b"lnk/pwned-slash", b"/abs"] {
        l.raw_entry(root, name, f, 8);
    }
    // A NUL inside a name: only a fat-ZAP leaf can hold one; the writer refuses it, so the
    // leaf's name bytes are patched.
    let d = fat_dir(l, "nul", 3);
    let marker = format!("{:0>60}", 1);
    let maxblkid = l.d().os.committed().unwrap().dnode(d).unwrap().maxblkid;
    let mut patched = false;
    for blkid in 1..=maxblkid {
        let mut b = l.committed_block(d, blkid);
        if let Some(at) = b.windows(20).position(|w| w == &marker.as_bytes()[..20]) {
            b[at + 3] = 0;
            l.d().os.write(d, blkid * b.len() as u64, &b).unwrap();
            patched = true;
        }
    }
    assert!(patched, "no leaf holds {marker}");
}

/// Two entries of one micro-ZAP directory named `a`: first a symlink to OUTSIDE, then a
/// directory holding a file (a copy that creates `dup/a` and then writes `dup/a/pwned`
/// would write through the symlink).
fn craft_dup_name(l: &mut Lab, outside: &Path) {
    let root = l.root();
    let dup = l.mkdir(root, "dup", 0o755);
    l.symlink(dup, "a", outside.to_str().unwrap());
    let b = l.mkdir(dup, "b", 0o755);
    l.file(b, "pwned-dup", 0o644, 0, b"through the symlink\n");
    l.sync();
    let mut blk = l.committed_block(dup, 0);
    let mut patched = 0;
    for slot in 1..blk.len() / 64 {
        let at = slot * 64 + 14;
        if &blk[at..at + 2] == b"b\0" {
            blk[at] = b'a';
            patched += 1;
        }
    }
    assert_eq!(patched, 1, "dup is a micro ZAP holding 'b'");
    l.d().os.write(dup, 0, &blk).unwrap();
}

/// setuid/setgid files owned by root and by a user, and a setgid directory.
fn craft_setuid(l: &mut Lab, _outside: &Path) {
    let root = l.root();
    l.file(root, "suid-root", 0o4755, 0, b"#!/bin/sh\nid -u\n");
    l.file(root, "suid-user", 0o6755, 1000, b"#!/bin/sh\nid -u\n");
    let sg = l.mkdir(root, "sgid-dir", 0o2775);
    l.file(sg, "inner", 0o644, 1000, b"inner\n");
    let ro = l.mkdir(root, "read-only-dir", 0o555);
    l.file(ro, "kept", 0o444, 0, b"a file in a read-only directory\n");
}

/// A directory whose entries name the root and itself.
fn craft_cycle(l: &mut Lab, _outside: &Path) {
    let root = l.root();
    let lp = l.mkdir(root, "loop", 0o755);
    l.file(lp, "f", 0o644, 0, b"in the loop\n");
    l.raw_entry(lp, b"up", root, 4);
    l.raw_entry(lp, b"self", lp, 4);
}

/// 40 levels, each directory linked as both `a` and `b` from its parent: 2^40 paths.
fn craft_dag(l: &mut Lab, _outside: &Path) {
    let root = l.root();
    let mut cur = l.mkdir(root, "dag", 0o755);
    for _ in 0..40 {
        let next = l.mkdir(cur, "a", 0o755);
        l.raw_entry(cur, b"b", next, 4);
        cur = next;
    }
    l.file(cur, "leaf", 0o644, 0, b"deep\n");
}

/// A fat-ZAP directory (long names) with a few entries.
fn fat_dir(l: &mut Lab, name: &str, n: usize) -> u64 {
    let root = l.root();
    let d = l.mkdir(root, name, 0o755);
    for i in 0..n {
        l.file(d, &format!("{i:0>60}"), 0o644, 0, b"x");
    }
    l.sync();
    let b0 = l.committed_block(d, 0);
    assert_eq!(LE.u64_at(&b0, 0, "t").unwrap(), ondisk::zap::ZBT_HEADER, "{name} is a fat ZAP");
    d
}

/// A fat ZAP whose `maxblkid` claims 2^24 blocks (all holes).
fn craft_zap_maxblkid(l: &mut Lab, _outside: &Path) {
    let d = fat_dir(l, "big", 20);
    l.d().os.dirty(d).unwrap().phys.maxblkid = 1 << 24;
}

/// A fat ZAP whose header claims a pointer table of 2^24 blocks and 2^60 entries.
fn craft_zap_table(l: &mut Lab, _outside: &Path) {
    let d = fat_dir(l, "table", 20);
    let mut b0 = l.committed_block(d, 0);
    let mut h = ondisk::zap::FatZapHeader::parse(&b0, LE).unwrap();
    h.ptrtbl = ondisk::zap::ZapTablePhys { blk: 1, numblks: 1 << 24, shift: 35, nextblk: 0, blks_copied: 0 };
    h.num_entries = 1 << 60;
    h.encode_into(&mut b0, LE).unwrap();
    l.d().os.write(d, 0, &b0).unwrap();
}

/// A fat-ZAP directory of 3000 entries whose every value, in every leaf, is one array chunk
/// that chains to itself with 65535 8-byte integers: 512 KiB per entry, 1.5 GiB in all,
/// from a few hundred KiB of leaves.
fn craft_leaf_bomb(l: &mut Lab, _outside: &Path) {
    let root = l.root();
    let d = l.mkdir(root, "bomb", 0o755);
    for i in 0..3000 {
        l.file(d, &format!("n{i}"), 0o644, 0, b"");
    }
    l.sync();
    let maxblkid = l.d().os.committed().unwrap().dnode(d).unwrap().maxblkid;
    let mut leaves = 0;
    for blkid in 1..=maxblkid {
        let mut b = l.committed_block(d, blkid);
        if LE.u64_at(&b, 0, "t").unwrap() != ondisk::zap::ZBT_LEAF {
            continue;
        }
        let shift = b.len().trailing_zeros();
        let hash_entries = 1usize << (shift - 5);
        let nchunks = (b.len() - 2 * hash_entries) / 24 - 2;
        let at = |i: usize| 48 + 2 * hash_entries + i * 24;
        let entries: Vec<usize> = (0..nchunks).filter(|&i| b[at(i)] == 252).collect();
        let Some(&first) = entries.first() else { continue };
        let bomb = LE.u16_at(&b, at(first) + 8, "v").unwrap() as usize;
        LE.put_u16(&mut b, at(bomb) + 22, bomb as u16);
        for &e in &entries {
            LE.put_u16(&mut b, at(e) + 8, bomb as u16);
            LE.put_u16(&mut b, at(e) + 10, u16::MAX);
        }
        l.d().os.write(d, blkid * b.len() as u64, &b).unwrap();
        leaves += 1;
    }
    assert!(leaves >= 5, "bomb has {leaves} leaves");
}

/// A file whose size claims 64 GiB and whose `maxblkid` claims 2^30 blocks: one block stored.
fn craft_huge_file(l: &mut Lab, _outside: &Path) {
    let root = l.root();
    let f = l.file(root, "huge", 0o644, 0, &[7u8; 1000]);
    let d = l.w.dataset(l.ds).unwrap();
    let sa = zpl::write::SetAttr { size: Some(1 << 36), ..Default::default() };
    l.z.setattr(&mut d.os, &mut d.zaps, f, sa, T0).unwrap();
    l.sync();
    l.d().os.dirty(f).unwrap().phys.maxblkid = 1 << 30;
}

/// The pool's `sync_bplist` bpobj claims 2^25 block pointers (4 GiB).
fn craft_bpobj(l: &mut Lab, _outside: &Path) {
    l.sync();
    let obj = l.w.mos_zaps.lookup_u64(&l.w.mos, 1, "sync_bplist").unwrap().expect("sync_bplist");
    let dn = l.w.mos.dnode(obj).unwrap().unwrap();
    let mut h = ondisk::bpobj::BpobjPhys::parse(&dn.bonus, LE).unwrap();
    h.num_blkptrs = 1 << 25;
    l.w.mos.set_bonus(obj, h.encode(LE).unwrap()).unwrap();
}

/// The file system's meta-dnode claims 32 KiB dnode blocks; its one dnode block stays
/// 16 KiB (objects 32..63 would lie past its end). (The `for_each_dnode` panic this used to
/// cause on a one-block MOS is reproduced by the unit test
/// `dmu::tests::short_meta_dnode_block_is_parsed_as_far_as_it_goes`.)
fn craft_short_meta(l: &mut Lab, _outside: &Path) {
    l.sync();
    assert_eq!(l.d().os.phys.meta_dnode.maxblkid, 0, "the file system fits one dnode block");
    l.d().os.phys.meta_dnode.datablkszsec = 64;
    let root = l.root();
    l.file(root, "after", 0o644, 0, b"written after the meta-dnode grew\n");
}

/// The MOS config object claims a packed nvlist of 4 GiB - 1 (read whole, it was allocated
/// whole).
fn craft_config_size(l: &mut Lab, _outside: &Path) {
    let root = l.root();
    l.file(root, "f", 0o644, 0, b"data\n");
    l.config_size = Some(u32::MAX as u64);
}

/// A fifo, a character device (1,3: /dev/null) with the setuid bit, a block device and a
/// socket: without --same-owner only the fifo is made (mode stripped), devices and the socket
/// are reported.
fn craft_special(l: &mut Lab, _outside: &Path) {
    let root = l.root();
    let d = l.w.dataset(l.ds).unwrap();
    for (name, mode, rdev) in [
        ("fifo", 0o016644, 0),
        ("null-dev", 0o024666, (1u64 << 32) | 3),
        ("blk-dev", 0o060600, (7u64 << 32) | 200),
        ("sock", 0o140755, 0),
    ] {
        l.z.create(&mut d.os, &mut d.zaps, root, name.as_bytes(), mode, 0, 0, rdev, T0).unwrap();
    }
}

type Craft = fn(&mut Lab, &Path);

/// (pool name, crafting, whether `rzdb -R` must report skipped entries).
const CORPUS: [(&str, Craft, bool); 13] = [
    ("hnames", craft_names, true),
    ("hdup", craft_dup_name, true),
    ("hsetuid", craft_setuid, false),
    ("hcycle", craft_cycle, true),
    ("hdag", craft_dag, true),
    ("hzapmax", craft_zap_maxblkid, false),
    ("hzaptbl", craft_zap_table, true),
    ("hbomb", craft_leaf_bomb, true),
    ("hhuge", craft_huge_file, false),
    ("hbpobj", craft_bpobj, false),
    ("hshort", craft_short_meta, false),
    ("hconfig", craft_config_size, false),
    ("hspecial", craft_special, true),
];

/// Every path under `root` with its type, mode and size (symlinks not followed), except the
/// directories named in `skip`.
fn snapshot(root: &Path, skip: &[&Path]) -> BTreeMap<PathBuf, (u32, u64, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        if skip.contains(&p.as_path()) {
            continue;
        }
        let Ok(md) = std::fs::symlink_metadata(&p) else { continue };
        let content = if md.is_file() { std::fs::read(&p).unwrap_or_default() } else { Vec::new() };
        out.insert(p.clone(), (md.mode(), md.size(), content));
        if md.is_dir() {
            for e in std::fs::read_dir(&p).unwrap().flatten() {
                stack.push(e.path());
            }
        }
    }
    out
}

/// Paths under `root` with a setuid or setgid bit.
fn privileged(root: &Path) -> Vec<(PathBuf, u32, u32)> {
    snapshot(root, &[])
        .into_iter()
        .filter(|(_, (mode, _, _))| mode & 0o6000 != 0)
        .map(|(p, (mode, _, _))| {
            let uid = std::fs::symlink_metadata(&p).map(|m| m.uid()).unwrap_or(u32::MAX);
            (p, mode, uid)
        })
        .collect()
}

/// The pid of the private daemon serving `d` (found by its socket in its command line).
fn daemon_pid(d: &Daemon) -> Option<u32> {
    let needle = d.sock.to_string_lossy().into_owned();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd);
        (cmd.contains("rzfsd") && cmd.contains(&needle)).then_some(pid)
    })
}

/// Peak RSS of a live process in KiB (`VmHWM`).
fn vm_hwm(pid: u32) -> Option<u64> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    st.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// FUSE and the daemon tests need /dev/fuse and fusermount3, and the oracle tier.
fn fuse_available() -> bool {
    if std::env::var("RZFS_ORACLE").is_ok_and(|v| v == "0") {
        return false;
    }
    let ok = Path::new("/dev/fuse").exists() && Path::new("/usr/bin/fusermount3").exists();
    assert!(ok || !std::env::var("RZFS_ORACLE").is_ok_and(|v| v == "1"), "RZFS_ORACLE=1 but FUSE is missing");
    ok
}

/// Walks a mounted tree breadth first, bounded (a hostile tree may be a cycle or a DAG of
/// 2^40 paths through the kernel's eyes): stat every entry, read the first MiB of files.
/// Errors (EIO on a damaged directory) are expected; the walk must only end.
fn walk_mount(root: &Path) -> (usize, usize) {
    use std::io::Read;
    let (mut seen, mut errors) = (0, 0);
    let mut queue = std::collections::VecDeque::from([(root.to_path_buf(), 0)]);
    while let Some((dir, depth)) = queue.pop_front() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            errors += 1;
            continue;
        };
        for e in rd {
            let Ok(e) = e else {
                errors += 1;
                continue;
            };
            seen += 1;
            if seen > 3000 {
                return (seen, errors);
            }
            let p = e.path();
            match std::fs::symlink_metadata(&p) {
                Ok(md) if md.is_dir() && depth < 8 => queue.push_back((p, depth + 1)),
                Ok(md) if md.is_file() => {
                    let mut buf = Vec::new();
                    if std::fs::File::open(&p).and_then(|f| f.take(1 << 20).read_to_end(&mut buf)).is_err() {
                        errors += 1;
                    }
                }
                Ok(_) => {}
                Err(_) => errors += 1,
            }
        }
    }
    (seen, errors)
}

/// Read-only import, mount and walk, then a read-write import, through a private daemon:
/// clear results, a daemon that stays up, and its peak RSS under the bound.
fn through_daemon(dir: &Path, name: &str) {
    let d = Daemon::new(&format!("hostile-{name}"));
    let dirs = dir.to_string_lossy().into_owned();
    let (code, _, err) = d.run("rzpool", &["import", "-N", "-d", &dirs, "-o", "readonly=on", name]);
    assert_eq!(code, 0, "{name}: read-only import: {err}");
    let mnt = d.sock.parent().unwrap().join("mnt");
    let mnts = mnt.to_string_lossy().into_owned();
    let (code, _, err) = d.run("rzfs", &["mount", name, &mnts]);
    if code == 0 {
        let (seen, errors) = walk_mount(&mnt);
        eprintln!("{name}: FUSE walk: {seen} entries, {errors} errors");
        d.ok("rzfs", &["unmount", &mnts]);
    } else {
        assert!(!err.trim().is_empty() && !err.contains("panicked"), "{name}: mount: {err}");
        eprintln!("{name}: mount refused: {}", err.trim());
    }
    d.ok("rzpool", &["export", name]);
    let (code, _, err) = d.run("rzpool", &["import", "-N", "-d", &dirs, name]);
    if code == 0 {
        d.ok("rzpool", &["export", name]);
    } else {
        assert!(!err.trim().is_empty() && !err.contains("panicked"), "{name}: read-write import: {err}");
        eprintln!("{name}: read-write import refused: {}", err.trim());
    }
    d.ok("rzpool", &["list"]);
    let pid = daemon_pid(&d).expect("the daemon is still running");
    let hwm = vm_hwm(pid).expect("VmHWM of the daemon");
    assert!(hwm < RSS_LIMIT_KIB, "{name}: daemon peak RSS {hwm} KiB");
    eprintln!("{name}: daemon peak RSS {hwm} KiB");
}

/// Without `--same-owner` files belong to the caller and lose setuid/setgid; with it, owners
/// and the bits come back (as `tar --same-owner`). Directory modes are applied after their
/// contents: a read-only directory still holds its file.
fn check_owners(dest: &Path, dest_owner: &Path) {
    let md = |p: PathBuf| std::fs::symlink_metadata(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let me = rustix::process::geteuid().as_raw();
    let u = md(dest.join("suid-user"));
    assert_eq!((u.uid(), u.mode() & 0o7777), (me, 0o755), "suid-user without --same-owner");
    let r = md(dest.join("suid-root"));
    assert_eq!(r.mode() & 0o7777, 0o755, "suid-root without --same-owner");
    let u = md(dest_owner.join("suid-user"));
    assert_eq!((u.uid(), u.gid(), u.mode() & 0o7777), (1000, 1000, 0o6755), "suid-user with --same-owner");
    let sg = md(dest_owner.join("sgid-dir"));
    assert_eq!(sg.mode() & 0o7777, 0o2775, "sgid-dir with --same-owner");
    for root in [dest, dest_owner] {
        assert_eq!(md(root.join("read-only-dir")).mode() & 0o7777, 0o555);
        assert_eq!(
            std::fs::read(root.join("read-only-dir/kept")).unwrap(),
            b"a file in a read-only directory\n"
        );
    }
}

fn check_special(dest: &Path, dest_owner: &Path, err: &str) {
    use std::os::unix::fs::FileTypeExt;
    let fifo = std::fs::symlink_metadata(dest.join("fifo")).unwrap();
    assert!(fifo.file_type().is_fifo() && fifo.mode() & 0o7777 == 0o644, "fifo: {:o}", fifo.mode());
    for n in ["null-dev", "blk-dev", "sock"] {
        assert!(std::fs::symlink_metadata(dest.join(n)).is_err(), "{n} created without --same-owner");
        assert!(err.contains(&format!("skipped /{n}")), "{n} not reported:\n{err}");
    }
    let dev = std::fs::symlink_metadata(dest_owner.join("null-dev")).unwrap();
    assert!(dev.file_type().is_char_device(), "null-dev with --same-owner");
    assert_eq!((dev.rdev(), dev.mode() & 0o7777), (rustix::fs::makedev(1, 3), 0o4666));
}

#[test]
fn hostile_pools_are_read_safely() {
    let fuse = fuse_available();
    let dir = scratch("corpus");
    let d = dir.to_str().unwrap().to_string();
    for (name, craft, skips) in CORPUS {
        let sandbox = dir.join(format!("{name}-box"));
        let outside = sandbox.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("sentinel"), b"must stay alone\n").unwrap();
        let mut l = Lab::create(&dir, name);
        craft(&mut l, &outside);
        l.sync();
        l.export();

        let r = rzdb(&["-e", "-p", &d, "-b", name]);
        assert_clean_end(&format!("{name}: rzdb -b"), &r);
        eprintln!("{name}: rzdb -b: exit {:?}, peak {} KiB: {}", r.code, r.maxrss, r.err.trim());

        let dest = sandbox.join("dest");
        let dest_owner = sandbox.join("dest-owner");
        let before = snapshot(&sandbox, &[&dest, &dest_owner]);
        let r = rzdb(&["-e", "-p", &d, "-R", name, dest.to_str().unwrap()]);
        assert_clean_end(&format!("{name}: rzdb -R"), &r);
        if skips {
            assert_eq!(r.code, Some(1), "{name}: rzdb -R must report skipped entries\n{}", r.text());
            assert!(r.err.contains("skipped"), "{name}: {}", r.text());
        } else {
            assert_eq!(r.code, Some(0), "{name}: rzdb -R\n{}", r.text());
        }
        let p = privileged(&dest);
        assert!(p.is_empty(), "{name}: setuid/setgid entries without --same-owner: {p:?}");
        let r2 = rzdb(&["-e", "-p", &d, "-R", "--same-owner", name, dest_owner.to_str().unwrap()]);
        assert_clean_end(&format!("{name}: rzdb -R --same-owner"), &r2);
        if name == "hsetuid" {
            check_owners(&dest, &dest_owner);
        }
        if name == "hspecial" {
            check_special(&dest, &dest_owner, &r.err);
        }
        assert_eq!(
            before,
            snapshot(&sandbox, &[&dest, &dest_owner]),
            "{name}: something was written outside DEST"
        );
        // A second copy into the now populated DEST is refused.
        if std::fs::read_dir(&dest).unwrap().next().is_some() {
            let r3 = rzdb(&["-e", "-p", &d, "-R", name, dest.to_str().unwrap()]);
            assert_eq!(r3.code, Some(1), "{name}: {}", r3.text());
            assert!(r3.err.contains("not empty"), "{name}: {}", r3.text());
        }
        eprintln!("{name}: rzdb -R: {}", r.err.lines().chain(r.out.lines()).last().unwrap_or(""));
        if fuse {
            through_daemon(&dir, name);
        }
    }
    if std::env::var_os("RZFS_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
