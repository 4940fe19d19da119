#include "kp/frame_name.h"

#include <stdint.h>
#include <string.h>

/* Elixir 1.14's rules, from lib/elixir/lib/macro.ex (inspect_atom/2,
 * inner_classify/1), lib/elixir/lib/code/identifier.ex (unary_op/1,
 * binary_op/1, extract_anonymous_fun_parent/1, escape/2) and
 * lib/elixir/lib/exception.ex (format_mfa/3). */

typedef struct {
    const char *s;
    size_t len;
} text;

static int is_text(text t, const char *word)
{
    return t.len == strlen(word) && memcmp(t.s, word, t.len) == 0;
}

static int in_list(text t, const char *const *words)
{
    for (; *words; words++)
        if (is_text(t, *words))
            return 1;
    return 0;
}

/* The callable operators, unary and binary, and the quoted operators (::
 * ^^^ ~~~ <|>): all written bare after the dot. Not "//", nor the special
 * forms (.. . -> %{} ...): those are quoted. */
static int is_operator(text t)
{
    static const char *const ops[] = {
        "&",   "!",  "^",   "not", "+",   "-",   "~~~", "@",  "<-",  "\\\\", "when", "::",  "|",
        "=",   "||", "|||", "or",  "&&",  "&&&", "and", "==", "!=",  "=~",   "===",  "!==", "<",
        "<=",  ">=", ">",   "|>",  "<<<", ">>>", "<~",  "~>", "<<~", "~>>",  "<~>",  "<|>", "in",
        "^^^", "++", "--",  "<>",  "+++", "---", "*",   "/",  "**",  NULL};
    return in_list(t, ops);
}

static int ident_start(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || c == '_' || c >= 0x80;
}

static int ident_char(unsigned char c)
{
    return ident_start(c) || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* A name Elixir calls as a local function: foo, _bar, baz?, qux! */
static int is_identifier(text t)
{
    const unsigned char *s = (const unsigned char *)t.s;
    size_t n = t.len;
    if (n && (s[n - 1] == '?' || s[n - 1] == '!'))
        n--;
    if (n == 0 || !ident_start(s[0]))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!ident_char(s[i]))
            return 0;
    return 1;
}

/* Elixir.Foo, Elixir.Foo.Bar_2: "Elixir" then pieces ".[A-Z][A-Za-z0-9_]*". */
static int is_alias(text t)
{
    if (t.len < 6 || memcmp(t.s, "Elixir", 6) != 0)
        return 0;
    size_t i = 6;
    while (i < t.len) {
        if (t.s[i] != '.' || i + 1 >= t.len || t.s[i + 1] < 'A' || t.s[i + 1] > 'Z')
            return 0;
        for (i += 2; i < t.len && t.s[i] != '.'; i++)
            if (!ident_char((unsigned char)t.s[i]) || (unsigned char)t.s[i] >= 0x80)
                return 0;
    }
    return 1;
}

static kp_status append_hex(kp_buf *out, const char *prefix, unsigned v, int digits)
{
    static const char hex[] = "0123456789ABCDEF";
    kp_status st = kp_buf_append_str(out, prefix);
    for (int d = digits - 1; d >= 0 && st == KP_OK; d--)
        st = kp_buf_append_char(out, hex[(v >> (4 * d)) & 15]);
    return st;
}

/* `t` between double quotes, escaped as Code.Identifier.escape(t, ?") does:
 * \" \\ \#{, the letter escapes, \0, and \xHH for other control characters
 * (U+0080 to U+009F too); U+FEFF as \uFEFF; other UTF-8 as it is. */
static kp_status append_quoted(kp_buf *out, text t)
{
    kp_status st = kp_buf_append_char(out, '"');
    const unsigned char *s = (const unsigned char *)t.s;
    for (size_t i = 0; i < t.len && st == KP_OK; i++) {
        unsigned char c = s[i];
        const char *esc = strchr("\a\b\x7f\x1b\f\n\r\t\v", c);
        if (c == '"' || c == '\\' || (c == '#' && i + 1 < t.len && s[i + 1] == '{')) {
            if ((st = kp_buf_append_char(out, '\\')) == KP_OK)
                st = kp_buf_append_char(out, (char)c);
        } else if (c && esc) {
            char two[2] = {'\\', "abdefnrtv"[esc - "\a\b\x7f\x1b\f\n\r\t\v"]};
            st = kp_buf_append(out, two, 2);
        } else if (c == 0) {
            st = kp_buf_append_str(out, "\\0");
        } else if (c < 0x20) {
            st = append_hex(out, "\\x", c, 2);
        } else if (c == 0xC2 && i + 1 < t.len && s[i + 1] >= 0x80 && s[i + 1] <= 0x9F) {
            st = append_hex(out, "\\x", s[++i], 2);
        } else if (c == 0xEF && i + 2 < t.len && s[i + 1] == 0xBB && s[i + 2] == 0xBF) {
            st = kp_buf_append_str(out, "\\uFEFF");
            i += 2;
        } else {
            st = kp_buf_append_char(out, (char)c);
        }
    }
    return st == KP_OK ? kp_buf_append_char(out, '"') : st;
}

/* Macro.inspect_atom(:remote_call, name): what follows the dot. */
static kp_status append_remote_call(kp_buf *out, text name)
{
    if (is_identifier(name) || is_operator(name))
        return kp_buf_append(out, name.s, name.len);
    return append_quoted(out, name);
}

/* Macro.inspect_atom(:literal, module) for a module starting "Elixir.":
 * an alias loses the prefix (but Elixir.Elixir.Foo keeps it: without it,
 * Elixir.Foo would be read), anything else is a quoted atom. */
static kp_status append_module(kp_buf *out, text module)
{
    if (is_alias(module)) {
        if (module.len >= 14 && memcmp(module.s, "Elixir.Elixir.", 14) == 0)
            return kp_buf_append(out, module.s, module.len);
        return kp_buf_append(out, module.s + 7, module.len - 7);
    }
    kp_status st = kp_buf_append_char(out, ':');
    return st == KP_OK ? append_quoted(out, module) : st;
}

/* extract_anonymous_fun_parent/1: "-OUTER/ARITY-KIND-COUNT-" (OUTER may hold
 * '/', as a nested fun's "-f/1-fun-0-" does) gives OUTER and ARITY, any
 * text each; 0 for another name. */
static int anonymous_parent(text fun, text *outer, text *arity)
{
    if (fun.len == 0 || fun.s[0] != '-')
        return 0;
    text rest = {fun.s + 1, fun.len - 1};
    const char *slash = NULL;
    for (size_t i = rest.len; i > 0 && !slash; i--)
        if (rest.s[i - 1] == '/')
            slash = rest.s + i - 1;
    text trailing = slash ? (text){slash + 1, (size_t)(rest.s + rest.len - slash - 1)} : rest;
    size_t dashes = 0, first = 0;
    for (size_t i = 0; i < trailing.len; i++)
        if (trailing.s[i] == '-' && dashes++ == 0)
            first = i;
    if (dashes != 3 || trailing.s[trailing.len - 1] != '-')
        return 0;
    *outer = (text){rest.s, slash ? (size_t)(slash - rest.s) : 0};
    *arity = (text){trailing.s, first};
    return 1;
}

/* 1 when `s` keeps its text: Erlang's notation is asked for, or it does
 * not start "Elixir.". */
static int as_is(kp_names names, const char *s, size_t len)
{
    return names == KP_NAMES_ERLANG || len < 7 || memcmp(s, "Elixir.", 7) != 0;
}

kp_status kp_frame_name(kp_buf *out, const char *module, size_t module_len, const char *function,
                        size_t function_len, unsigned arity, kp_names names)
{
    text m = {module, module_len}, f = {function, function_len}, outer, outer_arity;
    kp_status st;
    if (as_is(names, module, module_len)) {
        if ((st = kp_buf_append(out, module, module_len)) != KP_OK ||
            (st = kp_buf_append_char(out, ':')) != KP_OK ||
            (st = kp_buf_append(out, function, function_len)) != KP_OK ||
            (st = kp_buf_append_char(out, '/')) != KP_OK)
            return st;
        return kp_buf_append_u64(out, arity);
    }
    if (anonymous_parent(f, &outer, &outer_arity)) {
        if ((st = kp_buf_append_str(out, "anonymous fn/")) != KP_OK ||
            (st = kp_buf_append_u64(out, arity)) != KP_OK ||
            (st = kp_buf_append_str(out, " in ")) != KP_OK ||
            (st = append_module(out, m)) != KP_OK || (st = kp_buf_append_char(out, '.')) != KP_OK ||
            (st = append_remote_call(out, outer)) != KP_OK ||
            (st = kp_buf_append_char(out, '/')) != KP_OK)
            return st;
        return kp_buf_append(out, outer_arity.s, outer_arity.len);
    }
    if ((st = append_module(out, m)) != KP_OK || (st = kp_buf_append_char(out, '.')) != KP_OK ||
        (st = append_remote_call(out, f)) != KP_OK || (st = kp_buf_append_char(out, '/')) != KP_OK)
        return st;
    return kp_buf_append_u64(out, arity);
}

kp_status kp_module_name(kp_buf *out, const char *module, size_t len, kp_names names)
{
    if (as_is(names, module, len))
        return kp_buf_append(out, module, len);
    return append_module(out, (text){module, len});
}

kp_status kp_label_name(kp_buf *out, int registered, const char *label, size_t len, kp_names names)
{
    if (registered)
        return kp_module_name(out, label, len, names);
    if (as_is(names, label, len))
        return kp_buf_append(out, label, len);
    /* "Module:function/arity": an Elixir module holds no ':' (an alias
     * cannot), a function name may hold ':' and '/', the arity is digits */
    const char *colon = memchr(label, ':', len);
    size_t after_slash = len; /* the index after the last '/' */
    while (after_slash > 0 && label[after_slash - 1] != '/')
        after_slash--;
    size_t fun_start = colon ? (size_t)(colon - label) + 1 : len;
    if (!colon || after_slash <= fun_start + 1 || after_slash == len || len - after_slash > 9)
        return kp_buf_append(out, label, len);
    unsigned arity = 0;
    for (size_t i = after_slash; i < len; i++) {
        if (label[i] < '0' || label[i] > '9')
            return kp_buf_append(out, label, len);
        arity = arity * 10u + (unsigned)(label[i] - '0');
    }
    return kp_frame_name(out, label, fun_start - 1, label + fun_start, after_slash - 1 - fun_start,
                         arity, names);
}

/* The length of `s[0..len)` without a trailing "/DIGITS" (1 or more digits),
 * or SIZE_MAX when it has none. */
static size_t before_arity(const char *s, size_t len)
{
    size_t i = len;
    while (i > 0 && s[i - 1] >= '0' && s[i - 1] <= '9')
        i--;
    return i < len && i > 0 && s[i - 1] == '/' ? i - 1 : SIZE_MAX;
}

/* The position after the first `word` in `s[from..len)`, or 0. */
static size_t after(const char *s, size_t from, size_t len, const char *word)
{
    size_t n = strlen(word);
    for (size_t i = from; i + n <= len; i++)
        if (memcmp(s + i, word, n) == 0)
            return i + n;
    return 0;
}

int kp_frame_name_module(const char *name, size_t len, size_t *start, size_t *module_len)
{
    size_t slash = before_arity(name, len);
    if (slash == SIZE_MAX) { /* perhaps a ":LINE" after the arity */
        size_t colon = len;
        while (colon > 0 && name[colon - 1] >= '0' && name[colon - 1] <= '9')
            colon--;
        if (colon == len || colon == 0 || name[colon - 1] != ':')
            return 0;
        slash = before_arity(name, colon - 1);
        if (slash == SIZE_MAX)
            return 0;
    }
    size_t p = 0;
    static const char *const anon[] = {"anonymous fn/", "anonymous%20fn/"};
    for (size_t k = 0; k < 2; k++) {
        size_t n = strlen(anon[k]), in = 0;
        if (len > n && memcmp(name, anon[k], n) == 0 &&
            ((in = after(name, n, slash, " in ")) || (in = after(name, n, slash, "%20in%20"))))
            p = in;
    }
    const char *colon = memchr(name + p, ':', slash - p);
    if (colon && colon > name + p) {
        *start = p;
        *module_len = (size_t)(colon - name) - p;
        return 1;
    }
    for (size_t i = slash; i > p; i--) {
        if (name[i - 1] == '.' && i - 1 > p) {
            *start = p;
            *module_len = i - 1 - p;
            return 1;
        }
    }
    return 0;
}
