/* Writing small ONNX models from C with the protobuf-c structs the build generates
 * (test_onnx.c; the fuzz seed corpus). Everything is allocated from one arena: om_reset frees it.
 */
#ifndef TESSERA_TESTS_ONNX_TESTLIB_H
#define TESSERA_TESTS_ONNX_TESTLIB_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"

#define OM_MAX 64

typedef struct om_model {
    Onnx__NodeProto *nodes[OM_MAX];
    Onnx__TensorProto *inits[OM_MAX];
    Onnx__ValueInfoProto *ins[8], *outs[8], *infos[8];
    int nn, ni, nin, nout, ninfo;
    int64_t opset;
} om_model;

static void *om_arena[4096];
static int om_narena;

static inline void *om_alloc(size_t n)
{
    void *p = calloc(1, n ? n : 1);
    if (!p || om_narena == (int)(sizeof om_arena / sizeof om_arena[0]))
        abort();
    om_arena[om_narena++] = p;
    return p;
}

static inline char *om_str(const char *s)
{
    char *p = om_alloc(strlen(s) + 1);
    strcpy(p, s);
    return p;
}

static inline void om_reset(om_model *m)
{
    for (int i = 0; i < om_narena; i++)
        free(om_arena[i]);
    om_narena = 0;
    memset(m, 0, sizeof *m);
    m->opset = 17;
}

/* A float tensor; raw != 0 stores it in raw_data, else in float_data. */
static inline Onnx__TensorProto *om_tensor_f(const char *name, int nd, const int64_t *dims,
                                             const float *data, int raw)
{
    Onnx__TensorProto *t = om_alloc(sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = om_str(name);
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t->n_dims = (size_t)nd;
    t->dims = om_alloc((size_t)nd * sizeof(int64_t));
    int64_t numel = 1;
    for (int d = 0; d < nd; d++)
        numel *= (t->dims[d] = dims[d]);
    if (raw) {
        t->has_raw_data = 1;
        t->raw_data.len = (size_t)numel * 4;
        t->raw_data.data = om_alloc(t->raw_data.len);
        memcpy(t->raw_data.data, data, t->raw_data.len);
    } else {
        t->n_float_data = (size_t)numel;
        t->float_data = om_alloc((size_t)numel * sizeof(float));
        memcpy(t->float_data, data, (size_t)numel * sizeof(float));
    }
    return t;
}

static inline Onnx__TensorProto *om_tensor_i64(const char *name, int n, const int64_t *v)
{
    Onnx__TensorProto *t = om_alloc(sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = om_str(name);
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    t->n_dims = 1;
    t->dims = om_alloc(sizeof(int64_t));
    t->dims[0] = n;
    t->n_int64_data = (size_t)n;
    t->int64_data = om_alloc((size_t)n * sizeof(int64_t));
    memcpy(t->int64_data, v, (size_t)n * sizeof(int64_t));
    return t;
}

static inline Onnx__AttributeProto *om_attr(const char *name)
{
    Onnx__AttributeProto *a = om_alloc(sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = om_str(name);
    a->has_type = 1;
    return a;
}

static inline Onnx__AttributeProto *om_attr_i(const char *name, int64_t v)
{
    Onnx__AttributeProto *a = om_attr(name);
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_i = 1;
    a->i = v;
    return a;
}

static inline Onnx__AttributeProto *om_attr_f(const char *name, float v)
{
    Onnx__AttributeProto *a = om_attr(name);
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    a->has_f = 1;
    a->f = v;
    return a;
}

static inline Onnx__AttributeProto *om_attr_ints(const char *name, int n, const int64_t *v)
{
    Onnx__AttributeProto *a = om_attr(name);
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    a->n_ints = (size_t)n;
    a->ints = om_alloc((size_t)n * sizeof(int64_t));
    memcpy(a->ints, v, (size_t)n * sizeof(int64_t));
    return a;
}

static inline Onnx__AttributeProto *om_attr_t(const char *name, Onnx__TensorProto *t)
{
    Onnx__AttributeProto *a = om_attr(name);
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
    a->t = t;
    return a;
}

/* Adds a node: inputs and outputs are comma-separated names ("" for none); attributes follow,
 * NULL-terminated. */
static inline Onnx__NodeProto *om_node(om_model *m, const char *op, const char *name,
                                       const char *ins, const char *outs, ...)
{
    Onnx__NodeProto *n = om_alloc(sizeof *n);
    onnx__node_proto__init(n);
    n->op_type = om_str(op);
    n->name = om_str(name);
    for (int pass = 0; pass < 2; pass++) {
        const char *list = pass ? outs : ins;
        char **arr = om_alloc(16 * sizeof(char *));
        size_t k = 0;
        char buf[256];
        snprintf(buf, sizeof buf, "%s", list);
        for (char *tok = strtok(buf, ","); tok && k < 16; tok = strtok(NULL, ","))
            arr[k++] = om_str(strcmp(tok, "_") ? tok : "");
        if (pass) {
            n->output = arr;
            n->n_output = k;
        } else {
            n->input = arr;
            n->n_input = k;
        }
    }
    va_list ap;
    va_start(ap, outs);
    n->attribute = om_alloc(16 * sizeof(Onnx__AttributeProto *));
    for (Onnx__AttributeProto *a; (a = va_arg(ap, Onnx__AttributeProto *)) != NULL;)
        n->attribute[n->n_attribute++] = a;
    va_end(ap);
    m->nodes[m->nn++] = n;
    return n;
}

/* A float tensor ValueInfo; sym[d] (may be NULL) names a symbolic dimension; nd < 0: no
 * shape at all. */
static inline Onnx__ValueInfoProto *om_vinfo(const char *name, int nd, const int64_t *dims,
                                             const char *const *sym)
{
    Onnx__ValueInfoProto *v = om_alloc(sizeof *v);
    onnx__value_info_proto__init(v);
    v->name = om_str(name);
    Onnx__TypeProto *tp = om_alloc(sizeof *tp);
    onnx__type_proto__init(tp);
    Onnx__TypeProto__Tensor *tt = om_alloc(sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    v->type = tp;
    if (nd < 0)
        return v;
    Onnx__TensorShapeProto *sh = om_alloc(sizeof *sh);
    onnx__tensor_shape_proto__init(sh);
    sh->n_dim = (size_t)nd;
    sh->dim = om_alloc((size_t)nd * sizeof *sh->dim);
    for (int d = 0; d < nd; d++) {
        Onnx__TensorShapeProto__Dimension *dm = om_alloc(sizeof *dm);
        onnx__tensor_shape_proto__dimension__init(dm);
        if (sym && sym[d]) {
            dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dm->dim_param = om_str(sym[d]);
        } else {
            dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dm->dim_value = dims[d];
        }
        sh->dim[d] = dm;
    }
    tt->shape = sh;
    return v;
}

/* Serializes the model; returns its bytes (arena-owned) and size. */
static inline uint8_t *om_pack(om_model *m, size_t *size)
{
    Onnx__GraphProto *g = om_alloc(sizeof *g);
    onnx__graph_proto__init(g);
    g->name = om_str("test");
    g->n_node = (size_t)m->nn;
    g->node = m->nodes;
    g->n_initializer = (size_t)m->ni;
    g->initializer = m->inits;
    g->n_input = (size_t)m->nin;
    g->input = m->ins;
    g->n_output = (size_t)m->nout;
    g->output = m->outs;
    g->n_value_info = (size_t)m->ninfo;
    g->value_info = m->infos;
    Onnx__OperatorSetIdProto *os = om_alloc(sizeof *os);
    onnx__operator_set_id_proto__init(os);
    os->domain = om_str("");
    os->has_version = 1;
    os->version = m->opset;
    Onnx__OperatorSetIdProto **osp = om_alloc(sizeof *osp);
    osp[0] = os;
    Onnx__ModelProto mp;
    onnx__model_proto__init(&mp);
    mp.has_ir_version = 1;
    mp.ir_version = 8;
    mp.producer_name = om_str("tessera-test");
    mp.n_opset_import = 1;
    mp.opset_import = osp;
    mp.graph = g;
    *size = onnx__model_proto__get_packed_size(&mp);
    uint8_t *buf = om_alloc(*size);
    onnx__model_proto__pack(&mp, buf);
    return buf;
}

static inline int om_write(om_model *m, const char *path, size_t truncate_to)
{
    size_t size;
    uint8_t *buf = om_pack(m, &size);
    if (truncate_to && truncate_to < size)
        size = truncate_to;
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(buf, 1, size, f) == size;
    return fclose(f) == 0 && ok ? 0 : -1;
}

#endif
