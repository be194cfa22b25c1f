//! What the device path's update rules need of a one-dimensional f32 tensor, so that they are
//! written once ([`LaneRule`](super::LaneRule)) and run on either edition's tensors.

/// A one-dimensional float tensor of an edition (`E` names it: Burn 0.21's `Tensor<B, 1>` and
/// Burn 0.22's `Tensor<1>` are each a `Lane` of their own edition), with the element-wise ops
/// the update rules are made of. Each method is the Burn method of the same name.
///
/// ```
/// use burn_mpric_core::optim::Lane;
///
/// // A host value as a lane: what an edition's tensor does, element by element.
/// #[derive(Clone, Debug, PartialEq)]
/// struct V(f64);
/// struct Host;
/// impl Lane<Host> for V {
///     type Mask = bool;
///     type Device = ();
///     fn add(self, o: Self) -> Self { V(self.0 + o.0) }
///     fn sub(self, o: Self) -> Self { V(self.0 - o.0) }
///     fn mul(self, o: Self) -> Self { V(self.0 * o.0) }
///     fn div(self, o: Self) -> Self { V(self.0 / o.0) }
///     fn add_scalar(self, v: f64) -> Self { V(self.0 + v) }
///     fn mul_scalar(self, v: f64) -> Self { V(self.0 * v) }
///     fn neg(self) -> Self { V(-self.0) }
///     fn sqrt(self) -> Self { V(self.0.sqrt()) }
///     fn square(self) -> Self { V(self.0 * self.0) }
///     fn mask_where(self, m: bool, v: Self) -> Self { if m { v } else { self } }
///     fn mask_fill(self, m: bool, v: f32) -> Self { if m { V(v.into()) } else { self } }
///     fn equal_elem(self, v: f32) -> bool { self.0 == f64::from(v) }
///     fn f32_zeros(_: usize, _: &()) -> Self { V(0.0) }
///     fn f32_value(v: f32, _: &()) -> Self { V(v.into()) }
/// }
/// assert_eq!(V::f32_value(2.0, &()).square().add_scalar(1.0), V(5.0));
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

/// The arithmetic methods of a [`Lane`] impl for a Burn tensor type: each calls the tensor's
/// own method of the same name. Both editions expand it inside their `impl Lane`.
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
