//! Who may talk to rzfsd (README "Access"): a daemon started under umask 000 still makes
//! its socket directory 0700 and its socket 0600; an unprivileged user (uid 65534, run
//! through util-linux's `setpriv`) can neither create nor destroy pools nor datasets, nor
//! list them, and a root-only file vdev is left untouched; even with the socket's modes
//! opened up by hand, the daemon's own `SO_PEERCRED` check refuses. With a read group, its
//! members may list but not change. Requests are bounded: "request too large" and "too
//! many connections" are answered, and an idle client times out without holding up others.
//! Unsafe socket directories (a symbolic link, world-writable) are refused by client and
//! daemon. The tests that switch users need root and are skipped otherwise.

use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const NOBODY: u32 = 65534;

fn root_or_skip(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        let setpriv = Command::new("setpriv").arg("--version").output();
        assert!(
            setpriv.is_ok_and(|o| o.status.success()),
            "setpriv (util-linux) is needed to run clients as uid {NOBODY}"
        );
        true
    } else {
        eprintln!("{test}: skipped, needs root (it runs clients as uid {NOBODY} against a root daemon)");
        false
    }
}

/// A scratch directory everyone may enter (clients run as another user live there too).
fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rzfs-acc-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("bin")).unwrap();
    for p in [&d, &d.join("bin")] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // Copies of the clients uid 65534 can execute (the build tree may not be reachable).
    for (name, src) in [("rzpool", env!("CARGO_BIN_EXE_rzpool")), ("rzfs", env!("CARGO_BIN_EXE_rzfs"))] {
        let dst = d.join("bin").join(name);
        std::fs::copy(src, &dst).unwrap();
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    d
}

/// A file vdev only its owner may read or write.
fn private_vdev(path: &Path) {
    let f = std::fs::OpenOptions::new().create_new(true).write(true).mode(0o600).open(path).unwrap();
    f.set_len(128 << 20).unwrap();
    f.set_permissions(std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// What proves a file untouched: owner, mode, modification time and content hash.
fn fingerprint(path: &Path) -> (u32, u32, i64, i64, Vec<u8>) {
    use sha2::{Digest, Sha256};
    let md = std::fs::metadata(path).unwrap();
    let mut h = Sha256::new();
    let mut f = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    (md.uid(), md.mode() & 0o7777, md.mtime(), md.mtime_nsec(), h.finalize().to_vec())
}

/// An rzfsd of our own, started with `umask 000`, stopped on drop.
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn start(sock: &Path, extra: &[&str]) -> Daemon {
        let log = sock.parent().unwrap().with_extension("daemon-log");
        let logf = std::fs::File::create(&log).unwrap();
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"umask 000; exec "$0" "$@""#)
            .arg(env!("CARGO_BIN_EXE_rzfsd"))
            .arg("--socket")
            .arg(sock)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .spawn()
            .unwrap();
        for _ in 0..1000 {
            if let Ok(mut probe) = UnixStream::connect(sock) {
                // An empty request, answered to the end: the daemon has freed its
                // connection place by then (tests count places).
                probe.shutdown(std::net::Shutdown::Write).unwrap();
                let _ = probe.read_to_end(&mut Vec::new());
                return Daemon { child, log };
            }
            if let Some(st) = child.try_wait().unwrap() {
                panic!("rzfsd exited ({st}): {}", std::fs::read_to_string(&log).unwrap());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("rzfsd did not come up: {}", std::fs::read_to_string(&log).unwrap());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a client as the test's own user.
fn run(sock: &Path, prog: &str, args: &[&str]) -> (i32, String, String) {
    let exe = if prog == "rzpool" { env!("CARGO_BIN_EXE_rzpool") } else { env!("CARGO_BIN_EXE_rzfs") };
    output(Command::new(exe).args(args).env("RZFS_SOCKET", sock))
}

fn ok(sock: &Path, prog: &str, args: &[&str]) -> String {
    let (code, out, err) = run(sock, prog, args);
    assert_eq!(code, 0, "{prog} {args:?}: {err}");
    out
}

/// Runs a client (the copy in `base/bin`) as `uid`/`gid` with no supplementary groups.
fn run_as(uid: u32, gid: u32, base: &Path, sock: &Path, prog: &str, args: &[&str]) -> (i32, String, String) {
    output(
        Command::new("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .arg(base.join("bin").join(prog))
            .args(args)
            .env("RZFS_SOCKET", sock)
            .current_dir(base),
    )
}

fn output(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// Sends raw bytes and returns the daemon's answer (stderr text of the JSON response).
fn raw_exchange(sock: &Path, bytes: &[u8]) -> (i32, String) {
    let mut s = UnixStream::connect(sock).unwrap();
    // The daemon may answer and close before taking everything: a write error is expected then.
    let _ = s.write_all(bytes).and_then(|_| s.shutdown(std::net::Shutdown::Write));
    answer(s)
}

/// Reads the answer to the end of the connection. When the daemon answered without reading
/// all we sent, the kernel reports a reset after the answer: the answer must be complete.
fn answer(mut s: UnixStream) -> (i32, String) {
    let mut buf = Vec::new();
    if let Err(e) = s.read_to_end(&mut buf) {
        assert!(buf.ends_with(b"\n"), "{e} after {:?}", String::from_utf8_lossy(&buf));
    }
    let r: rzfs_cli::proto::Response =
        serde_json::from_slice(&buf).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&buf)));
    (r.exit, r.stderr)
}

#[test]
fn other_users_are_refused_even_under_umask_000() {
    if !root_or_skip("other_users_are_refused_even_under_umask_000") {
        return;
    }
    let base = scratch("refuse");
    let sock = base.join("run/rzfsd.sock");
    let d = Daemon::start(&sock, &[]);
    let dir = sock.parent().unwrap();
    assert_eq!(mode(dir), 0o700, "socket directory mode under umask 000");
    assert_eq!(mode(&sock), 0o600, "socket mode under umask 000");
    assert!(std::fs::symlink_metadata(&sock).unwrap().file_type().is_socket());

    let (f1, f2) = (base.join("f1"), base.join("f2"));
    private_vdev(&f1);
    private_vdev(&f2);
    ok(&sock, "rzpool", &["create", "-m", "none", "acc1", f1.to_str().unwrap()]);
    let before = fingerprint(&f2);
    let pools = ok(&sock, "rzpool", &["list", "-H", "-o", "name"]);
    let datasets = ok(&sock, "rzfs", &["list", "-H", "-o", "name"]);
    assert_eq!(pools, "acc1\n");

    let attempts: [(&str, Vec<&str>); 5] = [
        ("rzpool", vec!["create", "-m", "none", "evil", f2.to_str().unwrap()]),
        ("rzpool", vec!["destroy", "acc1"]),
        ("rzfs", vec!["create", "acc1/evil"]),
        ("rzpool", vec!["list"]),
        ("rzfs", vec!["list"]),
    ];
    let unchanged = |stage: &str| {
        assert_eq!(ok(&sock, "rzpool", &["list", "-H", "-o", "name"]), pools, "{stage}");
        assert_eq!(ok(&sock, "rzfs", &["list", "-H", "-o", "name"]), datasets, "{stage}");
        assert_eq!(fingerprint(&f2), before, "{stage}: the root-only vdev changed");
        assert_eq!((mode(&f1), std::fs::metadata(&f1).unwrap().uid()), (0o600, 0));
    };
    // The socket's modes keep uid 65534 out: refused before reaching the daemon, and no
    // daemon of its own is started in root's directory.
    for (prog, args) in &attempts {
        let (code, out, err) = run_as(NOBODY, NOBODY, &base, &sock, prog, args);
        assert_eq!(code, 1, "{prog} {args:?} as uid {NOBODY}: {out}{err}");
        assert!(err.contains("permission denied"), "{prog} {args:?}: {err}");
        assert!(out.is_empty(), "{prog} {args:?}: {out}");
    }
    unchanged("after refused connections");
    assert_eq!(std::fs::read_dir(dir).unwrap().count(), 1, "only the socket is in its directory");

    // Opened up by hand, the socket still refuses: the daemon checks SO_PEERCRED itself.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    for (prog, args) in &attempts {
        let (code, out, err) = run_as(NOBODY, NOBODY, &base, &sock, prog, args);
        assert_eq!(code, 1, "{prog} {args:?} as uid {NOBODY}: {out}{err}");
        assert!(
            err.contains("permission denied: rzfsd serves only root; you are uid 65534"),
            "{prog} {args:?}: {err}"
        );
        assert!(out.is_empty(), "{prog} {args:?}: {out}");
    }
    unchanged("after refused requests");
    assert!(d.log().contains("refused rzpool destroy acc1 from uid 65534"), "{}", d.log());

    ok(&sock, "rzpool", &["destroy", "acc1"]);
    drop(d);
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn a_read_group_may_list_but_not_change() {
    if !root_or_skip("a_read_group_may_list_but_not_change") {
        return;
    }
    let base = scratch("group");
    let sock = base.join("run/rzfsd.sock");
    let group = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(NOBODY))
        .ok()
        .flatten()
        .map(|g| g.name)
        .unwrap_or_else(|| NOBODY.to_string());
    let d = Daemon::start(&sock, &["--read-group", &group]);
    let dir = sock.parent().unwrap();
    assert_eq!((mode(dir), std::fs::metadata(dir).unwrap().gid()), (0o750, NOBODY));
    assert_eq!((mode(&sock), std::fs::symlink_metadata(&sock).unwrap().gid()), (0o660, NOBODY));

    let f1 = base.join("f1");
    private_vdev(&f1);
    ok(&sock, "rzpool", &["create", "-m", "none", "acc2", f1.to_str().unwrap()]);
    ok(&sock, "rzfs", &["create", "acc2/fs"]);

    // A member reads.
    let member = |prog: &str, args: &[&str]| run_as(NOBODY, NOBODY, &base, &sock, prog, args);
    let (code, out, err) = member("rzpool", &["list", "-H", "-o", "name"]);
    assert_eq!((code, out.as_str()), (0, "acc2\n"), "{err}");
    let (code, out, err) = member("rzfs", &["list", "-H", "-o", "name"]);
    assert_eq!((code, out.as_str()), (0, "acc2\nacc2/fs\n"), "{err}");
    for args in [&["status", "acc2"][..], &["get", "health", "acc2"], &["history", "acc2"]] {
        let (code, _, err) = member("rzpool", args);
        assert_eq!(code, 0, "rzpool {args:?}: {err}");
    }
    assert_eq!(member("rzfs", &["get", "-H", "-o", "value", "type", "acc2/fs"]).1, "filesystem\n");

    // ... but changes nothing (nor scans devices with the daemon's privileges).
    let f2 = base.join("f2");
    private_vdev(&f2);
    let before = fingerprint(&f2);
    let changes: [(&str, Vec<&str>); 6] = [
        ("rzpool", vec!["create", "-m", "none", "evil", f2.to_str().unwrap()]),
        ("rzpool", vec!["destroy", "acc2"]),
        ("rzpool", vec!["import", "-N", "-d", base.to_str().unwrap()]),
        ("rzfs", vec!["create", "acc2/evil"]),
        ("rzfs", vec!["destroy", "acc2/fs"]),
        ("rzfs", vec!["mount", "acc2/fs", base.to_str().unwrap()]),
    ];
    for (prog, args) in &changes {
        let (code, out, err) = member(prog, args);
        assert_eq!(code, 1, "{prog} {args:?}: {out}{err}");
        assert!(err.contains("permission denied") && err.contains("changes state"), "{prog} {args:?}: {err}");
    }

    // A non-member: kept out by the modes, and by the daemon when the modes are opened up.
    let stranger = |prog: &str, args: &[&str]| run_as(NOBODY - 1, NOBODY - 1, &base, &sock, prog, args);
    let (code, _, err) = stranger("rzpool", &["list"]);
    assert_eq!(code, 1);
    assert!(err.contains("permission denied"), "{err}");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, out, err) = stranger("rzpool", &["list"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("permission denied") && err.contains(&format!("is not in group '{group}'")),
        "{err}"
    );
    let (code, _, err) = stranger("rzpool", &["destroy", "acc2"]);
    assert_eq!(code, 1);
    assert!(err.contains("permission denied"), "{err}");

    assert_eq!(ok(&sock, "rzpool", &["list", "-H", "-o", "name"]), "acc2\n");
    assert_eq!(ok(&sock, "rzfs", &["list", "-H", "-o", "name"]), "acc2\nacc2/fs\n");
    assert_eq!(fingerprint(&f2), before);
    assert!(d.log().contains("refused"), "{}", d.log());
    ok(&sock, "rzpool", &["destroy", "acc2"]);
    drop(d);
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn requests_are_bounded() {
    let base = std::env::temp_dir().join(format!("rzfs-acc-{}-limits", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();

    // Two connections at most; idle ones wait up to a minute for their request.
    let sock = base.join("a/rzfsd.sock");
    let d = Daemon::start(&sock, &["--max-connections", "2", "--request-timeout", "60"]);
    let a = UnixStream::connect(&sock).unwrap();
    let b = UnixStream::connect(&sock).unwrap();
    // The accept loop takes connections in order, so a and b hold both places now.
    assert_eq!(
        raw_exchange(&sock, b"{}\n"),
        (1, "rzfsd: too many connections (limit 2); try again\n".into())
    );
    let (code, _, err) = run(&sock, "rzpool", &["list"]);
    assert_eq!(code, 1);
    assert!(err.contains("too many connections"), "{err}");
    // Their requests end (empty): each is answered, and its place is free before it closes.
    for s in [a, b] {
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let (code, err) = answer(s);
        assert_eq!(code, 1);
        assert!(err.contains("malformed request"), "{err}");
    }
    // An idle client does not hold up another.
    let _idle = UnixStream::connect(&sock).unwrap();
    assert_eq!(ok(&sock, "rzpool", &["list"]), "no pools available\n");
    drop(d);

    // Too large: answered, not reset — over a raw socket and through the client.
    let sock = base.join("b/rzfsd.sock");
    let d = Daemon::start(&sock, &["--request-timeout", "1"]);
    let big = vec![b'x'; 200 << 10];
    assert_eq!(raw_exchange(&sock, &big), (1, "request too large (more than 65536 bytes)\n".into()));
    let long_arg = "a".repeat(70 << 10);
    let (code, out, err) = run(&sock, "rzpool", &["list", &long_arg]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(err, "request too large (more than 65536 bytes)\n");

    // A request that does not arrive in time is answered with a timeout; the timeout is
    // for the request only: a pool create (longer than some timeouts) runs to the end.
    let mut slow = UnixStream::connect(&sock).unwrap();
    slow.write_all(b"{\"version\":").unwrap();
    assert_eq!(answer(slow), (1, "request not received within 1 s\n".into()));
    let f = base.join("f1");
    private_vdev(&f);
    ok(&sock, "rzpool", &["create", "-m", "none", "acct", f.to_str().unwrap()]);
    ok(&sock, "rzpool", &["destroy", "acct"]);
    drop(d);
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn unsafe_socket_directories_are_refused() {
    let base = std::env::temp_dir().join(format!("rzfs-acc-{}-dirs", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let wide = base.join("wide");
    std::fs::create_dir(&wide).unwrap();
    std::fs::set_permissions(&wide, std::fs::Permissions::from_mode(0o777)).unwrap();
    let real = base.join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = base.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();

    for (dir, why) in [(&wide, "writable by group or others"), (&link, "symbolic link")] {
        let sock = dir.join("rzfsd.sock");
        // The client neither connects nor starts a daemon there...
        let (code, _, err) = run(&sock, "rzpool", &["list"]);
        assert_eq!(code, 1);
        assert!(err.contains(why), "{err}");
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 0, "{}", dir.display());
        // ... and the daemon will not serve there.
        let out = Command::new(env!("CARGO_BIN_EXE_rzfsd")).arg("--socket").arg(&sock).output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{err}");
        assert_eq!(std::fs::read_dir(dir).unwrap().count(), 0, "{}", dir.display());
    }

    // A log planted as a link is not followed.
    let dir = base.join("logdir");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let victim = base.join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("rzfsd.log")).unwrap();
    let (code, _, err) = run(&dir.join("rzfsd.sock"), "rzpool", &["list"]);
    assert_eq!(code, 1);
    assert!(err.contains("rzfsd.log"), "{err}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    std::fs::remove_dir_all(&base).unwrap();
}
