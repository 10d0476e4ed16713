/* nabla/io.h */
#ifndef NABLA_IO_H
#define NABLA_IO_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif
