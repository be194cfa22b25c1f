//! Trains the same small MLP at f32 and under mixed precision, and prints the losses side
//! by side: bf16 compute on the CPU (`Flex`), f16 compute on the GPU path (`Wgpu`; skipped
//! when no adapter with f16 is found).
//!
//! `cargo run -p burn-mpric-examples --example train_mixed`; with `--features vulkan`, the
//! same Wgpu compiled to SPIR-V (`MixedPrecision<Vulkan>`, docs/backends.md).

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, ElementConversion, FloatDType, Tensor};
use burn_mpric::{MixedPrecision, Policy, cast_grads_to_param_dtype};

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    l1: Linear<B>,
    l2: Linear<B>,
    act: Relu,
}

impl<B: Backend> Mlp<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            l1: LinearConfig::new(16, 64).init(device),
            l2: LinearConfig::new(64, 1).init(device),
            act: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.l2.forward(self.act.forward(self.l1.forward(x)))
    }
}

/// 300 Adam steps on y = sum(sin(x)); returns the loss every 100 steps.
fn train<B: AutodiffBackend>(device: &B::Device) -> Vec<f32> {
    B::seed(device, 0);
    let x = Tensor::<B, 2>::random([128, 16], Distribution::Normal(0.0, 1.0), device);
    let y = x.clone().sin().sum_dim(1);
    let mut model = Mlp::<B>::new(device);
    let mut optim = AdamConfig::new().init();
    let mut losses = Vec::new();
    for step in 1..=300 {
        // The loss is computed at f32 whatever the compute dtype.
        let pred = model.forward(x.clone()).cast(FloatDType::F32);
        let loss = MseLoss::new().forward(pred, y.clone(), Reduction::Mean);
        if step % 100 == 0 {
            losses.push(loss.clone().into_scalar().elem::<f32>());
        }
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        // Gradients come back in the dtype their backward ran in: give the optimizer f32.
        let grads = cast_grads_to_param_dtype(&model, grads);
        model = optim.step(3e-3, model, grads);
    }
    losses
}

fn report(name: &str, losses: &[f32]) {
    let cells: Vec<String> = losses.iter().map(|l| format!("{l:>9.5}")).collect();
    println!("{name:<28} {}", cells.join(" "));
}

fn main() {
    println!(
        "{:<28} {:>9} {:>9} {:>9}",
        "run", "step 100", "step 200", "step 300"
    );
    report("Flex f32", &train::<Autodiff<Flex>>(&Default::default()));

    let policy: Policy = "p=f32,c=bf16,o=f32".parse().expect("valid policy");
    let device =
        MixedPrecision::<Flex>::device(Default::default(), policy).expect("Flex runs bf16");
    report(
        "Flex mixed (c=bf16)",
        &train::<Autodiff<MixedPrecision<Flex>>>(&device),
    );

    let policy: Policy = "p=f32,c=f16,o=f32".parse().expect("valid policy");
    match MixedPrecision::<Wgpu>::device(Default::default(), policy) {
        Ok(device) => {
            report("Wgpu f32", &train::<Autodiff<Wgpu>>(&Default::default()));
            report(
                "Wgpu mixed (c=f16)",
                &train::<Autodiff<MixedPrecision<Wgpu>>>(&device),
            );
        }
        Err(err) => println!("Wgpu mixed (c=f16)           skipped: {err}"),
    }
}
