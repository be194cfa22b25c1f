//! A small causal transformer language model over characters.

use burn::module::Module;
use burn::nn::attention::generate_autoregressive_mask;
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

use crate::models::Notation;
use crate::recipe::TransformerLmConfig;

/// Sizes of a [`TransformerLm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LmSizes {
    /// Vocabulary size.
    pub vocab: usize,
    /// Embedding width.
    pub d_model: usize,
    /// Attention heads.
    pub heads: usize,
    /// Blocks.
    pub layers: usize,
    /// Feed-forward width.
    pub d_ff: usize,
    /// Context length.
    pub context: usize,
}

/// Token and learned position embeddings, pre-norm transformer blocks under a causal mask
/// (no dropout, so a step depends only on the data and the parameters), a final layer norm
/// and a linear head.
#[derive(Module, Debug)]
pub struct TransformerLm<B: Backend> {
    token: Embedding<B>,
    position: Embedding<B>,
    encoder: TransformerEncoder<B>,
    norm: LayerNorm<B>,
    head: Linear<B>,
}

impl<B: Backend> TransformerLm<B> {
    /// A model of `sizes`.
    pub fn new(sizes: LmSizes, device: &B::Device) -> Self {
        Self {
            token: EmbeddingConfig::new(sizes.vocab, sizes.d_model).init(device),
            position: EmbeddingConfig::new(sizes.context, sizes.d_model).init(device),
            encoder: TransformerEncoderConfig::new(
                sizes.d_model,
                sizes.d_ff,
                sizes.heads,
                sizes.layers,
            )
            .with_dropout(0.0)
            .with_norm_first(true)
            .init(device),
            norm: LayerNormConfig::new(sizes.d_model).init(device),
            head: LinearConfig::new(sizes.d_model, sizes.vocab).init(device),
        }
    }

    /// Token ids `[batch, t]` (t ≤ context) to next-token logits `[batch, t, vocab]`.
    pub fn forward(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let [n, t] = tokens.dims();
        let device = tokens.device();
        let positions = self
            .position
            .weight
            .val()
            .narrow(0, 0, t)
            .unsqueeze_dim::<3>(0);
        let x = self.token.forward(tokens) + positions;
        let mask = generate_autoregressive_mask::<B>(n, t, &device);
        let x = self
            .encoder
            .forward(TransformerEncoderInput::new(x).mask_attn(mask));
        self.head.forward(self.norm.forward(x))
    }
}

/// [`TransformerLm`]'s forward pass for an export, in `notation`.
pub(crate) fn describe_forward(config: &TransformerLmConfig, notation: &Notation) -> String {
    format!(
        "transformer_lm: ids = each character's index in schema.inputs.text.vocab (at most {ctx} of them); x = token.weight[ids] + position.weight[0..len]; for i in 0..{layers}: x = x + attention_i(layernorm(x, encoder.layers.i.norm_2)); x = x + linear(encoder.layers.i.pwff.linear_outer, gelu(linear(encoder.layers.i.pwff.linear_inner, layernorm(x, encoder.layers.i.norm_1)))) (Burn's pre-norm layer: norm_2 before attention, norm_1 before the feed-forward); attention_i: {heads} heads of {dh}: q, k, v = linear(encoder.layers.i.mha.query|key|value, x) split into heads, scores = q @ k.T / sqrt({dh}) with every later position set to -10000, softmax over the last axis, weights @ v, heads concatenated, linear(encoder.layers.i.mha.output, .); gelu(x) = x * (1 + erf(x / sqrt(2))) / 2; logits = linear(head, layernorm(x, norm)); the next character: softmax(logits) at the last position; {}; {}",
        notation.linear,
        notation.norm,
        ctx = config.context,
        layers = config.layers,
        heads = config.heads,
        dh = config.d_model / config.heads.max(1),
    )
}

#[cfg(test)]
// Each test holds `rng_lock`: Burn's RNG is the process's, and a seeded init may run on
// another test thread.
mod tests {
    use burn::backend::Flex;
    use burn::module::Module;
    use burn::tensor::{Int, Tensor};

    use crate::models::transformer::{LmSizes, TransformerLm};

    fn sizes() -> LmSizes {
        LmSizes {
            vocab: 10,
            d_model: 8,
            heads: 2,
            layers: 1,
            d_ff: 16,
            context: 6,
        }
    }

    #[test]
    fn new() {
        let _rng = crate::models::rng_lock();
        assert!(TransformerLm::<Flex>::new(sizes(), &Default::default()).num_params() > 500);
    }

    #[test]
    fn forward() {
        let _rng = crate::models::rng_lock();
        let device = Default::default();
        let lm = TransformerLm::<Flex>::new(sizes(), &device);
        // Logits for every position of a full context, and of shorter inputs too.
        for [n, t] in [[3, 6], [2, 4]] {
            let logits = lm.forward(Tensor::<Flex, 2, Int>::zeros([n, t], &device));
            assert_eq!(logits.dims(), [n, t, 10]);
        }
    }
}
