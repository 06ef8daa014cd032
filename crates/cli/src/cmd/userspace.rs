//! `zfs userspace | groupspace | projectspace` and the `userused@WHO` family of `zfs get`
//! (zfs_main.c's `zfs_do_userspace`, libzfs's `zfs_prop_get_userquota`): space and object
//! counts per owner, read through [`zpl::space`]. Names come from /etc/passwd and
//! /etc/group, as getpwuid/getgrgid would give them here.

use crate::daemon::State;
use crate::format::{nicebytes, nicenum, Table};
use crate::proto::Response;
use crate::rwpool::pool_of;
use dsl::{Dataset, DatasetKind, DslPool};
use std::cmp::Ordering;
use zpl::space::{self, Owner, SpaceProp};

/// (name, id) pairs of /etc/passwd (users) or /etc/group (groups).
fn id_table(owner: Owner) -> Vec<(String, u64)> {
    let file = match owner {
        Owner::User => "/etc/passwd",
        Owner::Group => "/etc/group",
        Owner::Project => return Vec::new(),
    };
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let id = f.nth(1)?.parse().ok()?;
            Some((name.to_string(), id))
        })
        .collect()
}

/// The id a `@WHO` names: a number, or a user or group name (`userquota_propname_decode`).
pub(crate) fn resolve(owner: Owner, who: &str) -> Option<u64> {
    if let Ok(n) = who.parse::<u64>() {
        return (owner != Owner::Project || n <= u64::from(u32::MAX)).then_some(n);
    }
    id_table(owner).into_iter().find(|(n, _)| n == who).map(|(_, id)| id)
}

/// The value of a `userused@WHO`-family property for `zfs get`: (exact, human), None where it
/// cannot be had (libzfs prints `-` with source `-`).
pub fn prop_value(dsl: &DslPool, ds: &Dataset, p: SpaceProp, who: &str) -> Option<(String, String)> {
    let fs = match ds.kind {
        DatasetKind::Filesystem => true,
        DatasetKind::Snapshot => {
            dsl.open_objset(ds).map(|o| o.os_type() == ondisk::objset::DMU_OST_ZFS).ok()?
        }
        _ => false,
    };
    if !fs {
        return None;
    }
    let id = resolve(p.owner, who)?;
    let os = dsl.open_objset(ds).ok()?;
    let n = space::one(&os, p, id).ok()?;
    let human = if p.quota && n == 0 {
        "none".to_string()
    } else if p.objects {
        nicenum(n)
    } else {
        nicebytes(n)
    };
    Some((n.to_string(), human))
}

/// The flags of `zfs userspace`.
pub struct Opts {
    pub owner: Owner,
    pub scripted: bool,
    pub parsable: bool,
    /// `-n`: ids, not names.
    pub numeric: bool,
    pub fields: Option<String>,
    pub types: Option<String>,
    /// Sort keys: (field, descending), `-s`/`-S` in the order given.
    pub sort: Vec<(String, bool)>,
}

const FIELDS: [&str; 6] = ["type", "name", "used", "quota", "objused", "objquota"];
/// `-t` words and the owners they select (`us_type_names`); SMB principals are never found
/// here (no idmap), so their words select nothing.
const TYPES: [(&str, Option<Owner>); 5] = [
    ("posixgroup", Some(Owner::Group)),
    ("posixuser", Some(Owner::User)),
    ("smbgroup", None),
    ("smbuser", None),
    ("all", None),
];

struct Row {
    owner: Owner,
    id: u64,
    name: Option<String>,
    vals: [Option<u64>; 4],
}

impl Row {
    fn type_str(&self) -> &'static str {
        match self.owner {
            Owner::User => "POSIX User",
            Owner::Group => "POSIX Group",
            Owner::Project => "Project",
        }
    }
    /// us_type_bits order: groups sort before users.
    fn type_rank(&self) -> u8 {
        match self.owner {
            Owner::Group => 1,
            Owner::User => 2,
            Owner::Project => 8,
        }
    }
    fn cmp_by(&self, o: &Row, field: &str) -> Ordering {
        match field {
            "type" => self.type_rank().cmp(&o.type_rank()),
            "name" => match (&self.name, &o.name) {
                (Some(a), Some(b)) => a.cmp(b),
                (None, None) => self.id.cmp(&o.id),
                (a, b) => a.as_deref().unwrap_or("").cmp(b.as_deref().unwrap_or("")),
            },
            f => {
                let i = FIELDS.iter().position(|x| *x == f).unwrap_or(2).saturating_sub(2).min(3);
                self.vals[i].cmp(&o.vals[i])
            }
        }
    }
}

/// `zfs userspace | groupspace | projectspace [-Hinp] [-o F,...] [-s F]... [-S F]... [-t T,...]
/// FILESYSTEM|SNAPSHOT`.
pub fn userspace(state: &State, target: &str, o: &Opts) -> Result<Response, String> {
    let fields: Vec<String> =
        o.fields.clone().unwrap_or_else(|| FIELDS.join(",")).split(',').map(str::to_string).collect();
    if let Some(bad) = fields.iter().find(|f| !FIELDS.contains(&f.as_str())) {
        return Err(format!("invalid type '{bad}' for -o option"));
    }
    for (k, _) in &o.sort {
        if !FIELDS.contains(&k.as_str()) {
            return Err(format!("invalid type '{k}' for -s option"));
        }
    }
    let owners: Vec<Owner> = match (&o.types, o.owner) {
        (_, Owner::Project) => vec![Owner::Project],
        (None, owner) => vec![owner],
        (Some(t), _) => {
            let mut v = Vec::new();
            for w in t.split(',') {
                let Some((_, sel)) = TYPES.iter().find(|(n, _)| *n == w) else {
                    return Err(format!("invalid type '{w}' for -t option"));
                };
                match (w, sel) {
                    ("all", _) => v.extend([Owner::Group, Owner::User]),
                    (_, Some(x)) => v.push(*x),
                    _ => {}
                }
            }
            v
        }
    };
    let pool =
        state.pool(pool_of(target)).map_err(|_| format!("cannot open '{target}': dataset does not exist"))?;
    let dsl = pool.dsl();
    let ds = dsl.find(target).map_err(|_| format!("cannot open '{target}': dataset does not exist"))?;
    let os = dsl.open_objset(&ds).map_err(|e| e.to_string())?;
    if !matches!(ds.kind, DatasetKind::Filesystem | DatasetKind::Snapshot)
        || os.os_type() != ondisk::objset::DMU_OST_ZFS
    {
        return Err("operation is only applicable to filesystems and their snapshots".into());
    }
    let mut rows: Vec<Row> = Vec::new();
    for owner in owners {
        let names = id_table(owner);
        for (i, (objects, quota)) in
            [(false, false), (false, true), (true, false), (true, true)].into_iter().enumerate()
        {
            let p = SpaceProp { owner, objects, quota };
            if objects && !space::present(&os, p) && space::present(&os, SpaceProp { objects: false, ..p }) {
                continue; // object counts not kept here: those columns stay `-`
            }
            let vals = space::many(&os, p).map_err(|e| format!("cannot get used/quota for {target}: {e}"))?;
            for (id, v) in vals {
                let pos = rows.iter().position(|r| r.owner == owner && r.id == id);
                let r = match pos {
                    Some(k) => &mut rows[k],
                    None => {
                        let name = if o.numeric || owner == Owner::Project {
                            None
                        } else {
                            names.iter().find(|(_, n)| *n == id).map(|(s, _)| s.clone())
                        };
                        rows.push(Row { owner, id, name, vals: [None; 4] });
                        rows.last_mut().expect("just pushed")
                    }
                };
                r.vals[i] = Some(v);
                // A usage row shows its quota as none, a quota row its usage as 0 (userspace_cb).
                let other = i ^ 1;
                if r.vals[other].is_none() {
                    r.vals[other] = Some(0);
                }
            }
        }
    }
    let mut keys = o.sort.clone();
    keys.push(("type".into(), false));
    keys.push(("name".into(), false));
    rows.sort_by(|a, b| {
        keys.iter()
            .map(|(k, desc)| {
                let c = a.cmp_by(b, k);
                if *desc {
                    c.reverse()
                } else {
                    c
                }
            })
            .find(|c| *c != Ordering::Equal)
            .unwrap_or(Ordering::Equal)
    });
    let right: Vec<bool> = fields.iter().map(|f| !matches!(f.as_str(), "type" | "name")).collect();
    let hdr: Vec<&str> = fields.iter().map(String::as_str).collect();
    let mut t = Table::new(&hdr, &right);
    for r in &rows {
        let cells = fields
            .iter()
            .map(|f| match f.as_str() {
                "type" => r.type_str().to_string(),
                "name" => r.name.clone().unwrap_or_else(|| r.id.to_string()),
                f => {
                    let i = FIELDS.iter().position(|x| *x == f).unwrap_or(2) - 2;
                    match r.vals[i] {
                        None => "-".into(),
                        Some(v) if o.parsable => v.to_string(),
                        Some(0) if i % 2 == 1 => "none".into(),
                        Some(v) if i < 2 => nicebytes(v),
                        Some(v) => nicenum(v),
                    }
                }
            })
            .collect();
        t.rows.push(cells);
    }
    Ok(Response::ok(if t.rows.is_empty() { String::new() } else { t.render(o.scripted) }))
}
