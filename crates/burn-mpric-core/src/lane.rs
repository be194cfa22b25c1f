//! What the device path needs of a one-element or one-dimensional tensor, so that its
//! arithmetic (the update rules, [`LaneRule`](crate::optim::LaneRule); the loss scale's rule,
//! [`DeviceScaleRule::adjust`](crate::scale::DeviceScaleRule::adjust)) is written once and runs
//! on either edition's tensors, or on the host ([`Host`]) where a test checks it.

/// A one-dimensional float tensor of an edition (`E` names it: Burn 0.21's `Tensor<B, 1>` and
/// Burn 0.22's `Tensor<1>` are each a `Lane` of their own edition), with the element-wise ops
/// the device path is made of. Each method is the Burn method of the same name.
///
/// ```
/// use burn_mpric_core::lane::{Host, Lane};
///
/// let two = <f32 as Lane<Host>>::f32_value(2.0, &());
/// assert_eq!(Lane::<Host>::add_scalar(Lane::<Host>::square(two), 1.0), 5.0);
/// ```
pub trait Lane<E>: Clone {
    /// The edition's boolean tensor of the same shape.
    type Mask: Clone;
    /// Where tensors live.
    type Device;

    /// `self + other`, element-wise.
    fn add(self, other: Self) -> Self;
    /// `self - other`, element-wise.
    fn sub(self, other: Self) -> Self;
    /// `self * other`, element-wise.
    fn mul(self, other: Self) -> Self;
    /// `self / other`, element-wise.
    fn div(self, other: Self) -> Self;
    /// `self + value`.
    fn add_scalar(self, value: f64) -> Self;
    /// `self * value`.
    fn mul_scalar(self, value: f64) -> Self;
    /// `-self`.
    fn neg(self) -> Self;
    /// The square root.
    fn sqrt(self) -> Self;
    /// `self * self`.
    fn square(self) -> Self;
    /// At least `min`.
    fn clamp_min(self, min: f32) -> Self;
    /// At most `max`.
    fn clamp_max(self, max: f32) -> Self;
    /// `value` where `mask` is true, `self` elsewhere.
    fn mask_where(self, mask: Self::Mask, value: Self) -> Self;
    /// `value` where `mask` is true, `self` elsewhere.
    fn mask_fill(self, mask: Self::Mask, value: f32) -> Self;
    /// Where `self` equals `value`.
    fn equal_elem(self, value: f32) -> Self::Mask;
    /// `len` zeros at f32 (whatever dtype the backend creates floats at).
    fn f32_zeros(len: usize, device: &Self::Device) -> Self;
    /// One element, `value`, at f32.
    fn f32_value(value: f32, device: &Self::Device) -> Self;
}

/// A one-dimensional int tensor of an edition, with the ops the loss scale's counters need;
/// its masks are its float [`Lane`]'s.
///
/// ```
/// use burn_mpric_core::lane::{Host, IntLane};
///
/// let left = <i64 as IntLane<Host>>::sub_scalar(1, 1);
/// assert!(IntLane::<Host>::equal_elem(left, 0));
/// ```
pub trait IntLane<E>: Clone {
    /// The edition's boolean tensor of the same shape.
    type Mask: Clone;

    /// `self + value`.
    fn add_scalar(self, value: i64) -> Self;
    /// `self - value`.
    fn sub_scalar(self, value: i64) -> Self;
    /// Element-wise sum.
    fn add(self, other: Self) -> Self;
    /// Element-wise product.
    fn mul(self, other: Self) -> Self;
    /// Times a whole number.
    fn mul_scalar(self, value: i64) -> Self;
    /// Divided by a positive whole number, rounded towards zero.
    fn div_scalar(self, value: i64) -> Self;
    /// The remainder of the division by a positive whole number, of a value 0 or more,
    /// exact at any size the lane's integers hold.
    fn rem_scalar(self, value: i64) -> Self;
    /// At least `min`.
    fn clamp_min(self, min: i64) -> Self;
    /// `value` where `mask` is true, `self` elsewhere.
    fn mask_where(self, mask: Self::Mask, value: Self) -> Self;
    /// `value` where `mask` is true, `self` elsewhere.
    fn mask_fill(self, mask: Self::Mask, value: i64) -> Self;
    /// Where `self` equals `value`.
    fn equal_elem(self, value: i64) -> Self::Mask;
    /// Where `self` is `value` or more.
    fn greater_equal_elem(self, value: i64) -> Self::Mask;
    /// Where `self` is `value` or less.
    fn lower_equal_elem(self, value: i64) -> Self::Mask;
    /// Zeros of the same shape.
    fn zeros_like(&self) -> Self;
}

/// One-element values on the host as lanes (`f32` and `i64`, masks `bool`): the device path's
/// arithmetic run without a tensor, for tests and examples. Scalars are rounded to `f32` first,
/// as an f32 tensor takes them.
///
/// ```
/// use burn_mpric_core::lane::{Host, Lane};
///
/// assert_eq!(Lane::<Host>::mask_fill(1.0_f32, true, 3.0), 3.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host;

impl Lane<Host> for f32 {
    type Mask = bool;
    type Device = ();

    fn add(self, other: Self) -> Self {
        self + other
    }
    fn sub(self, other: Self) -> Self {
        self - other
    }
    fn mul(self, other: Self) -> Self {
        self * other
    }
    fn div(self, other: Self) -> Self {
        self / other
    }
    fn add_scalar(self, value: f64) -> Self {
        self + value as f32
    }
    fn mul_scalar(self, value: f64) -> Self {
        self * value as f32
    }
    fn neg(self) -> Self {
        -self
    }
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
    fn square(self) -> Self {
        self * self
    }
    fn clamp_min(self, min: f32) -> Self {
        self.max(min)
    }
    fn clamp_max(self, max: f32) -> Self {
        self.min(max)
    }
    fn mask_where(self, mask: bool, value: Self) -> Self {
        if mask { value } else { self }
    }
    fn mask_fill(self, mask: bool, value: f32) -> Self {
        if mask { value } else { self }
    }
    fn equal_elem(self, value: f32) -> bool {
        self == value
    }
    fn f32_zeros(_len: usize, _device: &()) -> Self {
        0.0
    }
    fn f32_value(value: f32, _device: &()) -> Self {
        value
    }
}

impl IntLane<Host> for i64 {
    type Mask = bool;

    fn add_scalar(self, value: i64) -> Self {
        self + value
    }
    fn sub_scalar(self, value: i64) -> Self {
        self - value
    }
    fn add(self, other: Self) -> Self {
        self + other
    }
    fn mul(self, other: Self) -> Self {
        self * other
    }
    fn mul_scalar(self, value: i64) -> Self {
        self * value
    }
    fn div_scalar(self, value: i64) -> Self {
        self / value
    }
    fn rem_scalar(self, value: i64) -> Self {
        self % value
    }
    fn clamp_min(self, min: i64) -> Self {
        self.max(min)
    }
    fn mask_where(self, mask: bool, value: Self) -> Self {
        if mask { value } else { self }
    }
    fn mask_fill(self, mask: bool, value: i64) -> Self {
        if mask { value } else { self }
    }
    fn equal_elem(self, value: i64) -> bool {
        self == value
    }
    fn greater_equal_elem(self, value: i64) -> bool {
        self >= value
    }
    fn lower_equal_elem(self, value: i64) -> bool {
        self <= value
    }
    fn zeros_like(&self) -> Self {
        0
    }
}

/// The methods of a [`Lane`] impl for a Burn float tensor type, each the tensor's own method
/// of the same name. Both editions expand it inside their `impl Lane`.
#[doc(hidden)]
#[macro_export]
macro_rules! lane_arithmetic {
    () => {
        fn add(self, other: Self) -> Self {
            Self::add(self, other)
        }
        fn sub(self, other: Self) -> Self {
            Self::sub(self, other)
        }
        fn mul(self, other: Self) -> Self {
            Self::mul(self, other)
        }
        fn div(self, other: Self) -> Self {
            Self::div(self, other)
        }
        fn add_scalar(self, value: f64) -> Self {
            Self::add_scalar(self, value)
        }
        fn mul_scalar(self, value: f64) -> Self {
            Self::mul_scalar(self, value)
        }
        fn neg(self) -> Self {
            Self::neg(self)
        }
        fn sqrt(self) -> Self {
            Self::sqrt(self)
        }
        fn square(self) -> Self {
            Self::square(self)
        }
        fn clamp_min(self, min: f32) -> Self {
            Self::clamp_min(self, min)
        }
        fn clamp_max(self, max: f32) -> Self {
            Self::clamp_max(self, max)
        }
        fn mask_where(self, mask: Self::Mask, value: Self) -> Self {
            Self::mask_where(self, mask, value)
        }
        fn mask_fill(self, mask: Self::Mask, value: f32) -> Self {
            Self::mask_fill(self, mask, value)
        }
        fn equal_elem(self, value: f32) -> Self::Mask {
            Self::equal_elem(self, value)
        }
    };
}

/// The methods of an [`IntLane`] impl for a Burn int tensor type, each the tensor's own
/// method of the same name.
#[doc(hidden)]
#[macro_export]
macro_rules! int_lane_arithmetic {
    () => {
        fn add_scalar(self, value: i64) -> Self {
            Self::add_scalar(self, value)
        }
        fn sub_scalar(self, value: i64) -> Self {
            Self::sub_scalar(self, value)
        }
        fn add(self, other: Self) -> Self {
            Self::add(self, other)
        }
        fn mul(self, other: Self) -> Self {
            Self::mul(self, other)
        }
        fn mul_scalar(self, value: i64) -> Self {
            Self::mul_scalar(self, value)
        }
        fn div_scalar(self, value: i64) -> Self {
            Self::div_scalar(self, value)
        }
        // Through the integer division rather than Burn's remainder, which on Wgpu divides in
        // f32 (cubecl's WGSL) and is wrong above 2^24.
        fn rem_scalar(self, value: i64) -> Self {
            let whole = Self::div_scalar(self.clone(), value).mul_scalar(value);
            Self::sub(self, whole)
        }
        fn clamp_min(self, min: i64) -> Self {
            Self::clamp_min(self, min)
        }
        fn mask_where(self, mask: Self::Mask, value: Self) -> Self {
            Self::mask_where(self, mask, value)
        }
        fn mask_fill(self, mask: Self::Mask, value: i64) -> Self {
            Self::mask_fill(self, mask, value)
        }
        fn equal_elem(self, value: i64) -> Self::Mask {
            Self::equal_elem(self, value)
        }
        fn greater_equal_elem(self, value: i64) -> Self::Mask {
            Self::greater_equal_elem(self, value)
        }
        fn lower_equal_elem(self, value: i64) -> Self::Mask {
            Self::lower_equal_elem(self, value)
        }
        fn zeros_like(&self) -> Self {
            Self::zeros_like(self)
        }
    };
}
