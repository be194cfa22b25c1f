//! The random stream of stochastic rounding: counter-based, so a position in it is three
//! numbers a checkpoint can hold.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rayon::prelude::*;

/// Elements per parallel chunk: each chunk seeks to its own position in the stream, so the
/// numbers do not depend on how many threads draw them.
const CHUNK: usize = 1 << 16;

/// Uniform numbers in `[0, 1)` for stochastic rounding, addressed by `(stream, draw)`: each
/// parameter has its own stream and each of its steps its own draw, so the numbers of a step do
/// not depend on what was drawn before it, and a run resumed at draw `n` repeats the
/// uninterrupted run bit for bit. ChaCha8 keyed by the seed, the stream and the draw, drawn in
/// parallel chunks that each seek to their place (the same numbers on any number of threads).
///
/// # Example
///
/// ```
/// use burn_mpric_core::optim::RoundingStream;
///
/// let stream = RoundingStream::new(42);
/// let first = stream.uniforms(0, 0, 4);
/// assert_eq!(first, RoundingStream::new(42).uniforms(0, 0, 4)); // same seed, same numbers
/// assert_ne!(first, stream.uniforms(0, 1, 4)); // the next draw
/// assert!(first.iter().all(|u| (0.0..1.0).contains(u)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundingStream {
    seed: u64,
}

impl RoundingStream {
    /// The stream of `seed`.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::RoundingStream;
    ///
    /// assert_ne!(RoundingStream::new(1).uniforms(0, 0, 2), RoundingStream::new(2).uniforms(0, 0, 2));
    /// ```
    pub fn new(seed: u64) -> Self {
        Self { seed }
    }

    /// `len` uniforms in `[0, 1)`, each a multiple of 2^-24 (every f32 in the range with 24
    /// significant bits is equally likely), for draw `draw` of stream `stream`.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::optim::RoundingStream;
    ///
    /// let u = RoundingStream::new(0).uniforms(3, 9, 100_000);
    /// let mean = u.iter().map(|&x| f64::from(x)).sum::<f64>() / u.len() as f64;
    /// assert!((mean - 0.5).abs() < 0.01, "{mean}");
    /// ```
    pub fn uniforms(&self, stream: u64, draw: u64, len: usize) -> Vec<f32> {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&self.seed.to_le_bytes());
        key[8..16].copy_from_slice(&stream.to_le_bytes());
        key[16..24].copy_from_slice(&draw.to_le_bytes());
        let mut out = vec![0.0f32; len];
        out.par_chunks_mut(CHUNK)
            .enumerate()
            .for_each(|(chunk, values)| {
                let mut rng = ChaCha8Rng::from_seed(key);
                // One 32-bit word per element: element i is word i of the stream.
                rng.set_word_pos((chunk * CHUNK) as u128);
                for value in values {
                    *value = (rng.next_u32() >> 8) as f32 * (1.0 / (1u32 << 24) as f32);
                }
            });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_chunks_draw_the_sequential_stream() {
        let len = 3 * CHUNK + 17;
        let parallel = RoundingStream::new(9).uniforms(4, 2, len);
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&9u64.to_le_bytes());
        key[8..16].copy_from_slice(&4u64.to_le_bytes());
        key[16..24].copy_from_slice(&2u64.to_le_bytes());
        let mut rng = ChaCha8Rng::from_seed(key);
        let sequential: Vec<f32> = (0..len)
            .map(|_| (rng.next_u32() >> 8) as f32 / (1u32 << 24) as f32)
            .collect();
        assert_eq!(parallel, sequential);
    }
}
