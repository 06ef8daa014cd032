//! Known-answer streams built by hand from the on-disk formats (module/zfs/lzjb.c,
//! lz4_zfs.c, gzip.c, zle.c, module/zstd/zfs_zstd.c), decoded through the public API
//! exactly as a block reader would: psize bytes in, lsize bytes out.

use rzfs_codec::compress::{
    compress, decompress, kind_from_zio, zstd::ZstdHeader, zstd_header_level, CompressKind,
};
use rzfs_codec::CodecError;

fn decode(kind: CompressKind, src: &[u8], lsize: usize) -> Result<Vec<u8>, CodecError> {
    let mut out = vec![0x5Au8; lsize];
    decompress(kind, src, &mut out).map(|()| out)
}

#[test]
fn lzjb_golden() {
    // Group 1: copymap 0b0010_0000 -> items 0..4 literals "ZFS! ", item 5 a match
    // (length 3 + 5 = 8, offset 5) giving "ZFS! ZFS", items 6,7 literals "ab".
    // Group 2: copymap 0b0000_0001 -> a match of length 3+63 = 66 at offset 1,
    // truncated by lsize. Then sector padding.
    let mut src = vec![0x20, b'Z', b'F', b'S', b'!', b' ', 5 << 2, 5, b'a', b'b'];
    src.extend_from_slice(&[0x01, 0xFC, 0x01]);
    src.resize(512, 0);
    let out = decode(CompressKind::Lzjb, &src, 25).unwrap();
    assert_eq!(&out, b"ZFS! ZFS! ZFSabbbbbbbbbbb");
    // lzjb has no length: the same stream read for a shorter lsize just stops.
    assert_eq!(decode(CompressKind::Lzjb, &src, 3).unwrap(), b"ZFS");
}

#[test]
fn lzjb_encoder_matches_openzfs_greedy_output() {
    // "abcabc..." of 80 bytes: positions 0..2 hit empty hash slots that propose
    // offsets 0,1,2 (no match), position 3 proposes offset 3 and matches 66 bytes,
    // the remaining 11 bytes are within MATCH_MAX of the end and go out literal.
    let data: Vec<u8> = b"abc".iter().copied().cycle().take(80).collect();
    let mut c = vec![0u8; 80];
    let n = compress(CompressKind::Lzjb, 0, &data, &mut c).unwrap();
    // Group 1 = 3 literals, the match, 4 literals; group 2 = 7 literals.
    let mut expect = vec![0x08, b'a', b'b', b'c', 63 << 2, 3, b'a', b'b', b'c', b'a'];
    expect.push(0x00);
    expect.extend_from_slice(b"bcabcab");
    assert_eq!(&c[..n], &expect[..]);
    assert_eq!(decode(CompressKind::Lzjb, &c[..n], 80).unwrap(), data);
}

#[test]
fn lz4_golden_with_be_length() {
    // Block: token 0x1F (1 literal, match length 15+4 + ext), literal 0x00, offset 1,
    // extension 0x00 -> 19 zeros; then token 0x50 + "tail!" (last 5 literals).
    let block = [0x1F, 0x00, 0x01, 0x00, 0x00, 0x50, b't', b'a', b'i', b'l', b'!'];
    let mut src = (block.len() as u32).to_be_bytes().to_vec();
    src.extend_from_slice(&block);
    src.resize(512, 0);
    let mut want = vec![0u8; 20];
    want.extend_from_slice(b"tail!");
    assert_eq!(decode(CompressKind::Lz4, &src, 25).unwrap(), want);
    // Little-endian length (a common mistake) must not be accepted.
    let mut le = src.clone();
    le[..4].copy_from_slice(&(block.len() as u32).to_le_bytes());
    assert!(decode(CompressKind::Lz4, &le, 25).is_err());
    // Length past psize is refused even when the payload would decode.
    let mut long = src[..4 + block.len()].to_vec();
    long[..4].copy_from_slice(&((block.len() + 1) as u32).to_be_bytes());
    assert!(decode(CompressKind::Lz4, &long, 25).is_err());
}

#[test]
fn gzip_golden_fixed_huffman() {
    // zlib's own compress2(level 6) output for "aaaaaaaaaa" (what OpenZFS writes for a
    // gzip-6 block of that content): header 78 9C, one fixed-Huffman block, adler32
    // 0x14E103CB big-endian; then sector padding.
    let src = [0x78, 0x9C, 0x4B, 0x4C, 0x84, 0x01, 0x00, 0x14, 0xE1, 0x03, 0xCB, 0, 0, 0];
    assert_eq!(decode(CompressKind::Gzip(6), &src, 10).unwrap(), b"aaaaaaaaaa");
    // Any gzip level decodes any gzip stream.
    assert!(decode(CompressKind::Gzip(1), &src, 10).is_ok());
}

#[test]
fn zle_golden() {
    // 300 zeros = 192 + 108 -> [255, 64+107]; "hi" -> [1, h, i]; 10 zeros -> [64+9].
    let mut src = vec![255, 64 + 107, 1, b'h', b'i', 64 + 9];
    src.resize(512, 0xEE); // padding is never looked at once lsize is reached
    let out = decode(CompressKind::Zle, &src, 312).unwrap();
    assert!(out[..300].iter().all(|&b| b == 0));
    assert_eq!(&out[300..302], b"hi");
    assert!(out[302..].iter().all(|&b| b == 0));
    assert!(decode(CompressKind::Zle, &src[..6], 313).is_err());
}

/// A magicless zstd frame built from RFC 8878: frame header descriptor 0x00 (no
/// content size, not single-segment, no checksum, no dictionary), window descriptor
/// 0x38 (2^17), an RLE block of 4000 'Z' and a last raw block "hello".
fn magicless_frame() -> Vec<u8> {
    let rle_hdr: u32 = (1 << 1) | (4000 << 3);
    let raw_hdr: u32 = 1 | (5 << 3);
    let mut f = vec![0x00, 0x38];
    f.extend_from_slice(&rle_hdr.to_le_bytes()[..3]);
    f.push(b'Z');
    f.extend_from_slice(&raw_hdr.to_le_bytes()[..3]);
    f.extend_from_slice(b"hello");
    f
}

fn zstd_expected() -> Vec<u8> {
    let mut want = vec![b'Z'; 4000];
    want.extend_from_slice(b"hello");
    want
}

#[test]
fn zstd_golden_as_openzfs_writes_it() {
    let frame = magicless_frame();
    // Header as OpenZFS (any endianness since 2.0.x fixes) writes it: c_len BE, then
    // level 3 in byte 4 and zstd version 1.4.5 (10405 = 0x0028A5) big-endian after it.
    let mut src = (frame.len() as u32).to_be_bytes().to_vec();
    src.extend_from_slice(&[0x03, 0x00, 0x28, 0xA5]);
    src.extend_from_slice(&frame);
    src.resize(512, 0);
    assert_eq!(decode(CompressKind::Zstd, &src, 4005).unwrap(), zstd_expected());
    assert_eq!(zstd_header_level(&src), Some(3));
    let hdr = ZstdHeader::parse(&src).unwrap();
    assert_eq!((hdr.c_len as usize, hdr.version), (frame.len(), 10405));
    // The old big-endian bitfield layout of the same header: level in byte 7.
    src[4..8].copy_from_slice(&[0x00, 0x28, 0xA5, 0x03]);
    assert_eq!(zstd_header_level(&src), Some(3));
    assert_eq!(decode(CompressKind::Zstd, &src, 4005).unwrap(), zstd_expected());
    // A fast level: zstd-fast-10 is enum value 112.
    src[4..8].copy_from_slice(&[112, 0x00, 0x28, 0xA5]);
    assert_eq!(zstd_header_level(&src), Some(112));
    // Wrong lsize, invalid level, c_len past psize: all refused.
    src[4..8].copy_from_slice(&[0x03, 0x00, 0x28, 0xA5]);
    assert!(decode(CompressKind::Zstd, &src, 4004).is_err());
    assert!(decode(CompressKind::Zstd, &src, 4006).is_err());
    let mut bad = src.clone();
    bad[4] = 50;
    assert_eq!(zstd_header_level(&bad), None);
    assert!(decode(CompressKind::Zstd, &bad, 4005).is_err());
    let mut short = src[..8 + frame.len()].to_vec();
    short[3] += 1;
    assert!(decode(CompressKind::Zstd, &short, 4005).is_err());
}

#[test]
fn zstd_concatenated_magicless_frames_decode_in_sequence() {
    // ZSTD_decompressDCtx decodes every frame within c_len; two frames give 8010 bytes.
    let frame = magicless_frame();
    let mut src = ((2 * frame.len()) as u32).to_be_bytes().to_vec();
    src.extend_from_slice(&[0x03, 0x00, 0x28, 0xA5]);
    src.extend_from_slice(&frame);
    src.extend_from_slice(&frame);
    let mut want = zstd_expected();
    want.extend_from_slice(&zstd_expected());
    assert_eq!(decode(CompressKind::Zstd, &src, 8010).unwrap(), want);
    // A trailing partial frame within c_len is an error.
    let mut bad = src.clone();
    bad[..4].copy_from_slice(&((2 * frame.len() - 1) as u32).to_be_bytes());
    assert!(decode(CompressKind::Zstd, &bad, 8010).is_err());
}

#[test]
fn zstd_frames_we_write_are_magicless() {
    let data = zstd_expected();
    let mut c = vec![0u8; 4096];
    let n = compress(CompressKind::Zstd, 3, &data, &mut c).unwrap();
    // Byte 8 starts the frame header descriptor, not the magic 28 B5 2F FD; with no
    // content size and no checksum its FCS and checksum bits are clear.
    assert_ne!(&c[8..12], &[0x28, 0xB5, 0x2F, 0xFD]);
    assert_eq!(c[8] & 0b1100_0100, 0);
    // Version recorded in bytes 5..8 (big-endian), zstd >= 1.4.
    let v = u32::from_be_bytes([0, c[5], c[6], c[7]]);
    assert!((10400..100000).contains(&v), "version {v}");
    assert_eq!(decode(CompressKind::Zstd, &c[..n], 4005).unwrap(), data);
}

#[test]
fn zio_mapping_matches_openzfs_enum() {
    let table = [
        (2, Some(CompressKind::Off)),
        (3, Some(CompressKind::Lzjb)),
        (4, Some(CompressKind::Empty)),
        (5, Some(CompressKind::Gzip(1))),
        (10, Some(CompressKind::Gzip(6))),
        (14, Some(CompressKind::Zle)),
        (15, Some(CompressKind::Lz4)),
        (16, Some(CompressKind::Zstd)),
        (0, None),
        (1, None),
        (17, None),
    ];
    for (v, k) in table {
        assert_eq!(kind_from_zio(v), k, "value {v}");
    }
}
