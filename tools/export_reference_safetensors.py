#!/usr/bin/env python3
"""export_reference_safetensors.py — converts a reference PyTorch Transformer LM's weights to the
safetensors file flashtrain loads (ft::load_parameters): the state dict under its own names
(token_embeddings.weight, layers.N.attn.q_proj.weight, ..., ln_final.weight, lm_head.weight), fp32,
contiguous, with metadata {"format": "pt"}.

The input is a torch.save file holding a state dict, or a training checkpoint dict that holds it under
"model" or "state_dict" (as the reference training loop saves it). Prefixes added by torch.compile
("_orig_mod.") and DistributedDataParallel ("module.") are removed. Names outside the reference model's
are refused unless --allow-extra. Needs torch; the safetensors package writes the file when it is
installed, else this script writes the same format itself (a JSON header and the raw little-endian bytes).

    python tools/export_reference_safetensors.py checkpoint.pt model.safetensors

To check that flashtrain computes the reference model's logits from the exported file, load it with
flashtrain.model.TransformerLM(...).load_safetensors(path) and compare .logits(tokens) with the reference
model's output; tests/python/test_reference_logits.py does exactly that for a random reference model (fp32 on
the CPU and CUDA, bf16), running this script as a subprocess:

    PYTHONPATH=build/python python3 -m pytest -q tests/python/test_reference_logits.py
"""

import argparse
import json
import os
import re
import sys

import torch

try:
    from safetensors.torch import save_file
except ImportError:
    save_file = None

REFERENCE_NAME = re.compile(
    r"token_embeddings\.weight"
    r"|layers\.\d+\.(attn\.(q_proj|k_proj|v_proj|output_proj)|ln1|ln2|ffn\.(w1|w2|w3))\.weight"
    r"|ln_final\.weight|lm_head\.weight"
)
STRIPPED_PREFIXES = ("_orig_mod.", "module.")
# The format's names of the torch dtypes a state dict may hold.
SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64",
    torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}


def find_state_dict(loaded):
    """The state dict inside what torch.load returned."""
    if not isinstance(loaded, dict):
        sys.exit(f"error: the input holds a {type(loaded).__name__}, expected a dict (a state dict or a checkpoint)")
    for key in ("model", "state_dict"):
        if isinstance(loaded.get(key), dict):
            return loaded[key]
    return loaded


def clean_name(name):
    """The name without torch.compile / DDP wrapper prefixes."""
    changed = True
    while changed:
        changed = False
        for prefix in STRIPPED_PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix):]
                changed = True
    return name


def write_safetensors(tensors, path, metadata):
    """The safetensors file of tensors (name -> contiguous CPU tensor) and metadata (str -> str), written without
    the safetensors package: an 8-byte little-endian header length, the JSON header {name: {"dtype", "shape",
    "data_offsets": [begin, end]}, "__metadata__": metadata} padded with spaces to a multiple of 8 bytes, then the
    data section. Tensors are stored by descending element size (the given order within one size), so each
    one starts aligned to its element size."""
    if sys.byteorder != "little":
        sys.exit("error: writing safetensors without the safetensors package needs a little-endian machine")
    header = {"__metadata__": metadata}
    chunks = []
    offset = 0
    for name in sorted(tensors, key=lambda n: -tensors[n].element_size()):
        tensor = tensors[name]
        if tensor.dtype not in SAFETENSORS_DTYPES:
            sys.exit(f"error: {name!r} has dtype {tensor.dtype}, which this script cannot write without the "
                     "safetensors package")
        data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes()  # (numel * element size) bytes
        header[name] = {"dtype": SAFETENSORS_DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as out:
        out.write(len(encoded).to_bytes(8, "little"))
        out.write(encoded)
        for data in chunks:
            out.write(data)
        out.flush()
        os.fsync(out.fileno())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", help="torch.save file: a state dict or a checkpoint dict holding one")
    parser.add_argument("output", help="the .safetensors file to write")
    parser.add_argument("--keep-dtype", action="store_true", help="keep each tensor's dtype instead of fp32")
    parser.add_argument("--allow-extra", action="store_true", help="export names the reference model lacks too")
    args = parser.parse_args()

    state = find_state_dict(torch.load(args.input, map_location="cpu", weights_only=True))
    tensors = {}
    for raw_name, value in state.items():
        if not isinstance(value, torch.Tensor):
            sys.exit(f"error: state dict entry {raw_name!r} is a {type(value).__name__}, expected a tensor")
        name = clean_name(raw_name)
        if name in tensors:
            sys.exit(f"error: two entries become {name!r} once prefixes are removed")
        tensor = value.detach() if args.keep_dtype else value.detach().to(torch.float32)
        tensors[name] = tensor.contiguous()

    unexpected = sorted(name for name in tensors if not REFERENCE_NAME.fullmatch(name))
    if unexpected and not args.allow_extra:
        sys.exit(f"error: {len(unexpected)} names are not the reference model's: {', '.join(unexpected)} "
                 "(--allow-extra exports them anyway)")
    for required in ("token_embeddings.weight", "ln_final.weight", "lm_head.weight"):
        if required not in tensors:
            sys.exit(f"error: the state dict has no {required!r}")

    # Written beside the target and renamed over it, so the output is never a partial file.
    temporary = f"{args.output}.tmp-{os.getpid()}"
    try:
        (save_file or write_safetensors)(tensors, temporary, {"format": "pt"})
        os.replace(temporary, args.output)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    count = sum(t.numel() for t in tensors.values())
    print(f"wrote {args.output}: {len(tensors)} tensors, {count:,} parameters")


if __name__ == "__main__":
    main()
