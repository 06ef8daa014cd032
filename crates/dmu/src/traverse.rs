//! Traversal of every block pointer of an objset (the basis of scrub, `zdb -b`-style block
//! statistics and copy verification).
//!
//! Order: the meta-dnode's tree depth first; inside every level-0 dnode block, each allocated
//! dnode's tree (and spill block); then the user/group/project accounting dnodes. Blocks born
//! at or before `min_birth` are skipped together with their subtrees — a snapshot's blocks are
//! then visited once, by the oldest dataset that references them (OpenZFS
//! `module/zfs/dmu_traverse.c` follows the same rule). Indirect blocks and dnode blocks must be
//! read to descend, so they are always verified; level-0 data blocks are read (and thus
//! verified) only when `read_data` is set.

use crate::{DmuError, Objset, Result};
use ondisk::blkptr::{BlkPtr, BLKPTR_SIZE};
use ondisk::dnode::{DnodePhys, DNODE_SLOT_SIZE};

/// One visited block pointer.
#[derive(Debug)]
pub struct Visit<'a> {
    pub bp: &'a BlkPtr,
    /// Object number (0 = the meta-dnode; u64::MAX-n = accounting objects).
    pub object: u64,
    pub level: u8,
    pub blkid: u64,
}

/// Options of a traversal.
#[derive(Clone, Copy, Debug, Default)]
pub struct TraverseOpts {
    /// Skip blocks with logical birth ≤ this txg.
    pub min_birth: u64,
    /// Read (and so verify) level-0 data blocks too.
    pub read_data: bool,
}

/// Visitor callback type; an `Err` aborts the traversal.
pub type Visitor<'v> = dyn FnMut(&Visit) -> Result<()> + 'v;

/// Errors met on individual blocks when the caller wants to go on (scrub): the visitor gets
/// them through this hook instead of aborting.
pub type ErrorHook<'v> = dyn FnMut(&BlkPtr, u64, &DmuError) + 'v;

/// Walks every block pointer of `os`.
pub fn traverse_objset(
    os: &Objset,
    opts: TraverseOpts,
    visit: &mut Visitor,
    on_error: &mut ErrorHook,
) -> Result<()> {
    let mut t = Walker {
        os,
        opts,
        visit,
        on_error,
    };
    let md = os.phys.meta_dnode.clone();
    t.dnode(0, &md)?;
    let acct = [&os.phys.userused, &os.phys.groupused, &os.phys.projectused];
    for (i, dn) in acct.into_iter().enumerate() {
        if let Some(dn) = dn {
            if !dn.is_free() {
                t.dnode(u64::MAX - i as u64, dn)?;
            }
        }
    }
    Ok(())
}

struct Walker<'a, 'v> {
    os: &'a Objset,
    opts: TraverseOpts,
    visit: &'a mut Visitor<'v>,
    on_error: &'a mut ErrorHook<'v>,
}

impl Walker<'_, '_> {
    fn dnode(&mut self, object: u64, dn: &DnodePhys) -> Result<()> {
        if dn.indblkshift < 7 || dn.nlevels == 0 {
            return Err(DmuError::Corrupt {
                what: "dnode",
                detail: format!("object {object}: bad tree shape"),
            });
        }
        let epbs = (dn.indblkshift - 7) as u32;
        let top = dn.nlevels - 1;
        for (i, bp) in dn.blkptr.iter().enumerate() {
            let span = epbs.saturating_mul(top as u32);
            let blkid = if span >= 64 { 0 } else { (i as u64) << span };
            self.bp(object, bp, top, blkid, epbs)?;
        }
        if let Some(sp) = &dn.spill {
            if !sp.is_hole() && sp.birth > self.opts.min_birth {
                (self.visit)(&Visit {
                    bp: sp,
                    object,
                    level: 0,
                    blkid: u64::MAX,
                })?;
                if self.opts.read_data {
                    if let Err(e) = self.os.reader().read_bp(sp) {
                        (self.on_error)(sp, object, &e);
                    }
                }
            }
        }
        Ok(())
    }

    fn bp(&mut self, object: u64, bp: &BlkPtr, level: u8, blkid: u64, epbs: u32) -> Result<()> {
        if bp.is_hole() || bp.birth <= self.opts.min_birth {
            return Ok(());
        }
        (self.visit)(&Visit {
            bp,
            object,
            level,
            blkid,
        })?;
        let is_dnode_block = object == 0 && level == 0;
        if level == 0 && !is_dnode_block && !self.opts.read_data {
            return Ok(());
        }
        let block = match self.os.reader().read_bp(bp) {
            Ok(b) => b,
            Err(e) => {
                (self.on_error)(bp, object, &e);
                return Ok(());
            }
        };
        if level > 0 {
            let order = bp.byte_order();
            for (i, raw) in block.chunks_exact(BLKPTR_SIZE).enumerate() {
                let child = BlkPtr::parse(raw, order)?;
                let child_blkid = (blkid << epbs) + i as u64;
                self.bp(object, &child, level - 1, child_blkid, epbs)?;
            }
        } else if is_dnode_block {
            self.dnode_block(&block, blkid, bp)?;
        }
        Ok(())
    }

    fn dnode_block(&mut self, block: &[u8], blkid: u64, bp: &BlkPtr) -> Result<()> {
        let per_block = block.len() / DNODE_SLOT_SIZE;
        let mut slot = 0;
        while slot < per_block {
            let object = blkid * per_block as u64 + slot as u64;
            match DnodePhys::parse(&block[slot * DNODE_SLOT_SIZE..], bp.byte_order()) {
                Ok(dn) if !dn.is_free() => {
                    slot += dn.slots();
                    self.dnode(object, &dn)?;
                }
                Ok(_) => slot += 1,
                Err(e) => {
                    (self.on_error)(bp, object, &DmuError::from(e));
                    slot += 1;
                }
            }
        }
        Ok(())
    }
}
