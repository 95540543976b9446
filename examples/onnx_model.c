/*
 * A small transformer encoder layer written as an ONNX model, from plain C, with no network and
 * no ONNX library: the protobuf wire format is a handful of varints and length-prefixed fields,
 * written here by hand (pb_* below) with the field numbers of onnx.proto. tools/demo.sh runs the
 * whole path on the file it writes:
 *
 *     example_onnx_model -o model.onnx [--seq 16] [--hidden 32] [--layers 1]
 *     tessera import model.onnx -o model.graph
 *     tessera fuse model.graph
 *     tessera tune model.onnx --trials 32 --db tessera.db
 *     tessera run model.onnx --db tessera.db --check --output-dir out
 *     tessera gen model.onnx --db tessera.db -o kernels
 *
 * Each layer (input x: f32[seq, hidden]):
 *
 *     h   = LayerNormalization(x)                       (last axis, scale and bias)
 *     q,k,v = h Wq, h Wk, h Wv                         single-head attention
 *     p   = Softmax((q Transpose(k)) * 1/sqrt(hidden))
 *     a   = x + (p v) Wo + bo                          residual
 *     m   = LayerNormalization(a)
 *     y   = a + Gelu_erf(m W1 + b1) W2 + b2            MLP (4 x hidden), erf GELU as exporters
 *                                                      write it: u * 0.5 * (1 + Erf(u / sqrt 2))
 *
 * Run as a test (--quiet, no -o) it writes the model to a temporary file, imports it with
 * te_graph_from_onnx and checks the graph's input and output shapes and that the erf GELU
 * became one gelu node.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/graph.h"
#include "tessera/onnx.h"

/* ---- Protobuf wire format ------------------------------------------------------------------ */

typedef struct pb {
    unsigned char *p;
    size_t n, cap;
} pb;

static void pb_put(pb *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) {
            fprintf(stderr, "onnx_model: out of memory\n");
            exit(1);
        }
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void pb_varint(pb *b, uint64_t v)
{
    unsigned char c[10];
    int k = 0;
    do {
        c[k++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_put(b, c, (size_t)k);
}

/* Wire types: 0 varint, 2 length-delimited. */
static void pb_int(pb *b, int field, int64_t v)
{
    pb_varint(b, (uint64_t)field << 3);
    pb_varint(b, (uint64_t)v);
}

static void pb_bytes(pb *b, int field, const void *d, size_t n)
{
    pb_varint(b, (uint64_t)field << 3 | 2);
    pb_varint(b, n);
    pb_put(b, d, n);
}

static void pb_str(pb *b, int field, const char *s) { pb_bytes(b, field, s, strlen(s)); }

/* Appends sub as a nested message and frees it. */
static void pb_msg(pb *b, int field, pb *sub)
{
    pb_bytes(b, field, sub->p, sub->n);
    free(sub->p);
    memset(sub, 0, sizeof *sub);
}

/* ---- The model ------------------------------------------------------------------------------ */

typedef struct enc {
    pb graph;
    uint64_t rng;
} enc;

static float urand(enc *m, float scale)
{
    m->rng ^= m->rng << 13, m->rng ^= m->rng >> 7, m->rng ^= m->rng << 17;
    float x = (float)((double)(m->rng >> 11) / 9007199254740992.0 * 2 - 1);
    return (x == 0 ? 0.5f : x) * scale;
}

/* An initializer (TensorProto: dims 1, data_type 2 (FLOAT 1), name 8, raw_data 9). */
static void initializer(enc *m, const char *name, int nd, const int64_t *dims, float scale,
                        float offset)
{
    pb t = {0};
    int64_t n = 1;
    for (int d = 0; d < nd; d++) {
        pb_int(&t, 1, dims[d]);
        n *= dims[d];
    }
    pb_int(&t, 2, 1);
    pb_str(&t, 8, name);
    float *data = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        data[i] = offset + (scale ? urand(m, scale) : 0);
    pb_bytes(&t, 9, data, sizeof(float) * (size_t)n);
    free(data);
    pb_msg(&m->graph, 5, &t);
}

static void scalar(enc *m, const char *name, float v)
{
    pb t = {0};
    pb_int(&t, 2, 1);
    pb_str(&t, 8, name);
    pb_bytes(&t, 9, &v, sizeof v);
    pb_msg(&m->graph, 5, &t);
}

/* A node (NodeProto: input 1, output 2, name 3, op_type 4, attribute 5); ins and outs are
 * comma-separated. attr: optional AttributeProto bytes. */
static void node(enc *m, const char *op, const char *name, const char *ins, const char *outs,
                 pb *attr)
{
    pb n = {0};
    for (int pass = 0; pass < 2; pass++) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", pass ? outs : ins);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ","))
            pb_str(&n, pass ? 2 : 1, tok);
    }
    pb_str(&n, 3, name);
    pb_str(&n, 4, op);
    if (attr)
        pb_msg(&n, 5, attr);
    pb_msg(&m->graph, 1, &n);
}

/* AttributeProto: name 1, i 3, type 20 (INT 2). */
static pb attr_i(const char *name, int64_t v)
{
    pb a = {0};
    pb_str(&a, 1, name);
    pb_int(&a, 3, v);
    pb_int(&a, 20, 2);
    return a;
}

/* ValueInfoProto (name 1, type 2) of a float tensor: TypeProto.tensor_type 1 -> elem_type 1,
 * shape 2 -> dim 1 -> dim_value 1. */
static void value_info(pb *graph, int field, const char *name, int nd, const int64_t *dims)
{
    pb shape = {0}, tensor = {0}, type = {0}, vi = {0};
    for (int d = 0; d < nd; d++) {
        pb dim = {0};
        pb_int(&dim, 1, dims[d]);
        pb_msg(&shape, 1, &dim);
    }
    pb_int(&tensor, 1, 1);
    pb_msg(&tensor, 2, &shape);
    pb_msg(&type, 1, &tensor);
    pb_str(&vi, 1, name);
    pb_msg(&vi, 2, &type);
    pb_msg(graph, field, &vi);
}

/* prefix + s in one of four static buffers that take turns (two may appear in one call). */
static const char *pfx(const char *prefix, const char *s)
{
    static char buf[4][64];
    static int turn;
    turn = (turn + 1) % 4;
    snprintf(buf[turn], sizeof buf[turn], "%s%s", prefix, s);
    return buf[turn];
}

/* One encoder layer reading `x`, writing `y` (names prefixed by "l<i>_"). */
static void layer(enc *m, int li, int64_t d, const char *x, const char *y)
{
    char p[16], a[256], b[64];
#define N(s) pfx(p, s)
    snprintf(p, sizeof p, "l%d_", li);
    float ws = 1.0f / sqrtf((float)d);
    initializer(m, N("ln1_g"), 1, (int64_t[]){d}, 0.1f, 1.0f);
    initializer(m, N("ln1_b"), 1, (int64_t[]){d}, 0.1f, 0.0f);
    snprintf(a, sizeof a, "%s,%sln1_g,%sln1_b", x, p, p);
    pb ax = attr_i("axis", -1);
    node(m, "LayerNormalization", N("ln1"), a, N("h"), &ax);
    const char *proj[] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        snprintf(b, sizeof b, "%sW%s", p, proj[i]);
        initializer(m, b, 2, (int64_t[]){d, d}, ws, 0);
        snprintf(a, sizeof a, "%sh,%s", p, b);
        snprintf(b, sizeof b, "%s%s", p, proj[i]);
        node(m, "MatMul", b, a, b, NULL);
    }
    snprintf(a, sizeof a, "%sk", p);
    node(m, "Transpose", N("kt"), a, N("kt"), NULL);
    snprintf(a, sizeof a, "%sq,%skt", p, p);
    node(m, "MatMul", N("s"), a, N("s"), NULL);
    scalar(m, N("scale"), 1.0f / sqrtf((float)d));
    snprintf(a, sizeof a, "%ss,%sscale", p, p);
    node(m, "Mul", N("ss"), a, N("ss"), NULL);
    pb sx = attr_i("axis", -1);
    snprintf(a, sizeof a, "%sss", p);
    node(m, "Softmax", N("p"), a, N("p"), &sx);
    snprintf(a, sizeof a, "%sp,%sv", p, p);
    node(m, "MatMul", N("pv"), a, N("pv"), NULL);
    initializer(m, N("Wo"), 2, (int64_t[]){d, d}, ws, 0);
    initializer(m, N("bo"), 1, (int64_t[]){d}, 0.1f, 0);
    snprintf(a, sizeof a, "%spv,%sWo", p, p);
    node(m, "MatMul", N("o"), a, N("o"), NULL);
    snprintf(a, sizeof a, "%so,%sbo", p, p);
    node(m, "Add", N("ob"), a, N("ob"), NULL);
    snprintf(a, sizeof a, "%s,%sob", x, p);
    node(m, "Add", N("a"), a, N("a"), NULL);
    /* MLP */
    initializer(m, N("ln2_g"), 1, (int64_t[]){d}, 0.1f, 1.0f);
    initializer(m, N("ln2_b"), 1, (int64_t[]){d}, 0.1f, 0.0f);
    snprintf(a, sizeof a, "%sa,%sln2_g,%sln2_b", p, p, p);
    pb ax2 = attr_i("axis", -1);
    node(m, "LayerNormalization", N("ln2"), a, N("m"), &ax2);
    initializer(m, N("W1"), 2, (int64_t[]){d, 4 * d}, ws, 0);
    initializer(m, N("b1"), 1, (int64_t[]){4 * d}, 0.1f, 0);
    initializer(m, N("W2"), 2, (int64_t[]){4 * d, d}, ws * 0.5f, 0);
    initializer(m, N("b2"), 1, (int64_t[]){d}, 0.1f, 0);
    snprintf(a, sizeof a, "%sm,%sW1", p, p);
    node(m, "MatMul", N("f1"), a, N("f1"), NULL);
    snprintf(a, sizeof a, "%sf1,%sb1", p, p);
    node(m, "Add", N("u"), a, N("u"), NULL);
    /* The erf GELU, as PyTorch exports it. */
    scalar(m, N("sqrt2"), sqrtf(2.0f));
    scalar(m, N("one"), 1.0f);
    scalar(m, N("half"), 0.5f);
    snprintf(a, sizeof a, "%su,%ssqrt2", p, p);
    node(m, "Div", N("g0"), a, N("g0"), NULL);
    snprintf(a, sizeof a, "%sg0", p);
    node(m, "Erf", N("g1"), a, N("g1"), NULL);
    snprintf(a, sizeof a, "%sg1,%sone", p, p);
    node(m, "Add", N("g2"), a, N("g2"), NULL);
    snprintf(a, sizeof a, "%su,%sg2", p, p);
    node(m, "Mul", N("g3"), a, N("g3"), NULL);
    snprintf(a, sizeof a, "%sg3,%shalf", p, p);
    node(m, "Mul", N("g"), a, N("g"), NULL);
    snprintf(a, sizeof a, "%sg,%sW2", p, p);
    node(m, "MatMul", N("f2"), a, N("f2"), NULL);
    snprintf(a, sizeof a, "%sf2,%sb2", p, p);
    node(m, "Add", N("f2b"), a, N("f2b"), NULL);
    snprintf(a, sizeof a, "%sa,%sf2b", p, p);
    node(m, "Add", N("y"), a, y, NULL);
#undef N
}

/* The serialized ModelProto (ir_version 1, producer_name 2, graph 7, opset_import 8). */
static pb build(int64_t seq, int64_t d, int layers)
{
    enc m = {{0}, 0x2545F4914F6CDD1Dull};
    pb_str(&m.graph, 2, "encoder");
    char x[32] = "x", y[32];
    for (int l = 0; l < layers; l++) {
        if (l == layers - 1)
            snprintf(y, sizeof y, "y");
        else
            snprintf(y, sizeof y, "x%d", l + 1);
        layer(&m, l, d, x, y);
        snprintf(x, sizeof x, "%s", y);
    }
    value_info(&m.graph, 11, "x", 2, (int64_t[]){seq, d});
    value_info(&m.graph, 12, "y", 2, (int64_t[]){seq, d});
    pb model = {0}, opset = {0};
    pb_int(&model, 1, 8);
    pb_str(&model, 2, "tessera examples/onnx_model.c");
    pb_msg(&model, 7, &m.graph);
    pb_str(&opset, 1, "");
    pb_int(&opset, 2, 17);
    pb_msg(&model, 8, &opset);
    return model;
}

static int usage(FILE *f, int rc)
{
    fprintf(f, "usage: example_onnx_model [-o MODEL.onnx] [--seq N] [--hidden N] [--layers N] "
               "[--quiet]\n\nWrites a small transformer encoder as an ONNX model (without -o: "
               "to a temporary file, imported and checked).\n");
    return rc;
}

int main(int argc, char **argv)
{
    const char *out = NULL;
    long seq = 16, hidden = 32, layers = 1;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        long *num = NULL;
        if (!strcmp(argv[i], "--quiet"))
            quiet = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return usage(stdout, 0);
        else if (!strcmp(argv[i], "-o") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--seq"))
            num = &seq;
        else if (!strcmp(argv[i], "--hidden"))
            num = &hidden;
        else if (!strcmp(argv[i], "--layers"))
            num = &layers;
        else
            return usage(stderr, 2);
        if (num) {
            char *end;
            if (i + 1 >= argc || (*num = strtol(argv[++i], &end, 10), *end) || *num < 1 ||
                *num > 4096)
                return usage(stderr, 2);
        }
    }
    pb model = build(seq, hidden, (int)layers);
    char tmp[64] = "";
    if (!out) {
        snprintf(tmp, sizeof tmp, "/tmp/example_onnx_model_%d.onnx", (int)getpid());
        out = tmp;
    }
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(model.p, 1, model.n, f) != model.n || fclose(f)) {
        fprintf(stderr, "example_onnx_model: cannot write %s\n", out);
        return 1;
    }
    free(model.p);
    if (!quiet)
        printf("wrote %s: a %ld-layer encoder, x f32[%ld,%ld] -> y f32[%ld,%ld], %zu bytes\n", out,
               layers, seq, hidden, seq, hidden, model.n);
    if (!tmp[0])
        return 0;
    /* The self-check: the model imports, with the shapes and the one gelu per layer. */
    te_graph *g = NULL;
    char err[1024];
    int rc = te_graph_from_onnx(out, NULL, &g, err, sizeof err);
    remove(out);
    if (rc) {
        fprintf(stderr, "example_onnx_model: %s\n", err);
        return 1;
    }
    int ok = te_graph_input_count(g) == 1 && te_graph_output_count(g) == 1;
    int yv = te_graph_output_value(g, 0);
    ok = ok && te_graph_value_ndim(g, yv) == 2 && te_graph_value_shape(g, yv)[0] == seq &&
         te_graph_value_shape(g, yv)[1] == hidden;
    int gelus = 0;
    for (int i = 0; i < te_graph_node_count(g); i++)
        gelus += !strcmp(te_graph_node_op(g, i), "gelu");
    ok = ok && gelus == layers;
    if (!ok)
        fprintf(stderr,
                "example_onnx_model: the imported graph is not the model written "
                "(%d gelu nodes for %ld layers)\n",
                gelus, layers);
    te_graph_free(g);
    return ok ? 0 : 1;
}
