//! Shared helpers of the integration tests: a two-layer model, deterministic data, comparisons.
#![allow(dead_code)]

use burn::backend::{Autodiff, Flex};
use burn::module::{Module, ModuleMapper, Param};
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{FloatDType, Tensor, TensorData};

/// The training backend of the tests.
pub type TB = Autodiff<Flex>;

/// PyTorch's `Sequential(Linear(8, 8), Linear(8, 8))`.
#[derive(Module, Debug)]
pub struct TwoLayer<B: Backend> {
    pub l1: Linear<B>,
    pub l2: Linear<B>,
}

impl<B: Backend> TwoLayer<B> {
    /// A model with deterministic weights (standard normal values from [`Normal`] times
    /// `1/sqrt(width)`): the backend's random initializer shares one generator with every test
    /// running in parallel, so it would differ from run to run.
    pub fn new(width: usize, device: &B::Device) -> Self {
        let mut normal = Normal::new(0x5eed + width as u64);
        let k = 1.0 / (width as f32).sqrt();
        let mut linear = || {
            let weight = normal.matrix::<B>(width, width, device).mul_scalar(k);
            let bias = normal.matrix::<B>(1, width, device).mul_scalar(k);
            let mut layer = LinearConfig::new(width, width).init::<B>(device);
            layer.weight = Param::from_tensor(weight);
            layer.bias = Some(Param::from_tensor(bias.reshape([width])));
            layer
        };
        Self {
            l1: linear(),
            l2: linear(),
        }
    }

    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.l2.forward(self.l1.forward(x))
    }

    pub fn mse(&self, x: Tensor<B, 2>, y: Tensor<B, 2>) -> Tensor<B, 1> {
        MseLoss::new().forward(self.forward(x), y, Reduction::Mean)
    }
}

/// A deterministic stream of standard-normal numbers (xorshift64* + Box-Muller), so tests do not
/// depend on a backend's global seed.
pub struct Normal {
    state: u64,
}

impl Normal {
    pub fn new(seed: u64) -> Self {
        Self {
            state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        }
    }

    fn uniform(&mut self) -> f64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let bits = self.state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        (bits as f64 + 0.5) / (1u64 << 53) as f64
    }

    pub fn sample(&mut self) -> f32 {
        let (u1, u2) = (self.uniform(), self.uniform());
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }

    pub fn matrix<B: Backend>(
        &mut self,
        rows: usize,
        cols: usize,
        device: &B::Device,
    ) -> Tensor<B, 2> {
        let values: Vec<f32> = (0..rows * cols).map(|_| self.sample()).collect();
        Tensor::from_data(TensorData::new(values, [rows, cols]), device)
    }
}

/// `n` batches of `randn(8, 8)` inputs and targets.
pub fn batches<B: Backend>(
    n: usize,
    width: usize,
    seed: u64,
    device: &B::Device,
) -> Vec<(Tensor<B, 2>, Tensor<B, 2>)> {
    let mut normal = Normal::new(seed);
    (0..n)
        .map(|_| {
            let x = normal.matrix(width, width, device);
            let y = normal.matrix(width, width, device);
            (x, y)
        })
        .collect()
}

/// Every parameter value of a module, in visiting order, as f32.
pub fn param_values<B: Backend, M: Module<B>>(module: &M) -> Vec<f32> {
    struct Collect(Vec<f32>);
    impl<B: Backend> burn::module::ModuleVisitor<B> for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let data = param.val().into_data();
            self.0.extend(data.iter::<f32>());
        }
    }
    let mut collect = Collect(Vec::new());
    module.visit(&mut collect);
    collect.0
}

/// Every parameter of a module as raw data (dtype and bytes), in visiting order.
pub fn param_data<B: Backend, M: Module<B>>(module: &M) -> Vec<TensorData> {
    struct Collect(Vec<TensorData>);
    impl<B: Backend> burn::module::ModuleVisitor<B> for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.push(param.val().into_data());
        }
    }
    let mut collect = Collect(Vec::new());
    module.visit(&mut collect);
    collect.0
}

/// The largest absolute difference between two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Casts every float parameter of a module to `dtype`, keeping it a trainable leaf.
pub struct CastParams(pub FloatDType);

impl<B: burn::tensor::backend::AutodiffBackend> ModuleMapper<B> for CastParams {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let dtype = self.0;
        param.map(|tensor| tensor.cast(dtype).detach().require_grad())
    }
}

/// A unique path under the test target's temporary directory.
pub fn temp_path(name: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("burn-mpric-scale");
    std::fs::create_dir_all(&dir).expect("create the test directory");
    dir.join(format!("{name}-{}", std::process::id()))
}
