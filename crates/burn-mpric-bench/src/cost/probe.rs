//! A step's op log at a GPU size without running it there: the same model logged at a probe
//! size whose every dimension is a distinct prime (batch 2, sequence 3, heads 5, head width
//! 7, feed-forward 11), each shape then mapped to the GPU size by factoring its dimensions
//! (35 = 5 x 7 is heads x head width, the model width). The ops a step runs do not depend
//! on its sizes, but for the decorator's range checks of the softmax (a row's sum fitting
//! f16, its reciprocal a normal f16), which hold at both sizes where rows have at most
//! 16384 terms; `model_rows` logs directly where a probe cannot stand in.

use burn_mpric::instrument::OpRecord;

use crate::workloads::Spec;

/// The probe's primes, one per dimension.
const PRIMES: [usize; 5] = [2, 3, 5, 7, 11];

/// The longest softmax row the probe stands in for: beyond it the decorator's range checks
/// (and so its ops) may differ from the probe's.
const MAX_ROW: usize = 16384;

/// A probe size standing in for a target size: its spec and, per prime, the target's value.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// The model at the probe size.
    pub spec: Spec,
    /// `(prime, target size)` per dimension.
    map: Vec<(usize, usize)>,
}

impl Probe {
    /// The probe of a transformer `spec`; `None` for other specs, and for sizes the probe
    /// cannot stand in for.
    pub fn of(spec: &Spec) -> Option<Self> {
        let Spec::Transformer {
            batch,
            seq,
            d_model,
            heads,
            d_ff,
            layers,
        } = spec.clone()
        else {
            return None;
        };
        if heads == 0 || !d_model.is_multiple_of(heads) || seq > MAX_ROW {
            return None;
        }
        let [b, s, h, k, f] = PRIMES;
        Some(Self {
            spec: Spec::Transformer {
                batch: b,
                seq: s,
                d_model: h * k,
                heads: h,
                d_ff: f,
                layers,
            },
            map: vec![
                (b, batch),
                (s, seq),
                (h, heads),
                (k, d_model / heads),
                (f, d_ff),
            ],
        })
    }

    /// A probe dimension at the target size: each prime factor replaced by its target;
    /// `None` when the dimension is not made of the probe's primes.
    fn dim(&self, mut d: usize) -> Option<usize> {
        let mut target = 1usize;
        for (prime, size) in &self.map {
            while d.is_multiple_of(*prime) {
                d /= prime;
                target = target.checked_mul(*size)?;
            }
        }
        (d == 1).then_some(target)
    }

    /// A probe shape at the target size.
    pub fn shape(&self, shape: &[usize]) -> Option<Vec<usize>> {
        shape.iter().map(|&d| self.dim(d)).collect()
    }

    /// The probe's op log at the target size; `None` when a shape holds a dimension that is
    /// not made of the probe's primes.
    pub fn map(&self, records: &[OpRecord]) -> Option<Vec<OpRecord>> {
        records
            .iter()
            .map(|r| {
                let pairs = |v: &[(burn::tensor::DType, Vec<usize>)]| {
                    v.iter()
                        .map(|(d, s)| Some((*d, self.shape(s)?)))
                        .collect::<Option<Vec<_>>>()
                };
                Some(OpRecord {
                    op: r.op,
                    float_inputs: r.float_inputs.clone(),
                    float_shapes: r
                        .float_shapes
                        .iter()
                        .map(|s| self.shape(s))
                        .collect::<Option<_>>()?,
                    float_outputs: r.float_outputs.clone(),
                    float_output_shapes: r
                        .float_output_shapes
                        .iter()
                        .map(|s| self.shape(s))
                        .collect::<Option<_>>()?,
                    other_inputs: pairs(&r.other_inputs)?,
                    other_outputs: pairs(&r.other_outputs)?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::step::StepCost;
    use crate::cost::{ModeledVariant, logged_ops};
    use crate::run::Variant;

    #[test]
    fn dimensions_are_mapped_by_their_prime_factors() {
        let target = Spec::Transformer {
            batch: 32,
            seq: 512,
            d_model: 1024,
            heads: 16,
            d_ff: 4096,
            layers: 1,
        };
        let probe = Probe::of(&target).unwrap();
        assert_eq!(probe.dim(2), Some(32));
        assert_eq!(probe.dim(35), Some(1024), "heads x head width");
        assert_eq!(probe.dim(2 * 3), Some(32 * 512));
        assert_eq!(probe.dim(1), Some(1));
        assert_eq!(probe.dim(13), None);
        assert!(Probe::of(&Spec::Matmul { n: 4 }).is_none());
    }

    /// The point of the probe: its log, mapped, is the log of the step run at the target
    /// size, op for op, for f32, mixed (the decorator's softmax included) and pure half.
    #[test]
    fn a_mapped_probe_log_equals_the_log_at_the_target_size() {
        let _heap = crate::memory::heap_tests();
        let target = Spec::Transformer {
            batch: 3,
            seq: 8,
            d_model: 12,
            heads: 2,
            d_ff: 20,
            layers: 1,
        };
        let probe = Probe::of(&target).unwrap();
        for variant in [Variant::Bare, Variant::MixedF16, Variant::PureBf16] {
            let m = ModeledVariant {
                variant,
                softmax: None,
            };
            let direct = logged_ops(m, &target).unwrap();
            let mapped = probe.map(&logged_ops(m, &probe.spec).unwrap()).unwrap();
            assert_eq!(mapped, direct, "{variant:?}");
            assert_eq!(StepCost::of(&mapped), StepCost::of(&direct));
        }
    }
}
