//! Drop-in conformance, generated from the op lists the decorator forwards: every listed op
//! runs through `MixedPrecision<Instrumented<Flex>>` at the identity policy and through bare
//! `Flex` on the same inputs. The instrumented inner backend must receive the op itself
//! (not pieces of a Burn default implementation), and the results must be bit-identical
//! (or both calls must fail alike). A second test checks that the lists, together with the
//! hand-written methods, name every method of Burn's backend op traits.

use core::any::{Any, TypeId, type_name};
use core::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::backend::Flex;
use burn::tensor::FloatDType;
use burn_backend::ops::{
    ActivationOps, AttentionModuleOptions, BoolTensorOps, ConvOptions, ConvTransposeOptions,
    DeformConv2dBackward, DeformConvOptions, FloatTensorOps, GridSampleOptions, IntTensorOps,
    InterpolateMode, InterpolateOptions, MaxPool1dBackward, MaxPool1dWithIndices,
    MaxPool2dBackward, MaxPool2dWithIndices, ModuleOps, QTensorOps, UnfoldOptions,
};
use burn_backend::quantization::{QuantScheme, QuantizationParametersPrimitive};
use burn_backend::tensor::{
    BoolTensor, Device, FloatTensor, IndexingUpdateOp, IntTensor, QuantizedTensor,
};
use burn_backend::{
    Backend, BoolDType, DType, Distribution, Element, IntDType, Scalar, Shape, Slice, TensorData,
    TensorPrimitive,
};

use crate::device::MpDevice;
use crate::instrument::{Inspect, Instrumented, Wrap, record};
use crate::ops::activation::activation_op_list;
use crate::ops::args::{Arg, Output};
use crate::ops::bool_tensor::bool_op_list;
use crate::ops::int_tensor::int_op_list;
use crate::ops::module::module_op_list;
use crate::ops::qtensor::q_op_list;
use crate::ops::tensor::float_op_list;
use crate::{MixedPrecision, Policy};

/// What one op call did, as bytes that compare exactly.
#[derive(Debug, PartialEq)]
enum Seen {
    Failed,
    Values(Vec<Observed>),
}

#[derive(Debug, PartialEq)]
enum Observed {
    Data {
        dtype: DType,
        shape: Vec<usize>,
        bytes: Vec<u8>,
    },
    ReadError,
    Flag(bool),
}

/// One op run both ways.
struct Case {
    name: &'static str,
    decorated: Seen,
    bare: Seen,
    /// The first op the instrumented inner backend received during the decorated call.
    first_inner_op: Option<&'static str>,
}

const SHAPE: [usize; 4] = [2, 2, 2, 2];

fn is<T: 'static, U: 'static>() -> bool {
    TypeId::of::<T>() == TypeId::of::<U>()
}

fn leak<T>(value: T) -> &'static T {
    Box::leak(Box::new(value))
}

fn float_sample<Bk: Backend>(device: &Bk::Device) -> FloatTensor<Bk> {
    let values: Vec<f32> = (0..16).map(|i| 0.37 * i as f32 - 2.1).collect();
    Bk::float_from_data(TensorData::new(values, SHAPE), device)
}

fn int_sample<Bk: Backend>(device: &Bk::Device) -> IntTensor<Bk> {
    let values: Vec<i64> = (0..16).map(|i| i % 2).collect();
    let data = TensorData::new(values, SHAPE).convert_dtype(Bk::IntElem::dtype());
    Bk::int_from_data(data, device)
}

fn bool_sample<Bk: Backend>(device: &Bk::Device) -> BoolTensor<Bk> {
    let values: Vec<bool> = (0..16).map(|i| i % 3 == 0).collect();
    Bk::bool_from_data(TensorData::new(values, SHAPE), device)
}

fn quantized_sample<Bk: Backend>(device: &Bk::Device) -> QuantizedTensor<Bk> {
    Bk::quantize_dynamic(float_sample::<Bk>(device), &QuantScheme::default())
}

/// An argument of type `T` for an op on backend `Bk`: one fixed value per type, chosen so
/// that most ops accept it (rank-4 tensors of size 2, dim 1, unit kernels).
fn sample<Bk: Backend, T: 'static>(device: &Bk::Device) -> T {
    let value: Box<dyn Any> = if is::<T, FloatTensor<Bk>>() {
        Box::new(float_sample::<Bk>(device))
    } else if is::<T, IntTensor<Bk>>() {
        Box::new(int_sample::<Bk>(device))
    } else if is::<T, BoolTensor<Bk>>() {
        Box::new(bool_sample::<Bk>(device))
    } else if is::<T, QuantizedTensor<Bk>>() {
        Box::new(quantized_sample::<Bk>(device))
    } else if is::<T, Option<FloatTensor<Bk>>>() {
        Box::new(Some(float_sample::<Bk>(device)))
    } else if is::<T, Option<BoolTensor<Bk>>>() {
        Box::new(Some(bool_sample::<Bk>(device)))
    } else if is::<T, Vec<FloatTensor<Bk>>>() {
        Box::new(vec![float_sample::<Bk>(device), float_sample::<Bk>(device)])
    } else if is::<T, Vec<IntTensor<Bk>>>() {
        Box::new(vec![int_sample::<Bk>(device), int_sample::<Bk>(device)])
    } else if is::<T, Vec<BoolTensor<Bk>>>() {
        Box::new(vec![bool_sample::<Bk>(device), bool_sample::<Bk>(device)])
    } else if is::<T, Vec<QuantizedTensor<Bk>>>() {
        Box::new(vec![
            quantized_sample::<Bk>(device),
            quantized_sample::<Bk>(device),
        ])
    } else if is::<T, TensorPrimitive<Bk>>() {
        Box::new(TensorPrimitive::<Bk>::Float(float_sample::<Bk>(device)))
    } else if is::<T, QuantizationParametersPrimitive<Bk>>() {
        let scales = Bk::float_from_data(TensorData::new(vec![0.05f32], [1]), device);
        Box::new(QuantizationParametersPrimitive::<Bk> { scales })
    } else if is::<T, &'static Device<Bk>>() {
        Box::new(leak(device.clone()))
    } else if is::<T, &'static QuantScheme>() {
        Box::new(leak(QuantScheme::default()))
    } else if is::<T, &'static [Slice]>() {
        Box::new(&leak([Slice::new(0, Some(1), 1)])[..])
    } else if is::<T, &'static [usize]>() {
        Box::new(&[0usize, 1, 2, 3][..])
    } else if is::<T, usize>() {
        Box::new(1usize)
    } else if is::<T, Option<usize>>() {
        Box::new(None::<usize>)
    } else if is::<T, bool>() {
        Box::new(false)
    } else if is::<T, f64>() {
        Box::new(1e-5f64)
    } else if is::<T, [usize; 2]>() {
        Box::new([1usize, 1])
    } else if is::<T, Scalar>() {
        Box::new(Scalar::Float(2.0))
    } else if is::<T, Shape>() {
        Box::new(Shape::from(SHAPE))
    } else if is::<T, Range<i64>>() {
        Box::new(0i64..4)
    } else if is::<T, FloatDType>() {
        Box::new(FloatDType::F32)
    } else if is::<T, IntDType>() {
        Box::new(IntDType::from(Bk::IntElem::dtype()))
    } else if is::<T, BoolDType>() {
        Box::new(BoolDType::from(Bk::BoolElem::dtype()))
    } else if is::<T, Distribution>() {
        Box::new(Distribution::Default)
    } else if is::<T, IndexingUpdateOp>() {
        Box::new(IndexingUpdateOp::Add)
    } else if is::<T, ConvOptions<1>>() {
        Box::new(ConvOptions::new([1], [0], [1], 1))
    } else if is::<T, ConvOptions<2>>() {
        Box::new(ConvOptions::new([1, 1], [0, 0], [1, 1], 1))
    } else if is::<T, ConvOptions<3>>() {
        Box::new(ConvOptions::new([1, 1, 1], [0, 0, 0], [1, 1, 1], 1))
    } else if is::<T, ConvTransposeOptions<1>>() {
        Box::new(ConvTransposeOptions::new([1], [0], [0], [1], 1))
    } else if is::<T, ConvTransposeOptions<2>>() {
        Box::new(ConvTransposeOptions::new([1, 1], [0, 0], [0, 0], [1, 1], 1))
    } else if is::<T, ConvTransposeOptions<3>>() {
        Box::new(ConvTransposeOptions::new(
            [1, 1, 1],
            [0, 0, 0],
            [0, 0, 0],
            [1, 1, 1],
            1,
        ))
    } else if is::<T, DeformConvOptions<2>>() {
        Box::new(DeformConvOptions::new([1, 1], [0, 0], [1, 1], 1, 1))
    } else if is::<T, UnfoldOptions>() {
        Box::new(UnfoldOptions::new([1, 1], [0, 0], [1, 1]))
    } else if is::<T, InterpolateOptions>() {
        Box::new(InterpolateOptions::new(InterpolateMode::Nearest))
    } else if is::<T, GridSampleOptions>() {
        Box::new(GridSampleOptions::default())
    } else if is::<T, AttentionModuleOptions>() {
        Box::new(AttentionModuleOptions::default())
    } else {
        panic!("no sample argument of type {}", type_name::<T>())
    };
    *value
        .downcast::<T>()
        .expect("the sample has the asked type")
}

fn read(data: Result<TensorData, burn_backend::ExecutionError>, out: &mut Vec<Observed>) {
    out.push(match data {
        Ok(data) => Observed::Data {
            dtype: data.dtype,
            shape: data.shape.to_vec(),
            bytes: data.as_bytes().to_vec(),
        },
        Err(_) => Observed::ReadError,
    });
}

/// Reads every tensor in an op's result (of type `T`) back to the host.
fn observe<Bk: Backend, T: 'static>(value: T, out: &mut Vec<Observed>) {
    let value: Box<dyn Any> = Box::new(value);
    let value = match value.downcast::<FloatTensor<Bk>>() {
        Ok(t) => return read(burn_std::future::block_on(Bk::float_into_data(*t)), out),
        Err(v) => v,
    };
    let value = match value.downcast::<IntTensor<Bk>>() {
        Ok(t) => return read(burn_std::future::block_on(Bk::int_into_data(*t)), out),
        Err(v) => v,
    };
    let value = match value.downcast::<BoolTensor<Bk>>() {
        Ok(t) => return read(burn_std::future::block_on(Bk::bool_into_data(*t)), out),
        Err(v) => v,
    };
    let value = match value.downcast::<QuantizedTensor<Bk>>() {
        Ok(t) => return read(burn_std::future::block_on(Bk::q_into_data(*t)), out),
        Err(v) => v,
    };
    let value = match value.downcast::<bool>() {
        Ok(flag) => return out.push(Observed::Flag(*flag)),
        Err(v) => v,
    };
    let value = match value.downcast::<TensorPrimitive<Bk>>() {
        Ok(t) => {
            return match *t {
                TensorPrimitive::Float(t) => observe::<Bk, _>(t, out),
                TensorPrimitive::QFloat(t) => observe::<Bk, _>(t, out),
            };
        }
        Err(v) => v,
    };
    macro_rules! pairs {
        ($value:ident; $(($a:ty, $b:ty)),*) => {$(
            let $value = match $value.downcast::<($a, $b)>() {
                Ok(pair) => {
                    let (a, b) = *pair;
                    observe::<Bk, _>(a, out);
                    return observe::<Bk, _>(b, out);
                }
                Err(v) => v,
            };
        )*};
    }
    pairs!(value;
        (FloatTensor<Bk>, FloatTensor<Bk>),
        (FloatTensor<Bk>, IntTensor<Bk>),
        (IntTensor<Bk>, IntTensor<Bk>),
        (QuantizedTensor<Bk>, IntTensor<Bk>)
    );
    let value = match value.downcast::<MaxPool1dWithIndices<Bk>>() {
        Ok(r) => {
            observe::<Bk, _>(r.output, out);
            return observe::<Bk, _>(r.indices, out);
        }
        Err(v) => v,
    };
    let value = match value.downcast::<MaxPool2dWithIndices<Bk>>() {
        Ok(r) => {
            observe::<Bk, _>(r.output, out);
            return observe::<Bk, _>(r.indices, out);
        }
        Err(v) => v,
    };
    let value = match value.downcast::<MaxPool1dBackward<Bk>>() {
        Ok(r) => return observe::<Bk, _>(r.x_grad, out),
        Err(v) => v,
    };
    let value = match value.downcast::<MaxPool2dBackward<Bk>>() {
        Ok(r) => return observe::<Bk, _>(r.x_grad, out),
        Err(v) => v,
    };
    match value.downcast::<DeformConv2dBackward<Bk>>() {
        Ok(r) => {
            let r = *r;
            observe::<Bk, _>(r.x_grad, out);
            observe::<Bk, _>(r.offset_grad, out);
            observe::<Bk, _>(r.weight_grad, out);
            if let Some(mask) = r.mask_grad {
                observe::<Bk, _>(mask, out);
            }
            if let Some(bias) = r.bias_grad {
                observe::<Bk, _>(bias, out);
            }
        }
        Err(_) => panic!("no observation for results of type {}", type_name::<T>()),
    }
}

/// The decorated backend under test and the bare backend it must match.
type Decorated = MixedPrecision<Instrumented<Flex>>;
type Inner = Instrumented<Flex>;

/// An argument of the decorated backend as the bare backend takes it: unwrapped by the
/// decorator's and the instrument's own argument conversions.
fn bare<T>(arg: T) -> <T::Inner as Inspect>::Inner
where
    T: Arg<Inner>,
    T::Inner: Inspect,
{
    Inspect::into_inner(Arg::into_inner(arg))
}

/// A result of the bare backend in the decorated backend's types, to read it the same way.
fn rewrap<T>(result: <T::Inner as Wrap>::Inner) -> T
where
    T: Output<Inner>,
    T::Inner: Wrap,
{
    T::wrap(Wrap::wrap(result), &case_device().precision)
}

/// Runs one op on the decorated backend and on the bare one, each with fresh arguments
/// from `args`, and records the first op the instrumented inner backend received during the
/// decorated call.
fn run_case<Args>(
    name: &'static str,
    args: impl Fn() -> Args,
    decorated: impl FnOnce(Args) -> Vec<Observed>,
    bare: impl FnOnce(Args) -> Vec<Observed>,
) -> Case {
    let fresh = || {
        Decorated::seed(&case_device(), 7);
        catch_unwind(AssertUnwindSafe(&args)).ok()
    };
    let (Some(decorated_args), Some(bare_args)) = (fresh(), fresh()) else {
        panic!("{name}: no sample arguments");
    };
    let (seen, log) = record(|| catch_unwind(AssertUnwindSafe(|| decorated(decorated_args))));
    let expected = catch_unwind(AssertUnwindSafe(|| bare(bare_args)));
    let seen_of = |r: std::thread::Result<Vec<Observed>>| match r {
        Ok(values) => Seen::Values(values),
        Err(_) => Seen::Failed,
    };
    Case {
        name,
        decorated: seen_of(seen),
        bare: seen_of(expected),
        first_inner_op: log.first().map(|r| r.op),
    }
}

macro_rules! differential_cases {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty => $kind:ident $($op:ident)? ; )*) => {{
        let mut cases: Vec<Case> = Vec::new();
        $(
            cases.push(run_case(
                stringify!($name),
                || ($( sample::<Self, $ty>(&case_device()), )*),
                |($($arg,)*)| {
                    let mut out = Vec::new();
                    observe::<Self, $ret>(Self::$name($($arg),*), &mut out);
                    out
                },
                |($($arg,)*)| {
                    let result = Flex::$name($( bare::<$ty>($arg) ),*);
                    let mut out = Vec::new();
                    observe::<Self, $ret>(rewrap::<$ret>(result), &mut out);
                    out
                },
            ));
        )*
        cases
    }};
}

thread_local! {
    static CASE_DEVICE: std::cell::RefCell<Option<MpDevice<Inner>>> = const { std::cell::RefCell::new(None) };
}

/// The device the cases of this thread run on.
fn case_device() -> MpDevice<Inner> {
    CASE_DEVICE.with(|d| d.borrow().clone().expect("cases run inside `Cases::cases`"))
}

/// Every listed op of every trait.
trait Cases {
    fn cases(policy: &str) -> Vec<Case>;
}

impl Cases for Decorated {
    fn cases(policy: &str) -> Vec<Case> {
        let policy: Policy = policy.parse().unwrap();
        let device = Decorated::device(Default::default(), policy).unwrap();
        CASE_DEVICE.with(|d| *d.borrow_mut() = Some(device));
        let mut all = Vec::new();
        all.extend(float_op_list!(differential_cases));
        all.extend(int_op_list!(differential_cases));
        all.extend(bool_op_list!(differential_cases));
        all.extend(q_op_list!(differential_cases));
        all.extend(module_op_list!(differential_cases));
        all.extend(activation_op_list!(differential_cases));
        all
    }
}

#[test]
fn every_forwarded_op_reaches_the_inner_backend_and_matches_it_bit_for_bit() {
    let cases = Decorated::cases("f32");
    let mut problems = Vec::new();
    for case in &cases {
        if case.first_inner_op != Some(case.name) {
            problems.push(format!(
                "{}: the inner backend received {:?} first",
                case.name, case.first_inner_op
            ));
        }
        if case.decorated != case.bare {
            problems.push(format!(
                "{}: decorated {:?}, bare {:?}",
                case.name, case.decorated, case.bare
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The samples are meant to be valid for most ops: most cases compare real results.
    let compared = cases
        .iter()
        .filter(|c| matches!(c.bare, Seen::Values(_)))
        .count();
    eprintln!("{compared} of {} ops compared on real results", cases.len());
    assert!(
        compared * 10 >= cases.len() * 7,
        "only {compared} of {} ops ran on the sample inputs",
        cases.len()
    );
}

/// Under 16-bit policies the values differ by the formats' rounding, but an op that runs on
/// the bare backend runs through the decorator too, with results of the same shapes, read
/// back at the output dtype (f32) where the bare backend gives f32.
#[test]
fn under_half_policies_every_op_that_runs_bare_runs_decorated() {
    for policy in ["p=f32,c=bf16,o=f32", "p=f32,c=f16,o=f32"] {
        let mut problems = Vec::new();
        for case in Decorated::cases(policy) {
            let (Seen::Values(bare), decorated) = (&case.bare, &case.decorated) else {
                continue;
            };
            let Seen::Values(decorated) = decorated else {
                problems.push(format!("{}: fails under {policy}", case.name));
                continue;
            };
            let same_layout = bare.len() == decorated.len()
                && bare.iter().zip(decorated).all(|pair| match pair {
                    (
                        Observed::Data {
                            dtype: a,
                            shape: sa,
                            ..
                        },
                        Observed::Data {
                            dtype: b,
                            shape: sb,
                            ..
                        },
                    ) => sa == sb && a == b,
                    (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
                });
            if !same_layout {
                problems.push(format!(
                    "{}: under {policy} {decorated:?}, bare {bare:?}",
                    case.name
                ));
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}

/// Burn's backend traits and the files of `burn-backend` that define them.
const BURN_TRAITS: &[(&str, &str)] = &[
    ("backend/base.rs", "Backend"),
    ("backend/primitive.rs", "QTensorPrimitive"),
    ("backend/ops/tensor.rs", "FloatTensorOps"),
    ("backend/ops/int_tensor.rs", "IntTensorOps"),
    ("backend/ops/bool_tensor.rs", "BoolTensorOps"),
    ("backend/ops/qtensor.rs", "QTensorOps"),
    ("backend/ops/modules/base.rs", "ModuleOps"),
    ("backend/ops/activation.rs", "ActivationOps"),
    ("backend/ops/transaction.rs", "TransactionOps"),
];

/// The `src` folder of the `burn-backend` this crate builds against, found by `cargo metadata`.
fn burn_backend_src() -> std::path::PathBuf {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("rustc runs");
    let version = String::from_utf8(version.stdout).unwrap();
    let host = version
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("rustc names its host");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    // Offline and for this host only: every package it lists was fetched by the build.
    let output = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(["--filter-platform", host, "--manifest-path", manifest])
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata --filter-platform {host}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let package = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "burn-backend")
        .expect("burn-backend is a dependency");
    let manifest_path = std::path::PathBuf::from(package["manifest_path"].as_str().unwrap());
    manifest_path.parent().unwrap().join("src")
}

/// Source text without `//` comments (doc examples hold braces).
fn without_comments(source: &str) -> String {
    source
        .lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names of the methods declared directly in `trait {name}` of `source`.
fn trait_methods(source: &str, name: &str) -> Vec<String> {
    let source = without_comments(source);
    let start = source
        .find(&format!("pub trait {name}"))
        .unwrap_or_else(|| panic!("trait {name} not found"));
    let body_start = start + source[start..].find('{').unwrap();
    let bytes = source.as_bytes();
    let (mut depth, mut methods, mut i) = (0usize, Vec::new(), body_start);
    loop {
        match bytes[i] {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return methods;
                }
            }
            b'f' if depth == 1
                && source[i..].starts_with("fn ")
                && bytes[i - 1].is_ascii_whitespace() =>
            {
                let name: String = source[i + 3..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                methods.push(name);
            }
            _ => {}
        }
        i += 1;
    }
}

#[test]
fn the_decorator_implements_every_method_of_burns_backend_traits() {
    let burn = burn_backend_src();
    let ours_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut ours = String::new();
    for file in ["backend.rs", "tensor.rs"] {
        ours += &std::fs::read_to_string(ours_dir.join(file)).unwrap();
    }
    for entry in std::fs::read_dir(ours_dir.join("ops")).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() != "conformance.rs" {
            ours += &std::fs::read_to_string(path).unwrap();
        }
    }
    let ours = without_comments(&ours);
    let mut missing = Vec::new();
    let mut total = 0;
    for (file, name) in BURN_TRAITS {
        let source = std::fs::read_to_string(burn.join(file)).unwrap();
        for method in trait_methods(&source, name) {
            total += 1;
            let declared =
                ours.contains(&format!("fn {method}(")) || ours.contains(&format!("fn {method}<"));
            if !declared {
                missing.push(format!("{name}::{method}"));
            }
        }
    }
    assert!(
        total > 400,
        "only {total} methods found: the parser lost track of Burn's traits"
    );
    assert!(missing.is_empty(), "not forwarded: {missing:?}");
}
