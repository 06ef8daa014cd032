//! User/group/project accounting checked against OpenZFS's own view of the pool.
//!
//! zdb does not verify the accounting ZAPs (objects -1, -2, -3 of a ZPL objset), so here
//! they are recounted from `zdb -P -dddd`'s dump of every object of every ZPL dataset, with
//! OpenZFS's rule (`do_userquota_update`): an object whose dnode flags carry
//! USERUSED_ACCOUNTED charges 512 bytes plus its dsize to its uid, gid and project (the
//! `projid` zdb prints, else 0); with USEROBJUSED_ACCOUNTED it also counts as one object
//! ("obj-" keys). The uid and gid come from zdb's decoding of the SA by attribute, so the
//! check also catches an SA laid out where OpenZFS's fixed offsets would not find them.
//! zdb prints dsize rounded to 512 bytes (`doi_physical_blocks_512`), and on RAID-Z
//! `dn_used` is no multiple of 512, so a byte count may differ from the recount by up to
//! 256 bytes per object it covers; object counts must match exactly.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

#[derive(Default)]
struct Obj {
    id: i64,
    dsize: u64,
    bytes: bool,
    objs: bool,
    uid: Option<u64>,
    gid: Option<u64>,
    projid: u64,
}

/// What one dataset's dump says: (expected, stored) keyed by (accounting object, key).
type Counts = BTreeMap<(i64, String), u64>;

/// Does `stored` match the recount `exp`, allowing zdb's rounding of each object's dsize?
fn matches(exp: &Counts, stored: &Counts, objects: &Counts) -> bool {
    let keys: std::collections::BTreeSet<_> = exp.keys().chain(stored.keys()).collect();
    keys.into_iter().all(|k| {
        let (e, s) = (exp.get(k).copied().unwrap_or(0), stored.get(k).copied().unwrap_or(0));
        if k.1.starts_with("obj-") {
            return e == s;
        }
        e.abs_diff(s) <= 256 * objects.get(k).copied().unwrap_or(0) && (e == 0) == (s == 0)
    })
}

fn charge(exp: &mut Counts, objects: &mut Counts, o: &Obj, project: bool) {
    let (Some(uid), Some(gid)) = (o.uid, o.gid) else { return };
    let mut owners = vec![(-1, uid), (-2, gid)];
    if project {
        owners.push((-3, o.projid));
    }
    for (obj, id) in owners {
        if o.bytes {
            *exp.entry((obj, format!("{id:x}"))).or_default() += 512 + o.dsize;
            *objects.entry((obj, format!("{id:x}"))).or_default() += 1;
        }
        if o.objs {
            *exp.entry((obj, format!("obj-{id:x}"))).or_default() += 1;
        }
    }
}

/// Recounts one `Dataset ... [ZPL]` section of the dump; returns (expected, stored, objects
/// behind each expected byte count).
fn recount(section: &str) -> (Counts, Counts, Counts) {
    let mut objs: Vec<Obj> = Vec::new();
    let mut stored = Counts::new();
    let mut lines = section.lines().peekable();
    while let Some(l) = lines.next() {
        let t = l.trim();
        if t.starts_with("Object  lvl") {
            let Some(next) = lines.next() else { break };
            let f: Vec<&str> = next.split_whitespace().collect();
            if let (Some(id), Some(dsize)) = (f.first().and_then(|v| v.parse().ok()), f.get(4)) {
                objs.push(Obj { id, dsize: dsize.parse().unwrap_or(0), ..Default::default() });
            }
            continue;
        }
        let Some(o) = objs.last_mut() else { continue };
        // zdb prints an object's own fields after one tab and a directory's entries after
        // two ("\t\tuid = 124 (type: ...)" is a file named "uid"), so only one-tab lines
        // are read as fields.
        let field = l.starts_with('\t') && !l.starts_with("\t\t");
        if !field {
            if o.id < 0 && l.starts_with("\t\t") {
                if let Some((k, v)) = t.split_once(" = ") {
                    stored.insert((o.id, k.trim().to_string()), v.trim().parse().unwrap_or(u64::MAX));
                }
            }
            continue;
        }
        if let Some(rest) = t.strip_prefix("dnode flags:") {
            o.bytes = rest.split_whitespace().any(|w| w == "USERUSED_ACCOUNTED");
            o.objs = rest.split_whitespace().any(|w| w == "USEROBJUSED_ACCOUNTED");
        } else if let Some(v) = t.strip_prefix("uid ") {
            o.uid = v.trim().parse().ok();
        } else if let Some(v) = t.strip_prefix("gid ") {
            o.gid = v.trim().parse().ok();
        } else if let Some(v) = t.strip_prefix("projid") {
            o.projid = v.trim().parse().unwrap_or(0);
        }
    }
    let project = objs.iter().any(|o| o.id == -3);
    let (mut exp, mut objects) = (Counts::new(), Counts::new());
    for o in objs.iter().filter(|o| o.id > 0) {
        charge(&mut exp, &mut objects, o, project);
    }
    exp.retain(|_, v| *v != 0);
    (exp, stored, objects)
}

/// Every ZPL dataset's (and snapshot's) accounting ZAPs hold what its objects add up to.
pub fn user_accounting_check(dir: &Path, pool: &str) {
    let d = dir.to_str().unwrap();
    let out = super::tools::run_zdb(&["-e", "-p", d, "-P", "-dddd", pool]);
    let mut checked = 0;
    for section in format!("\n{out}").split("\nDataset ").skip(1) {
        let name = section.split_whitespace().next().unwrap_or("?");
        if !section.lines().next().unwrap_or("").contains("[ZPL]") {
            continue;
        }
        let (exp, stored, objects) = recount(section);
        assert!(
            matches(&exp, &stored, &objects),
            "{pool} in {d}: dataset {name}: accounting recounted from zdb's dump differs from the \
             accounting objects:\n  recount: {exp:?}\n  stored:  {stored:?}"
        );
        checked += 1;
    }
    assert!(checked > 0 || !out.contains("[ZPL]"), "no ZPL dataset parsed in zdb's dump:\n{out}");
}
