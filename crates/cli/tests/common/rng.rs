//! A small seedable random source shared by the tests (splitmix64).
#![allow(dead_code)]

/// splitmix64: small, seedable, good enough to pick operations and sizes.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo)
    }
    /// [`Rng::data`] of a length in `lo..hi`.
    pub fn data_in(&mut self, lo: u64, hi: u64) -> Vec<u8> {
        let n = self.range(lo, hi) as usize;
        self.data(n)
    }
    pub fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
    /// File contents: random 4 KiB pieces mixed with runs of one byte, so that compressed,
    /// partly compressed and incompressible blocks all occur.
    pub fn data(&mut self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let piece = (n - out.len()).min(4096);
            if self.percent(40) {
                let b = self.next() as u8;
                out.extend(std::iter::repeat_n(b, piece));
            } else {
                let mut x = self.next();
                for _ in 0..piece {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    out.push((x >> 32) as u8);
                }
            }
        }
        out
    }
}

/// The seed of a randomized test: `$var` if set, else the clock. Printed as
/// `{tag}: seed N ({var}=N replays)` so that a failing run can be replayed.
pub fn env_seed(var: &str, tag: &str) -> u64 {
    let s = std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("{tag}: seed {s} ({var}={s} replays)");
    s
}
