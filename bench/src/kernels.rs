//! Codec kernels: checksums, compression and RAID-Z parity, next to memcpy, in MB/s.
//!
//! Method. Every kernel works block by block on 128 KiB blocks (the default recordsize, so
//! the size the read path hands to these kernels), cycling over a per-thread working set
//! (32 MiB in --full: beyond L2, about one L3) so the figures are not pure L1/L2 numbers.
//! A measurement runs the kernel until a time budget is spent and divides the bytes handled
//! by the elapsed time; it is repeated and the best repetition is kept (the machine is shared,
//! best-of-N filters out interference rather than averaging it in). "All threads" starts one
//! independent worker per CPU behind a barrier and divides the total bytes by the slowest
//! worker's time. Throughput is counted on the *logical* bytes of a block: the input for
//! checksums, memcpy and compression, the decompressed output for decompression, and the
//! 128 KiB of data of a RAID-Z block for parity generation and reconstruction (the same
//! convention as OpenZFS raidz_test, whose per-disk figure times its data-column count is the
//! data rate).

use codec::checksum::{compute, ChecksumCtx, ChecksumKind};
use codec::compress::{compress, decompress, CompressKind};
use codec::raidz;
use serde_json::{json, Value};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Bytes per block handed to a kernel.
pub const BLOCK: usize = 128 << 10;
/// RAID-Z sector size used to split a block into columns (ashift 12, as raidz_test -B).
const SECTOR: usize = 4096;

/// How long and how often to measure.
#[derive(Clone, Copy)]
pub struct Budget {
    pub per_rep: Duration,
    pub reps: usize,
    pub working_set: usize,
}

impl Budget {
    pub fn smoke() -> Budget {
        Budget { per_rep: Duration::from_millis(8), reps: 1, working_set: 1 << 20 }
    }
    pub fn full() -> Budget {
        Budget { per_rep: Duration::from_millis(150), reps: 3, working_set: 32 << 20 }
    }
    fn blocks(&self) -> usize {
        (self.working_set / BLOCK).max(2)
    }
}

/// A deterministic xorshift64* stream: incompressible bytes without a rand dependency.
pub struct Prng(u64);

impl Prng {
    pub fn new(seed: u64) -> Prng {
        Prng(seed | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

/// Random bytes (incompressible).
pub fn random_block(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Prng::new(seed).fill(&mut v);
    v
}

/// Text-like bytes: words from a small vocabulary with numbers, the kind of data lz4 and
/// zstd compress 2-4x.
pub fn text_block(seed: u64, len: usize) -> Vec<u8> {
    const WORDS: [&str; 32] = [
        "the",
        "pool",
        "dataset",
        "block",
        "pointer",
        "checksum",
        "of",
        "and",
        "txg",
        "to",
        "dnode",
        "write",
        "read",
        "a",
        "in",
        "object",
        "is",
        "for",
        "metaslab",
        "vdev",
        "with",
        "space",
        "map",
        "ZAP",
        "entry",
        "snapshot",
        "clone",
        "raidz",
        "mirror",
        "label",
        "uberblock",
        "error",
    ];
    let mut r = Prng::new(seed);
    let mut v = Vec::with_capacity(len + 32);
    while v.len() < len {
        let x = r.next_u64();
        v.extend_from_slice(WORDS[(x & 31) as usize].as_bytes());
        if x >> 60 == 0 {
            v.extend_from_slice(format!(" {}", (x >> 8) % 100_000).as_bytes());
        }
        v.push(if x >> 56 == 7 { b'\n' } else { b' ' });
    }
    v.truncate(len);
    v
}

/// CPU time this thread has run, from /proc/thread-self/schedstat (ns precision), seconds.
fn thread_cpu_secs() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns / 1e9)
}

/// A throughput in MB/s two ways: per CPU-second the workers actually ran (robust to other
/// load on a shared machine), and per wall-clock second (what a user sees, load included).
#[derive(Clone, Copy, Default)]
pub struct Rate {
    pub cpu: f64,
    pub wall: f64,
}

/// One worker's timed window: bytes, wall seconds, CPU seconds (wall if unavailable).
fn window<S>(b: Budget, st: &mut S, op: fn(&mut S, usize) -> usize) -> (u64, f64, f64) {
    let c0 = thread_cpu_secs();
    let t0 = Instant::now();
    let (mut bytes, mut i) = (0u64, 0usize);
    while t0.elapsed() < b.per_rep {
        // Several units between clock reads keeps timing overhead out.
        for _ in 0..4 {
            bytes += op(st, i) as u64;
            i = i.wrapping_add(1);
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = match (c0, thread_cpu_secs()) {
        (Some(a), Some(z)) if z > a => z - a,
        _ => wall,
    };
    (bytes, wall, cpu)
}

/// Runs one worker per thread over its own state until the budget is spent; best-of-reps
/// aggregate MB/s. `op` handles one unit of work and returns the bytes it counts. The CPU
/// figure sums each worker's bytes per CPU-second; the wall figure divides all bytes by the
/// slowest worker's wall time.
fn measure<S: Send>(
    b: Budget,
    threads: usize,
    mk: impl Fn(usize) -> S,
    op: fn(&mut S, usize) -> usize,
) -> Rate {
    let mut states: Vec<S> = (0..threads).map(&mk).collect();
    let mut best = Rate::default();
    for _ in 0..b.reps {
        let barrier = Barrier::new(threads);
        let results: Vec<(u64, f64, f64)> = std::thread::scope(|sc| {
            let hs: Vec<_> = states
                .iter_mut()
                .map(|st| {
                    let barrier = &barrier;
                    sc.spawn(move || {
                        barrier.wait();
                        window(b, st, op)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or((0, 1.0, 1.0))).collect()
        });
        let bytes: u64 = results.iter().map(|r| r.0).sum();
        let wall = results.iter().map(|r| r.1).fold(0.0, f64::max);
        let cpu: f64 = results.iter().map(|r| r.0 as f64 / r.2).sum();
        best.cpu = best.cpu.max(cpu / 1e6);
        best.wall = best.wall.max(bytes as f64 / wall / 1e6);
    }
    best
}

/// One unit of work on a worker's blocks; returns the bytes it counts.
type Op = fn(&mut Blocks, usize) -> usize;

/// Source blocks and a scratch buffer for one worker.
struct Blocks {
    src: Vec<Vec<u8>>,
    dst: Vec<u8>,
    aux: Vec<Vec<u8>>,
}

fn blocks(b: Budget, seed: u64, text: bool) -> Blocks {
    let src = (0..b.blocks())
        .map(|i| {
            let s = seed.wrapping_mul(1000).wrapping_add(i as u64);
            if text {
                text_block(s, BLOCK)
            } else {
                random_block(s, BLOCK)
            }
        })
        .collect();
    Blocks { src, dst: vec![0u8; BLOCK * 2], aux: Vec::new() }
}

fn op_memcpy(s: &mut Blocks, i: usize) -> usize {
    let src = &s.src[i % s.src.len()];
    s.dst[..BLOCK].copy_from_slice(src);
    BLOCK
}

fn op_cksum(s: &mut Blocks, i: usize, k: ChecksumKind) -> usize {
    let src = &s.src[i % s.src.len()];
    let c = compute(k, src, false, &ChecksumCtx::default());
    std::hint::black_box(c);
    BLOCK
}

fn op_fletcher4(s: &mut Blocks, i: usize) -> usize {
    op_cksum(s, i, ChecksumKind::Fletcher4)
}
fn op_sha256(s: &mut Blocks, i: usize) -> usize {
    op_cksum(s, i, ChecksumKind::Sha256)
}
fn op_blake3(s: &mut Blocks, i: usize) -> usize {
    op_cksum(s, i, ChecksumKind::Blake3)
}

/// The most compressed output OpenZFS accepts: the block must shrink by 1/8 (see OpenZFS
/// module/zfs/zio_compress.c, zio_compress_data), else it is stored uncompressed.
const ZFS_DLEN: usize = BLOCK - (BLOCK >> 3);

fn op_compress(s: &mut Blocks, i: usize, k: CompressKind) -> usize {
    let src = &s.src[i % s.src.len()];
    let r = compress(k, 3, src, &mut s.dst[..ZFS_DLEN]);
    std::hint::black_box(r);
    BLOCK
}
fn op_lz4c(s: &mut Blocks, i: usize) -> usize {
    op_compress(s, i, CompressKind::Lz4)
}
fn op_zstdc(s: &mut Blocks, i: usize) -> usize {
    op_compress(s, i, CompressKind::Zstd)
}

fn op_decompress(s: &mut Blocks, i: usize, k: CompressKind) -> usize {
    let c = &s.aux[i % s.aux.len()];
    let ok = decompress(k, c, &mut s.dst[..BLOCK]).is_ok();
    std::hint::black_box(ok);
    BLOCK
}
fn op_lz4d(s: &mut Blocks, i: usize) -> usize {
    op_decompress(s, i, CompressKind::Lz4)
}
fn op_zstdd(s: &mut Blocks, i: usize) -> usize {
    op_decompress(s, i, CompressKind::Zstd)
}

/// Compresses every source block with room to expand (so incompressible data still yields
/// a stream to decompress) and returns the ratio lsize/psize achieved.
fn precompress(s: &mut Blocks, k: CompressKind) -> Result<f64, String> {
    let (mut inb, mut outb) = (0usize, 0usize);
    s.aux = Vec::with_capacity(s.src.len());
    for src in &s.src {
        let mut out = vec![0u8; BLOCK * 2];
        let n = compress(k, 3, src, &mut out).ok_or_else(|| format!("{k:?} did not compress"))?;
        out.truncate(n);
        let mut back = vec![0u8; BLOCK];
        decompress(k, &out, &mut back).map_err(|e| format!("{k:?} round trip: {e}"))?;
        if &back != src {
            return Err(format!("{k:?} round trip changed the data"));
        }
        inb += src.len();
        outb += n;
        s.aux.push(out);
    }
    Ok(inb as f64 / outb.max(1) as f64)
}

fn row(name: &str, input: &str, one: Rate, all: Rate, extra: Value) -> Value {
    json!({"kernel": name, "input": input, "mbps_1t": one.cpu, "mbps_all": all.cpu,
           "mbps_1t_wall": one.wall, "mbps_all_wall": all.wall, "extra": extra})
}

/// memcpy, checksums and compression rows.
pub fn scalar_kernels(b: Budget, threads: usize, log: &mut dyn FnMut(&str)) -> Result<Vec<Value>, String> {
    let mut rows = Vec::new();
    let both = |op: Op, text: bool| {
        let one = measure(b, 1, |t| blocks(b, t as u64 + 1, text), op);
        let all = measure(b, threads, |t| blocks(b, t as u64 + 1, text), op);
        (one, all)
    };
    let (o, a) = both(op_memcpy, false);
    rows.push(row("memcpy", "random", o, a, json!({})));
    log("memcpy");
    let cks: [(&str, Op); 3] = [("fletcher4", op_fletcher4), ("sha256", op_sha256), ("blake3", op_blake3)];
    for (name, op) in cks {
        let (o, a) = both(op, false);
        rows.push(row(name, "random", o, a, json!({})));
        log(name);
    }
    for (text, input) in [(true, "compressible"), (false, "incompressible")] {
        let comps: [(&str, CompressKind, Op, Op); 2] = [
            ("lz4", CompressKind::Lz4, op_lz4c, op_lz4d),
            ("zstd-3", CompressKind::Zstd, op_zstdc, op_zstdd),
        ];
        for (name, kind, c, d) in comps {
            let mut probe = blocks(b, 1, text);
            let ratio = precompress(&mut probe, kind)?;
            let (o, a) = both(c, text);
            rows.push(row(&format!("{name} compress"), input, o, a, json!({"ratio": ratio})));
            let mk = |t: usize| {
                let mut s = blocks(b, t as u64 + 1, text);
                // Already verified on `probe`; failures here would be caught there.
                let _ = precompress(&mut s, kind);
                s
            };
            let o = measure(b, 1, mk, d);
            let a = measure(b, threads, mk, d);
            rows.push(row(&format!("{name} decompress"), input, o, a, json!({"ratio": ratio})));
            log(&format!("{name} {input}"));
        }
    }
    Ok(rows)
}

/// One RAID-Z block split as OpenZFS maps a 128 KiB write: 32 sectors of 4 KiB dealt over
/// `ndata` columns, the first `32 % ndata` columns one sector longer.
pub fn data_columns(seed: u64, ndata: usize) -> Vec<Vec<u8>> {
    let sectors = BLOCK / SECTOR;
    (0..ndata)
        .map(|c| {
            let n = sectors / ndata + usize::from(c < sectors % ndata);
            random_block(seed ^ ((c as u64 + 1) << 32), n * SECTOR)
        })
        .collect()
}

/// Per-worker RAID-Z maps: parity columns first, then data (codec order).
struct Maps {
    nparity: usize,
    nbad: usize,
    cols: Vec<Vec<Vec<u8>>>,
}

fn maps(b: Budget, seed: u64, nparity: usize, width: usize, nbad: usize) -> Maps {
    let n = (b.working_set / BLOCK).max(2);
    let cols = (0..n)
        .map(|i| {
            let data = data_columns(seed * 7919 + i as u64, width - nparity);
            let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
            let mut parity = vec![Vec::new(); nparity];
            raidz::generate(nparity, &refs, &mut parity);
            parity.into_iter().chain(data).collect()
        })
        .collect();
    Maps { nparity, nbad, cols }
}

fn op_gen(m: &mut Maps, i: usize) -> usize {
    let k = i % m.cols.len();
    let (parity, data) = m.cols[k].split_at_mut(m.nparity);
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    raidz::generate(m.nparity, &refs, parity);
    BLOCK
}

fn op_rec(m: &mut Maps, i: usize) -> usize {
    let k = i % m.cols.len();
    let bad: Vec<usize> = (m.nparity..m.nparity + m.nbad).collect();
    let r = raidz::reconstruct(m.nparity, &mut m.cols[k], &bad);
    std::hint::black_box(r.is_ok());
    BLOCK
}

/// Checks once that reconstruction of `nbad` data columns gives back the data.
fn verify_rec(nparity: usize, width: usize, nbad: usize) -> Result<(), String> {
    let b = Budget { per_rep: Duration::ZERO, reps: 1, working_set: BLOCK };
    let mut m = maps(b, 99, nparity, width, nbad);
    let want = m.cols[0].clone();
    for c in nparity..nparity + nbad {
        m.cols[0][c].fill(0xA5);
    }
    let bad: Vec<usize> = (nparity..nparity + nbad).collect();
    raidz::reconstruct(nparity, &mut m.cols[0], &bad).map_err(|e| e.to_string())?;
    if m.cols[0] != want {
        return Err(format!("raidz{nparity} width {width}: reconstruction of {nbad} columns is wrong"));
    }
    Ok(())
}

/// Parity generation (nbad 0) and reconstruction of 1..=parity data columns, widths 4..=12.
pub fn raidz_kernels(b: Budget, threads: usize, log: &mut dyn FnMut(&str)) -> Result<Vec<Value>, String> {
    let mut rows = Vec::new();
    for nparity in 1..=3usize {
        for width in 4..=12usize {
            // k data columns can be lost only if the map has k of them (raidz3 at width 4
            // holds one data column).
            for nbad in 0..=nparity.min(width - nparity) {
                if nbad > 0 {
                    verify_rec(nparity, width, nbad)?;
                }
                let op = if nbad == 0 { op_gen } else { op_rec };
                let mk = |t: usize| maps(b, t as u64 + 1, nparity, width, nbad);
                let one = measure(b, 1, mk, op);
                let all = measure(b, threads, mk, op);
                rows.push(json!({
                    "op": if nbad == 0 { "generate" } else { "reconstruct" },
                    "parity": nparity, "width": width, "ndata": width - nparity, "nbad": nbad,
                    "mbps_1t": one.cpu, "mbps_all": all.cpu,
                    "mbps_1t_wall": one.wall, "mbps_all_wall": all.wall,
                }));
            }
        }
        log(&format!("raidz{nparity}"));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_cover_one_block() {
        for nd in 1..=11 {
            let c = data_columns(1, nd);
            assert_eq!(c.iter().map(Vec::len).sum::<usize>(), BLOCK);
            assert!(c.windows(2).all(|w| w[0].len() >= w[1].len()));
        }
    }

    #[test]
    fn reconstruction_is_checked() {
        for p in 1..=3 {
            for bad in 1..=p {
                verify_rec(p, 4 + p, bad).unwrap();
            }
        }
    }

    #[test]
    fn text_compresses_random_does_not() {
        let t = text_block(3, BLOCK);
        let r = random_block(3, BLOCK);
        let mut out = vec![0u8; ZFS_DLEN];
        assert!(compress(CompressKind::Lz4, 0, &t, &mut out).is_some());
        assert!(compress(CompressKind::Lz4, 0, &r, &mut out).is_none());
    }
}
