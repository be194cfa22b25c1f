"""The held-out loss of a character model exported by `mpric export`, computed with numpy
alone from the forward pass its sidecar describes.

    python read_export_lm.py model.safetensors text.txt

Prints the mean cross-entropy of every next character over the windows `mpric evaluate
--data text.txt` scores: windows of the model's context, starting every context characters.
"""

import json
import math
import pathlib
import sys

import numpy as np
from safetensors.numpy import load_file

ERF = np.vectorize(math.erf)


def main(weights_path: str, text_path: str) -> None:
    w = {k: v.astype(np.float64) for k, v in load_file(weights_path).items()}
    sidecar = json.loads(pathlib.Path(weights_path).with_suffix(".json").read_text())
    assert sidecar["layout"] == "pytorch", sidecar["layout"]
    model = sidecar["recipe"]["model"]
    text = sidecar["schema"]["inputs"]["text"]
    vocab, context = text["vocab"], text["context"]
    heads, layers = model["heads"], model["layers"]

    def linear(name, x):
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    def layernorm(x, name):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-5) * w[f"{name}.weight"] + w[f"{name}.bias"]

    def attention(x, name):
        t, d = x.shape
        dh = d // heads
        split = lambda y: y.reshape(t, heads, dh).transpose(1, 0, 2)
        q, k, v = (split(linear(f"{name}.{p}", x)) for p in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(dh)
        scores = np.where(np.triu(np.ones((t, t), bool), 1), -10000.0, scores)
        e = np.exp(scores - scores.max(-1, keepdims=True))
        context_ = (e / e.sum(-1, keepdims=True)) @ v
        return linear(f"{name}.output", context_.transpose(1, 0, 2).reshape(t, d))

    def logits(ids):
        x = w["token.weight"][ids] + w["position.weight"][: len(ids)]
        for i in range(layers):
            p = f"encoder.layers.{i}"
            x = x + attention(layernorm(x, f"{p}.norm_2"), f"{p}.mha")
            h = linear(f"{p}.pwff.linear_inner", layernorm(x, f"{p}.norm_1"))
            x = x + linear(f"{p}.pwff.linear_outer", h * (1 + ERF(h / math.sqrt(2))) / 2)
        return linear("head", layernorm(x, "norm"))

    content = pathlib.Path(text_path).read_text(encoding="utf-8").lstrip("\ufeff")
    tokens = np.array([vocab.index(c) for c in content])
    losses = []
    for start in range(0, len(tokens) - context, context):
        window = tokens[start : start + context + 1]
        z = logits(window[:-1])
        z = z - z.max(-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        losses.extend(-logp[np.arange(context), window[1:]])
    print(repr(float(np.mean(losses))))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
