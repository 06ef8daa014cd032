//! Reads from mirror-like vdevs (mirror, replacing, spare): every child holds a full copy.
//!
//! Children are tried in order, skipping those that cannot be read (missing, faulted). A child
//! whose copy fails an I/O has its READ counter bumped (by the leaf), one whose copy fails the
//! checksum its CKSUM counter; the first verified copy is returned, and each child that
//! returned bad data or an I/O error gets a [`Repair`] carrying the good copy. This follows
//! OpenZFS vdev_mirror.c in outcome, without its load balancing or DTL-based child choice.
//! A thorough (scrub) read reads every child, so each bad copy is found and repaired.

use crate::error::{Result, VdevError};
use crate::tree::{Counters, Repair, Vdev};

pub(crate) fn read(
    vd: &Vdev,
    offset: u64,
    size: u64,
    check: &dyn Fn(&[u8]) -> bool,
    repairs: &mut Vec<Repair>,
    thorough: bool,
) -> Result<Vec<u8>> {
    let mut failed: Vec<u64> = Vec::new();
    let mut last_err = None;
    let mut failed_cksum = false;
    let mut good: Option<Vec<u8>> = None;
    for child in vd.children.iter().filter(|c| c.readable()) {
        let mut sub = Vec::new();
        match child.read_block(offset, size, check, &mut sub, thorough) {
            Ok(data) => {
                repairs.extend(sub);
                if !thorough {
                    repairs.extend(failed.iter().map(|&g| Repair {
                        vdev_guid: g,
                        offset,
                        data: data.clone(),
                    }));
                    return Ok(data);
                }
                good.get_or_insert(data);
            }
            Err(e) => {
                failed_cksum |= matches!(e, VdevError::Checksum { .. });
                failed.push(child.guid());
                last_err = Some(e);
            }
        }
    }
    if let Some(data) = good {
        repairs.extend(failed.iter().map(|&g| Repair { vdev_guid: g, offset, data: data.clone() }));
        return Ok(data);
    }
    // No copy verified: the block is lost on this vdev. When some copy was read but failed the
    // checksum, that is a checksum error of the mirror itself (as zpool status shows it).
    let any_cksum = failed_cksum;
    match last_err {
        _ if any_cksum => {
            Counters::bump(&vd.counters.cksum);
            Err(vd.checksum_error(offset, size))
        }
        Some(e) => Err(e),
        None => Err(VdevError::Unavailable { vdev: vd.name(), detail: "no readable child".into() }),
    }
}
