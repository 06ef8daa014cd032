//! Tests of the ZPL write layer on an in-memory objset (nothing is synced, so a `Zio` over
//! zero vdevs serves).

use super::*;
use dmu::Reader;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const T0: (u64, u64) = (1_700_000_000, 5);
const T1: (u64, u64) = (1_700_000_100, 7);
const RS: u64 = 128 << 10;

fn fresh() -> (DirtyObjset, ZapCache, ZplWriter) {
    let reader = Reader::new(
        Arc::new(zio::Zio::new(Vec::new(), Default::default())),
        Arc::new(arc::BlockCache::new(1 << 20)),
    );
    let mut os = DirtyObjset::create(&reader, ondisk::objset::DMU_OST_ZFS);
    let mut zaps = ZapCache::new();
    let w = ZplWriter::create_fs(&mut os, &mut zaps, T0, 1000, 100).unwrap();
    (os, zaps, w)
}

fn errno<T: std::fmt::Debug>(r: Result<T>) -> i32 {
    r.expect_err("expected an error").errno()
}

#[test]
fn new_filesystem_layout() {
    let (os, mut zaps, w) = fresh();
    // Objects in zfs_create_fs order: master, SA master, unlinked set, root, registry, layouts.
    assert_eq!(os.objects().unwrap(), vec![1, 2, 3, 4, 5, 6]);
    let types: Vec<u8> = (1..=6).map(|o| os.dnode(o).unwrap().unwrap().object_type).collect();
    assert_eq!(types, vec![21, 45, 22, 20, 46, 47]);
    assert_eq!(w.root(), 4);
    let m: BTreeMap<Vec<u8>, u64> =
        zaps.entries(&os, 1).unwrap().into_iter().map(|(k, v)| (k, v.values[0])).collect();
    let want: BTreeMap<Vec<u8>, u64> = [
        ("DELETE_QUEUE", 3),
        ("ROOT", 4),
        ("SA_ATTRS", 2),
        ("VERSION", 5),
        ("casesensitivity", 0),
        ("normalization", 0),
        ("utf8only", 0),
    ]
    .into_iter()
    .map(|(k, v)| (k.as_bytes().to_vec(), v))
    .collect();
    assert_eq!(m, want);
    assert_eq!(zaps.lookup_u64(&os, 2, "REGISTRY").unwrap(), Some(5));
    assert_eq!(zaps.lookup_u64(&os, 2, "LAYOUTS").unwrap(), Some(6));
    // Every ZPL attribute is registered, numbered as OpenZFS numbers them.
    let reg = zaps.entries(&os, 5).unwrap();
    assert_eq!(reg.len(), 23);
    let get = |n: &str| reg.iter().find(|(k, _)| k == n.as_bytes()).unwrap().1.values[0];
    assert_eq!(get("ZPL_MODE"), ondisk::sa::encode_registry_value(5, 8, 0));
    assert_eq!(get("ZPL_DACL_ACES"), 0x40013);
    assert_eq!(get("ZPL_ZNODE_ACL"), 0x5803000f);
    // Layout 2 is zfs_mknode's order for a directory.
    let lay = zaps.lookup(&os, 6, b"2").unwrap().unwrap();
    assert_eq!(lay.int_size, 2);
    assert_eq!(lay.values, vec![5, 6, 4, 12, 13, 7, 11, 0, 1, 2, 3, 8, 16, 19]);
    // The root: as zdb shows a fresh dataset's root.
    let a = w.getattr(&os, 4).unwrap();
    assert_eq!((a.mode, a.size, a.links, a.parent, a.uid, a.gid), (0o40755, 2, 2, 4, 1000, 100));
    assert_eq!(a.flags, 0x408_0000_0144);
    assert_eq!((a.atime, a.mtime, a.ctime, a.crtime), (T0, T0, T0, T0));
    let dn = os.dnode(4).unwrap().unwrap();
    assert_eq!((dn.bonustype, dn.nblkptr, dn.bonuslen), (44, 1, 168));
    assert!(zaps.entries(&os, 3).unwrap().is_empty());
}

#[test]
fn reopen_continues_layout_numbers() {
    let (mut os, mut zaps, mut w) = fresh();
    w.create(&mut os, &mut zaps, 4, b"f", 0o644, 0, 0, 0, T0).unwrap();
    let mut w2 = ZplWriter::open(&os, &mut zaps).unwrap();
    assert_eq!(w2.root(), 4);
    // A char device needs a new layout (RDEV): number 3 for w2, as for w.
    let dev = w2.create(&mut os, &mut zaps, 4, b"dev", 0o20600, 0, 0, 0x0880_0001, T1).unwrap();
    assert_eq!(w2.getattr(&os, dev).unwrap().rdev, 0x0880_0001);
    let lay = zaps.lookup(&os, 6, b"3").unwrap().unwrap();
    assert_eq!(lay.values, vec![5, 6, 4, 12, 13, 7, 11, 0, 1, 2, 3, 8, 10, 16, 19]);
    assert_eq!(zaps.len(&os, 6).unwrap(), 2);
    // One writer per objset: a third one sees what the second wrote.
    drop(w);
    let w3 = ZplWriter::open(&os, &mut zaps).unwrap();
    assert_eq!(w3.getattr(&os, dev).unwrap().mode, 0o20600);
}

#[test]
fn create_lookup_readdir() {
    let (mut os, mut zaps, mut w) = fresh();
    w.txg = 42;
    let f = w.create(&mut os, &mut zaps, 4, b"file", 0o644, 7, 8, 0, T1).unwrap();
    let d = w.mkdir(&mut os, &mut zaps, 4, b"dir", 0o755, 7, 8, T1).unwrap();
    let fifo = w.create(&mut os, &mut zaps, d, b"fifo", 0o10600, 7, 8, 0, T1).unwrap();
    let a = w.getattr(&os, f).unwrap();
    assert_eq!((a.mode, a.size, a.links, a.parent, a.gen, a.uid, a.gid), (0o100644, 0, 1, 4, 42, 7, 8));
    assert_eq!(a.flags, 0x408_0000_0004);
    assert_eq!(os.dnode(f).unwrap().unwrap().object_type, 19);
    assert_eq!(os.dnode(d).unwrap().unwrap().object_type, 20);
    let root = w.getattr(&os, 4).unwrap();
    assert_eq!((root.size, root.links, root.mtime, root.ctime), (4, 3, T1, T1));
    assert_eq!(w.getattr(&os, fifo).unwrap().kind(), FileType::Fifo);
    // Directory entries pack the type in the top 4 bits.
    assert_eq!(zaps.lookup(&os, 4, b"file").unwrap().unwrap().values, vec![(8 << 60) | f]);
    assert_eq!(zaps.lookup(&os, 4, b"dir").unwrap().unwrap().values, vec![(4 << 60) | d]);
    assert_eq!(w.lookup(&os, &mut zaps, 4, b"file").unwrap(), Some(f));
    assert_eq!(w.lookup(&os, &mut zaps, 4, b"nope").unwrap(), None);
    assert_eq!(w.lookup(&os, &mut zaps, d, b"..").unwrap(), Some(4));
    assert_eq!(w.lookup(&os, &mut zaps, 4, b"..").unwrap(), Some(4));
    assert_eq!(w.lookup(&os, &mut zaps, d, b".").unwrap(), Some(d));
    let list = w.readdir(&os, &mut zaps, 4).unwrap();
    assert_eq!(
        list,
        vec![(b"dir".to_vec(), d, FileType::Directory), (b"file".to_vec(), f, FileType::Regular)]
    );
    // Errors.
    assert_eq!(errno(w.create(&mut os, &mut zaps, 4, b"file", 0o644, 0, 0, 0, T1)), EEXIST);
    assert_eq!(errno(w.mkdir(&mut os, &mut zaps, 4, b".", 0o755, 0, 0, T1)), EEXIST);
    assert_eq!(errno(w.create(&mut os, &mut zaps, f, b"x", 0o644, 0, 0, 0, T1)), ENOTDIR);
    assert_eq!(errno(w.lookup(&os, &mut zaps, f, b"x")), ENOTDIR);
    let long = vec![b'a'; 256];
    assert_eq!(errno(w.create(&mut os, &mut zaps, 4, &long, 0o644, 0, 0, 0, T1)), ENAMETOOLONG);
    assert!(w.create(&mut os, &mut zaps, 4, &long[..255], 0o644, 0, 0, 0, T1).is_ok());
    assert_eq!(errno(w.create(&mut os, &mut zaps, 4, b"a/b", 0o644, 0, 0, 0, T1)), EINVAL);
    assert_eq!(errno(w.create(&mut os, &mut zaps, 4, b"", 0o644, 0, 0, 0, T1)), ENOENT);
    assert_eq!(errno(w.getattr(&os, 999)), ENOENT);
}

#[test]
fn setgid_directories_pass_group_on() {
    let (mut os, mut zaps, mut w) = fresh();
    let d = w.mkdir(&mut os, &mut zaps, 4, b"g", 0o2775, 1, 50, T0).unwrap();
    let sub = w.mkdir(&mut os, &mut zaps, d, b"sub", 0o755, 2, 60, T0).unwrap();
    let f = w.create(&mut os, &mut zaps, d, b"f", 0o644, 2, 60, 0, T0).unwrap();
    let a = w.getattr(&os, sub).unwrap();
    assert_eq!((a.mode, a.gid), (0o42755, 50));
    let a = w.getattr(&os, f).unwrap();
    assert_eq!((a.mode, a.gid), (0o100644, 50));
}

#[test]
fn write_read_and_block_sizes() {
    let (mut os, mut zaps, mut w) = fresh();
    let f = w.create(&mut os, &mut zaps, 4, b"f", 0o644, 0, 0, 0, T0).unwrap();
    let bs = |os: &DirtyObjset| os.dnode(f).unwrap().unwrap().data_block_size();
    assert_eq!(bs(&os), 512);
    w.write(&mut os, &mut zaps, f, 0, &[1u8; 1000], RS, T1).unwrap();
    assert_eq!(bs(&os), 1024);
    w.write(&mut os, &mut zaps, f, 1000, &[2u8; 500], RS, T1).unwrap();
    assert_eq!(bs(&os), 1536, "grows to the size rounded up to 512, not to a power of two");
    let a = w.getattr(&os, f).unwrap();
    assert_eq!((a.size, a.mtime, a.ctime), (1500, T1, T1));
    let data = w.read(&os, f, 0, 10_000).unwrap();
    assert_eq!(data.len(), 1500);
    assert!(data[..1000].iter().all(|&b| b == 1) && data[1000..].iter().all(|&b| b == 2));
    // Past one block: the block size jumps to the recordsize, then stays.
    w.write(&mut os, &mut zaps, f, 200_000, b"tail", RS, T1).unwrap();
    assert_eq!(bs(&os), RS);
    assert_eq!(w.getattr(&os, f).unwrap().size, 200_004);
    let mid = w.read(&os, f, 1490, 20).unwrap();
    assert_eq!(&mid[..10], &[2u8; 10]);
    assert_eq!(&mid[10..], &[0u8; 10]);
    assert_eq!(w.read(&os, f, 200_000, 100).unwrap(), b"tail");
    assert!(w.read(&os, f, 300_000, 100).unwrap().is_empty());
    // Small recordsize: a file fixed at 4K blocks.
    let g = w.create(&mut os, &mut zaps, 4, b"g", 0o644, 0, 0, 0, T0).unwrap();
    w.write(&mut os, &mut zaps, g, 0, &[9u8; 10_000], 4096, T1).unwrap();
    assert_eq!(os.dnode(g).unwrap().unwrap().data_block_size(), 4096);
    assert_eq!(w.read(&os, g, 0, 20_000).unwrap(), vec![9u8; 10_000]);
    // Errors.
    assert_eq!(errno(w.write(&mut os, &mut zaps, 4, 0, b"x", RS, T1)), EISDIR);
    assert_eq!(errno(w.write(&mut os, &mut zaps, f, u64::MAX - 1, b"xx", RS, T1)), EFBIG);
    assert_eq!(errno(w.read(&os, 4, 0, 1)), EISDIR);
}

#[test]
fn truncate_and_punch_hole() {
    let (mut os, mut zaps, mut w) = fresh();
    let f = w.create(&mut os, &mut zaps, 4, b"f", 0o644, 0, 0, 0, T0).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8 + 1).collect();
    w.write(&mut os, &mut zaps, f, 0, &data, RS, T0).unwrap();
    w.truncate(&mut os, &mut zaps, f, 150_000, T1).unwrap();
    let a = w.getattr(&os, f).unwrap();
    assert_eq!((a.size, a.mtime), (150_000, T1));
    assert_eq!(w.read(&os, f, 0, 1 << 20).unwrap(), data[..150_000]);
    // Extending reads zeros, not the old bytes.
    w.truncate(&mut os, &mut zaps, f, 160_000, T1).unwrap();
    let back = w.read(&os, f, 149_990, 100).unwrap();
    assert_eq!(&back[..10], &data[149_990..150_000]);
    assert!(back[10..].iter().all(|&b| b == 0));
    // Punch a hole across a block boundary; the size stays.
    w.punch_hole(&mut os, &mut zaps, f, 100_000, 40_000, T1).unwrap();
    let got = w.read(&os, f, 0, 1 << 20).unwrap();
    assert_eq!(got.len(), 160_000);
    assert_eq!(&got[..100_000], &data[..100_000]);
    assert!(got[100_000..140_000].iter().all(|&b| b == 0));
    assert_eq!(&got[140_000..150_000], &data[140_000..150_000]);
    assert!(got[150_000..].iter().all(|&b| b == 0));
    // Truncation of a small file keeps its block size; extension grows it.
    let g = w.create(&mut os, &mut zaps, 4, b"g", 0o644, 0, 0, 0, T0).unwrap();
    w.truncate(&mut os, &mut zaps, g, 3000, T1).unwrap();
    assert_eq!(os.dnode(g).unwrap().unwrap().data_block_size(), 3072);
    assert_eq!(w.read(&os, g, 0, 5000).unwrap(), vec![0u8; 3000]);
    w.truncate(&mut os, &mut zaps, g, 0, T1).unwrap();
    assert!(w.read(&os, g, 0, 5000).unwrap().is_empty());
    let sa = SetAttr { size: Some(10), ..Default::default() };
    assert_eq!(w.setattr(&mut os, &mut zaps, g, sa, T1).unwrap().size, 10);
    assert_eq!(errno(w.truncate(&mut os, &mut zaps, 4, 0, T1)), EISDIR);
}

#[test]
fn links_unlink_and_unlinked_set() {
    let (mut os, mut zaps, mut w) = fresh();
    let d = w.mkdir(&mut os, &mut zaps, 4, b"d", 0o755, 0, 0, T0).unwrap();
    let f = w.create(&mut os, &mut zaps, 4, b"f", 0o644, 0, 0, 0, T0).unwrap();
    w.write(&mut os, &mut zaps, f, 0, b"hello", RS, T0).unwrap();
    w.link(&mut os, &mut zaps, f, d, b"g", T1).unwrap();
    let a = w.getattr(&os, f).unwrap();
    assert_eq!((a.links, a.parent, a.ctime), (2, d, T1));
    assert_eq!(w.getattr(&os, d).unwrap().size, 3);
    assert_eq!(errno(w.link(&mut os, &mut zaps, d, 4, b"dl", T1)), EPERM);
    assert_eq!(errno(w.link(&mut os, &mut zaps, f, d, b"g", T1)), EEXIST);
    assert_eq!(w.unlink(&mut os, &mut zaps, 4, b"f", false, T1).unwrap(), None);
    assert_eq!(w.getattr(&os, f).unwrap().links, 1);
    assert_eq!(errno(w.unlink(&mut os, &mut zaps, 4, b"f", false, T1)), ENOENT);
    assert_eq!(errno(w.unlink(&mut os, &mut zaps, 4, b"d", false, T1)), EISDIR);
    // Last link of an open file: kept in the unlinked set until released.
    assert_eq!(w.unlink(&mut os, &mut zaps, d, b"g", true, T1).unwrap(), Some(f));
    assert_eq!(w.getattr(&os, f).unwrap().links, 0);
    assert_eq!(w.read(&os, f, 0, 10).unwrap(), b"hello");
    let set = zaps.entries(&os, 3).unwrap();
    assert_eq!(set, vec![(format!("{f:x}").into_bytes(), ZapVal::u64(f))]);
    assert_eq!(errno(w.link(&mut os, &mut zaps, f, d, b"again", T1)), ENOENT);
    w.release_unlinked(&mut os, &mut zaps, f).unwrap();
    assert!(os.dnode(f).unwrap().is_none());
    assert!(zaps.entries(&os, 3).unwrap().is_empty());
    assert_eq!(errno(w.release_unlinked(&mut os, &mut zaps, f)), ENOENT);
    // Not kept: freed at once.
    let h = w.create(&mut os, &mut zaps, d, b"h", 0o644, 0, 0, 0, T0).unwrap();
    assert_eq!(w.unlink(&mut os, &mut zaps, d, b"h", false, T1).unwrap(), Some(h));
    assert!(os.dnode(h).unwrap().is_none());
    // drain_unlinked empties the set.
    let k = w.create(&mut os, &mut zaps, d, b"k", 0o644, 0, 0, 0, T0).unwrap();
    w.unlink(&mut os, &mut zaps, d, b"k", true, T1).unwrap();
    assert_eq!(w.drain_unlinked(&mut os, &mut zaps).unwrap(), 1);
    assert!(os.dnode(k).unwrap().is_none());
}

#[test]
fn mkdir_rmdir_link_counts() {
    let (mut os, mut zaps, mut w) = fresh();
    let a = w.mkdir(&mut os, &mut zaps, 4, b"a", 0o700, 0, 0, T0).unwrap();
    let b = w.mkdir(&mut os, &mut zaps, a, b"b", 0o700, 0, 0, T0).unwrap();
    w.create(&mut os, &mut zaps, b, b"f", 0o600, 0, 0, 0, T0).unwrap();
    assert_eq!(w.getattr(&os, 4).unwrap().links, 3);
    assert_eq!(w.getattr(&os, a).unwrap().links, 3);
    assert_eq!(w.getattr(&os, b).unwrap().links, 2);
    assert_eq!(w.getattr(&os, a).unwrap().flags, 0x408_0000_0044, "0700: not every class may execute");
    assert_eq!(errno(w.rmdir(&mut os, &mut zaps, a, b"b", T1)), ENOTEMPTY);
    assert_eq!(errno(w.rmdir(&mut os, &mut zaps, b, b"f", T1)), ENOTDIR);
    assert_eq!(errno(w.rmdir(&mut os, &mut zaps, a, b".", T1)), EINVAL);
    assert_eq!(errno(w.rmdir(&mut os, &mut zaps, a, b"zz", T1)), ENOENT);
    w.unlink(&mut os, &mut zaps, b, b"f", false, T1).unwrap();
    w.rmdir(&mut os, &mut zaps, a, b"b", T1).unwrap();
    assert!(os.dnode(b).unwrap().is_none());
    let at = w.getattr(&os, a).unwrap();
    assert_eq!((at.links, at.size, at.mtime), (2, 2, T1));
    w.rmdir(&mut os, &mut zaps, 4, b"a", T1).unwrap();
    assert_eq!(os.objects().unwrap(), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(w.getattr(&os, 4).unwrap().links, 2);
}

#[test]
fn rename_rules() {
    let (mut os, mut zaps, mut w) = fresh();
    let a = w.mkdir(&mut os, &mut zaps, 4, b"a", 0o755, 0, 0, T0).unwrap();
    let b = w.mkdir(&mut os, &mut zaps, 4, b"b", 0o755, 0, 0, T0).unwrap();
    let sub = w.mkdir(&mut os, &mut zaps, a, b"sub", 0o755, 0, 0, T0).unwrap();
    let f = w.create(&mut os, &mut zaps, a, b"f", 0o644, 0, 0, 0, T0).unwrap();
    let g = w.create(&mut os, &mut zaps, b, b"g", 0o644, 0, 0, 0, T0).unwrap();
    // A directory across directories: parent and link counts follow.
    w.rename(&mut os, &mut zaps, a, b"sub", b, b"sub2", false, false, T1).unwrap();
    assert_eq!(w.getattr(&os, sub).unwrap().parent, b);
    assert_eq!(w.lookup(&os, &mut zaps, sub, b"..").unwrap(), Some(b));
    assert_eq!((w.getattr(&os, a).unwrap().links, w.getattr(&os, b).unwrap().links), (2, 3));
    assert_eq!((w.getattr(&os, a).unwrap().size, w.getattr(&os, b).unwrap().size), (3, 4));
    // Into its own subtree.
    assert_eq!(errno(w.rename(&mut os, &mut zaps, 4, b"b", sub, b"x", false, false, T1)), EINVAL);
    assert_eq!(errno(w.rename(&mut os, &mut zaps, 4, b"b", b, b"x", false, false, T1)), EINVAL);
    // File over file: the replaced file goes.
    assert_eq!(w.rename(&mut os, &mut zaps, a, b"f", b, b"g", false, false, T1).unwrap(), Some(g));
    assert!(os.dnode(g).unwrap().is_none());
    assert_eq!(w.lookup(&os, &mut zaps, b, b"g").unwrap(), Some(f));
    assert_eq!(w.lookup(&os, &mut zaps, a, b"f").unwrap(), None);
    assert_eq!(w.getattr(&os, f).unwrap().parent, b);
    // Type mismatches, noreplace, non-empty targets.
    let e = w.mkdir(&mut os, &mut zaps, 4, b"e", 0o755, 0, 0, T0).unwrap();
    assert_eq!(errno(w.rename(&mut os, &mut zaps, b, b"g", 4, b"e", false, false, T1)), EISDIR);
    assert_eq!(errno(w.rename(&mut os, &mut zaps, 4, b"e", b, b"g", false, false, T1)), ENOTDIR);
    assert_eq!(errno(w.rename(&mut os, &mut zaps, 4, b"a", 4, b"b", false, false, T1)), ENOTEMPTY);
    assert_eq!(errno(w.rename(&mut os, &mut zaps, 4, b"a", 4, b"e", true, false, T1)), EEXIST);
    assert_eq!(errno(w.rename(&mut os, &mut zaps, 4, b"nope", 4, b"x", false, false, T1)), ENOENT);
    // Empty directory over empty directory.
    assert_eq!(w.rename(&mut os, &mut zaps, 4, b"a", 4, b"e", false, false, T1).unwrap(), Some(e));
    assert!(os.dnode(e).unwrap().is_none());
    assert_eq!(w.getattr(&os, 4).unwrap().links, 4);
    // Same object under both names: nothing happens.
    w.link(&mut os, &mut zaps, f, b, b"g2", T1).unwrap();
    w.rename(&mut os, &mut zaps, b, b"g", b, b"g2", false, false, T1).unwrap();
    assert_eq!(w.getattr(&os, f).unwrap().links, 2);
    // Rename onto itself.
    w.rename(&mut os, &mut zaps, b, b"g", b, b"g", false, false, T1).unwrap();
    assert_eq!(w.lookup(&os, &mut zaps, b, b"g").unwrap(), Some(f));
    // Replaced open file is kept in the unlinked set.
    let h = w.create(&mut os, &mut zaps, 4, b"h", 0o644, 0, 0, 0, T0).unwrap();
    let i = w.create(&mut os, &mut zaps, 4, b"i", 0o644, 0, 0, 0, T0).unwrap();
    assert_eq!(w.rename(&mut os, &mut zaps, 4, b"h", 4, b"i", false, true, T1).unwrap(), Some(i));
    assert_eq!(zaps.len(&os, 3).unwrap(), 1);
    w.release_unlinked(&mut os, &mut zaps, i).unwrap();
    assert_eq!(w.lookup(&os, &mut zaps, 4, b"i").unwrap(), Some(h));
}

#[test]
fn symlinks() {
    let (mut os, mut zaps, mut w) = fresh();
    let s = w.symlink(&mut os, &mut zaps, 4, b"l", b"/some/target", 0, 0, T0).unwrap();
    let a = w.getattr(&os, s).unwrap();
    assert_eq!((a.mode, a.size, a.kind()), (0o120777, 12, FileType::Symlink));
    assert_eq!(w.readlink(&os, s).unwrap(), b"/some/target");
    assert_eq!(zaps.lookup(&os, 4, b"l").unwrap().unwrap().values, vec![(10 << 60) | s]);
    // SYMLINK is appended after zfs_mknode's attributes.
    let lay = zaps.lookup(&os, 6, b"3").unwrap().unwrap();
    assert_eq!(lay.values, vec![5, 6, 4, 12, 13, 7, 11, 0, 1, 2, 3, 8, 16, 19, 17]);
    // The longest target that fits the 320-byte bonus: 320 - 16 - 136 - 24.
    let t = vec![b'x'; 144];
    let s2 = w.symlink(&mut os, &mut zaps, 4, b"l2", &t, 0, 0, T0).unwrap();
    assert_eq!(w.readlink(&os, s2).unwrap(), t);
    assert_eq!(os.dnode(s2).unwrap().unwrap().bonuslen, 320);
    let t = vec![b'x'; 145];
    assert_eq!(errno(w.symlink(&mut os, &mut zaps, 4, b"l3", &t, 0, 0, T0)), ENAMETOOLONG);
    assert_eq!(w.lookup(&os, &mut zaps, 4, b"l3").unwrap(), None);
    assert_eq!(errno(w.symlink(&mut os, &mut zaps, 4, b"l4", b"", 0, 0, T0)), ENOENT);
    assert_eq!(errno(w.readlink(&os, 4)), EINVAL);
    assert_eq!(errno(w.write(&mut os, &mut zaps, s, 0, b"x", RS, T1)), EINVAL);
}

#[test]
fn setattr_chmod_chown_times() {
    let (mut os, mut zaps, mut w) = fresh();
    let f = w.create(&mut os, &mut zaps, 4, b"f", 0o644, 0, 0, 0, T0).unwrap();
    let sa = SetAttr {
        mode: Some(0o604),
        uid: Some(5),
        gid: Some(6),
        atime: Some((1, 2)),
        mtime: Some((3, 4)),
        size: None,
    };
    let a = w.setattr(&mut os, &mut zaps, f, sa, T1).unwrap();
    assert_eq!((a.mode, a.uid, a.gid, a.atime, a.mtime, a.ctime), (0o100604, 5, 6, (1, 2), (3, 4), T1));
    // 0604 needs 5 ACEs (owner@ allow, group@ deny, then the three allows).
    let n = w.sa.nums;
    let z = w.load(&os, f).unwrap();
    assert_eq!(z.rec.u64(n.dacl_count), 5);
    assert_eq!(z.rec.get(n.dacl_aces).unwrap().len(), 40);
    let a =
        w.setattr(&mut os, &mut zaps, f, SetAttr { mode: Some(0o4755), ..Default::default() }, T1).unwrap();
    assert_eq!((a.mode, a.flags), (0o104755, 0x408_0000_0104));
    assert_eq!(w.load(&os, f).unwrap().rec.u64(n.dacl_count), 3);
    // chmod never changes the file type.
    let a =
        w.setattr(&mut os, &mut zaps, 4, SetAttr { mode: Some(0o40700), ..Default::default() }, T1).unwrap();
    assert_eq!(a.mode, 0o40700);
    assert_eq!(
        errno(w.setattr(&mut os, &mut zaps, 4, SetAttr { size: Some(0), ..Default::default() }, T1)),
        EISDIR
    );
    // Only one layout for plain files is used whatever the ACL size.
    assert_eq!(zaps.len(&os, 6).unwrap(), 1);
}

#[test]
fn xattrs_in_hidden_directory() {
    let (mut os, mut zaps, mut w) = fresh();
    let f = w.create(&mut os, &mut zaps, 4, b"f", 0o644, 11, 12, 0, T0).unwrap();
    assert_eq!(errno(w.getxattr(&os, &mut zaps, f, b"user.a")), ENODATA);
    assert!(w.listxattr(&os, &mut zaps, f).unwrap().is_empty());
    assert_eq!(errno(w.removexattr(&mut os, &mut zaps, f, b"user.a", T1)), ENODATA);
    w.setxattr(&mut os, &mut zaps, f, b"user.a", b"value-1", 0, T1).unwrap();
    w.setxattr(&mut os, &mut zaps, f, b"user.b", &[7u8; 3000], 0, T1).unwrap();
    assert_eq!(w.getxattr(&os, &mut zaps, f, b"user.a").unwrap(), b"value-1");
    assert_eq!(w.getxattr(&os, &mut zaps, f, b"user.b").unwrap(), vec![7u8; 3000]);
    let a = w.getattr(&os, f).unwrap();
    assert_eq!(a.ctime, T1);
    let x = a.xattr_dir;
    let xa = w.getattr(&os, x).unwrap();
    assert_eq!((xa.mode, xa.parent, xa.uid, xa.gid), (0o41777, f, 11, 12));
    assert_eq!(xa.flags & 1, 1, "ZFS_XATTR");
    let files = w.readdir(&os, &mut zaps, x).unwrap();
    assert_eq!(files.len(), 2);
    let xf = w.getattr(&os, files[0].1).unwrap();
    assert_eq!((xf.mode, xf.parent, xf.flags & 1), (0o100644, x, 1));
    // XATTR was appended to the file's layout.
    let z = w.load(&os, f).unwrap();
    assert_eq!(z.rec.attrs.last().unwrap().0, w.sa.nums.xattr);
    // Replace with a shorter value; flags.
    w.setxattr(&mut os, &mut zaps, f, b"user.b", b"short", 0, T1).unwrap();
    assert_eq!(w.getxattr(&os, &mut zaps, f, b"user.b").unwrap(), b"short");
    assert_eq!(errno(w.setxattr(&mut os, &mut zaps, f, b"user.b", b"x", XATTR_CREATE, T1)), EEXIST);
    assert_eq!(errno(w.setxattr(&mut os, &mut zaps, f, b"user.c", b"x", XATTR_REPLACE, T1)), ENODATA);
    w.setxattr(&mut os, &mut zaps, f, b"user.c", b"", XATTR_CREATE, T1).unwrap();
    assert_eq!(w.getxattr(&os, &mut zaps, f, b"user.c").unwrap(), b"");
    let mut names = w.listxattr(&os, &mut zaps, f).unwrap();
    names.sort();
    assert_eq!(names, vec![b"user.a".to_vec(), b"user.b".to_vec(), b"user.c".to_vec()]);
    w.removexattr(&mut os, &mut zaps, f, b"user.a", T1).unwrap();
    assert_eq!(errno(w.getxattr(&os, &mut zaps, f, b"user.a")), ENODATA);
    assert_eq!(errno(w.setxattr(&mut os, &mut zaps, f, b"", b"x", 0, T1)), ERANGE);
    assert_eq!(errno(w.setxattr(&mut os, &mut zaps, f, &[b'n'; 256], b"x", 0, T1)), ERANGE);
    assert_eq!(errno(w.setxattr(&mut os, &mut zaps, f, b"user.big", &vec![0; 65537], 0, T1)), E2BIG);
    // Directories take xattrs too; freeing the file frees its xattr directory.
    w.setxattr(&mut os, &mut zaps, 4, b"user.root", b"r", 0, T1).unwrap();
    let before = os.objects().unwrap().len();
    w.unlink(&mut os, &mut zaps, 4, b"f", false, T1).unwrap();
    assert_eq!(os.objects().unwrap().len(), before - 4);
}

// ----- POSIX ACLs and namespaces ------------------------------------------------------------

use crate::acl::{AclEntry, AclType, PosixAcl, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER, ACL_USER, ACL_USER_OBJ};

const POSIX: AclType = AclType::Posix;

fn posix_acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    PosixAcl { entries: entries.iter().map(|&(tag, perm, id)| AclEntry { tag, perm, id }).collect() }.encode()
}

const UND: u32 = crate::acl::ACL_UNDEFINED_ID;
const ACCESS: &[u8] = b"system.posix_acl_access";
const DEFAULT: &[u8] = b"system.posix_acl_default";

#[test]
fn access_acls_follow_and_set_the_mode() {
    let (mut os, mut zaps, mut w) = fresh();
    let f = w.create(&mut os, &mut zaps, 4, b"f", 0o640, 11, 12, 0, T0).unwrap();
    // acltype=off: the names are refused and never listed.
    let named = posix_acl(&[
        (ACL_USER_OBJ, 6, UND),
        (ACL_USER, 4, 65534),
        (ACL_GROUP_OBJ, 4, UND),
        (ACL_MASK, 6, UND),
        (ACL_OTHER, 0, UND),
    ]);
    for t in [AclType::Off, AclType::Nfsv4] {
        assert_eq!(errno(w.xattr_set(&mut os, &mut zaps, f, ACCESS, &named, 0, t, 0, T1)), EOPNOTSUPP);
        assert_eq!(errno(w.xattr_get(&os, &mut zaps, f, ACCESS, t)), EOPNOTSUPP);
    }
    // Only the owner (or uid 0) sets an ACL.
    assert_eq!(errno(w.xattr_set(&mut os, &mut zaps, f, ACCESS, &named, 0, POSIX, 12, T1)), EPERM);
    w.xattr_set(&mut os, &mut zaps, f, ACCESS, &named, 0, POSIX, 11, T1).unwrap();
    // Stored under its full name, bytes as Linux encodes them; the group bits are the mask's.
    assert_eq!(w.getxattr(&os, &mut zaps, f, ACCESS).unwrap(), named);
    assert_eq!(w.getattr(&os, f).unwrap().mode, 0o100660);
    assert_eq!(w.xattr_get(&os, &mut zaps, f, ACCESS, POSIX).unwrap(), named);
    assert_eq!(w.xattr_list(&os, &mut zaps, f, POSIX, false).unwrap(), vec![ACCESS.to_vec()]);
    assert!(w.xattr_list(&os, &mut zaps, f, AclType::Off, true).unwrap().is_empty());
    // chmod rewrites owner, mask and other entries; the named user keeps r--.
    let sa = SetAttr { mode: Some(0o705), ..Default::default() };
    let a = w.setattr_acl(&mut os, &mut zaps, f, sa, POSIX, T1).unwrap();
    assert_eq!(a.mode, 0o100705);
    let got = PosixAcl::parse(&w.getxattr(&os, &mut zaps, f, ACCESS).unwrap()).unwrap().unwrap();
    assert_eq!(got.entries.iter().map(|e| e.perm).collect::<Vec<_>>(), [7, 4, 4, 0, 5]);
    // An ACL the mode expresses is not stored: it only sets the mode.
    let plain = posix_acl(&[(ACL_USER_OBJ, 7, UND), (ACL_GROUP_OBJ, 5, UND), (ACL_OTHER, 1, UND)]);
    w.xattr_set(&mut os, &mut zaps, f, ACCESS, &plain, 0, POSIX, 0, T1).unwrap();
    assert_eq!(w.getattr(&os, f).unwrap().mode, 0o100751);
    assert_eq!(errno(w.getxattr(&os, &mut zaps, f, ACCESS)), ENODATA);
    assert_eq!(errno(w.xattr_get(&os, &mut zaps, f, ACCESS, POSIX)), ENODATA);
    // Invalid ACLs are EINVAL; removing an absent ACL succeeds.
    let no_mask =
        posix_acl(&[(ACL_USER_OBJ, 7, UND), (ACL_USER, 4, 5), (ACL_GROUP_OBJ, 5, UND), (ACL_OTHER, 1, UND)]);
    assert_eq!(errno(w.xattr_set(&mut os, &mut zaps, f, ACCESS, &no_mask, 0, POSIX, 0, T1)), EINVAL);
    assert_eq!(errno(w.xattr_set(&mut os, &mut zaps, f, ACCESS, b"\x02\0\0", 0, POSIX, 0, T1)), EINVAL);
    w.xattr_remove(&mut os, &mut zaps, f, ACCESS, POSIX, 0, T1).unwrap();
    // Default ACLs only on directories.
    assert_eq!(errno(w.xattr_set(&mut os, &mut zaps, f, DEFAULT, &named, 0, POSIX, 0, T1)), EACCES);
    // A damaged stored ACL is EIO, and a chmod then fails before changing anything.
    w.setxattr(&mut os, &mut zaps, f, ACCESS, b"\x07\0\0\0garbage!", 0, T1).unwrap();
    assert_eq!(errno(w.xattr_get(&os, &mut zaps, f, ACCESS, POSIX)), EIO);
    let sa = SetAttr { mode: Some(0o600), ..Default::default() };
    assert_eq!(errno(w.setattr_acl(&mut os, &mut zaps, f, sa, POSIX, T1)), EIO);
    assert_eq!(w.getattr(&os, f).unwrap().mode, 0o100751);
}

#[test]
fn default_acls_are_inherited() {
    let (mut os, mut zaps, mut w) = fresh();
    let d = w.mkdir(&mut os, &mut zaps, 4, b"d", 0o755, 0, 0, T0).unwrap();
    let def = posix_acl(&[
        (ACL_USER_OBJ, 7, UND),
        (ACL_USER, 5, 65534),
        (ACL_GROUP_OBJ, 5, UND),
        (ACL_MASK, 7, UND),
        (ACL_OTHER, 0, UND),
    ]);
    w.xattr_set(&mut os, &mut zaps, d, DEFAULT, &def, 0, POSIX, 0, T1).unwrap();
    assert_eq!(w.xattr_get(&os, &mut zaps, d, DEFAULT, POSIX).unwrap(), def);
    // Without acltype=posix, or without a default ACL, the umask applies.
    let na = w.acl_for_new(&os, &mut zaps, d, 0o100666, 0o022, AclType::Off).unwrap();
    assert_eq!(na, NewAcl { mode: 0o100644, access: None, default: None });
    let na = w.acl_for_new(&os, &mut zaps, 4, 0o100666, 0o022, POSIX).unwrap();
    assert_eq!(na.mode, 0o100644);
    // A file: the umask is ignored, mode and access ACL come from the default ACL.
    let na = w.acl_for_new(&os, &mut zaps, d, 0o100666, 0o077, POSIX).unwrap();
    assert_eq!(na.mode, 0o100660);
    assert_eq!(na.default, None);
    let f = w.create(&mut os, &mut zaps, d, b"f", na.mode, 0, 0, 0, T1).unwrap();
    w.acl_apply_new(&mut os, &mut zaps, f, &na, T1).unwrap();
    let acc = PosixAcl::parse(&w.getxattr(&os, &mut zaps, f, ACCESS).unwrap()).unwrap().unwrap();
    assert_eq!(acc.entries.iter().map(|e| e.perm).collect::<Vec<_>>(), [6, 5, 5, 6, 0]);
    assert_eq!(w.getattr(&os, f).unwrap().mode, 0o100660);
    // A directory also takes the default ACL itself.
    let na = w.acl_for_new(&os, &mut zaps, d, 0o40777, 0o022, POSIX).unwrap();
    assert_eq!((na.mode, na.default.as_deref()), (0o40770, Some(def.as_slice())));
    let sub = w.mkdir(&mut os, &mut zaps, d, b"sub", na.mode, 0, 0, T1).unwrap();
    w.acl_apply_new(&mut os, &mut zaps, sub, &na, T1).unwrap();
    assert_eq!(w.getxattr(&os, &mut zaps, sub, DEFAULT).unwrap(), def);
    let mut names = w.xattr_list(&os, &mut zaps, sub, POSIX, false).unwrap();
    names.sort();
    assert_eq!(names, vec![ACCESS.to_vec(), DEFAULT.to_vec()]);
    // Removing the default ACL.
    w.xattr_remove(&mut os, &mut zaps, d, DEFAULT, POSIX, 0, T1).unwrap();
    assert_eq!(w.acl_for_new(&os, &mut zaps, d, 0o100666, 0o022, POSIX).unwrap().mode, 0o100644);
}

#[test]
fn xattr_namespaces_and_unprefixed_names() {
    let (mut os, mut zaps, mut w) = fresh();
    let f = w.create(&mut os, &mut zaps, 4, b"f", 0o644, 0, 0, 0, T0).unwrap();
    let off = AclType::Off;
    // Names outside the Linux namespaces OpenZFS handles.
    for bad in [&b"plain"[..], b"system.nfs4_acl", b"os2.x"] {
        assert_eq!(errno(w.xattr_set(&mut os, &mut zaps, f, bad, b"v", 0, off, 0, T1)), EOPNOTSUPP);
    }
    assert_eq!(errno(w.xattr_set(&mut os, &mut zaps, f, b"user.", b"v", 0, off, 0, T1)), EINVAL);
    assert_eq!(errno(w.xattr_set(&mut os, &mut zaps, f, b"user.trusted.x", b"v", 0, off, 0, T1)), EINVAL);
    // A name stored without a namespace (Solaris, FreeBSD, zfs_xattr_compat=1) is user.NAME.
    w.setxattr(&mut os, &mut zaps, f, b"k", b"old", 0, T1).unwrap();
    w.setxattr(&mut os, &mut zaps, f, b"freebsd:system:x", b"hidden", 0, T1).unwrap();
    w.setxattr(&mut os, &mut zaps, f, b"trusted.t", b"t", 0, T1).unwrap();
    assert_eq!(w.xattr_get(&os, &mut zaps, f, b"user.k", off).unwrap(), b"old");
    let mut l = w.xattr_list(&os, &mut zaps, f, off, false).unwrap();
    l.sort();
    assert_eq!(l, vec![b"user.k".to_vec()]);
    assert_eq!(w.xattr_list(&os, &mut zaps, f, off, true).unwrap().len(), 2);
    // XATTR_CREATE sees the old copy; setting user.k replaces it with a prefixed one.
    assert_eq!(errno(w.xattr_set(&mut os, &mut zaps, f, b"user.k", b"n", XATTR_CREATE, off, 0, T1)), EEXIST);
    w.xattr_set(&mut os, &mut zaps, f, b"user.k", b"new", XATTR_REPLACE, off, 0, T1).unwrap();
    assert_eq!(errno(w.getxattr(&os, &mut zaps, f, b"k")), ENODATA);
    assert_eq!(w.getxattr(&os, &mut zaps, f, b"user.k").unwrap(), b"new");
    // Removing user.k removes either form.
    w.setxattr(&mut os, &mut zaps, f, b"k", b"again", 0, T1).unwrap();
    w.xattr_remove(&mut os, &mut zaps, f, b"user.k", off, 0, T1).unwrap();
    assert_eq!(errno(w.xattr_get(&os, &mut zaps, f, b"user.k", off)), ENODATA);
    assert_eq!(errno(w.xattr_remove(&mut os, &mut zaps, f, b"user.k", off, 0, T1)), ENODATA);
}

/// Xattrs OpenZFS stored as system attributes (xattr=sa) are read there, and a change
/// moves the name to the xattr directory, leaving the SA nvlist without it.
#[test]
fn sa_xattrs_move_to_the_directory_when_changed() {
    let (mut os, mut zaps, mut w) = fresh();
    let f = w.create(&mut os, &mut zaps, 4, b"f", 0o644, 0, 0, 0, T0).unwrap();
    let acl = posix_acl(&[
        (ACL_USER_OBJ, 6, UND),
        (ACL_USER, 4, 65534),
        (ACL_GROUP_OBJ, 4, UND),
        (ACL_MASK, 4, UND),
        (ACL_OTHER, 4, UND),
    ]);
    let mut nv = ondisk::nvlist::NvList::new();
    nv.add_bytes("system.posix_acl_access", acl.clone());
    nv.add_bytes("user.keep", b"kept".to_vec());
    let num = w.sa.registry.zpl(ondisk::sa::ZplAttr::Dxattr).unwrap();
    let mut z = w.load(&os, f).unwrap();
    z.rec.set(num, nv.encode());
    w.store(&mut os, &mut zaps, &z).unwrap();
    assert_eq!(w.xattr_get(&os, &mut zaps, f, ACCESS, POSIX).unwrap(), acl);
    assert_eq!(
        errno(w.xattr_set(&mut os, &mut zaps, f, b"user.keep", b"x", XATTR_CREATE, POSIX, 0, T1)),
        EEXIST
    );
    // chmod rewrites the ACL: it lands in the directory and leaves the SA.
    let sa = SetAttr { mode: Some(0o600), ..Default::default() };
    w.setattr_acl(&mut os, &mut zaps, f, sa, POSIX, T1).unwrap();
    let left = crate::attrs::sa_xattrs(&w.getattr(&os, f).unwrap()).unwrap();
    assert_eq!(left, vec![(b"user.keep".to_vec(), b"kept".to_vec())]);
    let got = PosixAcl::parse(&w.xattr_get(&os, &mut zaps, f, ACCESS, POSIX).unwrap()).unwrap().unwrap();
    assert_eq!(got.entries.iter().map(|e| e.perm).collect::<Vec<_>>(), [6, 4, 4, 0, 0]);
    // Removal of an SA-only name.
    w.xattr_remove(&mut os, &mut zaps, f, b"user.keep", POSIX, 0, T1).unwrap();
    assert!(crate::attrs::sa_xattrs(&w.getattr(&os, f).unwrap()).unwrap().is_empty());
    assert_eq!(errno(w.xattr_get(&os, &mut zaps, f, b"user.keep", POSIX)), ENODATA);
}

// ----- randomized model test --------------------------------------------------------------

/// xorshift64*: deterministic test randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Clone, Debug)]
enum Node {
    File { data: Vec<u8>, links: u64 },
    Dir { entries: BTreeMap<Vec<u8>, u64>, parent: u64 },
}

struct Model {
    nodes: BTreeMap<u64, Node>,
}

impl Model {
    fn dirs(&self) -> Vec<u64> {
        self.nodes.iter().filter(|(_, n)| matches!(n, Node::Dir { .. })).map(|(&o, _)| o).collect()
    }
    fn files(&self) -> Vec<u64> {
        self.nodes.iter().filter(|(_, n)| matches!(n, Node::File { .. })).map(|(&o, _)| o).collect()
    }
    fn entries(&self, d: u64) -> &BTreeMap<Vec<u8>, u64> {
        match &self.nodes[&d] {
            Node::Dir { entries, .. } => entries,
            _ => unreachable!(),
        }
    }
    fn entries_mut(&mut self, d: u64) -> &mut BTreeMap<Vec<u8>, u64> {
        match self.nodes.get_mut(&d) {
            Some(Node::Dir { entries, .. }) => entries,
            _ => unreachable!(),
        }
    }
    fn is_dir(&self, o: u64) -> bool {
        matches!(self.nodes[&o], Node::Dir { .. })
    }
    fn within(&self, anc: u64, mut d: u64) -> bool {
        loop {
            if d == anc {
                return true;
            }
            match &self.nodes[&d] {
                Node::Dir { parent, .. } if *parent != d => d = *parent,
                _ => return false,
            }
        }
    }
    /// Drops one link of `o` (removed from the model at zero).
    fn drop_link(&mut self, o: u64) {
        let gone = match self.nodes.get_mut(&o) {
            Some(Node::File { links, .. }) => {
                *links -= 1;
                *links == 0
            }
            _ => true,
        };
        if gone {
            self.nodes.remove(&o);
        }
    }
    fn rename_errno(&self, sd: u64, sn: &[u8], dd: u64, dn: &[u8]) -> Option<i32> {
        let Some(&s) = self.entries(sd).get(sn) else { return Some(ENOENT) };
        if self.is_dir(s) && self.within(s, dd) {
            return Some(EINVAL);
        }
        match self.entries(dd).get(dn) {
            Some(&t) if t == s => None,
            Some(&t) => match (self.is_dir(s), self.is_dir(t)) {
                (true, false) => Some(ENOTDIR),
                (false, true) => Some(EISDIR),
                (true, true) if !self.entries(t).is_empty() => Some(ENOTEMPTY),
                _ => None,
            },
            None => None,
        }
    }
}

fn check_result<T: std::fmt::Debug>(op: &str, want: Option<i32>, got: &Result<T>) {
    match (want, got) {
        (None, Ok(_)) => {}
        (Some(e), Err(g)) if g.errno() == e => {}
        _ => panic!("{op}: model wants {want:?}, writer gave {got:?}"),
    }
}

/// Compares the whole tree and the allocated objects with the model.
fn verify(os: &DirtyObjset, zaps: &mut ZapCache, w: &ZplWriter, m: &Model) {
    for (&o, node) in &m.nodes {
        let a = w.getattr(os, o).unwrap();
        match node {
            Node::File { data, links } => {
                assert_eq!((a.size, a.links), (data.len() as u64, *links), "file {o}");
                assert_eq!(&w.read(os, o, 0, usize::MAX).unwrap(), data, "contents of {o}");
            }
            Node::Dir { entries, parent } => {
                let subdirs = entries.values().filter(|&&c| m.is_dir(c)).count() as u64;
                assert_eq!(
                    (a.size, a.links, a.parent),
                    (entries.len() as u64 + 2, 2 + subdirs, *parent),
                    "dir {o}"
                );
                let got: BTreeMap<Vec<u8>, u64> =
                    w.readdir(os, zaps, o).unwrap().into_iter().map(|(n, c, _)| (n, c)).collect();
                assert_eq!(&got, entries, "entries of {o}");
            }
        }
    }
    let mut want: BTreeSet<u64> = [1, 2, 3, 5, 6].into_iter().collect();
    want.extend(m.nodes.keys());
    assert_eq!(os.objects().unwrap().into_iter().collect::<BTreeSet<_>>(), want);
}

fn pick(rng: &mut Rng, v: &[u64]) -> u64 {
    v[rng.below(v.len() as u64) as usize]
}

const MODEL_NAMES: [&[u8]; 5] = [b"a", b"b", b"c", b"dd", b"e"];

fn random_op(rng: &mut Rng, os: &mut DirtyObjset, zaps: &mut ZapCache, w: &mut ZplWriter, m: &mut Model) {
    let name = MODEL_NAMES[rng.below(5) as usize];
    let dirs = m.dirs();
    let d = pick(rng, &dirs);
    let now = (rng.below(1000), 0);
    match rng.below(10) {
        0 | 1 => {
            let want = m.entries(d).contains_key(name).then_some(EEXIST);
            let r = w.create(os, zaps, d, name, 0o644, 0, 0, 0, now);
            check_result("create", want, &r);
            if let Ok(o) = r {
                m.nodes.insert(o, Node::File { data: Vec::new(), links: 1 });
                m.entries_mut(d).insert(name.to_vec(), o);
            }
        }
        2 => {
            let want = m.entries(d).contains_key(name).then_some(EEXIST);
            let r = w.mkdir(os, zaps, d, name, 0o755, 0, 0, now);
            check_result("mkdir", want, &r);
            if let Ok(o) = r {
                m.nodes.insert(o, Node::Dir { entries: BTreeMap::new(), parent: d });
                m.entries_mut(d).insert(name.to_vec(), o);
            }
        }
        3..=5 => data_op(rng, os, zaps, w, m),
        6 => {
            let want = match m.entries(d).get(name) {
                None => Some(ENOENT),
                Some(&o) if m.is_dir(o) => Some(EISDIR),
                _ => None,
            };
            let r = w.unlink(os, zaps, d, name, false, now);
            check_result("unlink", want, &r);
            if r.is_ok() {
                let o = m.entries_mut(d).remove(name).unwrap();
                m.drop_link(o);
            }
        }
        7 => {
            let files = m.files();
            if files.is_empty() {
                return;
            }
            let f = pick(rng, &files);
            let want = m.entries(d).contains_key(name).then_some(EEXIST);
            let r = w.link(os, zaps, f, d, name, now);
            check_result("link", want, &r);
            if r.is_ok() {
                m.entries_mut(d).insert(name.to_vec(), f);
                if let Some(Node::File { links, .. }) = m.nodes.get_mut(&f) {
                    *links += 1;
                }
            }
        }
        8 => {
            let want = match m.entries(d).get(name) {
                None => Some(ENOENT),
                Some(&o) if !m.is_dir(o) => Some(ENOTDIR),
                Some(&o) if !m.entries(o).is_empty() => Some(ENOTEMPTY),
                _ => None,
            };
            let r = w.rmdir(os, zaps, d, name, now);
            check_result("rmdir", want, &r);
            if r.is_ok() {
                let o = m.entries_mut(d).remove(name).unwrap();
                m.nodes.remove(&o);
            }
        }
        _ => rename_op(rng, os, zaps, w, m, (d, name, now), &dirs),
    }
}

fn data_op(rng: &mut Rng, os: &mut DirtyObjset, zaps: &mut ZapCache, w: &mut ZplWriter, m: &mut Model) {
    let files = m.files();
    if files.is_empty() {
        return;
    }
    let f = pick(rng, &files);
    let now = (rng.below(1000), 0);
    if rng.below(3) > 0 {
        let off = rng.below(70_000);
        let len = rng.below(9000) as usize;
        let byte = rng.below(255) as u8 + 1;
        w.write(os, zaps, f, off, &vec![byte; len], 16384, now).unwrap();
        if let Some(Node::File { data, .. }) = m.nodes.get_mut(&f) {
            if len > 0 {
                let end = off as usize + len;
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[off as usize..end].fill(byte);
            }
        }
    } else {
        let size = rng.below(80_000);
        w.truncate(os, zaps, f, size, now).unwrap();
        if let Some(Node::File { data, .. }) = m.nodes.get_mut(&f) {
            data.resize(size as usize, 0);
        }
    }
}

fn rename_op(
    rng: &mut Rng,
    os: &mut DirtyObjset,
    zaps: &mut ZapCache,
    w: &mut ZplWriter,
    m: &mut Model,
    (d, name, now): (u64, &[u8], (u64, u64)),
    dirs: &[u64],
) {
    let dd = pick(rng, dirs);
    let dname = MODEL_NAMES[rng.below(5) as usize];
    let want = m.rename_errno(d, name, dd, dname);
    let r = w.rename(os, zaps, d, name, dd, dname, false, false, now);
    check_result("rename", want, &r);
    if r.is_ok() {
        let s = m.entries(d)[name];
        if m.entries(dd).get(dname) == Some(&s) {
            return;
        }
        if let Some(t) = m.entries_mut(dd).remove(dname) {
            m.drop_link(t);
        }
        m.entries_mut(d).remove(name);
        m.entries_mut(dd).insert(dname.to_vec(), s);
        if let Some(Node::Dir { parent, .. }) = m.nodes.get_mut(&s) {
            *parent = dd;
        }
    }
}

#[test]
fn randomized_against_model() {
    for seed in 1..=6u64 {
        let (mut os, mut zaps, mut w) = fresh();
        let mut m = Model { nodes: BTreeMap::new() };
        m.nodes.insert(4, Node::Dir { entries: BTreeMap::new(), parent: 4 });
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        for i in 0..600 {
            random_op(&mut rng, &mut os, &mut zaps, &mut w, &mut m);
            if i % 100 == 99 {
                verify(&os, &mut zaps, &w, &m);
            }
        }
        verify(&os, &mut zaps, &w, &m);
    }
}

/// The objset's running count of dirty bytes (which the write throttle reads after every
/// operation) follows every way blocks enter and leave the open txg; `dirty_bytes` also
/// re-sums the map in debug builds and asserts they agree.
#[test]
fn dirty_byte_count_follows_writes_and_frees() {
    let (mut os, mut zaps, mut w) = fresh();
    let root = w.root();
    let base = os.dirty_bytes();
    let f = w.create(&mut os, &mut zaps, root, b"f", 0o644, 0, 0, 0, T0).unwrap();
    // A small file grows its single block (set_block_size), then spills into records.
    w.write(&mut os, &mut zaps, f, 0, &[1u8; 1000], RS, T0).unwrap();
    w.write(&mut os, &mut zaps, f, 0, &vec![2u8; 3 * RS as usize], RS, T0).unwrap();
    assert!(os.dirty_bytes() >= base + 3 * RS);
    w.punch_hole(&mut os, &mut zaps, f, RS, RS, T1).unwrap();
    w.truncate(&mut os, &mut zaps, f, RS / 2, T1).unwrap();
    let g = w.create(&mut os, &mut zaps, root, b"g", 0o644, 0, 0, 0, T0).unwrap();
    w.write(&mut os, &mut zaps, g, 5 * RS, &[3u8; 10], RS, T0).unwrap();
    let before = os.dirty_bytes();
    w.unlink(&mut os, &mut zaps, root, b"g", false, T1).unwrap();
    assert!(os.dirty_bytes() < before, "freeing g gives its dirty records back");
}

fn fresh_with(names: ZplProps) -> (DirtyObjset, ZapCache, ZplWriter) {
    let reader = Reader::new(
        Arc::new(zio::Zio::new(Vec::new(), Default::default())),
        Arc::new(arc::BlockCache::new(1 << 20)),
    );
    let mut os = DirtyObjset::create(&reader, ondisk::objset::DMU_OST_ZFS);
    let mut zaps = ZapCache::new();
    let w = ZplWriter::create_fs_with(&mut os, &mut zaps, T0, 0, 0, names).unwrap();
    (os, zaps, w)
}

// Spellings of one name from OpenZFS's casenorm tests: composed (C) and decomposed (D).
const C_ORIG: &str = "F\u{ef}L\u{eb}N\u{c4}m\u{eb}";
const C_LOWER: &str = "f\u{ef}l\u{eb}n\u{e4}m\u{eb}";
const D_ORIG: &str = "Fi\u{308}Le\u{308}NA\u{308}me\u{308}";
const D_UPPER: &str = "FI\u{308}LE\u{308}NA\u{308}ME\u{308}";

#[test]
fn insensitive_formd_finds_every_spelling() {
    let names = ZplProps { normalization: 0x10, utf8only: true, casesensitivity: ZFS_CASE_INSENSITIVE };
    let (mut os, mut zaps, mut w) = fresh_with(names);
    let root = w.root();
    // The master node records the choices; directories hash by normalized names.
    assert_eq!(zaps.lookup_u64(&os, 1, "normalization").unwrap(), Some(0x10));
    assert_eq!(zaps.lookup_u64(&os, 1, "casesensitivity").unwrap(), Some(1));
    assert_eq!(zaps.state(&os, root).unwrap().normflags, 0x12);
    let f = w.create(&mut os, &mut zaps, root, C_ORIG.as_bytes(), 0o644, 0, 0, 0, T0).unwrap();
    for n in [C_ORIG, C_LOWER, D_ORIG, D_UPPER] {
        assert_eq!(w.lookup(&os, &mut zaps, root, n.as_bytes()).unwrap(), Some(f), "{n}");
        // Another spelling of an existing name is that name.
        assert_eq!(errno(w.create(&mut os, &mut zaps, root, n.as_bytes(), 0o644, 0, 0, 0, T0)), EEXIST);
    }
    // Listing shows the name as it was created; removing by another spelling removes it.
    let listed: Vec<Vec<u8>> = w.readdir(&os, &mut zaps, root).unwrap().into_iter().map(|e| e.0).collect();
    assert_eq!(listed, vec![C_ORIG.as_bytes().to_vec()]);
    w.unlink(&mut os, &mut zaps, root, D_UPPER.as_bytes(), false, T1).unwrap();
    assert!(w.readdir(&os, &mut zaps, root).unwrap().is_empty());
    // A rename to another spelling of the same entry changes its spelling.
    let g = w.create(&mut os, &mut zaps, root, b"abc", 0o644, 0, 0, 0, T0).unwrap();
    w.rename(&mut os, &mut zaps, root, b"abc", root, b"ABC", false, false, T1).unwrap();
    let listed: Vec<Vec<u8>> = w.readdir(&os, &mut zaps, root).unwrap().into_iter().map(|e| e.0).collect();
    assert_eq!(listed, vec![b"ABC".to_vec()]);
    assert_eq!(w.lookup(&os, &mut zaps, root, b"abc").unwrap(), Some(g));
    // utf8only: names that are not UTF-8 are refused.
    assert_eq!(errno(w.create(&mut os, &mut zaps, root, b"bad\xff", 0o644, 0, 0, 0, T0)), EILSEQ);
}

#[test]
fn sensitive_formd_matches_forms_not_case() {
    let names = ZplProps { normalization: 0x10, utf8only: true, casesensitivity: ZFS_CASE_SENSITIVE };
    let (mut os, mut zaps, mut w) = fresh_with(names);
    let root = w.root();
    let f = w.create(&mut os, &mut zaps, root, C_ORIG.as_bytes(), 0o644, 0, 0, 0, T0).unwrap();
    assert_eq!(w.lookup(&os, &mut zaps, root, D_ORIG.as_bytes()).unwrap(), Some(f));
    assert_eq!(w.lookup(&os, &mut zaps, root, C_LOWER.as_bytes()).unwrap(), None);
    let d = w.mkdir(&mut os, &mut zaps, root, b"sub", 0o755, 0, 0, T0).unwrap();
    assert_eq!(zaps.state(&os, d).unwrap().normflags, 0x10, "new directories normalize too");
    w.rmdir(&mut os, &mut zaps, root, b"sub", T1).unwrap();
}

#[test]
fn mixed_keeps_case_and_refuses_more_spellings_than_a_leaf_holds() {
    let names = ZplProps { normalization: 0, utf8only: false, casesensitivity: ZFS_CASE_MIXED };
    let (mut os, mut zaps, mut w) = fresh_with(names);
    let root = w.root();
    let a = w.create(&mut os, &mut zaps, root, b"foo", 0o644, 0, 0, 0, T0).unwrap();
    let b = w.create(&mut os, &mut zaps, root, b"FOO", 0o644, 0, 0, 0, T0).unwrap();
    assert_ne!(a, b);
    assert_eq!(w.lookup(&os, &mut zaps, root, b"Foo").unwrap(), None);
    w.unlink(&mut os, &mut zaps, root, b"FOO", false, T1).unwrap();
    assert_eq!(w.lookup(&os, &mut zaps, root, b"foo").unwrap(), Some(a));
    // All case variants of a name share one hash: they must fit one 16 KiB fat leaf.
    let mut made = 1;
    let mut refused = None;
    for i in 0u32..4096 {
        let n: Vec<u8> =
            (0..12).map(|bit| if i >> bit & 1 == 1 { b'A' + bit as u8 } else { b'a' + bit as u8 }).collect();
        match w.create(&mut os, &mut zaps, root, &n, 0o644, 0, 0, 0, T0) {
            Ok(_) => made += 1,
            Err(e) => {
                refused = Some((e.errno(), n));
                break;
            }
        }
    }
    let (code, n) = refused.expect("a full hash bucket refuses");
    assert_eq!(code, ENOSPC);
    assert_eq!(made, 1 + 212, "three 24-byte chunks per name, 638 chunks per leaf");
    // A rename to such a name is refused the same way, and the directory still encodes.
    w.create(&mut os, &mut zaps, root, b"tmp", 0o644, 0, 0, 0, T0).unwrap();
    assert_eq!(errno(w.rename(&mut os, &mut zaps, root, b"tmp", root, &n, false, false, T1)), ENOSPC);
    zaps.flush(&mut os, 1 << 10).unwrap();
}

/// A directory whose NFSv4 ACL has inheritable entries (ZFS_INHERIT_ACE, as FreeBSD sets it)
/// takes no new entries: rzfs cannot give them the inherited entries. Elsewhere, and for
/// what exists in it, nothing changes.
#[test]
fn inheritable_nfsv4_entries_refuse_new_entries() {
    let (mut os, mut zaps, mut w) = fresh();
    let d = w.mkdir(&mut os, &mut zaps, 4, b"dir", 0o755, 0, 0, T1).unwrap();
    let f = w.create(&mut os, &mut zaps, d, b"old", 0o644, 0, 0, 0, T1).unwrap();
    let mut z = w.load(&os, d).unwrap();
    let flags = z.rec.u64(w.sa.nums.flags);
    z.rec.set_u64(w.sa.nums.flags, flags | sa_write::ZFS_INHERIT_ACE);
    w.store(&mut os, &mut zaps, &z).unwrap();
    assert_eq!(errno(w.create(&mut os, &mut zaps, d, b"new", 0o644, 0, 0, 0, T1)), EACCES);
    assert_eq!(errno(w.mkdir(&mut os, &mut zaps, d, b"sub", 0o755, 0, 0, T1)), EACCES);
    assert_eq!(w.lookup(&os, &mut zaps, d, b"old").unwrap(), Some(f));
    w.create(&mut os, &mut zaps, 4, b"elsewhere", 0o644, 0, 0, 0, T1).unwrap();
}

fn fresh_version(version: u64) -> (DirtyObjset, ZapCache, ZplWriter) {
    let reader = Reader::new(
        Arc::new(zio::Zio::new(Vec::new(), Default::default())),
        Arc::new(arc::BlockCache::new(1 << 20)),
    );
    let mut os = DirtyObjset::create(&reader, ondisk::objset::DMU_OST_ZFS);
    let mut zaps = ZapCache::new();
    let w = ZplWriter::create_fs_version(&mut os, &mut zaps, T0, 1000, 100, ZplProps::default(), version)
        .unwrap();
    (os, zaps, w)
}

/// The ACL header of a `znode_phys_t` bonus: (extern object, size-or-count, version, count).
fn acl_head(bonus: &[u8]) -> (u64, u32, u16, u16) {
    let u = |o: usize, n: usize| bonus[o..o + n].iter().rev().fold(0u64, |a, &b| (a << 8) | u64::from(b));
    (u(176, 8), u(184, 4) as u32, u(188, 2) as u16, u(190, 2) as u16)
}

#[test]
fn old_versions_write_znode_phys() {
    for version in 1..=4u64 {
        let (mut os, mut zaps, mut w) = fresh_version(version);
        assert_eq!(zaps.lookup_u64(&os, 1, "VERSION").unwrap(), Some(version));
        assert_eq!(zaps.lookup_u64(&os, 1, "SA_ATTRS").unwrap(), None);
        let root = w.root();
        let rdn = os.dnode(root).unwrap().unwrap();
        assert_eq!((rdn.bonustype, rdn.bonuslen), (17, 264));
        let f = w.create(&mut os, &mut zaps, root, b"f", 0o640, 1000, 100, 0, T0).unwrap();
        let d = w.mkdir(&mut os, &mut zaps, root, b"d", 0o755, 1000, 100, T0).unwrap();
        w.write(&mut os, &mut zaps, f, 0, b"hello", RS, T1).unwrap();
        let z =
            ondisk::znode::ZnodePhys::parse(&os.dnode(f).unwrap().unwrap().bonus, ondisk::ByteOrder::Little)
                .unwrap();
        assert_eq!((z.mode, z.size, z.uid, z.gid, z.links, z.parent), (0o100640, 5, 1000, 100, 1, root));
        assert_eq!(z.mtime, [T1.0, T1.1]);
        // Versions 1 and 2 keep version-0 entries (count at offset 8), later ones FUID entries.
        let (ext, sz, v, count) = acl_head(&os.dnode(f).unwrap().unwrap().bonus);
        if version < 3 {
            assert_eq!((ext, v, count), (0, 0, 0));
            assert!(sz > 0 && sz <= 6, "{sz} entries");
        } else {
            assert_eq!((ext, v), (0, 1));
            assert!(count > 0 && sz > 0);
        }
        // Directory entries carry the type from version 2.
        let ent = zaps.lookup(&os, root, b"d").unwrap().unwrap().values[0];
        assert_eq!(ent, if version >= 2 { (4 << 60) | d } else { d });
        // Symlinks: short in the bonus, long in the data block.
        let s = w.symlink(&mut os, &mut zaps, root, b"s", b"/short", 0, 0, T0).unwrap();
        assert_eq!(os.dnode(s).unwrap().unwrap().bonuslen as usize, 264 + 6);
        let long = vec![b'y'; 300];
        let l = w.symlink(&mut os, &mut zaps, root, b"l", &long, 0, 0, T0).unwrap();
        assert_eq!(os.dnode(l).unwrap().unwrap().bonuslen, 264);
        assert_eq!(w.readlink(&os, s).unwrap(), b"/short");
        assert_eq!(w.readlink(&os, l).unwrap(), long);
        // chmod rebuilds the ACL in the version's form; chown, xattrs, links, unlink.
        let set = SetAttr { mode: Some(0o600), uid: Some(7), ..Default::default() };
        let a = w.setattr(&mut os, &mut zaps, f, set, T1).unwrap();
        assert_eq!((a.mode, a.uid), (0o100600, 7));
        assert_eq!(acl_head(&os.dnode(f).unwrap().unwrap().bonus).2, u16::from(version >= 3));
        w.setxattr(&mut os, &mut zaps, f, b"user.k", b"v", 0, T1).unwrap();
        assert_eq!(w.getxattr(&os, &mut zaps, f, b"user.k").unwrap(), b"v");
        w.link(&mut os, &mut zaps, f, d, b"f2", T1).unwrap();
        assert_eq!(w.getattr(&os, f).unwrap().links, 2);
        w.unlink(&mut os, &mut zaps, root, b"f", false, T1).unwrap();
        assert_eq!(w.read(&os, f, 0, 5).unwrap(), b"hello");
        assert_eq!(os.dnode(f).unwrap().unwrap().bonustype, 17);
        // The upgrade to 5 creates the SA tables; an old znode becomes SA when it changes.
        w.upgrade(&mut os, &mut zaps, 5).unwrap();
        assert!(zaps.lookup_u64(&os, 1, "SA_ATTRS").unwrap().is_some());
        assert_eq!(errno(w.upgrade(&mut os, &mut zaps, 4)), EINVAL);
        w.setattr(&mut os, &mut zaps, f, SetAttr { mode: Some(0o644), ..Default::default() }, T1).unwrap();
        assert_eq!(os.dnode(f).unwrap().unwrap().bonustype, 44);
        let a = w.getattr(&os, f).unwrap();
        assert_eq!((a.mode, a.uid, a.size, a.links), (0o100644, 7, 5, 1));
        assert_eq!(w.readlink(&os, s).unwrap(), b"/short");
        assert_eq!(os.dnode(s).unwrap().unwrap().bonustype, 17);
        let g = w.create(&mut os, &mut zaps, d, b"g", 0o644, 0, 0, 0, T1).unwrap();
        assert_eq!(os.dnode(g).unwrap().unwrap().bonustype, 44);
    }
    // Versions before 3 take no name-handling properties.
    let reader = Reader::new(
        Arc::new(zio::Zio::new(Vec::new(), Default::default())),
        Arc::new(arc::BlockCache::new(1 << 20)),
    );
    let mut os = DirtyObjset::create(&reader, ondisk::objset::DMU_OST_ZFS);
    let mut zaps = ZapCache::new();
    let ci = ZplProps { casesensitivity: ZFS_CASE_INSENSITIVE, ..Default::default() };
    let r = ZplWriter::create_fs_version(&mut os, &mut zaps, T0, 0, 0, ci, 2);
    assert_eq!(r.err().map(|e| e.errno()), Some(EOPNOTSUPP));
}
