//! RAID-Z layout checked against pools OpenZFS wrote: the zpool_upgrade test pools shipped
//! with the OpenZFS test suite (a 3-wide raidz1 and a 3-wide raidz2, ashift 9). Skipped when
//! the oracle files are not installed.
//!
//! 1. Blocks whose DVA and fletcher4 checksum `zdb -bbbbbb` printed must read and verify, their
//!    asize must match zdb's, and their on-disk parity columns must equal the parity we
//!    generate from their data columns (a known-answer test of the P/Q column convention).
//! 2. Those pools hold no block at an odd megabyte, where raidz1 swaps its first two columns;
//!    so a free area of each child was filled with a deterministic pattern and
//!    `zdb -R POOL 0:OFFSET:SIZE:r` (which reads through OpenZFS's own RAID-Z map) was hashed
//!    for a set of offsets and sizes. Our reads of the same bytes must hash the same.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use codec::raidz::generate;
use rzfs_vdev::{BlockDevice, MemDevice, RaidzMap, Vdev, VdevKind, VdevSpec, VDEV_LABEL_START_SIZE};

const BLOCKFILES: &str =
    "/opt/rzfs-oracles/openzfs/usr/share/zfs/zfs-tests/tests/functional/cli_root/zpool_upgrade/blockfiles";

struct Pool {
    files: [&'static str; 3],
    nparity: u8,
    big_endian: bool,
    /// (DVA offset, asize, psize, fletcher4 checksum) from `zdb -bbbbbb`.
    blocks: &'static [(u64, u64, u64, [u64; 4])],
    /// (DVA offset, size, FNV-1a 64 of `zdb -R` output) over the filled area.
    zdb_reads: &'static [(u64, u64, u64)],
}

const RAIDZ1: Pool = Pool {
    files: ["zfs-pool-v2raidz1.dat", "zfs-pool-v2raidz2.dat", "zfs-pool-v2raidz3.dat"],
    nparity: 1,
    big_endian: true,
    blocks: &[
        (0x8fc00, 0x400, 0x200, [0x9011edaab, 0x3cdac1a0323, 0xd0e31455ee32, 0x1e5a877f836a0d]),
        (0x2245400, 0x400, 0x200, [0x9011edaab, 0x3cdac1a0323, 0xd0e31455ee32, 0x1e5a877f836a0d]),
        (0x4414400, 0x400, 0x200, [0x9011edaab, 0x3cdac1a0323, 0xd0e31455ee32, 0x1e5a877f836a0d]),
        (0x86000, 0x800, 0x400, [0x5a8f2470f0, 0x3e7dc38ec66d, 0x16d70dcdeb50f0, 0x5d94e7c135672e3]),
        (0x223b000, 0x800, 0x400, [0x5a8f2470f0, 0x3e7dc38ec66d, 0x16d70dcdeb50f0, 0x5d94e7c135672e3]),
        (0x92000, 0x6000, 0x4000, [0x5bcca8, 0x58b970b74, 0x2ae67b5c88ac, 0xdd631dd7198f4c]),
        (0x2248000, 0x6000, 0x4000, [0x5bcca8, 0x58b970b74, 0x2ae67b5c88ac, 0xdd631dd7198f4c]),
        (0x8e400, 0xc00, 0x600, [0x6dddf6e210, 0x61dac1a4b5e6, 0x2f7298c022582b, 0x1098cb2ceaf7ae45]),
        (0x8f000, 0xc00, 0x800, [0x8500dc848b, 0x936c0df910eb, 0x63bf863cb37d66, 0x32e35a2101b1da7e]),
        (0x4413800, 0xc00, 0x800, [0x8500dc848b, 0x936c0df910eb, 0x63bf863cb37d66, 0x32e35a2101b1da7e]),
    ],
    zdb_reads: &[
        (0x120000, 0x200, 0x7e0644dcac89e125),
        (0x120200, 0x400, 0xbf3131d99e506725),
        (0x120400, 0x600, 0x235339630ff16125),
        (0x1ffe00, 0x800, 0x29e902f094208d25),
        (0x150600, 0xa00, 0x76ef2e852bff7125),
        (0x160000, 0x1000, 0xc382062ba06d3f25),
        (0x170200, 0x4000, 0x374069e7ea961f25),
        (0x180000, 0x20000, 0xc8ce06e185002125),
        (0x200000, 0x200, 0x941a73efcafc6b25),
        (0x200200, 0x600, 0xad84358923d25125),
        (0x200400, 0x1000, 0x9be1c256eb638325),
        (0x210a00, 0x4000, 0x806463c7fbd99525),
        (0x220000, 0x20000, 0xefc8f9702739c525),
    ],
};

const RAIDZ2: Pool = Pool {
    files: ["zfs-pool-v3raidz21.dat", "zfs-pool-v3raidz22.dat", "zfs-pool-v3raidz23.dat"],
    nparity: 2,
    big_endian: false,
    blocks: &[
        (0x30000, 0x600, 0x200, [0x932627924, 0x3e36cdc54c5, 0xd5de37bdb646, 0x1f21dcbdff0604]),
        (0x222c000, 0x600, 0x200, [0x932627924, 0x3e36cdc54c5, 0xd5de37bdb646, 0x1f21dcbdff0604]),
        (0x440a800, 0x600, 0x200, [0x932627924, 0x3e36cdc54c5, 0xd5de37bdb646, 0x1f21dcbdff0604]),
        (0x1cc00, 0xc00, 0x400, [0x587d166291, 0x3c51908cd125, 0x15c36803854d48, 0x5800e332b21080d]),
        (0x4405c00, 0xc00, 0x400, [0x587d166291, 0x3c51908cd125, 0x15c36803854d48, 0x5800e332b21080d]),
        (0x34000, 0xc000, 0x4000, [0x3805bafb1, 0x368809c3b4c8, 0x1a8db50b73fa556, 0x9fd7191e5c67b8d4]),
        (0x2230000, 0xc000, 0x4000, [0x3805bafb1, 0x368809c3b4c8, 0x1a8db50b73fa556, 0x9fd7191e5c67b8d4]),
        (0x2d200, 0x1200, 0x600, [0x6fab380c72, 0x6214c9f7a089, 0x2f089880e34073, 0x104c538a055aa28e]),
        (0x2e800, 0x1800, 0x800, [0x8e7f6ac0e9, 0x9b6b52a1c7b0, 0x65551472bed005, 0x31a6dc8ee28bb13d]),
        (0x4409000, 0x1800, 0x800, [0x8e7f6ac0e9, 0x9b6b52a1c7b0, 0x65551472bed005, 0x31a6dc8ee28bb13d]),
    ],
    zdb_reads: &[
        (0x120000, 0x200, 0xd0ffc1c24f5fcd25),
        (0x120200, 0x400, 0x48041ee5971a7325),
        (0x120400, 0x600, 0x2abb820920659d25),
        (0x1ffe00, 0x800, 0xcbf48dcb050ce925),
        (0x150600, 0xa00, 0xd5d44270a5d9df25),
        (0x160000, 0x1000, 0xaae0252cbb61a525),
        (0x170200, 0x4000, 0x42a457df6aa18d25),
        (0x180000, 0x20000, 0x438b1613930f9325),
        (0x200000, 0x200, 0x5a603af963c4b525),
        (0x200200, 0x600, 0x5e8e83705e026f25),
        (0x200400, 0x1000, 0x462d4ec9c56a5525),
        (0x210a00, 0x4000, 0x39dd0b3fc5106125),
        (0x220000, 0x20000, 0x31713d310a399125),
    ],
};

/// The free child-offset range that was filled before running `zdb -R`.
const FILL: std::ops::Range<u64> = 0x60000..0xE0000;

fn fletcher4(data: &[u8], big_endian: bool) -> [u64; 4] {
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    for w in data.chunks_exact(4) {
        let w = [w[0], w[1], w[2], w[3]];
        let v = u64::from(if big_endian { u32::from_be_bytes(w) } else { u32::from_le_bytes(w) });
        a = a.wrapping_add(v);
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    [a, b, c, d]
}

fn fnv1a64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// The fill pattern: per (child, sector) a mixed 32-bit value, plus the byte's sector index.
fn fill(child: usize, start: u64, end: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity((end - start) as usize);
    for s in (start..end).step_by(512) {
        let mut h = ((child as u64 + 1) * 0x9E37_79B1 + (s >> 9) * 0x85EB_CA77) & 0xffff_ffff;
        h ^= h >> 15;
        out.extend((0..512u64).map(|k| (h + k) as u8));
    }
    out
}

fn load(pool: &Pool) -> Option<Vec<Arc<MemDevice>>> {
    if !Path::new(BLOCKFILES).exists() {
        eprintln!("oracle block files not installed; skipping");
        return None;
    }
    let devs = pool
        .files
        .iter()
        .map(|f| {
            let out = Command::new("bunzip2")
                .arg("-c")
                .arg(Path::new(BLOCKFILES).join(format!("{f}.bz2")))
                .output()
                .expect("bunzip2 runs");
            assert!(out.status.success(), "bunzip2 {f}");
            Arc::new(MemDevice::from_vec(*f, out.stdout))
        })
        .collect();
    Some(devs)
}

fn vdev(pool: &Pool, devs: &[Arc<MemDevice>]) -> Vdev {
    let children = devs
        .iter()
        .enumerate()
        .map(|(i, d)| VdevSpec {
            kind: VdevKind::File,
            id: i as u64,
            guid: i as u64 + 1,
            ashift: 0,
            children: vec![],
            device: Some(d.clone() as Arc<dyn BlockDevice>),
        })
        .collect();
    let spec = VdevSpec {
        kind: VdevKind::Raidz { nparity: pool.nparity },
        id: 0,
        guid: 100,
        ashift: 9,
        children,
        device: None,
    };
    Vdev::new(spec).unwrap()
}

fn check_pool(pool: &Pool) {
    let Some(devs) = load(pool) else { return };
    let vd = vdev(pool, &devs);
    let np = pool.nparity as usize;
    for &(off, asize, psize, ck) in pool.blocks {
        let out = vd
            .read(off, psize, &|b| fletcher4(b, pool.big_endian) == ck)
            .unwrap_or_else(|e| panic!("block {off:#x}: {e}"));
        assert!(out.repairs.is_empty());
        assert_eq!(vd.asize(psize), asize, "asize of {off:#x}");
        // Parity on disk equals parity generated from the data columns.
        let map = RaidzMap::new(off, psize, 9, devs.len(), np).unwrap();
        let cols: Vec<Vec<u8>> = map.cols[..map.acols]
            .iter()
            .map(|c| {
                let mut b = vec![0u8; c.size as usize];
                devs[c.devidx].read_at(&mut b, c.offset + VDEV_LABEL_START_SIZE).unwrap();
                b
            })
            .collect();
        let data: Vec<&[u8]> = cols[np..].iter().map(Vec::as_slice).collect();
        let mut parity = vec![Vec::new(); np];
        generate(np, &data, &mut parity);
        assert_eq!(&parity[..], &cols[..np], "parity of block {off:#x}");
    }
    assert!(vd.stats().iter().all(|s| s.read_errors + s.cksum_errors == 0));

    for (i, d) in devs.iter().enumerate() {
        d.write_at(&fill(i, FILL.start, FILL.end), FILL.start + VDEV_LABEL_START_SIZE).unwrap();
    }
    for &(off, size, hash) in pool.zdb_reads {
        let out = vd.read(off, size, &|_| true).unwrap();
        assert_eq!(fnv1a64(&out.data), hash, "zdb -R 0:{off:x}:{size:x}");
    }
}

#[test]
fn raidz1_matches_openzfs() {
    check_pool(&RAIDZ1);
}

#[test]
fn raidz2_matches_openzfs() {
    check_pool(&RAIDZ2);
}
