//! A tiny deterministic random generator for data order and splits.
//!
//! Burn's backend RNG is global and shared by every thread of a process, so the data pipeline
//! uses its own generator: its whole state is one `u64`, which a checkpoint stores, so a
//! resumed run draws exactly the batches the uninterrupted run would have drawn.

use serde::{Deserialize, Serialize};

/// xorshift64* seeded through splitmix64. Not cryptographic; fast, small and reproducible on
/// every platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rng {
    state: u64,
}

/// One splitmix64 step: spreads a seed over all 64 bits.
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator for `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Self {
        let state = splitmix64(seed);
        Self {
            // xorshift must not start at 0.
            state: if state == 0 {
                0x2545_F491_4F6C_DD1D
            } else {
                state
            },
        }
    }

    /// A generator for `seed` and a named stream, so that independent uses of one seed (the
    /// train/eval split, the batch order) do not draw the same numbers.
    pub fn stream(seed: u64, stream: u64) -> Self {
        Self::new(seed ^ splitmix64(stream.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
    }

    /// Restores a generator from [`state`](Self::state) (0 is mapped to a fixed non-zero
    /// state, since xorshift cannot leave 0).
    pub fn from_state(state: u64) -> Self {
        Self {
            state: if state == 0 {
                0x2545_F491_4F6C_DD1D
            } else {
                state
            },
        }
    }

    /// The whole state of the generator.
    pub fn state(&self) -> u64 {
        self.state
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A uniform integer in `0..n` (`n > 0`; returns 0 for `n == 0`).
    pub fn below(&mut self, n: usize) -> usize {
        // Multiply-shift: unbiased enough for data shuffling, and exact across platforms.
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Shuffles `items` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rng() {
        use crate::data::rng::Rng;

        let mut a = Rng::new(7);
        let mut b = Rng::from_state(a.state());
        assert_eq!(a.next_u64(), b.next_u64());
        assert!(a.below(10) < 10);
    }

    #[test]
    fn new() {
        use crate::data::rng::Rng;

        assert_eq!(Rng::new(1).next_u64(), Rng::new(1).next_u64());
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }

    #[test]
    fn stream() {
        use crate::data::rng::Rng;

        assert_ne!(Rng::stream(5, 1).next_u64(), Rng::stream(5, 2).next_u64());
    }

    #[test]
    fn from_state() {
        use crate::data::rng::Rng;

        let mut r = Rng::new(3);
        r.next_u64();
        assert_eq!(Rng::from_state(r.state()), r);
    }

    #[test]
    fn state() {
        use crate::data::rng::Rng;

        assert_ne!(Rng::new(0).state(), 0);
    }

    #[test]
    fn next_u64() {
        use crate::data::rng::Rng;

        let mut r = Rng::new(9);
        assert_ne!(r.next_u64(), r.next_u64());
    }

    #[test]
    fn below() {
        use crate::data::rng::Rng;

        let mut r = Rng::new(4);
        assert!((0..1000).all(|_| r.below(3) < 3));
    }

    #[test]
    fn shuffle() {
        use crate::data::rng::Rng;

        let mut v: Vec<usize> = (0..10).collect();
        Rng::new(1).shuffle(&mut v);
        let mut sorted = v.clone();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
    }
}
