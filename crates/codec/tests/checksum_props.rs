//! Property tests: no panics on any input, fletcher4 lane folding equals the plain recurrence,
//! byte-order symmetry and seal/verify round trips.

use proptest::prelude::*;
use rzfs_codec::checksum::{
    compute, seal_embedded_order, verify_embedded, verify_zil_chain, ChecksumCtx, ChecksumKind, Cksum,
};

fn naive_fletcher4(data: &[u8], be: bool) -> Cksum {
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    for w in data.chunks_exact(4) {
        let w: [u8; 4] = w.try_into().unwrap();
        let v = if be { u32::from_be_bytes(w) } else { u32::from_le_bytes(w) };
        a = a.wrapping_add(v.into());
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    Cksum([a, b, c, d])
}

fn kind() -> impl Strategy<Value = ChecksumKind> {
    prop::sample::select(ChecksumKind::ALL.to_vec())
}

proptest! {
    // Integration tests have no lib.rs next to them for proptest's regression files.
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn compute_never_panics(k in kind(), data in prop::collection::vec(any::<u8>(), 0..1100),
                            be in any::<bool>(), salt in any::<[u8; 32]>()) {
        let _ = compute(k, &data, be, &ChecksumCtx::new(salt));
    }

    #[test]
    fn fletcher4_equals_plain_recurrence(data in prop::collection::vec(any::<u8>(), 0..3000),
                                         be in any::<bool>()) {
        let ctx = ChecksumCtx::default();
        prop_assert_eq!(compute(ChecksumKind::Fletcher4, &data, be, &ctx), naive_fletcher4(&data, be));
    }

    #[test]
    fn fletcher_byte_order_symmetry(words in prop::collection::vec(any::<u64>(), 0..200)) {
        let ctx = ChecksumCtx::default();
        let le: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let be: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        prop_assert_eq!(compute(ChecksumKind::Fletcher2, &le, false, &ctx),
                        compute(ChecksumKind::Fletcher2, &be, true, &ctx));
        let le4: Vec<u8> = le.chunks_exact(4).flat_map(|w| w.to_vec()).collect();
        let be4: Vec<u8> = le.chunks_exact(4).flat_map(|w| w.iter().rev().copied().collect::<Vec<_>>()).collect();
        prop_assert_eq!(compute(ChecksumKind::Fletcher4, &le4, false, &ctx),
                        compute(ChecksumKind::Fletcher4, &be4, true, &ctx));
    }

    #[test]
    fn seal_then_verify(k in kind(), len in 40usize..1500, seed in any::<u8>(), be in any::<bool>(),
                        v in any::<[u64; 4]>(), salt in any::<[u8; 32]>()) {
        let ctx = ChecksumCtx::new(salt);
        let mut b: Vec<u8> = (0..len).map(|i| (i as u8) ^ seed).collect();
        seal_embedded_order(k, &mut b, Cksum(v), &ctx, be).unwrap();
        prop_assert_eq!(verify_embedded(k, &b, Cksum(v), &ctx), Ok(()));
    }

    #[test]
    fn verifiers_never_panic(k in kind(), data in prop::collection::vec(any::<u8>(), 0..600),
                             v in any::<[u64; 4]>(), magic_at_tail in any::<bool>(), enc in any::<bool>()) {
        let ctx = ChecksumCtx::default();
        let mut data = data;
        // Plant a valid magic sometimes so the checksum path, not just the magic check, runs.
        if magic_at_tail && data.len() >= 40 {
            let n = data.len();
            data[n - 40..n - 32].copy_from_slice(&rzfs_codec::checksum::ZEC_MAGIC.to_le_bytes());
        } else if data.len() >= 184 {
            data[144..152].copy_from_slice(&rzfs_codec::checksum::ZEC_MAGIC.to_be_bytes());
        }
        let _ = verify_embedded(k, &data, Cksum(v), &ctx);
        let _ = verify_zil_chain(&data, Cksum(v), &ctx, enc);
    }
}

/// Throughput print for the hot path (informational only: no timed assertion).
/// Run with `cargo test --release -p rzfs-codec --test checksum_props -- --nocapture fletcher4_throughput`.
#[test]
fn fletcher4_throughput() {
    let data: Vec<u8> = (0..(8usize << 20)).map(|i| (i * 2_654_435_761) as u8).collect();
    let ctx = ChecksumCtx::default();
    let t = std::time::Instant::now();
    let mut acc = 0u64;
    for _ in 0..4 {
        acc = acc.wrapping_add(compute(ChecksumKind::Fletcher4, &data, false, &ctx).0[3]);
    }
    let fast = t.elapsed();
    let t = std::time::Instant::now();
    for _ in 0..4 {
        acc = acc.wrapping_add(naive_fletcher4(&data, false).0[3]);
    }
    let naive = t.elapsed();
    let mib = 32.0;
    println!(
        "fletcher4: lanes {:.0} MiB/s, plain recurrence {:.0} MiB/s (acc {acc:x})",
        mib / fast.as_secs_f64(),
        mib / naive.as_secs_f64()
    );
}
