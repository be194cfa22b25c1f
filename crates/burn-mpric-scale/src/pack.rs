//! Gradients packed into flat buffers, so that unscaling and the finiteness check cost one
//! multiply and one reduction per buffer, not per gradient.
//!
//! A training step's gradients are many tensors, most of them small (biases, norms). Unscaling
//! each one on its own, then summing each one, costs two kernels per gradient; on a backend where
//! a kernel's fixed cost dominates (a GPU's launch latency, a software Vulkan driver) that is
//! most of what loss scaling costs. PyTorch answers with one multi-tensor kernel
//! (`_amp_foreach_non_finite_check_and_unscale_`), which Burn's op set does not offer; here the
//! gradients of one device and dtype are copied into one flat buffer (one copy per gradient),
//! unscaled and reduced there once, and handed back as slices of it, which cube backends and
//! Flex make without a copy. Buffers are capped at [`BUCKET_BYTES`], so packing holds at most
//! that much extra memory at once, and a gradient larger than the cap is unscaled in place.

use burn::module::ParamId;
use burn::optim::GradientsParams;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Shape, Tensor};

use crate::dtype::{compute_dtype, float_dtype};

/// The largest packed buffer, in bytes of the gradients' own dtype (PyTorch DDP's buckets are
/// 25 MiB): the extra memory packing holds at once.
pub(crate) const BUCKET_BYTES: usize = 32 << 20;

/// The largest gradient that is packed, in bytes; a larger one is unscaled where it is.
///
/// Packing trades a copy for a kernel. On a CPU backend a kernel's fixed cost is about what
/// copying some tens of KiB costs, so copying large gradients loses more than it saves: on
/// Flex, packing every gradient of the bench's MLP made the scaler cost +3% to +6% of the step
/// where packing none cost +1% to +3%; on lavapipe the reverse. Packing only the gradients up
/// to 64 KiB (biases, norms, small layers: most of a model's tensors, little of its bytes) was
/// the best of the three on both.
pub(crate) const PACK_MAX_BYTES: usize = 64 << 10;

/// A slice of a cube tensor is a view (no copy) when its start and its end lie on the device's
/// offset alignment (256 bytes is the largest wgpu allows a device to require); any other
/// slice is copied. A buffer places the gradients whose byte length keeps the next start
/// aligned first, the others after them: the last one is then a view too.
const SLICE_ALIGN: usize = 256;

/// Registers a flat gradient back at its parameter's rank and shape (and, for `flat.rs`,
/// its dtype).
pub(crate) type Register<B> = Box<dyn FnOnce(&mut GradientsParams, Tensor<B, 1>)>;

/// One gradient, flattened, waiting for its buffer.
struct Entry<B: Backend> {
    id: ParamId,
    flat: Tensor<B, 1>,
    register: Register<B>,
}

impl<B: Backend> Entry<B> {
    fn len(&self) -> usize {
        self.flat.shape().num_elements()
    }

    fn bytes(&self) -> usize {
        self.len() * self.flat.dtype().size()
    }
}

/// Gradients of one device, one dtype and one parameter dtype, to be unscaled together.
struct Bucket<B: Backend> {
    device: B::Device,
    own: DType,
    /// The parameters' dtype (`None`: keep the gradient's own).
    target: Option<FloatDType>,
    entries: Vec<Entry<B>>,
    bytes: usize,
}

impl<B: Backend> Bucket<B> {
    fn new(entry: Entry<B>, target: Option<FloatDType>) -> Self {
        Self {
            device: entry.flat.device(),
            own: entry.flat.dtype(),
            target,
            bytes: entry.bytes(),
            entries: vec![entry],
        }
    }

    fn holds(&self, entry: &Entry<B>, target: Option<FloatDType>) -> bool {
        self.own == entry.flat.dtype()
            && self.target == target
            && self.device == entry.flat.device()
    }

    /// The dtype the buffer is stored at once unscaled.
    fn stored(&self) -> DType {
        self.target.map(DType::from).unwrap_or(self.own)
    }

    /// The entries in buffer order: those that keep the slices aligned first.
    fn into_ordered(self) -> Vec<Entry<B>> {
        let size = self.stored().size();
        let (mut aligned, odd): (Vec<_>, Vec<_>) = self
            .entries
            .into_iter()
            .partition(|entry| (entry.len() * size).is_multiple_of(SLICE_ALIGN));
        aligned.extend(odd);
        aligned
    }
}

/// What each buffer is reduced to, besides being unscaled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Reduce {
    /// Its sum: finite exactly when every element is.
    Sum,
    /// The sum of its magnitudes: finite exactly when every element is, and zero exactly
    /// when every element is (one more pass over the buffer, for the probe's zero check).
    MagnitudeSum,
    /// Its sum of squares: the finiteness check and its share of the global norm.
    SumOfSquares,
}

/// The packed result: one f32 value per buffer, and the parameters each one covers.
#[derive(Debug)]
pub(crate) struct Reduced<B: Backend> {
    /// One-element f32 tensors, one per buffer, on the buffers' devices.
    pub(crate) values: Vec<Tensor<B, 1>>,
    /// The parameters whose gradients each value covers.
    pub(crate) groups: Vec<Vec<ParamId>>,
}

/// The factor gradients are unscaled by: `1/S` known on the host, or held on the device
/// (the device path's scale, never read).
pub(crate) enum Inverse<B: Backend> {
    Host(f32),
    Device(Tensor<B, 1>),
}

impl<B: Backend> Inverse<B> {
    /// `wide * (1/S)` at `wide`'s dtype.
    fn apply(&self, wide: Tensor<B, 1>) -> Tensor<B, 1> {
        match self {
            Self::Host(inverse) => wide.mul_scalar(*inverse),
            Self::Device(inverse) => {
                let factor = inverse.clone().to_device(&wide.device()).cast(wide.dtype());
                wide.mul(factor)
            }
        }
    }
}

/// Whether a one-element tensor is finite, in two ops where `is_finite` takes five: `x * 0`
/// is 0 exactly when `x` is finite (NaN for inf and NaN).
pub(crate) fn finite_value<B: Backend>(value: Tensor<B, 1>) -> Tensor<B, 1, burn::tensor::Bool> {
    value.mul_scalar(0.0).equal_elem(0.0)
}

impl<B: Backend> Reduced<B> {
    /// A one-element bool tensor on the first value's device, true when every reduction is
    /// finite; `None` when there is none (no gradients).
    pub(crate) fn finite_flag(&self) -> Option<Tensor<B, 1, burn::tensor::Bool>> {
        let device = self.values.first()?.device();
        let total = self
            .values
            .iter()
            .map(|v| v.clone().to_device(&device))
            .reduce(Tensor::add)?;
        Some(finite_value(total))
    }
}

/// Collects gradients into buffers, then unscales and reduces each buffer once.
pub(crate) struct Packer<B: Backend> {
    open: Vec<Bucket<B>>,
    full: Vec<Bucket<B>>,
    /// The largest buffer, in bytes.
    capacity: usize,
    /// The largest gradient that is packed, in bytes; larger ones are their own buffer.
    largest_packed: usize,
}

impl<B: Backend> Packer<B> {
    /// Buffers of up to [`BUCKET_BYTES`].
    pub(crate) fn new() -> Self {
        Self::with_limits(BUCKET_BYTES, PACK_MAX_BYTES)
    }

    fn with_limits(capacity: usize, largest_packed: usize) -> Self {
        Self {
            open: Vec::new(),
            full: Vec::new(),
            capacity,
            largest_packed,
        }
    }

    /// Adds the gradient of parameter `id`, to be stored at `target` (the parameter's dtype).
    pub(crate) fn push<const D: usize>(
        &mut self,
        id: ParamId,
        grad: Tensor<B, D>,
        target: Option<FloatDType>,
    ) {
        let shape: Shape = grad.shape();
        let len = shape.num_elements();
        let entry = Entry {
            id,
            flat: grad.reshape([len]),
            register: Box::new(move |grads, flat| grads.register::<B, D>(id, flat.reshape(shape))),
        };
        if entry.bytes() > self.largest_packed {
            // Unscaled where it is.
            self.full.push(Bucket::new(entry, target));
            return;
        }
        match self.open.iter().position(|b| b.holds(&entry, target)) {
            Some(index) if self.open[index].bytes + entry.bytes() <= self.capacity => {
                let bucket = &mut self.open[index];
                bucket.bytes += entry.bytes();
                bucket.entries.push(entry);
            }
            Some(index) => {
                // Full: it takes no more, and this gradient starts the next one.
                self.full.push(self.open.swap_remove(index));
                self.open.push(Bucket::new(entry, target));
            }
            None => self.open.push(Bucket::new(entry, target)),
        }
    }

    /// Unscales every buffer by `inverse` at f32 (f64 stays f64), stores it at its parameters'
    /// dtype, registers each gradient in `grads` as a slice of it, and reduces it as `reduce`
    /// says, at the width it was unscaled in.
    pub(crate) fn finish(
        self,
        grads: &mut GradientsParams,
        inverse: Option<&Inverse<B>>,
        reduce: Reduce,
    ) -> Reduced<B> {
        let mut reduced = Reduced {
            values: Vec::new(),
            groups: Vec::new(),
        };
        for bucket in self.full.into_iter().chain(self.open) {
            let (value, group) = unscale_bucket(bucket, grads, inverse, reduce);
            reduced.values.push(value);
            reduced.groups.push(group);
        }
        reduced
    }
}

fn unscale_bucket<B: Backend>(
    bucket: Bucket<B>,
    grads: &mut GradientsParams,
    inverse: Option<&Inverse<B>>,
    reduce: Reduce,
) -> (Tensor<B, 1>, Vec<ParamId>) {
    let (own, target) = (float_dtype(bucket.own), bucket.target);
    let wide_dtype = compute_dtype(own, target);
    let store = |t: Tensor<B, 1>| match target.or(own) {
        Some(out) => t.cast(out),
        None => t,
    };
    let entries = bucket.into_ordered();
    let lens: Vec<usize> = entries.iter().map(Entry::len).collect();
    let group: Vec<ParamId> = entries.iter().map(|e| e.id).collect();
    let (flats, registers): (Vec<_>, Vec<_>) =
        entries.into_iter().map(|e| (e.flat, e.register)).unzip();
    let packed = if flats.len() == 1 {
        flats.into_iter().next().expect("one gradient")
    } else {
        Tensor::cat(flats, 0)
    };
    // Unscaling runs at f32 (f64 stays f64) and is rounded once, to the parameters' dtype.
    let (stored, wide) = match inverse {
        Some(inverse) => {
            let wide = inverse.apply(packed.cast(wide_dtype));
            (store(wide.clone()), wide)
        }
        None => {
            let stored = store(packed);
            let wide = stored.clone().cast(wide_dtype);
            (stored, wide)
        }
    };
    let value = match reduce {
        Reduce::SumOfSquares => wide.square().sum(),
        // An f64 sum beyond f32's range would turn into an infinity at f32; the check only
        // needs its finiteness: `s - s` is 0, or NaN when `s` is infinite or NaN.
        Reduce::Sum if wide_dtype == FloatDType::F64 => {
            let sum = wide.sum();
            sum.clone().sub(sum)
        }
        Reduce::Sum => wide.sum(),
        Reduce::MagnitudeSum => wide.abs().sum(),
    };
    let mut offset = 0;
    let count = registers.len();
    for (register, len) in registers.into_iter().zip(lens) {
        let slice = if count == 1 {
            stored.clone()
        } else {
            stored.clone().slice(offset..offset + len)
        };
        offset += len;
        register(grads, slice);
    }
    (value.cast(FloatDType::F32), group)
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::tensor::TensorData;

    use super::*;

    const SCALE: f32 = 256.0;

    /// A gradient of `shape` at `dtype` whose elements are `start`, `start + 1`, ... times
    /// `SCALE` (exact in f16 for the sizes used here).
    fn grad<const D: usize>(shape: [usize; D], start: f32, dtype: FloatDType) -> Tensor<Flex, D> {
        let len = shape.iter().product::<usize>();
        let values: Vec<f32> = (0..len).map(|i| (start + i as f32) * SCALE).collect();
        Tensor::<Flex, D>::from_data(TensorData::new(values, shape), &Default::default())
            .cast(dtype)
    }

    fn unscaled_values(grads: &GradientsParams, id: ParamId) -> Vec<f32> {
        let flat = grads
            .get::<Flex, 1>(id)
            .or_else(|| grads.get::<Flex, 2>(id).map(|g| g.reshape([-1])))
            .expect("a gradient");
        flat.cast(FloatDType::F32)
            .into_data()
            .to_vec::<f32>()
            .unwrap()
    }

    fn expected(len: usize, start: f32) -> Vec<f32> {
        (0..len).map(|i| start + i as f32).collect()
    }

    #[test]
    fn small_gradients_share_buffers_and_each_comes_back_unscaled_at_its_shape_and_dtype() {
        use FloatDType::{F16, F32};
        // Buffers of up to 1 KiB; gradients up to 512 B are packed.
        let mut packer = Packer::<Flex>::with_limits(1024, 512);
        let ids: Vec<ParamId> = (0..6).map(|_| ParamId::new()).collect();
        packer.push(ids[0], grad([64], 0.0, F32), Some(F32)); // 256 B: a slice stays aligned
        packer.push(ids[2], grad([5], 200.0, F32), Some(F32)); // odd lengths: placed last
        packer.push(ids[1], grad([4, 16], 100.0, F32), Some(F32)); // 256 B, rank 2
        packer.push(ids[3], grad([7], 300.0, F32), Some(F32));
        packer.push(ids[4], grad([200], 400.0, F32), Some(F32)); // 800 B: unscaled in place
        packer.push(ids[5], grad([64], 7.0, F16), Some(F32)); // f16 for an f32 parameter
        let mut grads = GradientsParams::new();
        let reduced = packer.finish(&mut grads, Some(&Inverse::Host(1.0 / SCALE)), Reduce::Sum);

        let group = |indices: &[usize]| indices.iter().map(|&i| ids[i]).collect::<Vec<_>>();
        assert_eq!(
            reduced.groups,
            vec![group(&[4]), group(&[0, 1, 2, 3]), group(&[5])]
        );
        let shapes = [vec![64], vec![4, 16], vec![5], vec![7], vec![200], vec![64]];
        let starts = [0.0, 100.0, 200.0, 300.0, 400.0, 7.0];
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(
                unscaled_values(&grads, *id),
                expected(shapes[i].iter().product(), starts[i])
            );
        }
        assert_eq!(grads.get::<Flex, 2>(ids[1]).unwrap().dims(), [4, 16]);
        assert_eq!(grads.get::<Flex, 1>(ids[5]).unwrap().dtype(), DType::F32);
        // Each buffer's value is the sum of its unscaled gradients.
        let sums: Vec<f32> = reduced
            .values
            .into_iter()
            .map(|v| v.into_scalar())
            .collect();
        let sum = |i: usize| {
            expected(shapes[i].iter().product(), starts[i])
                .iter()
                .sum::<f32>()
        };
        assert_eq!(
            sums,
            vec![sum(4), sum(0) + sum(1) + sum(2) + sum(3), sum(5)]
        );
    }

    #[test]
    fn a_full_buffer_takes_no_more_and_the_next_gradient_starts_another() {
        let mut packer = Packer::<Flex>::with_limits(1024, 512);
        let ids: Vec<ParamId> = (0..5).map(|_| ParamId::new()).collect();
        for (i, id) in ids.iter().enumerate() {
            packer.push(*id, grad([64], 100.0 * i as f32, FloatDType::F32), None);
        }
        let mut grads = GradientsParams::new();
        let reduced = packer.finish(
            &mut grads,
            Some(&Inverse::Host(1.0 / SCALE)),
            Reduce::SumOfSquares,
        );
        assert_eq!(reduced.groups, vec![ids[..4].to_vec(), ids[4..].to_vec()]);
        let squares: Vec<f32> = reduced
            .values
            .into_iter()
            .map(|v| v.into_scalar())
            .collect();
        let of = |i: usize| {
            expected(64, 100.0 * i as f32)
                .iter()
                .map(|v| v * v)
                .sum::<f32>()
        };
        assert_eq!(squares, vec![of(0) + of(1) + of(2) + of(3), of(4)]);
    }

    #[test]
    fn a_non_finite_element_makes_only_its_own_buffer_non_finite() {
        for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            let mut packer = Packer::<Flex>::with_limits(1024, 512);
            let (small, odd, large) = (ParamId::new(), ParamId::new(), ParamId::new());
            let device = Default::default();
            let mut poisoned = vec![1.0f32; 5];
            poisoned[3] = bad;
            packer.push(small, grad([64], 1.0, FloatDType::F32), None);
            packer.push(
                odd,
                Tensor::<Flex, 1>::from_floats(poisoned.as_slice(), &device),
                None,
            );
            packer.push(large, grad([300], 1.0, FloatDType::F32), None);
            let mut grads = GradientsParams::new();
            let reduced = packer.finish(&mut grads, Some(&Inverse::Host(0.5)), Reduce::Sum);
            let finite: Vec<bool> = reduced
                .values
                .into_iter()
                .map(|v| v.into_scalar().is_finite())
                .collect();
            assert_eq!(finite, vec![true, false], "{bad} in the packed buffer");
            let odd = unscaled_values(&grads, odd);
            assert_eq!(odd[0], 0.5);
            assert_eq!(odd[3].is_nan(), bad.is_nan());
        }
    }
}
