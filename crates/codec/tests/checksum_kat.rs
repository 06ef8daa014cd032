//! Known-answer tests for every checksum, through the public `compute` API.
//!
//! Sources of the expected values:
//! * sha256 / sha512-256: FIPS 180-4 examples ("abc").
//! * blake3 keyed: the official BLAKE3 test vectors (key "whats the Elvish word for friend",
//!   input byte i = i % 251), as reproduced in OpenZFS tests/zfs-tests/cmd/checksum/blake3_test.c.
//! * skein (Skein-512-256 keyed with a salt) and edonr (ZFS salted Edon-R-512): generated once by
//!   compiling OpenZFS's own module/icp/algs/{skein,edonr} with a tiny driver mirroring
//!   module/zfs/{skein,edonr}_zfs.c (salt byte i = 7i+3, data byte i = (31i ^ (i >> 8)) as u8).

use rzfs_codec::checksum::{compute, ChecksumCtx, ChecksumKind, Cksum};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// The digest bytes a checksum was formed from, assuming the "block's order" rule.
fn bytes_of(c: Cksum, big_endian: bool) -> Vec<u8> {
    c.to_bytes(big_endian).to_vec()
}

fn gen_salt() -> ChecksumCtx {
    let mut salt = [0u8; 32];
    for (i, b) in salt.iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
    ChecksumCtx::new(salt)
}

fn gen_data(len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 31) ^ (i >> 8)) as u8).collect()
}

#[test]
fn sha256_words_are_always_big_endian() {
    let ctx = ChecksumCtx::default();
    let want = hex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    for be in [false, true] {
        let c = compute(ChecksumKind::Sha256, b"abc", be, &ctx);
        assert_eq!(bytes_of(c, true), want, "big_endian={be}");
    }
    let c = compute(ChecksumKind::Sha256, b"abc", false, &ctx);
    assert_eq!(c.0[0], 0xba78_16bf_8f01_cfea);
}

#[test]
fn sha512_is_sha512_256_in_block_order() {
    let ctx = ChecksumCtx::default();
    let want = hex("53048e2681941ef99b2e29b76b4c7dabe4c2d0c634fc6d46e0e2f13107e7af23");
    for be in [false, true] {
        let c = compute(ChecksumKind::Sha512_256, b"abc", be, &ctx);
        assert_eq!(bytes_of(c, be), want, "big_endian={be}");
    }
    let le = compute(ChecksumKind::Sha512_256, b"abc", false, &ctx);
    assert_eq!(le.0[0], 0xf91e_9481_268e_0453);
}

#[test]
fn blake3_keyed_by_salt() {
    let ctx = ChecksumCtx::new(*b"whats the Elvish word for friend");
    let input: Vec<u8> = (0..102_400usize).map(|i| (i % 251) as u8).collect();
    let cases = [
        (0, "92b2b75604ed3c761f9d6f62392c8a9227ad0ea3f09573e783f1498a4ed60d26"),
        (1, "6d7878dfff2f485635d39013278ae14f1454b8c0a3a2d34bc1ab38228a80c95b"),
        (1023, "c951ecdf03288d0fcc96ee3413563d8a6d3589547f2c2fb36d9786470f1b9d6e"),
        (1024, "75c46f6f3d9eb4f55ecaaee480db732e6c2105546f1e675003687c31719c7ba4"),
        (4096, "befc660aea2f1718884cd8deb9902811d332f4fc4a38cf7c7300d597a081bfc0"),
        (102_400, "1c35d1a5811083fd7119f5d5d1ba027b4d01c0c6c49fb6ff2cf75393ea5db4a7"),
    ];
    for (len, want) in cases {
        for be in [false, true] {
            let c = compute(ChecksumKind::Blake3, &input[..len], be, &ctx);
            assert_eq!(bytes_of(c, be), hex(want), "len {len} big_endian={be}");
        }
    }
}

#[test]
fn skein_is_keyed_skein_512_256() {
    let ctx = gen_salt();
    let cases = [
        (0, "1f7d52e8578ea3d4e0482d7882578a69f64e723cc915ee20521fe659f1febdb6"),
        (1, "0ccbbb7a975b9534ef5d4cf707f2a90fcec4b7e811a68b78c461585cf838799d"),
        (64, "d4d5d1fedcbcdeecddd5df526a6749731a03421825d5b3b74fcebe3f950b49d4"),
        (65, "671b3362fe900ec179546062623b485e0d219fcde765703fa302d673c96e7cdc"),
        (127, "2f64fe7f56e0983eef6a7700d592c7fb492b2d23f8e2ef18b7ea44bd0c95b8d9"),
        (128, "58e442ebaad65064a4cdb7508d7ec3d5bea0df616487cf40264d2d5010656192"),
        (129, "7fb205e44ea919e17ae5deb4879630b1a8a7f16e87b3dfc8dddada3ad97e9080"),
        (512, "4bd678e65f61960d4fe8ddc31c6be3ee9fc6024fc9286f0eb6ab6b7b2a26480d"),
        (4096, "4a8659219c73edede6134a677f7cbf476e40f5cc2d18025c3ca51b66e86cd375"),
    ];
    let data = gen_data(4096);
    for (len, want) in cases {
        for be in [false, true] {
            let c = compute(ChecksumKind::Skein, &data[..len], be, &ctx);
            assert_eq!(bytes_of(c, be), hex(want), "len {len} big_endian={be}");
        }
    }
}

#[test]
fn edonr_is_salted_edonr_512_truncated() {
    let ctx = gen_salt();
    let cases = [
        (0, "46a7974a04994152183dd6429e5fb090d9291c3acb3845af5cb32337ce99e695"),
        (1, "27223cd4377e6509af1ae0e796f48d40587353ae37ca28be3cd99700ecf2ca65"),
        (64, "2e8b47f2a61fe43206b83d62d369e7b61bf094fe9704e7c7c29ef89ae2d5c1fe"),
        (65, "f53d5bb6990e2dacff8103ebd5463119ecc9351f0f65d6ba7f61e3779cb7547c"),
        (127, "6e7a0e9a1d44d03a6394d7711aae1a87fbb39391cc73aaee76218ac2dbaa6426"),
        (128, "2675ec9c881d4759bb54c39c1c30f1adb583f9e9cd1b9f980b26baf1b72e4d31"),
        (129, "8d5387c02da102d7f0ae5b10cfd7cd575ff7dad17f3b1eba77179b32f64892c8"),
        (512, "449ad33ac8a1e7eada97fec4694264fd8a788cd2a25de5ab31e84a21aeddbc9b"),
        (4096, "853b815b89ad393440a038e075ea342a232f0aad388f3916e82ab9025e668133"),
    ];
    let data = gen_data(4096);
    for (len, want) in cases {
        for be in [false, true] {
            let c = compute(ChecksumKind::Edonr, &data[..len], be, &ctx);
            assert_eq!(bytes_of(c, be), hex(want), "len {len} big_endian={be}");
        }
    }
}

#[test]
fn salt_matters_only_for_salted_kinds() {
    let data = gen_data(1024);
    let a = ChecksumCtx::default();
    let b = gen_salt();
    for kind in ChecksumKind::ALL {
        let differs = compute(kind, &data, false, &a) != compute(kind, &data, false, &b);
        assert_eq!(differs, kind.is_salted(), "{kind:?}");
    }
}

#[test]
fn fletcher_known_values() {
    let ctx = ChecksumCtx::default();
    // 512 bytes of 32-bit words 1..=128 (little endian):
    // a = Σk = 8256, b = Σ k(129-k), c = Σ k·C(130-k, 2), d = Σ k·C(131-k, 3).
    let words: Vec<u8> = (1u32..=128).flat_map(|w| w.to_le_bytes()).collect();
    let (mut b, mut c, mut d) = (0u64, 0u64, 0u64);
    for k in 1u64..=128 {
        b += k * (129 - k);
        c += k * (130 - k) * (129 - k) / 2;
        d += k * (131 - k) * (130 - k) * (129 - k) / 6;
    }
    assert_eq!(compute(ChecksumKind::Fletcher4, &words, false, &ctx), Cksum([8256, b, c, d]));
    // fletcher2 over 64-bit pairs (1,2),(3,4),…,(63,64): a0 = Σodd, a1 = Σeven.
    let w64: Vec<u8> = (1u64..=64).flat_map(|w| w.to_le_bytes()).collect();
    let f2 = compute(ChecksumKind::Fletcher2, &w64, false, &ctx);
    assert_eq!(f2.0[0], (0..32u64).map(|i| 2 * i + 1).sum::<u64>());
    assert_eq!(f2.0[1], (0..32u64).map(|i| 2 * i + 2).sum::<u64>());
    assert_eq!(f2.0[2], (0..32u64).map(|i| (32 - i) * (2 * i + 1)).sum::<u64>());
    assert_eq!(f2.0[3], (0..32u64).map(|i| (32 - i) * (2 * i + 2)).sum::<u64>());
}

#[test]
fn fletcher_byteswapped_buffer_matches_native() {
    let ctx = ChecksumCtx::default();
    let data = gen_data(4096);
    let swapped4: Vec<u8> = data.chunks_exact(4).flat_map(|w| w.iter().rev().copied()).collect();
    let swapped8: Vec<u8> = data.chunks_exact(8).flat_map(|w| w.iter().rev().copied()).collect();
    assert_eq!(
        compute(ChecksumKind::Fletcher4, &swapped4, true, &ctx),
        compute(ChecksumKind::Fletcher4, &data, false, &ctx)
    );
    assert_eq!(
        compute(ChecksumKind::Fletcher2, &swapped8, true, &ctx),
        compute(ChecksumKind::Fletcher2, &data, false, &ctx)
    );
}

#[test]
fn digest_kinds_swap_words_with_block_order() {
    let ctx = gen_salt();
    let data = gen_data(1536);
    for kind in [ChecksumKind::Sha512_256, ChecksumKind::Skein, ChecksumKind::Edonr, ChecksumKind::Blake3] {
        let le = compute(kind, &data, false, &ctx);
        let be = compute(kind, &data, true, &ctx);
        assert_eq!(be.0.map(u64::swap_bytes), le.0, "{kind:?}");
    }
}
