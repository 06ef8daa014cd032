//! # Space: slop, reservations and what a pool can really take
//!
//! Theory. A txg is written at sync time, long after the writes that filled it returned. To
//! be able to answer `ENOSPC` at `write()` time — and never fail a sync for lack of space —
//! every change reserves, before it is accepted, the worst-case allocation its sync may need
//! (OpenZFS `dmu_tx_assign` → `dsl_dir_tempreserve_space`):
//!
//! 1. The DMU counts, per objset, what the open txg will write ([`dmu::tx::TxgCost`]): dirty
//!    level-0 blocks exactly, plus the indirect blocks, dnode blocks and objset block above
//!    them; ZAP caches add an upper bound of the ZAPs they will encode.
//! 2. [`worst_asize`] turns a cost into allocated bytes the way the vdev layout inflates a
//!    block: every block padded to whole sectors, RAID-Z parity for each row and the
//!    padding to a multiple of `nparity + 1` sectors, times the number of copies (metadata
//!    has one copy more than data, as [`crate::writer::Policy`] writes it).
//! 3. A change is admitted when the reservation of the open txg plus the change's own upper
//!    bound fits in the allocatable space less a part of the *slop*: `spa_get_slop_space`'s
//!    1/32 of the pool (`spa_slop_shift`), at least 128 MiB (`spa_min_slop`) but at most half
//!    the pool, at most 128 GiB (`spa_max_slop`). User writes and creations leave all of it
//!    ([`SpaceCheck::Normal`]), so the MOS, space maps and labels of every sync have room;
//!    changes that free space (unlink, truncate, property changes) may use half of it
//!    ([`SpaceCheck::Reserved`]) and destroys three quarters
//!    ([`SpaceCheck::ExtraReserved`]), so a full pool can always be emptied (OpenZFS
//!    `zfs_space_check_t`).
//!
//! Space freed in txg T is allocatable only after T + 2 synced. When a change does not fit
//! but space is waiting out that delay, the writer syncs txgs until it is released before it
//! answers `ENOSPC` (OpenZFS returns `ERESTART` and waits for the txg).

use dmu::tx::TxgCost;
use vdev::{Vdev, VdevKind};

/// `spa_slop_shift`: the slop is 1/32 of the pool.
pub const SLOP_SHIFT: u32 = 5;
/// `spa_min_slop`: at least 128 MiB (but never more than half the pool).
pub const SLOP_MIN: u64 = 128 << 20;
/// `spa_max_slop`: at most 128 GiB.
pub const SLOP_MAX: u64 = 128 << 30;

/// How much of the slop a change may use (OpenZFS `zfs_space_check_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpaceCheck {
    /// Writes and creations: the whole slop stays free.
    Normal,
    /// Changes that free space or only edit metadata: half the slop may be used.
    Reserved,
    /// Destroys: three quarters of the slop may be used.
    ExtraReserved,
}

impl SpaceCheck {
    /// The part of `slop` that must stay free.
    pub fn kept(self, slop: u64) -> u64 {
        match self {
            SpaceCheck::Normal => slop,
            SpaceCheck::Reserved => slop / 2,
            SpaceCheck::ExtraReserved => slop / 4,
        }
    }
}

/// The slop of a pool whose usable (deflated) size is `dspace` bytes
/// (`spa_get_slop_space`).
pub fn slop_space(dspace: u64) -> u64 {
    let slop = (dspace >> SLOP_SHIFT).min(SLOP_MAX);
    slop.max((dspace >> 1).min(SLOP_MIN))
}

/// The allocation shape of a top-level vdev, for worst-case sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub ashift: u8,
    /// Parity columns (0 for a disk or mirror).
    pub nparity: u64,
    /// Data columns (children less parity; 1 for a disk or mirror).
    pub ndata: u64,
}

impl Layout {
    /// The layout of a top-level vdev.
    pub fn of(top: &Vdev) -> Layout {
        match top.kind() {
            VdevKind::Raidz { nparity } => {
                let p = u64::from(*nparity);
                Layout {
                    ashift: top.ashift(),
                    nparity: p,
                    ndata: (top.children().len() as u64).saturating_sub(p).max(1),
                }
            }
            _ => Layout { ashift: top.ashift(), nparity: 0, ndata: 1 },
        }
    }
}

/// An upper bound of the bytes `blocks` blocks totalling `bytes` logical bytes allocate on
/// one copy: each block is at most its logical size (compression never stores more) rounded
/// up to a sector, plus RAID-Z parity of `ceil(s / ndata)` sectors per parity column and the
/// padding to a multiple of `nparity + 1` sectors (`vdev_raidz_asize`), which together stay
/// below `s * (1 + p / d) + 2p` sectors for a block of `s` data sectors.
pub fn worst_asize(l: &Layout, bytes: u64, blocks: u64) -> u64 {
    let sector = 1u64 << l.ashift;
    let sectors = bytes.div_ceil(sector).saturating_add(blocks);
    let parity = (sectors.saturating_mul(l.nparity)).div_ceil(l.ndata);
    let pad = blocks.saturating_mul(2 * l.nparity);
    sectors.saturating_add(parity).saturating_add(pad).saturating_mul(sector)
}

/// The worst-case allocation of a txg cost written with `copies` copies of data (metadata
/// gets one more, at most 3).
pub fn cost_asize(l: &Layout, cost: &TxgCost, copies: u8) -> u64 {
    let data_copies = u64::from(copies.clamp(1, 3));
    let meta_copies = (data_copies + 1).min(3);
    let data = worst_asize(l, cost.data_bytes, cost.data_blocks).saturating_mul(data_copies);
    let meta = worst_asize(l, cost.meta_bytes, cost.meta_blocks).saturating_mul(meta_copies);
    data.saturating_add(meta)
}

/// What one change may add to the open txg, asked before it runs (its real cost is counted
/// afterwards by the DMU; this only keeps one change from overshooting the space left).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reserve {
    /// Nothing: a read, or a change checked otherwise.
    None,
    /// Writing `len` bytes into an object of `block` bytes per block (0: the dataset's
    /// recordsize).
    Write { len: u64, block: u64 },
    /// A namespace or attribute change (create, link, rename, setattr, xattr): a dnode
    /// block, two directory ZAPs and an indirect block or two.
    Meta,
}

impl Reserve {
    /// An upper bound of the cost of the change.
    pub fn cost(self) -> TxgCost {
        const IND: u64 = 128 << 10;
        match self {
            Reserve::None => TxgCost::default(),
            Reserve::Write { len, block } => {
                let block = block.max(512);
                let blocks = len.div_ceil(block) + 1;
                // Per level, the indirect blocks spanned plus one at each end; three levels
                // cover files to 2^51 bytes with 128 KiB records.
                let ind = 3 * (blocks.div_ceil(1024) + 2);
                TxgCost {
                    data_blocks: blocks,
                    data_bytes: blocks * block,
                    meta_blocks: ind + 2,
                    meta_bytes: ind * IND + (16 << 10) + 4096,
                }
            }
            Reserve::Meta => TxgCost {
                data_blocks: 0,
                data_bytes: 0,
                meta_blocks: 8,
                meta_bytes: 2 * IND + 2 * (48 << 10) + (16 << 10) + 4096,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raidz_asize(psize: u64, ashift: u8, cols: u64, p: u64) -> u64 {
        // vdev_raidz_asize, restated for the test.
        let mut a = ((psize - 1) >> ashift) + 1;
        a += p * (a + cols - p - 1) / (cols - p);
        (a.div_ceil(p + 1) * (p + 1)) << ashift
    }

    #[test]
    fn slop_follows_openzfs() {
        assert_eq!(slop_space(100 << 20), 50 << 20, "half a small pool");
        assert_eq!(slop_space(1 << 30), 128 << 20, "128 MiB floor");
        assert_eq!(slop_space(64 << 30), 2 << 30, "1/32");
        assert_eq!(slop_space(1 << 50), SLOP_MAX, "capped");
    }

    #[test]
    fn space_check_parts() {
        assert_eq!(SpaceCheck::Normal.kept(100), 100);
        assert_eq!(SpaceCheck::Reserved.kept(100), 50);
        assert_eq!(SpaceCheck::ExtraReserved.kept(100), 25);
    }

    #[test]
    fn worst_asize_bounds_every_raidz_block() {
        for (cols, p) in [(3u64, 1u64), (4, 1), (5, 2), (6, 2), (8, 3), (2, 1)] {
            let l = Layout { ashift: 12, nparity: p, ndata: cols - p };
            for psize in (512..=(256 << 10)).step_by(512) {
                let real = raidz_asize(psize, 12, cols, p);
                let bound = worst_asize(&l, psize, 1);
                assert!(bound >= real, "raidz{p} of {cols}, {psize}: {bound} < {real}");
                // Sums of many blocks stay bounds too.
                assert!(worst_asize(&l, psize * 7, 7) >= 7 * real);
            }
        }
        let m = Layout { ashift: 9, nparity: 0, ndata: 1 };
        assert_eq!(worst_asize(&m, 1000, 1), 1536);
    }

    #[test]
    fn write_reserve_covers_its_blocks() {
        let c = Reserve::Write { len: 1 << 20, block: 128 << 10 }.cost();
        assert!(c.data_bytes >= (1 << 20) + (128 << 10));
        assert!(c.meta_blocks > 0);
        assert_eq!(Reserve::None.cost(), TxgCost::default());
    }
}
