//! # `zfs diff`: what changed between a snapshot and a later snapshot or the live file system
//!
//! Both sides are read through the ZPL: every object reachable from the root (by name),
//! with its attributes. An object is compared by number across the two sides, as
//! OpenZFS's `libzfs_diff.c` compares the objects its kernel lists:
//!
//! * only in the later side: `+`; only in the earlier: `-`;
//! * in both with the same generation and ctime: unchanged (not printed);
//! * in both with the same generation: `M` (modified in place), `R` (the path changed:
//!   `old -> new`), or, for a file whose link count changed, `M` with `(+N)`/`(-N)`;
//! * in both with different generations (or types): the object number was reused, so
//!   `-` for the old and `+` for the new.
//!
//! Lines are `[ctime\t]CHANGE\t[TYPE\t]PATH`, the path under the file system's mount
//! point, with bytes outside `!`..`~` and `\` written as `\0ooo` unless `-h`.
//! OpenZFS's kernel walks only the dnode blocks born after the earlier snapshot; this
//! walk reads every directory of both sides (linear in the entries, no block-birth
//! pruning), and finds objects by name, so an unlinked file still held open is not
//! reported (OpenZFS skips those too).

use crate::zplopen::open_zpl_only;
use dsl::Dataset;
use pool::Pool;
use std::collections::BTreeMap;
use zpl::attrs::Attrs;
use zpl::Zpl;

/// The flags of `zfs diff`.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiffOpts {
    /// `-F`: a column with the file type.
    pub classify: bool,
    /// `-H`: tab-separated (a rename as `old\tnew`).
    pub scripted: bool,
    /// `-t`: a first column with the change time.
    pub timestamps: bool,
    /// `-h`: paths as they are, not escaped.
    pub no_mangle: bool,
}

/// Every object reachable from the root of `z`, with its path (relative to the root,
/// starting with `/`) and attributes.
fn objects(z: &Zpl) -> Result<BTreeMap<u64, (String, Attrs)>, String> {
    let mut out = BTreeMap::new();
    let root = z.getattr(z.root).map_err(|e| e.to_string())?;
    out.insert(z.root, ("/".to_string(), root));
    let mut err = None;
    z.walk_report(&mut |path, e| {
        if let std::collections::btree_map::Entry::Vacant(v) = out.entry(e.object) {
            match z.getattr(e.object) {
                Ok(a) => {
                    v.insert((path.to_string(), a));
                }
                Err(x) => err = Some(format!("{path}: {x}")),
            }
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// `get_what`: the `-F` type letter of a mode.
fn type_char(mode: u64) -> char {
    match mode & 0o170000 {
        0o060000 => 'B',
        0o020000 => 'C',
        0o040000 => '/',
        0o010000 => '|',
        0o120000 => '@',
        0o140000 => '=',
        0o100000 => 'F',
        _ => '?',
    }
}

/// `stream_bytes`: printable bytes but space and `\` as they are, the others `\0ooo`.
fn mangle(s: &str) -> String {
    let mut out = String::new();
    for &b in s.as_bytes() {
        if b > b' ' && b != b'\\' && b < 0o177 {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\{b:04o}"));
        }
    }
    out
}

struct Printer<'a> {
    o: DiffOpts,
    mnt: &'a str,
    out: String,
}

impl Printer<'_> {
    fn path(&self, p: &str) -> String {
        let full = format!("{}{}", self.mnt, if p == "/" { "/" } else { p });
        if self.o.no_mangle {
            full
        } else {
            mangle(&full)
        }
    }

    fn head(&mut self, a: &Attrs, change: char) {
        if self.o.timestamps {
            self.out.push_str(&format!("{:10}.{:09}\t", a.ctime.0, a.ctime.1));
        }
        self.out.push(change);
        self.out.push('\t');
        if self.o.classify {
            self.out.push(type_char(a.mode));
            self.out.push('\t');
        }
    }

    fn file(&mut self, change: char, p: &str, a: &Attrs) {
        self.head(a, change);
        let p = self.path(p);
        self.out.push_str(&p);
        self.out.push('\n');
    }

    fn links(&mut self, delta: i64, p: &str, a: &Attrs) {
        self.head(a, 'M');
        let p = self.path(p);
        self.out.push_str(&format!("{p}\t({delta:+})\n"));
    }

    fn rename(&mut self, old: &str, new: &str, a: &Attrs) {
        self.head(a, 'R');
        let (o, n) = (self.path(old), self.path(new));
        let sep = if self.o.scripted { "\t" } else { " -> " };
        self.out.push_str(&format!("{o}{sep}{n}\n"));
    }
}

/// The changes from snapshot `from` to `to` (a later snapshot of the same file system, or
/// the file system itself), with paths under `mnt`.
pub fn diff(pool: &Pool, from: &Dataset, to: &Dataset, mnt: &str, o: DiffOpts) -> Result<String, String> {
    let before = objects(&open_zpl_only(pool, from)?)?;
    let after = objects(&open_zpl_only(pool, to)?)?;
    let mut pr = Printer { o, mnt: mnt.trim_end_matches('/'), out: String::new() };
    let objs: std::collections::BTreeSet<u64> = before.keys().chain(after.keys()).copied().collect();
    let is_dir = |a: &Attrs| a.mode & 0o170000 == 0o040000;
    for obj in objs {
        match (before.get(&obj), after.get(&obj)) {
            (None, None) => {}
            (None, Some((p, a))) => pr.file('+', p, a),
            (Some((p, a)), None) => pr.file('-', p, a),
            (Some((fp, fa)), Some((tp, ta))) => {
                let change = if is_dir(fa) || is_dir(ta) || fa.links == 0 || ta.links == 0 {
                    0
                } else {
                    ta.links as i64 - fa.links as i64
                };
                let same_gen = fa.gen == ta.gen && fa.mode & 0o170000 == ta.mode & 0o170000;
                if !same_gen {
                    pr.file('-', fp, fa);
                    pr.file('+', tp, ta);
                } else if fa.ctime == ta.ctime {
                    continue;
                } else if change != 0 {
                    pr.links(change, if change > 0 { fp } else { tp }, ta);
                } else if fp == tp {
                    pr.file('M', fp, ta);
                } else {
                    pr.rename(fp, tp, ta);
                }
            }
        }
    }
    Ok(pr.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_mangled_as_openzfs_does() {
        assert_eq!(mangle("/p/a b\\c\u{7f}"), "/p/a\\0040b\\0134c\\0177");
        assert_eq!(type_char(0o100644), 'F');
        assert_eq!(type_char(0o040755), '/');
        assert_eq!(type_char(0o120777), '@');
    }
}
