//! RAID-Z block layout (the column map), reads with reconstruction, writes with parity.
//!
//! ## The map (OpenZFS module/zfs/vdev_raidz.c, vdev_raidz_map_alloc)
//!
//! A block of `s` sectors at DVA offset `offset` on a RAID-Z vdev of `dcols` children and
//! `nparity` parity is laid out as one row. With `b = offset >> ashift`:
//! - the first column is child `f = b % dcols`, at child offset `o = (b / dcols) << ashift`;
//!   column `c` is child `f + c`, wrapping to `f + c - dcols` one sector further down;
//! - `q = s / (dcols - nparity)` sectors go to every data column and the remainder
//!   `r = s % (dcols - nparity)` adds one sector to the first `r` data columns; the "big"
//!   columns are then the parity columns plus those `r` (`bc = r + nparity`, or 0 if `r == 0`);
//! - if `q == 0` only `bc` columns are accessed, and up to `roundup(bc, nparity+1)` (at most
//!   `dcols`) are *skip* columns holding nothing but padding;
//! - the allocation is rounded up to a multiple of `nparity + 1` sectors; the `nskip` pad
//!   sectors follow column `bc` (wrapping round to the parity columns);
//! - for single parity only, when bit 20 (1 MiB) of the offset is set, columns 0 and 1 swap
//!   their child and offset (a historical on-disk requirement).
//!
//! Columns `0..nparity` are P, Q, R; the data columns follow and hold the block's bytes in
//! order. The parity math is `codec::raidz`.
//!
//! ## Reads
//! Read the data columns; if all read and the caller's checksum passes, done. Otherwise read
//! the parity too, reconstruct the columns that were missing or failed I/O, and verify; if that
//! fails, try every combination of 1..=nparity further columns assumed silently corrupt
//! (as OpenZFS's vdev_raidz_combrec). The columns a successful reconstruction replaced with
//! different data get a CKSUM count and a [`Repair`]; parity columns that were read are checked
//! against parity regenerated from the verified data.

use codec::raidz as math;

use crate::error::{Result, VdevError};
use crate::tree::{ErrorKind, ReadCtx, Repair, Vdev, VdevKind};

/// One column of a RAID-Z map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaidzCol {
    /// Child index in the RAID-Z vdev.
    pub devidx: usize,
    /// Offset in the child's allocatable space.
    pub offset: u64,
    /// Bytes in this column (0 for a skip-only column).
    pub size: u64,
}

/// The column map of one block (one row; no RAID-Z expansion).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaidzMap {
    pub nparity: usize,
    /// All `scols` columns; the first `acols` carry parity and data.
    pub cols: Vec<RaidzCol>,
    pub acols: usize,
    pub bigcols: usize,
    /// Padding sectors to round the allocation to a multiple of `nparity + 1`.
    pub nskip: u64,
    /// Column index at which the padding sectors start.
    pub skipstart: usize,
}

impl RaidzMap {
    /// Compute the map for `size` bytes (a positive multiple of the sector) at DVA `offset`.
    pub fn new(offset: u64, size: u64, ashift: u8, dcols: usize, nparity: usize) -> Result<Self> {
        let sector = 1u64.checked_shl(u32::from(ashift)).unwrap_or(0);
        if sector == 0 || size == 0 || size & (sector - 1) != 0 {
            return Err(VdevError::InvalidRequest(format!("raidz size {size:#x} with ashift {ashift}")));
        }
        if nparity == 0 || dcols <= nparity {
            return Err(VdevError::InvalidConfig(format!("raidz{nparity} with {dcols} children")));
        }
        let (dc, np) = (dcols as u64, nparity as u64);
        let b = offset >> ashift;
        let s = size >> ashift;
        let f = b % dc;
        let o = (b / dc) << ashift;
        let q = s / (dc - np);
        let r = s - q * (dc - np);
        let bc = if r == 0 { 0 } else { r + np };
        let tot = s + np * (q + u64::from(r != 0));
        let (acols, scols) = if q == 0 { (bc, dc.min(bc.next_multiple_of(np + 1))) } else { (dc, dc) };
        let overflow = || VdevError::InvalidRequest(format!("raidz offset {offset:#x} overflows"));
        let mut cols = Vec::with_capacity(scols as usize);
        for c in 0..scols {
            let (col, coff) = if f + c >= dc {
                (f + c - dc, o.checked_add(sector).ok_or_else(overflow)?)
            } else {
                (f + c, o)
            };
            let sectors = if c >= acols {
                0
            } else if c < bc {
                q + 1
            } else {
                q
            };
            cols.push(RaidzCol { devidx: col as usize, offset: coff, size: sectors << ashift });
        }
        let mut skipstart = bc as usize;
        // Single-parity layouts swap the first two columns on odd megabytes (see module doc).
        if nparity == 1 && offset & (1 << 20) != 0 {
            let (a, b) = (cols[0], cols[1]);
            cols[0] = RaidzCol { devidx: b.devidx, offset: b.offset, size: a.size };
            cols[1] = RaidzCol { devidx: a.devidx, offset: a.offset, size: b.size };
            if skipstart == 0 {
                skipstart = 1;
            }
        }
        Ok(RaidzMap {
            nparity,
            cols,
            acols: acols as usize,
            bigcols: bc as usize,
            nskip: tot.next_multiple_of(np + 1) - tot,
            skipstart,
        })
    }

    /// Where the padding sectors lie: (child index, child offset), one sector each.
    pub fn skip_sectors(&self) -> Vec<(usize, u64)> {
        let scols = self.cols.len();
        (0..self.nskip as usize)
            .map(|k| {
                let c = &self.cols[(self.skipstart + k) % scols];
                (c.devidx, c.offset + c.size)
            })
            .collect()
    }
}

/// Allocated size of `psize` bytes (vdev_raidz_psize_to_asize): data sectors plus one parity
/// sector per started row per parity, rounded up to a multiple of `nparity + 1` sectors.
pub fn raidz_asize(psize: u64, ashift: u8, dcols: u64, nparity: u64) -> u64 {
    if psize == 0 || dcols <= nparity {
        return 0;
    }
    let mut sectors = ((psize - 1) >> ashift) + 1;
    sectors += nparity * sectors.div_ceil(dcols - nparity);
    sectors.next_multiple_of(nparity + 1) << ashift
}

fn map_of(vd: &Vdev, offset: u64, size: u64) -> Result<RaidzMap> {
    let nparity = match vd.kind {
        VdevKind::Raidz { nparity } => nparity as usize,
        _ => 0,
    };
    RaidzMap::new(offset, size, vd.ashift, vd.children.len(), nparity)
}

/// Write a sector-aligned block: parity, data, and zeroed padding sectors (as OpenZFS issues
/// them to keep child I/O contiguous). Succeeds while at most `nparity` columns failed.
pub(crate) fn write(vd: &Vdev, offset: u64, data: &[u8]) -> Result<()> {
    let map = map_of(vd, offset, data.len() as u64)?;
    let np = map.nparity;
    let mut chunks: Vec<&[u8]> = Vec::with_capacity(map.acols - np);
    let mut pos = 0usize;
    for c in &map.cols[np..map.acols] {
        let end = pos + c.size as usize;
        chunks.push(&data[pos..end]);
        pos = end;
    }
    let mut parity = vec![Vec::new(); np];
    math::generate(np, &chunks, &mut parity);
    let mut failed = 0;
    for (c, col) in map.cols[..map.acols].iter().enumerate() {
        let buf = if c < np { &parity[c][..] } else { chunks[c - np] };
        let child = &vd.children[col.devidx];
        if !child.readable() || child.column_write(col.offset, buf).is_err() {
            failed += 1;
        }
    }
    let zeros = vec![0u8; 1 << vd.ashift];
    for (devidx, off) in map.skip_sectors() {
        let child = &vd.children[devidx];
        if child.readable() {
            // Optional I/O in OpenZFS: a failure here loses nothing.
            let _ = child.column_write(off, &zeros);
        }
    }
    if failed > np {
        return Err(VdevError::Unavailable {
            vdev: vd.name(),
            detail: format!("{failed} columns failed to write with {np} parity"),
        });
    }
    Ok(())
}

/// How a column's read went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ColState {
    Untried,
    Good,
    /// The child cannot be read at all (missing, faulted): nothing to repair.
    Missing,
    /// The read failed with an I/O error: a repair candidate.
    IoError,
    /// The child's DTL holds the block's txg: not read (treated as missing), rewritten by a
    /// thorough read, and read only if the block cannot be rebuilt without it.
    Stale,
}

/// The buffers and states of the accessed columns of one read.
struct Cols<'a> {
    vd: &'a Vdev,
    map: RaidzMap,
    bufs: Vec<Vec<u8>>,
    state: Vec<ColState>,
    txg: Option<u64>,
}

impl Cols<'_> {
    fn fetch(&mut self, c: usize) {
        if self.state[c] != ColState::Untried {
            return;
        }
        let col = self.map.cols[c];
        let child = &self.vd.children[col.devidx];
        self.state[c] = if !child.readable() {
            ColState::Missing
        } else if child.stale(self.txg) {
            ColState::Stale
        } else {
            match child.column_read(col.offset, col.size, self.txg) {
                Ok(b) => {
                    self.bufs[c] = b;
                    ColState::Good
                }
                Err(_) => ColState::IoError,
            }
        };
        if self.state[c] != ColState::Good {
            self.bufs[c] = vec![0; col.size as usize];
        }
    }

    /// Reads the stale columns after all (their DTL may be conservative); true if any was.
    fn fetch_stale(&mut self) -> bool {
        let stale: Vec<usize> = (0..self.map.acols).filter(|&c| self.state[c] == ColState::Stale).collect();
        for &c in &stale {
            let col = self.map.cols[c];
            let child = &self.vd.children[col.devidx];
            match child.column_read(col.offset, col.size, self.txg) {
                Ok(b) => {
                    self.bufs[c] = b;
                    self.state[c] = ColState::Good;
                }
                Err(_) => self.state[c] = ColState::IoError,
            }
        }
        !stale.is_empty()
    }

    fn assemble(bufs: &[Vec<u8>], np: usize) -> Vec<u8> {
        bufs[np..].concat()
    }

    fn known_bad(&self) -> Vec<usize> {
        (0..self.map.acols).filter(|&c| self.state[c] != ColState::Good).collect()
    }

    /// Rebuild columns `dead` from the others; the rebuilt column set if the block verifies.
    fn attempt(&self, dead: &[usize], check: &dyn Fn(&[u8]) -> bool) -> Option<Vec<Vec<u8>>> {
        let mut bufs = self.bufs.clone();
        math::reconstruct(self.map.nparity, &mut bufs, dead).ok()?;
        check(&Self::assemble(&bufs, self.map.nparity)).then_some(bufs)
    }
}

pub(crate) fn read(
    vd: &Vdev,
    offset: u64,
    size: u64,
    check: &dyn Fn(&[u8]) -> bool,
    repairs: &mut Vec<Repair>,
    ctx: ReadCtx,
) -> Result<Vec<u8>> {
    let map = map_of(vd, offset, size)?;
    let (np, acols) = (map.nparity, map.acols);
    let thorough = ctx.thorough;
    let mut cols =
        Cols { vd, bufs: vec![Vec::new(); acols], state: vec![ColState::Untried; acols], map, txg: ctx.txg };
    for c in np..acols {
        cols.fetch(c);
    }
    if cols.state[np..].iter().all(|&s| s == ColState::Good) {
        let data = Cols::assemble(&cols.bufs, np);
        if check(&data) {
            if !thorough {
                return Ok(data);
            }
            // A scrub also proves the parity: read it and compare with parity regenerated
            // from the verified data (`finish` does exactly that).
            for c in 0..np {
                cols.fetch(c);
            }
            let bufs = cols.bufs.clone();
            let out = finish(&cols, bufs, repairs, thorough);
            return Ok(out);
        }
    }
    for c in 0..np {
        cols.fetch(c);
    }
    let mut known = cols.known_bad();
    if known.len() > np && cols.fetch_stale() {
        known = cols.known_bad();
    }
    if known.len() > np {
        return Err(VdevError::Unavailable {
            vdev: vd.name(),
            detail: format!("{} of {acols} columns unreadable with {np} parity", known.len()),
        });
    }
    if let Some(bufs) = solve(&cols, &known, check) {
        return Ok(finish(&cols, bufs, repairs, thorough));
    }
    // Stale columns left out may hold the block after all (a conservative DTL).
    if cols.fetch_stale() {
        let known = cols.known_bad();
        if known.len() <= np {
            if let Some(bufs) = solve(&cols, &known, check) {
                return Ok(finish(&cols, bufs, repairs, thorough));
            }
        }
    }
    vd.counters.note(ErrorKind::Checksum, Some(offset), size);
    Err(vd.checksum_error(offset, size))
}

/// The verified columns given the columns `known` to be unusable: rebuilt from parity
/// when data columns are among them, as read when only parity is, else by combinatorial
/// reconstruction.
fn solve(cols: &Cols<'_>, known: &[usize], check: &dyn Fn(&[u8]) -> bool) -> Option<Vec<Vec<u8>>> {
    let np = cols.map.nparity;
    if known.iter().any(|&c| c >= np) {
        if let Some(bufs) = cols.attempt(known, check) {
            return Some(bufs);
        }
    } else if check(&Cols::assemble(&cols.bufs, np)) {
        return Some(cols.bufs.clone());
    }
    combinatorial(cols, known, check)
}

/// Try every set of 1..=nparity columns (beyond those known bad) as silently corrupt.
fn combinatorial(cols: &Cols<'_>, known: &[usize], check: &dyn Fn(&[u8]) -> bool) -> Option<Vec<Vec<u8>>> {
    let np = cols.map.nparity;
    let suspects: Vec<usize> = (0..cols.map.acols).filter(|c| !known.contains(c)).collect();
    for nf in 1..=np.saturating_sub(known.len()) {
        let mut idx: Vec<usize> = (0..nf).collect();
        loop {
            let guessed: Vec<usize> = idx.iter().map(|&i| suspects[i]).collect();
            let mut dead: Vec<usize> = known.iter().chain(&guessed).copied().collect();
            dead.sort_unstable();
            // Rebuilding only parity leaves the data as read, which already failed.
            if dead.iter().any(|&c| c >= np) {
                if let Some(bufs) = cols.attempt(&dead, check) {
                    return Some(bufs);
                }
            }
            if !next_combination(&mut idx, suspects.len()) {
                break;
            }
        }
    }
    None
}

/// Advance `idx` (strictly increasing indices < n) to the next combination; false when done.
fn next_combination(idx: &mut [usize], n: usize) -> bool {
    let k = idx.len();
    for i in (0..k).rev() {
        if idx[i] < n - k + i {
            idx[i] += 1;
            for j in i + 1..k {
                idx[j] = idx[j - 1] + 1;
            }
            return true;
        }
    }
    false
}

/// Account for a verified reconstruction. Parity is regenerated from the verified data, so
/// every column that was read successfully but differs from its verified content (data proven
/// wrong by the reconstruction, or parity failing the check) gets a CKSUM count, and every such
/// column and every column that failed I/O gets a repair. A `thorough` (scrub) finish also
/// checks every copy of columns held by replacing/spare children ([`Vdev::column_check`]).
/// Returns the block's bytes.
fn finish(cols: &Cols<'_>, mut bufs: Vec<Vec<u8>>, repairs: &mut Vec<Repair>, thorough: bool) -> Vec<u8> {
    let np = cols.map.nparity;
    // Regenerate all parity from the verified data: any parity column read differently is bad.
    let mut parity = vec![Vec::new(); np];
    {
        let data: Vec<&[u8]> = bufs[np..].iter().map(Vec::as_slice).collect();
        math::generate(np, &data, &mut parity);
    }
    for (j, p) in parity.into_iter().enumerate() {
        bufs[j] = p;
    }
    for (c, col) in cols.map.cols[..cols.map.acols].iter().enumerate() {
        let child = &cols.vd.children[col.devidx];
        let wrong = match cols.state[c] {
            ColState::Good => cols.bufs[c] != bufs[c],
            ColState::IoError => true,
            // Rewritten by a scrub or resilver, never counted against the child.
            ColState::Stale => {
                if thorough {
                    repairs.push(Repair {
                        vdev_guid: child.guid(),
                        offset: col.offset,
                        data: bufs[c].clone(),
                    });
                }
                false
            }
            ColState::Missing | ColState::Untried => false,
        };
        if !wrong {
            if thorough && cols.state[c] == ColState::Good {
                child.column_check(col.offset, &bufs[c], repairs, cols.txg);
            }
            continue;
        }
        if cols.state[c] == ColState::Good {
            child.counters.note(ErrorKind::Checksum, Some(col.offset), bufs[c].len() as u64);
        }
        repairs.push(Repair { vdev_guid: child.guid(), offset: col.offset, data: bufs[c].clone() });
    }
    Cols::assemble(&bufs, np)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asize_examples() {
        // raidz1 of 3 disks, ashift 9: 1 data sector + 1 parity = 2, already a multiple of 2.
        assert_eq!(raidz_asize(512, 9, 3, 1), 1024);
        // 2 data sectors + 1 parity = 3 -> 4.
        assert_eq!(raidz_asize(1024, 9, 3, 1), 2048);
        // raidz2 of 3 disks (zdb: 0x200 psize -> 0x600 asize, 0x4000 -> 0xc000).
        assert_eq!(raidz_asize(0x200, 9, 3, 2), 0x600);
        assert_eq!(raidz_asize(0x4000, 9, 3, 2), 0xc000);
        assert_eq!(raidz_asize(0x600, 9, 3, 2), 0x1200);
        assert_eq!(raidz_asize(0, 9, 3, 2), 0);
    }

    #[test]
    fn map_small_block_has_skip_columns() {
        // raidz1, 5 wide, 2 sectors: q=0, r=2, bc=3, tot=3, rounded to 4 -> one skip column.
        let m = RaidzMap::new(0, 1024, 9, 5, 1).unwrap();
        assert_eq!(m.acols, 3);
        assert_eq!(m.cols.len(), 4);
        assert_eq!(m.nskip, 1);
        assert_eq!(m.cols[3].size, 0);
        assert_eq!(m.skip_sectors(), vec![(3, 0)]);
    }

    #[test]
    fn map_wraps_and_swaps() {
        // Sector 7 on a 4-wide raidz1: first child 3, offset (7/4)<<9; later columns wrap.
        let m = RaidzMap::new(7 << 9, 3 << 9, 9, 4, 1).unwrap();
        let devs: Vec<usize> = m.cols.iter().map(|c| c.devidx).collect();
        assert_eq!(devs, vec![3, 0, 1, 2]);
        assert_eq!(m.cols[0].offset, 512);
        assert_eq!(m.cols[1].offset, 1024);
        // Same block at an odd megabyte: parity and first data column trade places.
        let off = (1 << 20) + (7 << 9);
        let m = RaidzMap::new(off, 3 << 9, 9, 4, 1).unwrap();
        let b = off >> 9;
        assert_eq!(m.cols[0].devidx, ((b + 1) % 4) as usize);
        assert_eq!(m.cols[1].devidx, (b % 4) as usize);
    }

    #[test]
    fn map_sizes_cover_block() {
        for dcols in 2..10usize {
            for np in 1..dcols.min(4) {
                for s in 1..40u64 {
                    let m = RaidzMap::new((s * 12345) << 9, s << 9, 9, dcols, np).unwrap();
                    let data: u64 = m.cols[np..m.acols].iter().map(|c| c.size).sum();
                    assert_eq!(data, s << 9);
                    let total: u64 = m.cols.iter().map(|c| c.size).sum::<u64>() + (m.nskip << 9);
                    assert_eq!(total, raidz_asize(s << 9, 9, dcols as u64, np as u64));
                }
            }
        }
    }

    #[test]
    fn combinations() {
        let mut idx = vec![0, 1];
        let mut n = 1;
        while next_combination(&mut idx, 4) {
            n += 1;
        }
        assert_eq!(n, 6);
    }
}
