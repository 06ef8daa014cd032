//! How a dataset is mounted: its `exec`, `setuid`, `devices` and `acltype` properties, and
//! the temporary options of `rzfs mount -o`, made into [`rzfs_fuse::MountOpts`].
//!
//! * `exec=off`, `setuid=off`, `devices=off` mount noexec, nosuid, nodev (as `zfs mount`
//!   does); `on` mounts exec, suid, dev when the daemon runs as root. Changing them on a
//!   mounted file system changes its mount flags in place (`rzfs_fuse::set_mount_flags`).
//! * `acltype=posix`: the kernel enforces POSIX ACLs. `acltype=off`: permissions are the mode
//!   bits and ACL xattrs are refused (EOPNOTSUPP), as OpenZFS does.
//! * `acltype=nfsv4`: as OpenZFS on Linux (`acltype_changed_cb` treats it as `off`), access
//!   follows the mode bits and the NFSv4 ACLs (from FreeBSD or illumos) are kept, not
//!   enforced; chmod rebuilds a file's ACL from its mode (as `aclmode=discard`, whatever `aclmode`
//!   says). New entries in
//!   a directory whose ACL has inheritable entries are refused (EACCES, see
//!   `zpl::write`): rzfs cannot give them what they would inherit.
//! * An `acltype` value rzfs does not know: mounted read-only with a warning; `rzfs mount -o
//!   rw` is the explicit override (still warned: access then follows the mode bits only).
//! * `rzfs mount -o` takes `ro`, `rw`, `exec`, `noexec`, `suid`, `nosuid`, `dev`, `nodev`,
//!   `atime`, `noatime`, `relatime`, `norelatime` for this mount only, like zfs(8)'s
//!   temporary mount options; `zfs get` shows those that differ from the properties with
//!   the source `temporary` while the mount lasts. `remount` (with the mount command) mounts
//!   a mounted file system again with the new options; `defaults` changes nothing.

use crate::cmd::zfs::prop_value;
use dsl::{Dataset, DslPool};
use pool::Pool;
use rzfs_fuse::MountOpts;
use zpl::acl::AclType;

/// The temporary mount options: option, the property it sets for the mount, the value.
const TEMP_OPTIONS: &[(&str, &str, bool)] = &[
    ("ro", "readonly", true),
    ("rw", "readonly", false),
    ("exec", "exec", true),
    ("noexec", "exec", false),
    ("suid", "setuid", true),
    ("nosuid", "setuid", false),
    ("dev", "devices", true),
    ("nodev", "devices", false),
    ("atime", "atime", true),
    ("noatime", "atime", false),
    ("relatime", "relatime", true),
    ("norelatime", "relatime", false),
    ("xattr", "xattr", true),
    ("noxattr", "xattr", false),
];

/// The property values a mount's temporary options give (property, value), where they
/// differ from the properties.
pub type Temps = Vec<(String, String)>;

/// The mount options of dataset `ds` (named `name`) with the temporary options `temp`
/// (comma-separated, possibly empty), the temporary property values they make, and the
/// warnings to show the user.
pub fn for_dataset(
    pool: &Pool,
    dsl: &DslPool,
    ds: &Dataset,
    name: &str,
    temp: &str,
) -> Result<(MountOpts, Temps, Vec<String>), String> {
    let prop = |p: &str| prop_value(pool, dsl, ds, p).map(|v| v.exact);
    let on = |p: &str| prop(p).map(|v| v != "off");
    let acl_shown = prop("acltype")?;
    let acltype = AclType::from_name(&acl_shown)
        .or_else(|| acl_shown.parse().ok().map(AclType::from_prop))
        .unwrap_or(AclType::Unknown(u64::MAX));
    let mut o = MountOpts {
        acltype,
        exec: on("exec")?,
        setuid: on("setuid")?,
        devices: on("devices")?,
        readonly: false,
        writable: false,
        atime: None,
        xattr: None,
        xattr_prop: true,
    };
    // Each option sets a property for this mount; the last one given for a property wins.
    let mut chosen: Vec<(&str, bool)> = Vec::new();
    for t in temp.split(',').filter(|t| !t.is_empty() && !matches!(*t, "remount" | "defaults")) {
        let Some(&(_, p, v)) = TEMP_OPTIONS.iter().find(|(opt, _, _)| *opt == t) else {
            return Err(format!(
                "cannot mount '{name}': unsupported mount option '{t}' (rzfs takes ro, rw, exec, noexec, suid, \
                 nosuid, dev, nodev, atime, noatime, relatime, norelatime, xattr, noxattr, remount, defaults)"
            ));
        };
        chosen.retain(|(k, _)| *k != p);
        chosen.push((p, v));
    }
    let pick = |p: &str| chosen.iter().find(|(k, _)| *k == p).map(|&(_, v)| v);
    o.exec = pick("exec").unwrap_or(o.exec);
    o.setuid = pick("setuid").unwrap_or(o.setuid);
    o.devices = pick("devices").unwrap_or(o.devices);
    o.xattr = pick("xattr");
    o.xattr_prop = on("xattr")?;
    o.readonly = pick("readonly") == Some(true);
    o.writable = pick("readonly") == Some(false);
    let explicit_rw = o.writable;
    if pick("atime").is_some() || pick("relatime").is_some() {
        let atime = match pick("atime") {
            Some(v) => v,
            None => on("atime")?,
        };
        let relatime = match pick("relatime") {
            Some(v) => v,
            None => on("relatime")?,
        };
        o.atime = Some(match (atime, relatime) {
            (false, _) => rzfs_fuse::rw::Atime::Off,
            (true, false) => rzfs_fuse::rw::Atime::On,
            (true, true) => rzfs_fuse::rw::Atime::Relatime,
        });
    }
    let mut temps = Temps::new();
    for &(p, v) in &chosen {
        let shown = if v { "on" } else { "off" };
        let now = prop(p)?;
        // xattr=sa and xattr=dir are both "on" for the mount option.
        let now = if p == "xattr" && now != "off" { "on".to_string() } else { now };
        if now != shown {
            temps.push((p.to_string(), shown.to_string()));
        }
    }
    let mut warnings = Vec::new();
    if !matches!(acltype, AclType::Off | AclType::Posix | AclType::Nfsv4) {
        let what = format!("acltype={acl_shown}, an ACL type rzfs does not know");
        if explicit_rw {
            warnings.push(format!(
                "warning: '{name}' has {what}; mounted read-write as asked (-o rw): access follows the mode bits only"
            ));
        } else {
            o.readonly = true;
            warnings.push(format!(
                "warning: '{name}' has {what}; mounted read-only (access follows the mode bits only). \
                 'rzfs mount -o rw {name}' mounts it read-write anyway"
            ));
        }
    }
    Ok((o, temps, warnings))
}
