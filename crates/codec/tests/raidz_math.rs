//! RAID-Z parity: fast implementation against a slow reference, and exhaustive reconstruction of
//! every failure set of size ≤ nparity for widths 2..=12 and parity 1..=3.

use proptest::prelude::*;
use rzfs_codec::raidz::{generate, reconstruct};

/// Deterministic xorshift64* generator (tests need no crates.io randomness).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Field multiply by definition: shift-and-add with reduction by x^8+x^4+x^3+x^2+1.
fn slow_mul(mut a: u8, mut b: u8) -> u8 {
    let mut p = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            p ^= a;
        }
        a = (a << 1) ^ if a & 0x80 != 0 { 0x1d } else { 0 };
        b >>= 1;
    }
    p
}

fn slow_pow(g: u8, e: usize) -> u8 {
    (0..e).fold(1u8, |acc, _| slow_mul(acc, g))
}

/// Reference parity straight from the defining sums (OpenZFS vdev_raidz.c theory comment):
/// parity j = sum_i (2^j)^(n-1-i) * D_i, missing tail bytes of short columns being zero.
fn slow_parity(nparity: usize, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let n = data.len();
    let plen = data.iter().map(Vec::len).max().unwrap_or(0);
    (0..nparity)
        .map(|j| {
            let g = [1u8, 2, 4][j];
            (0..plen)
                .map(|b| {
                    data.iter().enumerate().fold(0u8, |acc, (i, d)| {
                        let v = d.get(b).copied().unwrap_or(0);
                        acc ^ slow_mul(slow_pow(g, n - 1 - i), v)
                    })
                })
                .collect()
        })
        .collect()
}

/// Column lengths like a raidz map: the first `big` data columns are `long`, the rest `short`.
fn make_data(rng: &mut Rng, ndata: usize, long: usize, short: usize) -> Vec<Vec<u8>> {
    let big = 1 + (rng.next() as usize % ndata);
    (0..ndata).map(|i| rng.bytes(if i < big { long } else { short })).collect()
}

fn fast_parity(nparity: usize, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut par = vec![Vec::new(); nparity];
    generate(nparity, &refs, &mut par);
    par
}

#[test]
fn parity_matches_reference() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for nparity in 1..=3 {
        for ndata in 1..=14 {
            for &(long, short) in &[(64, 56), (37, 29), (8, 0), (512, 512), (3, 1)] {
                let data = make_data(&mut rng, ndata, long, short);
                assert_eq!(
                    fast_parity(nparity, &data),
                    slow_parity(nparity, &data),
                    "nparity {nparity} ndata {ndata} long {long}"
                );
            }
        }
    }
}

/// Every subset of `0..n` with at most `k` elements (including the empty set).
fn subsets(n: usize, k: usize) -> Vec<Vec<usize>> {
    fn rec(start: usize, n: usize, k: usize, cur: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        out.push(cur.clone());
        if cur.len() == k {
            return;
        }
        for c in start..n {
            cur.push(c);
            rec(c + 1, n, k, cur, out);
            cur.pop();
        }
    }
    let mut out = Vec::new();
    rec(0, n, k, &mut Vec::new(), &mut out);
    out
}

fn binomial(n: usize, k: usize) -> usize {
    (0..k).fold(1, |acc, i| acc * (n - i) / (i + 1))
}

#[test]
fn subsets_enumerates_all() {
    assert_eq!(subsets(5, 2).len(), 1 + 5 + 10);
    assert_eq!(subsets(12, 3).len(), 1 + 12 + 66 + 220);
    let s = subsets(12, 3);
    assert_eq!(s.len(), (0..=3).map(|k| binomial(12, k)).sum::<usize>());
}

#[test]
fn exhaustive_reconstruction() {
    let mut rng = Rng(0xfeed_beef_0bad_f00d);
    for nparity in 1..=3usize {
        for width in (nparity + 1).max(2)..=12 {
            let ndata = width - nparity;
            for &(long, short) in &[(48, 40), (21, 13)] {
                let data = make_data(&mut rng, ndata, long, short);
                let par = fast_parity(nparity, &data);
                let good: Vec<Vec<u8>> = par.iter().chain(data.iter()).cloned().collect();
                for bad in subsets(width, nparity) {
                    let mut cols = good.clone();
                    for &c in &bad {
                        let n = cols[c].len();
                        cols[c] = rng.bytes(n);
                    }
                    reconstruct(nparity, &mut cols, &bad).unwrap();
                    assert_eq!(cols, good, "nparity {nparity} width {width} bad {bad:?}");
                }
            }
        }
    }
}

#[test]
fn too_many_failures_is_an_error() {
    let mut rng = Rng(7);
    let data = make_data(&mut rng, 4, 16, 16);
    let par = fast_parity(2, &data);
    let mut cols: Vec<Vec<u8>> = par.into_iter().chain(data).collect();
    assert!(reconstruct(2, &mut cols, &[0, 3, 5]).is_err());
}

proptest! {
    #[test]
    fn prop_reconstruct_roundtrip(
        nparity in 1usize..=3,
        ndata in 1usize..=10,
        long in 1usize..200,
        seed in any::<u64>(),
        picks in proptest::collection::vec(any::<usize>(), 0..=3),
    ) {
        let mut rng = Rng(seed | 1);
        let short = rng.next() as usize % (long + 1);
        let data = make_data(&mut rng, ndata, long, short);
        let par = fast_parity(nparity, &data);
        prop_assert_eq!(&par, &slow_parity(nparity, &data));
        let good: Vec<Vec<u8>> = par.iter().chain(data.iter()).cloned().collect();
        let width = good.len();
        let mut bad: Vec<usize> = picks.iter().map(|p| p % width).take(nparity).collect();
        bad.sort_unstable();
        bad.dedup();
        let mut cols = good.clone();
        for &c in &bad {
            cols[c].iter_mut().for_each(|b| *b = !*b);
        }
        reconstruct(nparity, &mut cols, &bad).unwrap();
        prop_assert_eq!(cols, good);
    }

    #[test]
    fn prop_reconstruct_never_panics(
        nparity in 0usize..=5,
        lens in proptest::collection::vec(0usize..40, 0..8),
        bad in proptest::collection::vec(0usize..10, 0..5),
    ) {
        let mut cols: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0xa5; n]).collect();
        let _ = reconstruct(nparity, &mut cols, &bad);
    }
}
