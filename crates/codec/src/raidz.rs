//! # RAID-Z parity: generation and reconstruction, byte-identical to OpenZFS
//!
//! A RAID-Z row has `nparity` parity columns (P, Q, R, in that order) followed by `n` data
//! columns D_0..D_{n-1}, in the order OpenZFS's `raidz_map_t` lists them. Parity bytes are, for
//! every byte position b (see the theory comment of OpenZFS module/zfs/vdev_raidz.c):
//!
//! ```text
//!   P[b] = D_0[b] ^ D_1[b] ^ ... ^ D_{n-1}[b]
//!   Q[b] = sum over i of 2^(n-1-i) * D_i[b]     (GF(2^8), polynomial 0x11d)
//!   R[b] = sum over i of 4^(n-1-i) * D_i[b]
//! ```
//!
//! i.e. the *first* data column carries the highest power; this is what OpenZFS's Horner
//! evaluation `Q = ((D_0 * 2 + D_1) * 2 + ...) * 2 + D_{n-1}` produces, and it is the convention
//! that matters for on-disk compatibility. Data columns may be shorter than parity columns
//! (the "small" columns of a map hold one sector fewer); the missing tail counts as zeros.
//! Parity columns are as long as the longest data column.
//!
//! Reconstruction of any set of at most `nparity` columns: regenerate missing parity directly
//! when all data is present; otherwise, with k missing data columns, pick k surviving parity
//! columns j, compute syndromes `S_j = Par_j ^ (parity of the surviving data alone)`, and solve
//! the k×k system `S_j = sum_m g_j^(n-1-x_m) * D_{x_m}` (g = 1, 2, 4) by inverting its matrix
//! once; then rebuild any missing parity from the completed data. The matrix is a (generalised)
//! Vandermonde matrix in the distinct elements 2^(n-1-x_m), invertible for n ≤ 255 columns.
//!
//! Speed: P and the ×2 / ×4 steps of Horner's rule are branch-free byte loops specialised per
//! step (const generics), which the compiler vectorizes; the final solve uses one vectorizable
//! branch-free multiply-accumulate per matrix coefficient.

mod gf;

use crate::{CodecError, Result};

/// Largest parity count RAID-Z supports (raidz3).
pub const MAX_PARITY: usize = 3;

/// How many times a parity column's accumulator is doubled per Horner step: P = 0 (×1),
/// Q = 1 (×2), R = 2 (×4).
const DOUBLINGS: [u32; MAX_PARITY] = [0, 1, 2];

/// Multiply one byte by 2 in the field, branch-free so that loops over slices of it
/// auto-vectorize (an arithmetic shift smears the top bit into a 0x00/0xff mask).
#[inline(always)]
fn mul2_bf(x: u8) -> u8 {
    (x << 1) ^ (((x as i8) >> 7) as u8 & 0x1d)
}

/// `x * 2^D`, D known at compile time so the loops below are straight-line code.
#[inline(always)]
fn scale<const D: u32>(mut x: u8) -> u8 {
    let mut i = 0;
    while i < D {
        x = mul2_bf(x);
        i += 1;
    }
    x
}

/// Multiply every byte of `acc` by `2^D`.
fn scale_all_d<const D: u32>(acc: &mut [u8]) {
    for b in acc.iter_mut() {
        *b = scale::<D>(*b);
    }
}

/// `acc = acc * 2^D + src` over the common prefix, then `acc * 2^D` on the tail.
fn horner_d<const D: u32>(acc: &mut [u8], src: &[u8]) {
    let (head, tail) = acc.split_at_mut(src.len());
    for (a, s) in head.iter_mut().zip(src) {
        *a = scale::<D>(*a) ^ *s;
    }
    scale_all_d::<D>(tail);
}

/// Multiply every byte of `acc` by `2^d` (d doublings, 0..=2).
fn scale_all(acc: &mut [u8], d: u32) {
    match d {
        0 => {}
        1 => scale_all_d::<1>(acc),
        _ => scale_all_d::<2>(acc),
    }
}

/// One Horner step: `acc = acc * 2^d + src`, with `src` zero-extended to `acc.len()`.
/// Requires `src.len() <= acc.len()`. The byte loops are written so that the compiler turns
/// them into SIMD (16 or 32 lanes) on its own; measured in bench/ (kernels section).
fn horner_step(acc: &mut [u8], src: &[u8], d: u32) {
    match d {
        0 => horner_d::<0>(acc, src),
        1 => horner_d::<1>(acc, src),
        _ => horner_d::<2>(acc, src),
    }
}

/// Generate `nparity` parity columns (P, then Q, then R) over `data` (OpenZFS data-column
/// order). Each parity vector is resized to the longest data column; shorter data columns count
/// as zero-extended. With one data column every parity column is a copy of it, as in OpenZFS.
///
/// # Panics
/// If `nparity` is not in `1..=3` or `parity.len() != nparity` (caller bugs, not data errors).
pub fn generate(nparity: usize, data: &[&[u8]], parity: &mut [Vec<u8>]) {
    assert!((1..=MAX_PARITY).contains(&nparity), "raidz nparity {nparity} out of range");
    assert_eq!(parity.len(), nparity, "parity column count");
    let plen = data.iter().map(|d| d.len()).max().unwrap_or(0);
    for p in parity.iter_mut() {
        p.clear();
        p.resize(plen, 0);
    }
    for d in data {
        for (j, p) in parity.iter_mut().enumerate() {
            horner_step(p, d, DOUBLINGS[j]);
        }
    }
}

/// Rebuild the columns listed in `bad` (indices into `cols`: `nparity` parity columns first,
/// then the data columns, OpenZFS order). The content of bad columns is ignored and
/// overwritten; their lengths are kept for data columns (the caller sizes them as the map
/// says), while bad parity columns are resized to the parity length (the longest column).
pub fn reconstruct(nparity: usize, cols: &mut [Vec<u8>], bad: &[usize]) -> Result<()> {
    let shape = check_shape(nparity, cols, bad)?;
    let ndata = cols.len() - nparity;
    let plen = shape.plen;
    let bad_data: Vec<usize> = shape.bad.iter().filter(|&&c| c >= nparity).map(|&c| c - nparity).collect();
    let bad_par: Vec<usize> = shape.bad.iter().copied().filter(|&c| c < nparity).collect();

    if !bad_data.is_empty() {
        let use_par: Vec<usize> =
            (0..nparity).filter(|j| !bad_par.contains(j)).take(bad_data.len()).collect();
        let (parity, data) = cols.split_at_mut(nparity);
        let syn = syndromes(parity, data, &bad_data, &use_par, plen);
        solve(&syn, &use_par, &bad_data, ndata, data)?;
    }

    if !bad_par.is_empty() {
        let mut fresh = vec![Vec::new(); nparity];
        {
            let data: Vec<&[u8]> = cols[nparity..].iter().map(Vec::as_slice).collect();
            generate(nparity, &data, &mut fresh);
        }
        for j in bad_par {
            let mut p = std::mem::take(&mut fresh[j]);
            p.resize(plen, 0);
            cols[j] = p;
        }
    }
    Ok(())
}

/// Validated facts about a reconstruction request.
struct Shape {
    plen: usize,
    bad: Vec<usize>,
}

fn check_shape(nparity: usize, cols: &[Vec<u8>], bad: &[usize]) -> Result<Shape> {
    if !(1..=MAX_PARITY).contains(&nparity) {
        return Err(CodecError::Unsupported(format!("raidz nparity {nparity}")));
    }
    if cols.len() <= nparity {
        return Err(corrupt(format!("{} columns cannot hold {nparity} parity plus data", cols.len())));
    }
    if cols.len() - nparity > 255 {
        return Err(CodecError::Unsupported(format!("{} raidz data columns", cols.len() - nparity)));
    }
    let mut sorted: Vec<usize> = bad.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    if let Some(&c) = sorted.iter().find(|&&c| c >= cols.len()) {
        return Err(corrupt(format!("bad column {c} out of {}", cols.len())));
    }
    if sorted.len() > nparity {
        return Err(CodecError::TooManyMissing { missing: sorted.len(), parity: nparity });
    }
    let plen = cols.iter().map(Vec::len).max().unwrap_or(0);
    for (j, p) in cols.iter().enumerate().take(nparity) {
        if !sorted.contains(&j) && p.len() != plen {
            return Err(corrupt(format!("parity column {j} is {} bytes, longest column is {plen}", p.len())));
        }
    }
    Ok(Shape { plen, bad: sorted })
}

fn corrupt(detail: String) -> CodecError {
    CodecError::Corrupt { algo: "raidz", detail }
}

/// For each parity index in `use_par`, the parity column XOR the parity of the surviving data
/// alone (missing data columns treated as zero): what the missing data contributes.
fn syndromes(
    parity: &[Vec<u8>],
    data: &[Vec<u8>],
    bad_data: &[usize],
    use_par: &[usize],
    plen: usize,
) -> Vec<Vec<u8>> {
    use_par
        .iter()
        .map(|&j| {
            let d = DOUBLINGS[j];
            let mut acc = vec![0u8; plen];
            for (i, col) in data.iter().enumerate() {
                if bad_data.contains(&i) {
                    scale_all(&mut acc, d);
                } else {
                    horner_step(&mut acc, col, d);
                }
            }
            xor_into(&mut acc, &parity[j]);
            acc
        })
        .collect()
}

fn xor_into(acc: &mut [u8], src: &[u8]) {
    for (a, s) in acc.iter_mut().zip(src) {
        *a ^= *s;
    }
}

/// `out ^= c * src` bytewise. `c * x` is the XOR of `2^i * x` over the set bits i of c; with
/// the bit masks hoisted out of the loop the body is branch-free and the compiler vectorizes
/// it (a 256-byte table lookup per byte cannot be), which roughly doubled reconstruction of
/// two and three data columns in the kernel bench.
fn mul_acc(out: &mut [u8], src: &[u8], c: u8) {
    let masks: [u8; 8] = std::array::from_fn(|i| 0u8.wrapping_sub((c >> i) & 1));
    for (o, s) in out.iter_mut().zip(src) {
        let (mut x, mut acc) = (*s, 0u8);
        for m in masks {
            acc ^= x & m;
            x = mul2_bf(x);
        }
        *o ^= acc;
    }
}

/// Solve for the missing data columns from the syndromes: build the coefficient matrix
/// `M[r][m] = g_{use_par[r]}^(n-1-bad_data[m])`, invert it, and apply the inverse bytewise.
fn solve(
    syn: &[Vec<u8>],
    use_par: &[usize],
    bad_data: &[usize],
    ndata: usize,
    data: &mut [Vec<u8>],
) -> Result<()> {
    let k = bad_data.len();
    let mut m = [[0u8; 3]; 3];
    for (r, &j) in use_par.iter().enumerate() {
        for (c, &x) in bad_data.iter().enumerate() {
            let e = (ndata - 1 - x) as u64;
            m[r][c] = gf::pow2(e * u64::from(DOUBLINGS[j]));
        }
    }
    let inv = gf::invert(&mut m, k).ok_or_else(|| corrupt("singular reconstruction matrix".into()))?;
    for (mi, &x) in bad_data.iter().enumerate() {
        let out = &mut data[x];
        out.fill(0);
        for (r, s) in syn.iter().enumerate() {
            let c = inv[mi][r];
            let n = out.len().min(s.len());
            match c {
                0 => {}
                1 => xor_into(&mut out[..n], &s[..n]),
                _ => mul_acc(&mut out[..n], &s[..n], c),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiply_accumulate_matches_the_field() {
        let src: Vec<u8> = (0..=255).collect();
        for c in [2u8, 3, 0x1d, 0x80, 0xff] {
            let mut out = vec![0x5au8; 256];
            mul_acc(&mut out, &src, c);
            for (x, o) in src.iter().zip(&out) {
                assert_eq!(*o, 0x5a ^ gf::mul(c, *x));
            }
        }
    }

    #[test]
    fn branch_free_doubling_matches_the_field() {
        for x in 0..=255u8 {
            assert_eq!(mul2_bf(x), gf::mul2(x));
            assert_eq!(scale::<2>(x), gf::mul(4, x));
        }
    }

    #[test]
    fn single_data_column_parity_is_a_copy() {
        let d = [1u8, 2, 3, 0x80, 0xff];
        let mut par = vec![Vec::new(); 3];
        generate(3, &[&d], &mut par);
        for p in &par {
            assert_eq!(p, &d);
        }
    }

    #[test]
    fn q_convention_first_column_highest_power() {
        // Two data columns: Q = 2*D0 + D1, R = 4*D0 + D1.
        let mut par = vec![Vec::new(); 3];
        generate(3, &[&[1u8], &[0u8]], &mut par);
        assert_eq!(par, vec![vec![1], vec![2], vec![4]]);
        generate(3, &[&[0u8], &[1u8]], &mut par);
        assert_eq!(par, vec![vec![1], vec![1], vec![1]]);
    }

    #[test]
    fn short_columns_are_zero_extended() {
        let mut par = vec![Vec::new(); 2];
        generate(2, &[&[5u8, 6], &[7u8]], &mut par);
        assert_eq!(par[0], vec![5 ^ 7, 6]);
        assert_eq!(par[1], vec![gf::mul(2, 5) ^ 7, gf::mul(2, 6)]);
    }

    #[test]
    fn reconstruct_rejects_bad_requests() {
        let mut cols = vec![vec![0u8; 4]; 4];
        assert!(matches!(
            reconstruct(1, &mut cols, &[0, 1]),
            Err(CodecError::TooManyMissing { missing: 2, parity: 1 })
        ));
        assert!(reconstruct(4, &mut cols, &[]).is_err());
        assert!(reconstruct(1, &mut cols, &[9]).is_err());
        assert!(reconstruct(3, &mut cols[..3], &[]).is_err());
        let mut uneven = vec![vec![0u8; 4], vec![0u8; 8]];
        assert!(reconstruct(1, &mut uneven, &[1]).is_err());
        // Duplicates count once.
        assert!(reconstruct(1, &mut cols, &[2, 2]).is_ok());
    }
}
