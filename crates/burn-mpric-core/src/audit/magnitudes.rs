//! [`Magnitudes`]: how large the values of a set of tensors are, as a histogram of their
//! binary exponents, and where they fall against f16's and bf16's ranges.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// f16's largest finite value, (2 − 2⁻¹⁰)·2¹⁵.
pub const F16_MAX: f32 = 65504.0;
/// The binary exponent of f16's smallest normal value, 2⁻¹⁴: below it f16 keeps fewer bits.
pub const F16_MIN_NORMAL_EXP: i32 = -14;
/// The binary exponent of f16's smallest subnormal value, 2⁻²⁴: below it values flush to zero.
pub const F16_MIN_SUBNORMAL_EXP: i32 = -24;
/// bf16's largest finite value, (2 − 2⁻⁷)·2¹²⁷.
pub const BF16_MAX: f32 = 3.389_531_4e38;
/// The binary exponent of bf16's (and f32's) smallest normal value, 2⁻¹²⁶.
pub const BF16_MIN_NORMAL_EXP: i32 = -126;

/// The exponent of f32's smallest subnormal, 2⁻¹⁴⁹, the lowest a histogram holds.
const LOWEST_EXP: i32 = -149;
/// The exponent of f32's largest finite values.
const HIGHEST_EXP: i32 = 127;

/// A summary of many values: how many, how many are zero or not finite, the largest finite
/// magnitude, and a histogram of the binary exponents of the others (`e` with
/// `2^e <= |x| < 2^(e+1)`). Loss scales are powers of two, so the histogram at another scale
/// is this one shifted.
///
/// ```
/// use burn_mpric_core::audit::Magnitudes;
///
/// let mut m = Magnitudes::default();
/// m.add(&[0.0, 3.0, -0.25, f32::INFINITY, 1e-6]);
/// assert_eq!((m.values, m.zeros, m.non_finite), (5, 1, 1));
/// assert_eq!(m.max_abs, 3.0);
/// assert_eq!(m.exponent_range(), Some((-20, 1)));
/// // 1e-6 lies below f16's smallest normal (2^-14) at a scale of 1, not at 2^8.
/// assert_eq!(m.share_below(-14, 0), 1.0 / 3.0);
/// assert_eq!(m.share_below(-14, 8), 0.0);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Magnitudes {
    /// Values seen.
    pub values: u64,
    /// Values that were exactly zero.
    pub zeros: u64,
    /// Values that were inf or NaN.
    pub non_finite: u64,
    /// The largest finite magnitude (0 when there is none).
    pub max_abs: f32,
    /// Nonzero finite values by binary exponent.
    pub exponents: BTreeMap<i32, u64>,
}

/// The binary exponent of a finite nonzero f32, read from its bits (subnormals included).
fn exponent(x: f32) -> i32 {
    let bits = x.to_bits() & 0x7fff_ffff;
    let biased = (bits >> 23) as i32;
    if biased == 0 {
        LOWEST_EXP + (31 - bits.leading_zeros() as i32)
    } else {
        biased - 127
    }
}

impl Magnitudes {
    /// Counts `values` in.
    ///
    /// ```
    /// use burn_mpric_core::audit::Magnitudes;
    ///
    /// let mut m = Magnitudes::default();
    /// m.add(&[1.5, f32::from_bits(1)]);
    /// assert_eq!(m.exponent_range(), Some((-149, 0)));
    /// ```
    pub fn add(&mut self, values: &[f32]) {
        let mut counts = [0u64; (HIGHEST_EXP - LOWEST_EXP + 1) as usize];
        for &x in values {
            if x == 0.0 {
                self.zeros += 1;
            } else if !x.is_finite() {
                self.non_finite += 1;
            } else {
                self.max_abs = self.max_abs.max(x.abs());
                counts[(exponent(x) - LOWEST_EXP) as usize] += 1;
            }
        }
        self.values += values.len() as u64;
        for (i, n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
            *self.exponents.entry(i as i32 + LOWEST_EXP).or_default() += n;
        }
    }

    /// Adds another summary's counts to this one.
    ///
    /// ```
    /// use burn_mpric_core::audit::Magnitudes;
    ///
    /// let (mut a, mut b) = (Magnitudes::default(), Magnitudes::default());
    /// a.add(&[1.0]);
    /// b.add(&[-8.0, 0.0]);
    /// a.merge(&b);
    /// assert_eq!((a.values, a.zeros, a.max_abs), (3, 1, 8.0));
    /// ```
    pub fn merge(&mut self, other: &Magnitudes) {
        self.values += other.values;
        self.zeros += other.zeros;
        self.non_finite += other.non_finite;
        self.max_abs = self.max_abs.max(other.max_abs);
        for (e, n) in &other.exponents {
            *self.exponents.entry(*e).or_default() += n;
        }
    }

    /// Nonzero finite values.
    ///
    /// ```
    /// use burn_mpric_core::audit::Magnitudes;
    ///
    /// let mut m = Magnitudes::default();
    /// m.add(&[0.0, 2.0, f32::NAN]);
    /// assert_eq!(m.nonzero(), 1);
    /// ```
    pub fn nonzero(&self) -> u64 {
        self.exponents.values().sum()
    }

    /// The lowest and highest binary exponent of the nonzero finite values.
    ///
    /// ```
    /// use burn_mpric_core::audit::Magnitudes;
    ///
    /// assert_eq!(Magnitudes::default().exponent_range(), None);
    /// ```
    pub fn exponent_range(&self) -> Option<(i32, i32)> {
        Some((
            *self.exponents.keys().next()?,
            *self.exponents.keys().next_back()?,
        ))
    }

    /// How many powers of two lie between the largest magnitude and `limit` (a dtype's
    /// largest finite value): negative when the values exceed it; `None` without a nonzero
    /// finite value.
    ///
    /// ```
    /// use burn_mpric_core::audit::{F16_MAX, Magnitudes};
    ///
    /// let mut m = Magnitudes::default();
    /// m.add(&[F16_MAX / 8.0]);
    /// assert_eq!(m.headroom(F16_MAX), Some(3.0));
    /// ```
    pub fn headroom(&self, limit: f32) -> Option<f32> {
        (self.max_abs > 0.0).then(|| (f64::from(limit) / f64::from(self.max_abs)).log2() as f32)
    }

    /// The share of the nonzero finite values whose magnitude, multiplied by `2^shift` (a
    /// loss scale), lies below `2^exp`; 0 when there are none.
    ///
    /// ```
    /// use burn_mpric_core::audit::Magnitudes;
    ///
    /// let mut m = Magnitudes::default();
    /// m.add(&[1.0, 2.0, 4.0, 8.0]);
    /// assert_eq!(m.share_below(2, 0), 0.5);
    /// assert_eq!(m.share_below(2, 1), 0.25);
    /// ```
    pub fn share_below(&self, exp: i32, shift: i32) -> f64 {
        let all = self.nonzero();
        if all == 0 {
            return 0.0;
        }
        let below: u64 = self
            .exponents
            .range(..exp.saturating_sub(shift))
            .map(|(_, n)| n)
            .sum();
        below as f64 / all as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponents_match_log2_for_normals_and_subnormals() {
        for x in [1.0f32, 1.999, 2.0, 0.75, 1e-3, 3e38, 1e-40, 1e-45, -5.5] {
            assert_eq!(exponent(x), x.abs().log2().floor() as i32, "{x}");
        }
    }

    #[test]
    fn shares_count_only_nonzero_finite_values() {
        let mut m = Magnitudes::default();
        m.add(&[0.0, 0.0, f32::NAN, 2f32.powi(-20), 1.0]);
        assert_eq!(m.share_below(F16_MIN_NORMAL_EXP, 0), 0.5);
        assert_eq!(m.share_below(F16_MIN_NORMAL_EXP, 6), 0.0);
        assert_eq!(m.headroom(F16_MAX).map(f32::round), Some(16.0));
    }
}
