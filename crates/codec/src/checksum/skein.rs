//! Skein-512 (version 1.3 of the Skein specification), written from the published spec:
//! Threefish-512 as the tweakable block cipher, chained in UBI (Unique Block Iteration) mode.
//!
//! ZFS uses Skein-512 with a 256-bit output in *MAC mode*, keyed by the pool's 32-byte checksum
//! salt (see OpenZFS module/zfs/skein_zfs.c: `Skein_512_InitExt(ctx, 256, 0, salt, 32)`; tree
//! info 0 means plain sequential hashing). The chain of UBI calls is therefore:
//!
//! ```text
//! K  = key.is_empty() ? 0 : UBI(0, key, KEY)
//! G0 = UBI(K, config, CFG)      config = "SHA3" | version 1 | output bits | tree info 0 (32 bytes)
//! G1 = UBI(G0, message, MSG)
//! H  = UBI(G1, counter 0 as u64 LE, OUT)   (one output block suffices for ≤ 512 bits)
//! ```
//!
//! `UBI(G, M, type)`: M is zero-padded to whole 64-byte blocks (an empty M is one zero block);
//! block i is encrypted with key G and tweak (T0 = bytes of M consumed through this block,
//! T1 = type << 56 | first << 62 | final << 63), and G becomes `E(block) XOR block`.
//! All words are little-endian.

/// Threefish key-schedule parity constant C240.
const KEY_PARITY: u64 = 0x1BD1_1BDA_A9FC_1A22;

/// Rotation constants R[d mod 8][pair] of Threefish-512.
const ROT: [[u32; 4]; 8] = [
    [46, 36, 19, 37],
    [33, 27, 14, 42],
    [17, 49, 36, 39],
    [44, 9, 54, 56],
    [39, 30, 34, 24],
    [13, 50, 10, 17],
    [25, 29, 39, 43],
    [8, 35, 56, 22],
];

/// Word permutation applied after each round: new[i] = old[PERM[i]].
const PERM: [usize; 8] = [2, 1, 4, 7, 6, 5, 0, 3];

/// UBI block types (Skein spec table 6).
const TYPE_KEY: u64 = 0;
const TYPE_CFG: u64 = 4;
const TYPE_MSG: u64 = 48;
const TYPE_OUT: u64 = 63;

const FLAG_FIRST: u64 = 1 << 62;
const FLAG_FINAL: u64 = 1 << 63;

const BLOCK: usize = 64;

/// Threefish-512 encryption of `plain` under `key` and `tweak`.
fn threefish512(key: &[u64; 8], tweak: [u64; 2], plain: &[u64; 8]) -> [u64; 8] {
    let mut k = [0u64; 9];
    k[..8].copy_from_slice(key);
    k[8] = key.iter().fold(KEY_PARITY, |acc, w| acc ^ w);
    let t = [tweak[0], tweak[1], tweak[0] ^ tweak[1]];
    let subkey = |s: usize| -> [u64; 8] {
        let mut sk = [0u64; 8];
        for (i, w) in sk.iter_mut().enumerate() {
            *w = k[(s + i) % 9];
        }
        sk[5] = sk[5].wrapping_add(t[s % 3]);
        sk[6] = sk[6].wrapping_add(t[(s + 1) % 3]);
        sk[7] = sk[7].wrapping_add(s as u64);
        sk
    };
    let mut v = *plain;
    for d in 0..72 {
        if d % 4 == 0 {
            for (w, s) in v.iter_mut().zip(subkey(d / 4)) {
                *w = w.wrapping_add(s);
            }
        }
        let r = &ROT[d % 8];
        for pair in 0..4 {
            let (x0, x1) = (v[2 * pair], v[2 * pair + 1]);
            let y0 = x0.wrapping_add(x1);
            v[2 * pair] = y0;
            v[2 * pair + 1] = x1.rotate_left(r[pair]) ^ y0;
        }
        let prev = v;
        for (i, w) in v.iter_mut().enumerate() {
            *w = prev[PERM[i]];
        }
    }
    for (w, s) in v.iter_mut().zip(subkey(18)) {
        *w = w.wrapping_add(s);
    }
    v
}

fn le_words(block: &[u8; BLOCK]) -> [u64; 8] {
    let mut w = [0u64; 8];
    for (word, bytes) in w.iter_mut().zip(block.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(bytes);
        *word = u64::from_le_bytes(b);
    }
    w
}

/// One UBI invocation: chains `msg` (any length) into `g` with block type `ty`.
fn ubi(mut g: [u64; 8], msg: &[u8], ty: u64) -> [u64; 8] {
    let nblocks = msg.len().div_ceil(BLOCK).max(1);
    let mut consumed: u64 = 0;
    for i in 0..nblocks {
        let start = i * BLOCK;
        let piece = msg.get(start..msg.len().min(start + BLOCK)).unwrap_or(&[]);
        let mut block = [0u8; BLOCK];
        block[..piece.len()].copy_from_slice(piece);
        consumed = consumed.wrapping_add(piece.len() as u64);
        let mut t1 = ty << 56;
        if i == 0 {
            t1 |= FLAG_FIRST;
        }
        if i + 1 == nblocks {
            t1 |= FLAG_FINAL;
        }
        let words = le_words(&block);
        let enc = threefish512(&g, [consumed, t1], &words);
        for j in 0..8 {
            g[j] = enc[j] ^ words[j];
        }
    }
    g
}

/// Skein-512 with `out.len()` bytes of output (at most 64), keyed when `key` is non-empty.
pub(crate) fn skein512(key: &[u8], msg: &[u8], out: &mut [u8]) {
    let out = match out.len() {
        0..=BLOCK => out,
        _ => &mut out[..BLOCK],
    };
    let k = if key.is_empty() { [0u64; 8] } else { ubi([0; 8], key, TYPE_KEY) };
    // Configuration block: schema "SHA3" (LE) + version 1, output bit length, tree info 0.
    let mut cfg = [0u8; 32];
    cfg[..4].copy_from_slice(b"SHA3");
    cfg[4..6].copy_from_slice(&1u16.to_le_bytes());
    cfg[8..16].copy_from_slice(&(out.len() as u64 * 8).to_le_bytes());
    let g = ubi(k, &cfg, TYPE_CFG);
    let g = ubi(g, msg, TYPE_MSG);
    let h = ubi(g, &0u64.to_le_bytes(), TYPE_OUT);
    let mut bytes = [0u8; BLOCK];
    for (dst, w) in bytes.chunks_exact_mut(8).zip(h) {
        dst.copy_from_slice(&w.to_le_bytes());
    }
    out.copy_from_slice(&bytes[..out.len()]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn skein512_512_single_byte_kat() {
        // Skein 1.3 KAT (also in OpenZFS tests/zfs-tests/cmd/checksum/skein_test.c): message FF.
        let mut out = [0u8; 64];
        skein512(&[], &[0xff], &mut out);
        assert_eq!(
            out.to_vec(),
            hex("71b7bce6fe6452227b9ced6014249e5bf9a9754c3ad618ccc4e0aae16b316cc8\
                 ca698d864307ed3e80b6ef1570812ac5272dc409b5a012df2a579102f340617a")
        );
    }

    #[test]
    fn skein512_512_multi_block_kats() {
        // Same source: messages FF FE FD ... of 64 and 128 bytes.
        let msg: Vec<u8> = (0..128u32).map(|i| 0xff - i as u8).collect();
        let mut out = [0u8; 64];
        skein512(&[], &msg[..64], &mut out);
        assert_eq!(
            out.to_vec(),
            hex("45863ba3be0c4dfc27e75d358496f4ac9a736a505d9313b42b2f5eada79fc17f\
                 63861e947afb1d056aa199575ad3f8c9a3cc1780b5e5fa4cae050e989876625b")
        );
        skein512(&[], &msg, &mut out);
        assert_eq!(
            out.to_vec(),
            hex("91cca510c263c4ddd010530a33073309628631f308747e1bcbaa90e451cab92e\
                 5188087af4188773a332303e6667a7a210856f742139000071f48e8ba2a5adb7")
        );
    }
}
