//! Python's `random` module, bit for bit, where the reference tools shuffle and pick with it
//! (vLLM's and SGLang's ShareGPT and custom files, vLLM's oversampling): `random.seed(n)` for an
//! integer (CPython's MT19937 seeded by `init_by_array` with the integer's 32-bit words, least
//! significant first), `getrandbits`, `_randbelow` (the bits of `n`'s length, drawn again while
//! not below `n`), `shuffle` (Fisher-Yates from the last element down) and `choice`.
//! `tests/reference_draws.rs` runs Python itself and the tools' own dataset functions and
//! compares. Pure: no IO, no clock.

use rand_mt::Mt;

/// Python's `random.Random`, seeded with a non-negative integer.
#[derive(Clone)]
pub struct PyRandom {
    mt: Mt,
}

impl PyRandom {
    /// `random.seed(seed)`.
    pub fn new(seed: u64) -> Self {
        let key: Vec<u32> = if seed >> 32 == 0 {
            vec![seed as u32]
        } else {
            vec![seed as u32, (seed >> 32) as u32]
        };
        Self {
            mt: Mt::new_with_key(key),
        }
    }

    /// Draws `n` 32-bit words and drops them: the state after another user of the generator
    /// (each `random.random()` takes two).
    pub fn skip_words(&mut self, n: u64) {
        for _ in 0..n {
            self.mt.next_u32();
        }
    }

    /// `random.getrandbits(k)` for `1 <= k <= 64`: 32-bit words, least significant first, the
    /// last one's top bits.
    fn getrandbits(&mut self, k: u32) -> u64 {
        if k <= 32 {
            return (self.mt.next_u32() >> (32 - k)) as u64;
        }
        let low = self.mt.next_u32() as u64;
        let high = (self.mt.next_u32() >> (64 - k)) as u64;
        low | high << 32
    }

    /// `random._randbelow(n)`: uniform in `0..n`; 0 for `n == 0`.
    pub fn randbelow(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        let n = n as u64;
        let k = 64 - n.leading_zeros();
        loop {
            let r = self.getrandbits(k);
            if r < n {
                return r as usize;
            }
        }
    }

    /// `random.sample(range(n), k)` for `k <= n`: the chosen indices, in the order drawn
    /// (CPython's two ways: a pool drawn down for small populations, else draws redrawn until
    /// new). `k` above `n` is cut to `n`.
    pub fn sample_indices(&mut self, n: usize, k: usize) -> Vec<usize> {
        let k = k.min(n);
        let mut setsize = 21usize;
        if k > 5 {
            let e = ((k as f64 * 3.0).ln() / 4f64.ln()).ceil() as u32;
            setsize = setsize.saturating_add(4usize.saturating_pow(e));
        }
        let mut out = Vec::with_capacity(k);
        if n <= setsize {
            let mut pool: Vec<usize> = (0..n).collect();
            for i in 0..k {
                let j = self.randbelow(n - i);
                out.push(pool[j]);
                pool[j] = pool[n - i - 1];
            }
        } else {
            let mut seen = std::collections::HashSet::with_capacity(k);
            for _ in 0..k {
                let mut j = self.randbelow(n);
                while !seen.insert(j) {
                    j = self.randbelow(n);
                }
                out.push(j);
            }
        }
        out
    }

    /// `random.shuffle(x)`.
    pub fn shuffle<T>(&mut self, x: &mut [T]) {
        for i in (1..x.len()).rev() {
            let j = self.randbelow(i + 1);
            x.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CPython 3.11's `random.seed(s); random.sample(range(n), k)` (SGLang's reference Python),
    /// both of its branches: the pool (n within the set size) and the redraws (n = 500).
    #[test]
    fn samples_are_cpythons() {
        let cases: [(u64, usize, usize, &[usize]); 3] = [
            (42, 10, 3, &[1, 0, 4]),
            (7, 500, 10, &[165, 485, 77, 202, 333, 24, 37, 420, 274, 48]),
            (9, 5, 5, &[3, 2, 1, 0, 4]),
        ];
        for (seed, n, k, want) in cases {
            assert_eq!(PyRandom::new(seed).sample_indices(n, k), want, "{seed}");
        }
        let big = PyRandom::new(1).sample_indices(30, 20);
        assert_eq!(big[..6], [4, 18, 27, 25, 24, 2]);
    }

    #[test]
    fn shuffles_are_permutations_and_seeded() {
        let mut a: Vec<u32> = (0..50).collect();
        PyRandom::new(3).shuffle(&mut a);
        let mut b: Vec<u32> = (0..50).collect();
        PyRandom::new(3).shuffle(&mut b);
        assert_eq!(a, b);
        let mut c: Vec<u32> = (0..50).collect();
        PyRandom::new(4).shuffle(&mut c);
        assert_ne!(a, c);
        a.sort_unstable();
        assert_eq!(a, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn randbelow_stays_below_and_reaches_every_value() {
        let mut r = PyRandom::new(0);
        let mut seen = [false; 7];
        for _ in 0..500 {
            let v = r.randbelow(7);
            seen[v] = true;
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(r.randbelow(1), 0);
        assert_eq!(r.randbelow(0), 0);
        assert!(r.randbelow(1 << 40) < 1 << 40);
    }
}
