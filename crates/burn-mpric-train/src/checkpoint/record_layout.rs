//! The layout of a Burn record file: which tensors it holds, under which names, with which
//! shapes and dtypes, read without building the record.
//!
//! Burn's `load_record` panics when a record does not fit the module ("vec record does not
//! the same length as the module"), and an optimizer silently drops state it has no parameter
//! for. Reading the layout first turns both into an error that names the tensor.
//!
//! The walk is generic over named MessagePack (Burn's `NamedMpk*Recorder`): a map with the
//! keys `bytes`, `shape` and `dtype` is a tensor; a map `{id, param}` is a parameter and gives
//! the tensor its id. Each tensor's data must be exactly as long as its shape and dtype say.
//! Nothing is allocated from a length the file declares (MessagePack lengths are checked
//! against the bytes at hand).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::recipe::document::field_path;

/// One tensor of a record.
///
/// ```
/// use burn_mpric_train::checkpoint::record_layout::RecordTensor;
///
/// let t = RecordTensor { path: "layers.0.weight".into(), id: None, shape: vec![4, 8], dtype: "F32".into() };
/// assert_eq!(t.to_string(), "`layers.0.weight` [4, 8] F32");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecordTensor {
    /// Dotted path of the tensor in the record (`layers.0.weight`; for an optimizer record,
    /// the parameter id comes first).
    pub path: String,
    /// The parameter id, for a module parameter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The shape.
    pub shape: Vec<u64>,
    /// The dtype as Burn names it (`F32`, `F16`, `BF16`, ...).
    pub dtype: String,
}

impl fmt::Display for RecordTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` {:?} {}", self.path, self.shape, self.dtype)
    }
}

/// The tensors of a named-MessagePack Burn record, in file order. Paths are relative to the
/// record's item (Burn's metadata is skipped).
///
/// ```
/// use burn::backend::Flex;
/// use burn::module::Module;
/// use burn::nn::LinearConfig;
/// use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
/// use burn_mpric_train::checkpoint::record_layout::record_tensors;
///
/// let linear = LinearConfig::new(3, 2).init::<Flex>(&Default::default());
/// let recorder = NamedMpkBytesRecorder::<FullPrecisionSettings>::new();
/// let bytes = Recorder::<Flex>::record(&recorder, linear.into_record(), ()).unwrap();
/// let tensors = record_tensors(&bytes).unwrap();
/// let names: Vec<String> = tensors.iter().map(ToString::to_string).collect();
/// assert_eq!(names, ["`weight` [3, 2] F32", "`bias` [2] F32"]);
/// assert!(tensors.iter().all(|t| t.id.is_some()));
/// assert!(record_tensors(b"\xc6\xff\xff\xff\xff").is_err()); // a 4 GiB binary that is not there
/// ```
pub fn record_tensors(bytes: &[u8]) -> Result<Vec<RecordTensor>, String> {
    Ok(walk_record(bytes)?.into_iter().map(|(t, _)| t).collect())
}

/// The tensors of a record that hold non-finite values (NaN, ±inf), with how many each
/// holds. Float payloads of dtype F64, F32, F16 and BF16 are read; others are not floats.
///
/// ```
/// use burn::backend::Flex;
/// use burn::module::{Module, Param};
/// use burn::nn::LinearConfig;
/// use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
/// use burn::tensor::Tensor;
/// use burn_mpric_train::checkpoint::record_layout::non_finite_tensors;
///
/// let device = Default::default();
/// let mut linear = LinearConfig::new(2, 2).init::<Flex>(&device);
/// let recorder = NamedMpkBytesRecorder::<FullPrecisionSettings>::new();
/// let bytes = Recorder::<Flex>::record(&recorder, linear.clone().into_record(), ()).unwrap();
/// assert!(non_finite_tensors(&bytes).unwrap().is_empty());
///
/// linear.bias = Some(Param::from_tensor(Tensor::from_floats([f32::NAN, f32::INFINITY], &device)));
/// let bytes = Recorder::<Flex>::record(&recorder, linear.into_record(), ()).unwrap();
/// assert_eq!(non_finite_tensors(&bytes).unwrap(), vec![("bias".to_string(), 2)]);
/// ```
pub fn non_finite_tensors(bytes: &[u8]) -> Result<Vec<(String, u64)>, String> {
    Ok(walk_record(bytes)?
        .into_iter()
        .filter(|(_, bad)| *bad > 0)
        .map(|(t, bad)| (t.path, bad))
        .collect())
}

/// Every tensor of a record with its count of non-finite values.
fn walk_record(bytes: &[u8]) -> Result<Vec<(RecordTensor, u64)>, String> {
    let node: Node =
        rmp_serde::from_slice(bytes).map_err(|e| format!("not a MessagePack record: {e}"))?;
    let Node::Map(entries) = node else {
        return Err("not a Burn record (no top-level map)".into());
    };
    let item = entries
        .into_iter()
        .find_map(|(key, value)| (key == "item").then_some(value))
        .ok_or("not a Burn record (no `item`)")?;
    let mut found = Vec::new();
    walk(&item, String::new(), None, &mut found)?;
    Ok(found)
}

fn walk(
    node: &Node,
    path: String,
    id: Option<&str>,
    found: &mut Vec<(RecordTensor, u64)>,
) -> Result<(), String> {
    let join = |key: &str| field_path(&path, key);
    match node {
        Node::Map(entries) => {
            let get = |name: &str| entries.iter().find(|(k, _)| k == name).map(|(_, v)| v);
            if let (Some(shape), Some(dtype), Some(payload)) =
                (get("shape"), get("dtype"), get("bytes"))
            {
                let dtype = dtype.name();
                let shape: Vec<u64> = match shape {
                    Node::Seq(dims) => dims
                        .iter()
                        .map(|d| match d {
                            Node::Int(v) => *v,
                            _ => u64::MAX,
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                let Node::Bytes(bytes) = payload else {
                    return Err(format!("`{path}`: its data is not a byte string"));
                };
                let size = element_size(&dtype).ok_or_else(|| {
                    format!("`{path}`: dtype {dtype} is not a plain tensor dtype")
                })?;
                let expected = shape.iter().try_fold(size, |n, d| n.checked_mul(*d));
                if expected != Some(bytes.len() as u64) {
                    return Err(format!(
                        "`{path}`: {} bytes of data for shape {shape:?} {dtype}",
                        bytes.len()
                    ));
                }
                let bad = count_non_finite(bytes, &dtype);
                let tensor = RecordTensor {
                    path,
                    id: id.map(str::to_string),
                    shape,
                    dtype,
                };
                found.push((tensor, bad));
                return Ok(());
            }
            if let (Some(Node::Str(param_id)), Some(param), 2) =
                (get("id"), get("param"), entries.len())
            {
                return walk(param, path, Some(param_id), found);
            }
            for (key, value) in entries {
                walk(value, join(key), id, found)?;
            }
        }
        Node::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, join(&i.to_string()), id, found)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Bytes per element of a Burn dtype, for the dtypes a record of plain tensors holds.
fn element_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "F64" | "I64" | "U64" => 8,
        "F32" | "Flex32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        "I8" | "U8" | "Bool" => 1,
        _ => return None,
    })
}

/// Non-finite elements of a little-endian float payload of `dtype` (Burn's names).
fn count_non_finite(bytes: &[u8], dtype: &str) -> u64 {
    let count = |width: usize, non_finite: &dyn Fn(&[u8]) -> bool| {
        bytes.chunks_exact(width).filter(|c| non_finite(c)).count() as u64
    };
    // An IEEE float is non-finite exactly when its exponent bits are all ones.
    let half = |mask: u16| move |c: &[u8]| u16::from_le_bytes([c[0], c[1]]) & mask == mask;
    match dtype {
        "F64" => count(8, &|c| {
            !f64::from_le_bytes(c.try_into().unwrap_or([0; 8])).is_finite()
        }),
        "F32" => count(4, &|c| {
            !f32::from_le_bytes(c.try_into().unwrap_or([0; 4])).is_finite()
        }),
        "F16" => count(2, &half(0x7c00)),
        "BF16" => count(2, &half(0x7f80)),
        _ => 0,
    }
}

/// The structure of a MessagePack value; binary payloads are kept for the finiteness count.
#[derive(Debug)]
enum Node {
    Bytes(Vec<u8>),
    Map(Vec<(String, Node)>),
    Seq(Vec<Node>),
    Str(String),
    Int(u64),
    Other,
}

impl Node {
    /// A dtype as Burn serializes it: a unit variant's name, or a one-key map for a variant
    /// with data.
    fn name(&self) -> String {
        match self {
            Node::Str(s) => s.clone(),
            Node::Map(entries) if entries.len() == 1 => entries[0].0.clone(),
            Node::Int(i) => format!("#{i}"),
            _ => "?".to_string(),
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a MessagePack value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Other)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(u64::try_from(v).map_or(Node::Other, Node::Int))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Other)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_string()))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Node, E> {
        Ok(Node::Bytes(v.to_vec()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Other)
    }
    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Other)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some((key, value)) = map.next_entry::<Node, Node>()? {
            let key = match key {
                Node::Str(s) => s,
                Node::Int(i) => i.to_string(),
                _ => "?".to_string(),
            };
            entries.push((key, value));
        }
        Ok(Node::Map(entries))
    }
}
