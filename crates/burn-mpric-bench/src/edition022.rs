//! The Burn 0.22 edition (`burn-mpric-022`) on the decorator's training workloads: the MLP
//! step and the transformer steps, each at f32 (bare Burn 0.22: the edition's own baseline),
//! `mixed_f16` and `mixed_bf16` (the model autocast by parameter reparameterization, the
//! batch cast for compute, the loss at f32), on Burn 0.22's Flex and Wgpu. Time and peak
//! memory are ratios to that baseline, measured interleaved in one run as the decorator's
//! rows are; the numeric error is against the baseline's prediction after three steps. The
//! models and batches take the same deterministic values as the decorator's rows
//! ([`workloads::values`]), so the two editions' errors are comparable too.

use std::sync::Arc;

use burn_mpric_022::{autocast, cast_for_compute, cast_for_output, resolve_policy};
use burn_mpric_core::{Policy, ResolvedPolicy};
use burn022::module::{Module, ModuleMapper, Param};
use burn022::nn::loss::{MseLoss, Reduction};
use burn022::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn022::nn::{Linear, LinearConfig, Relu};
use burn022::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn022::tensor::{Device, FloatDType, Tensor, TensorData};

use crate::guard::guarded;
use crate::harness::{Budget, Case};
use crate::memory::MemorySource;
use crate::run::{Factory, Prepared, Row, Sizes, measure_group, mlp_spec};
use crate::workloads::{Scaling, Spec, Workload, init_bound, values};

/// A Burn 0.22 device to run the edition on, and how its memory is read.
pub struct Setup022 {
    /// The backend's name in the report (`flex (burn 0.22)`, ...).
    pub name: &'static str,
    /// The device; the cases run on its autodiff form.
    pub device: Device,
    /// Where peak memory is read.
    pub memory: MemorySource,
    /// The workload sizes (the decorator's on the same kind of backend).
    pub sizes: Sizes,
    /// The timing budget.
    pub budget: Budget,
}

/// Device bytes in use, from Burn 0.22's allocator report (polled during a case).
pub fn pool_memory(device: Device) -> MemorySource {
    MemorySource::Device(Arc::new(move || {
        device
            .memory_pool_usage()
            .map(|usage| usage.bytes_in_use)
            .ok_or_else(|| "this Burn 0.22 backend reports no memory pool usage".to_string())
    }))
}

/// The variants of every 0.22 group: the baseline first.
const VARIANTS: [(&str, Option<&str>); 3] = [
    ("0.22 f32 (bare Burn 0.22)", None),
    ("0.22 mixed_f16", Some("mixed_f16")),
    ("0.22 mixed_bf16", Some("mixed_bf16")),
];

/// The learning rate and the steps before the prediction, as the decorator's rows use.
const LR: f64 = 1e-3;
const ERROR_STEPS: usize = 3;

/// Replaces every float parameter that is not constant with deterministic values (uniform,
/// bound `1/sqrt(fan_in)`), as the decorator's rows do.
struct Deterministic {
    device: Device,
    seed: u64,
}

impl ModuleMapper for Deterministic {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        self.seed += 1;
        let seed = self.seed;
        let device = self.device.clone();
        param.map(|t| {
            let dims = t.dims();
            let host = to_f32(t.clone());
            let Some(bound) = init_bound(&dims, &host) else {
                return t;
            };
            let require_grad = t.is_require_grad();
            tensor::<D>(dims, seed, bound, &device).set_require_grad(require_grad)
        })
    }
}

fn tensor<const D: usize>(shape: [usize; D], seed: u64, bound: f32, device: &Device) -> Tensor<D> {
    let n = shape.iter().product();
    Tensor::from_data(TensorData::new(values(n, seed, bound), shape), device)
}

pub(crate) fn to_f32<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.cast(FloatDType::F32)
        .into_data()
        .try_to_vec::<f32>()
        .expect("f32 data")
}

/// A model of the workloads.
pub(crate) enum Model {
    /// `Vec<Linear>` with ReLU between layers.
    Mlp(Vec<Linear>),
    /// Burn 0.22's post-norm encoder.
    Transformer(TransformerEncoder),
}

impl Model {
    pub(crate) fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        match self {
            Model::Mlp(layers) => {
                let [b, n, d] = x.dims();
                let mut x: Tensor<2> = x.reshape([b * n, d]);
                for (i, layer) in layers.iter().enumerate() {
                    x = layer.forward(x);
                    if i + 1 < layers.len() {
                        x = Relu::new().forward(x);
                    }
                }
                let out = x.dims()[1];
                x.reshape([b, n, out])
            }
            Model::Transformer(encoder) => encoder.forward(TransformerEncoderInput::new(x)),
        }
    }

    fn map(self, mapper: &mut impl ModuleMapper) -> Self {
        match self {
            Model::Mlp(layers) => Model::Mlp(layers.map(mapper)),
            Model::Transformer(encoder) => Model::Transformer(encoder.map(mapper)),
        }
    }

    pub(crate) fn autocast(self, policy: ResolvedPolicy) -> Self {
        match self {
            Model::Mlp(layers) => Model::Mlp(autocast(layers, policy).expect("autocast")),
            Model::Transformer(encoder) => {
                Model::Transformer(autocast(encoder, policy).expect("autocast"))
            }
        }
    }

    fn step(
        self,
        optim: &mut ModuleOptimizer,
        grads_of: impl FnOnce(&Self) -> GradientsParams,
    ) -> Self {
        let grads = grads_of(&self);
        self.apply(optim, LR, grads)
    }

    /// One optimizer step with `grads` at learning rate `lr`.
    pub(crate) fn apply(
        self,
        optim: &mut ModuleOptimizer,
        lr: f64,
        grads: GradientsParams,
    ) -> Self {
        match self {
            Model::Mlp(layers) => Model::Mlp(optim.step(lr, layers, grads)),
            Model::Transformer(encoder) => Model::Transformer(optim.step(lr, encoder, grads)),
        }
    }

    /// The model with its parameters stored as `lp` keeps them (bf16 for bf16 master weights).
    pub(crate) fn store_params<R: burn_mpric_022::DeviceRule>(
        self,
        lp: &burn_mpric_022::optim::LowPrecisionOptimizer<R>,
    ) -> Self {
        match self {
            Model::Mlp(layers) => Model::Mlp(lp.store_params(layers)),
            Model::Transformer(encoder) => Model::Transformer(lp.store_params(encoder)),
        }
    }

    /// Parameter elements.
    pub(crate) fn num_params(&self) -> usize {
        match self {
            Model::Mlp(layers) => layers.num_params(),
            Model::Transformer(encoder) => encoder.num_params(),
        }
    }

    /// Parameter tensors.
    pub(crate) fn num_tensors(&self) -> usize {
        struct Count(usize);
        impl burn022::module::ModuleVisitor for Count {
            fn visit_float<const D: usize>(&mut self, _: &Param<Tensor<D>>) {
                self.0 += 1;
            }
        }
        let mut count = Count(0);
        match self {
            Model::Mlp(layers) => layers.visit(&mut count),
            Model::Transformer(encoder) => encoder.visit(&mut count),
        }
        count.0
    }

    pub(crate) fn grads(&self, loss: &Tensor<1>) -> GradientsParams {
        match self {
            Model::Mlp(layers) => GradientsParams::from_grads(loss.backward(), layers),
            Model::Transformer(encoder) => GradientsParams::from_grads(loss.backward(), encoder),
        }
    }
}

/// One training step per iteration: batch cast for compute, forward, loss at f32, backward,
/// Adam (gradients reach it at the parameters' f32 through the reparameterization).
struct TrainCase022 {
    model: Option<Model>,
    optim: ModuleOptimizer,
    /// The batch as host data: a new tensor at every step, as a data loader makes it.
    x: TensorData,
    y: Tensor<3>,
    policy: Option<ResolvedPolicy>,
    device: Device,
}

impl TrainCase022 {
    fn input(&self) -> Tensor<3> {
        let x = Tensor::from_data(self.x.clone(), &self.device);
        match &self.policy {
            Some(policy) => cast_for_compute(x, policy),
            None => x,
        }
    }

    fn train_step(&mut self, sample: &dyn Fn()) {
        let model = self.model.take().expect("model");
        let out = model.forward(self.input());
        let out = match &self.policy {
            Some(policy) => cast_for_output(out, policy),
            None => out,
        };
        let loss = MseLoss::new().forward(out, self.y.clone(), Reduction::Mean);
        sample();
        let model = model.step(&mut self.optim, |model| model.grads(&loss));
        sample();
        self.model = Some(model);
    }

    fn sync(&self) {
        self.device.sync().expect("device sync");
    }
}

impl Case for TrainCase022 {
    fn step(&mut self) {
        self.train_step(&|| {});
        self.sync();
    }

    fn step_sampled(&mut self, sample: &dyn Fn()) {
        self.train_step(sample);
        self.sync();
    }

    fn output(&mut self) -> Vec<f32> {
        for _ in 0..ERROR_STEPS {
            self.train_step(&|| {});
        }
        let model = self.model.as_ref().expect("model");
        to_f32(model.forward(self.input()))
    }
}

/// The model of `spec` with its deterministic parameters, on `device` (autodiff form).
pub(crate) fn model(spec: &Spec, device: &Device) -> Model {
    let (model, seed) = match spec {
        Spec::Mlp { dims, .. } => {
            let layers: Vec<Linear> = dims
                .windows(2)
                .map(|w| LinearConfig::new(w[0], w[1]).init(device))
                .collect();
            (Model::Mlp(layers), 20)
        }
        Spec::Transformer {
            d_model,
            heads,
            d_ff,
            layers,
            ..
        } => {
            let encoder = TransformerEncoderConfig::new(*d_model, *d_ff, *heads, *layers)
                .with_dropout(0.0)
                .init(device);
            (Model::Transformer(encoder), 30)
        }
        Spec::Matmul { .. } | Spec::Conv2d { .. } => {
            unreachable!("the 0.22 edition runs the training workloads only")
        }
    };
    model.map(&mut Deterministic {
        device: device.clone(),
        seed,
    })
}

/// The batch of `spec` (host data, loaded at every step) and its target, on `device`.
pub(crate) fn batch(spec: &Spec, device: &Device) -> (TensorData, Tensor<3>) {
    let (x_shape, y_shape, x_seed, y_seed) = match spec {
        Spec::Mlp { batch, dims, .. } => {
            let last = *dims.last().expect("dims");
            ([1, *batch, dims[0]], [1, *batch, last], 4, 5)
        }
        Spec::Transformer {
            batch,
            seq,
            d_model,
            ..
        } => {
            let shape = [*batch, *seq, *d_model];
            (shape, shape, 6, 7)
        }
        Spec::Matmul { .. } | Spec::Conv2d { .. } => {
            unreachable!("the 0.22 edition runs the training workloads only")
        }
    };
    let x = tensor::<3>(x_shape, x_seed, 1.0, device).into_data();
    (x, tensor::<3>(y_shape, y_seed, 1.0, device))
}

/// The case of `spec` under `policy` (none: bare Burn 0.22), on `device` (autodiff form).
pub(crate) fn build(spec: &Spec, policy: Option<ResolvedPolicy>, device: &Device) -> Box<dyn Case> {
    let model = model(spec, device);
    let model = match policy {
        Some(policy) => model.autocast(policy),
        None => model,
    };
    let (x, y) = batch(spec, device);
    Box::new(TrainCase022 {
        model: Some(model),
        optim: AdamConfig::new().init(),
        x,
        y,
        policy,
        device: device.clone(),
    })
}

fn prepared(setup: &Setup022, spec: &Spec) -> Vec<Prepared> {
    let device = setup.device.clone().autodiff();
    VARIANTS
        .iter()
        .map(|(name, policy)| {
            let resolved = policy.map(|text| {
                let policy: Policy = text.parse().expect("a preset");
                resolve_policy(policy, &device)
                    .map_err(|e| format!("not supported by this backend: {e}"))
            });
            let factory = match resolved {
                Some(Err(reason)) => Err(reason),
                resolved => {
                    let policy = resolved.map(|r| r.expect("checked above"));
                    let (spec, device) = (spec.clone(), device.clone());
                    Ok(Box::new(move || build(&spec, policy, &device)) as Factory)
                }
            };
            Prepared {
                variant: name.to_string(),
                policy: policy.map(str::to_string),
                factory,
                memory_factory: None,
                has_output: true,
                note: Some("Burn 0.22 edition (burn-mpric-022); ratios are to its own f32 row"),
            }
        })
        .collect()
}

/// The edition's rows for the selected training workloads.
pub fn run(setup: &Setup022, selected: &[Workload]) -> Vec<Row> {
    let mut rows = Vec::new();
    for workload in selected {
        let spec = match workload {
            Workload::MlpStep => mlp_spec(&setup.sizes, Scaling::None),
            Workload::TransformerBlockStep => setup.sizes.transformer.clone(),
            Workload::TransformerActivationsStep => setup.sizes.transformer_activations.clone(),
            _ => continue,
        };
        rows.extend(measure_group(
            setup.name,
            &setup.memory,
            *workload,
            &spec,
            prepared(setup, &spec),
            setup.budget,
        ));
    }
    rows
}

/// Creates and reads back a Burn 0.22 tensor: whether the device starts here.
pub(crate) fn probe022(device: &burn022::tensor::Device) -> Result<(), String> {
    let device = device.clone();
    guarded(move || {
        let _ = burn022::tensor::Tensor::<1>::from_floats([1.0, 2.0], &device).into_data();
    })
}

#[cfg(feature = "cuda022")]
pub(crate) fn cuda022() -> Result<burn022::tensor::Device, String> {
    let device = burn022::tensor::Device::cuda(0);
    probe022(&device)
        .map(|()| device)
        .map_err(|why| format!("no CUDA device: {why}"))
}

#[cfg(not(feature = "cuda022"))]
pub(crate) fn cuda022() -> Result<burn022::tensor::Device, String> {
    Err("this binary was built without the `cuda022` feature (Burn 0.22's CUDA backend)".into())
}
