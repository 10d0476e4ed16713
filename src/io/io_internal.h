/* io/io_internal.h - what the file readers and writers share. */
#ifndef NB_IO_INTERNAL_H
#define NB_IO_INTERNAL_H

#include "core/core_internal.h"

/* ---- file errors (safetensors.c) -------------------------------------------- */
/* Records "<op>: <path>: <message>" on ctx (the message printf-formatted;
 * "(NULL path)" for a NULL path) and returns s. Used by safetensors and
 * checkpoint I/O. */
NB_HIDDEN nb_status nb_io_fail(nb_ctx *ctx, nb_status s, const char *op, const char *path,
                               const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* Failure injection for the file writer (tests/check_io_faults.c): every
 * fwrite, fflush, fsync, fclose and rename a save makes, and the directory
 * fsync after it, first calls nb_io_fault(). It counts the calls in
 * nb_io_fault_calls and, when nb_io_fault_at is n > 0, makes the n-th one
 * fail with EIO (true = fail). Both are 0 outside tests; not thread-safe. */
NB_HIDDEN extern long nb_io_fault_at, nb_io_fault_calls;
NB_HIDDEN bool nb_io_fault(void);

#endif
