//! # The pool cache: pools come back when the daemon restarts
//!
//! A daemon with a cache file (`RZFS_CACHEFILE`) records the pools it creates or imports
//! read-write, except with `cachefile=none`; export forgets them. After the daemon dies
//! (kill -9, as a crash or a reboot), the next one imports the cached pools and mounts
//! their file systems before serving anything, so `zfs list` and the files are there with
//! no `zpool import`. `zpool set cachefile=none|""` moves a pool out of and back into the
//! cache. Checked by zdb at the end.
//!
//! Needs FUSE, root and zdb (skipped otherwise).

mod common;

use common::pools::*;
use common::tools::*;

fn cached_names(path: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or(serde_json::json!([]));
    v.as_array().into_iter().flatten().filter_map(|e| e["name"].as_str().map(str::to_string)).collect()
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
    let (code, _, err) = d.run("rzpool", &["set", "cachefile=/etc/zfs/zpool.cache", "pc"]);
    assert!(code != 0 && err.contains("cachefile"), "{err}");

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
