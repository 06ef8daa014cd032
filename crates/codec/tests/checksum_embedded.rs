//! Embedded checksum (zio_eck_t / zil_chain_t) sealing and verification.

use rzfs_codec::checksum::{
    compute, gang_verifier, label_verifier, seal_embedded, seal_embedded_order, seal_zil_chain,
    verify_embedded, verify_embedded_mac, verify_zil_chain, ChecksumCtx, ChecksumKind, Cksum, EmbeddedError,
    ZEC_MAGIC, ZIL_CHAIN_ECK_OFFSET, ZIL_CHAIN_NUSED_OFFSET,
};

fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed)).collect()
}

/// Builds a sealed tail-eck block by hand, independently of `seal_embedded`.
fn hand_sealed(kind: ChecksumKind, len: usize, verifier: Cksum, be: bool) -> Vec<u8> {
    let ctx = ChecksumCtx::default();
    let mut b = payload(len, 5);
    let magic = if be { ZEC_MAGIC.to_be_bytes() } else { ZEC_MAGIC.to_le_bytes() };
    b[len - 40..len - 32].copy_from_slice(&magic);
    b[len - 32..].copy_from_slice(&verifier.to_bytes(be));
    let sum = compute(kind, &b, be, &ctx);
    b[len - 32..].copy_from_slice(&sum.to_bytes(be));
    b
}

#[test]
fn hand_built_blocks_verify_in_both_orders() {
    let ctx = ChecksumCtx::default();
    let v = label_verifier(16 << 10);
    for kind in [ChecksumKind::Sha256, ChecksumKind::Fletcher2, ChecksumKind::Fletcher4] {
        for be in [false, true] {
            let b = hand_sealed(kind, 1024, v, be);
            assert_eq!(verify_embedded(kind, &b, v, &ctx), Ok(()), "{kind:?} be={be}");
        }
    }
}

#[test]
fn seal_matches_hand_built_and_round_trips() {
    let ctx = ChecksumCtx::new([9; 32]);
    let v = gang_verifier(1, 0x40_0000, 1234);
    for kind in ChecksumKind::ALL {
        for be in [false, true] {
            let mut b = payload(512, 5);
            seal_embedded_order(kind, &mut b, v, &ctx, be).unwrap();
            assert_eq!(verify_embedded(kind, &b, v, &ctx), Ok(()));
            if !kind.is_salted() {
                assert_eq!(b, hand_sealed(kind, 512, v, be), "{kind:?} be={be}");
            }
        }
    }
    let mut le = payload(512, 5);
    seal_embedded(ChecksumKind::Sha256, &mut le, v, &ctx).unwrap();
    assert_eq!(le[472..480], ZEC_MAGIC.to_le_bytes());
}

#[test]
fn wrong_verifier_or_corruption_is_a_mismatch() {
    let ctx = ChecksumCtx::default();
    let v = label_verifier(0x2_0000);
    let mut b = payload(4096, 1);
    seal_embedded(ChecksumKind::Sha256, &mut b, v, &ctx).unwrap();
    let before = b.clone();
    let wrong = verify_embedded(ChecksumKind::Sha256, &b, label_verifier(0x2_0400), &ctx);
    assert!(matches!(wrong, Err(EmbeddedError::Mismatch { big_endian: false, .. })));
    assert_eq!(b, before, "verification must not modify the caller's buffer");
    b[100] ^= 1;
    assert!(matches!(
        verify_embedded(ChecksumKind::Sha256, &b, v, &ctx),
        Err(EmbeddedError::Mismatch { .. })
    ));
}

#[test]
fn bad_magic_and_tiny_blocks() {
    let ctx = ChecksumCtx::default();
    let v = Cksum::default();
    let b = vec![0u8; 512];
    assert_eq!(verify_embedded(ChecksumKind::Sha256, &b, v, &ctx), Err(EmbeddedError::BadMagic { found: 0 }));
    assert!(matches!(
        verify_embedded(ChecksumKind::Sha256, &b[..39], v, &ctx),
        Err(EmbeddedError::TooSmall { len: 39, need: 40 })
    ));
    let mut tiny = [0u8; 10];
    assert!(seal_embedded(ChecksumKind::Sha256, &mut tiny, v, &ctx).is_err());
    assert!(verify_zil_chain(&b[..100], v, &ctx, false).is_err());
}

#[test]
fn mac_truncated_compare() {
    let ctx = ChecksumCtx::default();
    let v = Cksum([7, 8, 9, 10]);
    let mut b = payload(1024, 3);
    seal_embedded(ChecksumKind::Fletcher4, &mut b, v, &ctx).unwrap();
    // Emulate zio_checksum_handle_crypt: fold words 2-3 into 0-1, store a MAC in 2-3.
    let stored = Cksum::from_bytes(b[992..].try_into().unwrap(), false);
    let [w0, w1, w2, w3] = stored.0;
    let enc = Cksum([w0 ^ w2, w1 ^ w3, 0xdead, 0xbeef]);
    b[992..].copy_from_slice(&enc.to_bytes(false));
    assert!(verify_embedded(ChecksumKind::Fletcher4, &b, v, &ctx).is_err());
    assert_eq!(verify_embedded_mac(ChecksumKind::Fletcher4, &b, v, &ctx, true), Ok(()));
    assert!(verify_embedded_mac(ChecksumKind::Fletcher4, &b, v, &ctx, false).is_err());
}

fn zil_block(len: usize, nused: u64, be: bool) -> Vec<u8> {
    let mut b = payload(len, 7);
    let n = if be { nused.to_be_bytes() } else { nused.to_le_bytes() };
    b[ZIL_CHAIN_NUSED_OFFSET..ZIL_CHAIN_NUSED_OFFSET + 8].copy_from_slice(&n);
    b
}

#[test]
fn zil_chain_covers_rounded_nused_only() {
    let ctx = ChecksumCtx::default();
    let v = Cksum([0x1111, 0x2222, 0x3333, 42]); // guid, guid, objset, seq
    for be in [false, true] {
        let mut b = zil_block(8192, 300, be);
        assert_eq!(seal_zil_chain(&mut b, v, &ctx, be), Ok(4096));
        let magic = &b[ZIL_CHAIN_ECK_OFFSET..ZIL_CHAIN_ECK_OFFSET + 8];
        assert_eq!(u64::from_be_bytes(magic.try_into().unwrap()) == ZEC_MAGIC, be);
        assert_eq!(verify_zil_chain(&b, v, &ctx, false), Ok(4096));
        // Independent check: fletcher4 over 4096 bytes with the verifier in place.
        let mut copy = b[..4096].to_vec();
        copy[152..184].copy_from_slice(&v.to_bytes(be));
        let stored = Cksum::from_bytes(b[152..184].try_into().unwrap(), be);
        assert_eq!(compute(ChecksumKind::Fletcher4, &copy, be, &ctx), stored);
        // Bytes past the rounded nused are not covered; bytes inside are.
        b[5000] ^= 0xff;
        assert_eq!(verify_zil_chain(&b, v, &ctx, false), Ok(4096));
        b[400] ^= 0xff;
        assert!(verify_zil_chain(&b, v, &ctx, false).is_err());
    }
}

#[test]
fn zil_chain_nused_bounds() {
    let ctx = ChecksumCtx::default();
    let v = Cksum([1, 2, 3, 4]);
    let mut b = zil_block(8192, 5000, false);
    assert_eq!(seal_zil_chain(&mut b, v, &ctx, false), Ok(8192));
    assert_eq!(verify_zil_chain(&b, v, &ctx, false), Ok(8192));
    let mut big = zil_block(8192, 8193, false);
    assert!(matches!(
        seal_zil_chain(&mut big, v, &ctx, false),
        Err(EmbeddedError::NusedTooLarge { nused: 8193, len: 8192 })
    ));
    let mut huge = zil_block(8192, u64::MAX, false);
    assert!(seal_zil_chain(&mut huge, v, &ctx, false).is_err());
}
