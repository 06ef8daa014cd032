//! The client side of the control socket: find (or start) `rzfsd`, send one request, print
//! the answer, exit with its code.

use crate::access;
use crate::proto::{Request, Response, MAX_RESPONSE_BYTES, PROTOCOL_VERSION};
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a client waits for a daemon it started to open its socket.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The control socket path: `$RZFS_SOCKET`, else `/run/rzfs/rzfsd.sock` for root, else
/// `$XDG_RUNTIME_DIR/rzfs/rzfsd.sock` (or `/tmp/rzfs-$UID/rzfsd.sock`).
pub fn socket_path() -> PathBuf {
    if let Some(p) = std::env::var_os("RZFS_SOCKET") {
        return PathBuf::from(p);
    }
    let uid = current_uid();
    if uid == 0 {
        return PathBuf::from("/run/rzfs/rzfsd.sock");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) => Path::new(&d).join("rzfs/rzfsd.sock"),
        None => PathBuf::from(format!("/tmp/rzfs-{uid}/rzfsd.sock")),
    }
}

fn current_uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

/// Owners a client accepts for the socket's directory: itself and root. A directory
/// anyone else controls could hold a socket that impersonates the daemon.
fn trusted_owners() -> Vec<u32> {
    let me = current_uid();
    if me == 0 {
        vec![0]
    } else {
        vec![me, 0]
    }
}

fn socket_dir(sock: &Path) -> &Path {
    match sock.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Sends `req` to the daemon at `sock` and returns its answer.
pub fn call(sock: &Path, req: &Request) -> std::io::Result<Response> {
    let s = UnixStream::connect(sock)?;
    exchange(&s, req)
}

/// Sends `req` over a connected socket and reads the answer.
fn exchange(s: &UnixStream, req: &Request) -> std::io::Result<Response> {
    exchange_fds(s, req, &[])
}

/// [`exchange`], passing `fds` with the request (`SCM_RIGHTS` on its first bytes).
fn exchange_fds(s: &UnixStream, req: &Request, fds: &[std::os::fd::BorrowedFd]) -> std::io::Result<Response> {
    let mut line = serde_json::to_vec(req).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut line = &line[..];
    if !fds.is_empty() {
        use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        let mut space = [std::mem::MaybeUninit::<u8>::uninit();
            rustix::cmsg_space!(ScmRights(crate::access::MAX_PASSED_FDS))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(fds)) {
            return Err(std::io::Error::other("too many file descriptors to pass"));
        }
        let n = rustix::net::sendmsg(s, &[std::io::IoSlice::new(line)], &mut control, SendFlags::empty())?;
        line = &line[n..];
    }
    // A daemon that refuses a request early ("request too large", "too many connections")
    // answers and closes without reading the rest, so the write may fail while the answer
    // is already waiting: read it either way, and report the write error only if none came.
    let sent = (&*s).write_all(line).and_then(|_| s.shutdown(std::net::Shutdown::Write));
    let mut buf = Vec::new();
    let read = BufReader::new(s.take(MAX_RESPONSE_BYTES as u64)).read_until(b'\n', &mut buf);
    match (serde_json::from_slice::<Response>(&buf), sent, read) {
        (Ok(r), _, _) => Ok(r),
        (Err(_), Err(e), _) | (Err(_), Ok(()), Err(e)) => Err(e),
        (Err(e), Ok(()), Ok(_)) => Err(std::io::Error::other(format!("bad response from rzfsd: {e}"))),
    }
}

/// Starts `rzfsd` (found next to this executable, else on PATH) detached, listening on `sock`.
/// The socket directory is checked (or created 0700, 0750 for `$RZFS_READ_GROUP`) and the
/// log beside the socket opened without following links.
pub fn start_daemon(sock: &Path) -> std::io::Result<()> {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("rzfsd")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("rzfsd"));
    let group = match std::env::var("RZFS_READ_GROUP") {
        Ok(g) if !g.is_empty() => Some(access::ReadGroup::resolve(&g).map_err(std::io::Error::other)?.gid),
        _ => None,
    };
    access::ensure_dir(socket_dir(sock), &trusted_owners(), group).map_err(std::io::Error::other)?;
    let log = sock.with_extension("log");
    let logf = access::open_log(&log)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", log.display())))?;
    std::process::Command::new(exe)
        .arg("--socket")
        .arg(sock)
        .stdin(std::process::Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf)
        .process_group(0)
        .spawn()?;
    let t0 = Instant::now();
    while t0.elapsed() < START_TIMEOUT {
        if UnixStream::connect(sock).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(std::io::Error::other(format!("rzfsd did not start within {START_TIMEOUT:?}; see {}", log.display())))
}

/// The name this client was run as (its argv\[0\]'s file name) when it is `zpool` or `zfs`:
/// the daemon records commands in pool history under it.
fn invoked_as() -> Option<String> {
    let arg0 = std::env::args_os().next()?;
    let name = Path::new(&arg0).file_name()?.to_str()?;
    matches!(name, "zpool" | "zfs").then(|| name.to_string())
}

/// `argv` of `rzpool events` with `-f` among its flags, without it; `None` otherwise.
fn follow_argv(argv: &[String]) -> Option<Vec<String>> {
    if argv.first().map(String::as_str) != Some("events") {
        return None;
    }
    let mut found = false;
    let mut out = vec![argv[0].clone()];
    for a in &argv[1..] {
        match a.strip_prefix('-') {
            Some(flags) if !flags.is_empty() && !flags.starts_with('-') && flags.contains('f') => {
                found = true;
                let rest: String = flags.chars().filter(|&c| c != 'f').collect();
                if !rest.is_empty() {
                    out.push(format!("-{rest}"));
                }
            }
            _ => out.push(a.clone()),
        }
    }
    found.then_some(out)
}

/// One request of a client that follows (events -f, iostat INTERVAL): the daemon's answer,
/// or the client exits when the daemon cannot be reached.
fn call_or_exit(prog: &str, sock: &Path, argv: Vec<String>, cwd: &Path) -> Response {
    let req = Request {
        version: PROTOCOL_VERSION,
        prog: prog.to_string(),
        argv,
        cwd: cwd.to_path_buf(),
        invoked_as: invoked_as(),
    };
    call(sock, &req).unwrap_or_else(|e| {
        eprintln!("{prog}: cannot reach rzfsd at {}: {e}", sock.display());
        std::process::exit(1);
    })
}

/// `zpool events -f`: asks for the events after the newest one printed, every half second,
/// until interrupted (or the daemon goes away).
fn follow_events(prog: &str, sock: &Path, argv: Vec<String>, cwd: PathBuf) -> ! {
    use crate::proto::EVENTS_LAST_EID;
    let mut last = 0u64;
    let mut first = true;
    loop {
        let mut a = argv.clone();
        a.push(format!("--after={last}"));
        if !std::mem::take(&mut first) {
            a.push("--continued".into());
        }
        let r = call_or_exit(prog, sock, a, &cwd);
        let mut out = std::io::stdout().lock();
        if out.write_all(r.stdout.as_bytes()).and_then(|_| out.flush()).is_err() {
            std::process::exit(0); // the reader went away (`| head`)
        }
        for line in r.stderr.lines() {
            match line.strip_prefix(EVENTS_LAST_EID) {
                Some(n) => last = n.trim().parse().unwrap_or(last),
                None => eprintln!("{line}"),
            }
        }
        if r.exit != 0 {
            std::process::exit(r.exit);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `zpool iostat ... INTERVAL [COUNT]`: one request per report, each handing the daemon the
/// counters of the one before (so it shows rates over the interval), every INTERVAL seconds,
/// COUNT times or until interrupted. `-y` leaves out the first report (since the import).
fn follow_iostat(prog: &str, sock: &Path, argv: &[String], cwd: PathBuf) {
    use crate::cmd::zpool::{split_interval, IOSTAT_SNAPSHOT};
    if argv.first().map(String::as_str) != Some("iostat") {
        return;
    }
    let (opts, operands) = argv.split_at(iostat_opts_end(argv));
    let Ok((pools, Some(interval), count)) = split_interval(operands) else { return };
    let flagged = |c: char| opts.iter().any(|a| !a.starts_with("--") && a.starts_with('-') && a.contains(c));
    let skip_first = flagged('y');
    let mut prev = String::new();
    let mut printed = 0u64;
    let mut first = true;
    loop {
        let mut a: Vec<String> = opts.to_vec();
        a.push(format!("--prev={prev}"));
        if printed > 0 {
            a.push("--continued".into());
        }
        a.extend(pools.iter().cloned());
        let r = call_or_exit(prog, sock, a, &cwd);
        let show = !(first && skip_first);
        first = false;
        for line in r.stderr.lines() {
            match line.strip_prefix(IOSTAT_SNAPSHOT) {
                Some(snap) => prev = snap.to_string(),
                None => eprintln!("{line}"),
            }
        }
        if r.exit != 0 {
            print!("{}", r.stdout);
            std::process::exit(r.exit);
        }
        if show {
            let mut out = std::io::stdout().lock();
            if out.write_all(r.stdout.as_bytes()).and_then(|_| out.flush()).is_err() {
                std::process::exit(0); // the reader went away (`| head`)
            }
            printed += 1;
            if count.is_some_and(|c| printed >= c) {
                std::process::exit(0);
            }
        }
        std::thread::sleep(Duration::from_secs_f64(interval));
    }
}

/// Where the options of `iostat` argv end: getopt stops at the first argument that is not
/// an option, and `-T` takes the next argument as its value (`-T u`, `-vT d`).
fn iostat_opts_end(argv: &[String]) -> usize {
    let mut i = 1;
    while let Some(a) = argv.get(i) {
        if !a.starts_with('-') || a == "-" {
            break;
        }
        i += if a.starts_with("--") || !a.ends_with('T') { 1 } else { 2 };
    }
    i.min(argv.len())
}

/// Which standard stream a command passes to the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamFd {
    In,
    Out,
}

/// `rzfs send` (with `-n`, a dry run, nothing) passes standard output, `rzfs receive`
/// standard input: the subcommand is the first argument.
fn stream_fd(prog: &str, argv: &[String]) -> Option<StreamFd> {
    if prog != "rzfs" {
        return None;
    }
    match argv.first().map(String::as_str) {
        Some("send") => {
            let dry = argv[1..].iter().any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('n'));
            (!dry).then_some(StreamFd::Out)
        }
        Some("receive" | "recv") => Some(StreamFd::In),
        _ => None,
    }
}

/// `zfs list|get|set|inherit PATH`: an argument that is a path (`/...` or `./...`) names
/// the file system mounted where the path lives, found as libzfs's `zfs_path_to_zhandle`
/// does: the mount whose device is the path's (in the caller's view of the mounts, so the
/// client resolves it, not the daemon).
fn resolve_paths(prog: &str, argv: &mut [String]) -> Result<(), String> {
    if prog != "rzfs" || !matches!(argv.first().map(String::as_str), Some("list" | "get" | "set" | "inherit"))
    {
        return Ok(());
    }
    for a in argv.iter_mut().skip(1) {
        if !a.starts_with('/') && !a.starts_with("./") {
            continue;
        }
        *a = path_to_dataset(a)?;
    }
    Ok(())
}

/// The dataset mounted where `path` lives.
fn path_to_dataset(path: &str) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(path).map_err(|e| {
        let msg = nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0)).desc();
        format!("cannot open '{path}': {msg}")
    })?;
    let dev = md.dev();
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot find mountpoint for '{path}': {e}"))?;
    let want = format!("{major}:{minor}");
    // The last entry with the device wins: a later mount over the same point hides earlier ones.
    let entry = info
        .lines()
        .filter_map(mountinfo_entry)
        .rfind(|(d, _, _)| *d == want)
        .ok_or_else(|| format!("cannot find mountpoint for '{path}'"))?;
    let (_, fstype, source) = entry;
    if fstype != "fuse" && !fstype.starts_with("fuse.") {
        return Err(format!("'{path}': not a ZFS filesystem"));
    }
    Ok(source)
}

/// (major:minor, file system type, source) of one `/proc/self/mountinfo` line.
fn mountinfo_entry(line: &str) -> Option<(String, String, String)> {
    let (left, right) = line.split_once(" - ")?;
    let dev = left.split_whitespace().nth(2)?.to_string();
    let mut r = right.split_whitespace();
    let fstype = r.next()?.to_string();
    let source = unescape_mountinfo(r.next()?);
    Some((dev, fstype, source))
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = b[i + 1..i + 4].iter().fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Entry point of `rzpool` and `rzfs`: forward argv to the daemon (starting it if needed).
pub fn main_forward(prog: &str) -> ! {
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    if prog == "rzfs" && std::env::var_os("POSIXLY_CORRECT").is_some() {
        crate::cmd::zfs::posix_argv(&mut argv);
    }
    if let Err(e) = resolve_paths(prog, &mut argv) {
        eprintln!("{e}");
        std::process::exit(1);
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let sock = socket_path();
    if let Err(e) = access::check_dir(socket_dir(&sock), &trusted_owners()) {
        eprintln!("{prog}: {e}");
        std::process::exit(1);
    }
    if prog == "rzpool" {
        if let Some(argv) = follow_argv(&argv) {
            follow_events(prog, &sock, argv, cwd);
        }
        follow_iostat(prog, &sock, &argv, cwd.clone());
    }
    // `zfs send` writes its stream to standard output and `zfs receive` reads it from
    // standard input: the daemon gets that descriptor and does the I/O itself.
    let passed = stream_fd(prog, &argv);
    if passed == Some(StreamFd::Out) && std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        eprintln!("Error: Stream can not be written to a terminal.\nYou must redirect standard output.");
        std::process::exit(1);
    }
    // `receive -A` (abort a resumable receive) reads no stream.
    let aborts = argv.iter().skip(1).any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('A'));
    if passed == Some(StreamFd::In) && !aborts && std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        eprintln!("Error: Backup stream can not be read from a terminal.\nYou must redirect standard input.");
        std::process::exit(1);
    }
    let (stdin, stdout) = (std::io::stdin(), std::io::stdout());
    let fds: Vec<std::os::fd::BorrowedFd> = match passed {
        Some(StreamFd::Out) => vec![stdout.as_fd()],
        Some(StreamFd::In) => vec![stdin.as_fd()],
        None => Vec::new(),
    };
    let req =
        Request { version: PROTOCOL_VERSION, prog: prog.to_string(), argv, cwd, invoked_as: invoked_as() };
    let resp = match UnixStream::connect(&sock) {
        Ok(s) => exchange_fds(&s, &req, &fds),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            eprintln!(
                "{prog}: permission denied: cannot connect to rzfsd at {} (it serves root, its own user and its read group only)",
                sock.display()
            );
            std::process::exit(1);
        }
        // Only when no daemon listens is one started: after any other failure the request
        // may have run already, and must not be sent twice.
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
            start_daemon(&sock)
                .and_then(|_| UnixStream::connect(&sock))
                .and_then(|s| exchange_fds(&s, &req, &fds))
        }
        Err(e) => Err(e),
    };
    match resp {
        Ok(r) => {
            print!("{}", r.stdout);
            eprint!("{}", r.stderr);
            std::process::exit(r.exit);
        }
        Err(e) => {
            eprintln!("{prog}: cannot reach rzfsd at {}: {e}", sock.display());
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    /// POSIXLY_CORRECT: options end at the first operand, option values included.
    #[test]
    fn posix_argv_marks_where_options_end() {
        let run = |a: &[&str]| {
            let mut v: Vec<String> = a.iter().map(|s| s.to_string()).collect();
            crate::cmd::zfs::posix_argv(&mut v);
            v.join(" ")
        };
        assert_eq!(run(&["get", "all", "-r", "tp"]), "get -- all -r tp");
        assert_eq!(
            run(&["get", "-r", "-o", "name,value", "-s", "local", "all", "tp"]),
            "get -r -o name,value -s local -- all tp"
        );
        assert_eq!(run(&["get", "-Ho", "value", "-d1", "all", "tp"]), "get -Ho value -d1 -- all tp");
        assert_eq!(run(&["get", "-rH", "--", "all", "tp"]), "get -rH -- all tp");
        assert_eq!(run(&["list", "-H"]), "list -H");
    }

    use super::*;

    #[test]
    fn mountinfo_lines_and_escapes() {
        let l = "46 27 0:43 / /tmp/a\\040b rw,relatime shared:1 - fuse tank/my\\040fs rw,user_id=0";
        assert_eq!(
            mountinfo_entry(l),
            Some(("0:43".to_string(), "fuse".to_string(), "tank/my fs".to_string()))
        );
        assert_eq!(mountinfo_entry("garbage"), None);
        assert_eq!(unescape_mountinfo("a\\134b\\0"), "a\\b\\0");
        let mut argv: Vec<String> =
            ["list", "-o", "name", "/nonexistent-rzfs-path"].map(String::from).to_vec();
        let e = resolve_paths("rzfs", &mut argv).unwrap_err();
        assert_eq!(e, "cannot open '/nonexistent-rzfs-path': No such file or directory");
        let mut argv: Vec<String> = ["list", "/proc"].map(String::from).to_vec();
        assert_eq!(resolve_paths("rzfs", &mut argv).unwrap_err(), "'/proc': not a ZFS filesystem");
        let mut argv: Vec<String> = ["send", "/x"].map(String::from).to_vec();
        resolve_paths("rzfs", &mut argv).unwrap();
        assert_eq!(argv[1], "/x");
    }

    #[test]
    fn iostat_options_end_where_getopt_stops() {
        let v = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        assert_eq!(iostat_opts_end(&v("iostat -v -T u tp 1 2")), 4);
        assert_eq!(iostat_opts_end(&v("iostat -vT d tp 1")), 3);
        assert_eq!(iostat_opts_end(&v("iostat -y 1")), 2);
        assert_eq!(iostat_opts_end(&v("iostat")), 1);
        assert_eq!(iostat_opts_end(&v("iostat -T")), 2);
    }

    #[test]
    fn follow_flag_is_taken_out() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(follow_argv(&v(&["events", "-vf", "tank"])), Some(v(&["events", "-v", "tank"])));
        assert_eq!(follow_argv(&v(&["events", "-f"])), Some(v(&["events"])));
        assert_eq!(follow_argv(&v(&["events", "-H", "-f", "p"])), Some(v(&["events", "-H", "p"])));
        assert_eq!(follow_argv(&v(&["events", "-v", "tank"])), None);
        assert_eq!(follow_argv(&v(&["status", "-f"])), None);
        assert_eq!(follow_argv(&v(&["events", "--foo"])), None);
    }
}
