//! The op table: which precision each float op runs at. This file is the one place that
//! decides it; the backend's op implementations only look it up.

use core::fmt;
use core::str::FromStr;

/// How an op chooses the dtype its float inputs are cast to before the inner backend runs it.
///
/// ```
/// use burn_mpric_core::{Op, OpCategory};
///
/// assert_eq!(Op::Matmul.default_category(), OpCategory::Compute);
/// assert_eq!(Op::Exp.default_category(), OpCategory::FullPrecision);
/// assert_eq!(Op::Add.default_category(), OpCategory::Promote);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpCategory {
    /// Compute-bound ops (matmul, convolutions, attention): inputs are cast to the policy's
    /// compute dtype and the output stays in it.
    Compute,
    /// Precision-sensitive ops (exp, log, sums, softmax, norms): inputs are cast to f32, or to
    /// the param dtype or an input dtype when that is wider; the output stays there.
    FullPrecision,
    /// Everything else: inputs are cast to the widest float dtype among them (f16 + f32 → f32,
    /// f16 + bf16 → f32), like PyTorch's type promotion. A single input runs as it is.
    Promote,
}

impl fmt::Display for OpCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpCategory::Compute => "compute",
            OpCategory::FullPrecision => "full",
            OpCategory::Promote => "promote",
        })
    }
}

/// Error for an unknown op or category name.
///
/// ```
/// use burn_mpric_core::Op;
///
/// let err = "matmool".parse::<Op>().unwrap_err();
/// assert!(err.to_string().contains("matmool"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{name}`; accepted: {accepted}")]
pub struct UnknownName {
    what: &'static str,
    name: String,
    accepted: String,
}

impl FromStr for OpCategory {
    type Err = UnknownName;

    /// `compute`, `full` (or `fp32`, `f32`) and `promote`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_lowercase().as_str() {
            "compute" | "lower" => Ok(OpCategory::Compute),
            "full" | "fp32" | "f32" | "full_precision" => Ok(OpCategory::FullPrecision),
            "promote" | "widest" => Ok(OpCategory::Promote),
            _ => Err(UnknownName {
                what: "op category",
                name: s.trim().to_string(),
                accepted: "compute, full, promote".into(),
            }),
        }
    }
}

macro_rules! op_table {
    ($( $category:ident : [ $( $op:ident = $name:literal ),* $(,)? ] )*) => {
        /// A float op of Burn's backend API whose input dtypes the decorator decides.
        ///
        /// Names follow Burn's op methods without their `float_` prefix (`Op::Matmul` is
        /// `float_matmul`, `Op::Conv2dXBackward` is `conv2d_x_backward`); the text form is
        /// the snake-case name (`"matmul"`, `"conv2d_x_backward"`).
        ///
        /// ```
        /// use burn_mpric_core::Op;
        ///
        /// assert_eq!("layer_norm".parse::<Op>().unwrap(), Op::LayerNorm);
        /// assert_eq!(Op::LayerNorm.to_string(), "layer_norm");
        /// assert!(Op::ALL.contains(&Op::Attention));
        /// ```
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[allow(missing_docs)]
        pub enum Op { $($( $op, )*)* }

        impl Op {
            /// Every op, in table order.
            pub const ALL: &'static [Op] = &[$($( Op::$op, )*)*];

            /// The category the op runs in unless an `MpSettings` (burn-mpric, the 0.21 edition)
            /// overrides it.
            ///
            /// ```
            /// use burn_mpric_core::{Op, OpCategory};
            ///
            /// assert_eq!(Op::Softmax.default_category(), OpCategory::FullPrecision);
            /// ```
            pub const fn default_category(self) -> OpCategory {
                match self { $($( Op::$op => OpCategory::$category, )*)* }
            }

            /// Snake-case name, as in Burn's method names without `float_`.
            ///
            /// ```
            /// use burn_mpric_core::Op;
            ///
            /// assert_eq!(Op::Conv2dXBackward.name(), "conv2d_x_backward");
            /// ```
            pub const fn name(self) -> &'static str {
                match self { $($( Op::$op => $name, )*)* }
            }
        }
    };
}

op_table! {
    Compute: [
        Matmul = "matmul",
        Linear = "linear",
        LinearXBackward = "linear_x_backward",
        LinearWeightBackward = "linear_weight_backward",
        Conv1d = "conv1d",
        Conv1dXBackward = "conv1d_x_backward",
        Conv1dWeightBackward = "conv1d_weight_backward",
        Conv2d = "conv2d",
        Conv2dXBackward = "conv2d_x_backward",
        Conv2dWeightBackward = "conv2d_weight_backward",
        Conv3d = "conv3d",
        Conv3dXBackward = "conv3d_x_backward",
        Conv3dWeightBackward = "conv3d_weight_backward",
        ConvTranspose1d = "conv_transpose1d",
        ConvTranspose1dXBackward = "conv_transpose1d_x_backward",
        ConvTranspose1dWeightBackward = "conv_transpose1d_weight_backward",
        ConvTranspose2d = "conv_transpose2d",
        ConvTranspose2dXBackward = "conv_transpose2d_x_backward",
        ConvTranspose2dWeightBackward = "conv_transpose2d_weight_backward",
        ConvTranspose3d = "conv_transpose3d",
        ConvTranspose3dXBackward = "conv_transpose3d_x_backward",
        ConvTranspose3dWeightBackward = "conv_transpose3d_weight_backward",
        DeformConv2d = "deform_conv2d",
        DeformConv2dBackward = "deform_conv2d_backward",
        Attention = "attention",
        Prelu = "prelu",
    ]
    FullPrecision: [
        Exp = "exp",
        Log = "log",
        Log1p = "log1p",
        Powf = "powf",
        PowfScalar = "powf_scalar",
        Powi = "powi",
        PowiScalar = "powi_scalar",
        Recip = "recip",
        Sqrt = "sqrt",
        Tan = "tan",
        Sinh = "sinh",
        Cosh = "cosh",
        Asin = "asin",
        Acos = "acos",
        Erf = "erf",
        Sum = "sum",
        SumDim = "sum_dim",
        Mean = "mean",
        MeanDim = "mean_dim",
        Prod = "prod",
        ProdDim = "prod_dim",
        Cumsum = "cumsum",
        Cumprod = "cumprod",
        Softmax = "softmax",
        LogSoftmax = "log_softmax",
        Softmin = "softmin",
        LogSigmoid = "log_sigmoid",
        LayerNorm = "layer_norm",
        Interpolate = "interpolate",
        InterpolateBackward = "interpolate_backward",
        GridSample2d = "grid_sample_2d",
        Rfft = "rfft",
        Irfft = "irfft",
        CtcLoss = "ctc_loss",
        CtcLossBackward = "ctc_loss_backward",
    ]
    Promote: [
        Add = "add",
        Sub = "sub",
        Mul = "mul",
        Div = "div",
        Remainder = "remainder",
        Cross = "cross",
        Atan2 = "atan2",
        Cat = "cat",
        MaskWhere = "mask_where",
        ScatterAdd = "scatter_add",
        SelectAdd = "select_add",
        SliceAssign = "slice_assign",
        Equal = "equal",
        NotEqual = "not_equal",
        Greater = "greater",
        GreaterEqual = "greater_equal",
        Lower = "lower",
        LowerEqual = "lower_equal",
        Embedding = "embedding",
        EmbeddingBackward = "embedding_backward",
        LinearBiasBackward = "linear_bias_backward",
        ConvBiasBackward = "conv_bias_backward",
        AvgPool2d = "avg_pool2d",
        AvgPool2dBackward = "avg_pool2d_backward",
        AdaptiveAvgPool2d = "adaptive_avg_pool2d",
        AdaptiveAvgPool2dBackward = "adaptive_avg_pool2d_backward",
        MaxPool2d = "max_pool2d",
        MaxPool2dBackward = "max_pool2d_backward",
        AvgPool1d = "avg_pool1d",
        AvgPool1dBackward = "avg_pool1d_backward",
        AdaptiveAvgPool1d = "adaptive_avg_pool1d",
        AdaptiveAvgPool1dBackward = "adaptive_avg_pool1d_backward",
        MaxPool1d = "max_pool1d",
        MaxPool1dBackward = "max_pool1d_backward",
        Unfold4d = "unfold4d",
        ScatterNd = "scatter_nd",
        Relu = "relu",
        ReluBackward = "relu_backward",
        Gelu = "gelu",
        GeluBackward = "gelu_backward",
        Sigmoid = "sigmoid",
        SigmoidBackward = "sigmoid_backward",
        LogSigmoidBackward = "log_sigmoid_backward",
        AddScalar = "add_scalar",
        SubScalar = "sub_scalar",
        MulScalar = "mul_scalar",
        DivScalar = "div_scalar",
        RemainderScalar = "remainder_scalar",
        Neg = "neg",
        Abs = "abs",
        Cos = "cos",
        Sin = "sin",
        Tanh = "tanh",
        Acosh = "acosh",
        Asinh = "asinh",
        Atan = "atan",
        Atanh = "atanh",
        LeakyRelu = "leaky_relu",
        HardSigmoid = "hard_sigmoid",
    ]
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Op {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let name = s.trim().to_lowercase();
        let name = name.strip_prefix("float_").unwrap_or(&name);
        Op::ALL
            .iter()
            .copied()
            .find(|op| op.name() == name)
            .ok_or_else(|| UnknownName {
                what: "op",
                name: s.trim().to_string(),
                accepted: Op::ALL
                    .iter()
                    .map(|op| op.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

impl Op {
    /// How many ops the table lists.
    ///
    /// ```
    /// use burn_mpric_core::Op;
    ///
    /// assert_eq!(Op::COUNT, Op::ALL.len());
    /// ```
    pub const COUNT: usize = Op::ALL.len();

    /// The op's position in [`Op::ALL`], for tables indexed by op.
    ///
    /// ```
    /// use burn_mpric_core::Op;
    ///
    /// assert!(Op::ALL.iter().enumerate().all(|(i, op)| op.index() == i));
    /// ```
    pub const fn index(self) -> usize {
        self as usize
    }
}
