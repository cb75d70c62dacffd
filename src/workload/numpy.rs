//! numpy's random draws, bit for bit, for the datasets and schedules the reference tools draw
//! with numpy, so a seed gives llmspeed the lengths and send times the reference draws.
//!
//! Two generators, as numpy has them:
//! - [`RandomState`]: the legacy global one (`np.random.seed(s)` then `np.random.randint`,
//!   `np.random.gamma`, `np.random.exponential`): MT19937 seeded by Knuth's rule from a 32-bit
//!   seed, doubles of 53 bits from two 32-bit words, bounded integers by masked rejection,
//!   Gaussians by the polar method (one cached), gamma by Marsaglia and Tsang above shape 1 and
//!   Johnk's method below it, exponentials as `-ln(1 - u)`.
//! - [`Generator`]: `np.random.default_rng(s)`: PCG64 (the 128-bit LCG with the XSL-RR output)
//!   seeded through numpy's `SeedSequence` hash, 32-bit draws taken as the two halves of a
//!   64-bit one (low half first), bounded integers by Lemire's multiply-and-reject, weighted
//!   choices by a draw against the weights' cumulative sum.
//!
//! And [`sum`], numpy's pairwise summation, where a reference divides by an array's sum.
//!
//! `f64::ln`, `powf` and `sqrt` call the C library numpy calls, so the floating-point draws
//! agree to the last bit on the same platform. `tests/reference_draws.rs` runs numpy itself (the
//! reference tools' virtualenv) and compares every draw. Pure: no IO, no clock.

use rand::RngCore;
use rand_mt::Mt;
use rand_pcg::Lcg128Xsl64;

/// numpy's legacy `RandomState` (what `np.random.seed` seeds and `np.random.*` draws from).
#[derive(Clone, Debug, PartialEq)]
pub struct RandomState {
    mt: Mt,
    /// The polar method's second Gaussian, kept for the next call.
    gauss: Option<f64>,
    /// 32-bit words drawn so far.
    words: u64,
}

impl RandomState {
    /// `np.random.seed(seed)`.
    pub fn new(seed: u32) -> Self {
        Self {
            mt: Mt::new(seed),
            gauss: None,
            words: 0,
        }
    }

    /// A seed as Python passes it: numpy takes 0 ..= 2^32 - 1 and refuses the rest.
    pub fn from_seed(seed: u64) -> Result<Self, String> {
        u32::try_from(seed)
            .map(Self::new)
            .map_err(|_| format!("a numpy seed must be between 0 and 2**32 - 1, got {seed}"))
    }

    fn next_u32(&mut self) -> u32 {
        self.words += 1;
        self.mt.next_u32()
    }

    /// How many 32-bit words the draws so far took.
    pub fn words(&self) -> u64 {
        self.words
    }

    /// Draws `n` words and drops them: the state another user of the generator left it in.
    pub fn skip_words(&mut self, n: u64) {
        for _ in 0..n {
            self.next_u32();
        }
    }

    /// `np.random.random()`: 53 bits, from the top 27 and 26 bits of two words.
    pub fn random(&mut self) -> f64 {
        let a = (self.next_u32() >> 5) as f64;
        let b = (self.next_u32() >> 6) as f64;
        (a * 67_108_864.0 + b) / 9_007_199_254_740_992.0
    }

    /// `np.random.randint(low, high)` (`high` excluded): masked rejection on the range
    /// ([`interval`](Self::interval)). `low < high` (numpy raises otherwise; callers check).
    pub fn randint(&mut self, low: i64, high: i64) -> i64 {
        low + self.interval((high - 1 - low) as u64) as i64
    }

    /// `np.random.permutation(n)`: `0..n` shuffled from the last place down, each place's
    /// partner drawn by masked rejection on `0..=i`.
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut x: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = self.interval(i as u64) as usize;
            x.swap(i, j);
        }
        x
    }

    /// `np.random.choice(n, size, replace)` without weights (what pandas' `DataFrame.sample`
    /// calls): `size` draws of `randint(0, n)` with replacement, else the first `size` of a
    /// permutation. `None` when `size > n` without replacement (numpy raises).
    pub fn choice(&mut self, n: usize, size: usize, replace: bool) -> Option<Vec<usize>> {
        if replace {
            if n == 0 {
                return None;
            }
            return Some(
                (0..size)
                    .map(|_| self.randint(0, n as i64) as usize)
                    .collect(),
            );
        }
        if size > n {
            return None;
        }
        let mut p = self.permutation(n);
        p.truncate(size);
        Some(p)
    }

    /// A value in `0..=max` by masked rejection (numpy's `random_interval`): one 32-bit word a
    /// try up to `u32::MAX`, above it two, the high one first.
    fn interval(&mut self, max: u64) -> u64 {
        if max == 0 {
            return 0;
        }
        let mask = mask_of(max);
        if max <= u32::MAX as u64 {
            loop {
                let v = (self.next_u32() as u64) & mask;
                if v <= max {
                    return v;
                }
            }
        }
        loop {
            let hi = self.next_u32() as u64;
            let v = (hi << 32 | self.next_u32() as u64) & mask;
            if v <= max {
                return v;
            }
        }
    }

    /// `np.random.standard_exponential()`.
    pub fn standard_exponential(&mut self) -> f64 {
        -(1.0 - self.random()).ln()
    }

    /// `np.random.exponential(scale)`.
    pub fn exponential(&mut self, scale: f64) -> f64 {
        scale * self.standard_exponential()
    }

    /// `np.random.standard_normal()`: the polar method, the pair's other value kept.
    pub fn gauss(&mut self) -> f64 {
        if let Some(g) = self.gauss.take() {
            return g;
        }
        let (x1, x2, r2) = loop {
            let x1 = 2.0 * self.random() - 1.0;
            let x2 = 2.0 * self.random() - 1.0;
            let r2 = x1 * x1 + x2 * x2;
            if r2 < 1.0 && r2 != 0.0 {
                break (x1, x2, r2);
            }
        };
        let f = (-2.0 * r2.ln() / r2).sqrt();
        self.gauss = Some(f * x1);
        f * x2
    }

    /// `np.random.standard_gamma(shape)`, `shape >= 0`.
    pub fn standard_gamma(&mut self, shape: f64) -> f64 {
        if shape == 1.0 {
            return self.standard_exponential();
        }
        if shape == 0.0 {
            return 0.0;
        }
        if shape < 1.0 {
            loop {
                let u = self.random();
                let v = self.standard_exponential();
                if u <= 1.0 - shape {
                    let x = u.powf(1.0 / shape);
                    if x <= v {
                        return x;
                    }
                } else {
                    let y = -((1.0 - u) / shape).ln();
                    let x = (1.0 - shape + shape * y).powf(1.0 / shape);
                    if x <= v + y {
                        return x;
                    }
                }
            }
        }
        let b = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * b).sqrt();
        loop {
            let (x, v) = loop {
                let x = self.gauss();
                let v = 1.0 + c * x;
                if v > 0.0 {
                    break (x, v);
                }
            };
            let v = v * v * v;
            let u = self.random();
            if u < 1.0 - 0.0331 * (x * x) * (x * x) {
                return b * v;
            }
            if u.ln() < 0.5 * x * x + b * (1.0 - v + v.ln()) {
                return b * v;
            }
        }
    }

    /// `np.random.gamma(shape, scale)`.
    pub fn gamma(&mut self, shape: f64, scale: f64) -> f64 {
        scale * self.standard_gamma(shape)
    }
}

/// The smallest all-ones mask covering `rng`.
fn mask_of(rng: u64) -> u64 {
    if rng == 0 {
        0
    } else {
        u64::MAX >> rng.leading_zeros()
    }
}

/// numpy's `Generator` on PCG64 (`np.random.default_rng(seed)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generator {
    pcg: Lcg128Xsl64,
    /// The high half of the last 64-bit draw, for the next 32-bit one.
    half: Option<u32>,
}

impl Generator {
    /// `np.random.default_rng(seed)` for a non-negative integer seed.
    pub fn new(seed: u64) -> Self {
        let words = seed_sequence_state(seed);
        let state = ((words[0] as u128) << 64) | words[1] as u128;
        let stream = ((words[2] as u128) << 64) | words[3] as u128;
        Self {
            pcg: Lcg128Xsl64::new(state, stream),
            half: None,
        }
    }

    fn next_u64(&mut self) -> u64 {
        self.pcg.next_u64()
    }

    fn next_u32(&mut self) -> u32 {
        if let Some(h) = self.half.take() {
            return h;
        }
        let v = self.next_u64();
        self.half = Some((v >> 32) as u32);
        v as u32
    }

    /// `rng.random()`: the top 53 bits of a 64-bit draw.
    pub fn random(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }

    /// `rng.choice(len(p), size, replace=True, p=p)`: each pick the first index whose share of
    /// the running sum of `p` (numpy's cumulative sum over its last value) lies above a
    /// [`random`](Self::random) draw. `p` as numpy takes it: non-negative, summing to 1 within
    /// numpy's tolerance (callers build it so).
    pub fn choice_weighted(&mut self, p: &[f64], size: usize) -> Vec<usize> {
        let mut cdf: Vec<f64> = p
            .iter()
            .scan(0.0, |acc, &x| {
                *acc += x;
                Some(*acc)
            })
            .collect();
        let last = cdf.last().copied().unwrap_or(1.0);
        cdf.iter_mut().for_each(|c| *c /= last);
        (0..size)
            .map(|_| {
                let u = self.random();
                cdf.partition_point(|&c| c <= u)
                    .min(p.len().saturating_sub(1))
            })
            .collect()
    }

    /// `rng.integers(0, 256, size=out.len(), dtype=np.uint8)`: numpy fills a full byte range
    /// from 32-bit draws, four bytes each, lowest byte first (vLLM's noise images).
    pub fn fill_u8(&mut self, out: &mut [u8]) {
        // A whole 64-bit draw is two 32-bit ones, low half first: eight bytes at once.
        let out = match self.half.take_if(|_| !out.is_empty()) {
            Some(h) => {
                let k = out.len().min(4);
                out[..k].copy_from_slice(&h.to_le_bytes()[..k]);
                &mut out[k..]
            }
            None => out,
        };
        let mut pairs = out.chunks_exact_mut(8);
        for c in &mut pairs {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let mut chunks = pairs.into_remainder().chunks_exact_mut(4);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u32().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let w = self.next_u32().to_le_bytes();
            rest.copy_from_slice(&w[..rest.len()]);
        }
    }

    /// Leaves the generator where [`fill_u8`](Self::fill_u8) of `n` bytes leaves it, without
    /// making them: PCG64 jumps ahead in O(log n) steps, so each image's pixels can be made
    /// apart (on another thread) from a copy taken before the jump.
    pub fn skip_u8(&mut self, n: usize) {
        let mut draws = n.div_ceil(4) as u128;
        if draws > 0 && self.half.take().is_some() {
            draws -= 1;
        }
        self.pcg.advance(draws / 2);
        if draws % 2 == 1 {
            self.next_u32();
        }
    }

    /// numpy's `random_interval(max)`: a draw in `0..=max` by masked rejection, on 32-bit
    /// draws while `max` fits 32 bits (what `Generator.shuffle` and `permutation` use).
    fn interval(&mut self, max: u64) -> u64 {
        if max == 0 {
            return 0;
        }
        let mask = mask_of(max);
        if max <= u64::from(u32::MAX) {
            loop {
                let v = u64::from(self.next_u32()) & mask;
                if v <= max {
                    return v;
                }
            }
        }
        loop {
            let v = self.next_u64() & mask;
            if v <= max {
                return v;
            }
        }
    }

    /// `rng.shuffle(x)` for a list or a 1-d array: Fisher-Yates from the last item down, item
    /// `i` swapped with one drawn in `0..=i`.
    pub fn shuffle<T>(&mut self, x: &mut [T]) {
        for i in (1..x.len()).rev() {
            let j = self.interval(i as u64) as usize;
            x.swap(i, j);
        }
    }

    /// `rng.permutation(n)`: [`shuffle`](Self::shuffle) of `0..n`.
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        self.shuffle(&mut p);
        p
    }

    /// `rng.integers(low, high)` (`high` excluded), int64: Lemire's method on the range.
    /// `low < high` (numpy raises otherwise; callers check).
    pub fn integers(&mut self, low: i64, high: i64) -> i64 {
        let rng = (high - 1 - low) as u64;
        if rng == 0 {
            return low;
        }
        let drawn = if rng <= u32::MAX as u64 {
            let rng = rng as u32;
            if rng == u32::MAX {
                self.next_u32() as u64
            } else {
                let excl = rng + 1;
                let mut m = self.next_u32() as u64 * excl as u64;
                if (m as u32) < excl {
                    let threshold = (u32::MAX - rng) % excl;
                    while (m as u32) < threshold {
                        m = self.next_u32() as u64 * excl as u64;
                    }
                }
                m >> 32
            }
        } else if rng == u64::MAX {
            self.next_u64()
        } else {
            let excl = rng + 1;
            let mut m = self.next_u64() as u128 * excl as u128;
            if (m as u64) < excl {
                let threshold = (u64::MAX - rng) % excl;
                while (m as u64) < threshold {
                    m = self.next_u64() as u128 * excl as u128;
                }
            }
            (m >> 64) as u64
        };
        low + drawn as i64
    }
}

/// `np.sum` of a contiguous float64 array: numpy's pairwise summation (under 8 values a plain
/// loop; up to 128, eight running sums combined in pairs, then the rest; above, the two halves
/// split at a multiple of 8), which rounds differently from a plain loop past 8 values.
pub fn sum(a: &[f64]) -> f64 {
    const BLOCK: usize = 128;
    let n = a.len();
    if n < 8 {
        a.iter().fold(-0.0, |s, &x| s + x)
    } else if n <= BLOCK {
        let mut r = [a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]];
        let mut i = 8;
        while i < n - (n % 8) {
            for (k, rk) in r.iter_mut().enumerate() {
                *rk += a[i + k];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for &x in &a[i..] {
            res += x;
        }
        res
    } else {
        let half = (n / 2) - (n / 2) % 8;
        sum(&a[..half]) + sum(&a[half..])
    }
}

/// The four 64-bit words numpy's `SeedSequence(seed).generate_state(4, np.uint64)` gives: the
/// seed's 32-bit words mixed into a pool of four, then hashed out as eight 32-bit words, paired
/// little-endian.
fn seed_sequence_state(seed: u64) -> [u64; 4] {
    const INIT_A: u32 = 0x43b0_d7e5;
    const MULT_A: u32 = 0x931e_8875;
    const INIT_B: u32 = 0x8b51_f9dd;
    const MULT_B: u32 = 0x58f3_8ded;
    const MIX_MULT_L: u32 = 0xca01_f9dd;
    const MIX_MULT_R: u32 = 0x4973_f715;
    const XSHIFT: u32 = 16;
    // The seed as numpy splits an integer: 32-bit words, least significant first, at least one.
    let entropy: Vec<u32> = if seed >> 32 == 0 {
        vec![seed as u32]
    } else {
        vec![seed as u32, (seed >> 32) as u32]
    };
    let mut hash_const = INIT_A;
    let mut hashmix = |value: u32| {
        let mut v = value ^ hash_const;
        hash_const = hash_const.wrapping_mul(MULT_A);
        v = v.wrapping_mul(hash_const);
        v ^ (v >> XSHIFT)
    };
    let mix = |x: u32, y: u32| {
        let r = MIX_MULT_L
            .wrapping_mul(x)
            .wrapping_sub(MIX_MULT_R.wrapping_mul(y));
        r ^ (r >> XSHIFT)
    };
    let mut pool = [0u32; 4];
    for (i, p) in pool.iter_mut().enumerate() {
        *p = hashmix(entropy.get(i).copied().unwrap_or(0));
    }
    for src in 0..4 {
        for dst in 0..4 {
            if src != dst {
                let h = hashmix(pool[src]);
                pool[dst] = mix(pool[dst], h);
            }
        }
    }
    // (The entropy never has more than four words here, so nothing is mixed in after.)
    let mut hash_const = INIT_B;
    let mut out = [0u32; 8];
    for (i, o) in out.iter_mut().enumerate() {
        let mut v = pool[i % 4] ^ hash_const;
        hash_const = hash_const.wrapping_mul(MULT_B);
        v = v.wrapping_mul(hash_const);
        *o = v ^ (v >> XSHIFT);
    }
    std::array::from_fn(|i| out[2 * i] as u64 | (out[2 * i + 1] as u64) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fill_u8` takes eight bytes a 64-bit draw, and `skip_u8` jumps where it would have
    /// ended: both checked against four bytes a 32-bit draw (numpy's loop, spelt out), from a
    /// generator with and without a half draw kept, for lengths around the chunk sizes.
    #[test]
    fn filling_and_skipping_bytes_match_four_bytes_a_draw() {
        for pre in [0usize, 1] {
            for n in [
                0usize, 1, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 1000, 1001, 1003,
            ] {
                let start = |pre: usize| {
                    let mut g = Generator::new(7);
                    for _ in 0..pre {
                        g.next_u32();
                    }
                    g
                };
                let mut naive = start(pre);
                let want: Vec<u8> = (0..n.div_ceil(4))
                    .flat_map(|_| naive.next_u32().to_le_bytes())
                    .take(n)
                    .collect();
                let mut fast = start(pre);
                let mut got = vec![0u8; n];
                fast.fill_u8(&mut got);
                assert_eq!(got, want, "pre {pre}, n {n}");
                let mut jump = start(pre);
                jump.skip_u8(n);
                // The same next draws: the kept half first, then whole ones.
                for _ in 0..3 {
                    let w = naive.next_u32();
                    assert_eq!(fast.next_u32(), w, "pre {pre}, n {n}");
                    assert_eq!(jump.next_u32(), w, "pre {pre}, n {n}");
                }
            }
        }
    }

    #[test]
    fn masks_cover_the_range_and_no_more() {
        assert_eq!(mask_of(1), 1);
        assert_eq!(mask_of(5), 7);
        assert_eq!(mask_of(8), 15);
        assert_eq!(mask_of(u32::MAX as u64), u32::MAX as u64);
        assert_eq!(mask_of(1 << 40), (1 << 41) - 1);
    }

    #[test]
    fn mt19937_from_seed_5489_is_the_reference_sequence() {
        // The first output of MT19937 seeded with 5489 (the reference implementation's
        // default seed) is 3499211612, and its 10,000th is 4123659995 (C++11's
        // `std::mt19937` requirement).
        let mut r = RandomState::new(5489);
        assert_eq!(r.mt.next_u32(), 3_499_211_612);
        let mut r = RandomState::new(5489);
        let mut last = 0;
        for _ in 0..10_000 {
            last = r.mt.next_u32();
        }
        assert_eq!(last, 4_123_659_995);
    }

    #[test]
    fn bounded_draws_stay_in_range_and_reach_both_ends() {
        let mut r = RandomState::new(1);
        let mut g = Generator::new(1);
        let (mut seen_r, mut seen_g) = ([false; 5], [false; 5]);
        for _ in 0..1000 {
            let a = r.randint(3, 8);
            let b = g.integers(3, 8);
            assert!((3..8).contains(&a) && (3..8).contains(&b), "{a} {b}");
            seen_r[(a - 3) as usize] = true;
            seen_g[(b - 3) as usize] = true;
        }
        assert!(seen_r.iter().all(|s| *s) && seen_g.iter().all(|s| *s));
        assert_eq!(r.randint(4, 5), 4);
        assert_eq!(g.integers(4, 5), 4);
    }

    #[test]
    fn seeds_beyond_32_bits_are_refused_by_the_legacy_generator() {
        assert!(RandomState::from_seed(1 << 32).is_err());
        assert!(RandomState::from_seed(u32::MAX as u64).is_ok());
    }
}
