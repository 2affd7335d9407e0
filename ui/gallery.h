// A job's sample gallery: every rendering by step (images, or Wan videos that play muted and looping), each labelled
// with its step and prompt, and one prompt compared across steps side by side.
#pragma once

#include <string>

#include "baton/v1/job_service.pb.h"

namespace baton {

std::string Gallery(const v1::HistoryResponse& history);

}  // namespace baton
