// fusor/fusor.hpp — the umbrella header: everything fusor has except matmul.
// Programs that care about compile time include the focused headers they use
// instead. Matrix products (fusor/kernels/matmul.hpp) are left out because they
// need cblas.h and cuBLASLt and the fusor::blas target that links them.
#pragma once

#include "fusor/config.hpp"
#include "fusor/core/buffer.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/layout.hpp"
#include "fusor/core/memory.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/core/strided_views.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/core/view.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/expr/derivative.hpp"
#include "fusor/expr/node.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/expr/substitute.hpp"
#include "fusor/kernels/attention.hpp"
#include "fusor/kernels/cross_entropy.hpp"
#include "fusor/kernels/layernorm.hpp"
#include "fusor/kernels/reduce.hpp"
#include "fusor/kernels/softmax.hpp"
