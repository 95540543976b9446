/* Readable printing of expressions, tensors and lowered statements. */
#include <string.h>

#include "te/internal.h"

const char *te__binop_name(te_binop op);

static const char *reduce_name(te_reduce_kind k)
{
    static const char *names[] = {"sum", "max", "min", "prod", "custom"};
    return (unsigned)k <= TE_RCUSTOM ? names[k] : "?";
}

static void print_list(te_expr *const *v, int n, FILE *f)
{
    for (int i = 0; i < n; i++) {
        if (i)
            fputs(", ", f);
        te_expr_print(v[i], f);
    }
}

void te_expr_print(const te_expr *e, FILE *f)
{
    if (!e) {
        fputs("<null>", f);
        return;
    }
    switch (e->kind) {
    case TE_E_INT:
        fprintf(f, "%lld", (long long)e->u.i);
        break;
    case TE_E_FLOAT:
        fprintf(f, "%.9g%s", e->u.f, e->dtype == TE_F32 ? "f" : "");
        break;
    case TE_E_VAR:
        fputs(e->u.var.name, f);
        break;
    case TE_E_BINARY: {
        te_binop op = e->u.bin.op;
        if (op == TE_MIN || op == TE_MAX || op == TE_FLOORDIV || op == TE_FLOORMOD) {
            fprintf(f, "%s(", te__binop_name(op));
            te_expr_print(e->u.bin.a, f);
            fputs(", ", f);
            te_expr_print(e->u.bin.b, f);
            fputc(')', f);
        } else {
            fputc('(', f);
            te_expr_print(e->u.bin.a, f);
            fprintf(f, " %s ", te__binop_name(op));
            te_expr_print(e->u.bin.b, f);
            fputc(')', f);
        }
        break;
    }
    case TE_E_NOT:
        fputc('!', f);
        te_expr_print(e->u.un.a, f);
        break;
    case TE_E_NEG:
        fputs("-", f);
        te_expr_print(e->u.un.a, f);
        break;
    case TE_E_SELECT:
    case TE_E_IF:
        fputs(e->kind == TE_E_SELECT ? "select(" : "if_then_else(", f);
        te_expr_print(e->u.sel.c, f);
        fputs(", ", f);
        te_expr_print(e->u.sel.t, f);
        fputs(", ", f);
        te_expr_print(e->u.sel.f, f);
        fputc(')', f);
        break;
    case TE_E_CAST:
        fprintf(f, "%s(", te_dtype_str(e->dtype));
        te_expr_print(e->u.un.a, f);
        fputc(')', f);
        break;
    case TE_E_CALL:
        fprintf(f, "%s(", te_intrin_name(e->u.call.fn));
        print_list(e->u.call.args, e->u.call.n, f);
        fputc(')', f);
        break;
    case TE_E_READ:
        fprintf(f, "%s[", e->u.read.t->name);
        print_list(e->u.read.idx, e->u.read.n, f);
        fputc(']', f);
        break;
    case TE_E_LOAD:
        fprintf(f, "%s[", e->u.load.buf->name);
        print_list(e->u.load.idx, e->u.load.n, f);
        fputc(']', f);
        break;
    case TE_E_REDUCE:
        fprintf(f, "%s(", e->u.red.custom ? e->u.red.custom->name : reduce_name(e->u.red.rkind));
        if (e->u.red.nsrc > 0) {
            /* A tuple reduction: "argmax((A[i, k], k), axis=[k]).1" names component 1. */
            fputc('(', f);
            print_list(e->u.red.srcs, e->u.red.nsrc, f);
            fputs("), axis=[", f);
            print_list(e->u.red.axes, e->u.red.n, f);
            fputs("])", f);
            if (e->u.red.comp >= 0)
                fprintf(f, ".%d", e->u.red.comp);
            break;
        }
        te_expr_print(e->u.red.src, f);
        fputs(", axis=[", f);
        print_list(e->u.red.axes, e->u.red.n, f);
        fputs("])", f);
        break;
    case TE_E_RAMP:
        fputs("ramp(", f);
        te_expr_print(e->u.ramp.base, f);
        fprintf(f, ", %lld, %d)", (long long)e->u.ramp.stride, e->lanes);
        break;
    case TE_E_BCAST:
        fputs("x", f);
        fprintf(f, "%d(", e->lanes);
        te_expr_print(e->u.un.a, f);
        fputc(')', f);
        break;
    }
}

void te_tensor_print(const te_tensor *t, FILE *f)
{
    if (!t)
        return;
    if (t->kind == TE_T_PLACEHOLDER) {
        fprintf(f, "%s = placeholder(%s, [", t->name, te_dtype_str(t->dtype));
        for (int d = 0; d < t->ndim; d++)
            fprintf(f, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        fputs("])\n", f);
        return;
    }
    fprintf(f, "%s[", t->name);
    print_list(t->axes, t->ndim, f);
    fputs("] = ", f);
    te_expr_print(t->body, f);
    fputc('\n', f);
}

static const char *for_kind_name(te_for_kind k)
{
    static const char *names[] = {"for", "parallel", "vectorized", "unrolled", "thread", "vthread"};
    return names[k];
}

static const char *scope_name(te_scope s)
{
    static const char *names[] = {"global", "local", "shared"};
    return names[s];
}

void te__stmt_print(const te_stmt *s, FILE *f, int indent)
{
    if (!s)
        return;
    switch (s->kind) {
    case TE_S_FOR:
        fprintf(f, "%*s%s", indent, "", for_kind_name(s->u.loop.fkind));
        if (s->u.loop.fkind == TE_FOR_THREAD && s->u.loop.thread_tag >= 0 &&
            s->u.loop.thread_tag < 6) {
            static const char *tags[] = {"blockIdx.x",  "blockIdx.y",  "blockIdx.z",
                                         "threadIdx.x", "threadIdx.y", "threadIdx.z"};
            fprintf(f, " %s", tags[s->u.loop.thread_tag]);
        }
        if (s->u.loop.xreduce)
            fprintf(f, " reduce-into %s", s->u.loop.xreduce->buf->name);
        fprintf(f, " (%s, ", s->u.loop.var->u.var.name);
        te_expr_print(s->u.loop.min, f);
        fputs(", ", f);
        te_expr_print(s->u.loop.extent, f);
        fputs(") {\n", f);
        te__stmt_print(s->u.loop.body, f, indent + 2);
        fprintf(f, "%*s}\n", indent, "");
        break;
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            te__stmt_print(s->u.seq.v[i], f, indent);
        break;
    case TE_S_IF:
        fprintf(f, "%*sif (", indent, "");
        te_expr_print(s->u.cond.cond, f);
        fputs(") {\n", f);
        te__stmt_print(s->u.cond.then_s, f, indent + 2);
        if (s->u.cond.else_s) {
            fprintf(f, "%*s} else {\n", indent, "");
            te__stmt_print(s->u.cond.else_s, f, indent + 2);
        }
        fprintf(f, "%*s}\n", indent, "");
        break;
    case TE_S_STORE:
        fprintf(f, "%*s%s[", indent, "", s->u.store.buf->name);
        print_list(s->u.store.idx, s->u.store.n, f);
        fputs("] = ", f);
        te_expr_print(s->u.store.value, f);
        fputs(s->u.store.nontemporal ? "  // streaming\n" : "\n", f);
        break;
    case TE_S_ALLOC:
        fprintf(f, "%*sallocate %s[%s", indent, "", s->u.alloc.buf->name,
                te_dtype_str(s->u.alloc.buf->dtype));
        for (int d = 0; d < s->u.alloc.buf->ndim; d++)
            fprintf(f, " x %lld", (long long)s->u.alloc.buf->shape[d]);
        fprintf(f, "], %s", scope_name(s->u.alloc.buf->scope));
        if (s->u.alloc.promote && s->u.alloc.promote->lanes)
            fprintf(f, ", registers (vectors of %d)", s->u.alloc.promote->lanes);
        else if (s->u.alloc.promote)
            fprintf(f, ", registers (scalars)");
        fputc('\n', f);
        te__stmt_print(s->u.alloc.body, f, indent);
        break;
    case TE_S_BARRIER:
        fprintf(f, "%*sbarrier()\n", indent, "");
        break;
    case TE_S_LET:
        if (s->u.let.var->u.var.vkind == TE_VAR_PREFETCH && s->u.let.var->u.var.extent > 1)
            fprintf(f, "%*sprefetch(L%lld) ", indent, "", (long long)s->u.let.var->u.var.extent);
        else if (s->u.let.var->u.var.vkind == TE_VAR_PREFETCH)
            fprintf(f, "%*sprefetch ", indent, "");
        else
            fprintf(f, "%*slet %s = ", indent, "", s->u.let.var->u.var.name);
        te_expr_print(s->u.let.value, f);
        fputc('\n', f);
        te__stmt_print(s->u.let.body, f, indent);
        break;
    case TE_S_COMMENT:
        fprintf(f, "%*s// %s\n", indent, "", s->u.comment.text);
        break;
    case TE_S_INTRIN:
        fprintf(f, "%*s%s%s(", indent, "", s->u.intrin.name,
                s->u.intrin.overwrite ? "[overwrite]" : "");
        for (int o = 0; o < s->u.intrin.nops; o++) {
            fputs(o ? ", &" : "&", f);
            te_expr_print(s->u.intrin.addr[o], f);
        }
        if (s->u.intrin.n >= 0)
            fprintf(f, ", n=%lld", (long long)s->u.intrin.n);
        fputs(")\n", f);
        break;
    }
}
