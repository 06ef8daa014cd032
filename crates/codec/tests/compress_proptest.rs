//! Property tests: decoders never panic (or hang) on arbitrary input and arbitrary
//! lsize, and every encoder's output decodes back to its input.

use proptest::prelude::*;
use rzfs_codec::compress::{compress, decompress, kind_from_zio, zstd_header_level, CompressKind};

fn any_kind() -> impl Strategy<Value = CompressKind> {
    (2u8..=16).prop_map(|v| kind_from_zio(v).unwrap())
}

/// Kinds that compress, with a zstd level (ignored by the others).
fn coding_kind() -> impl Strategy<Value = (CompressKind, u8)> {
    prop_oneof![
        Just((CompressKind::Lzjb, 0)),
        Just((CompressKind::Zle, 0)),
        Just((CompressKind::Lz4, 0)),
        (1u8..=9).prop_map(|n| (CompressKind::Gzip(n), 0)),
        prop_oneof![1u8..=19, 103u8..=123].prop_map(|l| (CompressKind::Zstd, l)),
    ]
}

/// Data with structure: runs of zeros, repeats of earlier bytes and noise.
fn block_data(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec((0u8..3, any::<u8>(), 1usize..200), 0..64).prop_map(move |ops| {
        let mut v: Vec<u8> = Vec::new();
        for (op, b, n) in ops {
            match op {
                0 => v.resize(v.len() + n, 0),
                1 => v.resize(v.len() + n % 7 + 1, b),
                _ => {
                    let start = v.len().saturating_sub(usize::from(b) + 1);
                    let copy: Vec<u8> = v[start..].iter().copied().cycle().take(n).collect();
                    v.extend(copy);
                }
            }
        }
        v.truncate(max);
        v
    })
}

/// Prefix a stream with a plausible header for `kind` so decoders get past it.
fn with_header(kind: CompressKind, body: &[u8], hdr_len: u32, level: u8) -> Vec<u8> {
    let mut v = Vec::new();
    match kind {
        CompressKind::Lz4 => v.extend_from_slice(&hdr_len.to_be_bytes()),
        CompressKind::Zstd => {
            v.extend_from_slice(&hdr_len.to_be_bytes());
            v.extend_from_slice(&[level, 0, 0x28, 0xA5]);
        }
        _ => {}
    }
    v.extend_from_slice(body);
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn decompress_never_panics(
        kind in any_kind(),
        src in prop::collection::vec(any::<u8>(), 0..2048),
        lsize in 0usize..=262144,
    ) {
        let mut dst = vec![0u8; lsize];
        let _ = decompress(kind, &src, &mut dst);
        let _ = zstd_header_level(&src);
    }

    #[test]
    fn decompress_never_panics_past_headers(
        kind in any_kind(),
        body in prop::collection::vec(any::<u8>(), 0..2048),
        slack in 0u32..16,
        level in prop_oneof![Just(3u8), Just(112u8), any::<u8>()],
        lsize in 0usize..=262144,
    ) {
        let hdr_len = (body.len() as u32).saturating_sub(slack);
        let src = with_header(kind, &body, hdr_len, level);
        let mut dst = vec![0u8; lsize];
        let _ = decompress(kind, &src, &mut dst);
    }

    #[test]
    fn mutated_streams_never_panic(
        (kind, level) in coding_kind(),
        data in block_data(16384),
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        lsize_delta in -4i64..4,
    ) {
        let mut c = vec![0u8; data.len() * 2 + 64];
        if let Some(n) = compress(kind, level, &data, &mut c) {
            let mut s = c[..n].to_vec();
            for (at, x) in flips {
                if !s.is_empty() {
                    let i = at % s.len();
                    s[i] ^= x;
                }
            }
            let lsize = (data.len() as i64 + lsize_delta).max(0) as usize;
            let mut dst = vec![0u8; lsize];
            let _ = decompress(kind, &s, &mut dst);
        }
    }

    #[test]
    fn round_trip(
        (kind, level) in coding_kind(),
        data in block_data(32768),
        pad in 0usize..600,
    ) {
        let mut c = vec![0u8; data.len() + data.len() / 2 + 128];
        let n = compress(kind, level, &data, &mut c);
        prop_assert!(n.is_some(), "{:?} refused {} bytes with room", kind, data.len());
        let n = n.unwrap();
        let mut s = c[..n].to_vec();
        s.resize(n + pad, 0);
        let mut out = vec![0xEEu8; data.len()];
        decompress(kind, &s, &mut out).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(out, data);
    }

    #[test]
    fn capacity_never_exceeded(
        (kind, level) in coding_kind(),
        data in block_data(8192),
        cap in 0usize..9000,
    ) {
        let mut c = vec![0u8; cap];
        if let Some(n) = compress(kind, level, &data, &mut c) {
            prop_assert!(n <= cap);
            let mut out = vec![0u8; data.len()];
            decompress(kind, &c[..n], &mut out).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(out, data);
        }
    }
}
