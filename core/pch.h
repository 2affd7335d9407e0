// Precompiled header for the heavy libtorch includes: the single biggest build-time cost on 2 cores.
#pragma once
#include <ATen/ATen.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include <map>
#include <memory>
#include <string>
#include <vector>
