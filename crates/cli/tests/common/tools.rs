//! Tools of the write-path tests: OpenZFS's zdb as the oracle, and a private rzfsd.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

const ORACLE_ROOT: &str = "/opt/rzfs-oracles/openzfs";

/// The zdb binary and its library path, or None when oracle tests are off.
pub fn zdb() -> Option<(PathBuf, String)> {
    if std::env::var("RZFS_ORACLE").is_ok_and(|v| v == "0") {
        eprintln!("oracle tier disabled (RZFS_ORACLE=0)");
        return None;
    }
    let bin = Path::new(ORACLE_ROOT).join("sbin/zdb");
    if !bin.is_file() {
        assert!(
            !std::env::var("RZFS_ORACLE").is_ok_and(|v| v == "1"),
            "RZFS_ORACLE=1 but {} is missing",
            bin.display()
        );
        eprintln!("zdb not installed; run scripts/install-test-deps.sh");
        return None;
    }
    Some((bin, format!("{ORACLE_ROOT}/lib/x86_64-linux-gnu")))
}

/// Runs zdb with `args`; returns stdout + stderr.
pub fn run_zdb(args: &[&str]) -> String {
    let (bin, lib) = zdb().expect("zdb");
    let out = Command::new(bin).args(args).env("LD_LIBRARY_PATH", lib).output().unwrap();
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Checks an exported pool with zdb: checksums of every block, leaks, feature refcounts,
/// MOS object leaks. Returns the `zdb -d` dataset lines.
pub fn zdb_check(dir: &Path, pool: &str) -> String {
    let d = dir.to_str().unwrap();
    let out = run_zdb(&["-e", "-p", d, "-bcc", "-d", pool]);
    assert!(out.contains("No leaks"), "zdb -bcc of {pool} in {d}:\n{out}");
    for bad in ["leaked", "error", "ASSERT", "mismatch", "is not correct"] {
        let hits: Vec<&str> =
            out.lines().filter(|l| l.contains(bad) && !l.contains("verify nothing leaked")).collect();
        assert!(hits.is_empty(), "zdb reports '{bad}' for {pool} in {d}:\n{out}");
    }
    rzdb_space_check(dir, pool);
    super::useracct::user_accounting_check(dir, pool);
    // The DSL's space accounting, recounted from the blocks (pools without RAID-Z, whose
    // deflated sizes the recount does not model).
    let cfg = run_zdb(&["-e", "-p", d, "-C", pool]);
    if !cfg.contains("type: 'raidz'") && !cfg.contains("type: 'draid'") {
        super::space::dsl_space_check(dir, pool);
    }
    out
}

/// `rzdb -b` must see what zdb saw in [`zdb_check`]: no leaks, nothing referenced but free
/// (or say why it could not check the space maps).
pub fn rzdb_space_check(dir: &Path, pool: &str) {
    let d = dir.to_str().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rzdb")).args(["-e", "-p", d, "-b", pool]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success()
            && (text.contains("No leaks (block sum matches space maps exactly)")
                || text.contains("space maps not checked")),
        "rzdb -b of {pool} in {d} disagrees with zdb:\n{text}"
    );
}

/// A daemon of our own (socket in a temp dir), stopped on drop (its binaries come from the
/// test crate: `CARGO_BIN_EXE_*`).
pub struct Daemon {
    pub sock: PathBuf,
    /// Environment of every client call (and so of the daemon the first one starts).
    pub env: Vec<(String, String)>,
}

impl Daemon {
    pub fn new(tag: &str) -> Daemon {
        let sock = std::env::temp_dir().join(format!("rzfs-w-{}-{tag}/rzfsd.sock", std::process::id()));
        Daemon { sock, env: Vec::new() }
    }

    /// A daemon started with these environment variables (tunables such as
    /// `RZFS_TXG_TIMEOUT`).
    pub fn with_env(tag: &str, env: &[(&str, &str)]) -> Daemon {
        let mut d = Daemon::new(tag);
        d.env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        d
    }
    pub fn run(&self, prog: &str, args: &[&str]) -> (i32, String, String) {
        let exe = match prog {
            "rzpool" => env!("CARGO_BIN_EXE_rzpool"),
            _ => env!("CARGO_BIN_EXE_rzfs"),
        };
        let exe = match prog {
            "rzinject" => env!("CARGO_BIN_EXE_rzinject"),
            _ => exe,
        };
        // Each test daemon (started by its first command) keeps its volume tree and
        // /dev/zvol links beside its socket: daemons of tests running side by side must
        // not stack their volume mounts at the system's /run/rzfs/volumes, and one killed
        // must not leave a dead mount there. A test's own settings come after (override).
        let own = self.sock.parent().unwrap_or(Path::new("/tmp"));
        let out = Command::new(exe)
            .args(args)
            .env("RZFS_SOCKET", &self.sock)
            .env("RZFS_VOL_DIR", own.join("volumes"))
            .env("RZFS_ZVOL_DIR", own.join("zvol"))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
    pub fn ok(&self, prog: &str, args: &[&str]) -> String {
        let (code, out, err) = self.run(prog, args);
        assert_eq!(code, 0, "{prog} {args:?} failed: {err}");
        out
    }

    /// Pids of the rzfsd processes serving this socket.
    pub fn pids(&self) -> Vec<String> {
        let needle = self.sock.to_string_lossy().into_owned();
        let mut pids = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
                let cmd = String::from_utf8_lossy(&cmd);
                if cmd.contains("rzfsd") && cmd.contains(&needle) {
                    pids.push(name);
                }
            }
        }
        pids
    }

    /// SIGKILL to the daemon (a crash); returns once the process is gone or a zombie (its
    /// files are closed, its mounts dead).
    pub fn kill9(&self) {
        let pids = self.pids();
        assert_eq!(pids.len(), 1, "expected one rzfsd for {}", self.sock.display());
        let st = Command::new("kill").arg("-9").arg(&pids[0]).status().unwrap();
        assert!(st.success());
        let t0 = std::time::Instant::now();
        let proc = Path::new("/proc").join(&pids[0]);
        // The leader turns zombie while its other threads may still be exiting with the
        // socket and device locks open: wait until only the zombie leader is left.
        let alive = || {
            let zombie = std::fs::read_to_string(proc.join("stat")).map(|s| s.contains(") Z "));
            let threads = std::fs::read_dir(proc.join("task")).map(|d| d.count()).unwrap_or(0);
            match zombie {
                Err(_) => false,
                Ok(z) => !z || threads > 1,
            }
        };
        while alive() {
            assert!(t0.elapsed() < std::time::Duration::from_secs(10), "rzfsd {} survived SIGKILL", pids[0]);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

/// Detaches the FUSE mount at `mnt` of a dead daemon (which answers ENOTCONN).
pub fn lazy_unmount(mnt: &Path) {
    let _ =
        Command::new("fusermount3").arg("-u").arg("-z").arg(mnt).stderr(std::process::Stdio::null()).status();
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let needle = self.sock.to_string_lossy().into_owned();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
                if String::from_utf8_lossy(&cmd).contains(&needle) {
                    let _ = Command::new("kill").arg(e.file_name()).status();
                }
            }
        }
        // The daemon's directory (socket, log) stays for a failed test to be read, and
        // while anything is still mounted under it (never delete through a live mount).
        if let Some(dir) = self.sock.parent().filter(|_| !std::thread::panicking()) {
            let prefix = dir.to_string_lossy().into_owned();
            let mounts = std::fs::read_to_string("/proc/self/mounts").ok();
            let busy =
                |m: &str| m.lines().any(|l| l.split(' ').nth(1).is_some_and(|p| p.starts_with(&prefix)));
            if mounts.is_some_and(|m| !busy(&m)) {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

/// A fresh scratch directory for one test case (`tag` names it). It is removed when the
/// test passes (the guard drops without a panic) and nothing is mounted below it; a failed
/// test keeps its vdev files and streams to be looked at.
pub fn scratch(tag: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("rzfs-wp-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

/// A scratch directory removed on a successful drop; derefs to its path.
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() && mounts_under(&self.0).is_empty() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// `n` sparse files of `size` bytes in `dir` (`d0`, `d1`...), for file vdevs.
pub fn files(dir: &Path, n: usize, size: u64) -> Vec<String> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("d{i}"));
            std::fs::File::create(&p).unwrap().set_len(size).unwrap();
            p.to_string_lossy().into_owned()
        })
        .collect()
}

/// Can this process serve FUSE mounts (the device exists and it runs as root)?
pub fn fuse_usable() -> bool {
    Path::new("/dev/fuse").exists()
        && std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(1)) == Some("0")
        })
}

/// True (after saying so) when a test that needs FUSE, root and zdb cannot run here.
pub fn skip_without_fuse_zdb(name: &str) -> bool {
    if !fuse_usable() || zdb().is_none() {
        eprintln!("{name}: needs FUSE, root and zdb; skipped");
        return true;
    }
    false
}

/// Mount points at or below `dir` in this mount namespace.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let d = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4).map(str::to_string))
        .filter(|m| *m == d || m.starts_with(&format!("{d}/")))
        .collect()
}

/// OpenZFS's zhack, from the oracle install (scripts/install-test-deps.sh).
pub const ZHACK: &str = "/opt/rzfs-oracles/openzfs/sbin/zhack";

/// Imports `pool` (devices in `dir`) read-write with OpenZFS's libzpool, syncs a few txgs
/// (a feature is enabled) and exports it again: OpenZFS's own kernel code opening what rzfs
/// wrote, in userland.
pub fn openzfs_import(dir: &Path, pool: &str, feature: &str) {
    zhack(dir, &["feature", "enable", "-d", "rzfs oracle test", pool, feature]);
}

/// Runs `zhack -d DIR ARGS...` in a private mount namespace (zhack wants /dev/zfs and
/// /etc/zfs, which must not be the host's).
pub fn zhack(dir: &Path, args: &[&str]) {
    let (_, lib) = zdb().unwrap();
    let script = r#"set -e
mount -t tmpfs none /dev
mknod /dev/null c 1 3; mknod /dev/zero c 1 5; mknod /dev/random c 1 8; mknod /dev/urandom c 1 9
mknod /dev/zfs c 1 3
mkdir -p /etc/zfs; mount -t tmpfs none /etc/zfs
exec "$@""#;
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script, "sh", ZHACK, "-d"])
        .arg(dir)
        .args(args)
        .env("LD_LIBRARY_PATH", lib)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "zhack (OpenZFS) {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
