#!/usr/bin/env python3
"""Builds ONNX models with onnx.helper (PyPI `onnx`), runs them with onnxruntime on random
inputs and writes, for tests/onnx_peer/peer_check.c, into OUT_DIR:
  NAME.onnx, NAME.in<i>.bin, NAME.out<j>.bin (raw, in the output's dtype) and list.txt
  ("NAME NIN NOUT DTYPE..." with the outputs' dtypes: f32, i32, u8, i8).
Every supported operator alone with random shapes and attributes (the index operators
Concat, Split, Slice, Gather, Where, Expand and LogSoftmax, ReduceMax, ReduceL2 too), an MLP
with the erf GELU, a ResNet basic block and BERT-style encoder layers with an attention mask:
added to the scores, applied by Where from a bool input after a Gather token embedding, and
computed in the model from the int64 token ids (Equal(ids, 0) -> Where(-1e9, 0)). The
comparison and logic operators (Equal, Less, ..., And, Or, Xor, Not) Cast their bool results
to float, integer Mod its int64 ones.
The quantized operators: MatMulInteger (int32 outputs) and QLinearMatMul (uint8 / int8
outputs) on uint8 activations with random zero points and int8 / uint8 weights, as
initializers or inputs; QuantizeLinear (saturation, exact ties) and DequantizeLinear (uint8,
int8, int32); a QDQ chain as quantize_static writes it and an MLP quantized by
onnxruntime.quantization.quantize_static itself (QDQ, uint8 activations, int8 weights).
Issue 12: QuantizeLinear / DequantizeLinear along an axis, QLinearMatMul / MatMulInteger with
per-column weight parameters, DynamicQuantizeLinear, ConvInteger, QLinearConv (per-tensor and
per-output-channel w_scale), Neg / Abs of integers, Cast to bool of a computed tensor, and MLPs
quantized by quantize_static(per_channel=True) and by quantize_dynamic.
Inputs are written raw in their own dtype (float32, int64, bool as one byte, uint8, int8).

  make_models.py OUT_DIR [SEED]
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
out_dir = sys.argv[1]
rng = np.random.default_rng(int(sys.argv[2]) if len(sys.argv) > 2 else 12)
os.makedirs(out_dir, exist_ok=True)
listing = []


def rand(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
        np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.uint8): TensorProto.UINT8,
        np.dtype(np.int8): TensorProto.INT8, np.dtype(np.int32): TensorProto.INT32}
# list.txt's names of the output dtypes (tessera's te_dtype_parse names).
SHORT = {np.dtype(np.float32): "f32", np.dtype(np.int32): "i32", np.dtype(np.uint8): "u8",
         np.dtype(np.int8): "i8", np.dtype(np.int64): "i64"}


def emit(name, nodes, inputs, outputs, inits=(), opset=OPSET, out_types=None):
    """inputs: [(name, array)] (float32, int64, bool, uint8, int8), outputs: [name]; out_types:
    their ONNX element types (float32 where not given). Outputs are written in the dtype
    onnxruntime returns them in, which list.txt records."""
    out_types = out_types or {}
    g = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, ELEM[a.dtype], a.shape) for n, a in inputs],
        [helper.make_tensor_value_info(n, out_types.get(n, TensorProto.FLOAT), None)
         for n in outputs],
        list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8

    path = os.path.join(out_dir, name + ".onnx")
    onnx.save(m, path)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    res = sess.run(outputs, {n: a for n, a in inputs})
    for i, (_, a) in enumerate(inputs):  # raw, in the input's own dtype (bool: one byte)
        np.ascontiguousarray(a).tofile(os.path.join(out_dir, f"{name}.in{i}.bin"))
    for j, r in enumerate(res):
        np.ascontiguousarray(r).tofile(os.path.join(out_dir, f"{name}.out{j}.bin"))
    listing.append(" ".join([name, str(len(inputs)), str(len(outputs))] +
                            [SHORT[np.asarray(r).dtype] for r in res]))


def shape(lo_rank=1, hi_rank=4):
    return tuple(int(d) for d in rng.integers(1, 6, size=int(rng.integers(lo_rank, hi_rank + 1))))


case = 0


def name(op):
    global case
    case += 1
    return f"{op.lower()}_{case}"


for rep in range(6):
    # Binary operators with broadcasting against an initializer.
    for op in ["Add", "Sub", "Mul", "Div", "Max", "Min"]:
        s = shape(2, 4)
        b = s[-int(rng.integers(1, len(s) + 1)):]
        bv = rand(*b, lo=0.5, hi=1.5) if op == "Div" else rand(*b)
        emit(name(op), [helper.make_node(op, ["x", "b"], ["y"])], [("x", rand(*s))], ["y"],
             [init("b", bv)])
    # Unary operators.
    for op, lo in [("Relu", -1), ("Sigmoid", -3), ("Tanh", -2), ("Exp", -2), ("Log", 0.1),
                   ("Sqrt", 0.0), ("Abs", -1), ("Erf", -2), ("Neg", -1), ("Reciprocal", 0.5)]:
        s = shape()
        emit(name(op), [helper.make_node(op, ["x"], ["y"])], [("x", rand(*s, lo=lo, hi=2.0))],
             ["y"])
    s = shape()
    emit(name("LeakyRelu"), [helper.make_node("LeakyRelu", ["x"], ["y"],
                                              alpha=float(rng.uniform(0.01, 0.5)))],
         [("x", rand(*s))], ["y"])
    lo, hi = sorted(rng.uniform(-0.8, 0.8, size=2))
    emit(name("Clip"), [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
         [("x", rand(*shape()))], ["y"],
         [init("lo", np.float32(lo)), init("hi", np.float32(hi))])
    emit(name("Pow"), [helper.make_node("Pow", ["x", "e"], ["y"])], [("x", rand(*shape()))],
         ["y"], [init("e", np.float32(2.0))])
    # Softmax, LayerNormalization over the last axis; BatchNormalization.
    s = shape(2, 4)
    emit(name("Softmax"), [helper.make_node("Softmax", ["x"], ["y"],
                                            axis=int(rng.integers(-len(s), len(s))))],
         [("x", rand(*s, lo=-3, hi=3))], ["y"])
    s = shape(2, 3)
    emit(name("LayerNormalization"),
         [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1,
                           epsilon=float(rng.choice([1e-5, 1e-3])))],
         [("x", rand(*s))], ["y"], [init("g", rand(s[-1])), init("b", rand(s[-1]))])
    c = int(rng.integers(1, 5))
    emit(name("BatchNormalization"),
         [helper.make_node("BatchNormalization", ["x", "sc", "bi", "m", "v"], ["y"])],
         [("x", rand(2, c, 3, 4))], ["y"],
         [init("sc", rand(c)), init("bi", rand(c)), init("m", rand(c)),
          init("v", rand(c, lo=0.5, hi=2.0))])
    # MatMul (2-D, 3-D x 2-D, batched), Gemm with attributes.
    m, k, n = (int(v) for v in rng.integers(1, 9, size=3))
    emit(name("MatMul"), [helper.make_node("MatMul", ["a", "w"], ["y"])], [("a", rand(m, k))],
         ["y"], [init("w", rand(k, n))])
    emit(name("MatMul"), [helper.make_node("MatMul", ["a", "w"], ["y"])],
         [("a", rand(2, m, k))], ["y"], [init("w", rand(k, n))])
    emit(name("MatMul"), [helper.make_node("MatMul", ["a", "b"], ["y"])],
         [("a", rand(2, 3, m, k)), ("b", rand(2, 3, k, n))], ["y"])
    ta, tb = (int(v) for v in rng.integers(0, 2, size=2))
    emit(name("Gemm"), [helper.make_node("Gemm", ["a", "w", "c"], ["y"], transA=ta, transB=tb,
                                         alpha=float(rng.uniform(0.5, 2)),
                                         beta=float(rng.uniform(0.5, 2)))],
         [("a", rand(*((k, m) if ta else (m, k))))], ["y"],
         [init("w", rand(*((n, k) if tb else (k, n)))), init("c", rand(n))])
    # Conv with random groups, strides, dilations, padding; pools.
    g = int(rng.choice([1, 2]))
    ci, co = 2 * g, 2 * g
    kk, st, dl = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(1, 3))
    pd = int(rng.integers(0, kk))
    hw = int(rng.integers(dl * (kk - 1) + 1, 10))
    emit(name("Conv"), [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=g,
                                         strides=[st, st], dilations=[dl, dl],
                                         pads=[pd, pd, pd, pd])],
         [("x", rand(1, ci, hw, hw))], ["y"],
         [init("w", rand(co, ci // g, kk, kk)), init("b", rand(co))])
    kk = int(rng.integers(2, 4))
    pd = int(rng.integers(0, kk))
    for op in ["MaxPool", "AveragePool"]:
        attrs = dict(kernel_shape=[kk, kk], strides=[int(rng.integers(1, 3))] * 2,
                     pads=[pd] * 4)
        if op == "AveragePool":
            attrs["count_include_pad"] = int(rng.integers(0, 2))
        emit(name(op), [helper.make_node(op, ["x"], ["y"], **attrs)],
             [("x", rand(1, 3, 7, 7))], ["y"])
    emit(name("GlobalAveragePool"), [helper.make_node("GlobalAveragePool", ["x"], ["y"])],
         [("x", rand(2, 3, int(rng.integers(1, 6)), int(rng.integers(1, 6))))], ["y"])
    # Reductions, layout.
    s = shape(2, 4)
    ax = sorted(set(int(a) for a in rng.integers(0, len(s), size=2)))
    kd = int(rng.integers(0, 2))
    emit(name("ReduceMean"), [helper.make_node("ReduceMean", ["x"], ["y"], axes=ax, keepdims=kd)],
         [("x", rand(*s))], ["y"])
    emit(name("ReduceSum"), [helper.make_node("ReduceSum", ["x", "ax"], ["y"], keepdims=kd)],
         [("x", rand(*s))], ["y"], [init("ax", np.array(ax, dtype=np.int64))])
    s = shape(2, 4)
    perm = [int(p) for p in rng.permutation(len(s))]
    emit(name("Transpose"), [helper.make_node("Transpose", ["x"], ["y"], perm=perm)],
         [("x", rand(*s))], ["y"])
    s = shape(2, 4)
    emit(name("Flatten"), [helper.make_node("Flatten", ["x"], ["y"],
                                            axis=int(rng.integers(0, len(s) + 1)))],
         [("x", rand(*s))], ["y"])
    emit(name("Reshape"),
         [helper.make_node("Shape", ["x"], ["s"]),
          helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
          helper.make_node("Unsqueeze", ["d0", "a0"], ["d1"]),
          helper.make_node("Concat", ["d1", "m1"], ["t"], axis=0),
          helper.make_node("Reshape", ["x", "t"], ["r"]),
          helper.make_node("Unsqueeze", ["r", "a0"], ["u"]),
          helper.make_node("Squeeze", ["u", "a0"], ["y"])],
         [("x", rand(*s))], ["y"],
         [init("i0", np.array(0, dtype=np.int64)), init("a0", np.array([0], dtype=np.int64)),
          init("m1", np.array([-1], dtype=np.int64))])

# The index operators and the added reductions, each alone with random attributes.
def bounds(dim):
    """A random Slice bound: in range, negative, or far outside (clamped)."""
    k = int(rng.integers(0, 6))
    return [2**62, -2**62, -int(rng.integers(1, dim + 2))][k] if k < 3 else int(
        rng.integers(0, dim + 2))


for rep in range(8):
    # Concat of 1 to 4 inputs (some initializers) along a random axis.
    s = shape(1, 4)
    ax = int(rng.integers(-len(s), len(s)))
    k = int(rng.integers(1, 5))
    parts = []
    for i in range(k):
        si = list(s)
        si[ax] = int(rng.integers(1, 4))
        parts.append((f"x{i}", rand(*si)))
    const = [p for i, p in enumerate(parts) if i % 2 == 1]
    emit(name("Concat"), [helper.make_node("Concat", [p[0] for p in parts], ["y"], axis=ax)],
         [p for i, p in enumerate(parts) if i % 2 == 0], ["y"], [init(n, a) for n, a in const])
    # Split into 1 to 3 outputs, sizes given (opset 13+ input) or equal parts (opset 18).
    s = shape(1, 4)
    ax = int(rng.integers(-len(s), len(s)))
    dim = s[ax]
    nout = int(rng.integers(1, min(dim, 3) + 1))
    cuts = sorted(rng.choice(np.arange(1, dim), size=nout - 1, replace=False)) if nout > 1 else []
    sizes = np.diff([0] + [int(c) for c in cuts] + [dim]).astype(np.int64)
    outs = [f"y{i}" for i in range(nout)]
    if rep % 2:
        emit(name("Split"), [helper.make_node("Split", ["x", "sp"], outs, axis=ax)],
             [("x", rand(*s))], outs, [init("sp", sizes)])
    else:
        nout = int(rng.integers(1, dim + 1))
        while nout > 1 and -(-dim // nout) * (nout - 1) >= dim:
            nout -= 1
        outs = [f"y{i}" for i in range(nout)]
        emit(name("Split"), [helper.make_node("Split", ["x"], outs, axis=ax, num_outputs=nout)],
             [("x", rand(*s))], outs, opset=18)
    # Slice with random starts/ends/axes/steps (negative steps, out-of-range bounds).
    for _ in range(2):
        while True:
            s = shape(1, 4)
            na = int(rng.integers(1, len(s) + 1))
            axes = [int(a) for a in rng.permutation(len(s))[:na]]
            axes = [a - len(s) if rng.integers(0, 2) else a for a in axes]
            st = [bounds(s[a]) for a in axes]
            en = [bounds(s[a]) for a in axes]
            sp = [int(rng.integers(1, 4)) * int(rng.choice([-1, 1])) for a in axes]
            x = rand(*s)
            sl = [slice(None)] * len(s)
            for a, b, e, p in zip(axes, st, en, sp):
                sl[a] = slice(b, e, p)
            if x[tuple(sl)].size:
                break
        emit(name("Slice"), [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
             [("x", x)], ["y"],
             [init("st", np.array(st, dtype=np.int64)), init("en", np.array(en, dtype=np.int64)),
              init("ax", np.array(axes, dtype=np.int64)), init("sp", np.array(sp, dtype=np.int64))])
    # Gather: constant indices (some negative, maybe a scalar) and int64 input indices.
    s = shape(1, 3)
    ax = int(rng.integers(-len(s), len(s)))
    dim = s[ax]
    ishape = () if rep % 3 == 0 else shape(1, 2)
    idx = rng.integers(-dim, dim, size=ishape).astype(np.int64)
    emit(name("Gather"), [helper.make_node("Gather", ["x", "i"], ["y"], axis=ax)],
         [("x", rand(*s))], ["y"], [init("i", idx)])
    emb = rand(int(rng.integers(2, 9)), int(rng.integers(1, 6)))
    ids = rng.integers(0, emb.shape[0], size=shape(1, 2)).astype(np.int64)
    emit(name("Gather"), [helper.make_node("Gather", ["emb", "ids"], ["y"])], [("ids", ids)],
         ["y"], [init("emb", emb)])
    # Where with a constant bool condition and with a bool input, broadcasting.
    s = shape(1, 4)
    cs = s[-int(rng.integers(1, len(s) + 1)):]
    cs = tuple(d if rng.integers(0, 3) else 1 for d in cs)
    cond = rng.integers(0, 2, size=cs).astype(np.bool_)
    emit(name("Where"), [helper.make_node("Where", ["c", "x", "v"], ["y"])], [("x", rand(*s))],
         ["y"], [init("c", cond), init("v", np.float32(rng.uniform(-5, 5)))])
    emit(name("Where"), [helper.make_node("Where", ["c", "x", "z"], ["y"])],
         [("c", cond), ("x", rand(*s)), ("z", rand(*s[-1:]))], ["y"])
    # Comparisons (float32 with few distinct values, so that equality happens, or int64) and
    # logic operators (bool inputs) with broadcasting, their bool results Cast to float; Not,
    # Floor, Ceil, Sign; Max / Min with three inputs.
    for op in ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]:
        s = shape(1, 4)
        b = tuple(d if rng.integers(0, 3) else 1 for d in s[-int(rng.integers(1, len(s) + 1)):])
        if rep % 2:
            xa = rng.integers(-2, 3, size=s).astype(np.int64)
            xb = rng.integers(-2, 3, size=b).astype(np.int64)
        else:
            xa = (rng.integers(-2, 3, size=s) * 0.5).astype(np.float32)
            xb = (rng.integers(-2, 3, size=b) * 0.5).astype(np.float32)
        ins = [("a", xa), ("b", xb)] if rep % 3 else [("a", xa)]
        emit(name(op), [helper.make_node(op, ["a", "b"], ["c"]),
                        helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT)],
             ins, ["y"], [] if rep % 3 else [init("b", xb)])
    for op in ["And", "Or", "Xor"]:
        s = shape(1, 4)
        b = tuple(d if rng.integers(0, 3) else 1 for d in s[-int(rng.integers(1, len(s) + 1)):])
        emit(name(op), [helper.make_node(op, ["a", "b"], ["c"]),
                        helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT)],
             [("a", rng.integers(0, 2, size=s).astype(np.bool_)),
              ("b", rng.integers(0, 2, size=b).astype(np.bool_))], ["y"])
    s = shape()
    emit(name("Not"), [helper.make_node("Not", ["a"], ["c"]),
                       helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT)],
         [("a", rng.integers(0, 2, size=s).astype(np.bool_))], ["y"])
    for op in ["Floor", "Ceil", "Sign", "Round"]:
        x = rand(*shape(), lo=-3, hi=3)
        x.flat[::3] = np.round(x.flat[::3])  # integers (and zeros for Sign) too
        x.flat[1::3] = np.round(x.flat[1::3] * 2) / 2  # halves: Round's ties go to even
        emit(name(op), [helper.make_node(op, ["x"], ["y"])], [("x", x)], ["y"])
    # Mod: int64 with either sign rule (non-zero divisors), float with fmod=1; Cast to float.
    s = shape(1, 3)
    b = s[-int(rng.integers(1, len(s) + 1)):]
    db = rng.integers(1, 6, size=b) * rng.choice([-1, 1], size=b)
    if rep % 2:
        emit(name("Mod"), [helper.make_node("Mod", ["a", "b"], ["r"], fmod=int(rep % 4 == 1)),
                           helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)],
             [("a", rng.integers(-20, 21, size=s).astype(np.int64)),
              ("b", db.astype(np.int64))], ["y"])
    else:
        emit(name("Mod"), [helper.make_node("Mod", ["a", "b"], ["y"], fmod=1)],
             [("a", rand(*s, lo=-5, hi=5)), ("b", (db * 0.75).astype(np.float32))], ["y"])
    for op in ["Max", "Min"]:
        s = shape(1, 3)
        emit(name(op), [helper.make_node(op, ["x", "b", "c"], ["y"])],
             [("x", rand(*s)), ("b", rand(*s[-1:]))], ["y"], [init("c", rand(*s))])
    # Expand to a shape with 1s (kept) and a higher rank.
    s = shape(1, 3)
    xs = tuple(d if rng.integers(0, 2) else 1 for d in s)
    tgt = [int(rng.integers(1, 4))] * int(rng.integers(0, 2)) + [
        1 if rng.integers(0, 3) == 0 else d for d in s]
    emit(name("Expand"), [helper.make_node("Expand", ["x", "t"], ["y"])], [("x", rand(*xs))],
         ["y"], [init("t", np.array(tgt, dtype=np.int64))])
    # LogSoftmax on a random axis; ReduceMax / ReduceL2 with axes as attribute (opset 17) and
    # as input (opset 18), keepdims either way.
    s = shape(1, 4)
    emit(name("LogSoftmax"), [helper.make_node("LogSoftmax", ["x"], ["y"],
                                               axis=int(rng.integers(-len(s), len(s))))],
         [("x", rand(*s, lo=-4, hi=4))], ["y"])
    for op in ["ReduceMax", "ReduceL2"]:
        s = shape(1, 4)
        ax = sorted(set(int(a) for a in rng.integers(-len(s), len(s), size=2)))
        ax = sorted(set(a % len(s) for a in ax))
        kd = int(rng.integers(0, 2))
        if rep % 2:
            emit(name(op), [helper.make_node(op, ["x"], ["y"], axes=ax, keepdims=kd)],
                 [("x", rand(*s))], ["y"])
        else:
            emit(name(op), [helper.make_node(op, ["x", "ax"], ["y"], keepdims=kd)],
                 [("x", rand(*s))], ["y"], [init("ax", np.array(ax, dtype=np.int64))], opset=18)

# Index operators fused with their neighbours: an elementwise producer read through
# data-dependent indices, slices feeding a concat and a reduction, a broadcast where.
emit("chain_gather", [helper.make_node("Relu", ["x"], ["r"]),
                      helper.make_node("Gather", ["r", "ids"], ["g"], axis=1),
                      helper.make_node("Tanh", ["g"], ["y"])],
     [("x", rand(3, 7, 4)), ("ids", rng.integers(-7, 7, size=(2, 3)).astype(np.int64))], ["y"])
emit("chain_slice_concat",
     [helper.make_node("Exp", ["x"], ["e"]),
      helper.make_node("Slice", ["e", "s0", "e0", "a0"], ["p"]),
      helper.make_node("Slice", ["e", "s1", "e1", "a0", "m1"], ["q"]),
      helper.make_node("Concat", ["q", "p", "x"], ["c"], axis=1),
      helper.make_node("ReduceMax", ["c"], ["m"], axes=[1], keepdims=1),
      helper.make_node("Sub", ["c", "m"], ["y"])],
     [("x", rand(4, 6))], ["y"],
     [init("s0", np.array([1], dtype=np.int64)), init("e0", np.array([5], dtype=np.int64)),
      init("a0", np.array([1], dtype=np.int64)), init("s1", np.array([-1], dtype=np.int64)),
      init("e1", np.array([-2**62], dtype=np.int64)), init("m1", np.array([-1], dtype=np.int64))])
emit("chain_where_expand",
     [helper.make_node("Expand", ["b", "shp"], ["be"]),
      helper.make_node("Mul", ["x", "be"], ["xb"]),
      helper.make_node("Where", ["c", "xb", "x"], ["w"]),
      helper.make_node("LogSoftmax", ["w"], ["y"], axis=-1)],
     [("x", rand(2, 3, 5)), ("c", rng.integers(0, 2, size=(3, 1)).astype(np.bool_))], ["y"],
     [init("b", rand(5)), init("shp", np.array([3, 1], dtype=np.int64))])

# The quantized operators, each alone with random shapes, zero points and scales: uint8
# activations (inputs), int8 or uint8 weights as initializers (or B an input), zero points as
# scalars or 1-element tensors (or absent), A with leading axes folded into rows.
def qrand(dt, *shape):
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dt)


def qzero(dt, form):
    """A zero point of dtype dt as a scalar (form 0) or a 1-element 1-D tensor (form 1)."""
    info = np.iinfo(dt)
    z = np.array(rng.integers(info.min, info.max + 1), dtype=dt)
    return z if form == 0 else z.reshape(1)


def qscale(form, lo=0.002, hi=0.05):
    s = np.float32(rng.uniform(lo, hi))
    return np.array(s) if form == 0 else np.array([s])


for rep in range(6):
    m, k, n = (int(v) for v in rng.integers(1, 17, size=3))
    lead = [] if rep % 3 == 0 else [int(v) for v in rng.integers(1, 4, size=rep % 3)]
    wdt = np.int8 if rep % 2 == 0 else np.uint8
    form = rep % 2
    # MatMulInteger: weights as an initializer, both zero points (or only A's).
    a = qrand(np.uint8, *lead, m, k)
    ins = ["a", "w", "az"] + (["wz"] if rep != 3 else [])
    inits = [init("w", qrand(wdt, k, n)), init("az", qzero(np.uint8, form))]
    if rep != 3:
        inits.append(init("wz", qzero(wdt, 1 - form)))
    emit(name("MatMulInteger"), [helper.make_node("MatMulInteger", ins, ["y"])], [("a", a)],
         ["y"], inits, out_types={"y": TensorProto.INT32})
    # MatMulInteger with B an input: no zero points, or B's only; A int8 with int8 B too.
    adt = np.int8 if rep % 3 == 2 else np.uint8
    bdt = np.int8 if adt == np.int8 or rep % 2 else np.uint8
    ins, inits = ["a", "b"], []
    if rep % 2:
        ins += ["", "bz"]
        inits.append(init("bz", qzero(bdt, form)))
    emit(name("MatMulInteger"), [helper.make_node("MatMulInteger", ins, ["y"])],
         [("a", qrand(adt, m, k)), ("b", qrand(bdt, k, n))], ["y"], inits,
         out_types={"y": TensorProto.INT32})
    # QLinearMatMul: uint8 a with int8 / uint8 weights and a uint8 output, or all int8 (the
    # combinations onnxruntime implements: the output has a's type); the output scale spreads
    # the accumulations over its range (some saturate).
    ydt = np.uint8 if rep % 3 != 1 else np.int8
    qdt = wdt if ydt == np.uint8 else np.int8
    sa, sb = qscale(form), qscale(1 - form)
    za, zb, zy = qzero(ydt, form), qzero(qdt, form), qzero(ydt, 1 - form)
    w = qrand(qdt, k, n)
    a = qrand(ydt, *lead, m, k)
    acc = (a.astype(np.int64) - int(za.flat[0])) @ (w.astype(np.int64) - int(zb.flat[0]))
    spread = float(acc.max() - acc.min()) + 1.0
    sy = np.float32(float(sa.flat[0]) * float(sb.flat[0]) * spread / 255 * rng.uniform(0.6, 1.2))
    sy = np.array(sy) if form == 0 else np.array([sy])
    emit(name("QLinearMatMul"),
         [helper.make_node("QLinearMatMul", ["a", "sa", "za", "w", "sb", "zb", "sy", "zy"], ["y"])],
         [("a", a)], ["y"],
         [init("sa", sa), init("za", za), init("w", w), init("sb", sb), init("zb", zb),
          init("sy", sy), init("zy", zy)], out_types={"y": ELEM[np.dtype(ydt)]})

    # QuantizeLinear: float32 to uint8 / int8, values past the range (saturated); a
    # power-of-two scale with exact ties (x / scale = j + 0.5: round half to even); an axis
    # attribute with a scalar scale; no zero point (uint8, zero 0).
    qdt = np.uint8 if rep % 2 == 0 else np.int8
    s = shape(2, 4)
    sc = np.float32(2.0 ** -int(rng.integers(3, 7))) if rep % 3 == 0 else np.float32(
        rng.uniform(0.005, 0.05))
    x = rand(*s, lo=-200 * float(sc), hi=200 * float(sc))
    if rep % 3 == 0:
        x.flat[::2] = (rng.integers(-150, 150, size=x.flat[::2].shape) + 0.5) * sc
    sc = np.array(sc) if form == 0 else np.array([sc])
    attrs = dict(axis=int(rng.integers(0, len(s)))) if rep % 3 == 2 else {}
    if rep == 5:
        emit(name("QuantizeLinear"), [helper.make_node("QuantizeLinear", ["x", "s"], ["y"])],
             [("x", x)], ["y"], [init("s", sc)], out_types={"y": TensorProto.UINT8})
    else:
        emit(name("QuantizeLinear"),
             [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], **attrs)], [("x", x)],
             ["y"], [init("s", sc), init("z", qzero(qdt, 1 - form))],
             out_types={"y": ELEM[np.dtype(qdt)]})
    # DequantizeLinear of uint8 / int8 inputs with a zero point, and of int32 (no zero point).
    s = shape(1, 4)
    if rep % 3 == 2:
        emit(name("DequantizeLinear"), [helper.make_node("DequantizeLinear", ["x", "s"], ["y"])],
             [("x", rng.integers(-2**20, 2**20, size=s).astype(np.int32))], ["y"],
             [init("s", qscale(form, 1e-5, 1e-3))])
    else:
        emit(name("DequantizeLinear"),
             [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])],
             [("x", qrand(qdt, *s))], ["y"], [init("s", qscale(form)), init("z", qzero(qdt, form))])

# A QDQ chain as onnxruntime's quantize_static writes it: activations QuantizeLinear ->
# DequantizeLinear (uint8), int8 weights and an int32 bias (scale x_scale * w_scale) as
# initializers through DequantizeLinear, MatMul with a 3-D input, requantized output.
sx, sw, so = np.float32(0.02), np.float32(0.004), np.float32(0.05)
emit("qdq_matmul_chain",
     [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
      helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
      helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"]),
      helper.make_node("DequantizeLinear", ["bq", "sb"], ["bd"]),
      helper.make_node("MatMul", ["xd", "wd"], ["h"]),
      helper.make_node("Add", ["h", "bd"], ["hb"]),
      helper.make_node("QuantizeLinear", ["hb", "so", "zo"], ["yq"]),
      helper.make_node("DequantizeLinear", ["yq", "so", "zo"], ["y"])],
     [("x", rand(2, 5, 24, lo=-2, hi=2))], ["y"],
     [init("sx", sx), init("zx", np.uint8(110)), init("sw", sw), init("zw", np.int8(0)),
      init("wq", qrand(np.int8, 24, 12)), init("sb", np.float32(sx * sw)),
      init("bq", rng.integers(-3000, 3000, size=12).astype(np.int32)), init("so", so),
      init("zo", np.uint8(128))])


# An MLP (MatMul + Add, Relu, Gemm with its bias) quantized by onnxruntime's quantize_static
# (QDQ format, uint8 activations, int8 weights, per tensor) from random calibration data.
def quantized_mlp(nm):
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    d_in, d_h, d_out, rows = 16, 32, 10, 6
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h0"]),
         helper.make_node("Add", ["h0", "b1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)],
        nm, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, d_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, d_out])],
        [init("w1", rand(d_in, d_h)), init("b1", rand(d_h)), init("w2", rand(d_out, d_h)),
         init("b2", rand(d_out))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    fpath = os.path.join(out_dir, nm + ".float.onnx")
    onnx.save(m, fpath)
    calib = [{"x": rand(rows, d_in)} for _ in range(8)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

    qpath = os.path.join(out_dir, nm + ".q.onnx")
    quantize_static(fpath, qpath, Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    per_channel=False)
    q = onnx.load(qpath)
    os.remove(fpath)
    os.remove(qpath)
    emit(nm, list(q.graph.node), [("x", rand(rows, d_in))], ["y"], list(q.graph.initializer),
         opset=max(OPSET, max(o.version for o in q.opset_import if o.domain in ("", "ai.onnx"))))


quantized_mlp("mlp_quantize_static")

# An MLP with the exporters' erf GELU.
emit("mlp_gelu",
     [helper.make_node("MatMul", ["x", "w1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h"]),
      helper.make_node("Div", ["h", "sq2"], ["hd"]), helper.make_node("Erf", ["hd"], ["e"]),
      helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["h", "e1"], ["he"]),
      helper.make_node("Mul", ["he", "half"], ["g"]),
      helper.make_node("Gemm", ["g", "w2", "b2"], ["y"], transB=1)],
     [("x", rand(8, 16))], ["y"],
     [init("w1", rand(16, 32)), init("b1", rand(32)), init("sq2", np.float32(np.sqrt(2))),
      init("one", np.float32(1)), init("half", np.float32(0.5)), init("w2", rand(10, 32)),
      init("b2", rand(10))])
# A ResNet-style basic block: conv-bn-relu-conv-bn + residual, relu.
bn = lambda p, c: [init(p + "s", rand(c)), init(p + "b", rand(c)), init(p + "m", rand(c)),
                   init(p + "v", rand(c, lo=0.5, hi=2))]
emit("resnet_block",
     [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
      helper.make_node("BatchNormalization", ["c1", "1s", "1b", "1m", "1v"], ["n1"]),
      helper.make_node("Relu", ["n1"], ["r1"]),
      helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
      helper.make_node("BatchNormalization", ["c2", "2s", "2b", "2m", "2v"], ["n2"]),
      helper.make_node("Add", ["n2", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
     [("x", rand(1, 4, 8, 8))], ["y"],
     [init("w1", rand(4, 4, 3, 3)), init("w2", rand(4, 4, 3, 3))] + bn("1", 4) + bn("2", 4))

# A BERT-style encoder layer with an additive attention mask: QKV projections, heads by
# Reshape/Transpose, scaled scores + mask, softmax, context, output projection, residual +
# LayerNormalization, a GELU feed-forward, residual + LayerNormalization.
B, S, E, H = 2, 8, 16, 2
D = E // H



def init_i64(v):
    init_i64.k = getattr(init_i64, "k", 0) + 1
    return f"shape{init_i64.k}", np.array(v, dtype=np.int64)


shp_heads, shp_merge = init_i64([B, S, H, D]), init_i64([B, S, E])
mask = np.zeros((B, 1, 1, S), dtype=np.float32)
mask[1, 0, 0, S - 3:] = -10000.0  # the second sequence is padded
nodes = [helper.make_node("MatMul", ["x", w], [w + "_mm"]) for w in ["wq", "wk", "wv"]]
for w in ["wq", "wk", "wv"]:
    nodes += [helper.make_node("Add", [w + "_mm", w + "_b"], [w + "_p"]),
              helper.make_node("Reshape", [w + "_p", shp_heads[0]], [w + "_h"]),
              helper.make_node("Transpose", [w + "_h"], [w + "_t"],
                               perm=[0, 2, 3, 1] if w == "wk" else [0, 2, 1, 3])]
nodes += [
    helper.make_node("MatMul", ["wq_t", "wk_t"], ["scores"]),
    helper.make_node("Div", ["scores", "sqrt_d"], ["scaled"]),
    helper.make_node("Add", ["scaled", "mask"], ["masked"]),
    helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
    helper.make_node("MatMul", ["probs", "wv_t"], ["ctx"]),
    helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
    helper.make_node("Reshape", ["ctx_t", shp_merge[0]], ["ctx_m"]),
    helper.make_node("MatMul", ["ctx_m", "wo"], ["attn_mm"]),
    helper.make_node("Add", ["attn_mm", "wo_b"], ["attn"]),
    helper.make_node("Add", ["attn", "x"], ["res1"]),
    helper.make_node("LayerNormalization", ["res1", "ln1_g", "ln1_b"], ["ln1"], epsilon=1e-12),
    helper.make_node("MatMul", ["ln1", "w1"], ["f1_mm"]),
    helper.make_node("Add", ["f1_mm", "b1"], ["f1"]),
    helper.make_node("Div", ["f1", "sq2"], ["f1d"]), helper.make_node("Erf", ["f1d"], ["f1e"]),
    helper.make_node("Add", ["f1e", "one"], ["f1e1"]),
    helper.make_node("Mul", ["f1", "f1e1"], ["f1g2"]),
    helper.make_node("Mul", ["f1g2", "half"], ["f1g"]),
    helper.make_node("MatMul", ["f1g", "w2"], ["f2_mm"]),
    helper.make_node("Add", ["f2_mm", "b2"], ["f2"]),
    helper.make_node("Add", ["f2", "ln1"], ["res2"]),
    helper.make_node("LayerNormalization", ["res2", "ln2_g", "ln2_b"], ["y"], epsilon=1e-12)]
inits = [init(n, rand(E, E, lo=-0.5, hi=0.5)) for n in ["wq", "wk", "wv", "wo"]]
inits += [init(n + "_b", rand(E)) for n in ["wq", "wk", "wv", "wo"]]
inits += [numpy_helper.from_array(shp_heads[1], shp_heads[0]),
          numpy_helper.from_array(shp_merge[1], shp_merge[0]),
          init("sqrt_d", np.float32(np.sqrt(D))), init("mask", mask),
          init("ln1_g", rand(E)), init("ln1_b", rand(E)), init("ln2_g", rand(E)),
          init("ln2_b", rand(E)), init("w1", rand(E, 4 * E, lo=-0.5, hi=0.5)),
          init("b1", rand(4 * E)), init("w2", rand(4 * E, E, lo=-0.5, hi=0.5)), init("b2", rand(E)),
          init("sq2", np.float32(np.sqrt(2))), init("one", np.float32(1)),
          init("half", np.float32(0.5))]
emit("bert_encoder_layer", nodes, [("x", rand(B, S, E))], ["y"], inits)

# The same layer fed by a token embedding (Gather of int64 ids) plus positions, with the
# attention mask as a bool input applied by Where (the exporters' masked_fill).
keep = np.ones((B, 1, 1, S), dtype=np.bool_)
keep[1, 0, 0, S - 3:] = False
vocab = 11
wnodes = [helper.make_node("Gather", ["tok_emb", "ids"], ["tok"]),
          helper.make_node("Add", ["tok", "pos_emb"], ["x"])]
for nd in nodes:
    if nd.op_type == "Add" and list(nd.input) == ["scaled", "mask"]:
        nd = helper.make_node("Where", ["keep", "scaled", "neg"], ["masked"])
    wnodes.append(nd)
winits = [i for i in inits if i.name != "mask"]
winits += [init("tok_emb", rand(vocab, E)), init("pos_emb", rand(S, E)),
           init("neg", np.float32(-10000.0))]
emit("bert_encoder_layer_where", wnodes,
     [("ids", rng.integers(0, vocab, size=(B, S)).astype(np.int64)), ("keep", keep)], ["y"],
     winits)

# The same layer with its attention mask computed in the model from the int64 token ids, as
# BERT exporters write it: Equal(ids, 0) (the padding token) -> Unsqueeze -> Where(-1e9, 0)
# added to the scores.
ids = rng.integers(1, vocab, size=(B, S)).astype(np.int64)
ids[1, S - 3:] = 0  # the second sequence is padded
cnodes = [helper.make_node("Equal", ["ids", "pad_id"], ["is_pad"]),
          helper.make_node("Unsqueeze", ["is_pad", "mask_axes"], ["is_pad4"]),
          helper.make_node("Where", ["is_pad4", "big_neg", "zero"], ["mask"])]
for nd in wnodes:
    if nd.op_type == "Where" and list(nd.input) == ["keep", "scaled", "neg"]:
        nd = helper.make_node("Add", ["scaled", "mask"], ["masked"])
    cnodes.append(nd)
cinits = [i for i in winits if i.name != "neg"]
cinits += [init("pad_id", np.int64(0)), init("mask_axes", np.array([1, 2], dtype=np.int64)),
           init("big_neg", np.float32(-1e9)), init("zero", np.float32(0))]
emit("bert_encoder_layer_mask_from_ids", cnodes, [("ids", ids)], ["y"], cinits)


# Issue 12: per-axis quantization, DynamicQuantizeLinear, ConvInteger / QLinearConv, integer
# Neg / Abs and Cast to bool of computed tensors; then quantize_static(per_channel=True) and
# quantize_dynamic MLPs. Each alone with random shapes, axes, scales and zero points.
def qvec(dt, n):
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max + 1, size=n).astype(dt)


def svec(n, lo=0.002, hi=0.05):
    return rng.uniform(lo, hi, size=n).astype(np.float32)


for rep in range(4):
    qdt = np.uint8 if rep % 2 == 0 else np.int8
    # DequantizeLinear along an axis (negative ones too), with and without a zero point.
    s = shape(1, 4)
    ax = int(rng.integers(-len(s), len(s)))
    c = s[ax]
    if c == 1:
        s = s[:ax % len(s)] + (3,) + s[ax % len(s) + 1:]
        c = 3
    ins, inits = ["x", "s"], [init("s", svec(c))]
    if rep != 3:
        ins.append("z")
        inits.append(init("z", qvec(qdt, c)))
    emit(name("DequantizeLinear"), [helper.make_node("DequantizeLinear", ins, ["y"], axis=ax)],
         [("x", qrand(qdt, *s))], ["y"], inits)
    # QuantizeLinear along an axis: saturation, exact ties with power-of-two scales.
    sc = (2.0 ** -rng.integers(3, 7, size=c)).astype(np.float32) if rep % 2 == 0 else svec(c)
    x = rand(*s, lo=-200 * float(sc.max()), hi=200 * float(sc.max()))
    if rep % 2 == 0:
        idx = np.indices(s)[ax % len(s)]
        x = np.where(rng.integers(0, 2, size=s) == 1,
                     (rng.integers(-150, 150, size=s) + 0.5) * sc[idx], x).astype(np.float32)
    emit(name("QuantizeLinear"),
         [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=ax)], [("x", x)], ["y"],
         [init("s", sc), init("z", qvec(qdt, c))], out_types={"y": ELEM[np.dtype(qdt)]})
    # QLinearMatMul with per-column b_scale (and b_zero_point: uint8 weights) of shape [n].
    m, k, n = (int(v) for v in rng.integers(2, 17, size=3))
    lead = [] if rep < 2 else [2]
    ydt = np.uint8 if rep != 1 else np.int8
    wdt = np.int8 if rep != 2 else np.uint8
    sa, sb = np.float32(rng.uniform(0.002, 0.05)), svec(n)
    za = np.array(rng.integers(0, 256) if ydt == np.uint8 else rng.integers(-128, 128), dtype=ydt)
    zb = qvec(wdt, n) if wdt == np.uint8 else np.zeros(n, dtype=np.int8)
    zy = np.array(rng.integers(0, 256) if ydt == np.uint8 else rng.integers(-128, 128), dtype=ydt)
    w = qrand(wdt, k, n)
    a = qrand(ydt, *lead, m, k)
    acc = (a.astype(np.int64) - int(za)) @ (w.astype(np.int64) - zb.astype(np.int64))
    sy = np.float32(float(sa) * float(sb.mean()) * (float(acc.max() - acc.min()) + 1) / 255 *
                    rng.uniform(0.6, 1.2))
    emit(name("QLinearMatMul"),
         [helper.make_node("QLinearMatMul", ["a", "sa", "za", "w", "sb", "zb", "sy", "zy"], ["y"])],
         [("a", a)], ["y"],
         [init("sa", sa), init("za", za), init("w", w), init("sb", sb), init("zb", zb),
          init("sy", sy), init("zy", zy)], out_types={"y": ELEM[np.dtype(ydt)]})
    # MatMulInteger with a per-column b_zero_point [n].
    emit(name("MatMulInteger"), [helper.make_node("MatMulInteger", ["a", "w", "az", "wz"], ["y"])],
         [("a", qrand(np.uint8, *lead, m, k))], ["y"],
         [init("w", qrand(wdt, k, n)), init("az", np.uint8(rng.integers(0, 256))),
          init("wz", qvec(wdt, n))], out_types={"y": TensorProto.INT32})
    # DynamicQuantizeLinear: all three outputs; an all-positive input (min clamps to 0) too.
    s = shape(1, 4)
    x = rand(*s, lo=-3, hi=5) if rep != 2 else rand(*s, lo=0.5, hi=4)
    emit(name("DynamicQuantizeLinear"),
         [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "ys", "yz"])], [("x", x)],
         ["y", "ys", "yz"], out_types={"y": TensorProto.UINT8, "yz": TensorProto.UINT8})
    # ConvInteger (uint8 x and w) and QLinearConv (uint8 x, int8 w with per-output-channel
    # scales, an int32 bias): groups, padding, strides, dilation.
    g = 1 if rep % 2 == 0 else 2
    cin, cout = g * int(rng.integers(1, 4)), g * int(rng.integers(1, 4))
    kh = int(rng.integers(1, 4))
    st, dil, pad = int(rng.integers(1, 3)), int(1 + (rep == 3)), int(rng.integers(0, 2))
    hw = int(rng.integers(kh * dil + 1, 9))
    x = qrand(np.uint8, 1 + rep % 2, cin, hw, hw)
    emit(name("ConvInteger"),
         [helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], group=g,
                           strides=[st, st], dilations=[dil, dil], pads=[pad] * 4)],
         [("x", x)], ["y"],
         [init("w", qrand(np.uint8, cout, cin // g, kh, kh)), init("xz", np.uint8(rng.integers(0, 256))),
          init("wz", np.uint8(rng.integers(0, 256)))], out_types={"y": TensorProto.INT32})
    ws = svec(cout) if rep != 1 else np.float32(rng.uniform(0.002, 0.05))
    wq = qrand(np.int8, cout, cin // g, kh, kh)
    xs = np.float32(rng.uniform(0.002, 0.05))
    sy = np.float32(float(xs) * float(np.mean(ws)) * 128 * (cin // g) * kh * kh / 40)
    emit(name("QLinearConv"),
         [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                           ["y"], group=g, strides=[st, st], dilations=[dil, dil],
                           pads=[pad] * 4)],
         [("x", x)], ["y"],
         [init("xs", xs), init("xz", np.uint8(rng.integers(0, 256))), init("w", wq),
          init("ws", ws), init("wz", np.zeros(cout, dtype=np.int8) if rep != 1 else np.int8(0)),
          init("ys", np.float32(sy)), init("yz", np.uint8(rng.integers(0, 256))),
          init("b", rng.integers(-2000, 2000, size=cout).astype(np.int32))],
         out_types={"y": TensorProto.UINT8})
    # Neg and Abs of integer tensors (int8 -128 wraps), Cast to bool of a computed tensor.
    idt = [np.int8, np.int32, np.int64, np.int32][rep]
    xi = qrand(np.int8, *shape(1, 3)).astype(idt)
    for op in ("Neg", "Abs"):
        emit(name(op), [helper.make_node(op, ["x"], ["y"])], [("x", xi)], ["y"],
             out_types={"y": ELEM[np.dtype(idt)]})
    x = rand(*shape(1, 3))
    x.flat[::3] = 0.25
    emit(name("Cast"), [helper.make_node("Sub", ["x", "q"], ["d"]),
                        helper.make_node("Cast", ["d"], ["b"], to=TensorProto.BOOL),
                        helper.make_node("Cast", ["b"], ["y"], to=TensorProto.FLOAT)],
         [("x", x)], ["y"], [init("q", np.float32(0.25))])


# Issue 13: 1x1 convolutions with constant weights go through the int8 matmul path (NHWC rows,
# matmul_integer_zp, lowered onto the VNNI dot products where channels allow: c % 4 == 0, oc
# % 32 == 0; strided ones sliced first); 3x3 ones with strides and padding stay conv2d.
# Per-channel w_scale, groups 1.
for rep in range(3):
    cin, cout = [(8, 32), (16, 64), (12, 40)][rep]
    hw = int(rng.integers(3, 7))
    x = qrand(np.uint8, 1 + rep % 2, cin, hw, hw)
    emit(name("ConvInteger"),
         [helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"])],
         [("x", x)], ["y"],
         [init("w", qrand(np.uint8, cout, cin, 1, 1)), init("xz", np.uint8(rng.integers(0, 256))),
          init("wz", np.uint8(rng.integers(0, 256)))], out_types={"y": TensorProto.INT32})
    for kh, st, pad in ((1, 1, 0), (1, 2, 0), (3, 1 + rep % 2, 1)):
        ws = svec(cout)
        wq = qrand(np.int8, cout, cin, kh, kh)
        xs = np.float32(rng.uniform(0.002, 0.05))
        sy = np.float32(float(xs) * float(np.mean(ws)) * 128 * cin * kh * kh / 40)
        emit(name("QLinearConv"),
             [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                               ["y"], strides=[st, st], pads=[pad] * 4)],
             [("x", x)], ["y"],
             [init("xs", xs), init("xz", np.uint8(rng.integers(0, 256))), init("w", wq),
              init("ws", ws), init("wz", np.zeros(cout, dtype=np.int8)),
              init("ys", np.float32(sy)), init("yz", np.uint8(rng.integers(0, 256))),
              init("b", rng.integers(-2000, 2000, size=cout).astype(np.int32))],
             out_types={"y": TensorProto.UINT8})


# MLPs quantized by onnxruntime: quantize_static with per-channel int8 weights (QDQ; the
# weights' DequantizeLinear along axis 1), and quantize_dynamic (DynamicQuantizeLinear ->
# MatMulInteger -> Cast -> Mul).
def mlp_float(nm, d_in, d_h, d_out, rows, gemm=False):
    """MatMul + Add, Relu, then MatMul + Add (or Gemm with transB: its weights [d_out, d_h],
    quantized per channel along axis 0)."""
    last = ([helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)] if gemm else
            [helper.make_node("MatMul", ["r", "w2"], ["y0"]),
             helper.make_node("Add", ["y0", "b2"], ["y"])])
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h0"]),
         helper.make_node("Add", ["h0", "b1"], ["h"]), helper.make_node("Relu", ["h"], ["r"])] +
        last,
        nm, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, d_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, d_out])],
        [init("w1", rand(d_in, d_h)), init("b1", rand(d_h)),
         init("w2", rand(d_out, d_h) if gemm else rand(d_h, d_out)), init("b2", rand(d_out))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    fpath = os.path.join(out_dir, nm + ".float.onnx")
    onnx.save(m, fpath)
    return fpath


def emit_quantized(nm, qpath, x):
    q = onnx.load(qpath)
    os.remove(qpath)
    emit(nm, list(q.graph.node), [("x", x)], ["y"], list(q.graph.initializer),
         opset=max(OPSET, max(o.version for o in q.opset_import if o.domain in ("", "ai.onnx"))))


def quantized_mlp_per_channel(nm):
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    rows = 6
    fpath = mlp_float(nm, 16, 32, 32, rows, gemm=True)
    calib = [{"x": rand(rows, 16)} for _ in range(8)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

    qpath = os.path.join(out_dir, nm + ".q.onnx")
    quantize_static(fpath, qpath, Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    per_channel=True)
    os.remove(fpath)
    emit_quantized(nm, qpath, rand(rows, 16))


def quantized_mlp_dynamic(nm):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    rows = 5
    fpath = mlp_float(nm, 16, 32, 10, rows)
    qpath = os.path.join(out_dir, nm + ".q.onnx")
    quantize_dynamic(fpath, qpath, weight_type=QuantType.QInt8)
    os.remove(fpath)
    emit_quantized(nm, qpath, rand(rows, 16))


quantized_mlp_per_channel("mlp_quantize_static_per_channel")
quantized_mlp_dynamic("mlp_quantize_dynamic")

with open(os.path.join(out_dir, "list.txt"), "w") as f:
    f.write("\n".join(listing) + "\n")
print(f"make_models.py: {len(listing)} models in {out_dir}")
