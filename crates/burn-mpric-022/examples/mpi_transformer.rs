//! Data-parallel mixed-precision training across processes with MPI, on Burn 0.22: burn-nn's
//! `TransformerEncoder` learns to reverse sequences, each process on its own share of every
//! batch; `DataParallel::mean_grads` averages the gradients over the processes before the
//! loss scaler's step, so every process applies (or skips) the same steps and holds the same
//! parameters: the run equals one process on the whole batch.
//!
//! ```sh
//! cargo build --release -p burn-mpric-022 --features mpi --example mpi_transformer_022
//! mpirun -np 2 target/release/examples/mpi_transformer_022 [policy]   # default mixed_bf16
//! ```

use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn_mpric_022::mpi::{MpiWorld, Reduction, RunSpec};
use burn_mpric_022::{
    Autocast, DataParallel, LossScalePreset, LossScaler, Policy, ResolvedPolicy, cast_for_output,
};

const VOCAB: usize = 16;
const SEQ: usize = 8;
const D_MODEL: usize = 32;
/// Sequences per process and step.
pub const BATCH: usize = 8;

/// Token and position embeddings, a 2-layer encoder, a linear head.
#[derive(Module, Debug)]
pub struct Reverser {
    tokens: Embedding,
    positions: Embedding,
    encoder: TransformerEncoder,
    head: Linear,
}

impl Reverser {
    /// The same parameters on every process: drawn from a seeded device.
    pub fn new(device: &Device, seed: u64) -> Self {
        device.seed(seed);
        let model = Self {
            tokens: EmbeddingConfig::new(VOCAB, D_MODEL).init(device),
            positions: EmbeddingConfig::new(SEQ, D_MODEL).init(device),
            encoder: TransformerEncoderConfig::new(D_MODEL, 2 * D_MODEL, 4, 2)
                .with_dropout(0.0)
                .with_norm_first(true)
                .init(device),
            head: LinearConfig::new(D_MODEL, VOCAB).init(device),
        };
        // Parameters are drawn when first read: read them now, from the seed.
        struct Touch;
        impl ModuleVisitor for Touch {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                let _ = param.val();
            }
        }
        model.visit(&mut Touch);
        model
    }

    /// The mean cross entropy over all positions, at the policy's output dtype.
    fn loss(
        &self,
        tokens: Tensor<2, Int>,
        targets: Tensor<2, Int>,
        policy: &ResolvedPolicy,
    ) -> Tensor<1> {
        let [batch, _] = tokens.dims();
        let device = tokens.device();
        let positions = Tensor::<1, Int>::arange(0..SEQ as i64, &device)
            .reshape([1, SEQ])
            .repeat_dim(0, batch);
        let x = self.tokens.forward(tokens) + self.positions.forward(positions);
        let x = self.encoder.forward(TransformerEncoderInput::new(x));
        let logits = cast_for_output(self.head.forward(x), policy);
        CrossEntropyLossConfig::new().init(&device).forward(
            logits.reshape([batch * SEQ, VOCAB]),
            targets.reshape([batch * SEQ]),
        )
    }
}

/// Step `step`'s whole batch of `rows` random sequences (a 64-bit LCG: the same on every
/// process), as tokens and their reversals.
fn batch(step: usize, rows: usize) -> (Vec<i64>, Vec<i64>) {
    let mut state = 0x2545_f491_4f6c_dd1d_u64 ^ (step as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let tokens: Vec<i64> = (0..rows * SEQ)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) % VOCAB as u64) as i64
        })
        .collect();
    let reversed = tokens
        .chunks(SEQ)
        .flat_map(|row| row.iter().rev().copied().collect::<Vec<_>>())
        .collect();
    (tokens, reversed)
}

/// What one process saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Trained {
    /// The loss of each step, averaged over the processes (as one process on the whole
    /// batch reports it).
    pub losses: Vec<f32>,
    /// The steps skipped.
    pub skipped: Vec<usize>,
    /// Every parameter's values after the last step, in module order.
    pub params: Vec<f32>,
}

/// Trains `steps` steps at `policy` on `device`. With `parallel`, this process takes its
/// rank's share (`BATCH` sequences) of a batch of `BATCH` x world, and the gradients are
/// averaged over the processes; without, it takes a batch of `BATCH` x `world` alone.
/// `poison`: a (step, rank) whose loss is made NaN, as a broken batch would.
pub fn train(
    device: &Device,
    policy: &str,
    steps: usize,
    world: usize,
    mut parallel: Option<&mut DataParallel>,
    poison: Option<(usize, usize)>,
) -> Result<Trained, Box<dyn std::error::Error>> {
    let autocast = Autocast::for_device(policy.parse::<Policy>()?, device)?;
    let policy = autocast.policy();
    let mut model = autocast.apply(Reverser::new(device, 42))?;
    let mut optim = AdamConfig::new().init();
    let mut scaler = LossScaler::for_policy(LossScalePreset::Auto, &policy)?;
    let rank = parallel.as_ref().map_or(0, |p| p.rank());
    let mut trained = Trained {
        losses: Vec::new(),
        skipped: Vec::new(),
        params: Vec::new(),
    };
    for step in 0..steps {
        let (tokens, targets) = batch(step, BATCH * world);
        let (rows, skip) = match parallel {
            Some(_) => (BATCH, rank * BATCH * SEQ),
            None => (BATCH * world, 0),
        };
        let take = |v: &[i64]| {
            let part = v[skip..skip + rows * SEQ].to_vec();
            Tensor::<2, Int>::from_data(TensorData::new(part, [rows, SEQ]), device)
        };
        let mut loss = model.loss(take(&tokens), take(&targets), &policy);
        if poison.is_some_and(|(at, who)| at == step && (who == rank || parallel.is_none())) {
            loss = loss * f32::NAN;
        }
        let reported = loss.clone().detach();
        let scaled = scaler.scale_loss(loss);
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let (grads, mean_loss) = match parallel.as_deref_mut() {
            Some(dp) => {
                let (grads, extra) = dp.mean_grads_with(&model, grads, vec![reported])?;
                (grads, extra[0])
            }
            None => (grads, reported.into_scalar::<f32>()),
        };
        let (next, outcome) = scaler.step(&mut optim, 1e-3, model, grads);
        model = next;
        if outcome?.is_skipped() {
            trained.skipped.push(step);
        }
        trained.losses.push(mean_loss);
    }
    struct Read(Vec<f32>);
    impl ModuleVisitor for Read {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let values = param
                .val()
                .into_data()
                .convert_dtype(burn::tensor::DType::F32);
            self.0
                .extend(values.try_to_vec::<f32>().unwrap_or_default());
        }
    }
    let mut read = Read(Vec::new());
    model.visit(&mut read);
    trained.params = read.0;
    Ok(trained)
}

/// Joins the MPI job (`mpirun`/`srun` start it), every process with the same settings.
pub fn join(policy: &str, steps: usize) -> Result<DataParallel, Box<dyn std::error::Error>> {
    let world = MpiWorld::init()?;
    let identity = vec![
        ("example".to_string(), "mpi_transformer".to_string()),
        ("policy".to_string(), policy.to_string()),
        ("steps".to_string(), steps.to_string()),
    ];
    let spec = RunSpec::new(world.world(), identity);
    Ok(DataParallel::new(Box::new(
        world.join(&spec, Reduction::Exact)?,
    )))
}

#[allow(dead_code)]
fn main() {
    let policy = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "mixed_bf16".into());
    let steps = 30;
    let result = join(&policy, steps).and_then(|mut dp| {
        let world = dp.world();
        let trained = train(
            &Device::flex().autodiff(),
            &policy,
            steps,
            world,
            Some(&mut dp),
            None,
        )?;
        let rank = dp.rank();
        dp.finish()?;
        Ok((rank, world, trained))
    });
    match result {
        Ok((0, world, trained)) => {
            println!("{world} processes x {BATCH} sequences, policy {policy}");
            for (step, loss) in trained.losses.iter().enumerate().step_by(5) {
                println!("step {step:>3}  loss {loss:.4}");
            }
            println!("skipped steps: {:?}", trained.skipped);
        }
        Ok(_) => {}
        Err(e) => {
            eprintln!("error: {e}");
            burn_mpric_022::mpi::end_mpi(1);
            std::process::exit(1);
        }
    }
}
