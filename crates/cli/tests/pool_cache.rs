//! # The pool cache: pools come back when the daemon restarts
//!
//! A daemon with a cache file (`RZFS_CACHEFILE`) records the pools it creates or imports
//! read-write, except with `cachefile=none`; export forgets them. After the daemon dies
//! (kill -9, as a crash or a reboot), the next one imports the cached pools and mounts
//! their file systems before serving anything, so `zfs list` and the files are there with
//! no `zpool import`. `zpool set cachefile=none|""` moves a pool out of and back into the
//! cache, which is in OpenZFS's format (`zdb -U` reads it). `cachefile=PATH` gives a pool a
//! cache file of its own, and `zpool import -c` imports from one. Checked by zdb at the end.
//!
//! Needs FUSE, root and zdb (skipped otherwise).

mod common;

use common::pools::*;
use common::tools::*;

/// The pools a cache file names: OpenZFS's packed nvlist (what rzfs writes), or the JSON
/// list earlier versions wrote.
fn cached_names(path: &std::path::Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap_or_default();
    if let Ok(nv) = ondisk::nvlist::NvList::decode(&bytes) {
        return nv.names().map(str::to_string).collect();
    }
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or(serde_json::json!([]));
    v.as_array().into_iter().flatten().filter_map(|e| e["name"].as_str().map(str::to_string)).collect()
}

/// One pool's configuration in a cache file.
fn cached_config(path: &std::path::Path, pool: &str) -> ondisk::nvlist::NvList {
    let nv = ondisk::nvlist::NvList::decode(&std::fs::read(path).unwrap()).unwrap();
    nv.get_nvlist(pool).unwrap_or_else(|| panic!("{pool} not in {}", path.display())).clone()
}

#[test]
fn cached_pools_come_back_after_a_restart() {
    if skip_without_fuse_zdb("cached_pools_come_back_after_a_restart") {
        return;
    }
    let dir = scratch("pool-cache");
    let cache = dir.join("rzpool.cache");
    let cache_s = cache.to_str().unwrap().to_string();
    let d = Daemon::with_env("pool-cache", &[("RZFS_CACHEFILE", &cache_s)]);
    let (_devs, mnt) = create(&d, &dir, "pc", &MIRROR2, 128 << 20);
    std::fs::write(mnt.join("kept"), b"still here").unwrap();
    d.ok("rzfs", &["create", "pc/sub"]);
    std::fs::write(mnt.join("sub").join("deep"), b"below").unwrap();
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let odev = files(&other, 1, 128 << 20);
    d.ok("rzpool", &["create", "-o", "cachefile=none", "-m", "none", "pn", &odev[0]]);
    let third = dir.join("third");
    std::fs::create_dir_all(&third).unwrap();
    let tdev = files(&third, 1, 128 << 20);
    d.ok("rzpool", &["create", "-m", "none", "px", &tdev[0]]);
    assert_eq!(cached_names(&cache), ["pc", "px"]);
    d.ok("rzpool", &["export", "px"]);
    assert_eq!(cached_names(&cache), ["pc"]);
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value", "cachefile", "pc"]), "-\n");
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value", "cachefile", "pn"]), "none\n");
    d.ok("rzpool", &["sync"]);

    // A crash: the next daemon imports pc (not pn, not px) and mounts its file systems.
    d.kill9();
    lazy_unmount(&mnt.join("sub"));
    lazy_unmount(&mnt);
    let list = d.ok("rzpool", &["list", "-H", "-o", "name"]);
    assert_eq!(list, "pc\n");
    assert_eq!(std::fs::read(mnt.join("kept")).unwrap(), b"still here");
    assert_eq!(std::fs::read(mnt.join("sub").join("deep")).unwrap(), b"below");
    let st = d.ok("rzpool", &["status", "pc"]);
    assert!(st.contains("state: ONLINE"), "{st}");

    // Out of the cache and back.
    d.ok("rzpool", &["set", "cachefile=none", "pc"]);
    assert!(cached_names(&cache).is_empty());
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value", "cachefile", "pc"]), "none\n");
    d.ok("rzpool", &["set", "cachefile=", "pc"]);
    assert_eq!(cached_names(&cache), ["pc"]);
    // The daemon's own cache named by its path is the default.
    d.ok("rzpool", &["set", &format!("cachefile={cache_s}"), "pc"]);
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value,source", "cachefile", "pc"]), "-\tdefault\n");
    assert_eq!(cached_names(&cache), ["pc"]);
    for bad in ["cachefile=relative", "cachefile=/a/dir/"] {
        let (code, _, err) = d.run("rzpool", &["set", bad, "pc"]);
        assert!(code != 0 && err.contains("must be an absolute path"), "{err}");
    }
    // OpenZFS's zdb reads the cache as its own zpool.cache.
    let out = run_zdb(&["-U", &cache_s, "-C", "pc"]);
    assert!(out.contains("name: 'pc'") && out.contains("type: 'mirror'"), "{out}");

    // Exported pools stay out after a restart.
    d.ok("rzpool", &["export", "pc"]);
    assert!(cached_names(&cache).is_empty());
    d.kill9();
    assert_eq!(d.ok("rzpool", &["list", "-H", "-o", "name"]), "");
    // A damaged cache, or one naming a pool whose devices are gone, does not keep the
    // daemon from starting; the entry that could not be imported stays for a later start.
    std::fs::write(&cache, b"\x00not json{").unwrap();
    d.kill9();
    assert_eq!(d.ok("rzpool", &["list", "-H", "-o", "name"]), "");
    let gone = r#"[{"name": "gone", "guid": 12345, "dirs": ["/nonexistent-rzfs-dir"]}]"#;
    std::fs::write(&cache, gone).unwrap();
    d.kill9();
    assert_eq!(d.ok("rzpool", &["list", "-H", "-o", "name"]), "");
    assert_eq!(cached_names(&cache), ["gone"]);
    zdb_check(&dir, "pc");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `cachefile=PATH`: a cache file of the pool's own, in OpenZFS's format (zdb -U reads it),
/// shared by the pools naming it, rewritten when devices are added, left at export and
/// removed once empty; `zpool import -c FILE` lists and imports from a stale copy (the
/// device added since is found), and the pool keeps the cache file its entry names.
#[test]
fn own_cache_files_and_import_from_them() {
    if skip_without_fuse_zdb("own_cache_files_and_import_from_them") {
        return;
    }
    let dir = scratch("pool-cachefile");
    let devs = files(&dir, 3, 128 << 20);
    let d = Daemon::new("pool-cachefile");
    let own = dir.join("cf").join("own.cache");
    let own_s = own.to_str().unwrap();
    let opt = format!("cachefile={own_s}");
    d.ok("rzpool", &["create", "-o", &opt, "-m", "none", "ca", &devs[0]]);
    assert_eq!(
        d.ok("rzpool", &["get", "-H", "-o", "value,source", "cachefile", "ca"]),
        format!("{own_s}\tlocal\n")
    );
    assert_eq!(cached_names(&own), ["ca"]);
    let out = run_zdb(&["-U", own_s, "-C", "ca"]);
    assert!(out.contains("name: 'ca'"), "{out}");
    let stale = dir.join("stale.cache");
    std::fs::copy(&own, &stale).unwrap();
    assert_eq!(cached_config(&own, "ca").get_u64("vdev_children"), Some(1));
    d.ok("rzpool", &["add", "ca", &devs[1]]);
    assert_eq!(cached_config(&own, "ca").get_u64("vdev_children"), Some(2));
    // A second pool in the same file, then gone again with its destroy.
    d.ok("rzpool", &["create", "-o", &opt, "-m", "none", "cb", &devs[2]]);
    assert_eq!(cached_names(&own), ["ca", "cb"]);
    d.ok("rzpool", &["destroy", "cb"]);
    assert_eq!(cached_names(&own), ["ca"]);
    d.ok("rzpool", &["export", "ca"]);
    assert!(!own.exists(), "an empty cache file stays");

    let stale_s = stale.to_str().unwrap();
    let listing = d.ok("rzpool", &["import", "-c", stale_s]);
    assert!(listing.contains("pool: ca\n") && !listing.contains("pool: cb"), "{listing}");
    d.ok("rzpool", &["import", "-c", stale_s, "ca"]);
    let st = d.ok("rzpool", &["status", "ca"]);
    assert!(st.contains(devs[0].as_str()) && st.contains(devs[1].as_str()), "{st}");
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value", "cachefile", "ca"]), format!("{own_s}\n"));
    assert_eq!(cached_names(&own), ["ca"]);
    let (code, _, err) = d.run("rzpool", &["import", "-c", dir.join("none.cache").to_str().unwrap(), "ca"]);
    assert!(code != 0 && err.contains("no pools in cache file"), "{err}");
    d.ok("rzpool", &["set", "cachefile=none", "ca"]);
    assert!(!own.exists());
    d.ok("rzpool", &["export", "ca"]);
    zdb_check(&dir, "ca");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `zpool create -t TEMP POOL`: the pool goes by TEMP while imported (even beside an
/// imported POOL), is not cached, and its labels carry POOL, by which it is imported later.
#[test]
fn create_under_a_temporary_name() {
    if skip_without_fuse_zdb("create_under_a_temporary_name") {
        return;
    }
    let dir = scratch("pool-tempname");
    let cache = dir.join("rzpool.cache");
    let d = Daemon::with_env("pool-tempname", &[("RZFS_CACHEFILE", cache.to_str().unwrap())]);
    let (a, b) = (dir.join("a"), dir.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let (da, db) = (files(&a, 1, 128 << 20), files(&b, 1, 128 << 20));
    d.ok("rzpool", &["create", "-m", "none", "tn", &da[0]]);
    d.ok("rzpool", &["create", "-m", "none", "-t", "tn-tmp", "tn", &db[0]]);
    assert_eq!(d.ok("rzpool", &["list", "-H", "-o", "name"]), "tn\ntn-tmp\n");
    d.ok("rzfs", &["create", "tn-tmp/fs"]);
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value", "cachefile", "tn-tmp"]), "none\n");
    assert_eq!(cached_names(&cache), ["tn"]);
    let (code, _, err) = d.run("rzpool", &["create", "-t", "tn", "other", &db[0]]);
    assert!(code != 0 && err.contains("already exists"), "{err}");
    d.ok("rzpool", &["export", "tn-tmp"]);
    let labels = run_zdb(&["-l", &db[0]]);
    assert!(labels.contains("name: 'tn'"), "the labels carry the name given: {labels}");
    d.ok("rzpool", &["export", "tn"]);
    d.ok("rzpool", &["import", "-d", b.to_str().unwrap(), "tn"]);
    assert_eq!(d.ok("rzfs", &["list", "-H", "-o", "name", "-r", "tn"]), "tn\ntn/fs\n");
    d.ok("rzpool", &["export", "tn"]);
    zdb_check(&b, "tn");
}
