/*
 * tessera.h: the umbrella header of Tessera, a tensor-expression scheduling framework.
 *
 * Define an operator as tensor expressions (tessera/te.h, or the operator library in
 * tessera/ops.h), schedule it with TVM-style primitives (tessera/schedule.h), lower and build
 * it for the CPU (tessera/target.h, tessera/backend.h), search schedules automatically
 * (tessera/autotune.h, tessera/tuner.h), keep the results in the tuning database
 * (tessera/tuning_db.h), generate standalone kernels (tessera/gen.h) and build for NVIDIA GPUs
 * (tessera/cuda.h). README.md has a worked example; every function is documented in its module
 * header.
 */
#ifndef TESSERA_H
#define TESSERA_H

#include "tessera/autotune.h"
#include "tessera/backend.h"
#include "tessera/cuda.h"
#include "tessera/gen.h"
#include "tessera/ops.h"
#include "tessera/schedule.h"
#include "tessera/status.h"
#include "tessera/target.h"
#include "tessera/te.h"
#include "tessera/tensorize.h"
#include "tessera/tuner.h"
#include "tessera/tuning_db.h"
#include "tessera/version.h"

#endif
