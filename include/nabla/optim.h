/* nabla/optim.h */
#ifndef NABLA_OPTIM_H
#define NABLA_OPTIM_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif
