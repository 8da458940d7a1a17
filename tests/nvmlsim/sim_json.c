/* Recursive-descent JSON parser (RFC 8259 minus non-ASCII \u escapes) for scenario files. */
#include "sim_json.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SJ_MAX_DEPTH 64

typedef struct {
    const char *p;
    int line, col;
    char *err;
    size_t errlen;
    int failed;
} sj_reader;

static void fail(sj_reader *r, const char *fmt, ...) {
    if (r->failed) return;
    r->failed = 1;
    int n = snprintf(r->err, r->errlen, "line %d, column %d: ", r->line, r->col);
    if (n < 0 || (size_t)n >= r->errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

static void advance(sj_reader *r) {
    if (*r->p == '\n') {
        r->line++;
        r->col = 1;
    } else {
        r->col++;
    }
    r->p++;
}

static void skip_space(sj_reader *r) {
    while (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r') advance(r);
}

static sj_node *new_node(sj_reader *r, sj_type type) {
    sj_node *n = calloc(1, sizeof *n);
    if (!n) {
        fail(r, "out of memory");
        return NULL;
    }
    n->type = type;
    n->line = r->line;
    n->col = r->col;
    return n;
}

static char *parse_string_raw(sj_reader *r) {
    /* r->p at the opening quote */
    advance(r);
    size_t cap = 32, len = 0;
    char *out = malloc(cap);
    if (!out) {
        fail(r, "out of memory");
        return NULL;
    }
    for (;;) {
        char c = *r->p;
        if (c == '\0') {
            fail(r, "unterminated string");
            free(out);
            return NULL;
        }
        if ((unsigned char)c < 0x20) {
            fail(r, "control character in string");
            free(out);
            return NULL;
        }
        if (c == '"') {
            advance(r);
            break;
        }
        if (c == '\\') {
            advance(r);
            char e = *r->p;
            switch (e) {
            case '"': c = '"'; break;
            case '\\': c = '\\'; break;
            case '/': c = '/'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u': {
                unsigned v = 0;
                for (int i = 1; i <= 4; i++) {
                    char h = r->p[i];
                    if (!isxdigit((unsigned char)h)) {
                        fail(r, "expected 4 hex digits after \\u");
                        free(out);
                        return NULL;
                    }
                    v = v * 16 + (unsigned)(isdigit((unsigned char)h) ? h - '0'
                                                                      : (tolower(h) - 'a' + 10));
                }
                if (v > 0x7f) {
                    fail(r, "only ASCII \\u escapes are supported");
                    free(out);
                    return NULL;
                }
                for (int i = 0; i < 4; i++) advance(r);
                c = (char)v;
                break;
            }
            default:
                fail(r, "invalid escape '\\%c'", e ? e : '0');
                free(out);
                return NULL;
            }
        }
        if (len + 2 > cap) {
            cap *= 2;
            char *grown = realloc(out, cap);
            if (!grown) {
                fail(r, "out of memory");
                free(out);
                return NULL;
            }
            out = grown;
        }
        out[len++] = c;
        advance(r);
    }
    out[len] = '\0';
    return out;
}

static sj_node *parse_value(sj_reader *r, int depth);

static sj_node *parse_number(sj_reader *r) {
    sj_node *n = new_node(r, SJ_NUM);
    if (!n) return NULL;
    const char *start = r->p;
    const char *q = r->p;
    if (*q == '-') q++;
    if (!isdigit((unsigned char)*q)) {
        fail(r, "expected a value");
        free(n);
        return NULL;
    }
    while (isdigit((unsigned char)*q)) q++;
    if (*q == '.') {
        q++;
        if (!isdigit((unsigned char)*q)) {
            fail(r, "expected digits after '.'");
            free(n);
            return NULL;
        }
        while (isdigit((unsigned char)*q)) q++;
    }
    if (*q == 'e' || *q == 'E') {
        q++;
        if (*q == '+' || *q == '-') q++;
        if (!isdigit((unsigned char)*q)) {
            fail(r, "expected digits in exponent");
            free(n);
            return NULL;
        }
        while (isdigit((unsigned char)*q)) q++;
    }
    n->num = strtod(start, NULL);
    n->wide = strtold(start, NULL);
    while (r->p < q) advance(r);
    return n;
}

static int match_word(sj_reader *r, const char *word) {
    size_t len = strlen(word);
    if (strncmp(r->p, word, len) != 0) return 0;
    if (isalnum((unsigned char)r->p[len])) return 0;
    for (size_t i = 0; i < len; i++) advance(r);
    return 1;
}

static sj_node *parse_container(sj_reader *r, int depth, int is_object) {
    sj_node *n = new_node(r, is_object ? SJ_OBJ : SJ_ARR);
    if (!n) return NULL;
    char close = is_object ? '}' : ']';
    advance(r);
    skip_space(r);
    sj_node **tail = &n->child;
    if (*r->p == close) {
        advance(r);
        return n;
    }
    for (;;) {
        char *key = NULL;
        int key_line = r->line, key_col = r->col;
        if (is_object) {
            if (*r->p != '"') {
                fail(r, "expected a quoted member name");
                break;
            }
            key = parse_string_raw(r);
            if (!key) break;
            skip_space(r);
            if (*r->p != ':') {
                fail(r, "expected ':' after member name \"%s\"", key);
                free(key);
                break;
            }
            advance(r);
            skip_space(r);
        }
        sj_node *item = parse_value(r, depth + 1);
        if (!item) {
            free(key);
            break;
        }
        item->key = key;
        if (key) { /* a member is reported where its name starts */
            item->line = key_line;
            item->col = key_col;
        }
        *tail = item;
        tail = &item->next;
        skip_space(r);
        if (*r->p == ',') {
            advance(r);
            skip_space(r);
            continue;
        }
        if (*r->p == close) {
            advance(r);
            return n;
        }
        fail(r, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
        break;
    }
    sj_free(n);
    return NULL;
}

static sj_node *parse_value(sj_reader *r, int depth) {
    if (depth > SJ_MAX_DEPTH) {
        fail(r, "nesting deeper than %d levels", SJ_MAX_DEPTH);
        return NULL;
    }
    skip_space(r);
    char c = *r->p;
    if (c == '{') return parse_container(r, depth, 1);
    if (c == '[') return parse_container(r, depth, 0);
    if (c == '"') {
        sj_node *n = new_node(r, SJ_STR);
        if (!n) return NULL;
        n->str = parse_string_raw(r);
        if (!n->str) {
            free(n);
            return NULL;
        }
        return n;
    }
    if (c == '-' || isdigit((unsigned char)c)) return parse_number(r);
    int line = r->line, col = r->col;
    if (match_word(r, "true") || match_word(r, "false")) {
        sj_node *n = new_node(r, SJ_BOOL);
        if (!n) return NULL;
        n->line = line;
        n->col = col;
        n->num = (c == 't');
        return n;
    }
    if (match_word(r, "null")) {
        sj_node *n = new_node(r, SJ_NULL);
        if (n) {
            n->line = line;
            n->col = col;
        }
        return n;
    }
    if (c == '\0') fail(r, "unexpected end of input, expected a value");
    else fail(r, "expected a value, found '%c'", c);
    return NULL;
}

sj_node *sj_parse(const char *text, char *err, size_t errlen) {
    sj_reader r = {text, 1, 1, err, errlen, 0};
    if (errlen) err[0] = '\0';
    sj_node *root = parse_value(&r, 0);
    if (!root) return NULL;
    skip_space(&r);
    if (*r.p != '\0') {
        fail(&r, "unexpected text after the top-level value");
        sj_free(root);
        return NULL;
    }
    return root;
}

void sj_free(sj_node *node) {
    while (node) {
        sj_node *next = node->next;
        sj_free(node->child);
        free(node->str);
        free(node->key);
        free(node);
        node = next;
    }
}

const char *sj_type_name(sj_type type) {
    switch (type) {
    case SJ_NULL: return "null";
    case SJ_BOOL: return "a boolean";
    case SJ_NUM: return "a number";
    case SJ_STR: return "a string";
    case SJ_ARR: return "an array";
    case SJ_OBJ: return "an object";
    }
    return "?";
}
