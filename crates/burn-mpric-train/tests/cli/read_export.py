"""Predictions of an MLP exported by `mpric export`, computed with numpy alone.

    python read_export.py model.safetensors inputs.csv

Reads the weights with the `safetensors` package and the sidecar JSON beside them (the
model's columns, the training split's standardization, the class labels), runs the forward
pass the sidecar describes in float64, and prints what `mpric predict` prints: a CSV with
the input's line, then the label and its probability, or the value in the target's units.

The CSV must be comma-separated with a header row and one line per row (as the tests write
it): a row's line is its index plus 2.
"""

import csv
import json
import pathlib
import struct
import sys

import numpy as np
from safetensors.numpy import load_file


def load(weights_path: str) -> dict:
    """The tensors as float64. numpy has no bfloat16: bf16 files are read from the
    safetensors layout itself (an 8-byte header length, a JSON header, the data), each
    value's 16 bits being the top half of an f32."""
    raw = pathlib.Path(weights_path).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    if not any(v.get("dtype") == "BF16" for k, v in header.items() if k != "__metadata__"):
        return {k: v.astype(np.float64) for k, v in load_file(weights_path).items()}
    data = raw[8 + n :]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        bits = np.frombuffer(data[start:end], dtype="<u2").astype(np.uint32) << 16
        tensors[name] = bits.view(np.float32).astype(np.float64).reshape(info["shape"])
    return tensors


def main(weights_path: str, csv_path: str) -> None:
    weights = load(weights_path)
    path = pathlib.Path(weights_path)
    sidecar = json.loads(path.with_suffix(".json").read_text())
    assert sidecar["format"] == "mpric-export/1", sidecar["format"]
    schema = sidecar["schema"]
    columns = schema["inputs"]["columns"]["names"]
    scaling = schema["scaling"]
    hidden = sidecar["recipe"]["model"]["hidden"]
    pytorch = sidecar["layout"] == "pytorch"

    def linear(name: str, x: np.ndarray) -> np.ndarray:
        w = weights[f"{name}.weight"]
        return x @ (w.T if pytorch else w) + weights[f"{name}.bias"]

    with open(csv_path, newline="") as f:
        rows = list(csv.reader(f))
    header, body = [c.strip() for c in rows[0]], rows[1:]
    index = [header.index(c) for c in columns]
    raw = np.array([[float(r[i]) for i in index] for r in body])
    group = scaling["group"]
    f = np.arange(len(columns)) // group
    x = (raw - np.array(scaling["mean"])[f]) / np.array(scaling["std"])[f]
    # Standardized inputs are rounded to f32 once, as the model reads them.
    h = x.astype(np.float32).astype(np.float64)
    for i in range(len(hidden)):
        h = np.maximum(linear(f"layers.{i}", h), 0.0)
    out = linear("out", h)

    writer = csv.writer(sys.stdout, lineterminator="\n")
    outputs = schema["outputs"]
    if "classes" in outputs:
        names = outputs["classes"]["names"]
        writer.writerow(["line", outputs["classes"]["target"], "probability"])
        e = np.exp(out - out.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        for line, (probs, best) in enumerate(zip(p, p.argmax(axis=1)), start=2):
            writer.writerow([line, names[best], repr(float(probs[best]))])
    else:
        mean, std = scaling["target"]
        writer.writerow(["line", outputs["value"]["target"]])
        for line, value in enumerate(out[:, 0] * std + mean, start=2):
            writer.writerow([line, repr(float(value))])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
