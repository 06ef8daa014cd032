//! # Installed like ZFS (issue 14)
//!
//! `scripts/install.sh --destdir D --bin-dir <this build's binaries> --compat --systemd`
//! stages rzfs as a user would install it:
//! * the five binaries in `PREFIX/bin`, identical to the built ones; `zfs`, `zpool`, `zdb`
//!   and `zinject` as relative links in `PREFIX/lib/rzfs/compat/bin` only (nothing named
//!   like OpenZFS's commands anywhere else); a second run changes nothing;
//! * the systemd units pass `systemd-analyze verify` (their `ExecStart` pointed at the staged
//!   binaries, their `Documentation=` man pages found in the staged man directory);
//! * every man page renders with `man --warnings -l` without a warning and documents every
//!   subcommand `--help` lists;
//! * with the compat directory first on PATH, `zpool create` starts the *installed* rzfsd
//!   (on a private socket) and `zpool`/`zfs`/`zdb` run a pool's life: create, `zfs create`,
//!   a file written through the mount, `zfs list -H`, `zpool export`, `zdb -e -d`;
//! * `install.sh --uninstall` leaves no file or link in D.
//!
//! Runs in the oracle tier (skipped with `RZFS_ORACLE=0`); needs FUSE and root, and
//! `systemd-analyze` and `man` (a failure with `RZFS_ORACLE=1` when they are missing:
//! `scripts/install-test-deps.sh` installs them).

mod common;

use common::tools::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const PREFIX: &str = "/usr/local";
const PROGS: [&str; 5] = ["rzfs", "rzpool", "rzfsd", "rzdb", "rzinject"];
const COMPAT: [(&str, &str); 4] =
    [("zfs", "rzfs"), ("zpool", "rzpool"), ("zdb", "rzdb"), ("zinject", "rzinject")];
const UNITS: [&str; 5] =
    ["rzfsd.service", "rzfs-import-cache.service", "rzfs-import.target", "rzfs-mount.service", "rzfs.target"];

fn has_tool(name: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {name}")]).output().is_ok_and(|o| o.status.success())
}

/// Whether this test runs here (see the module documentation).
fn enabled() -> bool {
    if std::env::var("RZFS_ORACLE").is_ok_and(|v| v == "0") {
        eprintln!("install: oracle tier disabled (RZFS_ORACLE=0)");
        return false;
    }
    let missing: Vec<&str> = ["systemd-analyze", "man"].into_iter().filter(|t| !has_tool(t)).collect();
    if !missing.is_empty() {
        assert!(
            !std::env::var("RZFS_ORACLE").is_ok_and(|v| v == "1"),
            "RZFS_ORACLE=1 but {missing:?} missing: run scripts/install-test-deps.sh"
        );
        eprintln!("install: {missing:?} not installed; skipped");
        return false;
    }
    if !fuse_usable() {
        eprintln!("install: needs FUSE and root; skipped");
        return false;
    }
    true
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory of this build's binaries (all five are built for the integration tests).
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_rzfs")).parent().unwrap().to_path_buf()
}

/// Runs `install.sh args`; its output (stdout + stderr), after checking it succeeded.
fn install(args: &[&str]) -> String {
    let out =
        Command::new(repo().join("scripts/install.sh")).args(args).env_remove("DESTDIR").output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "install.sh {args:?} failed:\n{text}");
    assert!(!text.contains("warning"), "install.sh {args:?} warned:\n{text}");
    text
}

/// Every file and symbolic link under `dir`.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            out.extend(files_under(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out.sort();
    out
}

/// The subcommands `PROG --help` lists (through the daemon on `sock`).
fn subcommands(bin: &Path, sock: &Path) -> Vec<String> {
    let out = Command::new(bin).arg("--help").env("RZFS_SOCKET", sock).output().unwrap();
    assert!(out.status.success(), "{} --help: {}", bin.display(), String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|s| s != "help")
        .collect()
}

#[test]
fn install_compat_units_man_pages_and_uninstall() {
    if !enabled() {
        return;
    }
    let dir = scratch("install");
    let dest = dir.join("dest");
    let dest_s = dest.to_str().unwrap().to_string();
    let bins = bin_dir();
    let bins_s = bins.to_str().unwrap().to_string();
    let staged = |p: &str| dest.join(p.trim_start_matches('/'));

    // --- install, then again (nothing changes) -----------------------------------------
    let args = ["--destdir", &dest_s, "--bin-dir", &bins_s, "--compat", "--systemd"];
    let first = install(&args);
    let bindir = staged(&format!("{PREFIX}/bin"));
    let compat = staged(&format!("{PREFIX}/lib/rzfs/compat/bin"));
    let mandir = staged(&format!("{PREFIX}/share/man"));
    let unitdir = staged(&format!("{PREFIX}/lib/systemd/system"));
    for p in PROGS {
        let f = bindir.join(p);
        assert!(first.contains(&format!("installed  {}", f.display())), "{p} not reported:\n{first}");
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&f).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o755, "{}", f.display());
        assert!(
            std::fs::read(&f).unwrap() == std::fs::read(bins.join(p)).unwrap(),
            "{} differs",
            f.display()
        );
        assert!(mandir.join("man8").join(format!("{p}.8")).is_file(), "no man page for {p}");
    }
    for (name, prog) in COMPAT {
        let l = compat.join(name);
        let target = std::fs::read_link(&l).unwrap_or_else(|e| panic!("{}: {e}", l.display()));
        assert!(target.is_relative(), "{} -> {}", l.display(), target.display());
        assert_eq!(l.canonicalize().unwrap(), bindir.join(prog).canonicalize().unwrap());
    }
    // OpenZFS's names exist nowhere but in the compat directory.
    for f in files_under(&dest) {
        let name = f.file_name().unwrap().to_str().unwrap();
        if COMPAT.iter().any(|(n, _)| *n == name) {
            assert_eq!(f.parent().unwrap(), compat, "{} outside the compat directory", f.display());
        }
    }
    for u in UNITS {
        let text = std::fs::read_to_string(unitdir.join(u)).unwrap();
        assert!(!text.contains("@BINDIR@"), "{u}: {text}");
    }
    let daemon_unit = std::fs::read_to_string(unitdir.join("rzfsd.service")).unwrap();
    assert!(daemon_unit.contains(&format!("ExecStart={PREFIX}/bin/rzfsd --socket /run/rzfs/rzfsd.sock")));
    let again = install(&args);
    let changed: Vec<&str> =
        again.lines().filter(|l| l.starts_with("installed") || l.starts_with("linked")).collect();
    assert!(changed.is_empty(), "a second install changed files:\n{again}");

    // --- systemd-analyze verify, with ExecStart= at the staged binaries -------------------
    let vdir = dir.join("verify");
    std::fs::create_dir_all(&vdir).unwrap();
    for u in UNITS {
        let text = std::fs::read_to_string(unitdir.join(u)).unwrap();
        let text = text.replace(&format!("{PREFIX}/bin/"), &format!("{}/", bindir.display()));
        std::fs::write(vdir.join(u), text).unwrap();
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .args(UNITS.iter().map(|u| vdir.join(u)))
        .env("MANPATH", &mandir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = err.lines().filter(|l| l.contains("rzfs")).collect();
    assert!(out.status.success() && ours.is_empty(), "systemd-analyze verify:\n{err}");

    // --- the man pages render without warnings and cover every subcommand -----------------
    let d = Daemon::new("install");
    for p in PROGS {
        let page = mandir.join("man8").join(format!("{p}.8"));
        let out = Command::new("man")
            .args(["--warnings", "-l"])
            .arg(&page)
            .env("MANWIDTH", "80")
            .env("LC_ALL", "C.UTF-8")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success() && err.trim().is_empty(), "man -l {}:\n{err}", page.display());
        for section in ["NAME", "SYNOPSIS", "DESCRIPTION", "SEE ALSO"] {
            assert!(text.contains(section), "{p}.8 has no {section}:\n{text}");
        }
        if p == "rzfs" || p == "rzpool" {
            for s in subcommands(&bins.join(p), &d.sock) {
                assert!(text.contains(&format!("{p} {s}")), "{p}.8 does not document '{s}'");
            }
        }
    }
    drop(d);

    // --- a pool's life through the compat names -----------------------------------------
    let d = Daemon::new("install-compat");
    let path = format!("{}:{}", compat.display(), std::env::var("PATH").unwrap_or_default());
    let run = |prog: &str, args: &[&str]| -> String {
        let out = Command::new(prog)
            .args(args)
            .env("PATH", &path)
            .env("RZFS_SOCKET", &d.sock)
            .env("LC_ALL", "C")
            .output()
            .unwrap();
        let (o, e) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{prog} {args:?} failed:\n{o}{e}");
        o.into_owned()
    };
    let vdevs = dir.join("vdevs");
    std::fs::create_dir_all(&vdevs).unwrap();
    let devs = files(&vdevs, 2, 128 << 20);
    let mnt = dir.join("mnt");
    run("zpool", &["create", "-m", mnt.to_str().unwrap(), "itank", "mirror", &devs[0], &devs[1]]);
    // The daemon the compat zpool started is the installed one, found beside rzpool.
    let pids = d.pids();
    assert_eq!(pids.len(), 1, "one rzfsd on {}", d.sock.display());
    let exe = std::fs::read_link(Path::new("/proc").join(&pids[0]).join("exe")).unwrap();
    assert_eq!(exe, bindir.join("rzfsd").canonicalize().unwrap());
    run("zfs", &["create", "itank/fs"]);
    std::fs::write(mnt.join("fs").join("hello"), b"installed\n").unwrap();
    assert_eq!(run("zfs", &["list", "-H", "-o", "name"]), "itank\nitank/fs\n");
    assert!(run("zpool", &["list", "-H", "-o", "name,health"]).starts_with("itank\tONLINE"));
    run("zpool", &["export", "itank"]);
    assert_eq!(run("zpool", &["list", "-H"]), "");
    assert!(mounts_under(&mnt).is_empty(), "still mounted: {:?}", mounts_under(&mnt));
    let zdb = run("zdb", &["-e", "-p", vdevs.to_str().unwrap(), "-d", "itank"]);
    assert!(zdb.contains("itank/fs"), "zdb -d:\n{zdb}");
    drop(d);

    // --- uninstall leaves nothing behind ------------------------------------------------
    let out = install(&["--destdir", &dest_s, "--uninstall"]);
    let left = files_under(&dest);
    assert!(left.is_empty(), "left after --uninstall: {left:?}\n{out}");
    assert!(!staged(&format!("{PREFIX}/lib/rzfs")).exists());
    // Uninstalling again is a no-op.
    install(&["--destdir", &dest_s, "--uninstall"]);
    let _ = std::fs::remove_dir_all(&dir);
}
