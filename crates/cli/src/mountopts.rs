//! How a dataset is mounted: its `exec`, `setuid`, `devices` and `acltype` properties, and
//! the temporary options of `rzfs mount -o`, made into [`rzfs_fuse::MountOpts`].
//!
//! * `exec=off`, `setuid=off`, `devices=off` mount noexec, nosuid, nodev (as `zfs mount`
//!   does); `on` mounts exec, suid, dev when the daemon runs as root.
//! * `acltype=posix`: the kernel enforces POSIX ACLs. `acltype=off`: permissions are the mode
//!   bits and ACL xattrs are refused (EOPNOTSUPP), as OpenZFS does.
//! * `acltype=nfsv4` (or a value rzfs does not know): rzfs does not enforce NFSv4 ACLs, so
//!   serving the dataset read-write would let anyone the mode bits allow change files the
//!   ACLs protect. It is mounted read-only with a warning; `rzfs mount -o rw` is the
//!   explicit override (still warned: access then follows the mode bits only).
//! * `rzfs mount -o` takes `ro`, `rw`, `exec`, `noexec`, `suid`, `nosuid`, `dev`, `nodev`
//!   for this mount only, like zfs(8)'s temporary mount options.

use crate::cmd::zfs::prop_value;
use dsl::{Dataset, DslPool};
use pool::Pool;
use rzfs_fuse::MountOpts;
use zpl::acl::AclType;

/// The mount options of dataset `ds` (named `name`) with the temporary options `temp`
/// (comma-separated, possibly empty), and the warnings to show the user.
pub fn for_dataset(
    pool: &Pool,
    dsl: &DslPool,
    ds: &Dataset,
    name: &str,
    temp: &str,
) -> Result<(MountOpts, Vec<String>), String> {
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
    };
    let mut explicit_rw = false;
    for t in temp.split(',').filter(|t| !t.is_empty()) {
        match t {
            "ro" => o.readonly = true,
            "rw" => {
                o.readonly = false;
                explicit_rw = true;
            }
            "exec" | "noexec" => o.exec = t == "exec",
            "suid" | "nosuid" => o.setuid = t == "suid",
            "dev" | "nodev" => o.devices = t == "dev",
            _ => {
                return Err(format!(
                    "cannot mount '{name}': unsupported mount option '{t}' (rzfs takes ro, rw, exec, noexec, suid, \
                     nosuid, dev, nodev)"
                ))
            }
        }
    }
    let mut warnings = Vec::new();
    if !matches!(acltype, AclType::Off | AclType::Posix) {
        let what = match acltype {
            AclType::Nfsv4 => "acltype=nfsv4: rzfs does not enforce NFSv4 ACLs".to_string(),
            _ => format!("acltype={acl_shown}, an ACL type rzfs does not know"),
        };
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
    Ok((o, warnings))
}
