/* core/file.c - opening a file to read only when it is a regular file, for
 * the readers that take a path from the user (safetensors files and
 * checkpoints, config.json, the tokenizer's files, a page's script). */
#include "core/core_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

FILE *nb_fopen_regular(const char *path, const char **why) {
    /* O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever;
     * the type is asked of the descriptor, so nothing can swap the file in
     * between the check and the read. */
    int fd = path ? open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC) : -1;
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        *why = !path ? "no path" : strerror(errno);
        if (fd >= 0) close(fd);
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        *why = S_ISDIR(sb.st_mode)    ? "not a regular file (a directory)"
               : S_ISFIFO(sb.st_mode) ? "not a regular file (a FIFO)"
               : S_ISCHR(sb.st_mode)  ? "not a regular file (a character device)"
               : S_ISBLK(sb.st_mode)  ? "not a regular file (a block device)"
               : S_ISSOCK(sb.st_mode) ? "not a regular file (a socket)"
                                      : "not a regular file";
        close(fd);
        return NULL;
    }
    int flags = fcntl(fd, F_GETFL);
    FILE *f = flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0 ? NULL : fdopen(fd, "rb");
    if (!f) {
        *why = strerror(errno);
        close(fd);
    }
    return f;
}
