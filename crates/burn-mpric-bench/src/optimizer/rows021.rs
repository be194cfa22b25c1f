//! The Burn 0.21 rows of `mpric-bench --optimizer`: the decorator's training step under Burn's
//! Adam or `burn-mpric-optim`'s `LowPrecisionOptimizer`.

use super::*;

/// A model of the Burn 0.21 rows and its prediction at rank `D`.
trait Net<B: AutodiffBackend, const D: usize>: AutodiffModule<B> + 'static {
    fn predict(&self, x: Tensor<B, D>) -> Tensor<B, D>;
}

impl<B: AutodiffBackend> Net<B, 2> for Mlp<B> {
    fn predict(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.forward(x)
    }
}

impl<B: AutodiffBackend> Net<B, 3> for TransformerEncoder<B> {
    fn predict(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        self.forward(TransformerEncoderInput::new(x))
    }
}

fn scalar<B: Backend>(t: Tensor<B, 1>) -> f32 {
    t.cast(FloatDType::F32)
        .into_data()
        .to_vec::<f32>()
        .expect("f32 data")[0]
}

/// A Burn 0.21 training step under an optimizer `O`: the batch loaded from host data at every
/// step, the prediction cast to f32, MSE loss.
struct Train021<B: AutodiffBackend, M, O, const D: usize> {
    model: Option<M>,
    optim: O,
    x: TensorData,
    y: Tensor<B, D>,
    device: B::Device,
}

impl<B, M, O, const D: usize> Train021<B, M, O, D>
where
    B: AutodiffBackend,
    M: Net<B, D>,
    O: Optimizer<M, B>,
{
    fn loss(&self, model: &M) -> Tensor<B, 1> {
        let x = Tensor::<B, D>::from_data(self.x.clone(), &self.device);
        let pred = model.predict(x).cast(FloatDType::F32);
        MseLoss::new().forward(pred, self.y.clone(), Reduction::Mean)
    }

    /// The gradients of one forward and backward; the loss and the graph are gone on return.
    fn grads(&self, model: &M) -> GradientsParams {
        GradientsParams::from_grads(self.loss(model).backward(), model)
    }

    fn sync(&self) {
        B::sync(&self.device).expect("device sync");
    }
}

impl<B, M, O, const D: usize> Case for Train021<B, M, O, D>
where
    B: AutodiffBackend,
    M: Net<B, D>,
    O: Optimizer<M, B> + 'static,
{
    fn step(&mut self) {
        let model = self.model.take().expect("model");
        let grads = self.grads(&model);
        self.model = Some(self.optim.step(LR, model, grads));
        self.sync();
    }

    fn output(&mut self) -> Vec<f32> {
        vec![scalar(self.loss(self.model.as_ref().expect("model")))]
    }
}

impl<B, M, O, const D: usize> OptimCase for Train021<B, M, O, D>
where
    B: AutodiffBackend,
    M: Net<B, D>,
    O: Optimizer<M, B> + 'static,
{
    fn params(&self) -> usize {
        self.model.as_ref().expect("model").num_params()
    }

    fn tensors(&self) -> usize {
        struct Count(usize);
        impl<B: Backend> ModuleVisitor<B> for Count {
            fn visit_float<const D: usize>(&mut self, _: &Param<Tensor<B, D>>) {
                self.0 += 1;
            }
        }
        let mut count = Count(0);
        self.model.as_ref().expect("model").visit(&mut count);
        count.0
    }

    fn measured_step(&mut self, level: &dyn Fn() -> Result<u64, String>) -> Reading {
        let model = self.model.take().expect("model");
        let grads = self.grads(&model);
        self.sync();
        let with_grads = level();
        let started = Instant::now();
        let model = self.optim.step(LR, model, grads);
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
        let model = self.model.take().expect("model");
        let grads = self.grads(&model);
        self.sync();
        let (model, log) = burn_mpric::instrument::record(|| self.optim.step(LR, model, grads));
        self.sync();
        self.model = Some(model);
        Uploads::of(&log)
    }
}

/// The Burn 0.21 case of `model` under `precision` (`None`: Burn's Adam).
fn train021<B, M, const D: usize>(
    model: M,
    x: TensorData,
    y: Tensor<B, D>,
    precision: Option<OptimizerPrecision>,
    device: &B::Device,
) -> Box<dyn OptimCase>
where
    B: AutodiffBackend,
    M: Net<B, D>,
{
    let device = device.clone();
    match precision {
        None => Box::new(Train021 {
            model: Some(model),
            optim: AdamConfig::new().init::<B, M>(),
            x,
            y,
            device,
        }),
        Some(precision) => {
            let lp =
                LowPrecisionOptimizer::new(burn_mpric_scale::DeviceAdamConfig::new(), precision)
                    .expect("Adam keeps state");
            Box::new(Train021 {
                model: Some(lp.store_params(model)),
                optim: lp.init::<B, M>(),
                x,
                y,
                device,
            })
        }
    }
}

pub(super) type Mp<I> = Autodiff<MixedPrecision<I>>;

/// The Burn 0.21 factory of `spec` under `precision`, on the decorator's device: the same
/// deterministic parameters and batches (seeds) as the bench's `mlp_step` and
/// `transformer_block_step`.
pub(super) fn factory021<I: Backend>(
    device: &MpDevice<I>,
    spec: &Spec,
    precision: Option<OptimizerPrecision>,
) -> OptimFactory {
    let (device, spec) = (device.clone(), spec.clone());
    Box::new(move |made_batch| match &spec {
        Spec::Mlp { batch, dims, .. } => {
            let last = *dims.last().expect("dims");
            let x = tensor::<Mp<I>, 2>([*batch, dims[0]], 4, 1.0, &device).into_data();
            let y = tensor::<Mp<I>, 2>([*batch, last], 5, 1.0, &device);
            Mp::<I>::sync(&device).expect("device sync");
            made_batch();
            let model = deterministic(Mlp::<Mp<I>>::new(dims, &device), &device, 20);
            train021(model, x, y, precision, &device)
        }
        Spec::Transformer {
            batch,
            seq,
            d_model,
            heads,
            d_ff,
            layers,
        } => {
            let shape = [*batch, *seq, *d_model];
            let x = tensor::<Mp<I>, 3>(shape, 6, 1.0, &device).into_data();
            let y = tensor::<Mp<I>, 3>(shape, 7, 1.0, &device);
            Mp::<I>::sync(&device).expect("device sync");
            made_batch();
            let model = TransformerEncoderConfig::new(*d_model, *d_ff, *heads, *layers)
                .with_dropout(0.0)
                .init::<Mp<I>>(&device);
            let model = deterministic(model, &device, 30);
            train021(model, x, y, precision, &device)
        }
        Spec::Matmul { .. } | Spec::Conv2d { .. } => unreachable!("training workloads only"),
    })
}
