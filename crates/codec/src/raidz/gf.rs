//! GF(2^8) arithmetic with the RAID-Z field polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d).
//!
//! The generator 2 has order 255 in this field, so every non-zero element is `2^k` for a unique
//! `k in 0..255`; multiplication becomes addition of logarithms. Tables are built at compile
//! time. See OpenZFS module/zfs/vdev_raidz.c (theory comment) for the choice of field.

/// Low byte of the field polynomial (the x^8 term is implicit).
pub(crate) const POLY_LOW: u8 = 0x1d;

/// `EXP[k] = 2^k` for k in 0..510 (doubled so `EXP[log a + log b]` needs no modulo).
pub(crate) static EXP: [u8; 510] = build_exp();
/// `LOG[a] = k` with `2^k = a`; `LOG[0]` is unused (0 has no logarithm).
pub(crate) static LOG: [u8; 256] = build_log();

const fn build_exp() -> [u8; 510] {
    let mut t = [0u8; 510];
    let mut x: u8 = 1;
    let mut i = 0;
    while i < 510 {
        t[i] = x;
        x = mul2(x);
        i += 1;
    }
    t
}

const fn build_log() -> [u8; 256] {
    let exp = build_exp();
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        t[exp[i] as usize] = i as u8;
        i += 1;
    }
    t
}

/// Multiply one byte by 2 in the field.
#[inline]
pub(crate) const fn mul2(x: u8) -> u8 {
    (x << 1) ^ if x & 0x80 != 0 { POLY_LOW } else { 0 }
}

/// Multiply two field elements.
#[inline]
pub(crate) fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// Multiplicative inverse; `None` for 0.
#[inline]
pub(crate) fn inv(a: u8) -> Option<u8> {
    if a == 0 {
        None
    } else {
        Some(EXP[(255 - LOG[a as usize] as usize) % 255])
    }
}

/// `2^e` for any exponent (reduced modulo the group order 255).
#[inline]
pub(crate) fn pow2(e: u64) -> u8 {
    EXP[(e % 255) as usize]
}

/// Invert a k×k matrix (k ≤ 3) in place by Gauss–Jordan elimination. Returns `None` when the
/// matrix is singular.
pub(crate) fn invert(m: &mut [[u8; 3]; 3], k: usize) -> Option<[[u8; 3]; 3]> {
    let mut out = [[0u8; 3]; 3];
    for (i, row) in out.iter_mut().enumerate().take(k) {
        row[i] = 1;
    }
    for col in 0..k {
        let pivot = (col..k).find(|&r| m[r][col] != 0)?;
        m.swap(col, pivot);
        out.swap(col, pivot);
        let scale = inv(m[col][col])?;
        for j in 0..k {
            m[col][j] = mul(m[col][j], scale);
            out[col][j] = mul(out[col][j], scale);
        }
        for r in 0..k {
            let f = m[r][col];
            if r == col || f == 0 {
                continue;
            }
            for j in 0..k {
                m[r][j] ^= mul(f, m[col][j]);
                out[r][j] ^= mul(f, out[col][j]);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bitwise carry-less multiply with reduction: the slow definition.
    fn slow_mul(mut a: u8, mut b: u8) -> u8 {
        let mut p = 0u8;
        while b != 0 {
            if b & 1 != 0 {
                p ^= a;
            }
            a = mul2(a);
            b >>= 1;
        }
        p
    }

    #[test]
    fn tables_match_slow_multiplication() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), slow_mul(a, b), "{a}*{b}");
            }
        }
    }

    #[test]
    fn generator_has_full_order() {
        let mut seen = [false; 256];
        for &v in &EXP[..255] {
            assert!(!seen[v as usize]);
            seen[v as usize] = true;
        }
        assert_eq!(EXP[255], 1);
    }

    #[test]
    fn inverses() {
        assert_eq!(inv(0), None);
        for a in 1..=255u8 {
            assert_eq!(mul(a, inv(a).unwrap()), 1);
        }
    }

    #[test]
    fn invert_vandermonde() {
        let mut m = [[1, 1, 1], [2, 4, 8], [4, 16, 64]];
        let orig = m;
        let inv = invert(&mut m, 3).unwrap();
        for (i, inv_row) in inv.iter().enumerate() {
            for j in 0..3 {
                let mut s = 0;
                for (k, row) in orig.iter().enumerate() {
                    s ^= mul(inv_row[k], row[j]);
                }
                assert_eq!(s, u8::from(i == j));
            }
        }
        let mut sing = [[1, 1, 0], [1, 1, 0], [0, 0, 0]];
        assert!(invert(&mut sing, 2).is_none());
    }
}
