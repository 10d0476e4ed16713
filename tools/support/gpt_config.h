/* gpt_config.h - nanoGPT's config files (config/train_shakespeare_char.py
 * and the like) without Python: one `key = value` a line, the value a Python
 * literal (an int or float, a quoted string, True or False), `#` comments
 * and blank lines. Anything else (expressions, imports, several statements
 * a line) is refused with the line's number: nothing is executed.
 * Internal to the tools; standalone (no nabla calls), so the fuzz target
 * tests/fuzz/fuzz_config.c compiles it in. */
#ifndef NB_GPT_CONFIG_H
#define NB_GPT_CONFIG_H

#include <stddef.h>

typedef enum gpt_config_kind { GPT_CFG_NUMBER, GPT_CFG_STRING, GPT_CFG_BOOL } gpt_config_kind;

/* Called for each assignment, in order: key an identifier, value the
 * literal's text (a string without its quotes and with its escapes undone; a
 * number as written, underscores removed; "True" or "False"). Returns 0 to
 * go on, or nonzero after writing a message into err[0..n-1]. */
typedef int (*gpt_config_fn)(void *user, const char *key, const char *value,
                             gpt_config_kind kind, int line, char *err, size_t n);

/* Parses text[0..len-1]. 0 when every line was fine and every callback
 * returned 0; otherwise the number of the offending line (1-based), with a
 * message in err (which names the line's problem, not the file). */
int gpt_config_parse(const char *text, size_t len, gpt_config_fn cb, void *user, char *err,
                     size_t n);

#endif
