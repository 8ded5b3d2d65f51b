#!/usr/bin/env python3
"""make_seeds.py — writes the fuzz targets' seed corpora: valid files of each reader and the crafted
cases of issue 36 (a header nested 60,000 levels deep, a 20,000-entry header, a byte-order mark,
invalid UTF-8, duplicate names, .npy headers of every dtype and version, truncations, NaN and negative
optimiser state).
    python3 tests/fuzz/make_seeds.py OUTPUT_FOLDER   (writes OUTPUT_FOLDER/{safetensors,token_file,checkpoint})
"""
import json
import os
import struct
import sys


def safetensors(header_text: str, data: bytes = b"") -> bytes:
    raw = header_text.encode("utf-8", "surrogatepass") if isinstance(header_text, str) else header_text
    raw += b" " * ((8 - len(raw) % 8) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def entry(dtype: str, shape, begin: int, end: int) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def npy(descr: str, shape: str, data: bytes, major: int = 1) -> bytes:
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    preamble = 10 if major == 1 else 12
    total = (preamble + len(header) + 1 + 63) // 64 * 64
    header = header + " " * (total - preamble - len(header) - 1) + "\n"
    length = struct.pack("<H", len(header)) if major == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([major, 0]) + length + header.encode() + data


def f32(*values) -> bytes:
    return struct.pack("<%df" % len(values), *values)


def checkpoint(m_values, v_values, step="3", extra_metadata=None) -> bytes:
    metadata = {"format": "pt", "flashtrain.checkpoint": "1", "flashtrain.step": step,
                "flashtrain.optimizer_step": step, "flashtrain.data_rng.seed": "1",
                "flashtrain.data_rng.counter": "12"}
    metadata.update(extra_metadata or {})
    header = {"__metadata__": metadata, "w": entry("F32", [2, 3], 0, 24),
              "optimizer.m.w": entry("F32", [2, 3], 24, 48), "optimizer.v.w": entry("F32", [2, 3], 48, 72)}
    return safetensors(json.dumps(header), f32(*range(6)) + f32(*m_values) + f32(*v_values))


def main() -> None:
    out = sys.argv[1]
    seeds = {"safetensors": {}, "token_file": {}, "checkpoint": {}}

    s = seeds["safetensors"]
    valid = {"__metadata__": {"format": "pt"}, "a": entry("F32", [2, 2], 0, 16), "b": entry("BF16", [3], 16, 22)}
    s["valid"] = safetensors(json.dumps(valid), bytes(22))
    s["deep_60000"] = safetensors('{"w":' + "[" * 60000 + "]" * 60000 + "}")
    s["deep_unclosed"] = safetensors('{"w":{"x":' + "{" * 60000)
    s["wide_20000"] = safetensors(json.dumps({"t%d" % i: entry("U8", [1], i, i + 1) for i in range(20000)}),
                                  bytes(20000))
    s["bom"] = b"\xef\xbb\xbf" + json.dumps(valid).encode()
    s["bom"] = safetensors(s["bom"], bytes(22))
    s["invalid_utf8"] = safetensors(b'{"w\xff":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', bytes(4))
    s["duplicate"] = safetensors('{"a":%s,"a":%s}' % (json.dumps(entry("F32", [1], 0, 4)),
                                                      json.dumps(entry("F32", [1], 4, 8))), bytes(8))
    s["overlap"] = safetensors(json.dumps({"a": entry("F32", [4], 0, 16), "b": entry("F32", [4], 8, 24)}), bytes(24))
    s["huge_length"] = struct.pack("<Q", 1 << 62) + b"{}"
    s["empty"] = b""
    s["unknown_fields"] = safetensors('{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":[[{"y":null}]]}}',
                                      bytes(4))

    t = seeds["token_file"]
    ids16 = struct.pack("<64H", *[(i * 37) % 1000 for i in range(64)])
    ids32 = struct.pack("<64I", *[65000 + i * 1300 for i in range(64)])
    t["raw16"] = bytes([2]) + ids16
    t["raw32"] = bytes([5]) + ids32
    t["npy_u2"] = bytes([2]) + npy("<u2", "(64,)", ids16)
    t["npy_u4"] = bytes([5]) + npy("<u4", "(8, 8)", ids32)
    t["npy_v2"] = bytes([2]) + npy("<u2", "(64,)", ids16, major=2)
    t["npy_wrong_dtype"] = bytes([2]) + npy("<i8", "(16,)", ids16[:128])
    t["npy_truncated"] = bytes([2]) + npy("<u2", "(64,)", ids16)[:70]
    t["out_of_vocab"] = bytes([1]) + ids16

    c = seeds["checkpoint"]
    c["valid"] = checkpoint([0.1] * 6, [0.01] * 6)
    c["nan_m"] = checkpoint([float("nan")] + [0.0] * 5, [0.01] * 6)
    c["negative_v"] = checkpoint([0.0] * 6, [0.01] * 5 + [-1.0])
    c["bad_step"] = checkpoint([0.0] * 6, [0.0] * 6, step="x")
    c["wrong_version"] = checkpoint([0.0] * 6, [0.0] * 6, extra_metadata={"flashtrain.checkpoint": "9"})

    for reader, files in seeds.items():
        folder = os.path.join(out, reader)
        os.makedirs(folder, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
