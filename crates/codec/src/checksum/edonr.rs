//! Edon-R-512 (the tweaked Edon-R of the SHA-3 round 1 submission, as used by OpenZFS),
//! written from the algorithm description: a double-pipe Merkle–Damgård hash whose compression
//! function is built from a 64-bit quasigroup operation `Q(x, y)` on 8-word vectors.
//!
//! * `Q(x, y) = QEF(LS1(x), LS2(y))`: LS1/LS2 are two different linear maps (each output word is
//!   a sum of five input words, a constant added to word 0, then a rotation), QEF mixes the two
//!   halves with XOR and an addition per output word. The word selections, rotations and the
//!   constant 0xAAAA… are the published ones (cross-checked with OpenZFS module/icp/algs/edonr).
//! * Compression of a 128-byte block `M = M0‖M1` (16 little-endian words) into the pipe
//!   `P = P0‖P1` runs four rows of two Q operations each (`rev` = word order reversed):
//!
//!   ```text
//!   row 1: X = Q(rev M1, M0)   Y = Q(X, M1)
//!   row 2: X = Q(P1, X)        Y = Q(X, Y)
//!   row 3: X = Q(X, P0)        Y = Q(Y, X)
//!   row 4: X = Q(rev M0, X)    Y = Q(X, Y)
//!   P0 ^= M1 ^ X;  P1 ^= M0 ^ Y          (the "tweak" over the original submission)
//!   ```
//! * Padding: a single 1 bit (0x80 for byte-aligned input), zeros, and the total message length
//!   in bits as a little-endian u64 in the last 8 bytes of the final block; two blocks are used
//!   when fewer than 9 bytes remain. The digest is `P1` as 64 little-endian bytes.
//!
//! ZFS salts it by *prefixing* one block derived from the salt (module/zfs/edonr_zfs.c):
//! `block = H(salt)[0..64] ‖ H(H(salt)[0..64])`, then checksums `H(block ‖ data)`, keeping the first
//! 32 digest bytes.

const BLOCK: usize = 128;
const ALT: u64 = 0xaaaa_aaaa_aaaa_aaaa;

type Half = [u64; 8];

/// Initial double pipe: bytes 0x80, 0x81, …, 0xff read as sixteen big-endian words.
const fn initial_pipe() -> [u64; 16] {
    let mut p = [0u64; 16];
    let mut k = 0;
    while k < 16 {
        let b = 0x80 + 8 * k as u64;
        let mut w = 0u64;
        let mut i = 0;
        while i < 8 {
            w = (w << 8) | (b + i);
            i += 1;
        }
        p[k] = w;
        k += 1;
    }
    p
}

/// Sum of the input words selected by `idx`.
#[inline(always)]
fn sum5(x: &Half, idx: [usize; 5]) -> u64 {
    idx.iter().fold(0u64, |acc, &i| acc.wrapping_add(x[i]))
}

/// First linear step, applied to the left operand of Q.
#[inline(always)]
fn ls1(x: &Half) -> Half {
    [
        ALT.wrapping_add(sum5(x, [0, 1, 2, 4, 7])),
        sum5(x, [0, 1, 3, 4, 7]).rotate_left(5),
        sum5(x, [0, 1, 4, 6, 7]).rotate_left(15),
        sum5(x, [2, 3, 5, 6, 7]).rotate_left(22),
        sum5(x, [1, 2, 3, 5, 6]).rotate_left(31),
        sum5(x, [0, 2, 3, 4, 5]).rotate_left(40),
        sum5(x, [0, 1, 5, 6, 7]).rotate_left(50),
        sum5(x, [2, 3, 4, 5, 6]).rotate_left(59),
    ]
}

/// Second linear step, applied to the right operand of Q.
#[inline(always)]
fn ls2(y: &Half) -> Half {
    [
        (!ALT).wrapping_add(sum5(y, [0, 1, 2, 5, 7])),
        sum5(y, [0, 1, 3, 4, 6]).rotate_left(10),
        sum5(y, [0, 1, 2, 3, 5]).rotate_left(19),
        sum5(y, [2, 3, 4, 6, 7]).rotate_left(29),
        sum5(y, [0, 1, 3, 4, 5]).rotate_left(36),
        sum5(y, [2, 4, 5, 6, 7]).rotate_left(44),
        sum5(y, [1, 2, 5, 6, 7]).rotate_left(48),
        sum5(y, [0, 3, 4, 6, 7]).rotate_left(55),
    ]
}

/// The quasigroup operation x * y.
#[inline(always)]
fn q(x: &Half, y: &Half) -> Half {
    let s = ls1(x);
    let t = ls2(y);
    let x3 = |a: usize, b: usize, c: usize| s[a] ^ s[b] ^ s[c];
    let y3 = |a: usize, b: usize, c: usize| t[a] ^ t[b] ^ t[c];
    [
        x3(0, 1, 4).wrapping_add(y3(0, 1, 5)),
        x3(0, 4, 7).wrapping_add(y3(2, 6, 7)),
        x3(1, 6, 7).wrapping_add(y3(0, 1, 3)),
        x3(2, 3, 4).wrapping_add(y3(0, 3, 4)),
        x3(0, 1, 7).wrapping_add(y3(1, 2, 5)),
        x3(3, 5, 6).wrapping_add(y3(3, 4, 6)),
        x3(2, 5, 6).wrapping_add(y3(2, 5, 7)),
        x3(2, 3, 5).wrapping_add(y3(4, 6, 7)),
    ]
}

fn halves(words: &[u64; 16]) -> (Half, Half) {
    let mut lo = [0u64; 8];
    let mut hi = [0u64; 8];
    lo.copy_from_slice(&words[..8]);
    hi.copy_from_slice(&words[8..]);
    (lo, hi)
}

fn reversed(mut h: Half) -> Half {
    h.reverse();
    h
}

/// Streaming-free Edon-R-512 state: the double pipe plus the number of bits compressed so far.
#[derive(Clone)]
pub(crate) struct EdonR512 {
    pipe: [u64; 16],
    bits: u64,
}

impl EdonR512 {
    pub(crate) fn new() -> Self {
        EdonR512 { pipe: initial_pipe(), bits: 0 }
    }

    fn compress(&mut self, block: &[u8]) {
        let mut m = [0u64; 16];
        for (w, b) in m.iter_mut().zip(block.chunks_exact(8)) {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(b);
            *w = u64::from_le_bytes(bytes);
        }
        let (m0, m1) = halves(&m);
        let (p0, p1) = halves(&self.pipe);
        let x = q(&reversed(m1), &m0);
        let y = q(&x, &m1);
        let x = q(&p1, &x);
        let y = q(&x, &y);
        let x = q(&x, &p0);
        let y = q(&y, &x);
        let x = q(&reversed(m0), &x);
        let y = q(&x, &y);
        for i in 0..8 {
            self.pipe[i] ^= m1[i] ^ x[i];
            self.pipe[8 + i] ^= m0[i] ^ y[i];
        }
        self.bits = self.bits.wrapping_add(8 * BLOCK as u64);
    }

    /// Absorbs all whole blocks of `data` and finishes with its tail; returns the 64-byte digest.
    pub(crate) fn finish(mut self, data: &[u8]) -> [u8; 64] {
        let mut blocks = data.chunks_exact(BLOCK);
        for block in blocks.by_ref() {
            self.compress(block);
        }
        let tail = blocks.remainder();
        let total_bits = self.bits.wrapping_add(8 * tail.len() as u64);
        let mut last = [0u8; 2 * BLOCK];
        last[..tail.len()].copy_from_slice(tail);
        last[tail.len()] = 0x80;
        let padded = if tail.len() < BLOCK - 8 { BLOCK } else { 2 * BLOCK };
        last[padded - 8..padded].copy_from_slice(&total_bits.to_le_bytes());
        for block in last[..padded].chunks_exact(BLOCK) {
            self.compress(block);
        }
        let mut out = [0u8; 64];
        for (dst, w) in out.chunks_exact_mut(8).zip(&self.pipe[8..]) {
            dst.copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

/// Plain Edon-R-512 digest of `data`.
pub(crate) fn edonr512(data: &[u8]) -> [u8; 64] {
    EdonR512::new().finish(data)
}

/// The ZFS salted form: the first 32 bytes of `EdonR512(salt_block ‖ data)`.
pub(crate) fn edonr_zfs(salt: &[u8; 32], data: &[u8]) -> [u8; 32] {
    let mut salt_block = [0u8; BLOCK];
    let h1 = edonr512(salt);
    salt_block[..64].copy_from_slice(&h1);
    salt_block[64..].copy_from_slice(&edonr512(&h1));
    let mut st = EdonR512::new();
    st.compress(&salt_block);
    let full = st.finish(data);
    let mut out = [0u8; 32];
    out.copy_from_slice(&full[..32]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn initial_pipe_bytes() {
        let p = initial_pipe();
        assert_eq!(p[0], 0x8081_8283_8485_8687);
        assert_eq!(p[15], 0xf8f9_fafb_fcfd_feff);
    }

    #[test]
    fn edonr512_kats() {
        // Vectors from OpenZFS tests/zfs-tests/cmd/checksum/edonr_test.c.
        assert_eq!(
            edonr512(b"abc").to_vec(),
            hex("1b14db155f1d406594b8cef70a4362ec6b5de6a5daf50ec999e987c19d3049e2\
                 de5977bb05b1bb220050a1ea5b46a9f1740acafbf6b45032adc90c628372c22b")
        );
        let msg = b"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn\
                    hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
        assert_eq!(msg.len(), 112);
        assert_eq!(
            edonr512(msg).to_vec(),
            hex("5351070dc51c3b2baca5a60d0252ccb4e4921a96fe5a69e76dad48fd21a0845a\
                 d57f880b3e4a907bc503151842bb949e1cba7439a6409a34b8436cb46921583c")
        );
    }
}
