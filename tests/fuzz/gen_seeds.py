#!/usr/bin/env python3
"""Write the hand-made seed inputs of the fuzz corpora (tests/fuzz/corpus/<harness>/seed_*).

Run from anywhere: python3 tests/fuzz/gen_seeds.py [--tgrad build/tools/tgrad]. Needs only the
Python standard library; the checkpoint seeds (fuzz_checkpoint) need the tgrad program and are
written only when --tgrad is given.
The seeds cover each format's features (every dtype, rank 0 to 6, metadata, escapes, every .npy
version) plus a few near misses (one check away from valid) that give the fuzzer a head start.
It also copies a few tests/fixtures files (PyTorch-written safetensors) and their JSON headers.
Besides these, the corpora hold inputs found by fuzzing (kept with -merge=1; docs/fuzzing.md).
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def out(harness, name, data):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, "seed_" + name), "wb") as f:
        f.write(data)


# ----- safetensors -----------------------------------------------------------------------------
SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "BOOL": 1, "U8": 1, "I8": 1, "I16": 2,
         "U16": 2, "I32": 4, "U32": 4, "I64": 8, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1,
         "C64": 8}


def st(tensors, meta=None, pad=True, raw_header=None):
    """tensors: list of (name, dtype, shape, bytes); offsets assigned in order."""
    hdr = {}
    if meta is not None:
        hdr["__metadata__"] = meta
    off = 0
    data = b""
    for name, dt, shape, payload in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(payload)]}
        off += len(payload)
        data += payload
    h = raw_header if raw_header is not None else json.dumps(hdr, separators=(",", ":"))
    h = h.encode("utf-8")
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def fill(dt, shape):
    n = numel(shape) * SIZES[dt]
    return bytes((7 * i + 3) & 0xFF for i in range(n))


def gen_safetensors():
    H = "fuzz_safetensors"
    out(H, "empty", st([]))
    out(H, "empty_meta", st([], meta={"format": "pt"}))
    for dt in SIZES:
        out(H, "dtype_" + dt.lower(), st([("t", dt, [2, 3], fill(dt, [2, 3]))]))
    out(H, "bool_values", st([("m", "BOOL", [4], bytes([0, 1, 2, 255]))]))
    # integers become i32: PyTorch's int64 ids in range, and values one past either end
    out(H, "ids_i64", st([("ids", "I64", [2, 2], struct.pack("<4q", 0, 7, -2**31, 2**31 - 1)),
                          ("mask", "U8", [2], bytes([0, 1]))]))
    out(H, "ids_u64", st([("ids", "U64", [2], struct.pack("<2Q", 3, 2**31 - 1))]))
    out(H, "miss_i64_range", st([("ids", "I64", [2], struct.pack("<2q", 1, 2**31))]))
    out(H, "miss_i64_neg_range", st([("ids", "I64", [2], struct.pack("<2q", -2**31 - 1, 0))]))
    out(H, "miss_u32_range", st([("ids", "U32", [2], struct.pack("<2I", 1, 2**31))]))
    out(H, "f16_special", st([("h", "F16", [4], struct.pack("<4H", 0x7C00, 0xFC00, 0x7E01, 1))]))
    out(H, "f32_nan", st([("x", "F32", [2], struct.pack("<2I", 0x7FC00001, 0xFF800000))]))
    out(H, "rank0", st([("s", "F64", [], struct.pack("<d", 3.5))]))
    out(H, "rank6", st([("r", "F32", [1, 2, 1, 2, 1, 2], fill("F32", [1, 2, 1, 2, 1, 2]))]))
    out(H, "rank7", st([("r", "F32", [1] * 7, fill("F32", [1]))]))
    out(H, "two_unsorted", st([("b", "F32", [2], fill("F32", [2])),
                               ("a", "F64", [1], fill("F64", [1]))]))
    out(H, "meta_escapes", st([("w\u00e9\U0001F600", "F32", [1], fill("F32", [1]))],
                              meta={"k\n\"\\": "v\t\u0001\u00ff", "": "empty key"}))
    out(H, "name_escapes", st([], raw_header='{"\\u00e9\\ud83d\\ude00\\/\\b":'
                                             '{"dtype":"F32","shape":[],"data_offsets":[0,4]}}')
        + b"\0\0\x80\x3f")
    out(H, "whitespace", st([], raw_header=' { "x" : { "shape" : [ 1 ] , "dtype" : "U8" , '
                                           '"data_offsets" : [ 0 , 1 ] } } \n\t\r ') + b"\x05")
    out(H, "long_name", st([("n" * 200, "F32", [1], fill("F32", [1]))]))
    # near misses
    good = st([("a", "F32", [2], fill("F32", [2])), ("b", "F32", [1], fill("F32", [1]))])
    out(H, "miss_truncated", good[:-1])
    out(H, "miss_trailing", good + b"\0")
    out(H, "miss_gap", st([], raw_header='{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}')
        + bytes(8))
    out(H, "miss_overlap", st([], raw_header='{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                                             '"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}')
        + bytes(8))
    out(H, "miss_dup", st([], raw_header='{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                         '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}')
        + bytes(2))
    out(H, "miss_huge_dims", st([], raw_header='{"a":{"dtype":"F64","shape":[4294967296,'
                                               '4294967296],"data_offsets":[0,8]}}') + bytes(8))
    out(H, "miss_big_offsets", st([], raw_header='{"a":{"dtype":"U8","shape":[1],"data_offsets":'
                                                 '[18446744073709551615,18446744073709551616]}}'))
    out(H, "miss_header_size", struct.pack("<Q", 0xFFFFFFFFFFFFFFFF) + b"{}")
    out(H, "miss_zero_dim", st([], raw_header='{"a":{"dtype":"U8","shape":[0],'
                                              '"data_offsets":[0,0]}}'))


# ----- .npy ------------------------------------------------------------------------------------
NPY_SIZES = {"f2": 2, "f4": 4, "f8": 8, "b1": 1, "i1": 1, "u1": 1, "i2": 2, "u2": 2, "i4": 4,
             "u4": 4, "i8": 8, "u8": 8}


def npy(descr, shape, payload=None, version=(1, 0), fortran=False, dict_text=None):
    if dict_text is None:
        sh = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
        dict_text = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
            descr, "True" if fortran else "False", sh)
    h = dict_text.encode("utf-8")
    lenb = 2 if version == (1, 0) else 4
    pre = 6 + 2 + lenb
    h += b" " * (-(pre + len(h) + 1) % 64) + b"\n"
    if payload is None:
        n = numel(shape) * NPY_SIZES.get(descr[1:], 1)
        payload = bytes((5 * i + 1) & 0xFF for i in range(n))
    hl = struct.pack("<H", len(h)) if lenb == 2 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes(version) + hl + h + payload


def gen_npy():
    H = "fuzz_npy"
    for code in NPY_SIZES:
        order = "|" if NPY_SIZES[code] == 1 else "<"
        out(H, "descr_" + code, npy(order + code, [2, 3]))
    out(H, "v2", npy("<f4", [3], version=(2, 0)))
    out(H, "v3_utf8", npy("<f8", [2], version=(3, 0)))
    out(H, "rank0", npy("<f8", [], struct.pack("<d", -2.5)))
    out(H, "rank6", npy("<f4", [1, 2, 1, 2, 1, 2]))
    out(H, "rank7", npy("<f4", [1] * 7))
    out(H, "fortran_1d", npy("<f4", [1, 4, 1], fortran=True))
    out(H, "fortran_2d", npy("<f4", [2, 2], fortran=True))
    out(H, "bool_values", npy("|b1", [4], bytes([0, 1, 2, 255])))
    # i32 reads: NumPy's default int64 ids in range, integral floats, and near misses
    out(H, "ids_i8", npy("<i8", [2, 2], struct.pack("<4q", 0, 7, -2**31, 2**31 - 1)))
    out(H, "ids_f8", npy("<f8", [3], struct.pack("<3d", 1.0, -0.0, 2**31 - 1)))
    out(H, "miss_ids_i8_range", npy("<i8", [2], struct.pack("<2q", 1, 2**31)))
    out(H, "miss_ids_u8_range", npy("<u8", [1], struct.pack("<Q", 2**64 - 1)))
    out(H, "miss_ids_f8_fraction", npy("<f8", [2], struct.pack("<2d", 1.0, 2.5)))
    out(H, "f2_special", npy("<f2", [3], struct.pack("<3H", 0x7C00, 0x7E01, 1)))
    out(H, "dict_variants", npy("<f4", [2], dict_text='{"shape": (2L,), "fortran_order": False,'
                                                      ' "descr": "<f4"}'))
    out(H, "big_endian", npy(">f4", [2]))
    out(H, "native_order", npy("=f4", [2]))
    out(H, "object", npy("|O", [1], b"\x80\x02N."))
    out(H, "structured", npy("", [1], dict_text="{'descr': [('a', '<f4')], "
                                                 "'fortran_order': False, 'shape': (1,), }"))
    out(H, "miss_truncated", npy("<f8", [3])[:-1])
    out(H, "miss_trailing", npy("<f8", [3]) + b"\0")
    out(H, "miss_huge_shape", npy("<f8", [1], b"", dict_text="{'descr': '<f8', 'fortran_order': "
                                  "False, 'shape': (4294967296, 4294967296, 4294967296), }"))
    out(H, "miss_zero_dim", npy("<f4", [0], b""))
    out(H, "miss_version", npy("<f4", [1], version=(4, 0)))
    out(H, "miss_hl", b"\x93NUMPY\x02\x00\xff\xff\xff\xff{}")


# ----- JSON ------------------------------------------------------------------------------------
def gen_json():
    H = "fuzz_json"
    out(H, "scalars", '[0, -0, 1, -1, 18446744073709551615, 18446744073709551616, 1.5, -2e10, '
                      '3E+2, 4e-07, 0.0, true, false, null, "", "a"]')
    out(H, "strings", r'["\"\\\/\b\f\n\r\t", "\u0000\u00e9\u20ac\ud83d\ude00", "é€😀"]')
    out(H, "object", '{"a": {"b": [1, {"c": null}]}, "d": [], "e": {}}')
    out(H, "deep64", "[" * 64 + "]" * 64)
    out(H, "deep65", "[" * 65 + "]" * 65)
    out(H, "ws", " \t\n\r{ \"k\" : [ 1 , 2 ] } \r\n")
    out(H, "bad_trailing_comma", '[1, 2,]')
    out(H, "bad_leading_zero", '[01]')
    out(H, "bad_surrogate", '["\\ud800"]')
    out(H, "bad_utf8", b'["\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"]')
    out(H, "bad_garbage", '{} x')
    hdr = ('{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],'
           '"data_offsets":[0,24]}}')
    out(H, "safetensors_header", hdr)


# ----- from tests/fixtures --------------------------------------------------------------------
FIXTURES = ["sdpa_2d", "optim_sgd_plain", "mha_self", "mha_combined", "enc_post_gelu"]


def gen_fixtures():
    for name in FIXTURES:
        with open(os.path.join(HERE, "..", "fixtures", name + ".safetensors"), "rb") as f:
            data = f.read()
        n = struct.unpack("<Q", data[:8])[0]
        if name in FIXTURES[:3]:
            out("fuzz_safetensors", "fixture_" + name, data)
        out("fuzz_json", "fixture_" + name, data[8:8 + n])


# ----- command lines (fuzz_cli: the arguments after "tgrad", NUL-separated) ---------------------
CLI = {
    "version": ["--version"],
    "help": ["--help"],
    "help_train": ["help", "train"],
    "version_cmd": ["version"],
    "train_default": ["train"],
    "train_task": ["train", "--task", "copy", "--steps", "300", "--d-model", "32", "--heads", "2",
                   "--layers", "1", "--seq-len", "8", "--batch", "16", "--threads", "1"],
    "train_text": ["train", "--text", "a.txt", "b.txt", "--checkpoint", "lic.ckpt", "--plot",
                   "loss.svg", "--log", "log.csv", "--steps", "200", "--save-every", "50"],
    "train_resume": ["train", "--text", "F", "--resume", "ck.ckpt", "--stop-after", "100",
                     "--force", "--quiet"],
    "train_model": ["train", "--layers", "4", "--d-model", "128", "--heads", "8", "--d-ff", "512",
                    "--post-norm", "--activation", "gelu", "--pos", "sinusoidal",
                    "--tie-weights", "--dtype", "f64", "--dropout", "0.1"],
    "train_optim": ["train", "--optimizer", "sgd", "--momentum", "0.9", "--lr=0.1",
                    "--weight-decay", "0", "--warmup", "0", "--clip", "0", "--min-lr", "1e-5",
                    "--eval-every", "10", "--val-fraction", "0.2", "--target-acc", "0.5",
                    "--seed", "42", "--detect-anomaly"],
    "train_bad_value": ["train", "--steps", "--d-model", "64"],
    "train_huge": ["train", "--layers", "4611686018427387904", "--steps", "1e309"],
    "train_both": ["train", "--text", "x", "--task", "sort"],
    "train_heads": ["train", "--d-model", "10", "--heads", "4"],
    "sample": ["sample", "--checkpoint", "lic.ckpt", "--prompt", "Permission ", "--tokens", "300",
               "--temperature", "0.5", "--top-k", "3", "--seed", "7", "--threads", "2"],
    "sample_missing": ["sample", "--prompt", "x"],
    "export": ["export", "--checkpoint", "lic.ckpt", "--out", "lic.safetensors", "--force"],
    "export_same": ["export", "--checkpoint", "a", "--out", "a"],
    "average": ["average", "--out", "avg.ckpt", "--force", "a.step4.ckpt", "a.step8.ckpt"],
    "average_none": ["average", "--out", "avg.ckpt"],
    "info": ["info", "a.safetensors", "b.npy", "--", "--c.npy"],
    "info_none": ["info"],
    "bench": ["bench", "--threads", "2"],
    "gradcheck": ["gradcheck", "--op", "matmul", "softmax", "--dtype", "f32", "--threads", "1"],
    "gradcheck_list": ["gradcheck", "--list"],
    "gradcheck_bad": ["gradcheck", "--op", "nosuchop"],
    "run_sdpa": ["run", "sdpa", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--mask", "m.npy",
                 "--causal", "--attn-out", "a.npy", "--dtype", "f64", "--out", "o.npy",
                 "--grad-out", "do.npy", "--grads", "g.safetensors"],
    "run_mha": ["run", "mha", "--weights", "w.safetensors", "--heads", "2", "--q", "q.npy", "--k",
                "k.npy", "--v", "v.npy", "--attn-mask", "m.npy", "--key-padding-mask", "p.npy"],
    "run_mha_x": ["run", "mha", "--weights", "w.safetensors", "--heads", "nan", "--x", "x.npy"],
    "run_ffn": ["run", "ffn", "--weights", "w.safetensors", "--x", "x.npy", "--activation",
                "gelu"],
    "run_encoder": ["run", "encoder", "--weights", "w.safetensors", "--heads", "4", "--x",
                    "x.npy", "--norm-first", "--eps", "1e-6", "--causal"],
    "run_foreign": ["run", "ffn", "--heads", "2"],
    "run_help": ["run", "encoder", "--help"],
    "unknown": ["frobnicate", "--x"],
}


def gen_cli():
    for name, args in CLI.items():
        out("fuzz_cli", name, b"\0".join(a.encode() for a in args))


# ----- checkpoints (fuzz_checkpoint: small checkpoints of `tgrad train`) ------------------------
CKPT_FIXTURES = ["export_lm.ckpt", "export_task.ckpt", "export_task.safetensors"]
TINY = ["--steps", "2", "--d-model", "4", "--heads", "2", "--d-ff", "4",
        "--seq-len", "4", "--batch", "2", "--threads", "1", "--quiet"]
CKPTS = {
    "task_adamw": ["--task", "reverse"],
    "task_sgd_f64": ["--task", "sort", "--optimizer", "sgd", "--dtype", "f64"],
    "task_adam_sin": ["--task", "copy", "--optimizer", "adam", "--pos", "sinusoidal",
                      "--post-norm", "--activation", "gelu"],
    "text_adamw": [],
    "text_tied_f64": ["--tie-weights", "--dtype", "f64", "--dropout", "0.1"],
    "text_sgd_sin": ["--optimizer", "sgd", "--pos", "sinusoidal", "--momentum", "0"],
    "text_2layers": ["--optimizer", "adam", "--tie-weights"],
}
LAYERS = {"text_2layers": "2"}  # the others: 1


def gen_checkpoints(tgrad):
    import subprocess
    import tempfile
    for name in CKPT_FIXTURES:
        with open(os.path.join(HERE, "..", "fixtures", name), "rb") as f:
            out("fuzz_checkpoint", "fixture_" + name.replace(".", "_"), f.read())
    with tempfile.TemporaryDirectory() as d:
        text = os.path.join(d, "c.txt")
        with open(text, "w") as f:
            f.write("abba cab dab bad. " * 6)
        for name, args in CKPTS.items():
            ck = os.path.join(d, name + ".ckpt")
            mode = [] if name.startswith("task") else ["--text", text]
            layers = ["--layers", LAYERS.get(name, "1")]
            r = subprocess.run([tgrad, "train"] + mode + TINY + layers + args +
                               ["--checkpoint", ck], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
            if r.returncode not in (0, 3):  # 3: a task's accuracy target not reached
                raise SystemExit("gen_seeds.py: tgrad train failed for seed " + name)
            with open(ck, "rb") as f:
                out("fuzz_checkpoint", name, f.read())


if __name__ == "__main__":
    import sys
    gen_fixtures()
    gen_safetensors()
    gen_npy()
    gen_json()
    gen_cli()
    if "--tgrad" in sys.argv:
        gen_checkpoints(os.path.abspath(sys.argv[sys.argv.index("--tgrad") + 1]))
    else:
        print("gen_seeds.py: no --tgrad PATH: checkpoint seeds (fuzz_checkpoint) not written")
