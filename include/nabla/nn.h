/* nabla/nn.h */
#ifndef NABLA_NN_H
#define NABLA_NN_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif
