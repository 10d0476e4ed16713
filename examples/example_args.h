/* example_args.h - the command line of an example that takes no options, as
 * every nabla program treats it: --help (or -h) prints the usage on stdout
 * and exits 0; any other argument is a usage error (exit 2, message on
 * stderr). Not part of the library. */
#ifndef NB_EXAMPLE_ARGS_H
#define NB_EXAMPLE_ARGS_H

#include <stdio.h>
#include <string.h>

/* -1 to go on, else the exit status main should return. `usage` is the
 * whole text, ending in a newline. */
static inline int example_args(int argc, char **argv, const char *usage) {
    if (argc < 2) return -1;
    const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage, stdout);
        return 0;
    }
    fprintf(stderr, "%s: unexpected argument '%s' (it takes none; see --help)\n", name,
            argv[1][0] == '-' || argc == 2 ? argv[1] : argv[2]);
    return 2;
}

#endif
