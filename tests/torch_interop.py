"""PyTorch side of test_torch_interop: dpt's safetensors files in PyTorch and back, with a
reader and a writer of the format written here in numpy (Debian has no `safetensors`).
    torch_interop.py DPT_MODEL DPT_IO TORCH_MODEL TORCH_IO
Loads DPT_MODEL into tools/bench/torch_train.py's mnist_cnn (strict: every name and shape),
checks its outputs on DPT_IO's "input" against dpt's ("output"), then writes a freshly
initialised PyTorch mnist_cnn to TORCH_MODEL and its outputs on the same input to TORCH_IO.
Exits 1 with a message on any mismatch."""
import json, os, struct, sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools", "bench"))
from torch_train import mnist_cnn  # noqa: E402

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = memoryview(data)[8 + n:]
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        array = np.frombuffer(body[begin:end], dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
        out[name] = torch.from_numpy(array.copy())
    return out


def write_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        array = np.ascontiguousarray(t.detach().cpu().numpy())
        dtype = {np.dtype(v): k for k, v in DTYPES.items()}[array.dtype]
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        chunks.append(array.tobytes())
        offset += array.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def main():
    dpt_model, dpt_io, torch_model, torch_io = sys.argv[1:5]
    io = read_safetensors(dpt_io)
    x, expected = io["input"], io["output"]
    model = mnist_cnn(*x.shape[1:]).eval()
    model.load_state_dict(read_safetensors(dpt_model))  # strict: a missing or extra name raises
    with torch.no_grad():
        got = model(x)
    diff = (got - expected).abs().max().item()
    print(f"dpt model in PyTorch: max |output difference| {diff:.3g}")
    if not torch.allclose(got, expected, rtol=1e-4, atol=1e-4):
        sys.exit(f"dpt's weights in PyTorch give other outputs: max difference {diff}")

    torch.manual_seed(1)
    fresh = mnist_cnn(*x.shape[1:]).eval()
    write_safetensors(torch_model, fresh.state_dict())
    with torch.no_grad():
        write_safetensors(torch_io, {"output": fresh(x)})


if __name__ == "__main__":
    main()
