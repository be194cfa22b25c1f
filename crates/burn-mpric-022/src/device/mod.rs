//! The device path: the skip decided on the device, the host told later (Burn 0.22).
//!
//! The host-read step ([`LossScaler`](crate::LossScaler)) reads one flag between backward
//! and the optimizer; on a GPU that read drains the device and ends a fused stream before
//! the optimizer's kernels are queued. Here the flag never leaves the device until the host
//! asks: [`DeviceScale`] is the loss scale's state machine in tensors (burn-mpric-core's
//! `DeviceScaleRule`), [`DeviceOptimizer`] applies or discards Adam, AdamW or SGD updates by
//! a select on the flag, and [`DeviceLossScaler`] ties them into the step contract, with the
//! outcomes read later in one transaction and replayed by the core.

mod lane;
mod optim;
mod rules;
mod scale;
mod scaler;

pub(crate) use lane::Burn022;
pub use optim::{DeviceOptimizer, DeviceOptimizerRecord};
pub use rules::DeviceRule;
pub use scale::DeviceScale;
pub use scaler::DeviceLossScaler;
