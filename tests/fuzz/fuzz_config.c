/* fuzz_config.c - libFuzzer target for nabla-gpt's config-file parser
 * (tools/support/gpt_config.c, compiled in: the tools' code is not in the
 * library): any bytes either parse into `key = value` assignments or are
 * refused with a line number and a message; never a crash, never a read
 * past the input. Each assignment's key is an identifier and its value a
 * NUL-terminated string; the first refused line is within the input's
 * lines. Dictionary: tests/fuzz/config.dict. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/support/gpt_config.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int seen(void *user, const char *key, const char *value, gpt_config_kind kind, int line,
                char *err, size_t n) {
    (void)err, (void)n;
    int *lines = user;
    if (!is_alpha((unsigned char)key[0]) || strlen(key) > KEY_MAX || strlen(value) >= VALUE_MAX ||
        line < 1 || line > lines[0] + 1 || kind > GPT_CFG_BOOL)
        abort();
    if (kind == GPT_CFG_BOOL && strcmp(value, "True") && strcmp(value, "False")) abort();
    return line % 7 == 3 && key[0] == 'z'; /* sometimes a callback refuses */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size ? size : 1), err[256];
    if (!text) return 0;
    memcpy(text, data, size);
    int lines[1] = {0};
    for (size_t i = 0; i < size; i++) lines[0] += text[i] == '\n';
    err[0] = '\0';
    int bad = gpt_config_parse(text, size, seen, lines, err, sizeof err);
    if (bad < 0 || bad > lines[0] + 1 || (bad && !memchr(err, '\0', sizeof err))) abort();
    free(text);
    return 0;
}
