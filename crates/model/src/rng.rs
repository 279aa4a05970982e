//! A small deterministic generator for synthetic weights and test inputs.
//!
//! Synthetic model files must be identical for a given seed on every machine, with any thread
//! count, for as long as golden outputs derived from them are committed: a generator we own
//! (SplitMix64 seeding xoshiro256**) cannot change under us with a dependency update.

/// xoshiro256** seeded through SplitMix64.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// SplitMix64's finaliser: a stateless 64-bit mix (what [`crate::synth::Fill::Pool`] indexes
/// its pools with).
pub fn mix64(x: u64) -> u64 {
    let mut s = x;
    splitmix(&mut s)
}

/// Stable 64-bit hash of a string (FNV-1a), to derive per-tensor streams from names.
pub fn hash_str(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        Rng {
            s: [
                splitmix(&mut x),
                splitmix(&mut x),
                splitmix(&mut x),
                splitmix(&mut x),
            ],
        }
    }

    /// An independent stream for (seed, name, index): what a tensor chunk is generated from.
    pub fn stream(seed: u64, name: &str, index: u64) -> Rng {
        let mut x =
            seed ^ hash_str(name).rotate_left(17) ^ index.wrapping_mul(0xA24B_AED4_963E_E407);
        Rng::new(splitmix(&mut x))
    }

    pub fn next_u64(&mut self) -> u64 {
        let r = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        r
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }

    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Standard normal (Box-Muller; both values of a pair are used through `fill_normal`).
    pub fn normal(&mut self) -> f32 {
        let mut pair = [0.0f32; 2];
        self.fill_normal(&mut pair, 1.0);
        pair[0]
    }

    /// Fills `out` with N(0, std^2) values.
    pub fn fill_normal(&mut self, out: &mut [f32], std: f32) {
        let mut chunks = out.chunks_exact_mut(2);
        for pair in &mut chunks {
            let (a, b) = self.normal_pair();
            pair[0] = a * std;
            pair[1] = b * std;
        }
        if let [last] = chunks.into_remainder() {
            *last = self.normal_pair().0 * std;
        }
    }

    fn normal_pair(&mut self) -> (f32, f32) {
        // u1 in (0, 1] so the log is finite.
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (std::f32::consts::TAU * u2).sin_cos();
        (r * c, r * s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_distinct_streams() {
        let a: Vec<u64> = (0..4).map(|_| Rng::new(7).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let mut s1 = Rng::stream(1, "blk.0.attn_qkv.weight", 0);
        let mut s2 = Rng::stream(1, "blk.0.attn_qkv.weight", 1);
        assert_ne!(s1.next_u64(), s2.next_u64());
    }

    #[test]
    fn normal_has_unit_moments() {
        let mut r = Rng::new(3);
        let mut v = vec![0.0f32; 200_000];
        r.fill_normal(&mut v, 1.0);
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = v
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / n;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "var {var}");
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = Rng::new(11);
        for n in [1u64, 2, 7, 256, 248_320] {
            for _ in 0..1000 {
                assert!(r.below(n) < n);
            }
        }
    }
}
