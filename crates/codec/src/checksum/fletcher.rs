//! Fletcher-2 and Fletcher-4 as OpenZFS defines them (see OpenZFS module/zcommon/zfs_fletcher.c).
//!
//! Both are plain running sums modulo 2^64 over fixed-size words of the block:
//!
//! * **fletcher2** walks the block as pairs of 64-bit words `(w0, w1)` and keeps two independent
//!   two-level sums: `a0 += w0; a1 += w1; b0 += a0; b1 += a1`. The result is `{a0, a1, b0, b1}`.
//! * **fletcher4** walks the block as 32-bit words `w` (zero-extended to 64 bits) and keeps a
//!   four-level sum: `a += w; b += a; c += b; d += c`. The result is `{a, b, c, d}`.
//!
//! Words are read in the *block's* byte order: OpenZFS's `*_native` variant reads them in the
//! writer's order and the `*_byteswap` variant swaps each word, which is the same as saying
//! "decode each word in the byte order recorded in the blkptr".
//!
//! ## Lengths that are not a multiple of the word size
//! OpenZFS only ever checksums psize-sized buffers (multiples of 512 bytes). We never panic on
//! other lengths and define the tail as follows, matching what OpenZFS's loops consume:
//! fletcher4 ignores the last `len % 4` bytes (its loop runs over `size / 4` words);
//! fletcher2 ignores the last `len % 16` bytes (OpenZFS would read past the buffer for an odd
//! number of 64-bit words, so there is no behaviour to match there).
//!
//! ## Fast fletcher4 (lane splitting)
//! The scalar recurrence is one long dependency chain. Like OpenZFS's superscalar/SIMD variants we
//! instead run four independent accumulator sets ("lanes"), lane `j` seeing words `j, j+4, j+8…`,
//! and fold them into the scalar result at the end. The fold follows from the closed forms
//! (n words, word i counted from 1, `D = n - i + 1` its distance from the end):
//! `a = Σw`, `b = Σ D·w`, `c = Σ C(D+1,2)·w`, `d = Σ C(D+2,3)·w`. A word in lane `j` whose lane
//! distance is `t` has `D = 4t - j`; rewriting `C(4t-j+1,2)` and `C(4t-j+2,3)` in the lane basis
//! `{1, t, C(t+1,2), C(t+2,3)}` gives the integer coefficients in [`fold_lanes`]. The 4-wide array
//! loop also lets the compiler use 128-bit vector adds on baseline x86-64.

/// Sums of one fletcher4 computation over lanes: `[a, b, c, d]`, each with one entry per lane.
type Lanes = [[u64; 4]; 4];

/// Bytes consumed per lane-loop iteration (four 32-bit words, one per lane).
const LANE_STRIDE: usize = 16;

#[inline(always)]
fn read_u32(chunk: &[u8], big_endian: bool) -> u32 {
    // `chunk` always has exactly 4 bytes here (it comes from chunks_exact(4)); the fallback
    // value is unreachable but keeps this function panic-free.
    let bytes: [u8; 4] = chunk.try_into().unwrap_or([0; 4]);
    if big_endian {
        u32::from_be_bytes(bytes)
    } else {
        u32::from_le_bytes(bytes)
    }
}

#[inline(always)]
fn read_u64(chunk: &[u8], big_endian: bool) -> u64 {
    let bytes: [u8; 8] = chunk.try_into().unwrap_or([0; 8]);
    if big_endian {
        u64::from_be_bytes(bytes)
    } else {
        u64::from_le_bytes(bytes)
    }
}

/// Fletcher-2 of `data`, 64-bit words in the given byte order.
pub(crate) fn fletcher2(data: &[u8], big_endian: bool) -> [u64; 4] {
    let (mut a0, mut a1, mut b0, mut b1) = (0u64, 0u64, 0u64, 0u64);
    for pair in data.chunks_exact(16) {
        a0 = a0.wrapping_add(read_u64(&pair[..8], big_endian));
        a1 = a1.wrapping_add(read_u64(&pair[8..], big_endian));
        b0 = b0.wrapping_add(a0);
        b1 = b1.wrapping_add(a1);
    }
    [a0, a1, b0, b1]
}

/// The textbook one-word-at-a-time fletcher4 recurrence, continuing from `state`.
/// Used for the tail after the lane loop and as the reference in tests.
pub(crate) fn fletcher4_scalar(state: [u64; 4], data: &[u8], big_endian: bool) -> [u64; 4] {
    let [mut a, mut b, mut c, mut d] = state;
    for word in data.chunks_exact(4) {
        a = a.wrapping_add(u64::from(read_u32(word, big_endian)));
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    [a, b, c, d]
}

/// Runs the four-lane recurrence over `body` (a multiple of [`LANE_STRIDE`] bytes).
/// Monomorphised per byte order so the inner loop has no branch on it. Written as plain array
/// loops over lanes so that LLVM turns them into 4×u64 vector adds when AVX2 is enabled at build
/// time (about 10× the scalar speed); on baseline x86-64 it compiles to scalar code as fast as
/// the textbook loop. Kept out of line: once inlined into the byte-order dispatch LLVM stopped
/// vectorising it (measured with AVX2: ~9.5 GB/s out of line vs ~2.5 GB/s inlined).
#[inline(never)]
fn lanes_run<const BIG_ENDIAN: bool>(body: &[u8]) -> Lanes {
    lanes_body::<BIG_ENDIAN>(body)
}

/// Runs the lanes with AVX2 when this CPU has it (checked at run time, so one binary runs
/// everywhere), else [`lanes_run`] as built for the baseline target.
fn lanes_dispatch<const BIG_ENDIAN: bool>(body: &[u8]) -> Lanes {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        return simd::lanes_avx2::<BIG_ENDIAN>(body);
    }
    lanes_run::<BIG_ENDIAN>(body)
}

/// The one use of `unsafe` in this crate: calling the lane loop compiled for AVX2. Measured
/// on the CI VM (128 KiB blocks): 4.3 GB/s baseline x86-64, see bench/RESULTS.md for AVX2.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod simd {
    use super::{lanes_body, Lanes};

    /// [`lanes_body`] compiled with AVX2 enabled (its 4×u64 adds become `vpaddq`).
    #[target_feature(enable = "avx2")]
    fn lanes_avx2_impl<const BIG_ENDIAN: bool>(body: &[u8]) -> Lanes {
        lanes_body::<BIG_ENDIAN>(body)
    }

    /// Callers check `is_x86_feature_detected!("avx2")` first.
    pub(super) fn lanes_avx2<const BIG_ENDIAN: bool>(body: &[u8]) -> Lanes {
        debug_assert!(std::arch::is_x86_feature_detected!("avx2"));
        // SAFETY: the only precondition of calling a `target_feature(enable = "avx2")`
        // function is that the CPU running it has AVX2; the sole caller, `lanes_dispatch`,
        // calls this only after `is_x86_feature_detected!("avx2")` said so. The function
        // itself is safe code (slice iteration and wrapping adds).
        unsafe { lanes_avx2_impl::<BIG_ENDIAN>(body) }
    }
}

/// The lane loop itself, inlined into the baseline and the AVX2 builds.
#[inline(always)]
fn lanes_body<const BIG_ENDIAN: bool>(body: &[u8]) -> Lanes {
    let mut s: Lanes = [[0; 4]; 4];
    for chunk in body.chunks_exact(LANE_STRIDE) {
        // chunks_exact guarantees the length; the `else` arm is never taken.
        let Ok(x) = <&[u8; LANE_STRIDE]>::try_from(chunk) else {
            continue;
        };
        let w: [u64; 4] = std::array::from_fn(|j| {
            let b = [x[4 * j], x[4 * j + 1], x[4 * j + 2], x[4 * j + 3]];
            u64::from(if BIG_ENDIAN { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) })
        });
        for j in 0..4 {
            s[0][j] = s[0][j].wrapping_add(w[j]);
            s[1][j] = s[1][j].wrapping_add(s[0][j]);
            s[2][j] = s[2][j].wrapping_add(s[1][j]);
            s[3][j] = s[3][j].wrapping_add(s[2][j]);
        }
    }
    s
}

/// Folds four lanes into the scalar fletcher4 state (see the module comment for the derivation).
fn fold_lanes(l: &Lanes) -> [u64; 4] {
    let [a, b, c, d] = l;
    // Per-lane coefficients, lane j = index. Negative ones are applied with wrapping_sub.
    const B_FROM_A: [u64; 4] = [0, 1, 2, 3]; // b = 4ΣB - Σ j·A
    const C_FROM_B: [u64; 4] = [6, 10, 14, 18]; // c = 16ΣC - Σ(6+4j)·B + Σ C(j,2)·A
    const C_FROM_A: [u64; 4] = [0, 0, 1, 3];
    const D_FROM_C: [u64; 4] = [48, 64, 80, 96]; // d = 64ΣD - Σ·C + Σ·B - Σ·A
    const D_FROM_B: [u64; 4] = [4, 10, 20, 34];
    const D_FROM_A: [u64; 4] = [0, 0, 0, 1];
    let mut out = [0u64; 4];
    for j in 0..4 {
        out[0] = out[0].wrapping_add(a[j]);
        out[1] = out[1].wrapping_add(b[j].wrapping_mul(4)).wrapping_sub(a[j].wrapping_mul(B_FROM_A[j]));
        out[2] = out[2]
            .wrapping_add(c[j].wrapping_mul(16))
            .wrapping_sub(b[j].wrapping_mul(C_FROM_B[j]))
            .wrapping_add(a[j].wrapping_mul(C_FROM_A[j]));
        out[3] = out[3]
            .wrapping_add(d[j].wrapping_mul(64))
            .wrapping_sub(c[j].wrapping_mul(D_FROM_C[j]))
            .wrapping_add(b[j].wrapping_mul(D_FROM_B[j]))
            .wrapping_sub(a[j].wrapping_mul(D_FROM_A[j]));
    }
    out
}

/// Fletcher-4 of `data`, 32-bit words in the given byte order.
pub(crate) fn fletcher4(data: &[u8], big_endian: bool) -> [u64; 4] {
    let body_len = data.len() - data.len() % LANE_STRIDE;
    let (body, tail) = data.split_at(body_len);
    let lanes = if big_endian { lanes_dispatch::<true>(body) } else { lanes_dispatch::<false>(body) };
    fletcher4_scalar(fold_lanes(&lanes), tail, big_endian)
}

/// Number of words below which [`fletcher4_incremental`] runs the scalar recurrence directly:
/// for short pieces (a 312-byte send record is 78 words) the lane setup and the fold cost more.
const INCREMENTAL_SCALAR_WORDS: usize = 64;

/// `C(n+1, 2) = n(n+1)/2` modulo 2^64 (one of the two factors is even: halve it first).
fn tri(n: u64) -> u64 {
    let m = n.wrapping_add(1);
    if n.is_multiple_of(2) {
        (n / 2).wrapping_mul(m)
    } else {
        n.wrapping_mul(m / 2)
    }
}

/// `C(n+2, 3) = n(n+1)(n+2)/6` modulo 2^64. Among three consecutive integers one is a multiple
/// of 3 and one is even; dividing those out first keeps the quotient exact before the wrapping
/// product. (If the multiple of 3 is also the only even one, it is a multiple of 6, so its
/// quotient by 3 is still even.) `n` is a word count of an in-memory slice, far below 2^62.
fn tet(n: u64) -> u64 {
    let mut f = [n, n.wrapping_add(1), n.wrapping_add(2)];
    if let Some(x) = f.iter_mut().find(|x| x.is_multiple_of(3)) {
        *x /= 3;
    }
    if let Some(x) = f.iter_mut().find(|x| x.is_multiple_of(2)) {
        *x /= 2;
    }
    let [x, y, z] = f;
    x.wrapping_mul(y).wrapping_mul(z)
}

/// Continues the fletcher4 sums `state` over `data` (32-bit words in the given byte order; a
/// trailing partial word is ignored). Equals running [`fletcher4_scalar`] from `state`, but long
/// inputs take the lane path: the sums of `data` alone are computed from zero and merged into
/// `state`. Starting `data` (n words) from `state` instead of zero adds `a0` to every later `a`,
/// so the closed forms give: `a = a0 + a'`, `b = b0 + n·a0 + b'`,
/// `c = c0 + n·b0 + C(n+1,2)·a0 + c'`, `d = d0 + n·c0 + C(n+1,2)·b0 + C(n+2,3)·a0 + d'`.
pub(crate) fn fletcher4_incremental(state: [u64; 4], data: &[u8], big_endian: bool) -> [u64; 4] {
    let words = data.len() / 4;
    if words < INCREMENTAL_SCALAR_WORDS {
        return fletcher4_scalar(state, data, big_endian);
    }
    let [a, b, c, d] = fletcher4(data, big_endian);
    let [a0, b0, c0, d0] = state;
    // usize -> u64 is lossless on every supported target.
    let n = words as u64;
    let (t2, t3) = (tri(n), tet(n));
    [
        a0.wrapping_add(a),
        b0.wrapping_add(n.wrapping_mul(a0)).wrapping_add(b),
        c0.wrapping_add(n.wrapping_mul(b0)).wrapping_add(t2.wrapping_mul(a0)).wrapping_add(c),
        d0.wrapping_add(n.wrapping_mul(c0))
            .wrapping_add(t2.wrapping_mul(b0))
            .wrapping_add(t3.wrapping_mul(a0))
            .wrapping_add(d),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words_le(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn fletcher4_by_hand() {
        // words 1,2,3: a = 6; b = 1+3+6 = 10; c = 1+4+10 = 15; d = 1+5+15 = 21.
        assert_eq!(fletcher4(&words_le(&[1, 2, 3]), false), [6, 10, 15, 21]);
        // Five words exercise one lane iteration plus a scalar tail word:
        // a: 1,3,6,10,15  b: 1,4,10,20,35  c: 1,5,15,35,70  d: 1,6,21,56,126
        assert_eq!(fletcher4(&words_le(&[1, 2, 3, 4, 5]), false), [15, 35, 70, 126]);
        assert_eq!(fletcher4(&[], false), [0; 4]);
        // Trailing partial word is ignored.
        assert_eq!(fletcher4(&[1, 0, 0, 0, 9, 9, 9], false), [1, 1, 1, 1]);
        // Big-endian reading of 00 00 00 02 is 2.
        assert_eq!(fletcher4(&[0, 0, 0, 2], true), [2, 2, 2, 2]);
    }

    #[test]
    fn fletcher4_wraps_modulo_2_64() {
        let data = vec![0xffu8; 1 << 20];
        let lanes = fletcher4(&data, false);
        let scalar = fletcher4_scalar([0; 4], &data, false);
        assert_eq!(lanes, scalar);
        // a = 2^18 words of 0xffffffff, no wrap yet.
        assert_eq!(lanes[0], (1u64 << 18) * 0xffff_ffff);
    }

    #[test]
    fn fletcher2_by_hand() {
        // pairs (1,2), (3,4): a0 = 4, a1 = 6, b0 = 1+4 = 5, b1 = 2+6 = 8.
        let data: Vec<u8> = [1u64, 2, 3, 4].iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(fletcher2(&data, false), [4, 6, 5, 8]);
        let be: Vec<u8> = [1u64, 2, 3, 4].iter().flat_map(|w| w.to_be_bytes()).collect();
        assert_eq!(fletcher2(&be, true), [4, 6, 5, 8]);
        // A lone trailing 64-bit word (no pair) is ignored.
        assert_eq!(fletcher2(&data[..24], false), [1, 2, 1, 2]);
    }

    #[test]
    fn lanes_match_scalar_on_all_small_lengths() {
        let data: Vec<u8> = (0..300u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for len in 0..data.len() {
            for be in [false, true] {
                assert_eq!(
                    fletcher4(&data[..len], be),
                    fletcher4_scalar([0; 4], &data[..len], be),
                    "len {len} be {be}"
                );
            }
        }
    }

    /// The baseline build and the dispatched one (AVX2 where the CPU has it) agree.
    #[test]
    fn baseline_and_dispatched_lanes_agree() {
        let data: Vec<u8> =
            (0..(128u32 << 10)).map(|i| (i.wrapping_mul(2_246_822_519) >> 11) as u8).collect();
        for len in [0, LANE_STRIDE, 4096, 131_072 - LANE_STRIDE * 3, data.len()] {
            let body = &data[..len - len % LANE_STRIDE];
            assert_eq!(lanes_run::<false>(body), lanes_dispatch::<false>(body), "len {len}");
            assert_eq!(lanes_run::<true>(body), lanes_dispatch::<true>(body), "len {len} be");
        }
    }

    #[test]
    fn incremental_matches_whole_buffer() {
        let data: Vec<u8> = (0..2000u32).map(|i| (i.wrapping_mul(2_246_822_519) >> 11) as u8).collect();
        for be in [false, true] {
            let whole = fletcher4(&data, be);
            assert_eq!(fletcher4_incremental([0; 4], &data, be), whole);
            // Split at every 4-byte boundary: the continuation must give the same sums.
            for cut in (0..=data.len()).step_by(4) {
                let (x, y) = data.split_at(cut);
                let st = fletcher4_incremental([0; 4], x, be);
                assert_eq!(fletcher4_incremental(st, y, be), whole, "cut {cut} be {be}");
            }
            // Three pieces, lengths crossing the scalar/lane threshold.
            for (i, j) in [(4usize, 1000usize), (256, 260), (1996, 2000), (400, 1600)] {
                let s1 = fletcher4_incremental([0; 4], &data[..i], be);
                let s2 = fletcher4_incremental(s1, &data[i..j], be);
                assert_eq!(fletcher4_incremental(s2, &data[j..], be), whole);
            }
        }
    }

    #[test]
    fn incremental_from_large_state_wraps_like_scalar() {
        let data = vec![0xa5u8; 1 << 20];
        let state = [u64::MAX - 3, 0x8000_0000_0000_0001, 12345, u64::MAX];
        for be in [false, true] {
            assert_eq!(fletcher4_incremental(state, &data, be), fletcher4_scalar(state, &data, be));
        }
        // Trailing partial word ignored, as in fletcher4.
        assert_eq!(fletcher4_incremental([0; 4], &data[..1027], false), fletcher4(&data[..1024], false));
    }

    #[test]
    fn combinatorial_coefficients() {
        for n in 0..200u64 {
            assert_eq!(tri(n), n * (n + 1) / 2);
            assert_eq!(tet(n), n * (n + 1) * (n + 2) / 6);
        }
        let n = (1u64 << 40) + 7;
        let exact = (u128::from(n) * u128::from(n + 1) * u128::from(n + 2) / 6) as u64;
        assert_eq!(tet(n), exact);
        assert_eq!(tri(n), (u128::from(n) * u128::from(n + 1) / 2) as u64);
    }
}
