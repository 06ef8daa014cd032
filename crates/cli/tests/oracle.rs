//! Oracle tests: pools written by OpenZFS (the zpool_upgrade test images, described by zdb)
//! and by zfs-fuse (described through its own mount), read back by rzfs.
//!
//! Covered: every file's content hash, size, mode, owner, link count, mtime, symlink target
//! and xattrs in every dataset and snapshot; refusal of unsupported versions; reads with one
//! device of a mirror/raidz1 (two of a raidz2) destroyed or removed, with the damage counted
//! on the right device; images unchanged by import + read + export.
//! Not covered here: FUSE (see fuse_mount.rs), ztest pools (ztest_pools.rs).
//! Needs the fixtures from tests/oracle/make_all.sh; with RZFS_ORACLE=1 their absence fails.

mod common;

use common::*;
use pool::status::PoolHealth;

#[test]
fn upgrade_pools_match_zdb() {
    let fx = fixtures("upgrade");
    let mut checked = 0;
    let mut probs = Vec::new();
    for dir in &fx {
        let exp = expected(dir);
        if exp["expect"] != "ok" {
            continue;
        }
        let p = check_fixture(dir);
        probs.extend(p.into_iter().map(|x| format!("{}: {x}", dir.display())));
        checked += 1;
    }
    assert!(probs.is_empty(), "{} problems:\n{}", probs.len(), probs.join("\n"));
    if !fx.is_empty() {
        assert!(checked >= 28, "only {checked} upgrade pools checked");
    }
}

#[test]
fn upgrade_pools_list_the_datasets_zdb_lists() {
    for dir in fixtures("upgrade") {
        let exp = expected(&dir);
        if exp["expect"] != "ok" {
            continue;
        }
        let name = exp["pool"].as_str().unwrap();
        let p = open(&dir, name).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut ours: Vec<String> = p.dsl().list().unwrap().into_iter().map(|d| d.name).collect();
        let mut theirs: Vec<String> = exp["datasets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect();
        ours.sort();
        theirs.sort();
        assert_eq!(ours, theirs, "{}", dir.display());
    }
}

#[test]
fn unsupported_version_is_refused_clearly() {
    let Some(dir) = testdata("upgrade") else { return };
    let err = open(&dir.join("v999-pool"), "v999-pool").err().expect("v999 must be refused");
    assert!(err.contains("version 999"), "unclear message: {err}");
    // vBROKEN is a deliberately odd image: whatever happens, it is an answer, not a crash.
    let r =
        std::panic::catch_unwind(|| open(&dir.join("vBROKEN"), "v3-pool").map(|p| p.dsl().list().is_ok()));
    assert!(r.is_ok(), "vBROKEN made rzfs panic");
}

#[test]
fn zfsfuse_pools_match_what_was_written() {
    let fx = fixtures("zfsfuse");
    let mut probs = Vec::new();
    for dir in &fx {
        probs.extend(check_fixture(dir).into_iter().map(|x| format!("{}: {x}", dir.display())));
    }
    assert!(probs.is_empty(), "{} problems:\n{}", probs.len(), probs.join("\n"));
    if !fx.is_empty() {
        assert_eq!(fx.len(), 5, "expected stripe, mirror, raidz1, raidz2, raidz3");
    }
}

#[test]
fn reading_never_writes() {
    for dir in fixtures("zfsfuse") {
        let before: Vec<String> = images(&dir).iter().map(|p| sha256_file(p)).collect();
        let exp = expected(&dir);
        let name = exp["pool"].as_str().unwrap();
        {
            let p = open(&dir, name).unwrap();
            for ds in p.dsl().list().unwrap() {
                let _ = manifest(&dir, &ds.name).unwrap();
            }
        }
        let after: Vec<String> = images(&dir).iter().map(|p| sha256_file(p)).collect();
        assert_eq!(before, after, "{} changed", dir.display());
    }
}

/// How a device is damaged.
#[derive(Clone, Copy, Debug)]
enum Damage {
    /// The whole device overwritten with noise (labels included: it is no longer found).
    Noise,
    /// The data area overwritten with noise, labels intact: found, but every block on it bad.
    DataNoise,
    /// The device file removed.
    Removed,
}

fn damage(path: &std::path::Path, how: Damage, seed: u64) {
    let len = std::fs::metadata(path).unwrap().len();
    match how {
        Damage::Noise => scramble(path, 0, len, seed),
        // Keep the two front and two back labels (256 KiB each) and the boot area readable.
        Damage::DataNoise => scramble(path, 4 << 20, len - (512 << 10), seed),
        Damage::Removed => std::fs::remove_file(path).unwrap(),
    }
}

fn leaf_health(p: &pool::Pool, leaf: &str) -> (PoolHealth, u64) {
    fn find(v: &pool::status::VdevStatus, leaf: &str) -> Option<(PoolHealth, u64)> {
        if v.name.ends_with(leaf) {
            return Some((v.health, v.read + v.cksum));
        }
        v.children.iter().find_map(|c| find(c, leaf))
    }
    let st = pool::status::pool_status(p);
    find(&st.root, leaf).unwrap_or_else(|| panic!("no leaf {leaf} in {:#?}", st.root))
}

fn damaged_read(layout: &str, victims: &[usize], how: Damage) {
    let Some(root) = testdata("zfsfuse") else { return };
    let src = root.join(layout);
    let tag = format!("{layout}-{how:?}-{victims:?}").replace([' ', ',', '[', ']'], "");
    let dir = scratch_copy(&src, &tag);
    let imgs = images(&dir);
    for (i, v) in victims.iter().enumerate() {
        damage(&imgs[*v], how, 0x5eed + i as u64);
    }
    let probs = check_fixture(&dir);
    assert!(
        probs.is_empty(),
        "{layout} with {how:?} on {victims:?}: {} problems:\n{}",
        probs.len(),
        probs.join("\n")
    );
    let exp = expected(&dir);
    let p = open(&dir, exp["pool"].as_str().unwrap()).unwrap();
    // Read every dataset once more through this pool handle so its counters see the damage.
    for ds in p.dsl().list().unwrap() {
        if ds.kind == dsl::DatasetKind::Filesystem {
            let z = rzfs_cli::zplopen::open_zpl_only(&p, &ds).unwrap();
            z.walk(&mut |_, e| {
                if e.dtype == 8 {
                    let a = z.getattr(e.object)?;
                    let _ = z.read(e.object, 0, a.size as usize)?;
                }
                Ok(())
            })
            .unwrap();
        }
    }
    for v in victims {
        let name = imgs[*v].file_name().unwrap().to_string_lossy().to_string();
        let (health, errors) = leaf_health(&p, &name);
        match how {
            Damage::Noise | Damage::Removed => assert_eq!(health, PoolHealth::Unavail, "{name}"),
            Damage::DataNoise => assert!(errors > 0, "{name}: damage not counted"),
        }
    }
    // A device returning bad data stays ONLINE with its errors counted (as in OpenZFS until
    // a fault manager faults it); a device that is gone degrades the pool.
    let st = pool::status::pool_status(&p);
    let want = match how {
        Damage::DataNoise => PoolHealth::Online,
        Damage::Noise | Damage::Removed => PoolHealth::Degraded,
    };
    assert_eq!(st.health, want, "{}", pool::status::render_status(&st, true, false));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mirror_survives_one_bad_device() {
    damaged_read("mirror", &[0], Damage::DataNoise);
    damaged_read("mirror", &[1], Damage::Noise);
    damaged_read("mirror", &[0], Damage::Removed);
}

#[test]
fn raidz1_survives_any_one_bad_device() {
    for v in 0..3 {
        damaged_read("raidz1", &[v], Damage::DataNoise);
    }
    damaged_read("raidz1", &[1], Damage::Removed);
}

#[test]
fn raidz3_survives_any_three_bad_devices() {
    damaged_read("raidz3", &[0, 2, 4], Damage::DataNoise);
    damaged_read("raidz3", &[1, 2, 3], Damage::Noise);
    damaged_read("raidz3", &[0, 1, 4], Damage::Removed);
}

#[test]
fn raidz2_survives_any_two_bad_devices() {
    damaged_read("raidz2", &[0, 3], Damage::DataNoise);
    damaged_read("raidz2", &[1, 2], Damage::Noise);
    damaged_read("raidz2", &[0, 2], Damage::Removed);
}

/// `rzdb -b`'s space check on pools OpenZFS and zfs-fuse wrote: the space maps must match the
/// blocks exactly, as zdb (run here on the same images) says they do.
#[test]
fn space_maps_match_blocks_like_zdb() {
    let mut dirs: Vec<_> =
        fixtures("upgrade").into_iter().filter(|d| expected(d)["expect"] == "ok").collect();
    dirs.extend(fixtures("zfsfuse"));
    let mut probs = Vec::new();
    for dir in &dirs {
        let name = expected(dir)["pool"].as_str().unwrap().to_string();
        let p = open(dir, &name).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let st = rzfs_cli::blockstats::block_stats(&p, false).unwrap();
        let ours = match &st.space {
            Some(sp) => rzfs_cli::blockstats::space_lines(sp),
            None => format!("not checked: {:?}", st.notes),
        };
        if st.errors != 0 || !ours.contains("No leaks") {
            probs.push(format!("{}: rzdb: errors {} {ours}", dir.display(), st.errors));
        }
        if common::tools::zdb().is_some() {
            let z = common::tools::run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-b", &name]);
            if z.contains("No leaks") != ours.contains("No leaks") {
                probs.push(format!("{}: zdb and rzdb disagree:\nzdb: {z}\nrzdb: {ours}", dir.display()));
            }
        }
    }
    assert!(probs.is_empty(), "{} problems:\n{}", probs.len(), probs.join("\n"));
}
