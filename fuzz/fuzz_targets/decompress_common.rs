//! Shared body of the decompressor targets. Input: a little-endian u32 whose value modulo
//! 1 MiB + 1 is the logical size (the destination length), then the compressed stream.
//!
//! Besides "never panic", each run checks the codec both ways on the stream bytes taken as
//! plain data (up to 16 KiB): if `compress` says it fits, `decompress` must give the data back.
use codec::compress::{compress, decompress, zstd_header_level, CompressKind};

const MAX_LSIZE: usize = 1 << 20;

pub fn run(kind: CompressKind, data: &[u8]) {
    let Some((head, src)) = data.split_first_chunk::<4>() else { return };
    let lsize = u32::from_le_bytes(*head) as usize % (MAX_LSIZE + 1);
    let mut dst = vec![0u8; lsize];
    let _ = decompress(kind, src, &mut dst);
    if kind == CompressKind::Zstd {
        let _ = zstd_header_level(src);
    }
    round_trip(kind, src);
}

fn round_trip(kind: CompressKind, plain: &[u8]) {
    // Bounded so that slow encoders (zstd, gzip) leave time for the decoders.
    if plain.len() > 16 << 10 {
        return;
    }
    let mut packed = vec![0u8; plain.len()];
    let level = 1 + plain.first().copied().unwrap_or(0) % 3;
    let Some(n) = compress(kind, level, plain, &mut packed) else { return };
    let mut out = vec![0u8; plain.len()];
    decompress(kind, &packed[..n], &mut out).expect("decompress of our own compress output");
    assert_eq!(out, plain, "{} round trip", kind.name());
}
