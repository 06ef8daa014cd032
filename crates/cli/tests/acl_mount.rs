//! Access control on mounts, end to end through a private daemon: a file system created
//! with `-o acltype=posix` has its POSIX ACLs enforced by the kernel (an unprivileged user,
//! uid 65534, is let in and shut out by `setfacl` entries, default ACLs reach new files);
//! `exec=off`, `setuid=off`, `devices=off` become noexec, nosuid, nodev; acltype=off refuses
//! ACLs; acltype=nfsv4 mounts read-write with the mode bits, as OpenZFS on Linux. The pool is exported
//! and checked by OpenZFS's zdb (`-bcc`, and `-dddd` shows the ACL in the file's xattr
//! directory under OpenZFS's name, `-R` its bytes, which equal what Linux stores for the same
//! ACL on a native file system), then imported again: the ACL still holds, and a read-only
//! import (the read-only adapter) enforces it too, in snapshots as well.
//!
//! Needs root, FUSE, setfacl/getfacl (package acl), setpriv and zdb
//! (scripts/install-test-deps.sh); skips otherwise, `RZFS_ORACLE=1` turns a missing tool
//! into a failure and `RZFS_ORACLE=0` skips.

mod common;

use common::tools::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rzfs-acl-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn have(prog: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {prog}")]).output().is_ok_and(|o| o.status.success())
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Runs a shell command line; panics with its stderr when it fails.
fn sh(script: &str) -> String {
    let out = Command::new("sh").args(["-c", script]).output().unwrap();
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a shell command line as uid/gid 65534 without supplementary groups.
fn as_nobody(script: &str) -> bool {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// The mount options /proc/self/mountinfo shows for `dir`.
fn mount_options(dir: &Path) -> Vec<String> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = mi
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()))
        .unwrap_or_else(|| panic!("{} not in mountinfo", dir.display()));
    line.split(' ').nth(5).unwrap().split(',').map(str::to_string).collect()
}

#[test]
fn posix_acls_and_mount_options() {
    if zdb().is_none() || !Path::new("/dev/fuse").exists() {
        return;
    }
    let tools = ["setfacl", "getfacl", "setpriv"].iter().all(|p| have(p));
    if !is_root() || !tools {
        assert!(
            !std::env::var("RZFS_ORACLE").is_ok_and(|v| v == "1"),
            "RZFS_ORACLE=1 but not root or setfacl/getfacl/setpriv missing (scripts/install-test-deps.sh)"
        );
        eprintln!("skipping: needs root, setfacl/getfacl (package acl) and setpriv");
        return;
    }
    let dir = scratch("pool");
    let dev = dir.join("d0");
    std::fs::File::create(&dev).unwrap().set_len(128 << 20).unwrap();
    let d = Daemon::new("acl");
    let dev_s = dev.to_str().unwrap();
    // compression=off: the ACL's block is read back raw by DVA with zdb -R below.
    d.ok("rzpool", &["create", "-o", "ashift=9", "-O", "compression=off", "-m", "none", "pacl", dev_s]);
    // Mount points live in a directory anyone may traverse.
    let mnt = |n: &str| dir.join(format!("m-{n}"));
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mp = |n: &str| format!("mountpoint={}", mnt(n).display());

    // --- acltype=posix: the kernel enforces ACLs ------------------------------------------
    let fs = mnt("fs");
    d.ok("rzfs", &["create", "-o", "acltype=posix", "-o", &mp("fs"), "pacl/fs"]);
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value,source", "acltype", "pacl/fs"]), "posix\tlocal\n");
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value,source", "acltype", "pacl"]), "off\tdefault\n");
    let o = mount_options(&fs);
    for no in ["noexec", "nosuid", "nodev", "ro"] {
        assert!(!o.contains(&no.to_string()), "exec/setuid/devices=on: {no} in {o:?}");
    }
    let secret = fs.join("secret");
    std::fs::write(&secret, b"s3cret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let cat = format!("cat {}", secret.display());
    assert!(!as_nobody(&cat), "mode 0600 shuts uid 65534 out");
    sh(&format!("setfacl -m u:65534:r {}", secret.display()));
    assert!(as_nobody(&cat), "user:65534:r lets it in");
    assert_eq!(std::fs::metadata(&secret).unwrap().mode() & 0o777, 0o640, "the mask is the group bits");
    sh(&format!("chmod 600 {}", secret.display()));
    assert!(sh(&format!("getfacl -c {}", secret.display())).contains("mask::---"), "chmod moves the mask");
    assert!(!as_nobody(&cat), "the mask shuts it out");
    sh(&format!("chmod 644 {}; setfacl -m u:65534:-,g::r {}", secret.display(), secret.display()));
    assert!(!as_nobody(&cat), "user:65534:--- denies although others may read");
    assert!(!as_nobody(&format!("setfacl -m u:65534:r {}", secret.display())), "only the owner sets ACLs");
    sh(&format!("setfacl -m u:65534:r {}", secret.display()));
    // Default ACLs are inherited; the umask does not apply under them.
    let shared = fs.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o700)).unwrap();
    sh(&format!("setfacl -m u:65534:rwx -d -m u:65534:rw {}", shared.display()));
    sh(&format!("umask 077; echo new > {s}/new; mkdir {s}/sub", s = shared.display()));
    let facl = sh(&format!("getfacl -c {}/new", shared.display()));
    assert!(facl.contains("user:nobody:rw-"), "inherited: {facl}");
    assert!(as_nobody(&format!("echo more >> {}/new", shared.display())), "the inherited entry grants write");
    let facl = sh(&format!("getfacl -c {}/sub", shared.display()));
    assert!(facl.contains("default:user:nobody:rw-"), "directories inherit the default ACL: {facl}");
    let secret_obj = std::fs::metadata(&secret).unwrap().ino();

    // --- exec=off setuid=off devices=off ------------------------------------------------
    let nx = mnt("nx");
    d.ok(
        "rzfs",
        &["create", "-o", "exec=off", "-o", "setuid=off", "-o", "devices=off", "-o", &mp("nx"), "pacl/nx"],
    );
    assert_eq!(
        d.ok("rzfs", &["get", "-H", "-o", "value", "exec,setuid,devices", "pacl/nx"]),
        "off\noff\noff\n"
    );
    let o = mount_options(&nx);
    for want in ["noexec", "nosuid", "nodev"] {
        assert!(o.contains(&want.to_string()), "{want} missing: {o:?}");
    }
    let script = nx.join("run.sh");
    std::fs::write(&script, b"#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = Command::new(&script).status().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(13), "exec=off: EACCES, got {e}");
    // `zfs set exec=on` takes effect at the next mount.
    d.ok("rzfs", &["set", "exec=on", "pacl/nx"]);
    d.ok("rzfs", &["unmount", "pacl/nx"]);
    d.ok("rzfs", &["mount", "pacl/nx"]);
    assert!(!mount_options(&nx).contains(&"noexec".to_string()));
    assert_eq!(Command::new(&script).output().unwrap().stdout, b"hi\n");
    // ... and `rzfs mount -o noexec` is a temporary option.
    d.ok("rzfs", &["unmount", "pacl/nx"]);
    d.ok("rzfs", &["mount", "-o", "noexec", "pacl/nx"]);
    assert!(mount_options(&nx).contains(&"noexec".to_string()));

    // --- acltype=off: ACLs refused ---------------------------------------------------------
    d.ok("rzfs", &["create", "-o", &mp("off"), "pacl/off"]);
    std::fs::write(mnt("off").join("f"), b"").unwrap();
    let out = Command::new("setfacl").args(["-m", "u:65534:r"]).arg(mnt("off").join("f")).output().unwrap();
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Operation not supported"),
        "{out:?}"
    );

    // `zfs set` takes the old spellings and shows the new one; effective at the next mount.
    d.ok("rzfs", &["set", "acltype=posixacl", "pacl/off"]);
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "acltype", "pacl/off"]), "posix\n");
    d.ok("rzfs", &["unmount", "pacl/off"]);
    d.ok("rzfs", &["mount", "pacl/off"]);
    sh(&format!("setfacl -m u:65534:r {}", mnt("off").join("f").display()));
    d.ok("rzfs", &["set", "acltype=noacl", "pacl/off"]);
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "acltype", "pacl/off"]), "off\n");

    // --- acltype=nfsv4: as OpenZFS on Linux, the mode bits (read-write, no warning) ------
    let (code, _, err) = d.run("rzfs", &["create", "-o", "acltype=nfsv4", "-o", &mp("v4"), "pacl/v4"]);
    assert!(code == 0 && err.is_empty(), "create: {err}");
    assert!(!mount_options(&mnt("v4")).contains(&"ro".to_string()));
    std::fs::write(mnt("v4").join("f"), b"x").unwrap();
    std::fs::set_permissions(mnt("v4").join("f"), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(!as_nobody(&format!("cat {}", mnt("v4").join("f").display())), "mode 0600 shuts uid 65534 out");
    let e = std::process::Command::new("setfacl")
        .args(["-m", "u:65534:r"])
        .arg(mnt("v4").join("f"))
        .output()
        .unwrap();
    assert!(!e.status.success(), "POSIX ACLs are refused with nfsv4, as with off");
    let (code, _, err) = d.run("rzfs", &["mount", "-o", "bogus", "pacl", "/nonexistent"]);
    assert!(code != 0 && err.contains("unsupported mount option 'bogus'"), "{err}");

    // --- OpenZFS reads what was written ----------------------------------------------------
    d.ok("rzpool", &["export", "pacl"]);
    zdb_check(&dir, "pacl");
    let dir_s = dir.to_str().unwrap();
    let zn = run_zdb(&["-e", "-p", dir_s, "-dddd", "pacl/fs", &secret_obj.to_string()]);
    let xdir: u64 = zn
        .lines()
        .find_map(|l| l.trim().strip_prefix("xattr").map(str::trim))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no xattr directory in zdb -dddd:\n{zn}"));
    let xd = run_zdb(&["-e", "-p", dir_s, "-dddd", "pacl/fs", &xdir.to_string()]);
    let entry = xd
        .lines()
        .find(|l| l.trim().starts_with("system.posix_acl_access = "))
        .unwrap_or_else(|| panic!("no system.posix_acl_access in the xattr directory:\n{xd}"));
    let xobj = entry.split(" = ").nth(1).and_then(|v| v.split_whitespace().next()).unwrap();
    let xf = run_zdb(&["-e", "-p", dir_s, "-dddd", "pacl/fs", xobj]);
    // user::, user:65534:, group::, mask::, other:: — 4 + 5 * 8 bytes.
    assert!(xf.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["size", "44"]), "{xf}");
    // The bytes OpenZFS reads there (`zdb -R` of the xattr file's block) are what Linux itself
    // stores for the same ACL on a native file system, where the scratch directory allows ACLs.
    let blocks = run_zdb(&["-e", "-p", dir_s, "-ddddd", "pacl/fs", xobj]);
    let dva = blocks
        .lines()
        .find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() > 3 && w[1] == "L0").then(|| w[2].to_string())
        })
        .unwrap_or_else(|| panic!("no L0 block:\n{blocks}"));
    let (zdb_bin, lib) = zdb().unwrap();
    let raw = Command::new(zdb_bin)
        .args(["-e", "-p", dir_s, "-R", "pacl", &format!("{dva}:r")])
        .env("LD_LIBRARY_PATH", lib)
        .stderr(Stdio::null())
        .output()
        .unwrap()
        .stdout;
    assert!(raw.len() >= 44, "zdb -R {dva}: {} bytes", raw.len());
    let reference = dir.join("reference");
    std::fs::write(&reference, b"").unwrap();
    std::fs::set_permissions(&reference, std::fs::Permissions::from_mode(0o644)).unwrap();
    let native = Command::new("setfacl").args(["-m", "u:65534:r,g::r"]).arg(&reference).status().unwrap();
    if native.success() {
        let want = Command::new("getfattr")
            .args(["--only-values", "-n", "system.posix_acl_access"])
            .arg(&reference)
            .output()
            .unwrap()
            .stdout;
        assert_eq!(&raw[..44], want.as_slice(), "on-disk ACL bytes differ from the kernel's own");
    } else {
        eprintln!(
            "{} has no ACL support: on-disk bytes not compared with a native file system",
            dir.display()
        );
    }

    // --- imported again: the ACL still holds ---------------------------------------------
    d.ok("rzpool", &["import", "-N", "-d", dir_s, "pacl"]);
    d.ok("rzfs", &["mount", "pacl/fs"]);
    let facl = sh(&format!("getfacl -c {}", secret.display()));
    assert_eq!(facl, "user::rw-\nuser:nobody:r--\ngroup::r--\nmask::r--\nother::r--\n\n");
    sh(&format!("setfacl -m u:65534:- {}", secret.display()));
    assert!(!as_nobody(&cat));
    d.ok("rzfs", &["snapshot", "pacl/fs@s"]);
    d.ok("rzpool", &["export", "pacl"]);
    zdb_check(&dir, "pacl");
    // A read-only import enforces the same ACLs (the read-only adapter), in snapshots too:
    // the deny entry beats the other bits, the grant opens the 0700 directory.
    d.ok("rzpool", &["import", "-N", "-d", dir_s, "-o", "readonly=on", "pacl"]);
    d.ok("rzfs", &["mount", "pacl/fs"]);
    assert!(mount_options(&fs).contains(&"ro".to_string()));
    assert!(sh(&format!("getfacl -c {}", secret.display())).contains("user:nobody:---"));
    assert_eq!(std::fs::metadata(&secret).unwrap().mode() & 0o7, 0o4, "others may read");
    assert!(!as_nobody(&cat), "user:nobody:--- denies");
    assert!(as_nobody(&format!("cat {}/new", shared.display())), "the ACL opens the 0700 directory");
    let snap = fs.join(".zfs/snapshot/s");
    assert!(!as_nobody(&format!("cat {}/secret", snap.display())), "denied in the snapshot");
    assert!(as_nobody(&format!("cat {}/shared/new", snap.display())), "granted in the snapshot");
    // Mount options on the read-only adapter: pacl/nx has setuid=off devices=off (exec=on
    // since the set above); -o noexec adds noexec.
    d.ok("rzfs", &["mount", "-o", "noexec", "pacl/nx"]);
    let o = mount_options(&nx);
    for want in ["ro", "noexec", "nosuid", "nodev"] {
        assert!(o.contains(&want.to_string()), "read-only mount: {want} missing: {o:?}");
    }
    assert_eq!(Command::new(&script).status().unwrap_err().raw_os_error(), Some(13));
    d.ok("rzpool", &["export", "pacl"]);
    let _ = std::fs::remove_dir_all(&dir);
}
