//! Round trips of every compression function over the block sizes ZFS uses, plus the
//! "OpenZFS can read it" properties of our encoders that are checkable without OpenZFS.

use rzfs_codec::compress::{compress, decompress, zstd_header_level, CompressKind};

/// All kinds that actually compress, with the zstd levels worth covering.
fn kinds() -> Vec<(CompressKind, u8)> {
    let mut v = vec![(CompressKind::Lzjb, 0), (CompressKind::Zle, 0), (CompressKind::Lz4, 0)];
    v.extend((1..=9).map(|n| (CompressKind::Gzip(n), 0)));
    v.extend([1u8, 3, 9, 19, 103, 112, 123].map(|l| (CompressKind::Zstd, l)));
    v
}

/// Deterministic pseudo-random bytes (xorshift), incompressible in practice.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Text-like data with repeats, long zero stretches and short non-zero islands.
fn compressible(len: usize) -> Vec<u8> {
    let words: [&[u8]; 6] = [b"dnode ", b"blkptr ", b"txg ", b"objset ", b"\0\0\0\0", b"zap "];
    let mut out = Vec::with_capacity(len);
    let mut i = 0usize;
    while out.len() < len {
        out.extend_from_slice(words[(i * 7 + i / 3) % words.len()]);
        // Every 50th word is followed by a 300-byte hole.
        if i % 50 == 49 {
            out.resize(out.len() + 300, 0);
        }
        i += 1;
    }
    out.truncate(len);
    out
}

/// zstd-fast-1000 barely looks for matches; it may leave even zeros unshrunk.
fn very_fast(kind: CompressKind, level: u8) -> bool {
    kind == CompressKind::Zstd && level >= 122
}

const SIZES: [usize; 9] = [512, 1024, 1536, 4096, 8192, 16384, 32768, 65536, 131072];

fn round_trip(kind: CompressKind, level: u8, data: &[u8], cap: usize) -> Option<usize> {
    let mut c = vec![0u8; cap];
    let n = compress(kind, level, data, &mut c)?;
    assert!(n <= cap, "{kind:?} wrote {n} > capacity {cap}");
    // Decoders see psize: the stream plus zero padding to a 512-byte sector.
    let psize = n.div_ceil(512).max(1) * 512;
    let mut padded = c[..n].to_vec();
    padded.resize(psize, 0);
    let mut out = vec![0xA5u8; data.len()];
    decompress(kind, &padded, &mut out).unwrap_or_else(|e| panic!("{kind:?}/{level}: {e}"));
    assert!(out == data, "{kind:?}/{level} round trip differs");
    if kind == CompressKind::Zstd {
        let want = if level == 0 { 3 } else { level };
        assert_eq!(zstd_header_level(&padded), Some(want));
    }
    Some(n)
}

#[test]
fn compressible_data_shrinks_and_round_trips() {
    for &size in &SIZES {
        let data = compressible(size);
        for (kind, level) in kinds() {
            // OpenZFS asks for at least 12.5% savings; use that as capacity.
            let cap = size - size / 8;
            let n = round_trip(kind, level, &data, cap);
            if kind != CompressKind::Zle && !very_fast(kind, level) {
                assert!(n.is_some(), "{kind:?}/{level} failed to compress {size}");
            }
        }
    }
}

#[test]
fn zero_data_round_trips() {
    for &size in &SIZES {
        let data = vec![0u8; size];
        for (kind, level) in kinds() {
            let n = round_trip(kind, level, &data, size / 2);
            assert!(n.is_some() || very_fast(kind, level), "{kind:?}/{level} failed on zeros of {size}");
        }
    }
}

#[test]
fn incompressible_data_is_refused_or_round_trips() {
    for &size in &SIZES {
        let data = noise(size, size as u64);
        for (kind, level) in kinds() {
            // At a capacity below lsize nothing fits.
            assert_eq!(round_trip(kind, level, &data, size - size / 8), None, "{kind:?}");
            // With generous room, the expanded stream must still decode.
            round_trip(kind, level, &data, size * 2);
        }
    }
}

#[test]
fn capacity_is_respected_at_every_boundary() {
    let data = compressible(4096);
    for (kind, level) in kinds() {
        let mut full = vec![0u8; 8192];
        let n = compress(kind, level, &data, &mut full).unwrap();
        // Exactly n bytes must be enough for all but lzjb/zle (which reserve room
        // for a whole group/record, as OpenZFS does); fewer must fail.
        for cap in [n.saturating_sub(1), n.saturating_sub(20), 0, 1, 4, 8] {
            if cap < n {
                let mut c = vec![0u8; cap];
                if let Some(m) = compress(kind, level, &data, &mut c) {
                    panic!("{kind:?} claimed {m} bytes in capacity {cap} < {n}");
                }
            }
        }
        let mut c = vec![0u8; n + 64];
        assert_eq!(compress(kind, level, &data, &mut c), Some(n), "{kind:?}");
    }
}

#[test]
fn odd_sizes_round_trip() {
    for size in [0usize, 1, 2, 3, 13, 65, 66, 67, 511, 1000] {
        let data = compressible(size);
        for (kind, level) in kinds() {
            round_trip(kind, level, &data, size * 2 + 64);
        }
    }
}

/// Walk an LZ4 block and check the reference decoder's end-of-block rules, which
/// `LZ4_decompress_safe` (OpenZFS's decoder) enforces: every match starts at least
/// 12 bytes before the end of the output and ends at least 5 bytes before it; the
/// block ends with a literal-only sequence that consumes the input exactly.
fn check_lz4_reference_rules(block: &[u8], lsize: usize) {
    let mut ip = 0usize;
    let mut op = 0usize;
    let read_len = |ip: &mut usize, base: usize| {
        let mut len = base;
        if base == 15 {
            loop {
                let b = block[*ip];
                *ip += 1;
                len += usize::from(b);
                if b != 255 {
                    break;
                }
            }
        }
        len
    };
    loop {
        let token = block[ip];
        ip += 1;
        let lit = read_len(&mut ip, usize::from(token >> 4));
        ip += lit;
        op += lit;
        if ip == block.len() {
            assert_eq!(op, lsize);
            return;
        }
        assert!(op + 12 <= lsize, "match starts within the last 12 bytes");
        let offset = usize::from(block[ip]) | usize::from(block[ip + 1]) << 8;
        ip += 2;
        assert!(offset != 0 && offset <= op);
        let mlen = read_len(&mut ip, usize::from(token & 15)) + 4;
        op += mlen;
        assert!(op + 5 <= lsize, "match ends within the last 5 bytes");
    }
}

#[test]
fn lz4_output_obeys_reference_decoder_rules() {
    for &size in &SIZES {
        for data in [compressible(size), vec![0u8; size], noise(size, 7)] {
            let mut c = vec![0u8; size * 2];
            let n = compress(CompressKind::Lz4, 0, &data, &mut c).unwrap();
            let bufsiz = u32::from_be_bytes(c[..4].try_into().unwrap()) as usize;
            assert_eq!(bufsiz + 4, n);
            check_lz4_reference_rules(&c[4..n], size);
        }
    }
}

#[test]
fn zstd_levels_are_recorded_and_invalid_levels_refused() {
    let data = compressible(8192);
    let mut c = vec![0u8; 8192];
    for (level, want) in [(0u8, 3u8), (255, 3), (5, 5), (19, 19), (103, 103), (123, 123)] {
        let n = compress(CompressKind::Zstd, level, &data, &mut c).unwrap();
        assert_eq!(zstd_header_level(&c[..n]), Some(want));
        // Current OpenZFS layout: level in byte 4, version big-endian in bytes 5..8,
        // c_len big-endian in bytes 0..4.
        assert_eq!(c[4], want);
        assert_eq!(u32::from_be_bytes(c[..4].try_into().unwrap()) as usize + 8, n);
    }
    for bad in [20u8, 101, 102, 124, 250] {
        assert_eq!(compress(CompressKind::Zstd, bad, &data, &mut c), None);
    }
}
