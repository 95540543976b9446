/*
 * tessera.h: the umbrella header of Tessera, a tensor-expression scheduling framework.
 *
 * Define an operator as tensor expressions (tessera/te.h), schedule it with TVM-style
 * primitives (tessera/schedule.h), lower and build it for the CPU (tessera/backend.h), and
 * record tuning results (tessera/tuning_db.h). See README.md for a worked example.
 */
#ifndef TESSERA_H
#define TESSERA_H

#include "tessera/status.h"

#endif
