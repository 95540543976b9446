/* Reading an ONNX ModelProto: the file, opsets, initializers (typed fields, raw_data, external
 * data), graph inputs with their bound shapes, node order; then onnx_ops.c converts the nodes.
 * A model is converted whole or refused with the first error (the graph is then freed). */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_internal.h"

/* The largest model file read into memory and the largest tensor accepted (elements). */
#define OX_MAX_FILE ((size_t)1 << 32)
#define OX_MAX_NUMEL ((int64_t)1 << 31)

int ox_fail(ox_ctx *c, int rc, const char *fmt, ...)
{
    if (c->rc)
        return c->rc;
    c->rc = rc;
    if (c->err && c->errsize) {
        int k = snprintf(c->err, c->errsize, "%s: ", c->label);
        if (k >= 0 && (size_t)k < c->errsize) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(c->err + k, c->errsize - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return rc;
}

ox_val *ox_lookup(ox_ctx *c, const char *name, int create)
{
    if (!name)
        return NULL;
    for (int i = 0; i < c->nvals; i++)
        if (strcmp(c->vals[i].name, name) == 0)
            return &c->vals[i];
    if (!create)
        return NULL;
    if (c->nvals == c->capvals) {
        int cap = c->capvals ? 2 * c->capvals : 64;
        ox_val *nv = realloc(c->vals, (size_t)cap * sizeof *nv);
        if (!nv) {
            ox_fail(c, TE_ERR_NOMEM, "out of memory");
            return NULL;
        }
        c->vals = nv;
        c->capvals = cap;
    }
    ox_val *v = &c->vals[c->nvals];
    memset(v, 0, sizeof *v);
    v->name = strdup(name);
    if (!v->name) {
        ox_fail(c, TE_ERR_NOMEM, "out of memory");
        return NULL;
    }
    v->gv = v->ref = -1;
    c->nvals++;
    return v;
}

void ox_graph_name(ox_ctx *c, const char *onnx_name, char *buf, size_t size)
{
    char base[33];
    size_t k = 0;
    for (const char *p = onnx_name ? onnx_name : ""; *p && k < 32; p++)
        base[k++] = isalnum((unsigned char)*p) ? *p : '_';
    base[k] = 0;
    /* Trim leading underscores left by "/", then make it start with a letter. */
    const char *b = base;
    while (*b == '_')
        b++;
    if (!*b)
        b = "t";
    snprintf(buf, size, "%s%s", isdigit((unsigned char)*b) ? "t" : "", b);
    if (te_graph_find(c->g, buf) < 0)
        return;
    char tmp[48];
    do
        snprintf(tmp, sizeof tmp, "%.32s_%d", buf, ++c->uniq);
    while (te_graph_find(c->g, tmp) >= 0);
    snprintf(buf, size, "%s", tmp);
}

te_dtype ox_elem_dtype(int32_t elem)
{
    switch (elem) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
        return TE_F32;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
        return TE_I64;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
        return TE_I32;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
        return TE_I8;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
        return TE_U8;
    default:
        return TE_DTYPE_COUNT;
    }
}

/* Stores element i of v as dtype dt at p; false when the value does not fit. */
static int store_elem(te_dtype dt, double x, void *p, int64_t i)
{
    switch (dt) {
    case TE_U8:
        if (!(x >= 0 && x <= 255))
            return 0;
        ((uint8_t *)p)[i] = (uint8_t)x;
        return 1;
    case TE_I8:
        if (!(x >= -128 && x <= 127))
            return 0;
        ((int8_t *)p)[i] = (int8_t)x;
        return 1;
    case TE_I32:
        if (!(x >= INT32_MIN && x <= INT32_MAX))
            return 0;
        ((int32_t *)p)[i] = (int32_t)x;
        return 1;
    default:
        ((float *)p)[i] = x > FLT_MAX ? INFINITY : x < -FLT_MAX ? -INFINITY : (float)x;
        return 1;
    }
}

int ox_materialize_as(ox_ctx *c, ox_val *v, te_dtype dt)
{
    if (v->kind != OX_CONST)
        return v->gv;
    if (dt != TE_U8 && dt != TE_I8 && dt != TE_I32)
        dt = TE_F32;
    void *p = malloc((size_t)(v->numel ? v->numel : 1) * te_dtype_size(dt));
    if (!p)
        return ox_fail(c, TE_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < v->numel; i++)
        if (!store_elem(dt, v->d[i], p, i)) {
            free(p);
            return ox_fail(c, TE_ERR_CORRUPT, "tensor '%s': element %" PRId64 " (%g) is not a %s",
                           v->name, i, v->d[i], te_dtype_str(dt));
        }
    int64_t one = 1;
    char nm[48];
    ox_graph_name(c, v->name, nm, sizeof nm);
    int id = te_graph_const(c->g, nm, dt, v->ndim ? v->ndim : 1, v->ndim ? v->shape : &one, p);
    free(p);
    if (id < 0)
        return ox_fail(c, id, "constant '%s': %s", v->name, te_graph_errmsg(c->g));
    return id;
}

int ox_materialize(ox_ctx *c, ox_val *v)
{
    if (v->kind != OX_CONST)
        return v->gv; /* a graph value, maybe tagged as part of the erf GELU */
    /* uint8 / int8 tensors (quantized weights and zero points) keep their dtype; the other
     * constants are float data (integer ones are folded where they are shapes). */
    te_dtype dt = v->elem == ONNX__TENSOR_PROTO__DATA_TYPE__UINT8  ? TE_U8
                  : v->elem == ONNX__TENSOR_PROTO__DATA_TYPE__INT8 ? TE_I8
                                                                   : TE_F32;
    int id = ox_materialize_as(c, v, dt);
    if (id < 0)
        return id;
    v->kind = OX_GRAPH;
    v->gv = id;
    return id;
}

int ox_materialize_i64(ox_ctx *c, ox_val *v)
{
    if (v->kind != OX_CONST)
        return v->gv;
    int64_t *d = malloc((size_t)(v->numel ? v->numel : 1) * sizeof *d), one = 1;
    if (!d)
        return ox_fail(c, TE_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < v->numel; i++)
        d[i] = ox_i64(v->d[i]);
    char nm[48];
    ox_graph_name(c, v->name, nm, sizeof nm);
    int id = te_graph_const(c->g, nm, TE_I64, v->ndim ? v->ndim : 1, v->ndim ? v->shape : &one, d);
    free(d);
    if (id < 0)
        return ox_fail(c, id, "constant '%s': %s", v->name, te_graph_errmsg(c->g));
    return id; /* v stays a constant: its float materialization is another value */
}

/* ---- Tensors ---------------------------------------------------------------------------- */

static int elem_size(int32_t dt, int *is_int)
{
    *is_int = 1;
    switch (dt) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
        *is_int = 0;
        return 4;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
        *is_int = 0;
        return 8;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
        return 8;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
        return 4;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
        return 2;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
        return 1;
    default:
        return 0;
    }
}

static double raw_elem(const uint8_t *p, int32_t dt)
{
    switch (dt) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: {
        int64_t i;
        memcpy(&i, p, 8);
        return (double)i;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: {
        int32_t i;
        memcpy(&i, p, 4);
        return i;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16: {
        int16_t i;
        memcpy(&i, p, 2);
        return i;
    }
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
        return (int8_t)p[0];
    default:
        return p[0];
    }
}

/* Reads `len` bytes at `offset` of external file `loc` (relative to the model's directory). */
static uint8_t *read_external(ox_ctx *c, const char *tname, const char *loc, int64_t offset,
                              size_t len)
{
    if (!c->base_dir) {
        ox_fail(c, TE_ERR_UNSUPPORTED, "tensor '%s': external data needs a model file", tname);
        return NULL;
    }
    if (!loc || !*loc || loc[0] == '/' || strstr(loc, "..") || strchr(loc, '\\')) {
        ox_fail(c, TE_ERR_CORRUPT,
                "tensor '%s': external data location '%s' must be a relative path inside the "
                "model's directory",
                tname, loc ? loc : "");
        return NULL;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", c->base_dir, loc);
    FILE *f = fopen(path, "rb");
    if (!f) {
        ox_fail(c, TE_ERR_IO, "tensor '%s': cannot open external data '%s': %s", tname, path,
                strerror(errno));
        return NULL;
    }
    uint8_t *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (size < 0 || offset < 0 || (uint64_t)offset > (uint64_t)size ||
        len > (uint64_t)size - (uint64_t)offset) {
        ox_fail(c, TE_ERR_CORRUPT,
                "tensor '%s': external data '%s' holds %ld bytes, not %zu at offset %" PRId64,
                tname, loc, size, len, offset);
    } else if (!(buf = malloc(len ? len : 1))) {
        ox_fail(c, TE_ERR_NOMEM, "out of memory");
    } else if (fseek(f, (long)offset, SEEK_SET) || fread(buf, 1, len, f) != len) {
        ox_fail(c, TE_ERR_IO, "tensor '%s': reading external data '%s' failed", tname, loc);
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

static int typed_count(const Onnx__TensorProto *t, int32_t dt, size_t *n)
{
    switch (dt) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
        *n = t->n_float_data;
        return 1;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
        *n = t->n_double_data;
        return 1;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
        *n = t->n_int64_data;
        return 1;
    default: /* int32, int16, int8, uint8, bool live in int32_data */
        *n = t->n_int32_data;
        return 1;
    }
}

static double typed_elem(const Onnx__TensorProto *t, int32_t dt, size_t i)
{
    switch (dt) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
        return t->float_data[i];
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
        return t->double_data[i];
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
        return (double)t->int64_data[i];
    default:
        return t->int32_data[i];
    }
}

int ox_tensor_value(ox_ctx *c, const Onnx__TensorProto *t, ox_val *v)
{
    const char *tn = t->name && *t->name ? t->name : v->name;
    int is_int;
    int32_t dt = t->data_type;
    int es = elem_size(dt, &is_int);
    if (!es)
        return ox_fail(c, TE_ERR_UNSUPPORTED, "tensor '%s': element type %d is not supported", tn,
                       (int)dt);
    if (t->n_dims > TE_MAX_DIMS)
        return ox_fail(c, TE_ERR_UNSUPPORTED, "tensor '%s': rank %zu is above %d", tn, t->n_dims,
                       TE_MAX_DIMS);
    int64_t numel = 1;
    for (size_t d = 0; d < t->n_dims; d++) {
        if (t->dims[d] < 0 || (t->dims[d] > 0 && numel > OX_MAX_NUMEL / t->dims[d]))
            return ox_fail(c, TE_ERR_CORRUPT, "tensor '%s': dims claim too many elements", tn);
        numel *= t->dims[d];
        v->shape[d] = t->dims[d];
    }
    if (numel == 0)
        return ox_fail(c, TE_ERR_UNSUPPORTED, "tensor '%s': empty tensors are not supported", tn);
    v->ndim = (int)t->n_dims;
    v->numel = numel;
    v->is_int = is_int;
    v->elem = dt;
    size_t bytes = (size_t)numel * (size_t)es;
    const uint8_t *raw = NULL;
    uint8_t *ext = NULL;
    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        const char *loc = NULL;
        int64_t off = 0, len = -1;
        for (size_t i = 0; i < t->n_external_data; i++) {
            const Onnx__StringStringEntryProto *e = t->external_data[i];
            if (!e->key || !e->value)
                continue;
            if (!strcmp(e->key, "location"))
                loc = e->value;
            else if (!strcmp(e->key, "offset"))
                off = strtoll(e->value, NULL, 10);
            else if (!strcmp(e->key, "length"))
                len = strtoll(e->value, NULL, 10);
        }
        if (len >= 0 && (uint64_t)len != bytes)
            return ox_fail(c, TE_ERR_CORRUPT,
                           "tensor '%s': external length %" PRId64 " but dims need %zu bytes", tn,
                           len, bytes);
        if (!(ext = read_external(c, tn, loc, off, bytes)))
            return c->rc;
        raw = ext;
    } else if (t->has_raw_data) {
        if (t->raw_data.len != bytes)
            return ox_fail(c, TE_ERR_CORRUPT,
                           "tensor '%s': raw_data holds %zu bytes but dims need %zu (%" PRId64
                           " elements of %d bytes)",
                           tn, t->raw_data.len, bytes, numel, es);
        raw = t->raw_data.data;
    } else {
        size_t n = 0;
        typed_count(t, dt, &n);
        if (n != (size_t)numel)
            return ox_fail(c, TE_ERR_CORRUPT,
                           "tensor '%s': holds %zu elements but dims need %" PRId64, tn, n, numel);
    }
    free(v->d);
    v->d = malloc((size_t)numel * sizeof *v->d);
    if (!v->d) {
        free(ext);
        return ox_fail(c, TE_ERR_NOMEM, "out of memory");
    }
    for (int64_t i = 0; i < numel; i++)
        v->d[i] = raw ? raw_elem(raw + (size_t)i * (size_t)es, dt) : typed_elem(t, dt, (size_t)i);
    free(ext);
    v->kind = OX_CONST;
    return TE_OK;
}

/* ---- Options and inputs ----------------------------------------------------------------- */

/* The value bound to `key` in options ("k=v,..."), copied to buf; NULL when absent. */
static const char *opt_find(const char *options, const char *key, char *buf, size_t size)
{
    size_t kl = strlen(key);
    for (const char *p = options; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len > kl && strncmp(p, key, kl) == 0 && p[kl] == '=') {
            snprintf(buf, size, "%.*s", (int)(len - kl - 1), p + kl + 1);
            return buf;
        }
        p = e ? e + 1 : p + len;
    }
    return NULL;
}

static int check_options(ox_ctx *c, const char *options)
{
    for (const char *p = options; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq || eq == p || eq == p + len - 1)
            return ox_fail(c, TE_ERR_ARG, "shape option '%.*s': use NAME=N or INPUT=AxBxC",
                           (int)len, p);
        for (const char *q = eq + 1; q < p + len; q++)
            if (!isdigit((unsigned char)*q) && *q != 'x')
                return ox_fail(c, TE_ERR_ARG, "shape option '%.*s': extents are integers", (int)len,
                               p);
        p = e ? e + 1 : p + len;
    }
    return TE_OK;
}

static int add_input(ox_ctx *c, const Onnx__ValueInfoProto *vi, const char *options)
{
    const char *nm = vi->name ? vi->name : "";
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return ox_fail(c, TE_ERR_UNSUPPORTED, "input '%s': only tensor inputs are supported", nm);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    /* float32 data; int64 / int32 indices (Gather), bool masks (Where) and uint8 / int8
     * quantized activations, which the graph holds as i64 / i32 / u8 / i8 (bool as one byte
     * per element, as ONNX stores it). */
    te_dtype dt = ox_elem_dtype(tt->elem_type);
    if (dt == TE_DTYPE_COUNT)
        return ox_fail(c, TE_ERR_UNSUPPORTED,
                       "input '%s': element type %d (float32, int64, int32, uint8, int8 and bool "
                       "inputs are supported)",
                       nm, (int)tt->elem_type);
    int64_t shape[TE_MAX_DIMS];
    int nd = 0;
    char buf[256];
    if (opt_find(options, nm, buf, sizeof buf) && strchr(buf, 'x')) {
        for (char *p = buf; *p && nd < TE_MAX_DIMS;) {
            shape[nd++] = strtoll(p, &p, 10);
            if (*p == 'x')
                p++;
        }
    } else {
        if (!tt->shape)
            return ox_fail(c, TE_ERR_SHAPE, "input '%s' has no shape: give --shape %s=AxBx...", nm,
                           nm);
        if (tt->shape->n_dim < 1 || tt->shape->n_dim > TE_MAX_DIMS)
            return ox_fail(c, TE_ERR_UNSUPPORTED, "input '%s': rank %zu (1..%d supported)", nm,
                           tt->shape->n_dim, TE_MAX_DIMS);
        for (size_t d = 0; d < tt->shape->n_dim; d++) {
            const Onnx__TensorShapeProto__Dimension *dm = tt->shape->dim[d];
            if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
                shape[nd++] = dm->dim_value;
                continue;
            }
            const char *sym = dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
                                  ? dm->dim_param
                                  : "";
            if (!opt_find(options, sym, buf, sizeof buf) || strchr(buf, 'x'))
                return ox_fail(c, TE_ERR_SHAPE,
                               "input '%s' dimension %zu is symbolic ('%s'): bind it with "
                               "--shape %s=N",
                               nm, d, sym, *sym ? sym : nm);
            shape[nd++] = strtoll(buf, NULL, 10);
        }
    }
    int64_t numel = 1;
    for (int d = 0; d < nd; d++) {
        if (shape[d] < 1 || shape[d] > OX_MAX_NUMEL / numel)
            return ox_fail(c, TE_ERR_SHAPE,
                           "input '%s': extent %" PRId64 " on axis %d (at most 2^31 elements)", nm,
                           shape[d], d);
        numel *= shape[d];
    }
    ox_val *v = ox_lookup(c, nm, 1);
    if (!v)
        return c->rc;
    char gname[48];
    ox_graph_name(c, nm, gname, sizeof gname);
    int id = te_graph_input(c->g, gname, dt, nd, shape);
    if (id < 0)
        return ox_fail(c, id, "input '%s': %s", nm, te_graph_errmsg(c->g));
    v->kind = OX_GRAPH;
    v->gv = id;
    return TE_OK;
}

/* A declared static shape (value_info or graph output) must equal the inferred one. */
static int check_declared(ox_ctx *c, const Onnx__ValueInfoProto *vi)
{
    ox_val *v = ox_lookup(c, vi->name, 0);
    if (!v || v->kind == OX_UNDEF || v->kind == OX_CONST || !vi->type ||
        vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !vi->type->tensor_type ||
        !vi->type->tensor_type->shape)
        return TE_OK;
    const Onnx__TensorShapeProto *s = vi->type->tensor_type->shape;
    int nd = te_graph_value_ndim(c->g, v->gv);
    const int64_t *sh = te_graph_value_shape(c->g, v->gv);
    int bad = (int)s->n_dim != nd && !(s->n_dim == 0 && nd == 1 && sh[0] == 1);
    for (size_t d = 0; !bad && d < s->n_dim; d++)
        if (s->dim[d]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
            s->dim[d]->dim_value != sh[d])
            bad = 1;
    if (!bad)
        return TE_OK;
    char have[128] = "", want[128] = "";
    for (int d = 0; d < nd; d++)
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%" PRId64, d ? "," : "",
                 sh[d]);
    for (size_t d = 0; d < s->n_dim; d++) {
        const Onnx__TensorShapeProto__Dimension *dm = s->dim[d];
        if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%" PRId64, d ? "," : "",
                     dm->dim_value);
        else
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s?", d ? "," : "");
    }
    return ox_fail(c, TE_ERR_SHAPE, "shape mismatch: tensor '%s' is declared [%s] but is [%s]",
                   vi->name, want, have);
}

/* ---- The model -------------------------------------------------------------------------- */

static int check_ops(ox_ctx *c, const Onnx__GraphProto *gp)
{
    char list[1024] = "";
    int n = 0;
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *nd = gp->node[i];
        const char *dom = nd->domain ? nd->domain : "";
        const char *op = nd->op_type ? nd->op_type : "";
        if ((!*dom || !strcmp(dom, "ai.onnx")) && ox_op_supported(op))
            continue;
        size_t k = strlen(list);
        if (k < sizeof list - 64)
            snprintf(list + k, sizeof list - k, "%s%s%s%s (node '%s')", n ? ", " : "",
                     *dom ? dom : "", *dom ? "." : "", op, nd->name ? nd->name : "");
        else if (k < sizeof list - 4)
            snprintf(list + k, sizeof list - k, ", ...");
        n++;
    }
    if (n)
        return ox_fail(c, TE_ERR_UNSUPPORTED, "%d unsupported node%s: %s", n, n > 1 ? "s" : "",
                       list);
    return TE_OK;
}

/* Orders the nodes so each comes after the producers of its inputs (ONNX requires it; a model
 * may still lie). order[] receives node indices. */
static int topo_order(ox_ctx *c, const Onnx__GraphProto *gp, size_t *order)
{
    size_t nn = gp->n_node, done = 0;
    char *placed = calloc(nn ? nn : 1, 1);
    if (!placed)
        return ox_fail(c, TE_ERR_NOMEM, "out of memory");
    for (int progress = 1; progress && done < nn;) {
        progress = 0;
        for (size_t i = 0; i < nn; i++) {
            if (placed[i])
                continue;
            const Onnx__NodeProto *nd = gp->node[i];
            int ready = 1;
            for (size_t j = 0; ready && j < nd->n_input; j++) {
                if (!nd->input[j] || !*nd->input[j])
                    continue;
                ox_val *v = ox_lookup(c, nd->input[j], 0);
                if (!v || v->kind == OX_UNDEF)
                    ready = 0;
            }
            if (!ready)
                continue;
            for (size_t j = 0; j < nd->n_output; j++) {
                ox_val *v = nd->output[j] && *nd->output[j] ? ox_lookup(c, nd->output[j], 1) : NULL;
                if (v && v->kind == OX_UNDEF)
                    v->kind = OX_CONST; /* marks "will be defined"; reset below */
            }
            placed[i] = 1;
            order[done++] = i;
            progress = 1;
        }
    }
    int rc = TE_OK;
    if (done < nn) {
        /* Name the first stuck node and its first undefined input. */
        for (size_t i = 0; i < nn && !rc; i++) {
            if (placed[i])
                continue;
            const Onnx__NodeProto *nd = gp->node[i];
            for (size_t j = 0; j < nd->n_input && !rc; j++) {
                if (!nd->input[j] || !*nd->input[j])
                    continue;
                ox_val *v = ox_lookup(c, nd->input[j], 0);
                if (!v || v->kind == OX_UNDEF) {
                    int produced = 0;
                    for (size_t k = 0; k < nn && !produced; k++)
                        for (size_t o = 0; o < gp->node[k]->n_output; o++)
                            if (gp->node[k]->output[o] &&
                                !strcmp(gp->node[k]->output[o], nd->input[j]))
                                produced = 1;
                    rc = produced
                             ? ox_fail(c, TE_ERR_CORRUPT,
                                       "cyclic graph: node '%s' (%s) reads '%s', which depends "
                                       "on the node's own output",
                                       nd->name ? nd->name : "", nd->op_type, nd->input[j])
                             : ox_fail(c, TE_ERR_CORRUPT,
                                       "node '%s' (%s): input '%s' is not defined (no "
                                       "initializer, graph input or node produces it)",
                                       nd->name ? nd->name : "", nd->op_type, nd->input[j]);
                }
            }
        }
    }
    /* Undo the "will be defined" marks. */
    for (size_t i = 0; i < nn; i++)
        for (size_t j = 0; j < gp->node[i]->n_output; j++) {
            ox_val *v = gp->node[i]->output[j] ? ox_lookup(c, gp->node[i]->output[j], 0) : NULL;
            if (v && v->kind == OX_CONST && !v->d)
                v->kind = OX_UNDEF;
        }
    free(placed);
    return rc ? rc : c->rc;
}

static int import_model(ox_ctx *c, const char *options, te_onnx_info *info)
{
    const Onnx__ModelProto *m = c->model;
    const Onnx__GraphProto *gp = m->graph;
    if (!gp)
        return ox_fail(c, TE_ERR_CORRUPT, "not an ONNX model: no graph");
    c->opset = -1;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if (!o->domain || !*o->domain || !strcmp(o->domain, "ai.onnx"))
            c->opset = o->version;
    }
    if (c->opset < 0)
        c->opset = m->has_ir_version && m->ir_version < 3 ? 1 : -1;
    if (c->opset < 7 || c->opset > 21)
        return ox_fail(c, TE_ERR_UNSUPPORTED,
                       "opset %" PRId64 " of the default domain is not supported (7..21)",
                       c->opset);
    if (info) {
        info->ir_version = m->has_ir_version ? m->ir_version : 0;
        info->opset = c->opset;
        info->n_onnx_nodes = (int)gp->n_node;
        snprintf(info->producer, sizeof info->producer, "%s%s%s",
                 m->producer_name ? m->producer_name : "",
                 m->producer_version && *m->producer_version ? " " : "",
                 m->producer_version ? m->producer_version : "");
    }
    if (check_options(c, options) || check_ops(c, gp))
        return c->rc;
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *t = gp->initializer[i];
        if (!t->name || !*t->name)
            return ox_fail(c, TE_ERR_CORRUPT, "initializer %zu has no name", i);
        ox_val *v = ox_lookup(c, t->name, 1);
        if (!v || ox_tensor_value(c, t, v))
            return c->rc;
    }
    for (size_t i = 0; i < gp->n_input; i++) {
        ox_val *v = ox_lookup(c, gp->input[i]->name, 0);
        if (v && v->kind != OX_UNDEF)
            continue; /* an initializer listed as an input (IR < 4): a constant here */
        if (add_input(c, gp->input[i], options))
            return c->rc;
    }
    size_t *order = malloc((gp->n_node ? gp->n_node : 1) * sizeof *order);
    if (!order)
        return ox_fail(c, TE_ERR_NOMEM, "out of memory");
    if (topo_order(c, gp, order) == TE_OK)
        for (size_t i = 0; i < gp->n_node; i++)
            if (ox_convert_node(c, gp->node[order[i]]))
                break;
    free(order);
    if (c->rc)
        return c->rc;
    for (size_t i = 0; i < gp->n_value_info; i++)
        if (check_declared(c, gp->value_info[i]))
            return c->rc;
    if (!gp->n_output)
        return ox_fail(c, TE_ERR_CORRUPT, "the model has no outputs");
    for (size_t i = 0; i < gp->n_output; i++) {
        ox_val *v = ox_lookup(c, gp->output[i]->name, 0);
        if (!v || v->kind == OX_UNDEF)
            return ox_fail(c, TE_ERR_CORRUPT, "output '%s' is not produced by any node",
                           gp->output[i]->name ? gp->output[i]->name : "");
        int id = ox_materialize(c, v);
        if (id < 0)
            return c->rc;
        if (check_declared(c, gp->output[i]))
            return c->rc;
        int rc = te_graph_output(c->g, id);
        if (rc)
            return ox_fail(c, rc, "output '%s': %s", v->name, te_graph_errmsg(c->g));
    }
    int rc = te_graph_dce(c->g, NULL);
    if (rc)
        return ox_fail(c, rc, "%s", te_graph_errmsg(c->g));
    return TE_OK;
}

int te_graph_from_onnx_buffer(const void *data, size_t size, const char *base_dir,
                              const char *label, const char *options, te_graph **out,
                              te_onnx_info *info, char *err, size_t errsize)
{
    ox_ctx c;
    memset(&c, 0, sizeof c);
    c.label = label ? label : "<model>";
    c.base_dir = base_dir;
    c.err = err;
    c.errsize = errsize;
    if (err && errsize)
        err[0] = 0;
    if (info)
        memset(info, 0, sizeof *info);
    if (!out)
        return ox_fail(&c, TE_ERR_ARG, "no place for the graph");
    *out = NULL;
    if (!data || !size)
        return ox_fail(&c, TE_ERR_CORRUPT, "not an ONNX model: the file is empty");
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, size, data);
    if (!m)
        return ox_fail(&c, TE_ERR_CORRUPT,
                       "not an ONNX model: the protobuf does not decode as a ModelProto "
                       "(truncated or another format)");
    c.model = m;
    c.g = te_graph_create();
    if (!c.g)
        ox_fail(&c, TE_ERR_NOMEM, "out of memory");
    else
        import_model(&c, options, info);
    for (int i = 0; i < c.nvals; i++) {
        free(c.vals[i].name);
        free(c.vals[i].d);
    }
    free(c.vals);
    onnx__model_proto__free_unpacked(m, NULL);
    if (c.rc) {
        te_graph_free(c.g);
        return c.rc;
    }
    *out = c.g;
    return TE_OK;
}

int te_graph_from_onnx_ex(const char *path, const char *options, te_graph **out, te_onnx_info *info,
                          char *err, size_t errsize)
{
    if (out)
        *out = NULL;
    if (err && errsize)
        err[0] = 0;
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        if (err && errsize)
            snprintf(err, errsize, "%s: cannot open: %s", path ? path : "(null)", strerror(errno));
        return TE_ERR_IO;
    }
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    uint8_t *buf = NULL;
    int rc = TE_OK;
    if (size < 0 || (unsigned long)size > OX_MAX_FILE || fseek(f, 0, SEEK_SET))
        rc = TE_ERR_IO;
    else if (!(buf = malloc((size_t)size + 1)))
        rc = TE_ERR_NOMEM;
    else if (fread(buf, 1, (size_t)size, f) != (size_t)size)
        rc = TE_ERR_IO;
    fclose(f);
    if (rc) {
        if (err && errsize)
            snprintf(err, errsize, "%s: cannot read the file", path);
        free(buf);
        return rc;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    rc = te_graph_from_onnx_buffer(buf, (size_t)size, dir, path, options, out, info, err, errsize);
    free(buf);
    return rc;
}

int te_graph_from_onnx(const char *path, const char *options, te_graph **out, char *err,
                       size_t errsize)
{
    return te_graph_from_onnx_ex(path, options, out, NULL, err, errsize);
}
