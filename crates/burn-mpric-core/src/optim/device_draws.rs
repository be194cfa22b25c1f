//! Stochastic rounding's random numbers made where the tensors are: each element's index run
//! through a keyed permutation, a six-round Feistel network on two 15-bit halves, whose round
//! keys come from ChaCha8 at the same `(seed, stream, draw)` address as [`RoundingStream`]'s
//! numbers. A step sends the device four small scalars, not a number per element.
//!
//! The arithmetic is the kind Burn's fusion merges into one kernel (integer add, mul, div and
//! remainder; Burn 0.21's fusion leaves bitwise ops as kernels of their own), and every value
//! stays below 2^31, so i32 backends (Wgpu) and i64 ones (Flex) compute the same numbers
//! without overflow: `x * (2x + 1)` of a 15-bit `x` is at most 2,147,385,345.
//!
//! What the numbers are: within one draw, distinct elements get distinct 30-bit values (a
//! permutation), of which the top 24 bits make the uniform in `[0, 1)`; from one draw to the
//! next every key changes, so an element's uniforms over the steps are independent draws.
//!
//! [`RoundingStream`]: super::RoundingStream

use crate::lane::{Host, IntLane};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

/// The half width of the permutation: 15 bits.
const HALF: i64 = 1 << 15;

/// The rounds of the Feistel network: with four, the first 2^20 indices of a draw fill 256
/// buckets of `[0, 1)` unevenly (chi-square 2,300 to 3,000 where 255 is expected); from six
/// on, the tests below pass.
const ROUNDS: usize = 6;

/// Sets these keys apart from [`RoundingStream`](super::RoundingStream)'s numbers at the same
/// address.
const DOMAIN: &[u8; 8] = b"feistel1";

/// The round keys of one draw of one parameter's stream.
///
/// # Example
///
/// ```
/// use burn_mpric_core::optim::DrawKeys;
///
/// let keys = DrawKeys::new(42, 3, 0);
/// assert_eq!(keys, DrawKeys::new(42, 3, 0)); // an address, not a state
/// assert_ne!(keys, DrawKeys::new(42, 3, 1));
/// let u = keys.uniforms(1000);
/// assert!(u.iter().all(|x| (0.0..1.0).contains(x)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrawKeys {
    rounds: [i64; ROUNDS],
}

impl DrawKeys {
    /// The keys of draw `draw` of stream `stream` under `seed`.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::DrawKeys;
    ///
    /// assert_ne!(DrawKeys::new(1, 0, 0), DrawKeys::new(2, 0, 0));
    /// ```
    pub fn new(seed: u64, stream: u64, draw: u64) -> Self {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..16].copy_from_slice(&stream.to_le_bytes());
        key[16..24].copy_from_slice(&draw.to_le_bytes());
        key[24..].copy_from_slice(DOMAIN);
        let mut rng = ChaCha8Rng::from_seed(key);
        Self {
            rounds: std::array::from_fn(|_| i64::from(rng.next_u32()) % HALF),
        }
    }

    /// Each element's 24 random bits, `0 ..= 2^24 - 1`, from its `index` (below 2^30;
    /// larger indices wrap): the lane arithmetic both editions run on their tensors, and the
    /// host on `i64`s.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::lane::Host;
    /// use burn_mpric_core::optim::DrawKeys;
    ///
    /// let keys = DrawKeys::new(7, 0, 0);
    /// let bits: i64 = keys.bits::<Host, i64>(5);
    /// assert!((0..1 << 24).contains(&bits));
    /// ```
    pub fn bits<E, L: IntLane<E>>(&self, index: L) -> L {
        let mut low = index.clone().rem_scalar(HALF);
        let mut high = index.div_scalar(HALF).rem_scalar(HALF);
        for key in self.rounds {
            let x = high.clone().add_scalar(key).rem_scalar(HALF);
            // A permutation polynomial of Z/2^15 (2x + 1 is odd), then a rotation by 7 bits
            // so that high bits reach the low ones (the polynomial alone never carries down).
            let y = x
                .clone()
                .mul(x.mul_scalar(2).add_scalar(1))
                .rem_scalar(HALF);
            let f = y
                .clone()
                .mul_scalar(1 << 7)
                .rem_scalar(HALF)
                .add(y.div_scalar(1 << 8));
            (low, high) = (high, low.add(f).rem_scalar(HALF));
        }
        high.mul_scalar(1 << 9).add(low.div_scalar(1 << 6))
    }

    /// `len` uniforms in `[0, 1)`, each a multiple of 2^-24, computed on the host: what the
    /// device makes for elements `0..len`.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::DrawKeys;
    ///
    /// let u = DrawKeys::new(0, 0, 0).uniforms(100_000);
    /// let mean = u.iter().map(|&x| f64::from(x)).sum::<f64>() / u.len() as f64;
    /// assert!((mean - 0.5).abs() < 0.01, "{mean}");
    /// ```
    pub fn uniforms(&self, len: usize) -> Vec<f32> {
        (0..len as i64)
            .map(|index| self.bits::<Host, i64>(index) as f32 * UNIT)
            .collect()
    }
}

/// The value of one unit of [`DrawKeys::bits`] in `[0, 1)`: 2^-24.
pub const UNIT: f32 = 1.0 / (1u32 << 24) as f32;

#[cfg(test)]
mod tests {
    use super::*;

    const N: usize = 1 << 20;

    fn correlation(a: &[f32], b: &[f32]) -> f64 {
        let n = a.len() as f64;
        let mean = |v: &[f32]| v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let (ma, mb) = (mean(a), mean(b));
        let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
        for (&x, &y) in a.iter().zip(b) {
            let (dx, dy) = (f64::from(x) - ma, f64::from(y) - mb);
            sab += dx * dy;
            saa += dx * dx;
            sbb += dy * dy;
        }
        sab / (saa * sbb).sqrt()
    }

    #[test]
    fn the_uniforms_fill_the_unit_interval_evenly() {
        let u = DrawKeys::new(11, 2, 5).uniforms(N);
        let mut buckets = [0u64; 256];
        for x in &u {
            buckets[(x * 256.0) as usize] += 1;
        }
        let expected = N as f64 / 256.0;
        let chi2: f64 = buckets
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        // 255 degrees of freedom: mean 255, standard deviation 22.6.
        assert!(chi2 < 255.0 + 5.0 * 22.6, "chi2 {chi2}");
        // Every one of the 24 bits is a fair coin.
        for bit in 0..24 {
            let ones = u
                .iter()
                .filter(|&&x| ((x / UNIT) as u32 >> bit) & 1 == 1)
                .count();
            let share = ones as f64 / N as f64;
            assert!((share - 0.5).abs() < 0.005, "bit {bit}: {share}");
        }
    }

    /// Pairs of elements (neighbours, and elements 2^15 apart, whose high halves differ by
    /// one) fall evenly on a 64 x 64 grid of `[0, 1)^2`.
    #[test]
    fn pairs_of_elements_fill_the_unit_square_evenly() {
        let u = DrawKeys::new(8, 1, 3).uniforms(N + HALF as usize);
        for apart in [1, HALF as usize] {
            let mut cells = vec![0u64; 64 * 64];
            for (a, b) in u[..N].iter().zip(&u[apart..apart + N]) {
                cells[(a * 64.0) as usize * 64 + (b * 64.0) as usize] += 1;
            }
            let expected = N as f64 / 4096.0;
            let chi2: f64 = cells
                .iter()
                .map(|&c| (c as f64 - expected).powi(2) / expected)
                .sum();
            // 4,095 degrees of freedom: mean 4,095, standard deviation 90.5.
            assert!(chi2 < 4095.0 + 5.0 * 90.5, "{apart} apart: chi2 {chi2}");
        }
    }

    #[test]
    fn neighbours_draws_and_streams_are_uncorrelated() {
        let keys = DrawKeys::new(3, 0, 0);
        let u = keys.uniforms(N + 1);
        // One standard deviation of a correlation over 2^20 pairs is about 0.001.
        let bound = 0.006;
        let next = correlation(&u[..N], &u[1..]);
        assert!(next.abs() < bound, "next element: {next}");
        let stride = correlation(&u[..N - 1024], &u[1024..N]);
        assert!(stride.abs() < bound, "1024 apart: {stride}");
        let next_draw = DrawKeys::new(3, 0, 1).uniforms(N);
        let draws = correlation(&u[..N], &next_draw);
        assert!(draws.abs() < bound, "next draw: {draws}");
        let other_stream = DrawKeys::new(3, 1, 0).uniforms(N);
        let streams = correlation(&u[..N], &other_stream);
        assert!(streams.abs() < bound, "next stream: {streams}");
    }

    #[test]
    fn one_draw_is_a_permutation_of_the_indices() {
        let keys = DrawKeys::new(5, 9, 1);
        let full = |index: i64| {
            // The 30-bit value before its low 6 bits are dropped.
            let mut low = index % HALF;
            let mut high = (index / HALF) % HALF;
            for key in keys.rounds {
                let x = (high + key) % HALF;
                let y = (x * (2 * x + 1)) % HALF;
                let f = (y * 128) % HALF + y / 256;
                (low, high) = (high, (low + f) % HALF);
            }
            (high, low)
        };
        let mut seen = std::collections::HashSet::new();
        for index in (0..1i64 << 16).chain([(1 << 30) - 1, 1 << 29]) {
            assert!(seen.insert(full(index)), "index {index} repeats a value");
        }
        // And the lane arithmetic is that same network.
        for index in [0i64, 1, 77, 1 << 15, (1 << 30) - 1] {
            let (high, low) = full(index);
            assert_eq!(keys.bits::<Host, i64>(index), high * 512 + low / 64);
        }
    }
}
