/*
 * autotune/tasks.c: the tuner and its task set. Creating and freeing a tuner, adding tasks
 * (library operators with their parameters, user-defined expressions, JSON task lists with
 * sharding by the hash of the workload key), and what a caller reads back about them
 * (te_tuner_task_info). The job that tunes them is tuner.c.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/tune_impl.h"
#include "te/internal.h"
#include "tessera/ops.h"
#include "tuning_db/json.h"

/* ---- The tuner ----------------------------------------------------------------------------- */

int te__tuner_err(te_tuner *t, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof t->err, fmt, ap);
    va_end(ap);
    return code;
}

void te__tuner_warn(const te_tuner *t, const char *fmt, ...)
{
    if (t->o.quiet || !t->o.on_warning)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    t->o.on_warning(msg, t->o.user);
}

te_tuner *te_tuner_create(te_db *db, const te_tune_options *opts)
{
    te_tuner *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->db = db;
    t->o = opts ? *opts : te_tune_options_default();
    if (t->o.batch_size <= 0)
        t->o.batch_size = 16;
    if (t->o.batch_size > 256)
        t->o.batch_size = 256;
    t->target = t->o.target ? *t->o.target : te_target_host();
    t->o.target = NULL;
    return t;
}

void te_tuner_free(te_tuner *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->ntasks; i++) {
        te__task *k = &t->tasks[i];
        te__task_release(k);
        free(k->op);
        free(k->params);
        free(k->key);
        free(k->shapes_json);
        free(k->best_trace);
    }
    free(t->tasks);
    free(t);
}

const char *te_tuner_errmsg(const te_tuner *t) { return t ? t->err : "out of memory"; }
int te_tuner_ntasks(const te_tuner *t) { return t ? t->ntasks : 0; }
int te_tuner_interrupted(const te_tuner *t) { return t ? t->interrupted : 0; }
int64_t te_tuner_job_id(const te_tuner *t, int *resumed)
{
    if (resumed)
        *resumed = t ? t->resumed : 0;
    return t ? t->job_id : 0;
}

/* ---- Adding tasks -------------------------------------------------------------------------- */

static te__task *new_task(te_tuner *t)
{
    if (t->ntasks == t->cap) {
        int cap = t->cap ? 2 * t->cap : 8;
        te__task *v = realloc(t->tasks, sizeof *v * (size_t)cap);
        if (!v)
            return NULL;
        t->tasks = v;
        t->cap = cap;
    }
    te__task *k = &t->tasks[t->ntasks];
    memset(k, 0, sizeof *k);
    k->tu = t;
    k->index = t->ntasks;
    k->best_s = k->db_best_s = INFINITY;
    k->best_median_s = k->best_gflops = NAN;
    for (int i = 0; i < 4; i++)
        k->hist_best[i] = INFINITY;
    return k;
}

/* {"A":[512,256],...}: the placeholders' shapes, for the workloads table. */
static char *shapes_json(int n_in, te_tensor *const *ins, const te_op_params *kv)
{
    char buf[2048];
    size_t len = 0;
    len += (size_t)snprintf(buf + len, sizeof buf - len, "{");
    if (kv) {
        for (int i = 0; i < kv->n && len < sizeof buf; i++) {
            if (kv->p[i].is_int)
                len += (size_t)snprintf(buf + len, sizeof buf - len, "%s\"%s\":%lld", i ? "," : "",
                                        kv->p[i].key, (long long)kv->p[i].ival);
            else
                len += (size_t)snprintf(buf + len, sizeof buf - len, "%s\"%s\":\"%s\"",
                                        i ? "," : "", kv->p[i].key, kv->p[i].val);
        }
    } else {
        for (int i = 0; i < n_in && len < sizeof buf; i++) {
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s\"%s\":[", i ? "," : "",
                                    ins[i]->name);
            for (int d = 0; d < ins[i]->ndim && len < sizeof buf; d++)
                len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%lld", d ? "," : "",
                                        (long long)ins[i]->shape[d]);
            if (len < sizeof buf)
                len += (size_t)snprintf(buf + len, sizeof buf - len, "]");
        }
    }
    if (len < sizeof buf)
        snprintf(buf + len, sizeof buf - len, "}");
    if (len + 2 >= sizeof buf)
        return strdup("{}");
    return strdup(buf);
}

int te_tuner_add_op(te_tuner *t, const char *op, const char *params, double weight)
{
    if (!t)
        return TE_ERR_ARG;
    if (!op || !*op)
        return te__tuner_err(t, TE_ERR_ARG, "an operator name is required");
    const te_op_info *info = te_op_lookup(op);
    if (!info)
        return te__tuner_err(t, TE_ERR_NOT_FOUND, "unknown operator '%s' (see `tessera ops`)", op);
    te_ctx *ctx = te_ctx_create();
    if (!ctx)
        return te__tuner_err(t, TE_ERR_NOMEM, "out of memory");
    te_op_params kv;
    char key[1024];
    int rc = te_op_params_parse(ctx, params ? params : "", &kv);
    int len = rc == TE_OK ? te_op_workload_key(ctx, info, &kv, key, sizeof key) : rc;
    te_tensor *ins[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
    int n_in = 0, n_out = 0;
    if (len >= 0 && (size_t)len >= sizeof key)
        len = TE_ERR_OVERFLOW;
    if (len >= 0)
        len = te_op_info_build(ctx, info, &kv, ins, &n_in, outs, &n_out);
    if (len < 0) {
        te__tuner_err(t, len, "%s",
                      te_ctx_errmsg(ctx)[0] ? te_ctx_errmsg(ctx) : te_status_str(len));
        te_ctx_free(ctx);
        return len;
    }
    for (int i = 0; i < t->ntasks; i++)
        if (!strcmp(t->tasks[i].key, key)) {
            te_ctx_free(ctx);
            return te__tuner_err(t, TE_ERR_ARG, "workload '%s' is listed twice", key);
        }
    te__task *k = new_task(t);
    if (!k) {
        te_ctx_free(ctx);
        return te__tuner_err(t, TE_ERR_NOMEM, "out of memory");
    }
    k->op = strdup(op);
    k->params = strdup(params ? params : "");
    k->key = strdup(key);
    k->shapes_json = shapes_json(0, NULL, &kv);
    k->weight = weight > 0 ? weight : 1;
    k->flops = te_tuner_flops(n_out, outs);
    snprintf(k->expr_hash, sizeof k->expr_hash, "%016llx",
             (unsigned long long)te_tuner_expr_hash(n_out, outs));
    te_ctx_free(ctx);
    if (!k->op || !k->params || !k->key || !k->shapes_json)
        return te__tuner_err(t, TE_ERR_NOMEM, "out of memory");
    t->ntasks++;
    return TE_OK;
}

int te_tuner_add_expr(te_tuner *t, const char *name, int n_in, te_tensor *const *ins, int n_out,
                      te_tensor *const *outs, double weight)
{
    if (!t)
        return TE_ERR_ARG;
    if (!name || !*name || n_out < 1 || n_in < 0 || n_in + n_out > TE__TUNE_MAX_IO || !outs ||
        (n_in && !ins))
        return te__tuner_err(t, TE_ERR_ARG,
                             "te_tuner_add_expr: a name, 1..%d outputs and at most %d "
                             "arguments in all are required",
                             TE__TUNE_MAX_IO, TE__TUNE_MAX_IO);
    for (int i = 0; i < n_in + n_out; i++) {
        te_tensor *x = i < n_in ? ins[i] : outs[i - n_in];
        if (!x)
            return te__tuner_err(t, TE_ERR_ARG, "te_tuner_add_expr: tensor %d is NULL", i);
        if ((i < n_in) != (te_tensor_is_placeholder(x) != 0))
            return te__tuner_err(t, TE_ERR_ARG, "te_tuner_add_expr: '%s' must be %s", x->name,
                                 i < n_in ? "a placeholder" : "a computed tensor");
    }
    char key[1024];
    int len = te_tuner_expr_key(name, n_in, ins, n_out, outs, key, sizeof key);
    if (len < 0 || (size_t)len >= sizeof key)
        return te__tuner_err(t, TE_ERR_ARG, "te_tuner_add_expr: cannot make a key for '%s'", name);
    te__task *k = new_task(t);
    if (!k)
        return te__tuner_err(t, TE_ERR_NOMEM, "out of memory");
    k->op = strdup(name);
    k->is_expr = 1;
    for (int i = 0; i < n_in; i++)
        k->u_ins[i] = ins[i];
    for (int i = 0; i < n_out; i++)
        k->u_outs[i] = outs[i];
    k->n_in = n_in;
    k->n_out = n_out;
    k->key = strdup(key);
    k->shapes_json = shapes_json(n_in, ins, NULL);
    k->weight = weight > 0 ? weight : 1;
    k->flops = te_tuner_flops(n_out, outs);
    snprintf(k->expr_hash, sizeof k->expr_hash, "%016llx",
             (unsigned long long)te_tuner_expr_hash(n_out, outs));
    if (!k->op || !k->key || !k->shapes_json)
        return te__tuner_err(t, TE_ERR_NOMEM, "out of memory");
    t->ntasks++;
    return TE_OK;
}

int te_tuner_key_add_cold(char *buf, size_t size, uint32_t mask)
{
    if (!buf || !size)
        return TE_ERR_ARG;
    size_t len = strlen(buf);
    if (!mask)
        return (int)len;
    int first = 1;
    len += (size_t)snprintf(buf + len, len < size ? size - len : 0, ";cold=");
    for (int i = 0; i < 32; i++)
        if (mask & (1u << i)) {
            len += (size_t)snprintf(buf + len, len < size ? size - len : 0, "%s%d",
                                    first ? "" : ".", i);
            first = 0;
        }
    return (int)len;
}

int te_tuner_set_cold_inputs(te_tuner *t, uint32_t mask)
{
    if (!t)
        return TE_ERR_ARG;
    if (!t->ntasks)
        return te__tuner_err(t, TE_ERR_ARG, "te_tuner_set_cold_inputs: no task added yet");
    te__task *k = &t->tasks[t->ntasks - 1];
    int n_in = k->is_expr ? k->n_in : TE__TUNE_MAX_IO;
    if (k->cold_mask || (n_in < 32 && (mask >> n_in)))
        return te__tuner_err(
            t, TE_ERR_ARG, "te_tuner_set_cold_inputs: task '%s' has %d inputs (mask 0x%x)%s",
            k->key, n_in, (unsigned)mask, k->cold_mask ? "; its cold inputs are already set" : "");
    char key[1100];
    snprintf(key, sizeof key, "%s", k->key);
    int len = te_tuner_key_add_cold(key, sizeof key, mask);
    char *nk = len >= 0 && (size_t)len < sizeof key ? strdup(key) : NULL;
    if (!nk)
        return te__tuner_err(t, TE_ERR_NOMEM,
                             "te_tuner_set_cold_inputs: key too long or out of memory");
    free(k->key);
    k->key = nk;
    k->cold_mask = mask;
    return TE_OK;
}

/* ---- Shards ------------------------------------------------------------------------------- */

uint64_t te_tuner_shard_hash(const char *workload_key)
{
    /* FNV-1a, 64 bits, over the key's bytes: the constants are part of the contract (shards of
     * one task list must agree on every machine and in every version), so they are spelled out
     * here rather than shared with the other hashes of the library. */
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)(workload_key ? workload_key : ""); *p;
         p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}

int te_tuner_shard_of(const char *workload_key, int shard_n)
{
    if (!workload_key || shard_n < 1)
        return TE_ERR_ARG;
    return (int)(te_tuner_shard_hash(workload_key) % (uint64_t)shard_n);
}

int te_tuner_add_tasks_file(te_tuner *t, const char *path, int shard_i, int shard_n, int *n_added)
{
    if (n_added)
        *n_added = 0;
    if (!t || !path)
        return TE_ERR_ARG;
    if (shard_n > 1 && (shard_i < 0 || shard_i >= shard_n))
        return te__tuner_err(t, TE_ERR_ARG, "shard %d/%d: the index must be in [0, %d)", shard_i,
                             shard_n, shard_n);
    FILE *f = fopen(path, "rb");
    if (!f)
        return te__tuner_err(t, TE_ERR_IO, "cannot read task list '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t k; buf && (k = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += k;
        if (n == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                buf = NULL;
            } else {
                buf = b;
            }
        }
    }
    fclose(f);
    if (!buf)
        return te__tuner_err(t, TE_ERR_NOMEM, "out of memory");
    te__json_doc doc;
    memset(&doc, 0, sizeof doc);
    te__json *root = te__json_parse(&doc, buf, n);
    int rc = TE_OK, added = 0, idx = 0;
    /* Every entry goes into a scratch tuner first: it makes the workload key the shard is
     * chosen by, checks the entry and finds duplicates across the whole list, so that every
     * shard refuses the same lists. Only the entries of this shard go into t, which also
     * refuses the tasks it held before. */
    te_tune_options so = t->o;
    so.target = &t->target;
    te_tuner *all = te_tuner_create(NULL, &so);
    if (!all)
        rc = te__tuner_err(t, TE_ERR_NOMEM, "out of memory");
    else if (!root)
        rc = te__tuner_err(t, TE_ERR_ARG, "task list '%s': %s", path, doc.err);
    else if (root->type != TE__JSON_ARRAY)
        rc = te__tuner_err(t, TE_ERR_ARG, "task list '%s': expected a JSON array of tasks", path);
    for (te__json *e = rc == TE_OK ? root->first : NULL; e && rc == TE_OK; e = e->next, idx++) {
        te__json *op = e->type == TE__JSON_OBJECT ? te__json_member(e, "op") : NULL;
        te__json *sh = e->type == TE__JSON_OBJECT ? te__json_member(e, "shape") : NULL;
        te__json *w = e->type == TE__JSON_OBJECT ? te__json_member(e, "weight") : NULL;
        if (!sh && e->type == TE__JSON_OBJECT)
            sh = te__json_member(e, "params");
        if (!op || op->type != TE__JSON_STRING || (sh && sh->type != TE__JSON_STRING) ||
            (w && (w->type != TE__JSON_NUMBER || !(w->num >= 0)))) {
            rc = te__tuner_err(t, TE_ERR_ARG,
                               "task list '%s': task %d must be an object {\"op\": NAME, "
                               "\"shape\": \"KEY=VAL,...\", \"weight\": N (optional)}",
                               path, idx);
            break;
        }
        te_tuner *into = all;
        int r = te_tuner_add_op(all, op->str, sh ? sh->str : "", w ? w->num : 1);
        if (r == TE_OK && (shard_n <= 1 || te_tuner_shard_of(all->tasks[all->ntasks - 1].key,
                                                             shard_n) == shard_i)) {
            into = t;
            r = te_tuner_add_op(t, op->str, sh ? sh->str : "", w ? w->num : 1);
            added += r == TE_OK;
        }
        if (r != TE_OK) {
            char msg[1600];
            memcpy(msg, into->err, sizeof msg - 1);
            msg[sizeof msg - 1] = 0;
            rc = te__tuner_err(t, r == TE_ERR_NOMEM ? r : TE_ERR_ARG, "task list '%s': task %d: %s",
                               path, idx, msg);
        }
    }
    te_tuner_free(all);
    te__json_doc_free(&doc);
    free(buf);
    if (n_added)
        *n_added = added;
    return rc;
}

/* ---- Reading them back --------------------------------------------------------------------- */

int te_tuner_task_info(te_tuner *t, int i, te_tune_task_info *out)
{
    if (!t || !out || i < 0 || i >= t->ntasks)
        return TE_ERR_ARG;
    te__task *k = &t->tasks[i];
    memset(out, 0, sizeof *out);
    out->op = k->op;
    out->workload_key = k->key;
    out->target_key = t->target_key;
    out->flops = k->flops;
    out->trials = k->trials;
    memcpy(out->n_by_status, k->n_by_status, sizeof out->n_by_status);
    out->skipped = k->skipped;
    out->best_trace = k->best_trace;
    out->best_median_s = k->best_median_s;
    out->best_gflops = k->best_gflops;
    out->space_kind = k->space_kind;
    out->stop_reason = k->stop_reason;
    return TE_OK;
}
