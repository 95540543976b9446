#!/usr/bin/env python3
"""Tessera against onnxruntime on ONNX models built here with onnx.helper (tools/onnx-bench.sh
runs it in the venv the ONNX peer test makes under the build directory).

Models: BERT-style encoders (post-LN layers: QKV projections, heads by Reshape/Transpose,
scaled scores, softmax, context, output projection, residual + LayerNormalization, an erf GELU
feed-forward of 4 x hidden, residual + LayerNormalization) at hidden 384 (6 heads) and 768 (12
heads) with 6 and 12 layers, sequence 128, batch 1 and 8; and a small CNN (two conv + relu +
max-pool stages, global average pool, a dense layer) at batch 1 and 8; a transformer
feed-forward block (768 -> 3072 -> 768, sequence 128) in f32 and quantized to int8 by
onnxruntime's quantize_static (QDQ). --toy: one 2-layer
hidden-64 encoder (sequence 32, batch 1) and the CNN at batch 1, to prove the script works.

For each model: the same random input (.npy) goes to `tessera run MODEL --bench --threads
1,2 --input x=... --output-dir ... --json` (after `tessera tune MODEL` into one database per
model when --tune N is given, at each thread count, since records are per target) and to
onnxruntime with intra-op threads 1 and 2 (sequential execution, all graph optimizations);
both report medians of --runs runs. The table gives the latencies, the ratio tessera / ort
(below 1: Tessera faster) and the worst relative output difference
max |t - o| / max(1, |o|).

  onnx_bench.py --tessera build/tessera --out build/onnx_bench [--toy] [--tune N]
                [--threads 1,2] [--runs N] [--only SUBSTRING] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def save(path, name, nodes, x_shape, inits, y_shape=None):
    g = helper.make_graph(nodes, name,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                          producer_name="tessera tools/onnx_bench.py")
    m.ir_version = 8
    onnx.save(m, path)


def bert(path, hidden, layers, seq, batch, rng):
    heads = hidden // 64 if hidden >= 128 else 2
    d = hidden // heads
    nodes, inits = [], []

    def w(name, *shape, scale=None):
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        inits.append(numpy_helper.from_array(
            rng.uniform(-scale, scale, size=shape).astype(np.float32), name))
        return name

    def c(name, value, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    c("shape_heads", [batch, seq, heads, d], np.int64)
    c("shape_merge", [batch, seq, hidden], np.int64)
    c("sqrt_d", np.sqrt(d))
    c("sq2", np.sqrt(2.0))
    c("one", 1.0)
    c("half", 0.5)
    x = "x"
    for li in range(layers):
        p = f"l{li}_"
        for k in ("q", "k", "v"):
            nodes += [
                helper.make_node("MatMul", [x, w(p + "w" + k, hidden, hidden)], [p + k + "_mm"]),
                helper.make_node("Add", [p + k + "_mm", w(p + "b" + k, hidden, scale=0.1)],
                                 [p + k + "_p"]),
                helper.make_node("Reshape", [p + k + "_p", "shape_heads"], [p + k + "_h"]),
                helper.make_node("Transpose", [p + k + "_h"], [p + k + "_t"],
                                 perm=[0, 2, 3, 1] if k == "k" else [0, 2, 1, 3])]
        ln1_g, ln1_b = c(p + "ln1_g", 1 + rng.uniform(-0.1, 0.1, hidden)), w(p + "ln1_b", hidden)
        ln2_g, ln2_b = c(p + "ln2_g", 1 + rng.uniform(-0.1, 0.1, hidden)), w(p + "ln2_b", hidden)
        y = "y" if li == layers - 1 else p + "out"
        nodes += [
            helper.make_node("MatMul", [p + "q_t", p + "k_t"], [p + "scores"]),
            helper.make_node("Div", [p + "scores", "sqrt_d"], [p + "scaled"]),
            helper.make_node("Softmax", [p + "scaled"], [p + "probs"], axis=-1),
            helper.make_node("MatMul", [p + "probs", p + "v_t"], [p + "ctx"]),
            helper.make_node("Transpose", [p + "ctx"], [p + "ctx_t"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", [p + "ctx_t", "shape_merge"], [p + "ctx_m"]),
            helper.make_node("MatMul", [p + "ctx_m", w(p + "wo", hidden, hidden)],
                             [p + "attn_mm"]),
            helper.make_node("Add", [p + "attn_mm", w(p + "bo", hidden, scale=0.1)],
                             [p + "attn"]),
            helper.make_node("Add", [p + "attn", x], [p + "res1"]),
            helper.make_node("LayerNormalization", [p + "res1", ln1_g, ln1_b], [p + "ln1"],
                             axis=-1, epsilon=1e-12),
            helper.make_node("MatMul", [p + "ln1", w(p + "w1", hidden, 4 * hidden)],
                             [p + "f1_mm"]),
            helper.make_node("Add", [p + "f1_mm", w(p + "b1", 4 * hidden, scale=0.1)],
                             [p + "f1"]),
            helper.make_node("Div", [p + "f1", "sq2"], [p + "f1d"]),
            helper.make_node("Erf", [p + "f1d"], [p + "f1e"]),
            helper.make_node("Add", [p + "f1e", "one"], [p + "f1e1"]),
            helper.make_node("Mul", [p + "f1", p + "f1e1"], [p + "f1g2"]),
            helper.make_node("Mul", [p + "f1g2", "half"], [p + "f1g"]),
            helper.make_node("MatMul", [p + "f1g", w(p + "w2", 4 * hidden, hidden)],
                             [p + "f2_mm"]),
            helper.make_node("Add", [p + "f2_mm", w(p + "b2", hidden, scale=0.1)], [p + "f2"]),
            helper.make_node("Add", [p + "f2", p + "ln1"], [p + "res2"]),
            helper.make_node("LayerNormalization", [p + "res2", ln2_g, ln2_b], [y], axis=-1,
                             epsilon=1e-12)]
        x = y
    save(path, "bert", nodes, [batch, seq, hidden], inits, [batch, seq, hidden])
    return (batch, seq, hidden)


def cnn(path, batch, rng):
    inits = []

    def w(name, *shape):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = 1.0 / np.sqrt(fan_in)
        inits.append(numpy_helper.from_array(
            rng.uniform(-s, s, size=shape).astype(np.float32), name))
        return name

    nodes = [
        helper.make_node("Conv", ["x", w("c1_w", 16, 3, 3, 3), w("c1_b", 16)], ["c1"],
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", w("c2_w", 32, 16, 3, 3), w("c2_b", 32)], ["c2"],
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p2", w("c3_w", 64, 32, 3, 3), w("c3_b", 64)], ["c3"],
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", w("fc_w", 64, 10), w("fc_b", 10)], ["y"])]
    save(path, "cnn", nodes, [batch, 3, 32, 32], inits, [batch, 10])
    return (batch, 3, 32, 32)


def ffn(path, hidden, seq, rng, int8=False):
    """A transformer feed-forward block x W1 + b1 -> Relu -> W2 + b2 ([seq, hidden], 4 x hidden
    inner); int8: the same weights quantized by onnxruntime's quantize_static (QDQ format, u8
    activations and i8 weights per tensor, calibrated on 8 random inputs)."""
    inner = 4 * hidden
    s1, s2 = 1 / np.sqrt(hidden), 1 / np.sqrt(inner)
    inits = [numpy_helper.from_array(rng.uniform(-s1, s1, (hidden, inner)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.uniform(-s1, s1, inner).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.uniform(-s2, s2, (inner, hidden)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.uniform(-s2, s2, hidden).astype(np.float32), "b2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["y"])]
    f32 = path if not int8 else path + ".f32.onnx"
    save(f32, "ffn", nodes, [seq, hidden], inits, [seq, hidden])
    if int8:
        from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                              quantize_static)

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.data = iter([{"x": rng.uniform(-1, 1, (seq, hidden)).astype(np.float32)}
                                  for _ in range(8)])

            def get_next(self):
                return next(self.data, None)

        quantize_static(f32, path, Reader(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        per_channel=False)
    return (seq, hidden)


def ort_median(path, x, threads, runs):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feed = {"x": x}
    y = sess.run(["y"], feed)[0]
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(["y"], feed)
        t.append(time.perf_counter() - t0)
    return float(np.median(t)) * 1e3, y


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.stderr.write(f"onnx_bench: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr}\n")
        return None
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--toy", action="store_true")
    ap.add_argument("--tune", type=int, default=0, metavar="TRIALS")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(7)
    if a.toy:
        configs = [("bert_h64_l2_s32_b1", lambda p: bert(p, 64, 2, 32, 1, rng)),
                   ("cnn_b1", lambda p: cnn(p, 1, rng))]
    else:
        configs = [(f"bert_h{h}_l{l}_s128_b{b}", lambda p, h=h, l=l, b=b: bert(p, h, l, 128, b, rng))
                   for h in (384, 768) for l in (6, 12) for b in (1, 8)]
        configs += [(f"cnn_b{b}", lambda p, b=b: cnn(p, b, rng)) for b in (1, 8)]
        configs += [(f"ffn_h768_s128{q}", lambda p, q=q: ffn(p, 768, 128, rng, int8=bool(q)))
                    for q in ("", "_int8")]
    rows, failed = [], 0
    for name, build in configs:
        if a.only and a.only not in name:
            continue
        path = os.path.join(a.out, name + ".onnx")
        shape = build(path)
        x = rng.uniform(-1, 1, size=shape).astype(np.float32)
        xin = os.path.join(a.out, name + ".x.npy")
        np.save(xin, x)
        odir = os.path.join(a.out, name + ".out")
        db = os.path.join(a.out, name + ".db")
        print(f"onnx_bench: {name} x{list(shape)}", file=sys.stderr, flush=True)
        if a.tune:
            for t in threads:
                env = dict(os.environ, OMP_NUM_THREADS=str(t))
                if run([a.tessera, "tune", path, "--trials", str(a.tune), "--db", db, "--quiet"],
                       env) is None:
                    failed += 1
        cmd = [a.tessera, "run", path, "--bench", "--threads", a.threads, "--runs", str(a.runs),
               "--input", "x=" + xin, "--output-dir", odir, "--json"]
        if a.tune:
            cmd += ["--db", db]
        out = run(cmd)
        if out is None:
            failed += 1
            continue
        res = json.loads(out)
        ty = np.load(os.path.join(odir, "y.npy"))
        for b in res["bench"]:
            ort_ms, oy = ort_median(path, x, b["threads"], a.runs)
            diff = float(np.max(np.abs(ty - oy) / np.maximum(1.0, np.abs(oy))))
            rows.append({"model": name, "threads": b["threads"], "tessera_ms": b["latency_ms"],
                         "ort_ms": ort_ms, "ratio": b["latency_ms"] / ort_ms,
                         "max_rel_diff": diff, "kernels": res["kernels"],
                         "from_db": b["from_db"], "pool_bytes": res["memory"]["pool_bytes"]})
    print(f"{'model':<24} {'thr':>3} {'kernels':>7} {'db':>4} {'tessera ms':>11} "
          f"{'ort ms':>9} {'tessera/ort':>11} {'max rel diff':>12}")
    for r in rows:
        print(f"{r['model']:<24} {r['threads']:>3} {r['kernels']:>7} {r['from_db']:>4} "
              f"{r['tessera_ms']:>11.3f} {r['ort_ms']:>9.3f} {r['ratio']:>11.2f} "
              f"{r['max_rel_diff']:>12.1e}")
    print(f"(medians of {a.runs} runs; ort: onnxruntime {ort.__version__}, intra-op threads as "
          f"listed, sequential; tessera/ort below 1: Tessera faster)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
