//! Reads from mirror-like vdevs (mirror, replacing, spare): every child holds a full copy.
//!
//! Children are tried in order, skipping those that cannot be read (missing, faulted,
//! offline) and, for a block whose birth txg is known, trying last those whose DTL holds
//! that txg (they may never have received it: OpenZFS's `vdev_mirror_dtl_contains` child
//! choice). A child whose copy fails an I/O has its READ counter bumped (by the leaf), one
//! whose copy fails the checksum its CKSUM counter; the first verified copy is returned, and
//! each child that returned bad data or an I/O error gets a [`Repair`] carrying the good
//! copy. A thorough (scrub, resilver) read reads every fresh child, so each bad copy is found
//! and repaired, and rewrites the stale ones without reading them.

use crate::error::{Result, VdevError};
use crate::tree::{ErrorKind, ReadCtx, Repair, Vdev};

pub(crate) fn read(
    vd: &Vdev,
    offset: u64,
    size: u64,
    check: &dyn Fn(&[u8]) -> bool,
    repairs: &mut Vec<Repair>,
    ctx: ReadCtx,
) -> Result<Vec<u8>> {
    let readable = vd.children.iter().filter(|c| c.readable());
    let (fresh, mut stale): (Vec<&Vdev>, Vec<&Vdev>) = readable.partition(|c| !c.stale(ctx.txg));
    let mut failed: Vec<u64> = Vec::new();
    let mut last_err = None;
    let mut failed_cksum = false;
    let mut good: Option<Vec<u8>> = None;
    let mut tries: Vec<&Vdev> = fresh;
    let mut stale_tried = false;
    loop {
        for child in tries {
            let mut sub = Vec::new();
            match child.read_block(offset, size, check, &mut sub, ctx) {
                Ok(data) => {
                    repairs.extend(sub);
                    if !ctx.thorough {
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
        // A DTL may be conservative: stale copies are the last resort.
        if good.is_some() || stale_tried || stale.is_empty() {
            break;
        }
        stale_tried = true;
        tries = std::mem::take(&mut stale);
    }
    if let Some(data) = good {
        repairs.extend(failed.iter().map(|&g| Repair { vdev_guid: g, offset, data: data.clone() }));
        if ctx.thorough {
            repairs.extend(stale.iter().map(|c| Repair { vdev_guid: c.guid(), offset, data: data.clone() }));
        }
        return Ok(data);
    }
    // No copy verified: the block is lost on this vdev. When some copy was read but failed the
    // checksum, that is a checksum error of the mirror itself (as zpool status shows it).
    match last_err {
        _ if failed_cksum => {
            vd.counters.note(ErrorKind::Checksum, Some(offset), size);
            Err(vd.checksum_error(offset, size))
        }
        Some(e) => Err(e),
        None => Err(VdevError::Unavailable { vdev: vd.name(), detail: "no readable child".into() }),
    }
}
