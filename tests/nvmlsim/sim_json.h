/* A small JSON reader for nvmlsim scenarios: parses text into a tree and keeps the line and
 * column of every value, so scenario errors can name the exact spot. */
#ifndef NVMLSIM_SIM_JSON_H
#define NVMLSIM_SIM_JSON_H

#include <stddef.h>

#define SJ_INTERNAL __attribute__((visibility("hidden")))

typedef enum { SJ_NULL, SJ_BOOL, SJ_NUM, SJ_STR, SJ_ARR, SJ_OBJ } sj_type;

typedef struct sj_node {
    sj_type type;
    int line, col;
    double num;             /* SJ_NUM; SJ_BOOL as 0/1 */
    long double wide;       /* SJ_NUM at long double precision: every bit of a 64-bit integer */
    char *str;              /* SJ_STR */
    char *key;              /* the member name when this node sits in an object */
    struct sj_node *child;  /* first element or member */
    struct sj_node *next;   /* next sibling */
} sj_node;

/* Returns NULL on a syntax error and writes "line L, column C: ..." into err. */
SJ_INTERNAL sj_node *sj_parse(const char *text, char *err, size_t errlen);
SJ_INTERNAL void sj_free(sj_node *node);
SJ_INTERNAL const char *sj_type_name(sj_type type);

#endif
