//! The pool `compatibility` property: which features a new (or upgraded) pool may enable.
//!
//! Semantics (man zpoolprops "compatibility", zpool-features(7) "Compatibility feature sets",
//! and `zpool_load_compat` in OpenZFS lib/libzfs/libzfs_pool.c):
//! - unset, `""` or `off`: no restriction;
//! - `legacy`: no feature may be enabled (the pool is still created at version 5000 unless a
//!   `version` is given; it merely has no features enabled);
//! - otherwise a comma-separated list of file names (empty items are skipped, as `strtok`
//!   does). Each file lists feature short names separated by whitespace and/or commas; `#`
//!   starts a comment running to the end of the line. A file must be 1 byte to 16 KiB long and
//!   end with a newline (`ZPOOL_COMPAT_MAXSIZE`, and the sanity checks of zpool-features(7)).
//!   With several files, a feature is allowed only if every file lists it.
//!
//! Where rzfs differs on purpose:
//! - files are searched, first found wins, in `$RZFS_COMPAT_DIR` (if set), then the two
//!   OpenZFS directories, then the test oracle's install; OpenZFS only looks in
//!   /etc/zfs/compatibility.d then /usr/share/zfs/compatibility.d;
//! - names containing `/` or `..` are refused (OpenZFS also accepts absolute paths);
//! - unknown feature names are always warnings (OpenZFS makes them errors in files under /etc
//!   and warnings in files under /usr/share), so a file written for a newer OpenZFS still works.

use crate::feature_table;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Local, administrator-written compatibility files (`ZPOOL_SYSCONF_COMPAT_D`).
pub const SYSCONF_COMPAT_DIR: &str = "/etc/zfs/compatibility.d";
/// Compatibility files shipped with OpenZFS (`ZPOOL_DATA_COMPAT_D`).
pub const DATA_COMPAT_DIR: &str = "/usr/share/zfs/compatibility.d";
/// The files of the OpenZFS install used as test oracle.
pub const ORACLE_COMPAT_DIR: &str = "/opt/rzfs-oracles/openzfs/usr/share/zfs/compatibility.d";
/// Environment variable naming a directory searched before all others.
pub const COMPAT_DIR_ENV: &str = "RZFS_COMPAT_DIR";
/// Largest accepted compatibility file (`ZPOOL_COMPAT_MAXSIZE`, include/sys/fs/zfs.h).
pub const MAX_FILE_SIZE: u64 = 16384;

/// A parsed `compatibility` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompatSet {
    /// `off` (or unset): every feature allowed.
    Off,
    /// `legacy`: no feature allowed.
    Legacy,
    /// A list of files: only features listed in all of them are allowed.
    Files {
        /// The file names as given in the property, in order.
        names: Vec<String>,
        /// Known feature short names present in every file.
        allowed: BTreeSet<String>,
        /// One message per file that named features this table does not know.
        warnings: Vec<String>,
    },
}

impl CompatSet {
    /// True when feature `short` may be enabled under this set.
    pub fn allows(&self, short: &str) -> bool {
        match self {
            CompatSet::Off => true,
            CompatSet::Legacy => false,
            CompatSet::Files { allowed, .. } => allowed.contains(short),
        }
    }

    /// Warnings collected while reading the files (empty for `off` and `legacy`).
    pub fn warnings(&self) -> &[String] {
        match self {
            CompatSet::Files { warnings, .. } => warnings,
            _ => &[],
        }
    }
}

/// Directories searched for compatibility files, in order.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os(COMPAT_DIR_ENV).filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(d));
    }
    dirs.extend([SYSCONF_COMPAT_DIR, DATA_COMPAT_DIR, ORACLE_COMPAT_DIR].map(PathBuf::from));
    dirs
}

/// Parses a `compatibility` property value, reading files from [`search_dirs`].
pub fn load(value: &str) -> Result<CompatSet, String> {
    load_from(value, &search_dirs())
}

/// [`load`] with an explicit list of directories (searched in order, first found wins).
pub fn load_from(value: &str, dirs: &[PathBuf]) -> Result<CompatSet, String> {
    match value {
        "" | "off" => return Ok(CompatSet::Off),
        "legacy" => return Ok(CompatSet::Legacy),
        _ => {}
    }
    let names: Vec<String> = value.split(',').filter(|n| !n.is_empty()).map(str::to_string).collect();
    if names.is_empty() {
        return Err(format!("invalid compatibility value '{value}': no valid compatibility files specified"));
    }
    let mut allowed: Option<BTreeSet<String>> = None;
    let mut warnings = Vec::new();
    for name in &names {
        check_file_name(name)?;
        let path = find_file(name, dirs).ok_or_else(|| {
            let list: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            format!("compatibility file '{name}' not found (searched {})", list.join(", "))
        })?;
        let text = read_file(name, &path)?;
        let (known, unknown) = parse_features(&text);
        if !unknown.is_empty() {
            warnings.push(format!(
                "unrecognized feature name(s) in compatibility file '{}': {}",
                path.display(),
                unknown.join(" ")
            ));
        }
        allowed = Some(match allowed {
            None => known,
            Some(prev) => prev.intersection(&known).cloned().collect(),
        });
    }
    Ok(CompatSet::Files { names, allowed: allowed.unwrap_or_default(), warnings })
}

/// Refuses names that could leave the search directories.
fn check_file_name(name: &str) -> Result<(), String> {
    if name.contains('/') || name.contains("..") {
        return Err(format!("invalid compatibility file name '{name}': names must not contain '/' or '..'"));
    }
    Ok(())
}

/// The first `dir/name` that exists.
fn find_file(name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    dirs.iter().map(|d| d.join(name)).find(|p| p.exists())
}

/// Reads a compatibility file, applying OpenZFS's sanity checks.
fn read_file(name: &str, path: &Path) -> Result<Vec<u8>, String> {
    let bad = |why: String| format!("could not read/parse feature file '{name}' ({}): {why}", path.display());
    let md = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    if !md.is_file() {
        return Err(bad("not a regular file".into()));
    }
    if md.len() == 0 || md.len() > MAX_FILE_SIZE {
        return Err(bad(format!("size {} is outside 1..={MAX_FILE_SIZE} bytes", md.len())));
    }
    let text = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    if text.last() != Some(&b'\n') {
        return Err(bad("does not end with a newline".into()));
    }
    Ok(text)
}

/// Splits a file into known feature short names and (sanitized) unknown words.
pub fn parse_features(text: &[u8]) -> (BTreeSet<String>, Vec<String>) {
    let mut known = BTreeSet::new();
    let mut unknown = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let line = match line.iter().position(|&b| b == b'#') {
            Some(i) => line.get(..i).unwrap_or(&[]),
            None => line,
        };
        for word in line.split(|&b| b == b',' || b.is_ascii_whitespace()).filter(|w| !w.is_empty()) {
            let word = String::from_utf8_lossy(word);
            match feature_table::all().iter().find(|f| f.name == word) {
                Some(f) => {
                    known.insert(f.name.to_string());
                }
                None => unknown.push(sanitize(&word)),
            }
        }
    }
    (known, unknown)
}

/// Shortens a word to 32 characters and masks unprintable ones, for messages.
fn sanitize(word: &str) -> String {
    word.chars().take(32).map(|c| if c.is_ascii_graphic() { c } else { '?' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    struct TempDir(PathBuf);
    impl TempDir {
        fn new() -> TempDir {
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "rzfs-compat-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
        fn write(&self, name: &str, text: &str) {
            std::fs::write(self.0.join(name), text).unwrap();
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn set(words: &[&str]) -> BTreeSet<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    fn allowed(c: &CompatSet) -> &BTreeSet<String> {
        match c {
            CompatSet::Files { allowed, .. } => allowed,
            other => panic!("expected files, got {other:?}"),
        }
    }

    #[test]
    fn special_values() {
        assert_eq!(load_from("off", &[]).unwrap(), CompatSet::Off);
        assert_eq!(load_from("", &[]).unwrap(), CompatSet::Off);
        assert_eq!(load_from("legacy", &[]).unwrap(), CompatSet::Legacy);
        assert!(CompatSet::Off.allows("async_destroy"));
        assert!(!CompatSet::Legacy.allows("async_destroy"));
        assert!(load_from(",,", &[]).unwrap_err().contains("no valid compatibility files"));
    }

    #[test]
    fn parse_words_comments_and_commas() {
        let (k, u) = parse_features(b"# header\nasync_destroy lz4_compress,empty_bpobj\t# c\n\n  bogus#x\n");
        assert_eq!(k, set(&["async_destroy", "lz4_compress", "empty_bpobj"]));
        assert_eq!(u, vec!["bogus".to_string()]);
        let (_, u) = parse_features("\u{1}abcdefghijklmnopqrstuvwxyz0123456789\n".as_bytes());
        assert_eq!(u, vec!["?abcdefghijklmnopqrstuvwxyz01234".to_string()]);
    }

    #[test]
    fn intersection_warnings_and_search_order() {
        let a = TempDir::new();
        let b = TempDir::new();
        a.write("one", "async_destroy lz4_compress\nfuture_feature\n");
        b.write("one", "draid\n"); // shadowed by a/one
        b.write("two", "lz4_compress, empty_bpobj\n");
        let dirs = [a.0.clone(), b.0.clone()];
        let c = load_from("one,two", &dirs).unwrap();
        assert_eq!(allowed(&c), &set(&["lz4_compress"]));
        assert!(c.allows("lz4_compress") && !c.allows("async_destroy"));
        assert_eq!(c.warnings().len(), 1);
        assert!(c.warnings()[0].contains("future_feature"), "{:?}", c.warnings());
        match &c {
            CompatSet::Files { names, .. } => assert_eq!(names, &["one", "two"]),
            _ => unreachable!(),
        }
        let c = load_from("one", &[b.0.clone(), a.0.clone()]).unwrap();
        assert_eq!(allowed(&c), &set(&["draid"]));
    }

    #[test]
    fn bad_files_and_names() {
        let d = TempDir::new();
        d.write("empty", "");
        d.write("nonl", "async_destroy");
        d.write("big", &"async_destroy\n".repeat(2000));
        let dirs = [d.0.clone()];
        for name in ["empty", "nonl", "big"] {
            let e = load_from(name, &dirs).unwrap_err();
            assert!(e.contains("could not read/parse feature file") && e.contains(name), "{e}");
        }
        let e = load_from("missing", &dirs).unwrap_err();
        assert!(e.contains("'missing' not found"), "{e}");
        for name in ["../etc/passwd", "/etc/passwd", "a/b", ".."] {
            let e = load_from(name, &dirs).unwrap_err();
            assert!(e.contains("invalid compatibility file name"), "{e}");
        }
    }

    /// Reads an oracle file independently: every non-comment word.
    fn oracle_words(name: &str) -> Option<BTreeSet<String>> {
        let text = std::fs::read_to_string(Path::new(ORACLE_COMPAT_DIR).join(name)).ok()?;
        Some(
            text.lines()
                .map(|l| l.split('#').next().unwrap_or(""))
                .flat_map(|l| l.split(|c: char| c == ',' || c.is_whitespace()))
                .filter(|w| !w.is_empty())
                .map(str::to_string)
                .collect(),
        )
    }

    #[test]
    fn oracle_files_match_their_contents() {
        let dirs = [PathBuf::from(ORACLE_COMPAT_DIR)];
        let mut checked = 0;
        for name in ["grub2", "openzfs-2.0-linux", "zol-0.8", "openzfs-2.3", "compat-2018", "2020"] {
            let Some(words) = oracle_words(name) else { continue };
            let c = load_from(name, &dirs).unwrap();
            assert_eq!(allowed(&c), &words, "{name}");
            assert!(c.warnings().is_empty(), "{name}: {:?}", c.warnings());
            checked += 1;
        }
        if checked == 0 {
            eprintln!("oracle compatibility files not installed; skipped");
            return;
        }
        assert_eq!(checked, 6);
        let grub = oracle_words("grub2").unwrap();
        assert!(grub.contains("lz4_compress") && !grub.contains("encryption"));
        // Intersection of two real files.
        let c = load_from("grub2,zol-0.8", &dirs).unwrap();
        let zol = oracle_words("zol-0.8").unwrap();
        let both: BTreeSet<String> = grub.intersection(&zol).cloned().collect();
        assert_eq!(allowed(&c), &both);
        assert!(!c.allows("block_cloning") && c.allows("async_destroy"));
    }

    #[test]
    fn every_oracle_file_loads() {
        let Ok(rd) = std::fs::read_dir(ORACLE_COMPAT_DIR) else { return };
        let dirs = [PathBuf::from(ORACLE_COMPAT_DIR)];
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let c = load_from(&name, &dirs).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(Some(allowed(&c).clone()), oracle_words(&name), "{name}");
            assert!(c.warnings().is_empty(), "{name}: {:?}", c.warnings());
        }
        // The OpenZFS 2.3 set is exactly our feature table: an independent check of it.
        let c = load_from("openzfs-2.3", &dirs).unwrap();
        let table: BTreeSet<String> = feature_table::all().iter().map(|f| f.name.to_string()).collect();
        assert_eq!(allowed(&c), &table);
    }

    proptest::proptest! {
        #[test]
        fn parse_features_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let (known, unknown) = parse_features(&bytes);
            for k in &known {
                proptest::prop_assert!(feature_table::by_name(k).is_some());
            }
            for u in &unknown {
                proptest::prop_assert!(u.chars().count() <= 32 && u.chars().all(|c| c.is_ascii_graphic()));
            }
        }
    }

    #[test]
    fn default_search_finds_oracle_files() {
        if !Path::new(ORACLE_COMPAT_DIR).join("grub2").exists() {
            return;
        }
        let c = load("grub2").unwrap();
        assert!(c.allows("bookmarks"));
        assert!(!c.allows("zstd_compress"));
    }
}
