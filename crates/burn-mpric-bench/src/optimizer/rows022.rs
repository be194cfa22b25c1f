//! The Burn 0.22 rows of `mpric-bench --optimizer`: an autocast model's training step under
//! Burn's Adam or `burn_mpric_022::optim`'s `LowPrecisionOptimizer`.

use super::*;

/// A Burn 0.22 training step: the model autocast at `mixed_bf16`, the batch cast for compute,
/// the loss at f32, a `ModuleOptimizer` (Burn's Adam or the wrapper's).
struct Train022 {
    model: Option<Model>,
    optim: burn022::optim::ModuleOptimizer,
    x: burn022::tensor::TensorData,
    y: burn022::tensor::Tensor<3>,
    policy: ResolvedPolicy,
    device: burn022::tensor::Device,
}

impl Train022 {
    fn loss(&self, model: &Model) -> burn022::tensor::Tensor<1> {
        use burn_mpric_022::{cast_for_compute, cast_for_output};
        let x = burn022::tensor::Tensor::<3>::from_data(self.x.clone(), &self.device);
        let out = cast_for_output(
            model.forward(cast_for_compute(x, &self.policy)),
            &self.policy,
        );
        burn022::nn::loss::MseLoss::new().forward(
            out,
            self.y.clone(),
            burn022::nn::loss::Reduction::Mean,
        )
    }

    fn sync(&self) {
        self.device.sync().expect("device sync");
    }
}

impl Case for Train022 {
    fn step(&mut self) {
        let model = self.model.take().expect("model");
        let grads = model.grads(&self.loss(&model));
        self.model = Some(model.apply(&mut self.optim, LR, grads));
        self.sync();
    }

    fn output(&mut self) -> Vec<f32> {
        edition022::to_f32(self.loss(self.model.as_ref().expect("model")))
    }
}

impl OptimCase for Train022 {
    fn params(&self) -> usize {
        self.model.as_ref().expect("model").num_params()
    }

    fn tensors(&self) -> usize {
        self.model.as_ref().expect("model").num_tensors()
    }

    fn measured_step(&mut self, level: &dyn Fn() -> Result<u64, String>) -> Reading {
        let model = self.model.take().expect("model");
        let grads = model.grads(&self.loss(&model));
        self.sync();
        let with_grads = level();
        let started = Instant::now();
        let model = model.apply(&mut self.optim, LR, grads);
        self.sync();
        let optimizer_ms = started.elapsed().as_secs_f64() * 1e3;
        let without_grads = level();
        self.model = Some(model);
        Reading {
            with_grads,
            without_grads,
            optimizer_ms,
        }
    }

    fn optimizer_uploads(&mut self) -> Result<Uploads, String> {
        Err(UPLOADS_NOT_COUNTED_022.into())
    }
}

/// The Burn 0.22 factory of `spec` under `precision`, autocast at `policy`: the same
/// deterministic parameters and batches as the bench's 0.22 rows.
pub(super) fn factory022(
    device: &burn022::tensor::Device,
    policy: ResolvedPolicy,
    spec: &Spec,
    precision: Option<OptimizerPrecision>,
) -> OptimFactory {
    let (device, spec) = (device.clone(), spec.clone());
    Box::new(move |made_batch| {
        let (x, y) = edition022::batch(&spec, &device);
        device.sync().expect("device sync");
        made_batch();
        let model = edition022::model(&spec, &device).autocast(policy);
        let (model, optim) = match precision {
            None => (model, burn022::optim::AdamConfig::new().init()),
            Some(precision) => {
                let lp = burn_mpric_022::optim::LowPrecisionOptimizer::new(
                    burn_mpric_core::scale::DeviceAdamConfig::new(),
                    precision,
                )
                .expect("Adam keeps state");
                // After autocast, which stores parameters at the policy's f32.
                (model.store_params(&lp), lp.init())
            }
        };
        Box::new(Train022 {
            model: Some(model),
            optim,
            x,
            y,
            policy,
            device: device.clone(),
        }) as Box<dyn OptimCase>
    })
}
