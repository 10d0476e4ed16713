/* gpt_config.c - the `key = value` config-file parser (see gpt_config.h). */
#include <stdio.h>
#include <string.h>

#include "gpt_config.h"

#define KEY_MAX 64
#define VALUE_MAX 1024

static int is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static const char *skip_space(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p;
}

/* A Python string literal at p ('...' or "...", no prefixes, no triple
 * quotes); the text goes to out. Returns the end, or NULL. */
static const char *parse_string(const char *p, const char *end, char *out, const char **why) {
    char q = *p++;
    size_t n = 0;
    for (; p < end && *p != q; p++) {
        char c = *p;
        if (c == '\\') {
            if (++p == end) break;
            switch (*p) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case '\\': case '\'': case '"': c = *p; break;
            default: *why = "an escape other than \\n \\t \\\\ \\' \\\" in a string"; return NULL;
            }
        }
        if (n + 1 >= VALUE_MAX) { *why = "a string over 1023 bytes"; return NULL; }
        out[n++] = c;
    }
    if (p == end) { *why = "a string without its closing quote"; return NULL; }
    out[n] = '\0';
    return p + 1;
}

/* An int or float literal ([+-]digits[.digits][e[+-]digits], '_' between
 * digits). Returns the end, or NULL. */
static const char *parse_number(const char *p, const char *end, char *out) {
    size_t n = 0;
    int digits = 0;
    if (p < end && (*p == '+' || *p == '-')) out[n++] = *p++;
    out[n] = '\0';
    for (; p < end && n + 2 < VALUE_MAX; p++) {
        char c = *p, prev = n ? out[n - 1] : 0;
        if (is_digit(c)) digits++, out[n++] = c;
        else if (c == '_' && is_digit(prev) && p + 1 < end && is_digit(p[1])) continue;
        else if (c == '.' && !strpbrk(out, ".eE")) out[n++] = c;
        else if ((c == 'e' || c == 'E') && digits && !strpbrk(out, "eE")) {
            out[n++] = c;
            if (p + 1 < end && (p[1] == '+' || p[1] == '-')) out[n++] = *++p;
        } else break;
        out[n] = '\0';
    }
    out[n] = '\0';
    if (!digits || n == 0 || strchr("eE+-", out[n - 1])) return NULL;
    return p;
}

/* One line (no newline). Returns 0 or nonzero with err written. */
static int parse_line(const char *p, const char *end, int line, gpt_config_fn cb, void *user,
                      char *err, size_t n) {
    char key[KEY_MAX + 1], value[VALUE_MAX];
    const char *why = NULL;
    gpt_config_kind kind = GPT_CFG_NUMBER;
    p = skip_space(p, end);
    if (p == end || *p == '#') return 0;
    size_t k = 0;
    if (!is_alpha((unsigned char)*p)) { why = "not a `key = value` line"; goto bad; }
    while (p < end && (is_alpha((unsigned char)*p) || is_digit((unsigned char)*p))) {
        if (k == KEY_MAX) { why = "a key over 64 characters"; goto bad; }
        key[k++] = *p++;
    }
    key[k] = '\0';
    p = skip_space(p, end);
    if (p == end || *p != '=' || (p + 1 < end && p[1] == '=')) { why = "no '=' after the key"; goto bad; }
    p = skip_space(p + 1, end);
    if (p < end && (*p == '\'' || *p == '"')) {
        kind = GPT_CFG_STRING;
        p = parse_string(p, end, value, &why);
    } else if ((size_t)(end - p) >= 4 && !strncmp(p, "True", 4)) {
        kind = GPT_CFG_BOOL, strcpy(value, "True"), p += 4;
    } else if ((size_t)(end - p) >= 5 && !strncmp(p, "False", 5)) {
        kind = GPT_CFG_BOOL, strcpy(value, "False"), p += 5;
    } else {
        p = parse_number(p, end, value);
    }
    if (!p) { if (!why) why = "a value that is not a number, a quoted string, True or False"; goto bad; }
    if (p < end && (is_alpha((unsigned char)*p) || is_digit((unsigned char)*p))) {
        why = "a value that is not a number, a quoted string, True or False";
        goto bad;
    }
    p = skip_space(p, end);
    if (p < end && *p != '#') { why = "more after the value (only a # comment may follow)"; goto bad; }
    return cb(user, key, value, kind, line, err, n);
bad:
    snprintf(err, n, "%s", why);
    return 1;
}

int gpt_config_parse(const char *text, size_t len, gpt_config_fn cb, void *user, char *err,
                     size_t n) {
    const char *p = text, *end = text + len;
    for (int line = 1; p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *le = nl ? nl : end;
        if (le > p && le[-1] == '\r') le--;
        if (memchr(p, '\0', (size_t)(le - p))) {
            snprintf(err, n, "a NUL byte");
            return line;
        }
        if (parse_line(p, le, line, cb, user, err, n)) return line;
        p = nl ? nl + 1 : end;
    }
    return 0;
}
