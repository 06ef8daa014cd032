//! `rzpool create POOL VDEVSPEC...`: parsing the vdev words and checking the devices before
//! anything is written.
//!
//! # Grammar (OpenZFS cmd/zpool/zpool_vdev.c, `construct_spec`)
//!
//! The words form groups: a grouping keyword (`mirror`, `raidz`, `raidz1`..`raidz3`) takes
//! every following word up to the next keyword as its devices; any other word is a device
//! that becomes a single-disk top-level vdev. `raidz` means single parity; a keyword with a
//! bad parity suffix (`raidz0`, `raidz4`, `raidz01`) is not a keyword at all, so zpool treats
//! it as a device name, and so do we. A mirror needs 2 devices, raidzN needs N+1 and at
//! most 255. `spare` takes the devices after it as hot spares and `cache` as cache devices
//! ([`parse_spec`]). `log` is no group: the top-level vdevs after it (single devices or
//! mirrors, no raidz) are separate intent-log vdevs, up to the next `spare` or `cache`
//! ([`ParsedSpec::log`]); zpool's own `construct_spec` reads it so. The keywords `special`, `dedup` and `draid[...]`
//! are recognised and refused: rzfs cannot create those vdevs yet. Device words are paths,
//! absolute or relative to the caller's working directory (zpool instead looks relative
//! names up under /dev).
//!
//! # Checks (`make_root_vdev` and what `spa_create` would refuse)
//!
//! Hard errors, not overridable: a device that cannot be opened, is neither a regular file
//! nor a block device, is smaller than `SPA_MINDEVSIZE` (64 MiB, include/sys/spa.h; the
//! kernel's `vdev_open` fails with EOVERFLOW), or is named twice (same inode); a device whose
//! label says it belongs to an active pool.
//!
//! Overridable with `-f` (zpool prints them under "use '-f' to override the following
//! errors"): a device of an exported pool, and the replication checks of `get_replication`:
//! - inside a mirror/raidz, files mixed with block devices;
//! - inside a mirror/raidz, a device whose size differs from the previous device's by more
//!   than `ZPOOL_FUZZ` (16 MiB): zpool compares each device with the one before it only;
//! - across top-level vdevs (each compared with the previous one): different types, except
//!   that a raidz and a mirror are accepted when they survive the same number of failures
//!   (parity == mirror width - 1); different raidz parity; different widths.
//!
//! A single-device top-level vdev has type `file` or `disk` depending on what the device is,
//! so a pool of one file and one block device is also "mismatched".
//!
//! Labels are read with [`crate::discover::read_label`]; like libzutil's `zpool_read_label`, a
//! label of a pool member with txg 0 is ignored. A destroyed pool's member is free to reuse.
//! Where zpool would say "potentially active" (label says active, pool not imported here)
//! and allow `-f`, rzfs cannot tell the two apart and always refuses.
//!
//! Nothing here writes to any device.

use crate::discover::read_label;
use ondisk::label::{PoolState, VDEV_LABELS};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `SPA_MINDEVSIZE`: the smallest usable leaf device.
pub const SPA_MINDEVSIZE: u64 = 64 << 20;
/// `ZPOOL_FUZZ`: size difference tolerated between devices of one mirror/raidz.
pub const ZPOOL_FUZZ: u64 = 16 << 20;
/// `VDEV_RAIDZ_MAXPARITY`.
pub const RAIDZ_MAX_PARITY: u8 = 3;
/// Most children zpool accepts in one raidz.
pub const RAIDZ_MAX_CHILDREN: usize = 255;

/// One top-level vdev of the spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopSpec {
    Disk(PathBuf),
    Mirror(Vec<PathBuf>),
    Raidz { parity: u8, devs: Vec<PathBuf> },
}

impl TopSpec {
    /// The leaf devices, in order.
    pub fn devs(&self) -> &[PathBuf] {
        match self {
            TopSpec::Disk(p) => std::slice::from_ref(p),
            TopSpec::Mirror(d) | TopSpec::Raidz { devs: d, .. } => d,
        }
    }

    /// The vdev type as stored in configs (`mirror`, `raidz`); `None` for a single device,
    /// whose type (`file`/`disk`) depends on the device.
    pub fn group_type(&self) -> Option<&'static str> {
        match self {
            TopSpec::Disk(_) => None,
            TopSpec::Mirror(_) => Some("mirror"),
            TopSpec::Raidz { .. } => Some("raidz"),
        }
    }
}

/// A checked leaf device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevInfo {
    pub path: PathBuf,
    /// Size in bytes (file length, or block device size).
    pub size: u64,
    /// A block device (vdev type `disk`) rather than a regular file (`file`).
    pub is_block: bool,
    /// Index of its top-level vdev in the spec.
    pub top: usize,
}

/// What a word of the spec is.
enum Word {
    Mirror,
    Raidz(u8),
    /// A keyword for a vdev class rzfs cannot create: the name to show.
    Unsupported(&'static str),
    /// `spare`: the devices after it are hot spares.
    Spare,
    /// `cache`: the devices after it are cache devices.
    Cache,
    /// `log`: the top-level vdevs after it are log vdevs.
    Log,
    Device,
}

/// Parity of a raidz keyword: `raidz` → 1, `raidz1`..`raidz3`; no leading zero or suffix.
fn raidz_parity(word: &str) -> Option<u8> {
    match word.strip_prefix("raidz")? {
        "" => Some(1),
        "1" => Some(1),
        "2" => Some(2),
        "3" => Some(3),
        _ => None,
    }
}

/// zpool's test for a draid keyword: `draid`, then nothing, `:...`, or a parity 1-3
/// followed by nothing or `:...`.
fn is_draid(word: &str) -> bool {
    let Some(rest) = word.strip_prefix("draid") else { return false };
    let mut chars = rest.chars();
    match chars.next() {
        None | Some(':') => true,
        Some('1'..='3') => matches!(chars.next(), None | Some(':')),
        _ => false,
    }
}

fn classify(word: &str) -> Word {
    match word {
        "mirror" => Word::Mirror,
        "log" => Word::Log,
        "cache" => Word::Cache,
        "spare" => Word::Spare,
        "special" => Word::Unsupported("special"),
        "dedup" => Word::Unsupported("dedup"),
        w if is_draid(w) => Word::Unsupported("draid"),
        w => raidz_parity(w).map(Word::Raidz).unwrap_or(Word::Device),
    }
}

/// A device word as a path: absolute as given, relative ones under `cwd`.
fn device_path(word: &str, cwd: &Path) -> PathBuf {
    let p = Path::new(word);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// Parses the vdev words of `zpool create` into top-level vdevs (hot spares and log vdevs
/// refused: see [`parse_spec`]).
pub fn parse(words: &[String], cwd: &Path) -> Result<Vec<TopSpec>, String> {
    let spec = parse_spec(words, cwd)?;
    if !spec.spares.is_empty() {
        return Err("'spare' vdevs are not accepted here".into());
    }
    if !spec.caches.is_empty() {
        return Err("'cache' vdevs are not accepted here".into());
    }
    if spec.log.iter().any(|&l| l) {
        return Err("'log' vdevs are not accepted here".into());
    }
    if spec.tops.is_empty() {
        return Err("invalid vdev specification: at least one toplevel vdev must be specified".into());
    }
    Ok(spec.tops)
}

/// What a vdev specification asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedSpec {
    /// Top-level vdevs in the order given (their ids follow it).
    pub tops: Vec<TopSpec>,
    /// `log[i]`: top-level vdev `i` is a separate intent log.
    pub log: Vec<bool>,
    /// Hot spares.
    pub spares: Vec<PathBuf>,
    /// Cache devices.
    pub caches: Vec<PathBuf>,
}

impl ParsedSpec {
    /// Is top-level vdev `i` a log vdev?
    pub fn is_log(&self, i: usize) -> bool {
        self.log.get(i).copied().unwrap_or(false)
    }
}

/// Parses vdev words into top-level vdevs and hot spares (`spare DEV...`, the devices after
/// the keyword up to the next keyword). Either list may be empty.
pub fn parse_with_spares(words: &[String], cwd: &Path) -> Result<(Vec<TopSpec>, Vec<PathBuf>), String> {
    let spec = parse_spec(words, cwd)?;
    if spec.log.iter().any(|&l| l) {
        return Err("'log' vdevs are not accepted here".into());
    }
    if !spec.caches.is_empty() {
        return Err("'cache' vdevs are not accepted here".into());
    }
    Ok((spec.tops, spec.spares))
}

/// The devices after an aux keyword (`spare`, `cache`) at `words[*i]`, up to the next
/// keyword; at least one.
fn aux_devices(words: &[String], i: &mut usize, cwd: &Path, keyword: &str) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    while let Some(w) = words.get(*i).filter(|w| matches!(classify(w), Word::Device)) {
        out.push(device_path(w, cwd));
        *i += 1;
    }
    if out.is_empty() {
        return Err(format!("invalid vdev specification: {keyword} requires at least 1 device"));
    }
    Ok(out)
}

/// Parses vdev words into top-level vdevs (normal and log), and hot spares.
pub fn parse_spec(words: &[String], cwd: &Path) -> Result<ParsedSpec, String> {
    let mut out = ParsedSpec::default();
    let (mut seen_spare, mut seen_cache) = (false, false);
    let (mut seen_log, mut in_log) = (false, false);
    let mut i = 0;
    while let Some(word) = words.get(i) {
        i += 1;
        let parity = match classify(word) {
            Word::Unsupported(k) => return Err(format!("'{k}' vdevs are not supported by rzfs yet")),
            Word::Log if seen_log => {
                return Err("invalid vdev specification: 'log' can be specified only once".into())
            }
            Word::Log => {
                (seen_log, in_log) = (true, true);
                continue;
            }
            Word::Spare if seen_spare => {
                return Err("invalid vdev specification: 'spare' can be specified only once".into())
            }
            Word::Spare => {
                (seen_spare, in_log) = (true, false);
                out.spares = aux_devices(words, &mut i, cwd, "spare")?;
                continue;
            }
            Word::Cache if seen_cache => {
                return Err("invalid vdev specification: 'cache' can be specified only once".into())
            }
            Word::Cache => {
                (seen_cache, in_log) = (true, false);
                out.caches = aux_devices(words, &mut i, cwd, "cache")?;
                continue;
            }
            Word::Device => {
                out.tops.push(TopSpec::Disk(device_path(word, cwd)));
                out.log.push(in_log);
                continue;
            }
            // zpool names the group by its type, without the parity.
            Word::Raidz(_) if in_log => {
                return Err("invalid vdev specification: unsupported 'log' device: raidz".into());
            }
            Word::Mirror => None,
            Word::Raidz(p) => Some(p),
        };
        let mut devs = Vec::new();
        while let Some(w) = words.get(i) {
            if !matches!(classify(w), Word::Device) {
                break;
            }
            devs.push(device_path(w, cwd));
            i += 1;
        }
        let top = match parity {
            None => TopSpec::Mirror(devs),
            Some(parity) => TopSpec::Raidz { parity, devs },
        };
        check_width(&top, word)?;
        out.tops.push(top);
        out.log.push(in_log);
    }
    if out.tops.is_empty() && out.spares.is_empty() && out.caches.is_empty() {
        return Err("invalid vdev specification: at least one toplevel vdev must be specified".into());
    }
    if seen_log && !out.log.iter().any(|&l| l) {
        return Err("invalid vdev specification: log requires at least 1 device".into());
    }
    Ok(out)
}

/// Device-count limits of a group; `word` is the keyword as typed, for the message.
fn check_width(top: &TopSpec, word: &str) -> Result<(), String> {
    let n = top.devs().len();
    let (min, max) = match top {
        TopSpec::Disk(_) => (1, 1),
        TopSpec::Mirror(_) => (2, usize::MAX),
        TopSpec::Raidz { parity, .. } => {
            if *parity == 0 || *parity > RAIDZ_MAX_PARITY {
                return Err(format!("invalid vdev specification: raidz parity {parity} is not 1-3"));
            }
            (usize::from(*parity) + 1, RAIDZ_MAX_CHILDREN)
        }
    };
    if n < min {
        return Err(format!("invalid vdev specification: {word} requires at least {min} devices"));
    }
    if n > max {
        return Err(format!("invalid vdev specification: {word} supports no more than {max} devices"));
    }
    Ok(())
}

/// The keyword a spec was written with, for messages.
fn spec_word(top: &TopSpec) -> String {
    match top {
        TopSpec::Disk(_) => "disk".into(),
        TopSpec::Mirror(_) => "mirror".into(),
        TopSpec::Raidz { parity, .. } => format!("raidz{parity}"),
    }
}

/// `strerror`-like text of an I/O error (without Rust's "(os error N)" suffix).
fn io_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Opens nothing for writing: stats `path` and measures it.
fn probe_size(path: &Path) -> Result<(u64, bool, (u64, u64)), String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let md =
        std::fs::metadata(path).map_err(|e| format!("cannot open '{}': {}", path.display(), io_text(&e)))?;
    let ft = md.file_type();
    if ft.is_file() {
        return Ok((md.len(), false, (md.dev(), md.ino())));
    }
    if !ft.is_block_device() {
        return Err(format!("cannot use '{}': must be a block device or regular file", path.display()));
    }
    let dev = vdev::FileDevice::open(path, false)
        .map_err(|e| format!("cannot open '{}': {}", path.display(), io_text(&e)))?;
    use vdev::BlockDevice;
    // Block devices are identified by device number, not by the inode of their /dev node.
    Ok((dev.size(), true, (u64::MAX, md.rdev())))
}

/// Checks every device of `tops` as `zpool create` would; `force` is `-f`.
pub fn validate(tops: &[TopSpec], force: bool) -> Result<Vec<DevInfo>, String> {
    validate_classes(tops, &[], force)
}

/// [`validate`] for a spec with log vdevs (`log[i]`: top-level vdev `i` is one), which zpool
/// leaves out of its replication checks.
pub fn validate_classes(tops: &[TopSpec], log: &[bool], force: bool) -> Result<Vec<DevInfo>, String> {
    if tops.is_empty() {
        return Err("invalid vdev specification: at least one toplevel vdev must be specified".into());
    }
    let mut out = Vec::new();
    let mut seen: BTreeMap<(u64, u64), PathBuf> = BTreeMap::new();
    for (t, top) in tops.iter().enumerate() {
        check_width(top, &spec_word(top))?;
        for path in top.devs() {
            let (size, is_block, id) = probe_size(path)?;
            if size < SPA_MINDEVSIZE {
                return Err(format!(
                    "{} is too small ({size} bytes; the minimum device size is 64M)",
                    path.display()
                ));
            }
            if let Some(first) = seen.insert(id, path.clone()) {
                return Err(format!(
                    "{} and {} refer to the same device: a device may be used only once",
                    first.display(),
                    path.display()
                ));
            }
            out.push(DevInfo { path: path.clone(), size, is_block, top: t });
        }
    }
    let in_use: Vec<String> = out.iter().filter_map(|d| in_use_error(d, force)).collect();
    if !in_use.is_empty() {
        return Err(vdev_errors(&in_use, force));
    }
    if !force {
        let rep = replication_errors(tops, log, &out);
        if !rep.is_empty() {
            return Err(vdev_errors(&rep, force));
        }
    }
    Ok(out)
}

/// zpool's block of errors: a header, then one line per problem.
fn vdev_errors(lines: &[String], force: bool) -> String {
    let how = if force {
        "the following errors must be manually repaired:"
    } else {
        "use '-f' to override the following errors:"
    };
    format!("invalid vdev specification\n{how}\n{}", lines.join("\n"))
}

/// Pool membership recorded in a device's labels: (state, pool name) of the best label.
fn label_membership(path: &Path) -> Option<(PoolState, String)> {
    let dev = vdev::FileDevice::open(path, false).ok()?;
    let mut best: Option<(u64, PoolState, String)> = None;
    for l in 0..VDEV_LABELS {
        let Some((cfg, _)) = read_label(&dev, l) else { continue };
        let txg = cfg.txg.unwrap_or(0);
        let aux = matches!(cfg.state, PoolState::Spare | PoolState::L2Cache);
        // libzutil's zpool_read_label skips member labels with txg 0 (never synced).
        if !aux && txg == 0 {
            continue;
        }
        let better = match &best {
            None => true,
            Some((b, _, _)) => txg > *b,
        };
        if better {
            best = Some((txg, cfg.state, cfg.name.unwrap_or_default()));
        }
    }
    best.map(|(_, s, n)| (s, n))
}

/// The in-use complaint for one device, if any (`check_file_generic`; for block devices
/// also `check_disk`/`check_slice`: one another process holds exclusively — mounted, active
/// swap, a device-mapper or md member — is refused even with `-f`, and one that carries a
/// file system or volume signature without `-f`).
fn in_use_error(dev: &DevInfo, force: bool) -> Option<String> {
    let Some((state, name)) = label_membership(&dev.path) else {
        if !dev.is_block {
            return None;
        }
        let found = crate::fsprobe::probe(&dev.path);
        if block_busy(&dev.path) {
            return Some(format!(
                "{} is in use and contains a {} filesystem.",
                dev.path.display(),
                found.unwrap_or("unknown")
            ));
        }
        return found
            .filter(|_| !force)
            .map(|t| format!("{} contains a filesystem of type '{t}'", dev.path.display()));
    };
    let desc = match state {
        PoolState::Active => "active",
        PoolState::Exported if !force => "exported",
        // Destroyed pools, hot spares and cache devices of other pools may be reused.
        _ => return None,
    };
    Some(format!("{} is part of {desc} pool '{name}'", dev.path.display()))
}

/// Whether another holder has block device `path` open exclusively (a mounted file system,
/// active swap, a device-mapper or md member): opening it `O_EXCL` fails with EBUSY.
fn block_busy(path: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(path)
        .is_err_and(|e| e.raw_os_error() == Some(libc::EBUSY))
}

/// The replication level of one top-level vdev (`replication_level_t`).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Rep {
    kind: &'static str,
    children: usize,
    parity: u8,
}

/// `get_replication` for a new pool: problems inside each vdev and between neighbours.
fn replication_errors(tops: &[TopSpec], log: &[bool], devs: &[DevInfo]) -> Vec<String> {
    let mut errs = Vec::new();
    let mut last: Option<Rep> = None;
    for (t, top) in tops.iter().enumerate().filter(|(t, _)| !log.get(*t).copied().unwrap_or(false)) {
        let mine: Vec<&DevInfo> = devs.iter().filter(|d| d.top == t).collect();
        let rep = match top {
            TopSpec::Disk(_) => {
                let kind = if mine.first().is_some_and(|d| d.is_block) { "disk" } else { "file" };
                Rep { kind, children: 1, parity: 0 }
            }
            TopSpec::Mirror(d) => Rep { kind: "mirror", children: d.len(), parity: 0 },
            TopSpec::Raidz { parity, devs } => Rep { kind: "raidz", children: devs.len(), parity: *parity },
        };
        if rep.children > 1 {
            errs.extend(group_error(rep.kind, &mine));
        }
        if let Some(prev) = last {
            errs.extend(pair_error(prev, rep));
        }
        last = Some(rep);
    }
    errs
}

/// Mixed files/devices or mixed sizes inside one mirror/raidz (one report per vdev).
fn group_error(kind: &str, devs: &[&DevInfo]) -> Option<String> {
    for pair in devs.windows(2) {
        let [a, b] = pair else { continue };
        if a.is_block != b.is_block {
            return Some(format!("mismatched replication level: {kind} contains both files and devices"));
        }
        if a.size.abs_diff(b.size) > ZPOOL_FUZZ {
            return Some(format!("{kind} contains devices of different sizes"));
        }
    }
    None
}

/// Compares two neighbouring top-level vdevs.
fn pair_error(a: Rep, b: Rep) -> Option<String> {
    let raidz_mirror = match (a.kind, b.kind) {
        ("raidz", "mirror") => Some((a, b)),
        ("mirror", "raidz") => Some((b, a)),
        _ => None,
    };
    if let Some((rz, m)) = raidz_mirror {
        // Accepted when both survive the same number of device failures.
        if usize::from(rz.parity) + 1 == m.children {
            return None;
        }
        return Some(format!(
            "mismatched replication level: raidz and mirror vdevs with different redundancy, \
             {} vs. {} ({}-way) are present",
            rz.parity,
            m.children - 1,
            m.children
        ));
    }
    if a.kind != b.kind {
        return Some(format!(
            "mismatched replication level: both {} and {} vdevs are present",
            a.kind, b.kind
        ));
    }
    if a.parity != b.parity {
        return Some(format!(
            "mismatched replication level: both {} and {} device parity {} vdevs are present",
            a.parity, b.parity, b.kind
        ));
    }
    if a.children != b.children {
        return Some(format!(
            "mismatched replication level: both {}-way and {}-way {} vdevs are present",
            a.children, b.children, b.kind
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use ondisk::nvlist::NvList;
    use std::sync::atomic::{AtomicU32, Ordering};

    const MIB: u64 = 1 << 20;

    struct TempDir(PathBuf);
    impl TempDir {
        fn new() -> TempDir {
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "rzfs-vdevspec-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
        /// A sparse file of `size` bytes.
        fn file(&self, name: &str, size: u64) -> PathBuf {
            let p = self.0.join(name);
            std::fs::File::create(&p).unwrap().set_len(size).unwrap();
            p
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    /// Writes four valid labels saying `path` belongs to pool `name` in `state` at `txg`.
    fn write_labels(path: &Path, name: &str, state: PoolState, txg: u64) {
        use codec::checksum::{label_verifier, seal_embedded, ChecksumCtx, ChecksumKind};
        use std::os::unix::fs::FileExt;
        let mut nv = NvList::new();
        nv.add_u64("version", 5000)
            .add_str("name", name)
            .add_u64("state", state as u64)
            .add_u64("txg", txg)
            .add_u64("pool_guid", 0x1234_5678)
            .add_u64("guid", 0x9abc_def0);
        let size = std::fs::metadata(path).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        for l in 0..VDEV_LABELS {
            let off = ondisk::label::vdev_phys_device_offset(size, l).unwrap();
            let mut buf = ondisk::label::encode_vdev_phys(&nv).unwrap();
            seal_embedded(ChecksumKind::Sha256, &mut buf, label_verifier(off), &ChecksumCtx::default())
                .unwrap();
            f.write_all_at(&buf, off).unwrap();
        }
    }

    #[test]
    fn parse_groups_and_paths() {
        let cwd = Path::new("/work");
        let t = parse(&words("mirror a /dev/b raidz2 c d e f raidz g h"), cwd).unwrap();
        assert_eq!(
            t,
            vec![
                TopSpec::Mirror(vec!["/work/a".into(), "/dev/b".into()]),
                TopSpec::Raidz {
                    parity: 2,
                    devs: vec!["/work/c".into(), "/work/d".into(), "/work/e".into(), "/work/f".into()]
                },
                TopSpec::Raidz { parity: 1, devs: vec!["/work/g".into(), "/work/h".into()] },
            ]
        );
        let t = parse(&words("x sub/y raidz3 a b c d"), cwd).unwrap();
        assert_eq!(t[0], TopSpec::Disk("/work/x".into()));
        assert_eq!(t[1], TopSpec::Disk("/work/sub/y".into()));
        assert_eq!(t[2].devs().len(), 4);
        assert_eq!(t[2].group_type(), Some("raidz"));
        // Not keywords: zpool would take these as device names.
        let t = parse(&words("raidz4 raidz0 raidz01 mirrors draidx"), cwd).unwrap();
        assert_eq!(t.len(), 5);
        assert!(t.iter().all(|t| matches!(t, TopSpec::Disk(_))));
    }

    #[test]
    fn spares_follow_their_keyword() {
        let cwd = Path::new("/d");
        let (t, s) = parse_with_spares(&words("mirror a b spare c e mirror f g"), cwd).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(s, vec![PathBuf::from("/d/c"), PathBuf::from("/d/e")]);
        let (t, s) = parse_with_spares(&words("spare x"), cwd).unwrap();
        assert!(t.is_empty() && s.len() == 1);
        assert!(parse_with_spares(&words("a spare"), cwd).unwrap_err().contains("spare requires at least 1"));
        assert!(parse(&words("a spare b"), cwd).unwrap_err().contains("'spare'"));
        let twice = parse_with_spares(&words("a spare b spare c"), cwd).unwrap_err();
        assert!(twice.contains("'spare' can be specified only once"), "{twice}");
    }

    #[test]
    fn log_applies_to_the_vdevs_after_it() {
        let cwd = Path::new("/d");
        let p = parse_spec(&words("mirror a b log c mirror d e spare f mirror g h"), cwd).unwrap();
        assert_eq!(p.tops.len(), 4);
        assert_eq!(p.log, vec![false, true, true, false]);
        assert_eq!(p.tops[1], TopSpec::Disk("/d/c".into()));
        assert_eq!(p.spares, vec![PathBuf::from("/d/f")]);
        let e = parse_spec(&words("a log raidz b c"), cwd).unwrap_err();
        assert_eq!(e, "invalid vdev specification: unsupported 'log' device: raidz");
        let e = parse_spec(&words("a log"), cwd).unwrap_err();
        assert_eq!(e, "invalid vdev specification: log requires at least 1 device");
        let e = parse_spec(&words("a log b log c"), cwd).unwrap_err();
        assert!(e.contains("'log' can be specified only once"), "{e}");
        assert!(parse(&words("a log b"), cwd).unwrap_err().contains("'log'"));
        // `cache` ends a log list too, and takes plain devices only.
        let p = parse_spec(&words("a log b cache c d spare e"), cwd).unwrap();
        assert_eq!(p.log, vec![false, true]);
        assert_eq!(p.caches, vec![PathBuf::from("/d/c"), PathBuf::from("/d/d")]);
        assert_eq!(p.spares, vec![PathBuf::from("/d/e")]);
        let p = parse_spec(&words("cache c"), cwd).unwrap();
        assert!(p.tops.is_empty());
        assert_eq!(p.caches.len(), 1);
        let e = parse_spec(&words("a cache"), cwd).unwrap_err();
        assert_eq!(e, "invalid vdev specification: cache requires at least 1 device");
        let e = parse_spec(&words("a cache b cache c"), cwd).unwrap_err();
        assert!(e.contains("'cache' can be specified only once"), "{e}");
        assert!(parse(&words("a cache b"), cwd).unwrap_err().contains("'cache'"));
    }

    #[test]
    fn parse_refuses_unsupported_and_short_groups() {
        let cwd = Path::new("/");
        for (spec, kw) in [
            ("mirror a b special mirror c d", "special"),
            ("a dedup b", "dedup"),
            ("draid a b c", "draid"),
            ("draid2:4d:1s a b c d e f g", "draid"),
            ("draid3 a b c d", "draid"),
        ] {
            assert_eq!(
                parse(&words(spec), cwd).unwrap_err(),
                format!("'{kw}' vdevs are not supported by rzfs yet")
            );
        }
        let e = parse(&words("mirror a"), cwd).unwrap_err();
        assert_eq!(e, "invalid vdev specification: mirror requires at least 2 devices");
        let e = parse(&words("mirror a b mirror raidz a b"), cwd).unwrap_err();
        assert!(e.contains("mirror requires at least 2"), "{e}");
        let e = parse(&words("raidz2 a b"), cwd).unwrap_err();
        assert_eq!(e, "invalid vdev specification: raidz2 requires at least 3 devices");
        assert!(parse(&words("raidz2 a b c"), cwd).is_ok());
        assert!(parse(&words("raidz a"), cwd).unwrap_err().contains("raidz requires at least 2"));
        assert!(parse(&words("raidz3 a b c"), cwd).unwrap_err().contains("at least 4"));
        let wide: Vec<String> =
            std::iter::once("raidz".to_string()).chain((0..256).map(|i| format!("d{i}"))).collect();
        assert!(parse(&wide, cwd).unwrap_err().contains("no more than 255 devices"));
        assert!(parse(&[], cwd).unwrap_err().contains("at least one toplevel vdev"));
    }

    #[test]
    fn missing_wrong_type_and_small() {
        let d = TempDir::new();
        let missing = d.0.join("nope");
        let e = validate(&[TopSpec::Disk(missing.clone())], false).unwrap_err();
        assert_eq!(e, format!("cannot open '{}': No such file or directory", missing.display()));
        let e = validate(&[TopSpec::Disk(d.0.clone())], false).unwrap_err();
        assert!(e.contains("must be a block device or regular file"), "{e}");
        let e = validate(&[TopSpec::Disk("/dev/null".into())], true).unwrap_err();
        assert!(e.contains("must be a block device or regular file"), "{e}");
        let small = d.file("small", SPA_MINDEVSIZE - 1);
        let e = validate(&[TopSpec::Disk(small.clone())], true).unwrap_err();
        assert!(e.starts_with(&format!("{} is too small", small.display())), "{e}");
        let ok = d.file("ok", SPA_MINDEVSIZE);
        let v = validate(&[TopSpec::Disk(ok.clone())], false).unwrap();
        assert_eq!(v, vec![DevInfo { path: ok, size: SPA_MINDEVSIZE, is_block: false, top: 0 }]);
    }

    #[test]
    fn same_device_twice() {
        let d = TempDir::new();
        let a = d.file("a", 100 * MIB);
        let e = validate(&[TopSpec::Mirror(vec![a.clone(), a.clone()])], true).unwrap_err();
        assert!(e.contains("refer to the same device"), "{e}");
        // Through another name: a symlink and a hard link.
        let sym = d.0.join("sym");
        std::os::unix::fs::symlink(&a, &sym).unwrap();
        let e = validate(&[TopSpec::Disk(a.clone()), TopSpec::Disk(sym)], true).unwrap_err();
        assert!(e.contains("refer to the same device"), "{e}");
        let hard = d.0.join("hard");
        std::fs::hard_link(&a, &hard).unwrap();
        let e = validate(&[TopSpec::Disk(hard), TopSpec::Disk(a)], true).unwrap_err();
        assert!(e.contains("refer to the same device"), "{e}");
    }

    #[test]
    fn width_rules_on_built_specs() {
        let d = TempDir::new();
        let (a, b) = (d.file("a", 100 * MIB), d.file("b", 100 * MIB));
        let e = validate(&[TopSpec::Mirror(vec![a.clone()])], true).unwrap_err();
        assert!(e.contains("mirror requires at least 2 devices"), "{e}");
        let e =
            validate(&[TopSpec::Raidz { parity: 2, devs: vec![a.clone(), b.clone()] }], true).unwrap_err();
        assert!(e.contains("raidz2 requires at least 3 devices"), "{e}");
        let e =
            validate(&[TopSpec::Raidz { parity: 4, devs: vec![a.clone(), b.clone()] }], true).unwrap_err();
        assert!(e.contains("parity 4"), "{e}");
        assert!(validate(&[TopSpec::Raidz { parity: 1, devs: vec![a, b] }], false).is_ok());
        assert!(validate(&[], false).is_err());
    }

    /// Runs `validate` on a spec of fresh 100 MiB files described by words.
    fn check(spec: &str, force: bool) -> Result<Vec<DevInfo>, String> {
        let d = TempDir::new();
        let mut ws = words(spec);
        for w in ws.iter_mut() {
            if matches!(classify(w), Word::Device) {
                d.file(w, 100 * MIB);
            }
        }
        let tops = parse(&std::mem::take(&mut ws), &d.0)?;
        validate(&tops, force)
    }

    #[test]
    fn replication_levels() {
        let mismatch = |spec: &str, want: &str| {
            let e = check(spec, false).unwrap_err();
            assert!(
                e.starts_with("invalid vdev specification\nuse '-f' to override the following errors:\n"),
                "{e}"
            );
            assert!(e.contains(want), "{spec}: {e}");
            check(spec, true).unwrap_or_else(|e| panic!("{spec} with -f: {e}"));
        };
        mismatch("a mirror b c", "mismatched replication level: both file and mirror vdevs are present");
        mismatch("raidz a b c raidz2 d e f", "both 1 and 2 device parity raidz vdevs are present");
        mismatch("mirror a b mirror c d e", "both 2-way and 3-way mirror vdevs are present");
        mismatch("raidz a b c raidz d e f g", "both 3-way and 4-way raidz vdevs are present");
        mismatch(
            "mirror a b c raidz d e f",
            "raidz and mirror vdevs with different redundancy, 1 vs. 2 (3-way) are present",
        );
        mismatch(
            "raidz2 a b c d mirror e f",
            "raidz and mirror vdevs with different redundancy, 2 vs. 1 (2-way) are present",
        );
        // Accepted as zpool accepts them.
        for ok in ["a b c", "mirror a b mirror c d", "mirror a b raidz c d e", "raidz2 a b c mirror d e f"] {
            let v = check(ok, false).unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert!(v.iter().all(|d| d.size == 100 * MIB));
        }
        // Each vdev is compared with the previous one: all mismatches are listed.
        let e = check("a mirror b c raidz d e f", false).unwrap_err();
        assert_eq!(e.lines().count(), 3, "{e}");
    }

    #[test]
    fn mixed_sizes() {
        let d = TempDir::new();
        let a = d.file("a", 100 * MIB);
        let b = d.file("b", 100 * MIB + ZPOOL_FUZZ);
        let c = d.file("c", 100 * MIB + ZPOOL_FUZZ + 1);
        assert!(validate(&[TopSpec::Mirror(vec![a.clone(), b.clone()])], false).is_ok());
        let e = validate(&[TopSpec::Mirror(vec![a.clone(), c.clone()])], false).unwrap_err();
        assert!(e.ends_with("\nmirror contains devices of different sizes"), "{e}");
        let e = validate(&[TopSpec::Raidz { parity: 1, devs: vec![c.clone(), b.clone(), a.clone()] }], false);
        // zpool compares neighbours only: c-b and b-a are both within the fuzz.
        assert!(e.is_ok(), "{e:?}");
        let e = validate(&[TopSpec::Raidz { parity: 1, devs: vec![c.clone(), a.clone(), b.clone()] }], false)
            .unwrap_err();
        assert!(e.contains("raidz contains devices of different sizes"), "{e}");
        assert!(validate(&[TopSpec::Mirror(vec![a.clone(), c.clone()])], true).is_ok());
        // Different sizes across top-level vdevs are fine.
        let big = d.file("big", 1000 * MIB);
        assert!(validate(&[TopSpec::Disk(a), TopSpec::Disk(big)], false).is_ok());
    }

    #[test]
    fn pool_members() {
        let d = TempDir::new();
        let a = d.file("a", 100 * MIB);
        let other = d.file("other", 100 * MIB);
        write_labels(&a, "tank", PoolState::Exported, 7);
        let before = std::fs::read(&a).unwrap();
        let e = validate(&[TopSpec::Mirror(vec![a.clone(), other.clone()])], false).unwrap_err();
        assert_eq!(
            e,
            format!(
                "invalid vdev specification\nuse '-f' to override the following errors:\n{} is part of exported pool 'tank'",
                a.display()
            )
        );
        assert!(validate(&[TopSpec::Disk(a.clone())], true).is_ok());

        write_labels(&a, "live", PoolState::Active, 9);
        for force in [false, true] {
            let e = validate(&[TopSpec::Disk(a.clone())], force).unwrap_err();
            assert!(e.ends_with(&format!("{} is part of active pool 'live'", a.display())), "{e}");
        }
        let e = validate(&[TopSpec::Disk(a.clone())], true).unwrap_err();
        assert!(e.contains("the following errors must be manually repaired:"), "{e}");

        write_labels(&a, "gone", PoolState::Destroyed, 11);
        assert!(validate(&[TopSpec::Disk(a.clone())], false).is_ok());
        // A member label never synced (txg 0) is ignored, as zpool_read_label does.
        write_labels(&a, "new", PoolState::Active, 0);
        assert!(validate(&[TopSpec::Disk(a.clone())], false).is_ok());
        write_labels(&a, "tank", PoolState::Exported, 7);
        assert_eq!(std::fs::read(&a).unwrap(), before, "validation must not write");
        // Two members of pools: both reported.
        write_labels(&other, "live", PoolState::Active, 3);
        let e = validate(&[TopSpec::Disk(a.clone()), TopSpec::Disk(other)], false).unwrap_err();
        assert_eq!(e.lines().count(), 4, "{e}");
    }

    #[test]
    fn damaged_label_is_not_membership() {
        let d = TempDir::new();
        let a = d.file("a", 100 * MIB);
        write_labels(&a, "tank", PoolState::Exported, 7);
        // Corrupt every label's config: checksums fail, so the device looks blank.
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&a).unwrap();
        for l in 0..VDEV_LABELS {
            let off = ondisk::label::vdev_phys_device_offset(100 * MIB, l).unwrap();
            f.write_all_at(b"garbage", off + 100).unwrap();
        }
        assert!(validate(&[TopSpec::Disk(a)], false).is_ok());
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(ws in proptest::collection::vec("(mirror|raidz[0-4]?|draid[0-9:a-z]{0,3}|log|[a-z./]{0,6})", 0..12)) {
            if let Ok(tops) = parse(&ws, Path::new("/cwd")) {
                proptest::prop_assert!(!tops.is_empty());
                let n: usize = tops.iter().map(|t| t.devs().len()).sum();
                proptest::prop_assert!(n <= ws.len());
            }
        }
    }

    #[test]
    fn classify_keywords() {
        assert_eq!(raidz_parity("raidz"), Some(1));
        assert_eq!(raidz_parity("raidz3"), Some(3));
        assert_eq!(raidz_parity("raidz03"), None);
        assert!(is_draid("draid") && is_draid("draid1") && is_draid("draid:3d") && is_draid("draid2:8d"));
        assert!(!is_draid("draid4") && !is_draid("draidz") && !is_draid("draid12"));
    }
}
