/* User operators (te_graph_op_register): a process-wide table of operators whose tensor
 * expression a callback builds. Each entry is a te__gop like the library's (graph/ops.c), so
 * graphs, the text form, fusion, group kernels and tuning use them without knowing; its apply
 * function merges the node's attributes with the declared defaults and calls the callback. */
#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>

#include "graph/graph_internal.h"

typedef struct guser {
    te__gop op; /* first: apply receives &op and finds the entry */
    char name[40];
    char inputs[96];
    char attrs[TE__G_ATTRS];
    te_graph_op_build_fn build;
    void *user;
} guser;

static guser users[TE_GRAPH_MAX_USER_OPS];
static int n_users; /* entries below n_users are complete and never change */
static pthread_mutex_t users_lock = PTHREAD_MUTEX_INITIALIZER;

static int user_apply(te_ctx *ctx, const te__gop *op, const te_op_params *kv, int n_in,
                      te_tensor *const *in, const char *const *names, te_tensor **out)
{
    const guser *u = (const guser *)op;
    te_op_params all;
    int rc = te_op_params_parse(ctx, u->attrs, &all);
    for (int i = 0; !rc && i < kv->n; i++) {
        int j = 0;
        while (j < all.n && strcmp(all.p[j].key, kv->p[i].key) != 0)
            j++;
        all.p[j] = kv->p[i]; /* j < all.n: te__gop_check_attrs accepted only declared keys */
        if (j == all.n)
            all.n++;
    }
    all.dtype = kv->dtype;
    if (rc)
        return rc;
    out[0] = NULL;
    rc = u->build(ctx, n_in, in, &all, names[0], out, u->user);
    if (!rc && !out[0])
        rc = te_ctx_errcode(ctx)
                 ? te_ctx_errcode(ctx)
                 : te_ctx_set_error(ctx, TE_ERR_INTERNAL, "%s: the callback returned no tensor",
                                    op->name);
    return rc;
}

int te__gop_is_user(const te__gop *op) { return op && op->apply == user_apply; }

static const te__gop *find_user(const char *name)
{
    pthread_mutex_lock(&users_lock);
    int n = n_users;
    pthread_mutex_unlock(&users_lock);
    for (int i = 0; i < n; i++)
        if (strcmp(users[i].name, name) == 0)
            return &users[i].op;
    return NULL;
}

static int op_register(const te_graph_user_op *op, int from_registry, char *err, size_t errsize);

/* An operator of te_op_register (include/tessera/ops.h) becomes a user operator the first time a
 * graph names it: its inputs, its attributes (the keys that are no input dimension) and the
 * same build function. */
static const te__gop *adopt_registered(const char *name)
{
    const te_op_info *info = te_op_lookup(name);
    if (!info || !info->def)
        return NULL;
    te_op_kind kind = TE_KIND_OPAQUE;
    if (te_op_kind_parse(info->def->kind, &kind) != TE_OK)
        kind = TE_KIND_OPAQUE;
    te_graph_user_op op = {.name = info->name,
                           .kind = kind,
                           .min_in = info->n_in,
                           .max_in = info->n_in,
                           .inputs = info->inputs,
                           .attrs = info->attrs,
                           .flop_per_elem = info->def->flop_per_elem,
                           .build = info->def->build,
                           .user = info->def->user};
    (void)op_register(&op, 1, NULL, 0); /* another thread may have adopted it first */
    return find_user(name);
}

const te__gop *te__guser_find(const char *name)
{
    if (!name)
        return NULL;
    const te__gop *u = find_user(name);
    return u ? u : adopt_registered(name);
}

static int fail(char *err, size_t errsize, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errsize, int code, const char *fmt, ...)
{
    if (err && errsize) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errsize, fmt, ap);
        va_end(ap);
    }
    return code;
}

int te_graph_op_register(const te_graph_user_op *op, char *err, size_t errsize)
{
    return op_register(op, 0, err, errsize);
}

static int op_register(const te_graph_user_op *op, int from_registry, char *err, size_t errsize)
{
    if (err && errsize)
        err[0] = 0;
    if (!op)
        return fail(err, errsize, TE_ERR_ARG, "te_graph_op_register: no operator");
    const char *nm = op->name ? op->name : "";
    size_t len = strlen(nm);
    int ok =
        len > 0 && len < sizeof users[0].name && (isalpha((unsigned char)nm[0]) || nm[0] == '_');
    for (size_t i = 0; ok && i < len; i++)
        ok = isalnum((unsigned char)nm[i]) || nm[i] == '_';
    if (!ok)
        return fail(err, errsize, TE_ERR_ARG,
                    "user operator '%s': the name must be a C identifier of 1..%d characters", nm,
                    (int)sizeof users[0].name - 1);
    if (!op->build)
        return fail(err, errsize, TE_ERR_ARG, "user operator '%s': no build callback", nm);
    if ((unsigned)op->kind >= TE_KIND_COUNT)
        return fail(err, errsize, TE_ERR_ARG,
                    "user operator '%s': pattern kind %d is not a "
                    "te_op_kind",
                    nm, (int)op->kind);
    if (op->min_in < 1 || op->max_in < op->min_in || op->max_in > TE__G_MAXIO)
        return fail(err, errsize, TE_ERR_ARG,
                    "user operator '%s': inputs %d..%d (need 1 <= min_in <= max_in <= %d)", nm,
                    op->min_in, op->max_in, TE__G_MAXIO);
    const char *attrs = op->attrs ? op->attrs : "";
    if (strlen(attrs) >= sizeof users[0].attrs)
        return fail(err, errsize, TE_ERR_ARG, "user operator '%s': attributes too long", nm);
    if (op->inputs && strlen(op->inputs) >= sizeof users[0].inputs)
        return fail(err, errsize, TE_ERR_ARG, "user operator '%s': input names too long", nm);
    te_ctx *ctx = te_ctx_create();
    if (!ctx)
        return fail(err, errsize, TE_ERR_NOMEM, "out of memory");
    te_op_params kv;
    int rc = te_op_params_parse(ctx, attrs, &kv);
    if (rc)
        fail(err, errsize, TE_ERR_ARG, "user operator '%s': attributes '%s': %s", nm, attrs,
             te_ctx_errmsg(ctx));
    te_ctx_free(ctx);
    if (rc)
        return TE_ERR_ARG;
    /* Library, user or registered (te_op_register); locks by itself. An operator adopted from
     * the registry is checked against the graph's own operators only. */
    int taken = from_registry ? find_user(nm) != NULL || te__gop_find_library(nm) != NULL
                              : te__gop_find(nm) != NULL;
    pthread_mutex_lock(&users_lock);
    for (int i = 0; i < n_users; i++)
        taken |= strcmp(users[i].name, nm) == 0;
    if (taken)
        rc = fail(err, errsize, TE_ERR_ARG, "user operator '%s': the name is taken", nm);
    else if (n_users == TE_GRAPH_MAX_USER_OPS)
        rc = fail(err, errsize, TE_ERR_OVERFLOW, "user operator '%s': %d are registered already",
                  nm, TE_GRAPH_MAX_USER_OPS);
    if (!rc) {
        guser *u = &users[n_users];
        memset(u, 0, sizeof *u);
        snprintf(u->name, sizeof u->name, "%s", nm);
        snprintf(u->attrs, sizeof u->attrs, "%s", attrs);
        if (op->inputs)
            snprintf(u->inputs, sizeof u->inputs, "%s", op->inputs);
        else
            for (int i = 0; i < op->max_in; i++)
                snprintf(u->inputs + strlen(u->inputs), sizeof u->inputs - strlen(u->inputs),
                         "%sX%d", i ? "," : "", i + 1);
        u->build = op->build;
        u->user = op->user;
        u->op.name = u->name;
        u->op.kind = op->kind;
        u->op.min_in = op->min_in;
        u->op.max_in = op->max_in;
        u->op.n_out = 1;
        u->op.inputs = u->inputs;
        u->op.attrs = u->attrs;
        u->op.flop_per_elem = op->flop_per_elem > 0 ? op->flop_per_elem : 1;
        u->op.apply = user_apply;
        n_users++; /* published last, under the lock */
    }
    pthread_mutex_unlock(&users_lock);
    return rc;
}
